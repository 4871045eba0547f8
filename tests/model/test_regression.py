import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import brute_force_elbo, enumerate_configs, random_problem, softmax, tol
from jax.test_util import check_grads

import kronvi


def _model(p, dtype):
    prior_w = kronvi.model.DiscretePrior(jnp.asarray(p["values"], dtype), jnp.asarray(p["log_prior"], dtype))
    prior_n = kronvi.model.DiscretePrior(
        jnp.asarray(p["noise_vals"], dtype), jnp.asarray(p["log_prior_n"], dtype)
    )
    q_w = kronvi.model.MeanField(jnp.asarray(p["q_logits"], dtype))
    q_n = kronvi.model.MeanField(jnp.asarray(p["qn_logits"], dtype))
    stats = kronvi.stats.regression_stats(jnp.asarray(p["Phi"], dtype), jnp.asarray(p["y"], dtype))
    return q_w, q_n, prior_w, prior_n, stats


def _reference(p):
    return brute_force_elbo(
        p["Phi"],
        p["y"],
        p["values"],
        p["log_prior"] - np.log(np.exp(p["log_prior"]).sum(-1, keepdims=True)),
        softmax(p["q_logits"]),
        p["noise_vals"][0],
        p["log_prior_n"][0],
        softmax(p["qn_logits"])[0],
    )


@pytest.mark.parametrize("seed,b,m,ms", [(0, 3, 3, 3), (1, 2, 5, 4), (2, 4, 3, 1), (3, 1, 7, 2)])
def test_elbo_matches_enumeration(dtype, seed, b, m, ms):
    p = random_problem(np.random.default_rng(seed), b=b, m=m, ms=ms)
    q_w, q_n, prior_w, prior_n, stats = _model(p, dtype)
    elbo = kronvi.model.regression_elbo(stats, q_w, q_n, prior_w, prior_n)
    assert elbo.dtype == jnp.dtype(dtype)
    np.testing.assert_allclose(float(elbo), _reference(p), rtol=tol(dtype, x32=1e-5, x64=1e-9))


def test_elbo_is_lower_bound_on_evidence():
    # With one noise level and q equal to the exact posterior the ELBO equals log evidence; any other
    # q gives less.  Both computed by enumeration in float64.
    with jax.enable_x64(True):
        rng = np.random.default_rng(10)
        p = random_problem(rng, b=2, m=3, ms=1)
        cfg = enumerate_configs(2, 3)
        W = p["values"][np.arange(2), cfg]
        s = p["noise_vals"][0, 0]
        lp = np.log(softmax(p["log_prior"]))[np.arange(2), cfg].sum(-1)
        rss = ((p["y"][None] - W @ p["Phi"].T) ** 2).sum(-1)
        lj = lp - 0.5 * len(p["y"]) * np.log(2 * np.pi * s) - 0.5 * rss / s
        log_evidence = np.logaddexp.reduce(lj)
        q_w, q_n, prior_w, prior_n, stats = _model(p, np.float64)
        assert float(kronvi.model.regression_elbo(stats, q_w, q_n, prior_w, prior_n)) < log_evidence
        fitted, fn, _ = kronvi.fitting.fit_regression(stats, prior_w, prior_n, max_iter=200, tol=0.0)
        elbo = float(kronvi.model.regression_elbo(stats, fitted, fn, prior_w, prior_n))
        assert elbo <= log_evidence + 1e-9


def test_elbo_gradient_matches_finite_differences():
    with jax.enable_x64(True):
        p = random_problem(np.random.default_rng(4), b=3, m=4, ms=3)
        q_w, q_n, prior_w, prior_n, stats = _model(p, np.float64)

        def f(lw, ln, vals, A):
            st = stats._replace(PhitPhi=A)
            pw = prior_w._replace(values=vals)
            return kronvi.model.regression_elbo(
                st, kronvi.model.MeanField._unchecked(lw), kronvi.model.MeanField._unchecked(ln), pw, prior_n
            )

        check_grads(
            jax.jit(f),  # one compile per derivative, not one per primitive of an eager trace
            (q_w.logits, q_n.logits, prior_w.values, stats.PhitPhi),
            order=2,
            modes=["rev", "fwd"],
            atol=1e-6,
            rtol=1e-6,
        )


def _enumerate_predictive(p, Phi_new):
    qw, qn = softmax(p["q_logits"]), softmax(p["qn_logits"])[0]
    b, m = p["values"].shape
    cfg = enumerate_configs(b, m)
    W = p["values"][np.arange(b), cfg]
    prob = qw[np.arange(b), cfg].prod(-1)
    f = W @ Phi_new.T  # (C, N)
    mean = prob @ f
    var = prob @ (f - mean) ** 2 + np.sum(qn * p["noise_vals"][0])
    return prob, f, qn, mean, var


def test_predictive_moments_match_enumeration(dtype):
    p = random_problem(np.random.default_rng(5), b=3, m=4, ms=3)
    Phi_new = np.random.default_rng(6).normal(size=(5, 3))
    q_w, q_n, prior_w, prior_n, _ = _model(p, dtype)
    mean, var = kronvi.model.predict_regression(q_w, q_n, prior_w, prior_n, jnp.asarray(Phi_new, dtype))
    _, _, _, ref_mean, ref_var = _enumerate_predictive(p, Phi_new)
    np.testing.assert_allclose(mean, ref_mean, rtol=tol(dtype), atol=tol(dtype))
    np.testing.assert_allclose(var, ref_var, rtol=tol(dtype))


def test_expected_sparsity_matches_enumeration(dtype):
    p = random_problem(np.random.default_rng(9), b=3, m=3, ms=1)
    q_w, _, prior_w, _, _ = _model(p, dtype)
    cfg = enumerate_configs(3, 3)
    W = p["values"][np.arange(3), cfg]
    prob = softmax(p["q_logits"])[np.arange(3), cfg].prod(-1)
    ref = np.sum(prob * (W == 0).mean(-1))
    np.testing.assert_allclose(float(kronvi.model.expected_sparsity(q_w, prior_w)), ref, rtol=tol(dtype))
