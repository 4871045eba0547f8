"""The exact quadratic-network ELBO against enumeration of every weight and noise configuration."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import kronvi
from kronvi.bnn import bnn_elbo, bnn_expected_rss, bnn_stats, num_weights, quadratic_net

# (layer_sizes, levels): one hidden layer, two and three hidden layers, and no hidden layer (linear)
CASES = [
    ((2, 2, 1), 3),
    ((2, 1, 1, 1), 3),
    ((1, 2, 1, 1), 3),
    ((2, 2, 2, 1), 2),
    ((3, 1), 3),
    ((1, 1, 1, 1, 1), 2),
]


def net_np(w, X, layer_sizes):
    """quadratic_net written as loops over units (float64 NumPy)."""
    out = []
    for x in X:
        z, o = list(x), 0
        for layer, (a, b) in enumerate(zip(layer_sizes[:-1], layer_sizes[1:], strict=True)):
            W = [[w[o + r * a + c] for c in range(a)] for r in range(b)]
            o += a * b
            pre = [sum(W[r][c] * z[c] for c in range(a)) for r in range(b)]
            z = pre if layer == len(layer_sizes) - 2 else [p * p for p in pre]
        out.append(z[0])
    return np.array(out)


def problem(layer_sizes, m, seed, n=6, ms=3):
    rng = np.random.default_rng(seed)
    d, P = layer_sizes[0], num_weights(layer_sizes)
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n)
    values = np.sort(rng.normal(size=(P, m)), axis=-1)
    log_prior = np.log(rng.dirichlet(np.ones(m), size=P))
    q_logits = rng.normal(size=(P, m))
    noise_vals = np.sort(rng.uniform(0.2, 3.0, size=ms))[None]
    log_prior_n = np.log(rng.dirichlet(np.ones(ms)))[None]
    qn_logits = rng.normal(size=(1, ms))
    return X, y, values, log_prior, q_logits, noise_vals, log_prior_n, qn_logits


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def brute_force(layer_sizes, X, y, values, log_prior, q_logits, noise_vals, log_prior_n, qn_logits):
    P, m = values.shape
    qw, qn = softmax(q_logits), softmax(qn_logits)[0]
    total = 0.0
    rows = np.arange(P)
    n = len(y)
    for cfg in itertools.product(range(m), repeat=P):
        cfg = np.array(cfg)
        w = values[rows, cfg]
        rss = np.sum((y - net_np(w, X, layer_sizes)) ** 2)
        qc = np.prod(qw[rows, cfg])
        base = log_prior[rows, cfg].sum() - np.log(qw[rows, cfg]).sum()
        for s, qs, lps in zip(noise_vals[0], qn, log_prior_n[0], strict=True):
            ll = -0.5 * n * np.log(2 * np.pi * s) - 0.5 * rss / s
            total += qc * qs * (ll + base + lps - np.log(qs))
    return total


def kronvi_objects(values, log_prior, q_logits, noise_vals, log_prior_n, qn_logits):
    pw = kronvi.model.DiscretePrior(jnp.asarray(values), jnp.asarray(log_prior))
    pn = kronvi.model.DiscretePrior(jnp.asarray(noise_vals), jnp.asarray(log_prior_n))
    return (
        pw,
        pn,
        kronvi.model.MeanField(jnp.asarray(q_logits)),
        kronvi.model.MeanField(jnp.asarray(qn_logits)),
    )


def test_quadratic_net_matches_loops():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for sizes in [(3, 4, 1), (2, 3, 2, 1), (3, 1), (1, 2, 2, 2, 1)]:
            w = rng.normal(size=num_weights(sizes))
            X = rng.normal(size=(5, sizes[0]))
            np.testing.assert_allclose(quadratic_net(w, X, sizes), net_np(w, X, sizes), rtol=1e-12)


@pytest.mark.parametrize("layer_sizes,m", CASES)
def test_elbo_equals_enumeration(layer_sizes, m):
    with jax.enable_x64(True):
        X, y, *rest = problem(layer_sizes, m, seed=len(layer_sizes) + m)
        ref = brute_force(layer_sizes, X, y, *rest)
        pw, pn, q, qn = kronvi_objects(*rest)
        stats = bnn_stats(jnp.asarray(X), jnp.asarray(y), layer_sizes)
        got = float(jax.jit(bnn_elbo)(stats, q, qn, pw, pn))
        assert abs(got - ref) <= 1e-9 * abs(ref), (got, ref)


def test_closed_form_matches_expansion():
    """The one-hidden-layer closed form against the general monomial expansion (not used for L = 1)."""
    from kronvi.bnn._elbo import general_fit_terms, one_hidden_fit_terms

    with jax.enable_x64(True):
        sizes = (3, 4, 1)
        X, y, values, log_prior, q_logits, *_ = problem(sizes, 5, seed=3, n=9)
        stats = bnn_stats(jnp.asarray(X), jnp.asarray(y), sizes)
        probs, v = jnp.asarray(softmax(q_logits)), jnp.asarray(values)
        a = jax.jit(one_hidden_fit_terms, static_argnums=(4, 5))(probs, v, stats.yz, stats.zz, 3, 4)
        b = jax.jit(general_fit_terms, static_argnums=4)(probs, v, stats.yz, stats.zz, sizes)
        np.testing.assert_allclose(a, b, rtol=1e-11)


def test_float32_close_to_float64():
    sizes = (3, 5, 1)
    X, y, *rest = problem(sizes, 5, seed=7, n=40)
    with jax.enable_x64(True):
        pw, pn, q, qn = kronvi_objects(*rest)
        ref = float(bnn_elbo(bnn_stats(jnp.asarray(X), jnp.asarray(y), sizes), q, qn, pw, pn))
    with jax.enable_x64(False):
        pw, pn, q, qn = kronvi_objects(*(np.asarray(a, np.float32) for a in rest))
        stats = bnn_stats(jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32), sizes)
        got = jax.jit(bnn_elbo)(stats, q, qn, pw, pn)
        assert got.dtype == jnp.float32
        assert abs(float(got) - ref) <= 1e-4 * abs(ref)


@pytest.mark.parametrize("layer_sizes", [(2, 3, 1), (2, 1, 2, 1)])
def test_gradient_matches_finite_differences(layer_sizes):
    with jax.enable_x64(True):
        X, y, values, log_prior, q_logits, noise_vals, log_prior_n, qn_logits = problem(
            layer_sizes, 3, seed=11
        )
        pw, pn, _, _ = kronvi_objects(values, log_prior, q_logits, noise_vals, log_prior_n, qn_logits)
        stats = bnn_stats(jnp.asarray(X), jnp.asarray(y), layer_sizes)

        @jax.jit
        def f(lw, ln):
            return bnn_elbo(
                stats, kronvi.model.MeanField._unchecked(lw), kronvi.model.MeanField._unchecked(ln), pw, pn
            )

        check_grads(f, (jnp.asarray(q_logits), jnp.asarray(qn_logits)), order=1, modes=["rev"],
                                  eps=1e-6, atol=1e-6, rtol=1e-6)  # fmt: skip


def test_expected_rss_is_exact_at_a_point_mass():
    with jax.enable_x64(True):
        sizes = (2, 3, 1)
        rng = np.random.default_rng(5)
        X, y = rng.normal(size=(10, 2)), rng.normal(size=10)
        w = rng.normal(size=num_weights(sizes))
        values = np.stack([w, w + 1.0], axis=1)
        pw = kronvi.model.DiscretePrior(jnp.asarray(values), jnp.zeros(values.shape))
        q = kronvi.model.MeanField(jnp.asarray(np.stack([np.zeros_like(w), np.full_like(w, -60.0)], axis=1)))
        rss = bnn_expected_rss(bnn_stats(jnp.asarray(X), jnp.asarray(y), sizes), q, pw)
        np.testing.assert_allclose(rss, np.sum((y - net_np(w, X, sizes)) ** 2), rtol=1e-10)
