"""The pipeline's answer does not depend on the environment's BLAS thread count."""

import functools
import json
import textwrap

import numpy as np
import pytest
from helpers import run_python, subprocess_env

SCRIPT = textwrap.dedent(
    """
    import json, jax, numpy as np, kronvi
    from kronvi import pipeline
    X, y, mask = kronvi.load_demo()
    test = mask[:, 0].astype(bool)
    config = pipeline.DirectConfig(num_frequencies=150, gp=pipeline.GPOptions(restarts=1))  # the GP on all 277 rows
    model, _, _ = pipeline.fit_direct(jax.random.key(0), X[~test], y[~test], config)
    Phi = pipeline.fold_features(model, X[test])
    mean, var = kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    print(json.dumps(dict(lengthscales=np.asarray(model.hyper.lengthscales).tolist(),
                          mean=np.asarray(mean).tolist(), var=np.asarray(var).tolist())))
    """
)


def _run(threads, cache_dir):
    # BLAS threads are a CPU matter, so both run on the CPU. On an H100 two such processes gave lengthscales
    # 0.2% apart, for a reason the thread count does not touch (benchmarks/results/h100/2026-11-27/README.md).
    # The second process loads the first one's programs from a persistent cache (its 10 s are nearly all
    # compilation): the same executables, run with another thread count.
    env = subprocess_env(
        OPENBLAS_NUM_THREADS=str(threads),
        JAX_COMPILATION_CACHE_DIR=str(cache_dir),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
    )
    return json.loads(run_python("-c", SCRIPT, env=env).strip().splitlines()[-1])


def test_same_seed_same_answer_with_any_blas_thread_count(tmp_path):
    one, two = _run(1, tmp_path), _run(2, tmp_path)
    # the second process had the first one's programs to load, the fit's own among them; JAX does not cache
    # a program with host callbacks (the GP start: its likelihood is computed on the host), so each process
    # compiles that one
    cached = {p.name.rsplit("-", 2)[0] for p in tmp_path.iterdir()}
    assert {"jit_spectral_evidence_optimum", "jit_fit_cavi", "jit__predict_moments"} <= cached
    assert "jit__held_start" not in cached
    # The GP fit runs its LAPACK calls single-threaded whatever the environment says: the same optimum.
    assert one["lengthscales"] == two["lengthscales"]
    np.testing.assert_allclose(one["mean"], two["mean"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(one["var"], two["var"], rtol=1e-4)


def test_default_features_grow_with_the_training_rows_and_far_targets_keep_their_spread(monkeypatch):
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    assert pipeline.default_num_frequencies(19_999) == 1000
    assert pipeline.default_num_frequencies(19_999, "nystrom") == 1000
    assert pipeline.default_num_frequencies(20_000) == 3000  # Nyström landmarks: b = 6000
    assert pipeline.default_num_frequencies(20_000, "fourier") == 2000
    assert pipeline.default_num_frequencies(99_999) == 3000
    assert pipeline.default_num_frequencies(100_000) == 2000  # random Fourier features again
    assert pipeline.default_num_frequencies(100_000, "nystrom") == 3000
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    gp = (kronvi.inputs.GPHyperparameters(jnp.ones(2), jnp.asarray(1.0), jnp.asarray(0.1)), None)  # no GP fit
    rule = {"fourier": 11, "nystrom": 15}  # the rule's use, with the map it resolved for the rows
    monkeypatch.setattr(pipeline, "default_num_frequencies", lambda n, fmap=None: rule[fmap] if n == 40 else 0)
    fold = pipeline.prepare_fold(jax.random.key(0), X, y, pipeline.DirectConfig(), gp=gp)  # default recipe
    assert fold.features.frequencies.shape == (2, 11) and fold.stats.Phity.shape == (22,)
    monkeypatch.setattr(pipeline, "NYSTROM_MIN_ROWS", 30)  # 40 rows: Nyström features by default
    fold = pipeline.prepare_fold(jax.random.key(0), X, y, pipeline.DirectConfig(), gp=gp)
    assert fold.features.landmarks.shape == (30, 2) and fold.stats.Phity.shape == (30,)
    monkeypatch.setattr(pipeline, "NYSTROM_MIN_ROWS", 4_000)
    config = pipeline.DirectConfig(
        recipe=pipeline.Features(noise_cv=()), num_frequencies=7
    )  # the cheaper basis
    explicit = pipeline.prepare_fold(jax.random.key(0), X, y, config, gp=gp)
    assert explicit.features.frequencies.shape == (2, 7)  # an explicit count is kept
    # The targets' offset and centring are float64 on the host: in float32, y + 1e6 would be rounded to
    # steps of 1/16 before centring, and a float32 offset would move every prediction by up to 1/32.
    far = pipeline.prepare_fold(jax.random.key(0), X, y + 1e6, config, gp=gp)
    assert far.y_offset.dtype == np.float64
    assert float(far.y_offset) - float(explicit.y_offset) == pytest.approx(1e6, abs=1e-8)
    np.testing.assert_allclose(np.asarray(far.y), np.asarray(explicit.y), rtol=0, atol=1e-6)


def test_the_compact_recipe_predicts_the_eigen_fits_mean_and_bounded_variance():
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    X, y, mask = kronvi.load_demo()
    test = mask[:, 0].astype(bool)
    gp = pipeline.GPOptions(restarts=1, points=100)
    config = pipeline.DirectConfig(num_frequencies=200, gp=gp)  # b = 400 > n = 277
    compact = config._replace(recipe=pipeline.Compact(tol=0.1, vectors="full"))
    half = compact._replace(recipe=pipeline.Compact())  # the default: vectors="half"
    with jax.enable_x64(True):
        fold = pipeline.prepare_fold(jax.random.key(0), X[~test], y[~test], compact, dtype=jnp.float64)
        models = {c.basis: pipeline.fit_prepared(fold, c)[0] for c in (config, compact)}
        models["half"] = pipeline.fit_prepared(fold, half)[0]
        # The README's pattern, for both recipes
        out = {}
        for name, model in models.items():
            Phi = pipeline.fold_features(model, X[test])
            mean, var = kronvi.model.predict_regression(
                model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi
            )
            out[name] = np.asarray(mean), np.asarray(var)
        with pytest.raises(ValueError, match="columns"):  # inputs of another width: a named error
            pipeline.fold_features(models["compact"], X[test][:, :3])
    small = models["compact"]
    assert isinstance(small.basis, kronvi.model.CompactBasis)
    k = small.basis.vectors.shape[1]
    assert 0 < k < 277 and small.q_w.logits.shape == (1 + k + 8, 15)
    (m_e, v_e), (m_c, v_c) = out["eigen"], out["compact"]
    np.testing.assert_allclose(m_c, m_e, rtol=1e-8, atol=1e-8 * np.abs(m_e).max())
    ratio = v_c / v_e
    assert np.all(ratio >= 1 - 1e-8) and np.all(ratio <= 1.1 + 2e-6)  # the top band's bound (n < b)
    # float16 vectors: the mean stays exact (it is stored apart); the variance moves by float16's rounding
    assert models["half"].basis.vectors.dtype == np.float16 and small.basis.vectors.dtype == np.float64
    m_h, v_h = out["half"]
    np.testing.assert_allclose(m_h, m_e, rtol=1e-8, atol=1e-8 * np.abs(m_e).max())
    np.testing.assert_allclose(v_h, v_c, rtol=5e-3)
    assert not np.allclose(v_h, v_c, rtol=1e-9, atol=0)  # the rounding is there: the test can tell


def test_compact_config_errors():
    import jax

    from kronvi import pipeline

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    with pytest.raises(ValueError, match="compact_tol` must be >= 0"):
        pipeline.fit_direct(jax.random.key(0), X, y, pipeline.DirectConfig(recipe=pipeline.Compact(tol=-0.1)))
    with pytest.raises(ValueError, match="compact_vectors` must be 'half' or 'full'"):
        pipeline.fit_direct(
            jax.random.key(0), X, y, pipeline.DirectConfig(recipe=pipeline.Compact(vectors="int8"))
        )
    with pytest.raises(pipeline.RecipeOptionError, match="`noise_cv` is not an option of `Compact`"):
        pipeline.Compact(noise_cv=(3.0,))
    config = pipeline.DirectConfig(
        recipe=pipeline.Features(noise_cv=()), num_frequencies=4, gp=pipeline.GPOptions(restarts=1)
    )
    fold = pipeline.prepare_fold(jax.random.key(0), X, y, config)
    with pytest.raises(ValueError, match="another `basis`"):
        pipeline.fit_prepared(fold, config._replace(recipe=pipeline.Compact()))


@pytest.mark.parametrize("n", [30, 60])  # fewer rows than the 44 features (the dual), and more (the primal)
def test_eigen_recipe_fits_an_unshrunk_intercept_as_bayesian_ridge(n):
    """The eigenbasis recipe centres its features on the training rows: its posterior is exact Bayesian
    linear regression with an intercept outside the prior (BayesianRidge's model), at the fold's prior scale
    and noise, here computed densely in float64."""
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    rng = np.random.default_rng(1)
    X = rng.normal(size=(n + 20, 2))
    y = 3.0 + np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n + 20)
    config = pipeline.DirectConfig(num_frequencies=22)
    with jax.enable_x64(True):
        one = functools.partial(jnp.asarray, dtype=jnp.float64)
        gp = (kronvi.inputs.GPHyperparameters(one(np.ones(2)), one(1.0), one(0.01)), None)  # no GP fit
        fold = pipeline.prepare_fold(jax.random.key(0), X[:n], y[:n], config, dtype=jnp.float64, gp=gp)
        model = pipeline.fit_prepared(fold, config).model
        raw = model.features._replace(offset=None)
        F, Ft = (
            np.asarray(
                kronvi.inputs.rff_features(raw, kronvi.inputs.standardize(model.standardizer, jnp.asarray(A)))
            )
            for A in (X[:n], X[n:])
        )
        Phi = pipeline.fold_features(model, X[n:])
        mean, _ = kronvi.model.predict_regression(
            model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi
        )
        s2 = float(kronvi.model.noise_moments(model.q_noise, model.prior_noise)[2])
    np.testing.assert_allclose(model.features.offset, F.mean(axis=0), rtol=1e-12, atol=1e-14)
    # exact BLR with an intercept, at the fold's prior scale and (posterior mean) noise variance
    sw2 = float(fold.prior_scale) ** 2
    Fc, yc = F - F.mean(axis=0), y[:n] - y[:n].mean()
    A = Fc.T @ Fc / s2 + np.eye(F.shape[1]) / sw2
    w = np.linalg.solve(A, Fc.T @ yc / s2)
    ref = y[:n].mean() + (Ft - F.mean(axis=0)) @ w
    err = np.max(np.abs(np.asarray(mean) + model.y_offset - ref))
    assert err < 0.02 * y.std()  # 15 levels a weight, not a Gaussian: close, not equal
    # the same BLR without the intercept (the recipe before) is further away: the test can fail
    w0 = np.linalg.solve(F.T @ F / s2 + np.eye(F.shape[1]) / sw2, F.T @ yc / s2)
    assert err < 0.4 * np.max(np.abs(y[:n].mean() + Ft @ w0 - ref))


def test_one_fit_direct_validates_its_inputs_once():
    """A fit enters the checkers of `kronvi._base.checks` at most 22 times (the count of
    `benchmarks/bench_validation_calls.py`, without the plumbing that checks nothing): the key, the dtype,
    the inputs and the config at the door, the GP step's own checks, and only the grids' and statistics'
    data-dependent checks inside."""
    import pathlib
    import sys

    import jax

    import kronvi

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_validation_calls import PLUMBING, count_validator_calls

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=60)
    config = kronvi.DirectConfig(num_frequencies=20, gp=kronvi.GPOptions(restarts=1))
    total, by_name, _ = count_validator_calls(lambda: kronvi.fit_direct(jax.random.key(0), X, y, config))
    validators = total - sum(by_name.get(p, 0) for p in PLUMBING)
    assert 0 < validators <= 22, dict(by_name)
    assert by_name["check_training_rows"] == 1 and by_name["check_ints"] == 1
    assert by_name["check_key"] == 1 and by_name["check_working_dtype"] == 1


def test_a_recipe_carries_its_own_options_and_refuses_anothers():
    import importlib
    import pickle

    import kronvi
    from kronvi import pipeline

    for recipe, option, owner in [
        (kronvi.Eigen, "tol", "Compact"), (kronvi.Eigen, "noise_cv", "Features"),
        (kronvi.Compact, "cv_folds", "Features"), (kronvi.Features, "vectors", "Compact"),
        (kronvi.GPOptions, "width", "Eigen"),
    ]:  # fmt: skip
        with pytest.raises(kronvi.RecipeOptionError, match=f"^`{option}` is not an option of `{recipe.__name__}`: "
                           f"it is an option of .*`{owner}`"):  # fmt: skip
            recipe(**{option: 1})
    with pytest.raises(TypeError, match="`bogus` is not an option of `Compact`: `Compact` takes width"):
        kronvi.Compact(bogus=1)
    with pytest.raises(TypeError):
        kronvi.Eigen(4.0)  # keyword-only
    with pytest.raises(TypeError):
        kronvi.DirectConfig(kronvi.Eigen())  # keyword-only
    assert issubclass(kronvi.RecipeOptionError, TypeError) and issubclass(
        kronvi.RecipeOptionError, ValueError
    )
    with pytest.raises(dataclasses_frozen_error()):
        kronvi.Eigen().width = 3.0
    config = kronvi.DirectConfig(
        recipe=kronvi.Compact(tol=0.05, starts=["prior"]), gp=kronvi.GPOptions(points=500)
    )
    assert (config.basis, config.compact_tol, config.starts, config.gp_points) == (
        "compact",
        0.05,
        ("prior",),
        500,
    )
    assert config.noise_cv == () and kronvi.DirectConfig().basis == "eigen"
    # pickled by the module pickle finds (a doctest run may have imported kronvi.pipeline a second time)
    module = importlib.import_module("kronvi.pipeline")
    again = module.DirectConfig(recipe=module.Compact(tol=0.05), gp=module.GPOptions(points=500))
    assert pickle.loads(pickle.dumps(again)) == again
    assert list(config.as_flat_dict()) == list(pipeline._FLAT_ORDER) and config.as_flat_dict()["starts"] == [
        "prior"
    ]
    assert pipeline.resolve_config(None) == pipeline.DirectConfig()


def dataclasses_frozen_error():
    import dataclasses

    return dataclasses.FrozenInstanceError


def test_the_old_flat_fields_build_the_same_config_with_a_deprecation_warning():
    from kronvi import pipeline

    with pytest.warns(DeprecationWarning, match="basis, gp_points, noise_cv, width are deprecated"):
        old = pipeline.DirectConfig(basis="features", width=None, noise_cv=(), gp_points=500, levels=7)
    assert old == pipeline.DirectConfig(
        recipe=pipeline.Features(noise_cv=()), gp=pipeline.GPOptions(points=500), levels=7
    )
    with pytest.warns(DeprecationWarning):
        assert pipeline.DirectConfig(basis="eigen", starts=None, compact_tol=0.1) == pipeline.DirectConfig()
    with pytest.warns(DeprecationWarning):
        switched = pipeline.DirectConfig(recipe=pipeline.Eigen(width=4.0))._replace(
            basis="compact", compact_tol=0.2
        )
    assert switched.recipe == pipeline.Compact(width=4.0, tol=0.2)
    # an option of another recipe, set: a typed error naming the field and its recipe
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(
            pipeline.RecipeOptionError,
            match=r"`config.compact_tol` applies to basis='compact' only \(`kronvi.Compact`\)",
        ),
    ):
        pipeline.DirectConfig(basis="eigen", compact_tol=0.2)
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValueError, match="noise_cv` applies to basis='features'"),
    ):
        pipeline.DirectConfig(basis="compact", noise_cv=(3.0,))
    # the bound's old default (20) and today's ("auto") are inert on the paper's recipe, as older records hold them
    for inert in (20.0, "auto"):
        with pytest.warns(DeprecationWarning):
            assert pipeline.DirectConfig(basis="features", support_rms=inert).recipe == pipeline.Features()
    with pytest.warns(DeprecationWarning), pytest.raises(pipeline.RecipeOptionError, match="support_rms"):
        pipeline.DirectConfig(basis="features", support_rms=5.0)
    with pytest.raises(TypeError, match="`recipe` and the old fields"):
        pipeline.DirectConfig(recipe=pipeline.Eigen(), width=3.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        pipeline.DirectConfig(wdith=3.0)


def test_the_auto_kernel_is_the_best_evidence_of_the_features():
    """`kernel="auto"`: the fold prepared with every kernel (the same GP rows and feature key), the one whose
    features have the largest exact log evidence kept: the fit is the one of that kernel named outright (the
    same features and predictions), `DirectInfo.kernel` names it, and each evidence is the dense float64
    log density of the targets under the fold's Bayesian linear model. Where "auto" cannot choose (the
    features recipe, hyperparameters given, a stream) is a named error, and so is an unknown kernel."""
    import jax
    import scipy.stats

    from kronvi import pipeline
    from kronvi._inputs.features import KERNELS

    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(120, 2))
    y = np.abs(X[:, 0]) + 0.3 * np.sign(X[:, 1]) + 0.05 * rng.normal(size=120)  # kinks: rough, not smooth
    gp = pipeline.GPOptions(restarts=2, points=120)
    auto = pipeline.DirectConfig(num_frequencies=32, gp=gp, kernel="auto")
    fit = pipeline.fit_direct(jax.random.key(1), X[:100], y[:100], auto)
    evidence = {}
    for k in KERNELS:
        fold = pipeline.prepare_fold(jax.random.key(1), X[:100], y[:100], auto._replace(kernel=k))
        assert fold.kernel == k
        Phi = np.asarray(pipeline.fold_features(fold, X[:100]), np.float64)  # centred features
        yc = (y[:100] - y[:100].mean()) / fold.y_scale
        cov = float(fold.prior_scale) ** 2 * Phi @ Phi.T + float(fold.noise_variance) * np.eye(100)
        dense = scipy.stats.multivariate_normal(np.zeros(100), cov).logpdf(yc)
        np.testing.assert_allclose(fold.log_evidence, dense, rtol=1e-4)
        evidence[k] = fold.log_evidence
    assert fit.info.kernel == max(evidence, key=evidence.get), evidence
    assert len(set(np.round(list(evidence.values()), 3))) == 3  # three different feature maps
    named = pipeline.fit_direct(jax.random.key(1), X[:100], y[:100], auto._replace(kernel=fit.info.kernel))
    np.testing.assert_array_equal(named.model.features.frequencies, fit.model.features.frequencies)
    np.testing.assert_array_equal(named.model.predict(X[100:]).mean, fit.model.predict(X[100:]).mean)
    assert named.info.kernel == fit.info.kernel
    assert fit.timings.init_seconds > named.timings.init_seconds  # three GP steps' time
    assert auto.as_flat_dict()["kernel"] == "auto" and "kernel" not in pipeline.DirectConfig().as_flat_dict()
    with pytest.raises(ValueError, match="`config.kernel` must be one of"):
        pipeline.fit_direct(jax.random.key(1), X, y, auto._replace(kernel="matern12"))
    with pytest.raises(ValueError, match="basis='features'"):
        pipeline.fit_direct(jax.random.key(1), X, y, auto._replace(recipe=pipeline.Features()))
    with pytest.raises(ValueError, match="streamed fit"):
        pipeline.stream_init(jax.random.key(1), X, y, auto)
    fold = pipeline.prepare_fold(jax.random.key(1), X[:100], y[:100], auto._replace(kernel="rbf"))
    with pytest.raises(ValueError, match="`gp` gives hyperparameters without their kernel"):
        pipeline.prepare_fold(jax.random.key(1), X[:100], y[:100], auto, gp=(fold.hyper, fold.gp_info))


def test_the_evidence_optimum_is_restarted_from_the_edge_of_its_box():
    """A GP noise variance pinned far below the evidence's (1e-9 of it here) stops the Newton search on the edge
    of its box (each log variance within 12 of its start): `_evidence_optimum` starts it again from there and
    reaches the optimum of the same search started near it, concrete and traced; a start inside the box
    returns the first search's result as it is."""
    import jax
    import jax.numpy as jnp

    from kronvi import pipeline
    from kronvi.gaussian import spectral_evidence_optimum, spectral_log_evidence

    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(400, 12))
    y = Phi @ rng.normal(size=12) + 0.5 * rng.normal(size=400)
    with jax.enable_x64(True):
        lam, V = np.linalg.eigh(Phi.T @ Phi)
        c, yty = V.T @ Phi.T @ y, float(y @ y)
        near = spectral_evidence_optimum(lam, c, yty, 400.0, 1.0, 0.3)
        once = spectral_evidence_optimum(lam, c, yty, 400.0, 1.0, 2.5e-10)
        assert abs(np.log(float(once[1]) / 2.5e-10) - 12.0) < 1e-3  # stopped on the edge
        for fn in (pipeline._evidence_optimum, jax.jit(pipeline._evidence_optimum)):
            got = fn(jnp.asarray(lam), jnp.asarray(c), yty, 400.0, jnp.asarray(1.0), jnp.asarray(2.5e-10))
            np.testing.assert_allclose([float(v) for v in got], [float(v) for v in near], rtol=1e-6)
        evidence = [float(spectral_log_evidence(lam, c, yty, 400.0, *r)) for r in (once, near)]
        assert evidence[1] > evidence[0] + 100  # the edge was far from the optimum
        inside = pipeline._evidence_optimum(lam, c, yty, 400.0, jnp.asarray(1.0), jnp.asarray(0.3))
        # as it is (the concrete search compiles with other XLA options: equal to rounding)
        np.testing.assert_allclose([float(v) for v in inside], [float(v) for v in near], rtol=1e-12)


def test_the_gp_step_fits_more_rows_on_large_data(monkeypatch):
    """`GPOptions(points=None)` (the default) fits the GP step on `default_gp_points` of the training rows (1000,
    2000 from `LARGE_DATA_ROWS`), through `fit_direct` and the estimator; an explicit count is kept (the rule
    made small: 30 rows of 80, 20 of 50)."""
    import jax

    from kronvi import pipeline
    from kronvi.sklearn import DirectRegressor

    assert [pipeline.default_gp_points(n) for n in (500, 19_999, 20_000, 10**6)] == [1000, 1000, 2000, 2000]
    assert pipeline.DirectConfig().gp_points is None and DirectRegressor().gp_points is None
    monkeypatch.setattr(pipeline, "default_gp_points", lambda n: 30 if n >= 60 else 20)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80)
    config = pipeline.DirectConfig(num_frequencies=8, gp=pipeline.GPOptions(restarts=1))

    def rows(n, config=config):
        return int(pipeline.fit_direct(jax.random.key(0), X[:n], y[:n], config).info.gp.num_points)

    assert (rows(80), rows(50)) == (30, 20)
    assert rows(80, config._replace(gp=pipeline.GPOptions(points=25, restarts=1))) == 25
    est = DirectRegressor(n_frequencies=8, gp_restarts=1, random_state=0).fit(X, y)
    assert int(est.fit_info_.gp.num_points) == 30
    with pytest.raises(ValueError, match="gp_points"):
        DirectRegressor(gp_points=1).fit(X, y)


def test_the_gp_step_is_refined_warm_on_more_rows(monkeypatch):
    """`GPOptions.refine_points`: the search's optimum refined by one start on more rows (all of them here), with
    a likelihood on those rows at least the search's; by default between `NYSTROM_MIN_ROWS` and `LARGE_DATA_ROWS`
    with `points=None` only; 0 refines nothing; a failed refinement keeps the search's optimum; bad counts are
    named; a record of the config keeps it."""
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    assert [pipeline.default_gp_refine_points(n) for n in (3_999, 4_000, 19_999, 20_000)] == [0, 2000, 2000, 0]
    rows = pipeline._gp_refine_rows
    assert rows(pipeline.DirectConfig(), 5_000) == 2000 and rows(pipeline.DirectConfig(), 50_000) == 0
    assert rows(pipeline.DirectConfig(gp=pipeline.GPOptions(points=500)), 5_000) == 0  # an explicit search kept
    assert rows(pipeline.DirectConfig(gp=pipeline.GPOptions(points=500, refine_points=900)), 3_000) == 900
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=120)

    def prepare(**gp):
        config = pipeline.DirectConfig(num_frequencies=8, gp=pipeline.GPOptions(restarts=2, points=40, **gp))
        return pipeline.prepare_fold(jax.random.key(0), X, y, config)

    plain, refined = prepare(), prepare(refine_points=500)
    assert int(plain.gp_info.num_points) == 40 and int(refined.gp_info.num_points) == 120  # every row
    assert refined.gp_info.log_marginal_likelihoods.shape == (1,)  # one start
    assert int(refined.gp_info.screened.num_points) == 40  # the search, as the screening
    with jax.enable_x64(True):  # the likelihood on all rows (as the GP step saw them) rose from the search's optimum
        st = plain.standardizer
        Xs = (X - np.asarray(st.mean, np.float64)) / np.asarray(st.scale, np.float64)
        yc = (y - float(plain.y_offset)) / float(plain.y_scale)

        def lml(fold):
            hyper = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), fold.hyper)
            return float(kronvi.inputs.gp_log_marginal_likelihood(hyper, Xs, yc))

        assert lml(refined) >= lml(plain) - 1e-3
    for none in (0, 30, 40):  # nothing to refine on: no more rows than the search's
        assert int(prepare(refine_points=none).gp_info.num_points) == 40
    # a refinement that fails numerically, or ends degenerate where the search did not, keeps the search's
    # optimum; one whose noise ends at its bound is kept
    real = pipeline.fit_gp_hyperparameters

    def refinement(change):
        def fit(*args, init=None, **kw):
            out = real(*args, init=init, **kw)
            return out if init is None else change(out)

        return fit

    def raises(out):
        raise FloatingPointError("every start of fit_gp_hyperparameters failed")

    for change in (raises, lambda out: out._replace(info=out.info._replace(degenerate=jnp.asarray(True)))):
        monkeypatch.setattr(pipeline, "fit_gp_hyperparameters", refinement(change))
        kept = prepare(refine_points=500)
        assert int(kept.gp_info.num_points) == 40 and kept.gp_info.log_marginal_likelihoods.shape == (2,)
        np.testing.assert_array_equal(np.asarray(kept.hyper.lengthscales), np.asarray(plain.hyper.lengthscales))
    pinned = lambda out: out._replace(info=out.info._replace(noise_at_bound=jnp.ones((1,), bool)))  # noqa: E731
    monkeypatch.setattr(pipeline, "fit_gp_hyperparameters", refinement(pinned))
    kept = prepare(refine_points=500)
    assert int(kept.gp_info.num_points) == 120 and bool(kept.gp_info.noise_at_bound[0])
    np.testing.assert_array_equal(np.asarray(kept.hyper.lengthscales), np.asarray(refined.hyper.lengthscales))
    monkeypatch.undo()
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="gp_refine_points"):
            prepare(refine_points=bad)
    assert pipeline.DirectConfig(gp=pipeline.GPOptions(refine_points=500)).as_flat_dict()["gp_refine_points"] == 500
    assert "gp_refine_points" not in pipeline.DirectConfig().as_flat_dict()


@pytest.mark.parametrize("recipe", ["eigen", "features", "features-fixed-noise"])
def test_float64_mode_does_not_change_a_float32_fit(recipe):
    # The GP step answers in float64 from its float64 rows; under `jax.enable_x64` that answer stayed float64
    # and the float32 fit mixed dtypes: float64 frequencies drawn from other bits (another model for the same
    # key), and the features recipe's loops refused a float32 carry with float64 priors.
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=120)
    gp = pipeline.GPOptions(restarts=1, points=100)
    config = pipeline.DirectConfig(num_frequencies=10, gp=gp)
    if recipe != "eigen":
        config = config._replace(recipe=pipeline.Features(noise_cv=() if recipe.endswith("noise") else (2.0, 4.0)))
    out = {}
    for x64 in (False, True):
        with jax.enable_x64(x64):
            model = kronvi.fit_direct(jax.random.key(0), X, y, config).model
            assert model.features.frequencies.dtype == model.q_w.logits.dtype == jnp.float32
            out[x64] = np.asarray(model.predict(X[:7]).mean)
    # the same model up to float32 rounding of programs traced in either mode (frequencies drawn from other
    # bits move these means by more)
    np.testing.assert_allclose(out[True], out[False], rtol=0, atol=2e-3)
