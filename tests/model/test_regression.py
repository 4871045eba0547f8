import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import brute_force_elbo, enumerate_configs, random_problem, softmax, tol
from jax.test_util import check_grads

import kronvi


def _model(p, dtype):
    prior_w = kronvi.DiscretePrior(jnp.asarray(p["values"], dtype), jnp.asarray(p["log_prior"], dtype))
    prior_n = kronvi.DiscretePrior(jnp.asarray(p["noise_vals"], dtype), jnp.asarray(p["log_prior_n"], dtype))
    q_w = kronvi.MeanField(jnp.asarray(p["q_logits"], dtype))
    q_n = kronvi.MeanField(jnp.asarray(p["qn_logits"], dtype))
    stats = kronvi.regression_stats(jnp.asarray(p["Phi"], dtype), jnp.asarray(p["y"], dtype))
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
    elbo = kronvi.regression_elbo(*_model(p, dtype))
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
        assert float(kronvi.regression_elbo(q_w, q_n, prior_w, prior_n, stats)) < log_evidence
        fitted, fn, _ = kronvi.fit_regression(stats, prior_w, prior_n, max_iter=200, tol=0.0)
        elbo = float(kronvi.regression_elbo(fitted, fn, prior_w, prior_n, stats))
        assert elbo <= log_evidence + 1e-9


def test_elbo_gradient_matches_finite_differences():
    with jax.enable_x64(True):
        p = random_problem(np.random.default_rng(4), b=3, m=4, ms=3)
        q_w, q_n, prior_w, prior_n, stats = _model(p, np.float64)

        def f(lw, ln, vals, A):
            st = stats._replace(PhitPhi=A)
            pw = prior_w._replace(values=vals)
            return kronvi.regression_elbo(
                kronvi.MeanField._unchecked(lw), kronvi.MeanField._unchecked(ln), pw, prior_n, st
            )

        check_grads(
            f,
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
    mean, var = kronvi.predict_regression(q_w, q_n, prior_w, prior_n, jnp.asarray(Phi_new, dtype))
    _, _, _, ref_mean, ref_var = _enumerate_predictive(p, Phi_new)
    np.testing.assert_allclose(mean, ref_mean, rtol=tol(dtype), atol=tol(dtype))
    np.testing.assert_allclose(var, ref_var, rtol=tol(dtype))


@pytest.mark.parametrize("seed", [7, 8])
def test_predictive_log_density_matches_enumeration(dtype, seed):
    rng = np.random.default_rng(seed)
    p = random_problem(rng, b=3, m=4, ms=3)
    Phi_new = rng.normal(size=(6, 3))
    q_w, q_n, prior_w, prior_n, _ = _model(p, dtype)
    prob, f, qn, mean, var = _enumerate_predictive(p, Phi_new)
    y_new = mean + np.sqrt(var) * rng.normal(size=6) * 2.0
    s = p["noise_vals"][0]
    dens = np.einsum(
        "c,s,csn->n",
        prob,
        qn,
        np.exp(-0.5 * (y_new[None, None] - f[:, None]) ** 2 / s[None, :, None])
        / np.sqrt(2 * np.pi * s[None, :, None]),
    )
    ld, err = kronvi.predictive_log_density(
        q_w, q_n, prior_w, prior_n, jnp.asarray(Phi_new, dtype), jnp.asarray(y_new, dtype)
    )
    np.testing.assert_allclose(ld, np.log(dens), rtol=tol(dtype, x32=2e-4, x64=1e-8))
    # the returned bound covers the actual error, and is small at these distances
    rel = np.abs(np.exp(np.asarray(ld, np.float64) - np.log(dens)) - 1.0)
    assert np.all(rel <= np.asarray(err) + tol(dtype, x32=1e-5, x64=1e-12))
    assert np.all(np.asarray(err) < (0.05 if dtype == np.float32 else 1e-8))


def test_expected_sparsity_matches_enumeration(dtype):
    p = random_problem(np.random.default_rng(9), b=3, m=3, ms=1)
    q_w, _, prior_w, _, _ = _model(p, dtype)
    cfg = enumerate_configs(3, 3)
    W = p["values"][np.arange(3), cfg]
    prob = softmax(p["q_logits"])[np.arange(3), cfg].prod(-1)
    ref = np.sum(prob * (W == 0).mean(-1))
    np.testing.assert_allclose(float(kronvi.expected_sparsity(q_w, prior_w)), ref, rtol=tol(dtype))


def test_predictive_log_density_in_the_far_tail():
    # A point 40 predictive sds out: without exponential tilting its density is far below float32's
    # quadrature rounding floor. With it the value matches enumeration and the error bound is small.
    p = random_problem(np.random.default_rng(11), b=3, m=4, ms=2)
    Phi_new = np.random.default_rng(12).normal(size=(2, 3))
    with jax.enable_x64(False):
        q_w, q_n, prior_w, prior_n, _ = _model(p, np.float32)
        mean, var = kronvi.predict_regression(q_w, q_n, prior_w, prior_n, jnp.asarray(Phi_new, np.float32))
        y_new = mean + jnp.asarray([0.5, 40.0], np.float32) * jnp.sqrt(var)
        ld, err = kronvi.predictive_log_density(
            q_w, q_n, prior_w, prior_n, jnp.asarray(Phi_new, np.float32), y_new
        )
    prob, f, qn, _, _ = _enumerate_predictive(p, Phi_new)
    s = p["noise_vals"][0]
    yv = np.asarray(y_new, np.float64)
    logs = (
        np.log(prob)[:, None, None]
        + np.log(qn)[None, :, None]
        - 0.5 * (yv[None, None] - f[:, None]) ** 2 / s[None, :, None]
        - 0.5 * np.log(2 * np.pi * s)[None, :, None]
    )
    ref = np.logaddexp.reduce(logs.reshape(-1, 2), axis=0)
    assert ref[1] < -100  # far below what float32 quadrature alone can represent (log tiny = -87)
    np.testing.assert_allclose(ld, ref, rtol=1e-4)
    assert np.all(np.asarray(err) < 1e-2)
