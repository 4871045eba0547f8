"""Shared fixtures: both precisions, dtype-dependent tolerances, brute-force references."""

import itertools

import jax
import numpy as np
import pytest


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """Runs a test in float32 (x64 off) and float64 (x64 on)."""
    if request.param == "float64":
        with jax.enable_x64(True):
            yield np.float64
    else:
        with jax.enable_x64(False):
            yield np.float32


def tol(dtype, *, x32=2e-5, x64=1e-10):
    """Relative tolerance for comparing kronvi (in ``dtype``) against a float64 reference."""
    return x64 if np.dtype(dtype) == np.float64 else x32


def enumerate_configs(b, m):
    """All m**b configurations in jnp.kron order (factor 0 slowest), shape (m**b, b)."""
    return np.array(list(itertools.product(range(m), repeat=b)), dtype=int).reshape(-1, b)


def brute_force_elbo(Phi, y, values, log_prior, q_w, noise_vals, log_prior_n, q_n):
    """ELBO by summing over every (weight configuration, noise level), straight from the data."""
    Phi, y = np.asarray(Phi, np.float64), np.asarray(y, np.float64)
    b, m = values.shape
    n = len(y)
    cfg = enumerate_configs(b, m)
    rows = np.arange(b)
    W = values[rows, cfg]  # (C, b)
    log_q = np.log(q_w)[rows, cfg].sum(-1)
    log_p = log_prior[rows, cfg].sum(-1)
    rss = ((y[None, :] - W @ Phi.T) ** 2).sum(-1)  # (C,)
    total = 0.0
    for s, qs, lps in zip(noise_vals, q_n, log_prior_n, strict=True):
        ll = -0.5 * n * np.log(2 * np.pi * s) - 0.5 * rss / s
        term = ll + log_p + lps - log_q - np.log(qs)
        total += qs * np.sum(np.exp(log_q) * term)
    return total


def random_problem(rng, *, n=7, b=3, m=3, ms=3, dtype=np.float64):
    """A tiny regression problem with its own grids, a random prior and a random q."""
    Phi = rng.normal(size=(n, b))
    y = Phi @ rng.normal(size=b) + 0.3 * rng.normal(size=n)
    values = np.sort(rng.normal(size=(b, m)), axis=-1)
    values[:, m // 2] = 0.0
    log_prior = np.log(rng.dirichlet(np.ones(m), size=b))
    q_logits = rng.normal(size=(b, m))
    noise_vals = np.sort(rng.uniform(0.05, 2.0, size=ms))[None]
    log_prior_n = np.log(rng.dirichlet(np.ones(ms)))[None]
    qn_logits = rng.normal(size=(1, ms))
    return dict(
        Phi=Phi.astype(dtype),
        y=y.astype(dtype),
        values=values,
        log_prior=log_prior,
        q_logits=q_logits,
        noise_vals=noise_vals,
        log_prior_n=log_prior_n,
        qn_logits=qn_logits,
    )


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
