"""Exact predictive probabilities against enumeration of every configuration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from logistic.reference import predictive

import kronvi
import kronvi.logistic as kl


def problem(dtype, b=3, m=5, n=6, scale=1.0, seed=0):
    k = jax.random.split(jax.random.key(seed), 2)
    prior = kronvi.model.gaussian_prior(b, 1.0, levels=m, dtype=dtype)
    q = kronvi.model.MeanField(2.0 * jax.random.normal(k[0], (b, m), dtype))
    Phi = scale * jax.random.normal(k[1], (n, b), dtype)
    return q, prior, Phi


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_matches_enumeration(dtype, scale):
    q, prior, Phi = problem(dtype, scale=scale)
    p, err = kl.predict_logistic(q, prior, Phi, with_error_bound=True)
    assert p.dtype == dtype and p.shape == (6,)
    exact = predictive(q.probs, prior.values, Phi)
    tol = 2e-6 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(p, exact, atol=tol)
    assert np.all(np.asarray(err) < (1e-7 if dtype == np.float32 else 1e-12))


@pytest.mark.parametrize("scale", [1e3, 1e4, 1e6, 1e30])
def test_large_margins_match_enumeration(dtype, scale):
    """Beyond |Phi w| ~ 1e3 the capped quadrature missed its bound (error 0.006 with bound inf at 1e4)
    and its step underflowed to 0 at 1e6 (all NaN). Those points are now summed over every
    configuration: exact at any margin, up to the large-margin limit, the q-mass of the sign."""
    q, prior, Phi = problem(dtype, scale=scale)
    p, err = kl.predict_logistic(q, prior, Phi, with_error_bound=True)
    np.testing.assert_allclose(
        p, predictive(q.probs, prior.values, Phi), atol=2e-6 if dtype == np.float32 else 1e-11
    )
    assert np.all(np.asarray(err) <= (1e-7 if dtype == np.float32 else 1e-13))


def test_large_margins_with_many_configurations_warn_and_stay_finite():
    """5**7 configurations are too many to sum: the capped quadrature is returned with a warning; it
    approaches the q-mass of the sign (within 2.2e-4 of the enumeration for 4 seeds and margins 1e3 to 1e6)."""
    q, prior, Phi = problem(np.float32, b=7, n=4, scale=1e4, seed=1)
    with pytest.warns(RuntimeWarning, match=r"^predict_logistic: \d of 4 probabilities have error bounds"):
        p, err = kl.predict_logistic(q, prior, Phi, with_error_bound=True)
    assert np.all(np.isfinite(np.asarray(p))) and np.all(np.asarray(err) <= 1.0)
    np.testing.assert_allclose(p, predictive(q.probs, prior.values, Phi), atol=1e-3)


def test_error_bound_holds_with_few_nodes():
    """With deliberately few nodes the stated bound still covers the actual error."""
    with jax.enable_x64(True):
        q, prior, Phi = problem(np.float64, scale=3.0)
        exact = predictive(q.probs, prior.values, Phi)
        for nodes in (2, 4, 8):
            p, err = kl.predict_logistic(q, prior, Phi, num_nodes=nodes, with_error_bound=True)
            assert np.all(np.abs(np.asarray(p) - exact) <= np.asarray(err) + 1e-14)


def test_point_mass_is_sigmoid(dtype):
    q, prior, Phi = problem(dtype)
    onehot = jnp.where(jnp.arange(5)[None, :] == jnp.array([[0], [4], [2]]), 0.0, -60.0).astype(dtype)
    w = prior.values[jnp.arange(3), jnp.array([0, 4, 2])]
    p = kl.predict_logistic(kronvi.model.MeanField(onehot), prior, Phi)
    np.testing.assert_allclose(p, jax.nn.sigmoid(Phi @ w), atol=2e-6)


def test_chunks_jit_and_vmap(dtype):
    q, prior, Phi = problem(dtype, n=7)
    ref = kl.predict_logistic(q, prior, Phi)
    np.testing.assert_allclose(kl.predict_logistic(q, prior, Phi, chunk_size=3), ref, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(kl.predict_logistic)(q, prior, Phi), ref, rtol=1e-6)
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), q)
    out = jax.vmap(kl.predict_logistic, in_axes=(0, None, None))(stacked, prior, Phi)
    np.testing.assert_allclose(out[1], ref, rtol=1e-6)


def test_bad_inputs_are_named():
    q, prior, Phi = problem(np.float32)
    with pytest.raises(ValueError, match="`Phi_new`"):
        kl.predict_logistic(q, prior, Phi[:, :2])
    with pytest.raises(ValueError, match="`num_nodes`"):
        kl.predict_logistic(q, prior, Phi, num_nodes=0)


@pytest.mark.parametrize("even", [True, False])
def test_even_and_uneven_grids_match_enumeration(dtype, even):
    """Even grids (every grid kronvi builds) take Horner's rule over the levels; off-centre posterior-placed
    grids and uneven ones (the general path) match enumeration alike."""
    rng = np.random.default_rng(3)
    centre, spread = rng.normal(size=(3, 1)) * 5.0, rng.uniform(0.2, 1.0, size=(3, 1))
    values = centre + spread * np.linspace(-4.0, 4.0, 5)
    if not even:
        values = values + rng.uniform(-0.1, 0.1, size=values.shape)
    prior = kronvi.model.DiscretePrior(
        jnp.asarray(values, dtype), jnp.asarray(rng.normal(size=(3, 5)), dtype)
    )
    assert kl._predict.is_even_grid(prior.values) == even
    q = kronvi.model.MeanField(jnp.asarray(2.0 * rng.normal(size=(3, 5)), dtype))
    Phi = jnp.asarray(rng.normal(size=(6, 3)) * 0.3, dtype)
    p = kl.predict_logistic(q, prior, Phi)
    np.testing.assert_allclose(
        p, predictive(q.probs, prior.values, Phi), atol=4e-6 if dtype == np.float32 else 1e-11
    )
