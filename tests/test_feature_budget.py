"""`DirectConfig.feature_budget`: b grown by the exact evidence within a time budget, through every door."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import run_python, subprocess_env


def _data(n=300, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    y = np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1]) + 0.05 * rng.normal(size=n)
    return X, y


def _config(**kw):
    from kronvi import pipeline

    return pipeline.DirectConfig(gp=pipeline.GPOptions(restarts=1), **kw)


def test_every_step_is_the_fold_prepared_at_its_b_and_the_kept_one_has_the_largest_evidence():
    import jax

    from kronvi import pipeline

    X, y = _data()
    grown = pipeline.prepare_fold(
        jax.random.key(0), X, y, _config(num_frequencies=10, feature_budget=1e6, feature_gain=0.01)
    )
    steps = grown.feature_steps
    bs = [s.num_features for s in steps]
    assert bs[0] == 20 and bs == [20 * 2**k for k in range(len(bs))]
    assert len(steps) >= 3  # a sine of this frequency needs more than 20 features: the test can fail
    gp = (grown.hyper, grown.gp_info)
    for step in steps:  # each step is the fixed-b preparation with the same key and GP step
        fixed = pipeline.prepare_fold(jax.random.key(0), X, y, _config(num_frequencies=step.num_features // 2), gp=gp)
        np.testing.assert_allclose(step.log_evidence, fixed.log_evidence, rtol=1e-12)
        assert step.seconds > 0
    evidence = [s.log_evidence for s in steps]
    assert grown.log_evidence == max(evidence)
    assert grown.stats.Phity.shape[0] == bs[int(np.argmax(evidence))]
    # it grew while each doubling added at least feature_gain nats per row, and stopped at the first that did not
    rises = np.diff(evidence) / X.shape[0]
    assert np.all(rises[:-1] >= 0.01) and rises[-1] < 0.01


def test_the_grown_model_is_the_fixed_b_model_and_info_lists_the_steps():
    import jax

    from kronvi import pipeline

    X, y = _data()
    fit = pipeline.fit_direct(jax.random.key(1), X[:250], y[:250], _config(num_frequencies=10, feature_budget=1e6))
    steps = fit.info.feature_steps
    b = int(fit.model.prior_w.values.shape[0])
    assert b in [s.num_features for s in steps] and len(steps) >= 2
    fixed = pipeline.fit_direct(jax.random.key(1), X[:250], y[:250], _config(num_frequencies=b // 2))
    np.testing.assert_allclose(
        np.asarray(fit.model.predict(X[250:]).mean), np.asarray(fixed.model.predict(X[250:]).mean), rtol=1e-5, atol=1e-5
    )
    assert fixed.info.feature_steps == ()


def test_the_time_budget_the_gain_and_the_memory_stop_the_growth(monkeypatch):
    import jax

    from kronvi import pipeline
    from kronvi._base.memory import regression_fit_bytes

    X, y = _data()
    key = jax.random.key(0)
    tiny = pipeline.prepare_fold(key, X, y, _config(num_frequencies=10, feature_budget=1e-9))
    assert [s.num_features for s in tiny.feature_steps] == [20]  # the next doubling cannot fit the budget
    huge_gain = pipeline.prepare_fold(key, X, y, _config(num_frequencies=10, feature_budget=1e6, feature_gain=1e3))
    assert [s.num_features for s in huge_gain.feature_steps] == [20, 40]
    # memory for b = 20 but not for b = 40: the growth stops where a fixed b = 40 would be refused
    monkeypatch.setenv("KRONVI_MEMORY_LIMIT", str(regression_fit_bytes(300, 20) + 1))
    capped = pipeline.prepare_fold(key, X, y, _config(num_frequencies=10, feature_budget=1e6, feature_gain=0.0))
    assert [s.num_features for s in capped.feature_steps] == [20]
    with pytest.raises(MemoryError, match="config.num_frequencies"):
        pipeline.prepare_fold(key, X, y, _config(num_frequencies=20))


def test_nystrom_features_grow_to_every_row_and_auto_chooses_at_the_first_b():
    import jax

    from kronvi import pipeline

    X, y = _data(n=100)
    fold = pipeline.prepare_fold(
        jax.random.key(0), X, y, _config(num_frequencies=15, feature_map="nystrom", feature_budget=1e6, feature_gain=0.0)
    )
    bs = [s.num_features for s in fold.feature_steps]
    assert bs[-1] == 100 and bs == sorted(bs) and len(bs) == 3  # 30, 60, then every row
    auto = pipeline.fit_direct(
        jax.random.key(0), X, y, _config(num_frequencies=15, feature_map="auto", feature_budget=1e6)
    )
    first = {
        m: pipeline.prepare_fold(jax.random.key(0), X, y, _config(num_frequencies=15, feature_map=m)).log_evidence
        for m in ("fourier", "nystrom")
    }
    assert auto.info.feature_map == max(first, key=first.get)
    assert auto.info.feature_steps[0].log_evidence == max(first.values())


def test_float64_growth_and_bad_settings_are_named():
    import jax

    from kronvi import pipeline

    X, y = _data(n=120)
    with jax.enable_x64(True):
        fold = pipeline.prepare_fold(
            jax.random.key(0), X, y, _config(num_frequencies=10, feature_budget=1e6), dtype=np.float64
        )
    assert fold.stats.PhitPhi.dtype == np.float64 and len(fold.feature_steps) >= 2
    for value in (0, -1.0, float("nan"), float("inf"), "10", True):
        with pytest.raises(ValueError, match="config.feature_budget"):
            pipeline.fit_direct(jax.random.key(0), X, y, _config(feature_budget=value))
    for value in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="config.feature_gain"):
            pipeline.fit_direct(jax.random.key(0), X, y, _config(feature_budget=10.0, feature_gain=value))
    with pytest.raises(ValueError, match="config.feature_budget"):
        pipeline.fit_direct(jax.random.key(0), X, y, _config(recipe=pipeline.Features(), feature_budget=10.0))
    with pytest.raises(ValueError, match="config.feature_budget"):
        pipeline.stream_init(jax.random.key(0), X, y, _config(feature_budget=10.0))
    with pytest.raises(ValueError, match="feature_budget"):
        jax.jit(lambda a, b: pipeline.fit_direct(jax.random.key(0), a, b, _config(feature_budget=10.0)).model)(X, y)
    flat = _config(feature_budget=30.0, feature_gain=0.01).as_flat_dict()
    assert flat["feature_budget"] == 30.0 and flat["feature_gain"] == 0.01
    assert "feature_budget" not in _config().as_flat_dict() and "feature_gain" not in _config().as_flat_dict()


def test_the_estimator_and_the_command_line_grow_b(tmp_path):
    import jax

    import kronvi
    from kronvi import pipeline
    from kronvi.sklearn import DirectRegressor

    X, y = _data()
    config = pipeline.DirectConfig(num_frequencies=10, feature_budget=1e6)
    fit = pipeline.fit_direct(jax.random.key(4), X[:250], y[:250], config)
    est = DirectRegressor(n_frequencies=10, feature_budget=1e6, random_state=4).fit(X[:250], y[:250])
    assert [s[:2] for s in est.fit_info_.feature_steps] == [s[:2] for s in fit.info.feature_steps]
    np.testing.assert_allclose(est.predict(X[250:]), np.asarray(fit.model.predict(X[250:]).mean), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="feature_budget"):
        DirectRegressor(feature_budget=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="feature_budget"):
        DirectRegressor(feature_budget=10.0).partial_fit(X, y)
    with pytest.raises(ValueError, match="feature_gain"):
        DirectRegressor(feature_budget=10.0, feature_gain=-1.0).fit(X, y)

    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.column_stack([X, y]), delimiter=",", header="a,b,y", comments="")
    out = tmp_path / "fit.json"
    result = run_python(
        "-m", "kronvi", "fit", str(csv), "--feature-budget", "1000", "--num-features", "20", "--max-folds", "1",
        "--folds", "5", "--json", str(out), env=subprocess_env(),
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["settings"]["feature_budget"] == 1000.0
    assert record["settings"]["config"]["feature_budget"] == 1000.0
    (fold,) = record["folds"]
    assert fold["num_features"] >= 40  # grown from 20
    assert "b growing within 1000 s" in result
    assert kronvi.cv.FoldResult._fields[-1] == "num_features"
    bad = subprocess.run(
        [sys.executable, "-m", "kronvi", "fit", str(csv), "--feature-budget", "10", "--basis", "features"],
        env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0 and "--feature-budget" in bad.stderr and "--basis features" in bad.stderr


def test_the_next_b_doubles_within_the_budget_and_fills_what_is_left():
    from kronvi.pipeline import FeatureStep, _next_num_frequencies

    def steps(*pairs):
        return [FeatureStep(b, 0.0, s) for b, s in pairs]

    # after the first b, a doubling is predicted at 4x its seconds (the O(n b^2) statistics)
    assert _next_num_frequencies(500, steps((1000, 2.0)), left=8.0) == 1000  # 8 <= 8
    # 4 left: the largest growth whose predicted seconds (2 g^2) fit, sqrt(2), down to 8 frequencies
    assert _next_num_frequencies(500, steps((1000, 2.0)), left=4.0) == 704
    assert _next_num_frequencies(500, steps((1000, 2.0)), left=2.5) is None  # growth 1.12 < 1.25: stop
    assert _next_num_frequencies(500, steps((1000, 2.0)), left=-1.0) is None  # over budget already
    # the power the last two steps measured: 8x a doubling (eigen-bound), 128 s > the 122 left: growth 1.97
    assert _next_num_frequencies(1000, steps((1000, 2.0), (2000, 16.0)), left=132.0) == 2000
    assert _next_num_frequencies(1000, steps((1000, 2.0), (2000, 16.0)), left=122.0) == 1968
    # clipped at 3 and at 1
    assert _next_num_frequencies(1000, steps((1000, 1.0), (2000, 100.0)), left=800.0) == 2000
    assert _next_num_frequencies(1000, steps((1000, 10.0), (2000, 10.0)), left=20.0) == 2000


def test_after_an_auto_choice_the_next_b_is_predicted_from_the_kept_map_alone(monkeypatch):
    """With `feature_map="auto"` the first step's seconds are both maps' preparations (they count against the
    budget); the next step's seconds are predicted from the kept map's own, with what is left of the budget."""
    import jax

    from kronvi import pipeline

    X, y = _data(n=200)
    seen = []

    def spy(m, steps, left):
        seen.append((m, [s.seconds for s in steps], left))
        return None  # stop after the first b

    monkeypatch.setattr(pipeline, "_next_num_frequencies", spy)
    config = _config(num_frequencies=10, feature_map="auto", feature_budget=100.0)
    fold = pipeline.prepare_fold(jax.random.key(0), X, y, config)
    ((m, own, left),) = seen
    (step,) = fold.feature_steps
    assert m == 10 and own[0] < step.seconds  # both maps counted in the step, one in the prediction
    np.testing.assert_allclose(left, 100.0 - step.seconds)


def test_a_nystrom_step_to_every_row_is_sized_by_the_rows_for_memory(monkeypatch):
    from kronvi import pipeline
    from kronvi._base.memory import regression_fit_bytes

    # memory for b = 300 (every row) but not for b = 400: Nyström features of 2 x 200 frequencies are 300
    monkeypatch.setenv("KRONVI_MEMORY_LIMIT", str(regression_fit_bytes(300, 300) + 1))
    pipeline.check_fit_memory(300, pipeline.DirectConfig(num_frequencies=200, feature_map="nystrom"))
    with pytest.raises(MemoryError, match="b = 400"):
        pipeline.check_fit_memory(300, pipeline.DirectConfig(num_frequencies=200))
