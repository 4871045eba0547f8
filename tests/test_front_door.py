"""The front door: `kronvi.fit_direct` -> `FittedDirect.predict` / `log_density`, the same model from every door
(the function, the scikit-learn estimator, `kronvi fit --refit --save`), and prediction under `jit` and `vmap`."""

import json
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_python, subprocess_env

import kronvi
from kronvi import cli
from kronvi.cv import run_fold
from kronvi.pipeline import fold_features

SMALL = kronvi.DirectConfig(num_frequencies=20)


def _data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 10.0, 0.1])[:d] + 5.0
    y = np.sin(X[:, 0]) + 0.05 * X[:, 1] + 0.1 * rng.normal(size=n) + 100.0
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = _data()
    return X, y, kronvi.fit_direct(jax.random.key(0), X, y, SMALL._replace(lengthscale=2.0)).model


def test_every_door_fits_the_same_model(tmp_path, capsys):
    """`fit_direct(jax.random.key(k), X, y)`, `DirectRegressor(random_state=k)` and `kronvi fit --seed k --refit
    --save` (loaded in a fresh process) predict the same, to float rounding."""
    pytest.importorskip("sklearn")
    from kronvi.sklearn import DirectRegressor

    X, y = _data()
    Xt = X[:7] + 0.25
    ref = kronvi.fit_direct(jax.random.key(3), X, y, SMALL).model.predict(Xt)
    est = DirectRegressor(n_frequencies=20, random_state=3).fit(X, y)
    mean, std = est.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, ref.mean, rtol=1e-12)
    np.testing.assert_allclose(std**2, ref.variance, rtol=1e-12)

    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.column_stack([X, y]), delimiter=",")  # %.18e: the float64 values exactly
    saved = tmp_path / "m.npz"
    args = ["fit", str(csv), "--num-features", "40", "--seed", "3", "--max-folds", "1", "--refit"]
    assert cli.main([*args, "--save", str(saved), "--no-density"]) == 0
    out, err = capsys.readouterr()
    assert "NLPD not computed (--no-density)" in out and "mean NLPD" not in out  # no "nan +- nan"
    assert "fold refit" not in err and f"refit on all {len(y)} rows" in err
    code = textwrap.dedent(
        f"""
        import json, numpy as np, kronvi
        pred = kronvi.load_model({str(saved)!r}).predict(np.array({Xt.tolist()!r}))
        print(json.dumps([pred.mean.tolist(), pred.variance.tolist()]))
        """
    )
    mean, var = json.loads(run_python("-c", code, env=subprocess_env()).strip().splitlines()[-1])
    np.testing.assert_allclose(mean, ref.mean, rtol=1e-12)
    np.testing.assert_allclose(var, ref.variance, rtol=1e-12)


def test_the_classifier_door_is_fit_classifier_with_the_same_key():
    """`DirectClassifier(random_state=k)` fits what its functional counterpart
    `kronvi.fit_classifier(jax.random.key(k), X, labels)` fits, with default settings."""
    pytest.importorskip("sklearn")
    from kronvi.sklearn import DirectClassifier

    X, y = _data(160)
    labels = (y > np.median(y)).astype(int)
    clf = DirectClassifier(random_state=3).fit(X, labels)
    model = kronvi.fit_classifier(jax.random.key(3), X, labels).model
    np.testing.assert_allclose(
        clf.predict_proba(X[:9] + 0.25)[:, 1], model.predict_proba(X[:9] + 0.25), rtol=1e-6
    )


def test_predict_is_the_dense_formula_in_the_targets_units(fitted):
    X, y, model = fitted
    Xt = X[:9] * 1.1
    pred = model.predict(Xt)
    assert isinstance(pred, kronvi.Prediction) and pred.mean.dtype == np.float64
    Phi = np.asarray(fold_features(model, Xt), np.float64)
    probs = np.asarray(model.q_w.probs, np.float64)
    values = np.asarray(model.prior_w.values, np.float64)
    e_w = np.sum(probs * values, axis=1)
    var_w = np.sum(probs * values**2, axis=1) - e_w**2
    e_s = np.sum(
        np.asarray(model.q_noise.probs, np.float64) * np.asarray(model.prior_noise.values, np.float64)
    )
    # coordinates beyond the training rows' reach count up to their bound (tests/test_off_support.py)
    bound = np.asarray(model.support.bound, np.float64)
    clipped = np.clip(Phi, -bound, bound)
    np.testing.assert_allclose(pred.mean, model.y_offset + model.y_scale * clipped @ e_w, rtol=1e-6)
    np.testing.assert_allclose(pred.variance, model.y_scale**2 * (Phi**2 @ var_w + e_s), rtol=1e-4)
    assert np.sqrt(np.mean((model.predict(X).mean - y) ** 2)) < 0.2  # it learned the data


def test_predict_runs_under_jit_and_vmap_and_in_chunks(fitted):
    X, _, model = fitted
    pred = kronvi.predict(model, X)
    for out in (
        jax.jit(kronvi.predict)(model, X),
        jax.jit(lambda m, x: kronvi.predict(m, x, chunk_size=7))(model, X),
        kronvi.predict(model, X, chunk_size=7),
    ):
        np.testing.assert_allclose(np.asarray(out.mean), pred.mean, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(out.variance), pred.variance, rtol=1e-4)
    batched = jax.vmap(kronvi.predict, in_axes=(None, 0))(model, X.reshape(4, 30, 3))
    np.testing.assert_allclose(np.asarray(batched.mean).ravel(), pred.mean, rtol=1e-5)
    twice = jax.tree.map(lambda a: np.stack([a, a]), model)  # a stack of models, as vmap over folds gives
    both = jax.vmap(kronvi.predict, in_axes=(0, None))(twice, X)
    np.testing.assert_allclose(np.asarray(both.mean[1]), pred.mean, rtol=1e-5)


def test_log_density_is_the_fit_units_density_less_the_log_unit(fitted):
    X, y, model = fitted
    ld = model.log_density(X[:20], y[:20])
    Phi = fold_features(model, X[:20])
    yc = jnp.asarray((y[:20] - model.y_offset) / model.y_scale, Phi.dtype)
    ref, _ = kronvi.model.predictive_log_density(
        model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, yc
    )
    np.testing.assert_allclose(ld, np.asarray(ref) - np.log(model.y_scale), rtol=1e-6)
    traced = jax.jit(kronvi.log_density)(model, X[:20], y[:20])
    np.testing.assert_allclose(np.asarray(traced), ld, rtol=1e-3)
    # a Gaussian check: the density integrates the predictive moments' scale
    pred = model.predict(X[:1])
    grid = pred.mean[0] + np.sqrt(pred.variance[0]) * np.linspace(-8, 8, 401)
    dens = np.exp(model.log_density(np.repeat(X[:1], grid.size, axis=0), grid))
    assert np.trapezoid(dens, grid) == pytest.approx(1.0, abs=2e-3)


def test_targets_in_other_units_give_the_same_model_in_those_units():
    X, y = _data()
    config = SMALL._replace(lengthscale=2.0)
    base = kronvi.fit_direct(jax.random.key(0), X, y, config).model
    for c in (2.0**-40, 1e-12, 1e12, 1e30):
        model = kronvi.fit_direct(jax.random.key(0), X, c * y, config).model
        pred, ref = model.predict(X[:9]), base.predict(X[:9])
        np.testing.assert_allclose(pred.mean / c, ref.mean, rtol=1e-6)
        np.testing.assert_allclose(pred.variance / c**2, ref.variance, rtol=1e-3)


def test_bad_inputs_to_predict_are_named(fitted):
    X, y, model = fitted
    with pytest.raises(ValueError, match=r"^`X` must have shape \(num_points, 3\): 3 columns"):
        model.predict(X[:, :2])
    with pytest.raises(ValueError, match=r"^`X` contains 1 NaN"):
        model.predict(np.where(np.arange(3) == 1, np.nan, X[:1]))
    with pytest.raises(ValueError, match="^`X` must hold real numbers"):
        model.predict(X.astype(complex))
    with pytest.raises(ValueError, match=r"^`y` must have shape \(5,\)"):
        model.log_density(X[:5], y[:4])
    with pytest.raises(TypeError, match="^`model` must be a FittedDirect"):
        kronvi.predict(model._asdict(), X)


def test_bad_shapes_are_named_while_tracing(fitted):
    X, y, model = fitted
    with pytest.raises(ValueError, match=r"^`X` must have shape \(num_points, 3\): 3 columns"):
        jax.jit(kronvi.predict)(model, jnp.asarray(X[:4, :1]))  # one column: no longer broadcast
    with pytest.raises(ValueError, match=r"^`X` must have shape \(num_points, 3\): 3 columns"):
        jax.vmap(kronvi.predict, in_axes=(None, 0))(model, jnp.asarray(X[:4, None, :1]))
    with pytest.raises(ValueError, match=r"^`X` must have shape \(num_points, 3\)"):
        jax.jit(kronvi.predict)(model, jnp.asarray(X[0]))
    with pytest.raises(ValueError, match=r"^`y` must have shape \(3,\) as the rows of `X`"):
        jax.jit(kronvi.log_density)(model, jnp.asarray(X[:3]), jnp.asarray(y[:1]))
    with pytest.raises(ValueError, match=r"^`y` must have shape \(3,\)"):
        jax.jit(kronvi.log_density)(model, jnp.asarray(X[:3]), jnp.asarray(y[:3, None]))


def test_fit_direct_runs_under_jit_and_vmap():
    X, y = _data(80)
    config = SMALL._replace(lengthscale=2.0)
    eager = kronvi.fit_direct(jax.random.key(0), X, y, config).model
    fit = jax.jit(lambda a, b: kronvi.fit_direct(jax.random.key(0), a, b, config).model)
    traced = fit(jnp.asarray(X), jnp.asarray(y))
    # in the working dtype inside the trace (the eager fit standardizes in float64): float32 rounding apart
    np.testing.assert_allclose(traced.predict(X[:9]).mean, eager.predict(X[:9]).mean, rtol=1e-5)
    folds = (
        jnp.stack([jnp.asarray(X[:60]), jnp.asarray(X[20:])]),
        jnp.stack([jnp.asarray(y[:60]), jnp.asarray(y[20:])]),
    )
    both = jax.vmap(lambda a, b: kronvi.fit_direct(jax.random.key(0), a, b, config).model)(*folds)
    for i in range(2):
        one = kronvi.fit_direct(
            jax.random.key(0), np.asarray(folds[0][i]), np.asarray(folds[1][i]), config
        ).model
        mine = jax.tree.map(lambda a, i=i: a[i], both)
        np.testing.assert_allclose(mine.predict(X[:9]).mean, one.predict(X[:9]).mean, rtol=1e-5)
    with pytest.raises(ValueError, match="config.basis='compact'.*outside `jit`"):
        jax.jit(
            lambda a, b: (
                kronvi.fit_direct(jax.random.key(0), a, b, config._replace(recipe=kronvi.Compact())).model
            )
        )(jnp.asarray(X), jnp.asarray(y))


def test_fit_direct_names_its_key_and_dtype():
    X, y = _data(40)
    with pytest.raises(TypeError, match=r"^`key` must be a jax.random key \(jax.random.key\(seed\)\), got 0$"):
        kronvi.fit_direct(0, X, y, SMALL)
    with pytest.raises(ValueError, match=r"^`dtype` must be float32 or float64, got int32"):
        kronvi.fit_direct(jax.random.key(0), X, y, SMALL, dtype=jnp.int32)
    with jax.enable_x64(False), pytest.raises(ValueError, match=r"^`dtype` float64 needs JAX's x64 mode"):
        kronvi.fit_direct(jax.random.key(0), X, y, SMALL, dtype=jnp.float64)
    with pytest.raises(TypeError, match="^`key` must be a jax.random key"):
        kronvi.pipeline.stream_init(jax.random.key_data(jax.random.key(0))[None], X, y, SMALL)
    with pytest.raises(ValueError, match=r"^`key` must be a single jax.random key, got shape \(2,\)"):
        kronvi.fit_direct(jax.random.split(jax.random.key(0)), X, y, SMALL)


def test_sparsity_is_the_fraction_of_stored_zero_weights():
    X, y = _data()
    for basis in ("eigen", "compact"):
        model = kronvi.fit_direct(
            jax.random.key(0), X, y, SMALL._replace(recipe=kronvi.pipeline.RECIPES[basis](), lengthscale=2.0)
        ).model
        assert model.sparsity == 0.0  # dense weights, whatever q puts on the level nearest 0
    config = SMALL._replace(recipe=kronvi.Features(noise_cv=()), lengthscale=2.0)
    model = kronvi.fit_direct(jax.random.key(0), X, y, config).model
    assert model.sparsity == pytest.approx(float(kronvi.model.expected_sparsity(model.q_w, model.prior_w)))
    assert 0.0 < model.sparsity < 1.0


def test_run_fold_samples_the_density_and_fit_direct_reports_progress():
    X, y = _data(200)
    seen = []
    config = SMALL._replace(lengthscale=2.0)
    run = run_fold(
        jax.random.key(0), X[:150], y[:150], X[150:], y[150:], config, density_rows=10,
        progress=lambda step, total, metrics: seen.append((step, total, metrics["stage"])),
    )  # fmt: skip
    assert run.result.nlpd_rows == 10 and np.isfinite(run.result.nlpd)
    assert [s[2] for s in seen] == ["gp", "statistics", "eigen", "fit", "predict", "density"]
    assert seen[3][:2] == (150, 150) and seen[-1][:2] == (10, 10)
    none = run_fold(jax.random.key(0), X[:150], y[:150], X[150:], y[150:], config, density_rows=0).result
    assert none.nlpd_rows == 0 and np.isnan(none.nlpd) and none.rmse == run.result.rmse


@pytest.mark.parametrize(
    "X_test, y_test, match",
    [
        (np.zeros((5, 3)), np.zeros(4), "^`X_test` has 5 rows but `y_test` has 4"),
        (np.zeros((5, 2)), np.zeros(5), r"^`X_test` must have shape \(num_points, 3\)"),
        (np.zeros((5, 3)), np.r_[np.zeros(4), np.nan], "^`y_test` contains 1 NaN"),
        (np.r_[np.zeros((4, 3)), np.full((1, 3), np.inf)], np.zeros(5), "^`X_test` contains 3 NaN"),
        (np.zeros((0, 3)), np.zeros(0), r"^`X_test` is empty"),
        (np.zeros(3), np.zeros(3), "^`X_test` must be 2-D"),
    ],
)
def test_run_fold_names_bad_test_rows_before_it_fits(X_test, y_test, match):
    X, y = _data(40)
    with pytest.raises(ValueError, match=match):
        run_fold(jax.random.key(0), X, y, X_test, y_test, SMALL._replace(lengthscale=2.0))


def test_the_harness_moved_to_kronvi_cv_and_reads_from_pipeline_with_a_warning():
    import kronvi.cv

    for name in ("FoldResult", "FoldRun", "run_fold", "summarize", "parse_noise_cv"):
        with pytest.warns(DeprecationWarning, match=f"kronvi.pipeline.{name} moved to kronvi.cv.{name}"):
            old = getattr(kronvi.pipeline, name)
        assert old is getattr(kronvi.cv, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        kronvi.pipeline.nothing  # noqa: B018
