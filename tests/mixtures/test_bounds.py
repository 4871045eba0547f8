"""Exact terms (linear in q), the Theorem-3 entropy bound and the Theorem-4 prior bound against
enumeration of all m**b configurations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    enumerate_configs,
    jnp_mixture_elbo,
    log_softmax,
    mixture_model,
    mixture_problem,
    ref_mixture_elbo,
    ref_mixture_terms,
    softmax,
    tol,
)
from jax.test_util import check_grads
from scipy.special import logsumexp

import kronvi
from kronvi.mixtures._bounds import noise_cavi_logits


@pytest.mark.parametrize("seed", [0, 1])
def test_expected_loglik_matches_enumeration(dtype, seed):
    p = mixture_problem(seed)
    q, q_n, prior_w, prior_n, stats = mixture_model(p, dtype)
    got = kronvi.mixtures.mixture_expected_loglik(stats, q, q_n, prior_w, prior_n)
    ref = ref_mixture_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])[0]
    assert got.dtype == dtype
    np.testing.assert_allclose(float(got), ref, rtol=tol(dtype, x32=1e-4))


def test_one_component_mixture_is_mean_field():
    with jax.enable_x64(True):
        p = mixture_problem(3, r=1)
        q, q_n, prior_w, prior_n, stats = mixture_model(p)
        q_w = kronvi.model.MeanField(q.logits[0])
        np.testing.assert_allclose(
            kronvi.mixtures.mixture_expected_loglik(stats, q, q_n, prior_w, prior_n),
            ref_mixture_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])[0],
            rtol=1e-12,
        )
        m_ref, v_ref = kronvi.model.predict_regression(q_w, q_n, prior_w, prior_n, p["Phi"])
        m, v = kronvi.mixtures.predict_mixture(q, q_n, prior_w, prior_n, p["Phi"])
        np.testing.assert_allclose(m, m_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(v, v_ref, rtol=1e-12)


def test_noise_cavi_update_maximizes_exact_elbo():
    with jax.enable_x64(True):
        p = mixture_problem(11)
        q, q_n, prior_w, prior_n, stats = mixture_model(p)
        best = noise_cavi_logits(q, prior_w, prior_n, stats)
        f = jax.jit(jnp_mixture_elbo(p))  # six evaluations and a gradient: compiled, not op by op
        e_best = float(f(q.logits, q.weight_logits, best))
        rng = np.random.default_rng(0)
        for _ in range(5):
            assert float(f(q.logits, q.weight_logits, best + 0.3 * rng.normal(size=best.shape))) < e_best
        np.testing.assert_allclose(jax.grad(f, argnums=2)(q.logits, q.weight_logits, best), 0.0, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_bound_below_exact_elbo_for_random_centres(seed):
    with jax.enable_x64(True):
        p = mixture_problem(seed)
        q, q_n, prior_w, prior_n, stats = mixture_model(p)
        exact = ref_mixture_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
        rng = np.random.default_rng(100 + seed)
        centres = [rng.normal(size=(3, 3)) for _ in range(5)] + [np.asarray(q.log_marginals)]
        gaps = []
        for log_c in centres:
            bound = float(kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, log_c, prior_w, prior_n))
            literal = float(
                kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, log_c, prior_w, prior_n, rescale=False)
            )
            assert literal <= bound  # the rescaled form is the theorem at the best multiple of a
            # ... and is invariant to rescaling a (per-factor shifts of log a).
            shifted = kronvi.mixtures.mixture_elbo_bound(
                stats, q, q_n, log_c + rng.normal(size=(3, 1)), prior_w, prior_n
            )
            np.testing.assert_allclose(float(shifted), bound, rtol=1e-12)
            gaps.append(exact - bound)
        assert min(gaps) > 0  # r = 2 distinct components: strictly below
        # ... and the bound at the marginals is tighter than at random centres.
        assert gaps[-1] < min(gaps[:-1])


def test_bound_entropy_part_matches_tangent_inequality_by_enumeration():
    """The entropy part alone equals 1 - <q, log a> - <q, q / a> computed on dense vectors."""
    with jax.enable_x64(True):
        p = mixture_problem(4)
        q, q_n, prior_w, prior_n, stats = mixture_model(p)
        log_c = np.random.default_rng(0).normal(size=(3, 3))
        ell, elp, h, noise, qx = ref_mixture_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
        cfg = enumerate_configs(3, 3)
        log_a = log_c[np.arange(3), cfg].sum(-1)
        h_bound_ref = 1 - np.sum(qx * log_a) - np.sum(qx**2 / np.exp(log_a))
        bound = kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, log_c, prior_w, prior_n, rescale=False)
        np.testing.assert_allclose(float(bound), ell + elp + noise + h_bound_ref, rtol=1e-12)
        assert h_bound_ref < h
        # rescaled form: -<q, log a> - log <q, q / a>, by enumeration too
        h_rescaled_ref = -np.sum(qx * log_a) - np.log(np.sum(qx**2 / np.exp(log_a)))
        bound = kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, log_c, prior_w, prior_n)
        np.testing.assert_allclose(float(bound), ell + elp + noise + h_rescaled_ref, rtol=1e-12)
        assert h_bound_ref < h_rescaled_ref < h


@pytest.mark.parametrize("seed", [0, 1])
def test_bound_equals_exact_elbo_for_one_component_at_q(dtype, seed):
    p = mixture_problem(seed, r=1)
    q, q_n, prior_w, prior_n, stats = mixture_model(p, dtype)
    exact = ref_mixture_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
    literal = kronvi.mixtures.mixture_elbo_bound(
        stats, q, q_n, q.log_probs[0], prior_w, prior_n, rescale=False
    )
    np.testing.assert_allclose(float(literal), exact, rtol=tol(dtype, x32=1e-4))
    bound = kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, q.log_probs[0], prior_w, prior_n)
    assert bound.dtype == dtype
    np.testing.assert_allclose(float(bound), exact, rtol=tol(dtype, x32=1e-4))
    mf = kronvi.model.regression_elbo(stats, kronvi.model.MeanField(q.logits[0]), q_n, prior_w, prior_n)
    np.testing.assert_allclose(float(bound), float(mf), rtol=tol(dtype, x32=1e-5))
    # Any other centre is strictly worse.
    worse = kronvi.mixtures.mixture_elbo_bound(
        stats, q, q_n, q.log_probs[0] + 0.3 * jnp.eye(3), prior_w, prior_n
    )
    assert float(worse) < float(bound) - 1e-3
    # (the literal form also needs the right scale: a = 2q is strictly worse there)
    off = kronvi.mixtures.mixture_elbo_bound(
        stats, q, q_n, q.log_probs[0] + 0.7, prior_w, prior_n, rescale=False
    )
    assert float(off) < float(literal) - 1e-3


def test_bound_log_space_survives_many_weights():
    """Many weights, distinct components: <q, q/a> ~ e^130 overflows float32; the rescaled form is finite."""
    b, m = 150, 15
    key = jax.random.key(0)
    q = kronvi.mixtures.Mixture(3.0 * jax.random.normal(key, (3, b, m)), jnp.zeros(3))
    prior_w = kronvi.model.gaussian_prior(b, 1.0, levels=m)
    prior_n = kronvi.model.noise_prior(1.0, levels=5)
    stats = kronvi.stats.RegressionStats(jnp.asarray(10.0), jnp.asarray(1.0), jnp.zeros(b), jnp.eye(b) * 0.01)
    q_n = kronvi.model.MeanField.from_prior(prior_n)
    bound, grads = jax.jit(jax.value_and_grad(kronvi.mixtures.mixture_elbo_bound, argnums=(1, 3)))(
        stats, q, q_n, q.log_marginals, prior_w, prior_n
    )
    assert np.isfinite(float(bound))
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    literal = kronvi.mixtures.mixture_elbo_bound(
        stats, q, q_n, q.log_marginals, prior_w, prior_n, rescale=False
    )
    assert float(literal) == -np.inf  # documented: the literal form overflows here


def test_bound_gradients_match_finite_differences():
    with jax.enable_x64(True):
        p = mixture_problem(5)
        q, q_n, prior_w, prior_n, stats = mixture_model(p)
        log_c = jnp.asarray(np.random.default_rng(1).normal(size=(3, 3)) * 0.3)

        @jax.jit
        def f(logits, wl, lc, ln):
            return kronvi.mixtures.mixture_elbo_bound(
                stats, kronvi.mixtures.Mixture._unchecked(logits, wl), kronvi.model.MeanField._unchecked(ln), lc,
                prior_w, prior_n,
            )  # fmt: skip

        check_grads(f, (q.logits, q.weight_logits, log_c, q_n.logits), order=1, modes=["rev"], eps=1e-4)
        lit = jax.jit(
            lambda lc: kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, lc, prior_w, prior_n, rescale=False)
        )
        check_grads(lit, (log_c,), order=1, modes=["rev"], eps=1e-4)

        @jax.jit
        def g(logits, wl, ln):
            qq, qn = kronvi.mixtures.Mixture._unchecked(logits, wl), kronvi.model.MeanField._unchecked(ln)
            return kronvi.mixtures.mixture_expected_loglik(stats, qq, qn, prior_w, prior_n)

        check_grads(g, (q.logits, q.weight_logits, q_n.logits), order=1, modes=["fwd", "rev"], eps=1e-4)


@pytest.mark.parametrize("seed,C", [(0, 2), (1, 3), (2, 2)])
def test_mixture_prior_bound_below_exact(seed, C):
    with jax.enable_x64(True):
        p = mixture_problem(seed, num_prior_components=C)
        q, q_n, prior_w, prior_n, stats = mixture_model(p, mixture_prior=True)
        _, exact, _, _, qx = ref_mixture_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], True)
        got = float(kronvi.mixtures.mixture_prior_bound(q, prior_w))
        assert got <= exact
        # It is at least the simpler Jensen bound with responsibilities beta: sum_c beta_c E_q log p_c.
        cfg = enumerate_configs(3, 3)
        e_c = np.array(
            [np.sum(qx * lp[np.arange(3), cfg].sum(-1)) for lp in log_softmax(p["prior_mix_logp"])]
        )
        simple = np.sum(np.exp(log_softmax(p["prior_mix_logw"])) * e_c)
        assert got >= simple - 1e-12
        # Reference for the formula itself: sum_k alpha_k LSE_c(log beta_c + E_{q^(k)} log p^(c)).
        alpha = softmax(p["mix_wlogits"])
        e_kc = np.einsum("kjm,cjm->kc", softmax(p["mix_logits"]), log_softmax(p["prior_mix_logp"]))
        ref = np.sum(alpha * logsumexp(log_softmax(p["prior_mix_logw"])[None] + e_kc, axis=1))
        np.testing.assert_allclose(got, ref, rtol=1e-12)
        # And the ELBO bound with a mixture prior stays below the exact ELBO.
        bound = float(kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, q.log_marginals, prior_w, prior_n))
        assert bound < ref_mixture_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], True)


def test_mixture_prior_bound_exact_for_one_prior_component():
    with jax.enable_x64(True):
        p = mixture_problem(6, num_prior_components=1)
        q, _, prior_w, _, _ = mixture_model(p, mixture_prior=True)
        exact = ref_mixture_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], True)[1]
        np.testing.assert_allclose(float(kronvi.mixtures.mixture_prior_bound(q, prior_w)), exact, rtol=1e-12)
        q_w = kronvi.model.MeanField(q.logits[0])
        dense = kronvi.model.DiscretePrior(prior_w.values, prior_w.log_probs[0])
        np.testing.assert_allclose(
            kronvi.mixtures.mixture_prior_bound(q_w, prior_w),
            kronvi.mixtures.mixture_prior_bound(q_w, dense),
            rtol=1e-12,
        )


def test_vmap_over_folds_float32_and_no_retrace():
    p = mixture_problem(13)
    q, q_n, prior_w, prior_n, _ = mixture_model(p, np.float32)
    Phi, y = jnp.asarray(p["Phi"], jnp.float32), jnp.asarray(p["y"], jnp.float32)
    folds = [kronvi.stats.regression_stats(Phi[:4], y[:4]), kronvi.stats.regression_stats(Phi[3:], y[3:])]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *folds)
    traces = []

    def objectives(s, key):
        traces.append(1)
        bound = kronvi.mixtures.mixture_elbo_bound(s, q, q_n, q.log_marginals, prior_w, prior_n)
        est = kronvi.mixtures.mixture_elbo_estimate(key, s, q, q_n, prior_w, prior_n, num_samples=4)
        return bound, est

    f = jax.jit(jax.vmap(objectives))
    bound, est = f(stacked, jax.random.split(jax.random.key(0), 2))
    assert bound.shape == (2,) and bound.dtype == jnp.float32 and est.dtype == jnp.float32
    for k in range(2):
        one = kronvi.mixtures.mixture_elbo_bound(folds[k], q, q_n, q.log_marginals, prior_w, prior_n)
        np.testing.assert_allclose(bound[k], one, rtol=1e-5)
    f(jax.tree.map(lambda x: 1.5 * x, stacked), jax.random.split(jax.random.key(1), 2))
    assert len(traces) == 1
