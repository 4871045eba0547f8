"""A Gaussian prior on posterior-placed grids: values, probabilities, and the exactness it buys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


def test_values_and_log_probs_follow_the_formula(dtype):
    center = jnp.asarray([0.5, -2.0], dtype)
    spread = jnp.asarray([0.1, 0.3], dtype)
    p = kronvi.model.posterior_grid_prior(center, spread, 1.5, levels=5, width=2.0)
    unit = np.linspace(-2.0, 2.0, 5)
    values = np.asarray(center, np.float64)[:, None] + np.asarray(spread, np.float64)[:, None] * unit
    lp = -0.5 * (values / 1.5) ** 2
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    atol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(p.values, values, atol=atol)
    np.testing.assert_allclose(p.log_probs, lp, atol=atol * 10)
    assert p.values.dtype == dtype


def test_mean_field_in_the_eigenbasis_matches_the_exact_posterior(dtype):
    # Correlated features, noise fixed: in the eigenbasis with posterior grids the discrete mean field is
    # the exact Gaussian posterior quantized, so its predictive mean and variance match exact BLR closely.
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(300, 6))
    Phi = Z @ (np.eye(6) + 0.9 * rng.normal(size=(6, 6)))
    y = Phi @ rng.normal(size=6) + 0.3 * rng.normal(size=300)
    Phi, y = jnp.asarray(Phi, dtype), jnp.asarray(y, dtype)
    stats = kronvi.stats.regression_stats(Phi, y)
    s2, sw = 0.09, 1.0
    rotated, basis = kronvi.stats.eigenbasis(stats)
    prec = basis.eigenvalues / s2 + 1.0 / sw**2
    mean_u = rotated.Phity / s2 / prec
    prior_w = kronvi.model.posterior_grid_prior(mean_u, 1.0 / jnp.sqrt(prec), sw, levels=15, width=4.0)
    prior_n = kronvi.model.DiscretePrior(jnp.asarray([[s2]], dtype), jnp.zeros((1, 1), dtype))
    q_w, q_n, _ = kronvi.fitting.fit_regression(rotated, prior_w, prior_n, init="gaussian")
    Pn = jnp.asarray(rng.normal(size=(20, 6)) @ rng.normal(size=(6, 6)), dtype)
    m, v = kronvi.model.predict_regression(
        q_w, q_n, prior_w, prior_n, kronvi.stats.rotate_features(basis, Pn)
    )
    m_ref, v_ref = kronvi.gaussian.predict_blr(*kronvi.gaussian.blr_posterior(stats, sw, s2), s2, Pn)
    sd = np.sqrt(np.asarray(v_ref, np.float64))
    assert np.max(np.abs(np.asarray(m, np.float64) - np.asarray(m_ref, np.float64)) / sd) < 0.02
    np.testing.assert_allclose(v, v_ref, rtol=0.02)
    # The original basis with a fixed ±3 sd grid is far off on the same problem (the test can fail).
    prior_fixed = kronvi.model.gaussian_prior(6, sw)
    q_f, q_nf, _ = kronvi.fitting.fit_regression(stats, prior_fixed, prior_n, init="gaussian")
    m_f, _ = kronvi.model.predict_regression(q_f, q_nf, prior_fixed, prior_n, Pn)
    assert np.max(np.abs(np.asarray(m_f, np.float64) - np.asarray(m_ref, np.float64)) / sd) > 0.1


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="spread"):
        kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.zeros(2), 1.0)
    with pytest.raises(ValueError, match="levels"):
        kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), 1.0, levels=2.5)
    with pytest.raises(ValueError, match="width"):
        kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), 1.0, width=-1.0)
    with pytest.raises(ValueError, match="width"):  # not an error about the grid it would build
        kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), 1.0, width=float("inf"))
    # NumPy scalars are numbers too: the same grid as from the Python float.
    p32 = kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), 1.0, width=np.float32(3.0))
    np.testing.assert_array_equal(
        p32.values, kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), 1.0, width=3.0).values
    )
    with pytest.raises(ValueError, match="prior_scale"):
        kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), jnp.ones(3))
    with pytest.raises(ValueError, match="center"):
        kronvi.model.posterior_grid_prior(jnp.asarray([0.0, jnp.nan]), jnp.ones(2), 1.0)
    # finite arguments whose grid is not: levels beyond float32, or a scale that sends their log-probabilities
    # to -inf
    with pytest.raises(ValueError, match="`spread` overflows"):
        kronvi.model.posterior_grid_prior(jnp.full(2, 3e38), jnp.full(2, 1e38), 1.0)
    with pytest.raises(ValueError, match="`prior_scale` is too small"):
        kronvi.model.posterior_grid_prior(jnp.zeros(2), jnp.ones(2), 1e-30)


def test_log_probs_are_the_normalized_gaussian_on_the_levels():
    """The grid's log-probabilities, normalized by `posterior_grid_prior` itself (`DiscretePrior` no longer
    normalizes them again), equal the Gaussian's on the levels as `DiscretePrior` normalizes them."""
    with jax.enable_x64(True):
        p = kronvi.model.posterior_grid_prior(jnp.array([0.3, -2.0]), jnp.array([0.5, 0.1]), 1.5, levels=7)
        ref = kronvi.model.DiscretePrior(p.values, -0.5 * (p.values / 1.5) ** 2)
        np.testing.assert_allclose(p.log_probs, ref.log_probs, rtol=1e-14)
        np.testing.assert_allclose(np.exp(p.log_probs).sum(-1), 1.0, rtol=1e-14)
