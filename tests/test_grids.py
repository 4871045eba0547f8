import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


@pytest.mark.parametrize("levels", [3, 7, 15, 31])
def test_gaussian_prior_grid_is_symmetric_with_an_exact_zero(dtype, levels):
    p = kronvi.gaussian_prior(4, 0.7, levels=levels, width=3.0, dtype=dtype)
    v = np.asarray(p.values)
    assert v.dtype == np.dtype(dtype)
    assert np.all(v[:, levels // 2] == 0.0)  # a float32 linspace leaves ~1e-8 here
    np.testing.assert_array_equal(v, -v[:, ::-1])
    np.testing.assert_allclose(v[0, [0, -1]], [-2.1, 2.1], rtol=1e-6)
    # probabilities proportional to the Gaussian density at the grid points
    ref = np.exp(-0.5 * (v[0] / 0.7) ** 2)
    np.testing.assert_allclose(np.asarray(p.probs[0]), ref / ref.sum(), rtol=1e-5)
    # the expected sparsity of q = prior is the prior's mass on the zero level
    q = kronvi.MeanField.from_prior(p)
    np.testing.assert_allclose(float(kronvi.expected_sparsity(q, p)), ref[levels // 2] / ref.sum(), rtol=1e-5)


def test_noise_prior_grid_is_log_spaced_around_the_estimate(dtype):
    p = kronvi.noise_prior(0.5, levels=5, span=100.0, dtype=dtype)
    v = np.asarray(p.values[0], np.float64)
    np.testing.assert_allclose(v, 0.5 * np.logspace(-2, 2, 5), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(p.probs), np.full((1, 5), 0.2), rtol=1e-6)
    assert p.values.shape == (1, 5) and jnp.all(p.values > 0)
