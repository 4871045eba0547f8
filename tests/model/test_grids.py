import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


@pytest.mark.parametrize("levels", [3, 7, 15, 31])
def test_gaussian_prior_grid_is_symmetric_with_an_exact_zero(dtype, levels):
    p = kronvi.model.gaussian_prior(4, 0.7, levels=levels, width=3.0, dtype=dtype)
    v = np.asarray(p.values)
    assert v.dtype == np.dtype(dtype)
    assert np.all(v[:, levels // 2] == 0.0)  # a float32 linspace leaves ~1e-8 here
    np.testing.assert_array_equal(v, -v[:, ::-1])
    np.testing.assert_allclose(v[0, [0, -1]], [-2.1, 2.1], rtol=1e-6)
    # probabilities proportional to the Gaussian density at the grid points
    ref = np.exp(-0.5 * (v[0] / 0.7) ** 2)
    np.testing.assert_allclose(np.asarray(p.probs[0]), ref / ref.sum(), rtol=1e-5)
    # the expected sparsity of q = prior is the prior's mass on the zero level
    q = kronvi.model.MeanField.from_prior(p)
    np.testing.assert_allclose(
        float(kronvi.model.expected_sparsity(q, p)), ref[levels // 2] / ref.sum(), rtol=1e-5
    )


def test_noise_prior_grid_is_log_spaced_around_the_estimate(dtype):
    p = kronvi.model.noise_prior(0.5, levels=5, span=100.0, dtype=dtype)
    v = np.asarray(p.values[0], np.float64)
    np.testing.assert_allclose(v, 0.5 * np.logspace(-2, 2, 5), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(p.probs), np.full((1, 5), 0.2), rtol=1e-6)
    assert p.values.shape == (1, 5) and jnp.all(p.values > 0)


def test_priors_honour_dtype_with_x64_on():
    with jax.enable_x64(True):
        for dt in (jnp.float32, jnp.float16, jnp.float64):
            assert kronvi.model.noise_prior(0.5, dtype=dt).values.dtype == dt
            assert kronvi.model.noise_prior(0.5, levels=1, dtype=dt).values.dtype == dt
            assert kronvi.model.gaussian_prior(3, 0.5, dtype=dt).values.dtype == dt
        assert kronvi.model.noise_prior(jnp.float32(0.5)).values.dtype == jnp.float32
        with pytest.raises(TypeError, match="`dtype` must be a floating dtype"):
            kronvi.model.noise_prior(0.5, dtype=jnp.int32)


@pytest.mark.parametrize("bad", [2.7, 3.0, True, "15"])
def test_levels_must_be_an_int(bad):
    with pytest.raises(ValueError, match="`levels` must be an int"):
        kronvi.model.gaussian_prior(3, 1.0, levels=bad)
    with pytest.raises(ValueError, match="`levels` must be an int"):
        kronvi.model.noise_prior(1.0, levels=bad)
    with pytest.raises(ValueError, match="`num_weights` must be an int"):
        kronvi.model.gaussian_prior(bad, 1.0)


def test_levels_lower_bounds():
    # gaussian_prior spaces its grid by (levels - 1) / 2: one level would divide by zero
    with pytest.raises(ValueError, match="`levels` must be an int >= 2"):
        kronvi.model.gaussian_prior(3, 1.0, levels=1)
    with pytest.raises(ValueError, match="`levels` must be an int >= 1"):
        kronvi.model.noise_prior(1.0, levels=0)
    with pytest.raises(ValueError, match="`num_weights` must be an int >= 1"):
        kronvi.model.gaussian_prior(0, 1.0)
    # even grids are symmetric, with no zero level
    v = np.asarray(kronvi.model.gaussian_prior(2, 1.0, levels=4).values)
    np.testing.assert_allclose(v, -v[:, ::-1])
    assert np.all(v != 0)
    assert kronvi.model.noise_prior(2.0, levels=np.int64(1)).values.tolist() == [[2.0]]
