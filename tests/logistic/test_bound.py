"""The logistic lower bounds against enumeration of every configuration, gradients, minibatches, errors."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from logistic.reference import expected_loglik

import kronvi
import kronvi.logistic as kl


def problem(dtype, b=3, m=4, n=9, scale=1.0, seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    prior = kronvi.model.gaussian_prior(b, 1.5, levels=m, dtype=dtype)
    q = kronvi.model.MeanField(jax.random.normal(k[0], (b, m), dtype))
    Phi = scale * jax.random.normal(k[1], (n, b), dtype)
    y = (jax.random.uniform(k[2], (n,)) > 0.5).astype(dtype)
    return q, prior, Phi, y


@pytest.mark.parametrize("scale", [0.3, 3.0])
def test_bounds_below_exact_and_ordered(dtype, scale):
    q, prior, Phi, y = problem(dtype, scale=scale)
    exact = expected_loglik(q.probs, prior.values, Phi, y)
    vals = {bd: float(kl.logistic_loglik_bound(Phi, y, q, prior, bound=bd)) for bd in kl.BOUNDS}
    tol = 1e-4 * abs(exact) if dtype == np.float32 else 1e-10 * abs(exact)
    for v in vals.values():
        assert v <= exact + tol
    # tilted >= jensen >= theorem2
    assert vals["tilted"] >= vals["jensen"] - tol
    assert vals["jensen"] >= vals["theorem2"] - tol
    for v in vals.values():
        assert np.asarray(v).dtype == np.float64  # python float; dtype checked below
    assert kl.logistic_loglik_bound(Phi, y, q, prior).dtype == dtype


def test_bounds_rowwise_formulas_float64():
    """Each bound equals its closed form evaluated from enumerated moment generating functions."""
    with jax.enable_x64(True):
        q, prior, Phi, y = problem(np.float64, n=4)
        P, V = np.asarray(q.probs), np.asarray(prior.values)
        s = 2 * np.asarray(y) - 1
        mgf = {c: np.zeros(4) for c in (-1.0, -0.5, 0.5, 1.0, 0.0)}
        Ez = np.zeros(4)
        for ks in itertools.product(range(4), repeat=3):
            p = np.prod([P[j, k] for j, k in enumerate(ks)])
            z = np.asarray(Phi) @ np.array([V[j, k] for j, k in enumerate(ks)])
            Ez += p * z
            for c in mgf:
                mgf[c] += p * np.exp(c * s * z)
        th2 = -np.sum(mgf[-1.0])
        jen = -np.sum(np.log1p(mgf[-1.0]))
        cands = [-a * s * Ez + np.log(mgf[a] + mgf[a - 1.0]) for a in (0.0, 0.5, 1.0)]
        tilt = -np.sum(np.min(cands, axis=0))
        np.testing.assert_allclose(
            kl.logistic_loglik_bound(Phi, y, q, prior, bound="theorem2"), th2, rtol=1e-10
        )
        np.testing.assert_allclose(
            kl.logistic_loglik_bound(Phi, y, q, prior, bound="jensen"), jen, rtol=1e-10
        )
        np.testing.assert_allclose(
            kl.logistic_loglik_bound(Phi, y, q, prior, bound="tilted"), tilt, rtol=1e-10
        )


def test_stable_for_large_logits(dtype):
    """|Phi w| in the thousands: tilted and jensen stay finite and below the exact value."""
    q, prior, Phi, y = problem(dtype, scale=300.0, n=5)
    exact = expected_loglik(q.probs, prior.values, Phi, y)
    for bd in ("tilted", "jensen"):
        v = float(kl.logistic_loglik_bound(Phi, y, q, prior, bound=bd))
        assert np.isfinite(v) and v <= exact * (1 - 1e-5)


def test_chunks_do_not_change_the_value(dtype):
    q, prior, Phi, y = problem(dtype, n=11)
    full = kl.logistic_loglik_bound(Phi, y, q, prior)
    for c in (1, 4, 11, 50):
        np.testing.assert_allclose(kl.logistic_loglik_bound(Phi, y, q, prior, chunk_size=c), full, rtol=1e-5)


def test_elbo_bound_is_loglik_bound_minus_kl(dtype):
    q, prior, Phi, y = problem(dtype)
    kl_exact = float(jnp.sum(q.probs * (q.log_probs - prior.log_probs)))
    np.testing.assert_allclose(
        kl.logistic_elbo_bound(Phi, y, q, prior),
        kl.logistic_loglik_bound(Phi, y, q, prior) - kl_exact,
        rtol=1e-5,
    )


def test_gradients_match_finite_differences():
    with jax.enable_x64(True):
        q, prior, Phi, y = problem(np.float64, n=6)
        for bd in kl.BOUNDS:
            f = jax.jit(
                lambda lg, bd=bd: kl.logistic_elbo_bound(Phi, y, kronvi.model.MeanField(lg), prior, bound=bd)
            )
            check_grads(f, (q.logits,), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_minibatch_exactly_unbiased_over_all_batches(dtype):
    """The mean of the estimate over every subset of B rows equals the full bound."""
    q, prior, Phi, y = problem(dtype, n=5)
    full = float(kl.logistic_loglik_bound(Phi, y, q, prior))
    B = 2
    vals = [
        5 / B * float(kl.logistic_loglik_bound(Phi[np.array(s)], y[np.array(s)], q, prior))
        for s in itertools.combinations(range(5), B)
    ]
    np.testing.assert_allclose(np.mean(vals), full, rtol=1e-5)


def test_minibatch_sampler_is_unbiased():
    """The sampler's draws average to the full bound within 4 standard errors (and vary)."""
    q, prior, Phi, y = problem(np.float32, n=20)
    full = float(kl.logistic_loglik_bound(Phi, y, q, prior))
    keys = jax.random.split(jax.random.key(3), 200)
    est = jax.vmap(lambda k: kl.logistic_loglik_minibatch(k, Phi, y, q, prior, batch_size=5))(keys)
    est = np.asarray(est, np.float64)
    se = est.std(ddof=1) / np.sqrt(len(est))
    assert se > 0 and abs(est.mean() - full) < 4 * se


def test_mc_estimate_matches_enumeration():
    with jax.enable_x64(True):
        q, prior, Phi, y = problem(np.float64)
        exact = expected_loglik(q.probs, prior.values, Phi, y)
        est, se = kl.logistic_loglik_estimate(jax.random.key(1), Phi, y, q, prior, num_samples=4000)
        assert abs(float(est) - exact) < 4 * float(se)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([0, 1, 2, 0, 1, 0, 1, 1, 0]), "labels 0 or 1"),
        (np.array([0, 1, np.nan, 0, 1, 0, 1, 1, 0]), "NaN"),
        (np.array([-1.0, 1, 1, 0, 1, 0, 1, 1, 0]), "labels 0 or 1"),
        (np.zeros(8), r"shape \(9,\)"),
        (np.zeros((9, 1)), r"shape \(9,\)"),
        (None, "`y`"),
    ],
)
def test_bad_labels_are_named(bad, match):
    q, prior, Phi, _ = problem(np.float32)
    with pytest.raises(ValueError, match=match) as err:
        kl.logistic_loglik_bound(Phi, bad, q, prior)
    assert "`y`" in str(err.value)
    with pytest.raises(ValueError, match="`y`"):
        kl.fit_logistic(Phi, bad, prior, max_iter=2)


def test_bad_arguments_are_named():
    q, prior, Phi, y = problem(np.float32)
    with pytest.raises(ValueError, match="`bound`"):
        kl.logistic_loglik_bound(Phi, y, q, prior, bound="nope")
    with pytest.raises(ValueError, match="`Phi`"):
        kl.logistic_loglik_bound(Phi[:, :2], y, q, prior)
    with pytest.raises(ValueError, match="`Phi`"):
        kl.logistic_loglik_bound(Phi.at[0, 0].set(jnp.nan), y, q, prior)
    with pytest.raises(ValueError, match="`batch_size`"):
        kl.logistic_loglik_minibatch(jax.random.key(0), Phi, y, q, prior, batch_size=100)


def test_bool_and_int_labels_accepted():
    q, prior, Phi, y = problem(np.float32)
    ref = kl.logistic_loglik_bound(Phi, y, q, prior)
    np.testing.assert_allclose(kl.logistic_loglik_bound(Phi, np.asarray(y) > 0.5, q, prior), ref)
    np.testing.assert_allclose(kl.logistic_loglik_bound(Phi, np.asarray(y).astype(int), q, prior), ref)
