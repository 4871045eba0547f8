"""The eigenbasis statistics are the statistics of the rotated features."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


def test_rotated_stats_equal_the_stats_of_rotated_features(dtype):
    rng = np.random.default_rng(0)
    Phi = jnp.asarray(rng.normal(size=(60, 4)), dtype)
    y = jnp.asarray(rng.normal(size=60), dtype)
    stats = kronvi.stats.regression_stats(Phi, y)
    rotated, basis = kronvi.stats.eigenbasis(stats)
    direct = kronvi.stats.regression_stats(kronvi.stats.rotate_features(basis, Phi), y)
    atol = 1e-9 if dtype == np.float64 else 2e-4
    for a, b in zip(rotated, direct, strict=True):
        np.testing.assert_allclose(a, b, atol=atol * 60, rtol=atol)
    V = np.asarray(basis.vectors, np.float64)
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=atol * 10)
    assert rotated.PhitPhi.dtype == dtype


def test_rotation_leaves_the_exact_posterior_predictive_unchanged(dtype):
    rng = np.random.default_rng(1)
    Phi = jnp.asarray(rng.normal(size=(50, 5)), dtype)
    y = jnp.asarray(rng.normal(size=50), dtype)
    stats = kronvi.stats.regression_stats(Phi, y)
    rotated, basis = kronvi.stats.eigenbasis(stats)
    Pn = jnp.asarray(rng.normal(size=(7, 5)), dtype)
    m1, v1 = kronvi.gaussian.predict_blr(*kronvi.gaussian.blr_posterior(stats, 1.0, 0.5), 0.5, Pn)
    m2, v2 = kronvi.gaussian.predict_blr(
        *kronvi.gaussian.blr_posterior(rotated, 1.0, 0.5), 0.5, kronvi.stats.rotate_features(basis, Pn)
    )
    rtol = 1e-9 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(m1, m2, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(v1, v2, rtol=rtol)


def test_rotate_features_checks_its_arguments():
    stats = kronvi.stats.regression_stats(jnp.eye(3), jnp.ones(3))
    _, basis = kronvi.stats.eigenbasis(stats)
    with pytest.raises(ValueError, match="Phi"):
        kronvi.stats.rotate_features(basis, jnp.ones((2, 4)))
    with pytest.raises(TypeError, match="basis"):
        kronvi.stats.rotate_features(jnp.eye(3), jnp.ones((2, 3)))


def _rff_problem(n, num_frequencies, seed=0):
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.normal(size=(n, 3)))
    y = jnp.sin(X[:, 0]) + 0.1 * jnp.asarray(rng.normal(size=n))
    params = kronvi.inputs.rff_init(jax.random.key(seed), jnp.ones(3), num_frequencies)
    return X, y, functools.partial(kronvi.inputs.rff_features, params)


@pytest.mark.parametrize("n", [12, 40])  # the dual (n < b = 24) and the primal route
def test_eigenbasis_from_inputs_is_the_eigendecomposition_of_the_dense_statistics(n):
    with jax.enable_x64(True):
        X, y, fmap = _rff_problem(n, 12)
        Phi, yy = np.asarray(fmap(X)), np.asarray(y)
        rotated, basis = kronvi.stats.eigenbasis_from_inputs(fmap, X, y)
        host = (rotated, basis)
        traced = jax.jit(lambda X, y: kronvi.stats.eigenbasis_from_inputs(fmap, X, y))(X, y)  # the XLA route
    b = Phi.shape[1]
    A = Phi.T @ Phi
    lam_ref = np.linalg.eigvalsh(A)
    for rotated, basis in (host, traced):
        V, lam = np.asarray(basis.vectors), np.asarray(basis.eigenvalues)
        assert V.shape == (b, b) and lam.shape == (b,)
        np.testing.assert_allclose(V.T @ V, np.eye(b), atol=1e-9)
        np.testing.assert_allclose(np.sort(lam), np.clip(lam_ref, 0, None), atol=1e-9 * lam_ref[-1])
        np.testing.assert_allclose(V @ np.diag(lam) @ V.T, A, atol=1e-9 * lam_ref[-1])
        np.testing.assert_allclose(
            V @ np.asarray(rotated.Phity), Phi.T @ yy, atol=1e-9 * np.abs(Phi.T @ yy).max()
        )
        np.testing.assert_allclose(np.asarray(rotated.PhitPhi), np.diag(lam), atol=0)
        assert float(rotated.n) == n and abs(float(rotated.yty) - yy @ yy) < 1e-9 * (yy @ yy)
        assert np.all(np.diff(lam) >= 0)  # ascending, as kronvi.stats.eigenbasis


def test_dual_null_space_in_float32_from_float64_inputs():
    """The pipeline's route: float64 statistics, the null space of the dual computed (and the basis
    returned) in float32. Same eigenvalues and rotated statistics as the float64 route; the basis is
    orthonormal, and its null part orthogonal to the rows of Phi, to float32's precision."""
    from kronvi._stats.eigen import eigenbasis_for_dtype

    with jax.enable_x64(True):
        X, y, fmap = _rff_problem(30, 40)  # n = 30 < b = 80
        ref_stats, ref = kronvi.stats.eigenbasis_from_inputs(fmap, X, y)
        stats, basis = eigenbasis_for_dtype(fmap, X, y, chunk_size=None, null_dtype=jnp.float32)
        Phi = np.asarray(fmap(X))
    assert basis.vectors.dtype == jnp.float32 and basis.eigenvalues.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(basis.eigenvalues), np.asarray(ref.eigenvalues))
    np.testing.assert_array_equal(np.asarray(stats.Phity), np.asarray(ref_stats.Phity))
    V = np.asarray(basis.vectors, np.float64)
    b, r = V.shape[0], int(np.sum(np.asarray(basis.eigenvalues) > 0))
    np.testing.assert_allclose(V.T @ V, np.eye(b), atol=1e-6)
    null = Phi @ V[:, : b - r]
    assert np.abs(null).max() < 1e-6 * np.abs(Phi).max() * np.sqrt(b)
    np.testing.assert_allclose(V[:, b - r :], np.asarray(ref.vectors)[:, b - r :], atol=1e-7)


def test_eigenbasis_from_inputs_keeps_the_working_dtype_and_checks_inputs():
    X, y, fmap = _rff_problem(10, 8)
    rotated, basis = kronvi.stats.eigenbasis_from_inputs(
        fmap, jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    )
    assert rotated.PhitPhi.dtype == basis.vectors.dtype == jnp.float32
    with pytest.raises(ValueError, match="`X` has 10 rows but `y` has 9"):
        kronvi.stats.eigenbasis_from_inputs(fmap, X, y[:9])
    with pytest.raises(ValueError, match="`X`"):
        kronvi.stats.eigenbasis_from_inputs(fmap, X.at[0, 0].set(jnp.nan), y)
