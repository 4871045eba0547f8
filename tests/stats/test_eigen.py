"""The eigenbasis statistics are the statistics of the rotated features."""

import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


def test_rotated_stats_equal_the_stats_of_rotated_features(dtype):
    rng = np.random.default_rng(0)
    Phi = jnp.asarray(rng.normal(size=(60, 4)), dtype)
    y = jnp.asarray(rng.normal(size=60), dtype)
    stats = kronvi.regression_stats(Phi, y)
    rotated, basis = kronvi.eigenbasis(stats)
    direct = kronvi.regression_stats(kronvi.rotate_features(basis, Phi), y)
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
    stats = kronvi.regression_stats(Phi, y)
    rotated, basis = kronvi.eigenbasis(stats)
    Pn = jnp.asarray(rng.normal(size=(7, 5)), dtype)
    m1, v1 = kronvi.predict_blr(*kronvi.blr_posterior(stats, 1.0, 0.5), 0.5, Pn)
    m2, v2 = kronvi.predict_blr(*kronvi.blr_posterior(rotated, 1.0, 0.5), 0.5, kronvi.rotate_features(basis, Pn))
    rtol = 1e-9 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(m1, m2, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(v1, v2, rtol=rtol)


def test_rotate_features_checks_its_arguments():
    stats = kronvi.regression_stats(jnp.eye(3), jnp.ones(3))
    _, basis = kronvi.eigenbasis(stats)
    with pytest.raises(ValueError, match="Phi"):
        kronvi.rotate_features(basis, jnp.ones((2, 4)))
    with pytest.raises(TypeError, match="basis"):
        kronvi.rotate_features(jnp.eye(3), jnp.ones((2, 3)))
