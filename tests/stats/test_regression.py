import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import kronvi


def _data(rng, n=37, b=4):
    return rng.normal(size=(n, b)), rng.normal(size=n)


@pytest.mark.parametrize("chunk_size", [None, 1, 5, 37, 100])
def test_stats_match_dense(dtype, chunk_size):
    Phi, y = _data(np.random.default_rng(0))
    s = kronvi.stats.regression_stats(jnp.asarray(Phi, dtype), jnp.asarray(y, dtype), chunk_size=chunk_size)
    assert s.PhitPhi.dtype == jnp.dtype(dtype)
    r = tol(dtype, x32=1e-5, x64=1e-12)
    np.testing.assert_allclose(float(s.n), 37)
    np.testing.assert_allclose(float(s.yty), y @ y, rtol=r)
    np.testing.assert_allclose(s.Phity, Phi.T @ y, rtol=r, atol=r)
    np.testing.assert_allclose(s.PhitPhi, Phi.T @ Phi, rtol=r, atol=r)


def test_stats_from_inputs_equal_stats_of_features(dtype):
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(23, 3)), rng.normal(size=23)
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3, dtype), 4)
    fmap = functools.partial(kronvi.inputs.rff_features, params)
    a = kronvi.stats.regression_stats_from_inputs(
        fmap, jnp.asarray(X, dtype), jnp.asarray(y, dtype), chunk_size=6
    )
    b = kronvi.stats.regression_stats(fmap(jnp.asarray(X, dtype)), jnp.asarray(y, dtype))
    for u, v in zip(a, b, strict=True):
        np.testing.assert_allclose(u, v, rtol=tol(dtype, x32=1e-5), atol=tol(dtype, x32=1e-5))


def test_merge_subtract_and_kfold(dtype):
    rng = np.random.default_rng(2)
    Phi, y = _data(rng, n=40)
    P, Y = jnp.asarray(Phi, dtype), jnp.asarray(y, dtype)
    whole = kronvi.stats.regression_stats(P, Y)
    a, b = kronvi.stats.regression_stats(P[:15], Y[:15]), kronvi.stats.regression_stats(P[15:], Y[15:])
    r = tol(dtype, x32=1e-5, x64=1e-12)
    for u, v in zip(kronvi.stats.merge_stats(a, b), whole, strict=True):
        np.testing.assert_allclose(u, v, rtol=r, atol=r)
    for u, v in zip(kronvi.stats.subtract_stats(whole, a), b, strict=True):
        np.testing.assert_allclose(u, v, rtol=r, atol=10 * r)
    folds = np.arange(40) % 4
    train, test = kronvi.stats.kfold_stats(P, Y, folds)
    assert train.PhitPhi.shape == (4, 4, 4)
    for k in range(4):
        ref = kronvi.stats.regression_stats(P[folds != k], Y[folds != k])
        for u, v in zip(jax.tree.map(lambda x, k=k: x[k], train), ref, strict=True):
            np.testing.assert_allclose(u, v, rtol=r, atol=10 * r)


def test_float32_statistics_of_millions_of_rows_keep_precision():
    # 2,000,000 rows with a large target offset: plain float32 accumulation loses digits with n;
    # compensated chunk sums keep float32 accuracy (relative error ~1e-7, not ~1e-4).
    rng = np.random.default_rng(3)
    n, b = 2_000_000, 3
    Phi = rng.normal(size=(n, b)).astype(np.float32)
    y = (5.0 + rng.normal(size=n)).astype(np.float32)
    with jax.enable_x64(False):
        s = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y), chunk_size=4096)
    P64, y64 = Phi.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(float(s.yty), y64 @ y64, rtol=3e-7)
    np.testing.assert_allclose(s.Phity, P64.T @ y64, rtol=3e-6, atol=3e-7 * np.abs(y64).sum())
    np.testing.assert_allclose(s.PhitPhi, P64.T @ P64, rtol=3e-6, atol=3e-7 * n)
    naive = np.cumsum(y * y, dtype=np.float32)[-1]  # a sequential float32 sum, for contrast
    assert abs(float(naive) - y64 @ y64) > 100 * abs(float(s.yty) - y64 @ y64)


def test_fit_from_float32_stats_of_many_rows_matches_float64():
    rng = np.random.default_rng(4)
    n, b = 400_000, 4
    Phi = rng.normal(size=(n, b))
    y = Phi @ np.array([0.6, 0.0, -0.3, 0.9]) + 0.5 * rng.normal(size=n)
    y = y - y.mean()
    fits = {}
    for x64 in (False, True):
        with jax.enable_x64(x64):
            dt = np.float64 if x64 else np.float32
            s = kronvi.stats.regression_stats(jnp.asarray(Phi, dt), jnp.asarray(y, dt))
            pw = kronvi.model.gaussian_prior(b, 0.5, levels=15, dtype=dt)
            pn = kronvi.model.noise_prior(0.25, levels=9, dtype=dt)
            q, qn, info = kronvi.fitting.fit_regression(s, pw, pn, order="cyclic")
            fits[x64] = (np.asarray(q.probs, np.float64), float(info.final_elbo))
    np.testing.assert_allclose(fits[False][0], fits[True][0], atol=1e-3)
    np.testing.assert_allclose(fits[False][1], fits[True][1], rtol=1e-5)


def test_stats_work_under_jit_and_vmap():
    rng = np.random.default_rng(5)
    Phi = jnp.asarray(rng.normal(size=(3, 10, 2)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(3, 10)), jnp.float32)
    batched = jax.vmap(lambda p, t: kronvi.stats.regression_stats(p, t, chunk_size=4))(Phi, y)
    for k in range(3):
        ref = kronvi.stats.regression_stats(Phi[k], y[k])
        np.testing.assert_allclose(batched.PhitPhi[k], ref.PhitPhi, rtol=1e-5, atol=1e-5)


def test_overflowing_statistics_raise():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 3)), rng.normal(size=50)
    with pytest.raises(TypeError, match=r"^`Phi` is float16: statistics are sums over rows"):
        kronvi.stats.regression_stats(jnp.asarray(X, jnp.float16), jnp.asarray(100 * y, jnp.float16))
    with pytest.raises(TypeError, match=r"^`X` is bfloat16"):
        kronvi.stats.regression_stats_from_inputs(lambda x: x, jnp.asarray(X, jnp.bfloat16), jnp.asarray(y, jnp.bfloat16))
    with pytest.raises(ValueError, match=r"overflowed in float32: `stats.PhitPhi` .*use float64 or rescale `X`"):
        kronvi.stats.regression_stats_from_inputs(
            lambda x: x, jnp.asarray(X * 1e20, jnp.float32), jnp.asarray(y)
        )
    with pytest.raises(ValueError, match="overflowed in float32"):
        kronvi.stats.kfold_stats(jnp.asarray(X * 1e20, jnp.float32), jnp.asarray(y), np.arange(50) % 2)
    # inside jit the values are not known: no check, no error
    s = jax.jit(kronvi.stats.regression_stats)(
        jnp.asarray(X * 1e20, jnp.float32), jnp.asarray(y, jnp.float32)
    )
    assert not np.isfinite(float(s.PhitPhi[0, 0]))


def test_fits_reject_non_finite_statistics():
    rng = np.random.default_rng(0)
    s = kronvi.stats.regression_stats(
        jnp.asarray(rng.normal(size=(20, 3)), jnp.float32), jnp.ones(20, jnp.float32)
    )
    bad = s._replace(PhitPhi=s.PhitPhi.at[0, 1].set(jnp.inf))
    pw, pn = kronvi.model.gaussian_prior(3, 1.0), kronvi.model.noise_prior(1.0)
    with pytest.raises(
        ValueError, match=r"`stats` contains NaN or infinite values: `stats.PhitPhi` \(1 of 9"
    ):
        kronvi.fitting.fit_regression(bad, pw, pn)
    with pytest.raises(ValueError, match="`stats` contains NaN"):
        kronvi.fitting.fit_regression(bad, pw, pn, init="gaussian", method="lbfgs")
    with pytest.raises(ValueError, match=r"`stats.yty`"):
        kronvi.fitting.gaussian_start(s._replace(yty=jnp.float32(jnp.nan)), pw, pn)
    # under vmap (tracers) the check is skipped and the fit runs
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), s)
    q_w, _, _ = jax.vmap(lambda st: kronvi.fitting.fit_regression(st, pw, pn))(stacked)
    assert q_w.logits.shape == (2, 3, 15)


def test_host_blas_statistics_equal_the_compiled_ones(dtype):
    # On a CPU concrete inputs go through NumPy's BLAS; inside jit the same sums run in XLA.
    rng = np.random.default_rng(5)
    X, y = jnp.asarray(rng.normal(size=(1000, 3)), dtype), jnp.asarray(rng.normal(size=1000), dtype)
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3, dtype), 20)
    fmap = functools.partial(kronvi.inputs.rff_features, params)
    host = kronvi.stats.regression_stats_from_inputs(fmap, X, y, chunk_size=300)  # 3 chunks and a remainder
    compiled = jax.jit(lambda X, y: kronvi.stats.regression_stats_from_inputs(fmap, X, y, chunk_size=300))(
        X, y
    )
    Phi = np.asarray(fmap(X), np.float64)
    ref = (
        1000.0,
        float(np.asarray(y, np.float64) @ np.asarray(y, np.float64)),
        Phi.T @ np.asarray(y),
        Phi.T @ Phi,
    )
    # float64: one triangle by dsyrk, mirrored; float32: averaged with its transpose
    A = np.asarray(host.PhitPhi)
    np.testing.assert_array_equal(A, A.T)
    for got in (host, compiled):
        assert got.PhitPhi.dtype == dtype
        for a, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, r, rtol=5 * tol(dtype), atol=5 * tol(dtype) * np.abs(r).max())
    plain = kronvi.stats.regression_stats(fmap(X), y, chunk_size=300)  # the identity feature map
    np.testing.assert_allclose(plain.PhitPhi, ref[3], rtol=5 * tol(dtype), atol=5 * tol(dtype) * 1000)


def test_statistics_differentiate_in_the_feature_maps_parameters_from_numpy_rows():
    """`jax.grad` in a feature map's parameters through `regression_stats_from_inputs` with rows in host
    memory (NumPy): the host BLAS path takes concrete maps only (a traced one failed converting a tracer);
    against the dense expression's gradient."""
    import functools

    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        X, y = rng.normal(size=(50, 3)), rng.normal(size=50)
        W = jnp.asarray(rng.normal(size=(3, 4)))
        fmap = lambda W, x: jnp.cos(x @ W)  # noqa: E731

        def loss(W, rows):
            s = kronvi.stats.regression_stats_from_inputs(functools.partial(fmap, W), rows, y, chunk_size=16)
            return jnp.sum(s.PhitPhi * jnp.arange(16.0).reshape(4, 4)) + jnp.sum(s.Phity)

        def dense(W):
            F = fmap(W, jnp.asarray(X))
            return jnp.sum((F.T @ F) * jnp.arange(16.0).reshape(4, 4)) + jnp.sum(F.T @ y)

        ref = jax.grad(dense)(W)
        for rows in (X, jnp.asarray(X)):
            np.testing.assert_allclose(jax.grad(loss)(W, rows), ref, rtol=1e-10)
