"""Feature learning through the statistics: feature_stats and its custom VJP, feature_elbo against brute
force and finite differences, fit_features' ascent; the feature maps of kronvi.feature_learning."""

import functools

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from helpers import brute_force_elbo, count_compiles, softmax, tol

import kronvi
from kronvi.feature_learning import (
    eigen_feature_model,
    feature_elbo,
    feature_stats,
    fit_features,
    fit_features_eigen,
    mlp_features,
    mlp_init,
    predict_features,
    rff_lengthscale_features,
    rff_lengthscale_map,
)


def _data(dtype, *, n=53, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return jnp.asarray(X, dtype), jnp.asarray(y - y.mean(), dtype)


def _model(dtype, b, *, m=5, seed=1):
    prior_w = kronvi.model.gaussian_prior(b, 1.0, levels=m, dtype=dtype)
    prior_n = kronvi.model.noise_prior(0.1, levels=5, span=3.0, dtype=dtype)
    rng = np.random.default_rng(seed)
    q_w = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, m)), dtype))
    q_n = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(1, 5)), dtype))
    return q_w, q_n, prior_w, prior_n


def _dense_stats(Phi, y):
    return kronvi.stats.RegressionStats(jnp.asarray(y.shape[0], Phi.dtype), y @ y, Phi.T @ y, Phi.T @ Phi)


@pytest.mark.parametrize("chunk_size", [None, 16])
def test_feature_stats_equal_the_statistics_of_the_features(dtype, chunk_size):
    X, y = _data(dtype)  # 53 rows: chunks of 16 leave a remainder
    fmap = jax.tree.map(lambda a: a.astype(dtype), rff_lengthscale_map(jax.random.key(0), 3, 6))
    theta = jnp.asarray([0.1, -0.3, 0.5], dtype)
    stats = feature_stats(theta, X, y, feature_fn=fmap, chunk_size=chunk_size)
    ref = kronvi.stats.regression_stats(fmap(theta, X), y)
    assert stats.PhitPhi.dtype == jnp.dtype(dtype)
    for a, b in zip(stats, ref, strict=True):
        np.testing.assert_allclose(
            a, b, rtol=tol(dtype, x32=1e-5, x64=1e-12), atol=tol(dtype, x32=1e-5, x64=1e-12)
        )


def test_rff_lengthscale_map_reproduces_the_pipelines_features():
    key, ls = jax.random.key(3), jnp.asarray([0.7, 2.0])
    X = jax.random.normal(jax.random.key(4), (9, 2))
    fmap = rff_lengthscale_map(key, 2, 5)
    ref = kronvi.inputs.rff_features(kronvi.inputs.rff_init(key, ls, 5), X)
    np.testing.assert_allclose(fmap(jnp.log(ls), X), ref, rtol=1e-5, atol=1e-6)


def test_feature_elbo_equals_brute_force_enumeration():
    with jax.enable_x64(True):
        X, y = _data(np.float64, n=11, d=2)
        params = mlp_init(jax.random.key(0), (2, 4, 3), dtype=jnp.float64)
        q_w, q_n, prior_w, prior_n = _model(np.float64, 3, m=3)
        value = feature_elbo(params, X, y, q_w, q_n, prior_w, prior_n, feature_fn=mlp_features)
        ref = brute_force_elbo(
            mlp_features(params, X), y, np.asarray(prior_w.values), np.asarray(prior_w.log_probs),
            softmax(np.asarray(q_w.logits)), np.asarray(prior_n.values)[0], np.asarray(prior_n.log_probs)[0],
            softmax(np.asarray(q_n.logits))[0],
        )  # fmt: skip
        np.testing.assert_allclose(float(value), ref, rtol=1e-11)


def test_feature_elbo_equals_regression_elbo_on_precomputed_statistics(dtype):
    X, y = _data(dtype)
    params = mlp_init(jax.random.key(0), (3, 8, 6), dtype=dtype)
    q_w, q_n, prior_w, prior_n = _model(dtype, 6)
    value = feature_elbo(params, X, y, q_w, q_n, prior_w, prior_n, feature_fn=mlp_features, chunk_size=10)
    stats = kronvi.stats.regression_stats(mlp_features(params, X), y)
    ref = kronvi.model.regression_elbo(stats, q_w, q_n, prior_w, prior_n)
    assert value.dtype == jnp.dtype(dtype)
    np.testing.assert_allclose(value, ref, rtol=tol(dtype, x32=1e-5, x64=1e-12))


def _central_differences(f, x, eps):
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        out[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return out


def test_gradient_in_the_lengthscales_matches_finite_differences():
    with jax.enable_x64(True):
        X, y = _data(np.float64)
        fmap = jax.tree.map(lambda a: a.astype(jnp.float64), rff_lengthscale_map(jax.random.key(0), 3, 10))
        q_w, q_n, prior_w, prior_n = _model(np.float64, 20)
        theta = jnp.asarray([0.2, -0.4, 0.3])

        @jax.jit
        def f(t):
            return feature_elbo(t, X, y, q_w, q_n, prior_w, prior_n, feature_fn=fmap, chunk_size=16)

        grad = jax.grad(f)(theta)
        fd = _central_differences(lambda t: float(f(t)), theta, 1e-6)
        np.testing.assert_allclose(grad, fd, rtol=1e-6)
        assert np.all(np.abs(fd) > 1.0)  # a test that can fail: the gradient is far from zero


def test_gradient_in_the_mlp_weights_matches_finite_differences():
    with jax.enable_x64(True):
        X, y = _data(np.float64, n=37)
        params = mlp_init(jax.random.key(2), (3, 5, 4), dtype=jnp.float64)
        q_w, q_n, prior_w, prior_n = _model(np.float64, 4)

        @jax.jit
        def f(p):
            return feature_elbo(p, X, y, q_w, q_n, prior_w, prior_n, feature_fn=mlp_features, chunk_size=8)

        jax.test_util.check_grads(f, (params,), order=1, modes=["rev"], eps=1e-6, rtol=1e-6)
        grad = jax.grad(f)(params)
        W0 = np.asarray(params[0][0])
        fd = _central_differences(lambda w: float(f([(jnp.asarray(w), params[0][1]), params[1]])), W0, 1e-6)
        np.testing.assert_allclose(grad[0][0], fd, rtol=1e-6, atol=1e-8)


def test_custom_vjp_equals_autodiff_through_the_dense_features():
    # Every cotangent: parameters, inputs and targets, with a remainder chunk.
    with jax.enable_x64(True):
        X, y = _data(np.float64, n=29)
        params = mlp_init(jax.random.key(5), (3, 6, 5), dtype=jnp.float64)
        q_w, q_n, prior_w, prior_n = _model(np.float64, 5)

        def chunked(p, X, y):
            return feature_elbo(p, X, y, q_w, q_n, prior_w, prior_n, feature_fn=mlp_features, chunk_size=8)

        def dense(p, X, y):
            return kronvi.model.regression_elbo(
                _dense_stats(mlp_features(p, X), y), q_w, q_n, prior_w, prior_n
            )

        got = jax.jit(jax.grad(chunked, argnums=(0, 1, 2)))(params, X, y)  # compiled: fewer dispatches
        ref = jax.jit(jax.grad(dense, argnums=(0, 1, 2)))(params, X, y)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_autodiff_through_compensated_regression_stats_is_exact():
    # The compensation terms have zero derivative; reverse mode through the scan gives the dense gradient.
    with jax.enable_x64(True):
        X, y = _data(np.float64, n=29)
        q_w, q_n, prior_w, prior_n = _model(np.float64, 6)
        Phi = mlp_features(mlp_init(jax.random.key(6), (3, 6), dtype=jnp.float64), X)

        def via_stats(P):
            return kronvi.model.regression_elbo(
                kronvi.stats.regression_stats(P, y, chunk_size=8), q_w, q_n, prior_w, prior_n
            )

        def dense(P):
            return kronvi.model.regression_elbo(_dense_stats(P, y), q_w, q_n, prior_w, prior_n)

        got, ref = jax.jit(jax.grad(via_stats))(Phi), jax.jit(jax.grad(dense))(Phi)
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_jit_and_vmap_over_parameters():
    X, y = _data(np.float32)
    fmap = rff_lengthscale_map(jax.random.key(0), 3, 8)
    q_w, q_n, prior_w, prior_n = _model(np.float32, 16)

    @jax.jit
    def value_and_grad(fmap, theta, X, y):
        f = functools.partial(feature_elbo, feature_fn=fmap)
        return jax.value_and_grad(f)(theta, X, y, q_w, q_n, prior_w, prior_n)

    thetas = jnp.asarray([[0.0, 0.0, 0.0], [0.5, -0.5, 1.0], [-0.3, 0.2, 0.1]])
    batched = jax.vmap(value_and_grad, in_axes=(None, 0, None, None))(fmap, thetas, X, y)
    for i in range(3):
        v, g = value_and_grad(fmap, thetas[i], X, y)
        np.testing.assert_allclose(batched[0][i], v, rtol=1e-5)
        np.testing.assert_allclose(batched[1][i], g, rtol=1e-4, atol=1e-3)
    other = rff_lengthscale_map(jax.random.key(1), 3, 8)  # new draws are traced: no recompile
    with count_compiles() as compiles:
        jax.block_until_ready(value_and_grad(other, thetas[0], X, y))
    assert len(compiles) == 0


def test_learned_lengthscales_raise_the_elbo_and_grow_on_an_irrelevant_input():
    with jax.enable_x64(True):
        X, y = _data(np.float64, n=200)  # y depends on column 0 only
        fmap = jax.tree.map(lambda a: a.astype(jnp.float64), rff_lengthscale_map(jax.random.key(0), 3, 20))
        prior_w = kronvi.model.gaussian_prior(40, 1.0, levels=15, dtype=jnp.float64)
        prior_n = kronvi.model.noise_prior(0.01, levels=9, span=10.0, dtype=jnp.float64)
        theta0 = jnp.zeros(3)

        def log_prior(t):  # a weak N(0, 3^2) prior on the log-lengthscales
            return -0.5 * jnp.sum(t**2) / 9.0

        theta, q_w, q_n, info = fit_features(
            theta0, X, y, prior_w, prior_n, feature_fn=fmap, max_iter=4, param_iter=10, log_prior=log_prior
        )
        # each round's objective before the no-progress test that would undo it (`objective` cannot fall)
        assert np.all(np.diff(info.attempted) >= -1e-9 * np.abs(info.attempted[1:]))
        np.testing.assert_array_equal(info.attempted[: info.num_iter], info.objective[: info.num_iter])
        assert info.objective[-1] > info.objective[0] + 10.0
        np.testing.assert_allclose(info.objective[0] - info.elbo[0], float(log_prior(theta0)), atol=1e-12)
        r = info.num_iter
        assert info.final_elbo == info.elbo[r] and info.optimizer == "optax-lbfgs"
        np.testing.assert_allclose(info.objective[r] - info.elbo[r], float(log_prior(theta)), rtol=1e-10)
        ref = feature_elbo(theta, X, y, q_w, q_n, prior_w, prior_n, feature_fn=fmap)
        np.testing.assert_allclose(float(ref), info.elbo[r], rtol=1e-10)
        ls = np.exp(np.asarray(theta))
        assert ls[1] > 1.5 * ls[0] and ls[2] > 1.5 * ls[0], ls


def test_bad_arguments_are_named():
    X, y = _data(np.float32, n=20)
    fmap = rff_lengthscale_map(jax.random.key(0), 3, 4)
    prior_w = kronvi.model.gaussian_prior(8, 1.0, levels=5)
    prior_n = kronvi.model.noise_prior(0.1)
    with pytest.raises(ValueError, match="starts"):
        fit_features(jnp.zeros(3), X, y, prior_w, prior_n, feature_fn=fmap, starts=("nowhere",))
    with pytest.raises(ValueError, match="inner_sweeps"):
        fit_features(jnp.zeros(3), X, y, prior_w, prior_n, feature_fn=fmap, inner_sweeps=-1)
    with pytest.raises(ValueError, match="init"):
        fit_features(jnp.zeros(3), X, y, prior_w, prior_n, feature_fn=fmap, init="elsewhere")
    with pytest.raises(TypeError, match="log_prior"):
        fit_features(jnp.zeros(3), X, y, prior_w, prior_n, feature_fn=fmap, log_prior=3.0)
    with pytest.raises(ValueError, match="log_lengthscales"):
        fmap(jnp.zeros(2), X)
    with pytest.raises(TypeError, match="unit"):
        rff_lengthscale_features(jnp.ones((3, 4)), jnp.zeros(3), X)
    with pytest.raises(ValueError, match="sizes"):
        mlp_init(jax.random.key(0), (3,))
    with pytest.raises(ValueError, match=r"params\[1\]"):
        mlp_features(mlp_init(jax.random.key(0), (3, 4, 2))[:1] + mlp_init(jax.random.key(0), (5, 2)), X)
    with pytest.raises(ValueError, match="X"):
        feature_stats(jnp.zeros(3), X.at[0, 0].set(jnp.nan), y, feature_fn=fmap)
    with pytest.raises(ValueError, match="chunk_size"):
        feature_stats(jnp.zeros(3), X, y, feature_fn=fmap, chunk_size=0)


def test_fit_features_eigen_learns_inside_the_default_recipe():
    with jax.enable_x64(True):
        X, y = _data(np.float64, n=120)  # y depends on column 0 only
        fmap = jax.tree.map(lambda a: a.astype(jnp.float64), rff_lengthscale_map(jax.random.key(0), 3, 15))
        kw = dict(feature_fn=fmap, prior_scale=1.0, noise_variance=0.01)
        start = eigen_feature_model(jnp.zeros(3), X, y, **kw)
        model, info = fit_features_eigen(jnp.zeros(3), X, y, max_iter=2, param_iter=5, inner_sweeps=5, **kw)
        trace = info.iterate_elbo
        assert trace.shape == (3,) and info.elbo.shape == (3,)
        np.testing.assert_allclose(trace[0], start.elbo, rtol=1e-12)
        assert trace[-1] > trace[0] + 5.0
        np.testing.assert_array_equal(info.elbo, np.maximum.accumulate(trace))
        assert info.final_elbo == model.elbo == np.max(trace)
        # the model's ELBO is the exact ELBO of its rotated features
        Phi = predict_features(model, X, feature_fn=fmap)
        stats = kronvi.stats.regression_stats(Phi, y)
        elbo = kronvi.model.regression_elbo(stats, model.q_w, model.q_noise, model.prior_w, model.prior_noise)
        np.testing.assert_allclose(float(elbo), model.elbo, rtol=1e-9)
        ls = np.exp(np.asarray(model.params))
        assert ls[1] > ls[0] and ls[2] > ls[0]
        with pytest.raises(TypeError, match="model"):
            predict_features(start.q_w, X, feature_fn=fmap)
