"""REINFORCE gradients of the regression ELBO: the log joint against the data, the estimator's exact
expectation (every configuration, or every pair of draws, weighted by q) against jax.grad of the exact ELBO,
a Monte Carlo check of the sampling path, and named errors."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_problem, softmax, tol

import kronvi
from kronvi._fit.reinforce import (
    ReinforceInfo,
    regression_log_joint,
    reinforce_gradient,
    reinforce_gradient_from_draws,
    sample_mean_field,
)


def _setup(dtype, *, b=2, m=3, ms=2, seed=0):
    p = random_problem(np.random.default_rng(seed), n=6, b=b, m=m, ms=ms, dtype=dtype)
    cast = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    stats = kronvi.stats.regression_stats(cast(p["Phi"]), cast(p["y"]))
    prior_w = kronvi.model.DiscretePrior(cast(p["values"]), cast(p["log_prior"]))
    prior_n = kronvi.model.DiscretePrior(cast(p["noise_vals"]), cast(p["log_prior_n"]))
    q_w, q_n = kronvi.model.MeanField(cast(p["q_logits"])), kronvi.model.MeanField(cast(p["qn_logits"]))
    return p, stats, prior_w, prior_n, q_w, q_n


def _exact_grad(q_w, q_n, prior_w, prior_n, stats):
    def elbo(lw, ln):
        return kronvi.model.regression_elbo(
            stats, kronvi.model.MeanField(lw), kronvi.model.MeanField(ln), prior_w, prior_n
        )

    return jax.grad(elbo, argnums=(0, 1))(q_w.logits, q_n.logits)


def _configs(b, m, ms):
    """Every (weight levels, noise level) configuration: ``(C, b)`` and ``(C,)``."""
    cfg = np.array(list(itertools.product(range(m), repeat=b) if b else [()]), dtype=np.int32)
    idx_w = np.repeat(cfg, ms, axis=0)
    idx_n = np.tile(np.arange(ms, dtype=np.int32), len(cfg))
    return idx_w, idx_n


def _log_q(p, idx_w, idx_n):
    rows = np.arange(idx_w.shape[-1])
    return np.log(softmax(p["q_logits"]))[rows, idx_w].sum(-1) + np.log(softmax(p["qn_logits"]))[0, idx_n]


def test_log_joint_matches_the_data(dtype):
    p, stats, prior_w, prior_n, *_ = _setup(dtype, b=3)
    idx_w, idx_n = _configs(3, 3, 2)
    got = regression_log_joint(stats, jnp.asarray(idx_w), jnp.asarray(idx_n), prior_w, prior_n)
    assert got.dtype == dtype
    Phi, y = p["Phi"].astype(np.float64), p["y"].astype(np.float64)
    W = p["values"][np.arange(3), idx_w]
    s = p["noise_vals"][0, idx_n]
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    want = (
        -0.5 * len(y) * np.log(2 * np.pi * s)
        - 0.5 * rss / s
        + p["log_prior"][np.arange(3), idx_w].sum(-1)
        + p["log_prior_n"][0, idx_n]
    )
    np.testing.assert_allclose(got, want, rtol=tol(dtype, x32=1e-5, x64=1e-12))


@pytest.mark.parametrize(("baseline", "exact_entropy"), [(None, False), (3.7, True)])
def test_one_draw_is_unbiased_exactly(baseline, exact_entropy):
    """Sum over every configuration x of q(x) * estimate(x) equals the exact gradient (S = 1)."""
    with jax.enable_x64(True):
        p, stats, prior_w, prior_n, q_w, q_n = _setup(np.float64)
        idx_w, idx_n = _configs(2, 3, 2)

        def one(iw, i_n):
            (gw, gn), info = reinforce_gradient_from_draws(
                iw[None], i_n[None], stats, q_w, q_n, prior_w, prior_n,
                baseline=baseline, exact_entropy=exact_entropy,
            )  # fmt: skip
            return gw, gn, info.elbo

        gw, gn, est = jax.vmap(one)(jnp.asarray(idx_w), jnp.asarray(idx_n))
        weights = np.exp(_log_q(p, idx_w, idx_n))
        assert weights.sum() == pytest.approx(1.0, rel=1e-12)
        want_w, want_n = _exact_grad(q_w, q_n, prior_w, prior_n, stats)
        np.testing.assert_allclose(np.einsum("c,cbk->bk", weights, gw), want_w, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.einsum("c,cbk->bk", weights, gn), want_n, rtol=1e-10, atol=1e-10)
        elbo = kronvi.model.regression_elbo(stats, q_w, q_n, prior_w, prior_n)
        assert float(weights @ est) == pytest.approx(float(elbo), rel=1e-12)
        # The estimate is random (it can fail): a single draw is far from the mean.
        assert np.max(np.abs(gw - np.asarray(want_w)[None])) > 1e-2


def test_leave_one_out_pairs_are_unbiased_exactly():
    """Sum over every pair of draws of q(x1) q(x2) * estimate(x1, x2) equals the exact gradient (S = 2)."""
    with jax.enable_x64(True):
        p, stats, prior_w, prior_n, q_w, q_n = _setup(np.float64, seed=1)
        idx_w, idx_n = _configs(2, 3, 2)
        C = len(idx_n)
        a, b = np.repeat(np.arange(C), C), np.tile(np.arange(C), C)
        pair_w = np.stack([idx_w[a], idx_w[b]], 1)  # (C*C, 2, b)
        pair_n = np.stack([idx_n[a], idx_n[b]], 1)

        def two(iw, i_n):
            (gw, gn), _ = reinforce_gradient_from_draws(
                iw,
                i_n,
                stats,
                q_w,
                q_n,
                prior_w,
                prior_n,
                baseline="leave-one-out",
            )
            return gw, gn

        gw, gn = jax.vmap(two)(jnp.asarray(pair_w), jnp.asarray(pair_n))
        lq = _log_q(p, idx_w, idx_n)
        weights = np.exp(lq[a] + lq[b])
        want_w, want_n = _exact_grad(q_w, q_n, prior_w, prior_n, stats)
        np.testing.assert_allclose(np.einsum("c,cbk->bk", weights, gw), want_w, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.einsum("c,cbk->bk", weights, gn), want_n, rtol=1e-10, atol=1e-10)


def test_sampled_gradient_averages_to_the_exact_gradient():
    """The sampling path: 400 independent estimates of 50 draws each; their mean is within 5 standard
    errors of jax.grad of the exact ELBO in every coordinate, and so is the ELBO estimate (float64; float32
    runs in test_info_and_jit_without_retrace)."""
    with jax.enable_x64(True):
        _, stats, prior_w, prior_n, q_w, q_n = _setup(np.float64, seed=2)
        keys = jax.random.split(jax.random.key(0), 400)

        @jax.jit
        @jax.vmap
        def estimate(key):
            (gw, gn), info = reinforce_gradient(
                key, stats, q_w, q_n, prior_w, prior_n, num_samples=50, baseline="leave-one-out"
            )
            return gw, gn, info.elbo

        gw, gn, est = estimate(keys)
        assert gw.dtype == np.float64
        want_w, want_n = _exact_grad(q_w, q_n, prior_w, prior_n, stats)
        elbo = kronvi.model.regression_elbo(stats, q_w, q_n, prior_w, prior_n)
        for got, want in ((gw, want_w), (gn, want_n), (est, elbo)):
            got = np.asarray(got)
            se = got.std(0, ddof=1) / np.sqrt(got.shape[0])
            assert np.all(np.abs(got.mean(0) - np.asarray(want)) <= 5 * se + 1e-9)


def test_sampler_draws_from_q():
    q = kronvi.model.MeanField(jnp.log(jnp.array([[0.2, 0.5, 0.3], [0.9, 0.05, 0.05]])))
    idx = np.asarray(sample_mean_field(jax.random.key(3), q, num_samples=20000))
    freq = np.stack([np.bincount(idx[:, j], minlength=3) for j in range(2)]) / 20000
    np.testing.assert_allclose(freq, np.asarray(q.probs), atol=0.015)


def test_info_and_jit_without_retrace():
    _, stats, prior_w, prior_n, q_w, q_n = _setup(np.float32)
    f = jax.jit(
        lambda k, q: reinforce_gradient(
            k, stats, q, q_n, prior_w, prior_n, num_samples=4, baseline="leave-one-out"
        )
    )
    (gw, gn), info = f(jax.random.key(0), q_w)
    assert isinstance(info, ReinforceInfo) and np.isfinite(info.stderr)
    assert gw.shape == (2, 3) and gn.shape == (1, 2)
    assert gw.dtype == np.float32 and gn.dtype == np.float32 and info.elbo.dtype == np.float32
    f(jax.random.key(1), q_w)
    assert f._cache_size() == 1
    _, info1 = reinforce_gradient(jax.random.key(0), stats, q_w, q_n, prior_w, prior_n, num_samples=1)
    assert np.isnan(info1.stderr)


def test_bad_input_gets_named_errors():
    _, stats, prior_w, prior_n, q_w, q_n = _setup(np.float32)
    args = (stats, q_w, q_n, prior_w, prior_n)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="num_samples"):
        reinforce_gradient(key, *args, num_samples=0)
    with pytest.raises(ValueError, match="leave-one-out.*num_samples"):
        reinforce_gradient(key, *args, num_samples=1, baseline="leave-one-out")
    with pytest.raises(ValueError, match="`baseline`"):
        reinforce_gradient(key, *args, num_samples=2, baseline="mean")
    with pytest.raises(ValueError, match="`baseline`"):
        reinforce_gradient(key, *args, num_samples=2, baseline=jnp.zeros(2))
    with pytest.raises(ValueError, match="`idx_w`"):
        reinforce_gradient_from_draws(jnp.zeros((2, 5), int), jnp.zeros(2, int), *args)
    with pytest.raises(ValueError, match="`idx_noise`"):
        reinforce_gradient_from_draws(jnp.zeros((2, 2), int), jnp.zeros(3, int), *args)
    with pytest.raises(TypeError, match="`idx_w`"):
        reinforce_gradient_from_draws(jnp.zeros((2, 2)), jnp.zeros(2, int), *args)
    with pytest.raises(TypeError, match="`q`"):
        sample_mean_field(key, q_w.logits, num_samples=2)
    with pytest.raises(ValueError, match="q_w"):
        reinforce_gradient(key, stats, kronvi.model.MeanField(jnp.zeros((3, 3))), *args[2:], num_samples=2)
