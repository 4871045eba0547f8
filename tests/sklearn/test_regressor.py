"""kronvi.sklearn.DirectRegressor: scikit-learn's estimator checks, Pipeline / GridSearchCV / clone,
partial_fit over chunks against fit, and predictions against the library's own functions."""

import functools
import json
import pickle
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("sklearn")

from helpers import run_python, subprocess_env  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import kronvi  # noqa: E402
from kronvi.sklearn import DirectRegressor  # noqa: E402

# Small enough for the checks to run in seconds: 20 random features with a long lengthscale (the checks'
# regression data are linear in 10 inputs), no GP fit.
SMALL = dict(n_frequencies=10, lengthscale=10.0, random_state=0)


def _data(n=240, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 10.0, 0.1])[:d] + 5.0
    y = np.sin(X[:, 0]) + 0.05 * X[:, 1] + 0.1 * rng.normal(size=n) + 100.0
    return X, y


@parametrize_with_checks([DirectRegressor(**SMALL)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_import_kronvi_does_not_import_sklearn():
    code = "import sys, kronvi; sys.exit('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_pipeline_grid_search_and_clone():
    X, y = _data(120)
    pipe = make_pipeline(StandardScaler(), DirectRegressor(**SMALL))
    search = GridSearchCV(pipe, {"directregressor__lengthscale": [0.05, 2.0]}, cv=2).fit(X, y)
    assert search.best_params_ == {"directregressor__lengthscale": 2.0}  # 0.05 is white noise here
    assert search.score(X, y) > 0.8
    twin = clone(search.best_estimator_)
    assert twin.get_params()["directregressor__lengthscale"] == 2.0
    assert not hasattr(twin[-1], "q_w_")
    np.testing.assert_allclose(
        twin.fit(X, y).predict(X[:5]), search.best_estimator_.predict(X[:5]), rtol=1e-6
    )


def test_fit_is_fit_direct_with_the_same_key():
    """The estimator is an adapter: `random_state=k` fits what `kronvi.fit_direct(jax.random.key(k), ...)`
    fits, for every recipe and kernel."""
    X, y = _data(160)
    for basis, kernel in (("eigen", "rbf"), ("compact", "auto"), ("features", "matern32")):
        est = DirectRegressor(basis=basis, kernel=kernel, **SMALL).fit(X, y)
        assert est.config_.kernel == kernel and est.fit_info_.kernel in ("rbf", "matern52", "matern32")
        model = kronvi.fit_direct(jax.random.key(0), X, y, est.config_).model
        ref = model.predict(X[:9] + 0.3)
        m, s = est.predict(X[:9] + 0.3, return_std=True)
        np.testing.assert_allclose(m, ref.mean, rtol=1e-12)
        np.testing.assert_allclose(s, np.sqrt(ref.variance), rtol=1e-12)
    assert est.config_ == kronvi.DirectConfig(
        recipe=kronvi.Features(), num_frequencies=10, lengthscale=10.0, kernel="matern32"
    )


@pytest.mark.parametrize("basis", ["eigen", "compact"])
def test_partial_fit_over_chunks_equals_fit(basis):
    X, y = _data(240)
    full = DirectRegressor(basis=basis, **SMALL).fit(X, y)
    chunked = DirectRegressor(basis=basis, **SMALL).initialize(X, y)
    for rows in np.split(np.arange(240), [17, 150]):  # uneven chunks
        chunked.partial_fit(X[rows], y[rows])
    assert chunked.n_samples_seen_ == full.n_samples_seen_ == 240
    assert chunked.y_offset_ == pytest.approx(full.y_offset_, rel=1e-14)
    assert chunked.y_scale_ == full.y_scale_
    # float64 statistics of the same rows, summed in another order and eigendecomposed from the primal rather
    # than the dual: the same float32 fit up to that rounding
    m1, s1 = chunked.predict(X[:7], return_std=True)
    m2, s2 = full.predict(X[:7], return_std=True)
    np.testing.assert_allclose(m1, m2, rtol=1e-4)
    np.testing.assert_allclose(s1, s2, rtol=1e-3)


def test_a_stream_fits_the_gp_step_of_fit_and_partial_fit_after_fit_says_it_starts_over():
    X, y = _data(120)
    kw = dict(n_frequencies=10, random_state=0)  # the GP step chooses the lengthscales
    full = DirectRegressor(**kw).fit(X, y)
    chunked = DirectRegressor(**kw).initialize(X, y)
    for rows in np.split(np.arange(120), [50]):
        chunked.partial_fit(X[rows], y[rows])
    # the same float64 GP rows: the same hyperparameters (they differed by 4% with float32 rows)
    np.testing.assert_allclose(
        np.asarray(chunked.model_.hyper.lengthscales), np.asarray(full.model_.hyper.lengthscales), rtol=1e-6
    )
    np.testing.assert_allclose(chunked.predict(X[:7]), full.predict(X[:7]), rtol=1e-4)
    with pytest.warns(UserWarning, match="fitted by `fit`.*replaces the fitted model.*initialize"):
        full.partial_fit(X[:20], y[:20])  # a new stream, said so
    assert full.n_samples_seen_ == 20


def test_partial_fit_streams_the_features_recipe_without_noise_cv():
    X, y = _data(240)
    est = DirectRegressor(basis="features", **SMALL)
    for rows in np.split(np.arange(240), [100]):
        est.partial_fit(X[rows], y[rows])
    assert est.config_.noise_cv == ()
    assert est.score(X, y) > 0.9 * DirectRegressor(basis="features", **SMALL).fit(X, y).score(X, y)


def test_partial_fit_without_initialize_fixes_the_map_on_the_first_chunk_and_centres_exactly():
    X, y = _data(240)
    est = DirectRegressor(**SMALL)
    est.partial_fit(X[:100], y[:100])
    std0 = np.asarray(est.model_.standardizer.mean)
    np.testing.assert_allclose(std0, X[:100].mean(axis=0), rtol=1e-12)
    est.partial_fit(X[100:], y[100:])
    np.testing.assert_array_equal(np.asarray(est.model_.standardizer.mean), std0)  # fixed
    assert est.y_offset_ == pytest.approx(y.mean(), rel=1e-13)  # centred on all rows
    # the features are centred on the mean of all rows, through the first chunk's map
    with jax.enable_x64(True):
        fm = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), est.model_.features._replace(offset=None))
        Xs = (X - std0) / np.asarray(est.model_.standardizer.scale)
        Phi = kronvi.inputs.rff_features(fm, jnp.asarray(Xs))
        np.testing.assert_allclose(
            np.asarray(est.model_.features.offset), np.asarray(Phi.mean(axis=0)), rtol=1e-5, atol=1e-6
        )
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:5, :2], y[:5])


def test_predict_matches_predict_regression():
    X, y = _data(200)
    est = DirectRegressor(**SMALL).fit(X, y)
    model = est.model_
    Xt = X[:9] + 0.3
    Phi = kronvi.pipeline.fold_features(model, Xt)
    mean, var = kronvi.model.predict_regression(
        model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi
    )
    mean = mean + kronvi.pipeline.support_shift(model.support, Phi)  # rows beyond the training rows' reach
    m, s = est.predict(Xt, return_std=True)
    np.testing.assert_allclose(m, np.asarray(mean) * est.y_scale_ + est.y_offset_, rtol=1e-6)
    np.testing.assert_allclose(s, np.sqrt(np.asarray(var)) * est.y_scale_, rtol=1e-5)  # float32 roundings
    assert np.array_equal(est.predict(Xt), m)


def test_sample_y_draws_the_posterior_function():
    X, y = _data(200)
    est = DirectRegressor(**SMALL).fit(X, y)
    Xt = X[:6]
    f = est.sample_y(Xt, n_samples=4000, random_state=1)
    assert f.shape == (6, 4000) and f.dtype == np.float64
    mean, std = est.predict(Xt, return_std=True)
    f_var = std**2 - est.noise_variance_  # the noise-free part of the predictive variance
    np.testing.assert_allclose(f.mean(axis=1), mean, atol=5 * np.sqrt(f_var.max() / 4000) + 1e-4)
    np.testing.assert_allclose(f.var(axis=1), f_var, rtol=0.15, atol=1e-6)
    np.testing.assert_array_equal(est.sample_y(Xt, 3, random_state=2), est.sample_y(Xt, 3, random_state=2))


def test_float64_and_bad_parameters():
    X, y = _data(150)
    est = DirectRegressor(dtype="float64", **SMALL).fit(X, y)
    assert est.model_.q_w.logits.dtype == np.float64
    assert est.score(X, y) > 0.9
    for params, name in [
        (dict(basis="x"), "basis"), (dict(lengthscale=-1.0), "lengthscale"),
        (dict(n_frequencies=0), "n_frequencies"), (dict(noise_span=0.5), "noise_span"), (dict(levels=1), "levels"),
        (dict(starts="middle"), "starts"), (dict(dtype="int8"), "dtype"), (dict(compact_tol=-1.0), "compact_tol"),
        (dict(random_state=-1), "random_state"), (dict(kernel="laplace"), "kernel"),
        (dict(kernel="auto", basis="features"), "kernel"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=f"`{name}`"):
            DirectRegressor(**params).fit(X, y)


def test_a_fitted_estimator_pickles_to_about_its_model_file(tmp_path):
    X, y = _data(300)
    est = DirectRegressor(n_frequencies=100, lengthscale=2.0, random_state=0).fit(X, y)
    path = tmp_path / "m.npz"
    kronvi.save_model(str(path), est.model_)
    size = len(pickle.dumps(est))
    assert size < 1.5 * path.stat().st_size + 20_000
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict(X[:5]), est.predict(X[:5]))


def test_a_pickled_float64_estimator_stays_float64_without_x64(tmp_path):
    X, y = _data(120)
    est = DirectRegressor(dtype="float64", **SMALL).fit(X, y)
    path = tmp_path / "est.pkl"
    path.write_bytes(pickle.dumps(est))
    code = textwrap.dedent(
        f"""
        import json, pickle, numpy as np, jax
        assert not jax.config.jax_enable_x64
        est = pickle.loads(open({str(path)!r}, "rb").read())
        assert est.model_.q_w.logits.dtype == np.float64
        print(json.dumps(est.predict(np.array({X[:4].tolist()!r}), return_std=True)[1].tolist()))
        """
    )
    std = json.loads(run_python("-c", code, env=subprocess_env()).strip().splitlines()[-1])
    np.testing.assert_allclose(std, est.predict(X[:4], return_std=True)[1], rtol=1e-12)


def test_default_lengthscales_are_the_gp_estimate_per_input():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3)) * np.array([1.0, 10.0, 0.1]) + 5.0
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=120)  # inputs 1 and 2 are irrelevant
    est = DirectRegressor(n_frequencies=10, gp_points=60, gp_restarts=1, random_state=0).fit(X, y)
    ls = np.asarray(est.model_.hyper.lengthscales)
    assert ls[0] < 3.0 and min(ls[1], ls[2]) > 100.0
    assert est.score(X, y) > 0.9
    # the same GP fit as kronvi.inputs.fit_gp_hyperparameters on the standardized, scaled rows (same key)
    k_gp = jax.random.split(jax.random.key(0), 3)[0]
    Xs = jnp.asarray((X - X.mean(axis=0)) / X.std(axis=0), jnp.float32)
    ref, _ = kronvi.inputs.fit_gp_hyperparameters(
        k_gp, Xs, jnp.asarray((y - y.mean()) / est.y_scale_, jnp.float32), num_points=60, num_starts=1
    )
    np.testing.assert_allclose(ls[0], float(ref.lengthscales[0]), rtol=0.02)


@pytest.mark.parametrize("params", [SMALL, dict(SMALL, dtype="float64")], ids=["float32", "float64"])
def test_predictions_are_equivariant_to_the_units_of_y(params):
    """The target-variance floor `max(var, 1e-12 max(1, mean^2))` and float32 statistics in the units of y
    made the fit depend on them: at y * 1e-12 the predicted sd was 2,500x too wide, at y * 1e-30 R^2 was
    -1e25, and y * 1e30 failed with "`center` contains 10 NaN or infinite value(s)"."""
    X, y = _data(200)
    ref = DirectRegressor(**params).fit(X, y)
    m0, s0 = ref.predict(X[:9], return_std=True)
    for c in (1e-30, 1e-12, 1e12, 1e30):
        est = DirectRegressor(**params).fit(X, c * y)
        m, s = est.predict(X[:9], return_std=True)
        np.testing.assert_allclose(m / c, m0, rtol=1e-6)
        np.testing.assert_allclose(s / c, s0, rtol=1e-5)
        assert est.score(X, c * y) == pytest.approx(ref.score(X, y), abs=1e-6)


def test_offset_inputs_are_standardized_before_the_float32_cast():
    """A column of 1e6 + N(0, 1) cast to float32 (spacing 0.0625) before standardizing moved the
    predictions by 0.03 to 0.7."""
    X, y = _data(200)
    shift = np.array([1e6, 0.0, -3e6])
    est = DirectRegressor(**SMALL).fit(X, y)
    moved = DirectRegressor(**SMALL).fit(X + shift, y)
    np.testing.assert_allclose(moved.predict(X[:9] + shift), est.predict(X[:9]), rtol=1e-6)


def test_partial_fit_learns_after_a_first_chunk_of_constant_targets():
    """The prior scale came from the first chunk's target variance, floored at 1e-12: after a chunk of
    zeros the model never learned (R^2 -0.0002 against 0.96 from `fit`)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(240, 3))
    y = np.where(X[:, 0] > 0, np.sin(3.0 * X[:, 0]), 0.0) + 0.5 * X[:, 1]
    first = (X[:, 0] <= 0) & (np.abs(X[:, 1]) < 0.2)
    y[first] = 0.0
    est = DirectRegressor(**SMALL)
    est.partial_fit(X[first], y[first])
    est.partial_fit(X[~first], y[~first])
    assert est.score(X, y) > 0.9 * DirectRegressor(**SMALL).fit(X, y).score(X, y)


def test_bad_targets_are_named():
    X, y = _data(40)
    with pytest.raises(ValueError, match="^`y` must hold numbers"):
        DirectRegressor(**SMALL).fit(X, np.array(["a"] * 40))
    with pytest.raises(ValueError, match="^`y` holds magnitudes up to \\S+, whose squares overflow float64"):
        DirectRegressor(**SMALL).fit(X, y * 1e200)
    with pytest.raises(ValueError, match="^`y` is constant in the rows that fix the GP hyperparameters"):
        DirectRegressor(n_frequencies=10).partial_fit(X, np.ones(40))


def test_integer_parameters_use_the_library_rule():
    """The estimators had their own integer check and message; now kronvi's check_int (same words)."""
    X, y = _data(40)
    with pytest.raises(ValueError, match=r"^`n_frequencies` must be an int >= 1, got 10.0$"):
        DirectRegressor(n_frequencies=10.0).fit(X, y)


def test_auto_prior_scale_maximizes_the_evidence_with_the_noise():
    X, y = _data(200)
    est = DirectRegressor(**SMALL)
    fold = kronvi.pipeline.prepare_fold(jax.random.key(0), X, y, est._config())
    with jax.enable_x64(True):
        f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
        args = (f64(fold.basis.eigenvalues), f64(fold.stats.Phity), f64(fold.stats.yty), f64(fold.stats.n))
        sw, s2 = kronvi.gaussian.spectral_evidence_optimum(*args, 1.0, 1.0)  # from another start
        np.testing.assert_allclose(float(fold.prior_scale), float(sw), rtol=1e-3)
        np.testing.assert_allclose(float(fold.noise_variance), float(s2), rtol=1e-3)
        best = kronvi.gaussian.spectral_log_evidence(*args, sw, s2)
        for f_w, f_n in [(1.1, 1.0), (1 / 1.1, 1.0), (1.0, 1.1), (1.0, 1 / 1.1)]:
            assert float(kronvi.gaussian.spectral_log_evidence(*args, sw * f_w, s2 * f_n)) < float(best)
    gp_scale = np.sqrt(fold.hyper.signal_variance)
    assert abs(float(fold.prior_scale) / gp_scale - 1) > 1e-3  # not the GP's signal sd
