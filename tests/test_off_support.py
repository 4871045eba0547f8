"""The bound on a new row's eigenbasis coordinates in the predictive mean (`DirectConfig.support_rms`,
`FittedDirect.support`): the dense formula, the density it moves, the compact recipe's kept directions, `jit`,
saving, and the switch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi
from kronvi.pipeline import SupportBound, fold_features, support_shift

SMALL = kronvi.DirectConfig(num_frequencies=20, lengthscale=2.0)


def _data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n) + 3.0
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = _data()
    return X, y, kronvi.fit_direct(jax.random.key(0), X, y, SMALL).model


def _far(X):
    """Rows well outside the training inputs (3 standardized units beyond their range in each input)."""
    rng = np.random.default_rng(1)
    return X.max(0) + 3.0 * X.std(0) * (1.0 + rng.uniform(size=(6, X.shape[1])))


def test_far_rows_get_the_posterior_mean_at_clipped_coordinates(fitted):
    X, _, model = fitted
    lam = np.maximum(np.asarray(model.basis.eigenvalues, np.float64), 0.0)
    np.testing.assert_allclose(model.support.bound, 20.0 * np.sqrt(lam / X.shape[0]), rtol=1e-6)
    values = np.asarray(model.prior_w.values, np.float64)
    e_w = np.sum(np.asarray(model.q_w.probs, np.float64) * values, axis=1)
    np.testing.assert_allclose(model.support.weight, e_w, rtol=1e-5, atol=1e-7)

    Xt = np.concatenate([_far(X), X[:5]])
    z = np.asarray(fold_features(model, Xt), np.float64)
    bound = np.asarray(model.support.bound, np.float64)
    clipped = np.clip(z, -bound, bound)
    pred, plain = model.predict(Xt), model._replace(support=None).predict(Xt)
    np.testing.assert_allclose(pred.mean, model.y_offset + model.y_scale * clipped @ e_w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pred.variance, plain.variance, rtol=1e-12)  # the variance is the posterior's
    assert np.all(np.abs(pred.mean[:6] - plain.mean[:6]) > 1e-3)  # far rows move ...
    np.testing.assert_allclose(pred.mean[6:], plain.mean[6:], rtol=1e-12)  # ... training rows do not
    np.testing.assert_allclose(
        np.asarray(support_shift(model.support, jnp.asarray(z))), (clipped - z) @ e_w, rtol=1e-4, atol=1e-6
    )


def test_the_density_is_the_posterior_predictive_moved_to_the_clipped_mean(fitted):
    X, y, model = fitted
    Xt = np.concatenate([_far(X), X[:4]])
    yt = np.concatenate([np.full(6, y.mean()), y[:4]])
    plain = model._replace(support=None)
    delta = model.predict(Xt).mean - plain.predict(Xt).mean
    np.testing.assert_allclose(model.log_density(Xt, yt), plain.log_density(Xt, yt - delta), rtol=1e-5)
    traced = jax.jit(kronvi.log_density)(model, Xt, yt)  # one pass under jit, within its bound (rtol 1e-2)
    np.testing.assert_allclose(np.asarray(traced), model.log_density(Xt, yt), atol=1e-2)


def test_predict_under_jit_and_vmap_keeps_the_bound(fitted):
    X, _, model = fitted
    Xt = np.concatenate([_far(X), X[:10]])
    pred = model.predict(Xt)
    np.testing.assert_allclose(np.asarray(jax.jit(kronvi.predict)(model, Xt).mean), pred.mean, rtol=1e-5)
    both = jax.vmap(kronvi.predict, in_axes=(0, None))(jax.tree.map(lambda a: np.stack([a, a]), model), Xt)
    np.testing.assert_allclose(np.asarray(both.mean[1]), pred.mean, rtol=1e-5)


def test_the_compact_model_bounds_its_kept_directions_as_the_eigen_model():
    X, y = _data(n=60)
    key = jax.random.key(2)
    eigen = kronvi.fit_direct(key, X, y, SMALL).model
    compact = kronvi.fit_direct(key, X, y, SMALL._replace(recipe=kronvi.Compact(vectors="full"))).model
    values = np.asarray(eigen.prior_w.values, np.float64)
    probs = np.asarray(eigen.q_w.probs, np.float64)
    e_w = np.sum(probs * values, axis=1)
    var_w = np.sum(probs * values**2, axis=1) - e_w**2
    e_s = float(kronvi.model.noise_moments(eigen.q_noise, eigen.prior_noise)[2])
    keep, _ = kronvi.model.complement_split(eigen.basis.eigenvalues, var_w, X.shape[0], e_s, tol=0.1)
    assert 0 < keep.sum() < keep.size
    Xt = _far(X)
    z = np.asarray(fold_features(eigen, Xt), np.float64)
    bound = np.asarray(eigen.support.bound, np.float64)
    delta = ((np.clip(z, -bound, bound) - z) * keep) @ e_w
    # the complement's share of the mean, one coordinate bounded by 20 times its training RMS
    lam = np.maximum(np.asarray(eigen.basis.eigenvalues, np.float64), 0.0)
    c = (z * ~keep) @ e_w
    beta = 20.0 * np.sqrt(np.sum(lam[~keep] * e_w[~keep] ** 2) / X.shape[0])
    np.testing.assert_allclose(compact.support.mix_bound, beta, rtol=1e-4)
    delta = delta + np.clip(c, -beta, beta) - c
    plain = compact._replace(support=None).predict(Xt).mean
    assert np.all(np.abs(delta) > 1e-4)
    np.testing.assert_allclose(compact.predict(Xt).mean, plain + eigen.y_scale * delta, rtol=1e-4, atol=1e-5)
    cols = compact.prior_w.values.shape[0]
    assert compact.support.bound.shape == (cols,) and np.isinf(compact.support.bound[0])


def test_support_rms_none_is_the_plain_posterior_and_bad_values_are_named(fitted):
    X, y, model = fitted
    off = kronvi.fit_direct(jax.random.key(0), X, y, SMALL._replace(recipe=kronvi.Eigen(support_rms=None))).model
    assert off.support is None
    Xt = _far(X)
    np.testing.assert_allclose(off.predict(Xt).mean, model._replace(support=None).predict(Xt).mean, rtol=1e-12)
    for bad in (0.0, -1.0, float("nan"), float("inf"), "20", True):
        with pytest.raises(ValueError, match=r"config\.support_rms"):
            kronvi.fit_direct(jax.random.key(0), X, y, SMALL._replace(recipe=kronvi.Eigen(support_rms=bad)))
    features = kronvi.fit_direct(jax.random.key(0), X, y, SMALL._replace(recipe=kronvi.Features())).model
    assert features.support is None


def test_save_and_load_keep_the_bound_and_refuse_a_bad_one(fitted, tmp_path):
    X, _, model = fitted
    kronvi.save_model(tmp_path / "m.npz", model)
    loaded = kronvi.load_model(tmp_path / "m.npz")
    assert isinstance(loaded.support, SupportBound)
    Xt = _far(X)
    np.testing.assert_array_equal(loaded.predict(Xt).mean, model.predict(Xt).mean)
    bad = model._replace(support=model.support._replace(bound=model.support.bound.at[0].set(jnp.nan)))
    with pytest.raises(ValueError, match=r"support\.bound"):
        kronvi.save_model(tmp_path / "bad.npz", bad)
    kronvi.save_model(tmp_path / "old.npz", model._replace(support=None))  # the layout before the field
    assert kronvi.load_model(tmp_path / "old.npz").support is None


def test_the_bound_is_the_dense_clipped_formula_in_both_dtypes(dtype):
    """The same dense reference in float32 and float64 (x64 on): the model's own dtype, tolerances to match."""
    X, y = _data()
    model = kronvi.fit_direct(jax.random.key(0), X, y, SMALL, dtype=dtype).model
    assert model.support.bound.dtype == dtype
    lam = np.maximum(np.asarray(model.basis.eigenvalues, np.float64), 0.0)
    bound = 20.0 * np.sqrt(lam / X.shape[0])
    values = np.asarray(model.prior_w.values, np.float64)
    e_w = np.sum(np.asarray(model.q_w.probs, np.float64) * values, axis=1)
    Xt = np.concatenate([_far(X), X[:5]])
    z = np.asarray(fold_features(model, Xt), np.float64)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.support.bound, bound, **tol)
    np.testing.assert_allclose(model.predict(Xt).mean, model.y_offset + model.y_scale * np.clip(z, -bound, bound) @ e_w, **tol)
    assert np.all(np.abs(np.clip(z[:6], -bound, bound) - z[:6]).sum(axis=1) > 0)  # the far rows are clipped


def test_auto_bounds_random_fourier_features_and_not_nystrom_features():
    """`support_rms="auto"` (the default) bounds the mean with random Fourier features (`SUPPORT_RMS`) and not
    with Nyström features, whose plain mean returns to the targets' mean far from the data; an explicit
    number bounds either map."""
    from kronvi import pipeline

    assert kronvi.Eigen().support_rms == "auto" and kronvi.Compact().support_rms == "auto"
    assert [pipeline.support_rms_for("auto", m) for m in ("fourier", "nystrom")] == [pipeline.SUPPORT_RMS, None]
    assert [pipeline.support_rms_for(v, "nystrom") for v in (7, None)] == [7.0, None]
    X, y = _data()
    nys = SMALL._replace(feature_map="nystrom")
    auto = kronvi.fit_direct(jax.random.key(0), X, y, nys).model
    assert auto.support is None
    bounded = kronvi.fit_direct(jax.random.key(0), X, y, nys._replace(recipe=kronvi.Eigen(support_rms=20.0))).model
    assert isinstance(bounded.support, SupportBound)
    np.testing.assert_array_equal(np.asarray(bounded.q_w.logits), np.asarray(auto.q_w.logits))  # the same fit
    far = np.stack([X.max(0) + 30.0 * X.std(0), X.min(0) - 50.0 * X.std(0)])  # every landmark far away
    mean = np.asarray(auto.predict(far).mean)  # the kernel rows vanish: one constant, whichever way
    np.testing.assert_allclose(mean[0], mean[1], rtol=1e-6)
    assert abs(mean[0] - y.mean()) < 2.0 * y.std()
    compact = kronvi.fit_direct(jax.random.key(0), X, y, nys._replace(recipe=kronvi.Compact())).model
    assert compact.support is None
    fourier = kronvi.fit_direct(jax.random.key(0), X, y, SMALL).model
    np.testing.assert_allclose(fourier.support.bound, 20.0 * np.sqrt(np.maximum(np.asarray(fourier.basis.eigenvalues, np.float64), 0) / len(y)), rtol=1e-6)
