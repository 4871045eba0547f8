"""Quadratic-network statistics: dense reference, additivity over row chunks, named errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi
from kronvi.bnn import bnn_elbo, bnn_stats, merge_bnn_stats, predict_bnn, quadratic_net, stats_layer_sizes


def dense_stats(X, y, depth):
    Z = []
    for x in X:
        z = x
        for _ in range(depth):
            z = np.kron(z, z)
        Z.append(z)
    Z = np.array(Z)
    return len(y), y @ y, Z.T @ y, Z.T @ Z


@pytest.mark.parametrize("layer_sizes", [(3, 2, 1), (2, 2, 3, 1), (4, 1)])
def test_stats_match_dense_and_add_over_chunks(dtype, layer_sizes):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(23, layer_sizes[0])), rng.normal(size=23)
    ref = dense_stats(X, y, len(layer_sizes) - 2)
    Xj, yj = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
    whole = bnn_stats(Xj, yj, layer_sizes)
    chunked = bnn_stats(Xj, yj, layer_sizes, chunk_size=5)
    merged = merge_bnn_stats(bnn_stats(Xj[:9], yj[:9], layer_sizes), bnn_stats(Xj[9:], yj[9:], layer_sizes))
    rtol = 1e-10 if dtype == np.float64 else 2e-5
    for s in (whole, chunked, merged):
        assert s.zz.dtype == jnp.dtype(dtype)
        assert stats_layer_sizes(s) == layer_sizes
        for got, want in zip(s[:4], ref, strict=True):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.max(np.abs(want)))


def test_merge_refuses_different_networks():
    X, y = jnp.ones((4, 2)), jnp.ones(4)
    with pytest.raises(ValueError, match="different networks"):
        merge_bnn_stats(bnn_stats(X, y, (2, 2, 1)), bnn_stats(X, y, (2, 3, 1)))


BAD_SIZES = [(3,), (3, 2, 2), (3, 0, 1), (3, 2.5, 1), (True, 1), "abc", 5, (3, -1, 1)]


@pytest.mark.parametrize("sizes", BAD_SIZES)
def test_bad_layer_sizes_are_named(sizes):
    X, y = jnp.ones((4, 3)), jnp.ones(4)
    with pytest.raises(ValueError, match="layer_sizes"):
        quadratic_net(jnp.ones(8), X, sizes)
    with pytest.raises(ValueError, match="layer_sizes"):
        bnn_stats(X, y, sizes)


def test_mismatched_weights_and_inputs_are_named():
    X, y = jnp.ones((4, 3)), jnp.ones(4)
    with pytest.raises(ValueError, match="`w`"):
        quadratic_net(jnp.ones(7), X, (3, 2, 1))
    with pytest.raises(ValueError, match="`X`"):
        quadratic_net(jnp.ones(6), X, (2, 2, 1))
    with pytest.raises(ValueError, match="`X`"):
        bnn_stats(X, y, (2, 2, 1))
    stats = bnn_stats(X, y, (3, 2, 1))  # P = 8
    pw, pn = kronvi.model.gaussian_prior(7, 1.0, levels=3), kronvi.model.noise_prior(1.0, levels=3)
    qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
    with pytest.raises(ValueError, match="prior_w"):
        bnn_elbo(stats, qw, qn, pw, pn)
    pw8 = kronvi.model.gaussian_prior(8, 1.0, levels=3)
    with pytest.raises(ValueError, match="q_w"):
        bnn_elbo(stats, qw, qn, pw8, pn)
    with pytest.raises(ValueError, match="X_new"):
        predict_bnn(kronvi.model.MeanField.from_prior(pw8), qn, pw8, pn, jnp.ones((2, 2)), (3, 2, 1))
    with pytest.raises(ValueError, match="prior_w"):
        predict_bnn(qw, qn, pw, pn, X, (3, 2, 1))
    with pytest.raises(TypeError, match="stats"):
        bnn_elbo(kronvi.stats.regression_stats(X, y), qw, qn, pw8, pn)
    stacked = jax.tree.map(lambda *a: jnp.stack(a), stats, stats)
    with pytest.raises(ValueError, match="vmap"):
        bnn_elbo(stacked, kronvi.model.MeanField.from_prior(pw8), qn, pw8, pn)
