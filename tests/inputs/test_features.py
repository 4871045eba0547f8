import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import kronvi


def _se_kernel(X, lengthscales):
    """Dense unit-variance squared-exponential ARD kernel in float64."""
    Z = np.asarray(X, np.float64) / np.asarray(lengthscales, np.float64)
    d2 = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    return np.exp(-0.5 * d2)


def _inputs(seed=0, n=25, d=3):
    return np.random.default_rng(seed).normal(size=(n, d))


def test_shapes_and_dtype(dtype):
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3, dtype), 7)
    assert isinstance(params, kronvi.inputs.RandomFourierFeatures)
    assert params.frequencies.shape == (3, 7)
    assert params.frequencies.dtype == jnp.dtype(dtype)
    Phi = kronvi.inputs.rff_features(params, jnp.asarray(_inputs(), dtype))
    assert Phi.shape == (25, 14)
    assert Phi.dtype == jnp.dtype(dtype)
    # cos^2 + sin^2: the diagonal of Phi Phi^T is k(x, x) / s2 = 1 for any draw.
    np.testing.assert_allclose(np.sum(np.asarray(Phi, np.float64) ** 2, axis=1), 1.0, rtol=tol(dtype))


def test_frequencies_are_scaled_by_lengthscales():
    ls = jnp.array([0.5, 2.0, 10.0])
    W = np.asarray(kronvi.inputs.rff_init(jax.random.key(1), ls, 20000).frequencies)
    np.testing.assert_allclose(W.std(axis=1), 1.0 / np.asarray(ls), rtol=0.03)


def test_converges_to_exact_kernel_like_one_over_sqrt_d():
    """max |Phi Phi^T - K| shrinks like 1/sqrt(D) (averaged over draws to steady the constant)."""
    X = _inputs()
    ls = np.array([0.7, 1.5, 3.0])
    K = _se_kernel(X, ls)
    Ds = [16, 256, 4096]
    errs = []
    for D in Ds:
        e = []
        for seed in range(4):
            Phi = np.asarray(
                kronvi.inputs.rff_features(kronvi.inputs.rff_init(jax.random.key(seed), ls, D), X), np.float64
            )
            e.append(np.abs(Phi @ Phi.T - K).max())
        errs.append(np.mean(e))
    errs = np.array(errs)
    assert np.all(np.diff(errs) < 0), errs
    # D grows 256x from first to last: the error should drop ~16x; demand at least 8x.
    assert errs[-1] < errs[0] / 8, errs
    # Rate: err * sqrt(D) stays within a factor 3 of its first value.
    scaled = errs * np.sqrt(Ds)
    assert np.all((scaled / scaled[0] > 1 / 3) & (scaled / scaled[0] < 3)), scaled
    assert errs[-1] < 0.1


def test_weight_prior_variance_scales_the_kernel():
    """With w ~ N(0, s2 I), Cov(Phi w) = s2 Phi Phi^T ~ s2 k_unit: the signal variance lives in the prior."""
    X = _inputs(n=6)
    ls = np.ones(3)
    s2 = 2.5
    Phi = np.asarray(
        kronvi.inputs.rff_features(kronvi.inputs.rff_init(jax.random.key(0), ls, 8192), X), np.float64
    )
    np.testing.assert_allclose(s2 * Phi @ Phi.T, s2 * _se_kernel(X, ls), atol=s2 * 0.05)


@pytest.mark.parametrize("chunk_size", [None, 8])
def test_feature_map_for_streaming_statistics(dtype, chunk_size):
    X = jnp.asarray(_inputs(n=37), dtype)
    y = jnp.asarray(np.random.default_rng(1).normal(size=37), dtype)
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3, dtype), 5)
    fmap = functools.partial(kronvi.inputs.rff_features, params)
    chunked = kronvi.stats.regression_stats_from_inputs(fmap, X, y, chunk_size=chunk_size)
    dense = kronvi.stats.regression_stats(kronvi.inputs.rff_features(params, X), y)
    for a, b in zip(chunked, dense, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol(dtype, x32=1e-4), atol=1e-5)


def test_jit_vmap_grad():
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3), 4)
    X = jnp.asarray(_inputs(n=5), jnp.float32)
    f = jax.jit(kronvi.inputs.rff_features)
    np.testing.assert_allclose(f(params, X), kronvi.inputs.rff_features(params, X), rtol=1e-6)
    batched = jax.vmap(kronvi.inputs.rff_features, in_axes=(None, 0))(params, jnp.stack([X, 2 * X]))
    assert batched.shape == (2, 5, 8)
    g = jax.grad(lambda W: kronvi.inputs.rff_features(kronvi.inputs.RandomFourierFeatures(W), X).sum())(
        params.frequencies
    )
    assert g.shape == (3, 4) and bool(jnp.all(jnp.isfinite(g)))


@pytest.mark.parametrize(
    "lengthscales, num_frequencies, error, match",
    [
        ([1.0, -1.0], 4, ValueError, "lengthscales"),
        ([1.0, 0.0], 4, ValueError, "lengthscales"),
        ([1.0, np.nan], 4, ValueError, "lengthscales"),
        ([[1.0, 1.0]], 4, ValueError, "lengthscales"),
        ([], 4, ValueError, "lengthscales"),
        ([1.0, 1.0], 0, ValueError, "num_frequencies"),
        ([1.0, 1.0], 2.5, TypeError, "num_frequencies"),
    ],
)
def test_init_validation(lengthscales, num_frequencies, error, match):
    with pytest.raises(error, match=match):
        kronvi.inputs.rff_init(jax.random.key(0), np.asarray(lengthscales), num_frequencies)


def test_features_validation():
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3), 4)
    with pytest.raises(ValueError, match="`X` has 2 columns"):
        kronvi.inputs.rff_features(params, jnp.ones((5, 2)))
    with pytest.raises(ValueError, match="`X` must be 2-D"):
        kronvi.inputs.rff_features(params, jnp.ones(3))
    with pytest.raises(TypeError, match="params"):
        kronvi.inputs.rff_features(params.frequencies, jnp.ones((5, 3)))


def test_sincos_matches_numpy_and_differentiates_exactly():
    from kronvi._inputs.features import sincos

    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for scale in (1.0, 1e3, 1e5, 1e7):  # the last takes XLA's sin and cos
            x = rng.normal(size=2000) * scale
            x[:4] = [0.0, np.pi / 4, -np.pi / 2, 3 * np.pi]
            s, c = sincos(jnp.asarray(x))
            tol = 6e-16  # 3 ulp of 1
            np.testing.assert_allclose(s, np.sin(x), rtol=0, atol=tol)
            np.testing.assert_allclose(c, np.cos(x), rtol=0, atol=tol)
        g = jax.grad(lambda v: jnp.sum(sincos(v)[0] + 2.0 * sincos(v)[1]))(jnp.asarray(x[:50] / scale))
        np.testing.assert_allclose(g, np.cos(x[:50] / scale) - 2.0 * np.sin(x[:50] / scale), atol=1e-15)


@pytest.mark.parametrize("sampling", ["orthogonal", "halton"])
def test_structured_frequencies_estimate_the_kernel_better_than_iid(sampling):
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(40, 4)) * 0.7)
    ls = jnp.asarray([1.0, 2.0, 0.5, 1.5])
    d2 = (((np.asarray(X)[:, None] - np.asarray(X)[None]) / np.asarray(ls)) ** 2).sum(-1)
    K = np.exp(-0.5 * d2)  # s^2 = 1
    err = {}
    for s in ("iid", sampling):
        est = []
        for k in range(12):
            params = kronvi.inputs.rff_init(jax.random.key(k), ls, 64, sampling=s)
            Phi = np.asarray(kronvi.inputs.rff_features(params, X))
            est.append(Phi @ Phi.T)
        est = np.asarray(est)
        err[s] = np.mean((est - K) ** 2)
        np.testing.assert_allclose(est.mean(0), K, atol=0.08)  # unbiased: the average is the kernel
    assert err[sampling] < 0.8 * err["iid"], err
    if sampling == "orthogonal":
        z = np.asarray(kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(4), 8, sampling=s).frequencies)
        G = z[:, :4].T @ z[:, :4]  # the first block: orthogonal directions
        np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-5)
    with pytest.raises(ValueError, match="sampling"):
        kronvi.inputs.rff_init(jax.random.key(0), ls, 8, sampling="sobol")


@pytest.mark.parametrize("chunk_size", [4096, 7])  # one chunk; 4 chunks, the last one padded
def test_feature_mean_and_offset_centre_the_features(dtype, chunk_size):
    X = jnp.asarray(_inputs(n=25), dtype)
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3, dtype), 6)
    Phi = np.asarray(kronvi.inputs.rff_features(params, X), np.float64)
    mean = kronvi.inputs.feature_mean(params, X, chunk_size=chunk_size)
    assert mean.shape == (12,) and mean.dtype == dtype
    np.testing.assert_allclose(
        mean, Phi.mean(axis=0), rtol=tol(dtype, x64=1e-12, x32=1e-5), atol=tol(dtype, x64=1e-14, x32=1e-6)
    )
    centred = params._replace(offset=mean)
    np.testing.assert_allclose(
        kronvi.inputs.rff_features(centred, X),
        Phi - np.asarray(mean, np.float64),
        atol=tol(dtype, x64=1e-14, x32=1e-6),
    )
    assert float(jnp.max(jnp.abs(kronvi.inputs.rff_features(centred, X).mean(axis=0)))) < tol(
        dtype, x64=1e-14, x32=1e-6
    )
    # an offset is a pytree leaf: the map stays jittable and vmappable over inputs
    f = jax.jit(jax.vmap(kronvi.inputs.rff_features, in_axes=(None, 0)))
    np.testing.assert_allclose(
        f(centred, X[None]),
        kronvi.inputs.rff_features(centred, X)[None],
        atol=tol(dtype, x64=1e-14, x32=1e-6),
    )


def test_offset_and_feature_mean_validation():
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3), 4)
    with pytest.raises(ValueError, match="`params.offset` has 7 entries but `params` has 8 features"):
        kronvi.inputs.rff_features(params._replace(offset=jnp.zeros(7)), jnp.ones((5, 3)))
    with pytest.raises(ValueError, match="`params.offset` must be 1-D"):
        kronvi.inputs.rff_features(params._replace(offset=jnp.zeros((1, 8))), jnp.ones((5, 3)))
    with pytest.raises(ValueError, match="`X` has no rows"):
        kronvi.inputs.feature_mean(params, jnp.ones((0, 3)))
    with pytest.raises(TypeError, match="params"):
        kronvi.inputs.feature_mean(params.frequencies, jnp.ones((5, 3)))


def _matern_kernel(X, lengthscales, nu):
    """Dense unit-variance Matern-nu ARD kernel in float64, by its Bessel-function form."""
    import scipy.special

    Z = np.asarray(X, np.float64) / np.asarray(lengthscales, np.float64)
    r = np.sqrt(((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1))
    z = np.where(r > 0, np.sqrt(2 * nu) * r, 1.0)
    return np.where(r > 0, 2 ** (1 - nu) / scipy.special.gamma(nu) * z**nu * scipy.special.kv(nu, z), 1.0)


@pytest.mark.parametrize(("kernel", "nu"), [("matern52", 2.5), ("matern32", 1.5)])
@pytest.mark.parametrize("sampling", ["iid", "orthogonal", "halton"])
def test_matern_frequencies_estimate_the_matern_kernel(kernel, nu, sampling):
    """Student-t frequencies: the features' inner products converge to the Matern kernel (averaged over draws,
    within a few Monte Carlo standard errors), and stay far from the squared exponential of the same
    lengthscales, which the default's frequencies estimate."""
    X = _inputs(seed=3, n=20)
    ls = np.array([0.8, 1.5, 2.5])
    K, se = _matern_kernel(X, ls, nu), _se_kernel(X, ls)
    est = np.mean(
        [
            (lambda P: P @ P.T)(
                np.asarray(
                    kronvi.inputs.rff_features(
                        kronvi.inputs.rff_init(jax.random.key(k), ls, 4096, sampling=sampling, kernel=kernel), X
                    ),
                    np.float64,
                )
            )
            for k in range(8)
        ],
        axis=0,
    )  # 32,768 frequencies: a standard error of at most 0.004 per entry
    assert np.abs(est - K).max() < 0.02, np.abs(est - K).max()
    assert np.abs(se - K).max() > 0.05  # the kernels differ where the test can tell
    rbf = kronvi.inputs.rff_init(jax.random.key(0), ls, 16)
    same = kronvi.inputs.rff_init(jax.random.key(0), ls, 16, kernel="rbf")
    np.testing.assert_array_equal(rbf.frequencies, same.frequencies)  # the default draws as before
    with pytest.raises(ValueError, match="`kernel` must be one of"):
        kronvi.inputs.rff_init(jax.random.key(0), ls, 8, kernel="matern12")
