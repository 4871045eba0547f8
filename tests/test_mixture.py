"""Mixture posteriors and priors (paper section 4) against brute-force enumeration of all m**b configs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import enumerate_configs, random_problem, softmax, tol
from jax.test_util import check_grads
from scipy.special import logsumexp

import kronvi
from kronvi.mixtures._core import _noise_cavi_logits

R = 2  # mixture components in the tiny problems (b = 3, m = 3)


def _log_softmax(x):
    return x - logsumexp(x, axis=-1, keepdims=True)


def _problem(seed, *, b=3, m=3, ms=3, r=R, num_prior_components=None):
    rng = np.random.default_rng(seed)
    p = random_problem(rng, b=b, m=m, ms=ms)
    p["mix_logits"] = rng.normal(size=(r, b, m))
    p["mix_wlogits"] = rng.normal(size=(r,))
    if num_prior_components:
        p["prior_mix_logp"] = np.log(rng.dirichlet(np.ones(m), size=(num_prior_components, b)))
        p["prior_mix_logw"] = np.log(rng.dirichlet(np.ones(num_prior_components)))
    return p


def _model(p, dtype=np.float64, *, mixture_prior=False):
    if mixture_prior:
        prior_w = kronvi.MixturePrior(
            jnp.asarray(p["values"], dtype), jnp.asarray(p["prior_mix_logp"], dtype),
            jnp.asarray(p["prior_mix_logw"], dtype),
        )  # fmt: skip
    else:
        prior_w = kronvi.DiscretePrior(jnp.asarray(p["values"], dtype), jnp.asarray(p["log_prior"], dtype))
    prior_n = kronvi.DiscretePrior(jnp.asarray(p["noise_vals"], dtype), jnp.asarray(p["log_prior_n"], dtype))
    q = kronvi.Mixture(jnp.asarray(p["mix_logits"], dtype), jnp.asarray(p["mix_wlogits"], dtype))
    q_n = kronvi.MeanField(jnp.asarray(p["qn_logits"], dtype))
    stats = kronvi.regression_stats(jnp.asarray(p["Phi"], dtype), jnp.asarray(p["y"], dtype))
    return q, q_n, prior_w, prior_n, stats


# ---------------------------------------------------------------------------------------------------
# float64 NumPy references by enumeration
# ---------------------------------------------------------------------------------------------------


def _ref_log_q(logits, wlogits):
    """log q(x) of a mixture at every configuration, (m**b,)."""
    r, b, m = logits.shape
    cfg = enumerate_configs(b, m)
    per_comp = _log_softmax(logits)[:, np.arange(b), cfg].sum(-1)  # (r, C)
    return logsumexp(_log_softmax(wlogits)[:, None] + per_comp, axis=0)


def _ref_log_prior(p, mixture_prior=False):
    b, m = p["values"].shape
    cfg = enumerate_configs(b, m)
    if not mixture_prior:
        return _log_softmax(p["log_prior"])[np.arange(b), cfg].sum(-1)
    per = _log_softmax(p["prior_mix_logp"])[:, np.arange(b), cfg].sum(-1)
    return logsumexp(_log_softmax(p["prior_mix_logw"])[:, None] + per, axis=0)


def _ref_terms(p, logits, wlogits, qn_logits, mixture_prior=False):
    """(expected log-likelihood, E_q log p(w), entropy of q_w, noise prior + noise entropy, q(x))."""
    Phi, y = np.asarray(p["Phi"], np.float64), np.asarray(p["y"], np.float64)
    b, m = p["values"].shape
    n = len(y)
    cfg = enumerate_configs(b, m)
    W = p["values"][np.arange(b), cfg]
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    log_q = _ref_log_q(logits, wlogits)
    qx = np.exp(log_q)
    s = p["noise_vals"][0]
    qs = softmax(qn_logits)[0]
    ll = -0.5 * n * np.log(2 * np.pi * s)[None] - 0.5 * rss[:, None] / s[None]  # (C, S)
    ell = np.sum(qx[:, None] * qs[None] * ll)
    e_log_p = np.sum(qx * _ref_log_prior(p, mixture_prior))
    h = -np.sum(qx * log_q)
    noise = np.sum(qs * (_log_softmax(p["log_prior_n"][0]) - np.log(qs)))
    return ell, e_log_p, h, noise, qx


def _ref_elbo(p, logits, wlogits, qn_logits, mixture_prior=False):
    ell, elp, h, noise, _ = _ref_terms(p, logits, wlogits, qn_logits, mixture_prior)
    return ell + elp + h + noise


def _jnp_elbo(p, mixture_prior=False):
    """Differentiable float64 enumeration ELBO in (logits, weight_logits, noise_logits)."""
    b, m = p["values"].shape
    cfg = enumerate_configs(b, m)
    W = p["values"][np.arange(b), cfg]
    Phi, y = np.asarray(p["Phi"], np.float64), np.asarray(p["y"], np.float64)
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    log_p = _ref_log_prior(p, mixture_prior)
    s = p["noise_vals"][0]
    lpn = _log_softmax(p["log_prior_n"][0])
    n = len(y)

    def f(logits, wlogits, qn_logits):
        per_comp = jnp.sum(jax.nn.log_softmax(logits)[:, np.arange(b), cfg], -1)
        log_q = jax.nn.logsumexp(jax.nn.log_softmax(wlogits)[:, None] + per_comp, axis=0)
        lqs = jax.nn.log_softmax(qn_logits)[0]
        ll = -0.5 * n * jnp.log(2 * jnp.pi * s)[None] - 0.5 * rss[:, None] / s[None]
        term = ll + log_p[:, None] - log_q[:, None] + (lpn - lqs)[None]
        return jnp.sum(jnp.exp(log_q)[:, None] * jnp.exp(lqs)[None] * term)

    return f


# ---------------------------------------------------------------------------------------------------
# Exact terms
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_expected_loglik_matches_enumeration(dtype, seed):
    p = _problem(seed)
    q, q_n, prior_w, prior_n, stats = _model(p, dtype)
    got = kronvi.mixture_expected_loglik(q, q_n, prior_w, prior_n, stats)
    ref = _ref_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])[0]
    assert got.dtype == dtype
    np.testing.assert_allclose(float(got), ref, rtol=tol(dtype, x32=1e-4))


def test_one_component_mixture_is_mean_field():
    with jax.enable_x64(True):
        p = _problem(3, r=1)
        q, q_n, prior_w, prior_n, stats = _model(p)
        q_w = kronvi.MeanField(q.logits[0])
        np.testing.assert_allclose(
            kronvi.mixture_expected_loglik(q, q_n, prior_w, prior_n, stats),
            _ref_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])[0],
            rtol=1e-12,
        )
        m_ref, v_ref = kronvi.predict_regression(q_w, q_n, prior_w, prior_n, p["Phi"])
        m, v = kronvi.predict_mixture(q, q_n, prior_w, prior_n, p["Phi"])
        np.testing.assert_allclose(m, m_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(v, v_ref, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------
# Theorem 3 bound
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_bound_below_exact_elbo_for_random_centres(seed):
    with jax.enable_x64(True):
        p = _problem(seed)
        q, q_n, prior_w, prior_n, stats = _model(p)
        exact = _ref_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
        rng = np.random.default_rng(100 + seed)
        centres = [rng.normal(size=(3, 3)) for _ in range(5)] + [np.asarray(q.log_marginals)]
        gaps = []
        for log_c in centres:
            bound = float(kronvi.mixture_elbo_bound(q, log_c, q_n, prior_w, prior_n, stats))
            literal = float(kronvi.mixture_elbo_bound(q, log_c, q_n, prior_w, prior_n, stats, rescale=False))
            assert literal <= bound  # the rescaled form is the theorem at the best multiple of a
            # ... and is invariant to rescaling a (per-factor shifts of log a).
            shifted = kronvi.mixture_elbo_bound(
                q, log_c + rng.normal(size=(3, 1)), q_n, prior_w, prior_n, stats
            )
            np.testing.assert_allclose(float(shifted), bound, rtol=1e-12)
            gaps.append(exact - bound)
        assert min(gaps) > 0  # r = 2 distinct components: strictly below
        # ... and the bound at the marginals is tighter than at random centres.
        assert gaps[-1] < min(gaps[:-1])


def test_bound_entropy_part_matches_tangent_inequality_by_enumeration():
    """The entropy part alone equals 1 - <q, log a> - <q, q / a> computed on dense vectors."""
    with jax.enable_x64(True):
        p = _problem(4)
        q, q_n, prior_w, prior_n, stats = _model(p)
        log_c = np.random.default_rng(0).normal(size=(3, 3))
        ell, elp, h, noise, qx = _ref_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
        cfg = enumerate_configs(3, 3)
        log_a = log_c[np.arange(3), cfg].sum(-1)
        h_bound_ref = 1 - np.sum(qx * log_a) - np.sum(qx**2 / np.exp(log_a))
        bound = kronvi.mixture_elbo_bound(q, log_c, q_n, prior_w, prior_n, stats, rescale=False)
        np.testing.assert_allclose(float(bound), ell + elp + noise + h_bound_ref, rtol=1e-12)
        assert h_bound_ref < h
        # rescaled form: -<q, log a> - log <q, q / a>, by enumeration too
        h_rescaled_ref = -np.sum(qx * log_a) - np.log(np.sum(qx**2 / np.exp(log_a)))
        bound = kronvi.mixture_elbo_bound(q, log_c, q_n, prior_w, prior_n, stats)
        np.testing.assert_allclose(float(bound), ell + elp + noise + h_rescaled_ref, rtol=1e-12)
        assert h_bound_ref < h_rescaled_ref < h


@pytest.mark.parametrize("seed", [0, 1])
def test_bound_equals_exact_elbo_for_one_component_at_q(dtype, seed):
    p = _problem(seed, r=1)
    q, q_n, prior_w, prior_n, stats = _model(p, dtype)
    exact = _ref_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
    literal = kronvi.mixture_elbo_bound(q, q.log_probs[0], q_n, prior_w, prior_n, stats, rescale=False)
    np.testing.assert_allclose(float(literal), exact, rtol=tol(dtype, x32=1e-4))
    bound = kronvi.mixture_elbo_bound(q, q.log_probs[0], q_n, prior_w, prior_n, stats)
    assert bound.dtype == dtype
    np.testing.assert_allclose(float(bound), exact, rtol=tol(dtype, x32=1e-4))
    mf = kronvi.regression_elbo(kronvi.MeanField(q.logits[0]), q_n, prior_w, prior_n, stats)
    np.testing.assert_allclose(float(bound), float(mf), rtol=tol(dtype, x32=1e-5))
    # Any other centre is strictly worse.
    worse = kronvi.mixture_elbo_bound(q, q.log_probs[0] + 0.3 * jnp.eye(3), q_n, prior_w, prior_n, stats)
    assert float(worse) < float(bound) - 1e-3
    # (the literal form also needs the right scale: a = 2q is strictly worse there)
    off = kronvi.mixture_elbo_bound(q, q.log_probs[0] + 0.7, q_n, prior_w, prior_n, stats, rescale=False)
    assert float(off) < float(literal) - 1e-3


def test_bound_log_space_survives_many_weights():
    """Many weights, distinct components: <q, q/a> ~ e^130 overflows float32; the rescaled form is finite."""
    b, m = 150, 15
    key = jax.random.key(0)
    q = kronvi.Mixture(3.0 * jax.random.normal(key, (3, b, m)), jnp.zeros(3))
    prior_w = kronvi.gaussian_prior(b, 1.0, levels=m)
    prior_n = kronvi.noise_prior(1.0, levels=5)
    stats = kronvi.RegressionStats(jnp.asarray(10.0), jnp.asarray(1.0), jnp.zeros(b), jnp.eye(b) * 0.01)
    q_n = kronvi.MeanField.from_prior(prior_n)
    bound, grads = jax.jit(jax.value_and_grad(kronvi.mixture_elbo_bound, argnums=(0, 1)))(
        q, q.log_marginals, q_n, prior_w, prior_n, stats
    )
    assert np.isfinite(float(bound))
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    literal = kronvi.mixture_elbo_bound(q, q.log_marginals, q_n, prior_w, prior_n, stats, rescale=False)
    assert float(literal) == -np.inf  # documented: the literal form overflows here


def test_bound_gradients_match_finite_differences():
    with jax.enable_x64(True):
        p = _problem(5)
        q, q_n, prior_w, prior_n, stats = _model(p)
        log_c = jnp.asarray(np.random.default_rng(1).normal(size=(3, 3)) * 0.3)

        @jax.jit
        def f(logits, wl, lc, ln):
            return kronvi.mixture_elbo_bound(
                kronvi.Mixture._unchecked(logits, wl), lc, kronvi.MeanField._unchecked(ln), prior_w,
                prior_n, stats,
            )  # fmt: skip

        check_grads(f, (q.logits, q.weight_logits, log_c, q_n.logits), order=1, modes=["rev"], eps=1e-4)
        lit = jax.jit(
            lambda lc: kronvi.mixture_elbo_bound(q, lc, q_n, prior_w, prior_n, stats, rescale=False)
        )
        check_grads(lit, (log_c,), order=1, modes=["rev"], eps=1e-4)

        @jax.jit
        def g(logits, wl, ln):
            qq, qn = kronvi.Mixture._unchecked(logits, wl), kronvi.MeanField._unchecked(ln)
            return kronvi.mixture_expected_loglik(qq, qn, prior_w, prior_n, stats)

        check_grads(g, (q.logits, q.weight_logits, q_n.logits), order=1, modes=["fwd", "rev"], eps=1e-4)


# ---------------------------------------------------------------------------------------------------
# Theorem 4: mixture priors
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed,C", [(0, 2), (1, 3), (2, 2)])
def test_mixture_prior_bound_below_exact(seed, C):
    with jax.enable_x64(True):
        p = _problem(seed, num_prior_components=C)
        q, q_n, prior_w, prior_n, stats = _model(p, mixture_prior=True)
        _, exact, _, _, qx = _ref_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], True)
        got = float(kronvi.mixture_prior_bound(q, prior_w))
        assert got <= exact
        # It is at least the simpler Jensen bound with responsibilities beta: sum_c beta_c E_q log p_c.
        cfg = enumerate_configs(3, 3)
        e_c = np.array(
            [np.sum(qx * lp[np.arange(3), cfg].sum(-1)) for lp in _log_softmax(p["prior_mix_logp"])]
        )
        simple = np.sum(np.exp(_log_softmax(p["prior_mix_logw"])) * e_c)
        assert got >= simple - 1e-12
        # Reference for the formula itself: sum_k alpha_k LSE_c(log beta_c + E_{q^(k)} log p^(c)).
        alpha = softmax(p["mix_wlogits"])
        e_kc = np.einsum("kjm,cjm->kc", softmax(p["mix_logits"]), _log_softmax(p["prior_mix_logp"]))
        ref = np.sum(alpha * logsumexp(_log_softmax(p["prior_mix_logw"])[None] + e_kc, axis=1))
        np.testing.assert_allclose(got, ref, rtol=1e-12)
        # And the ELBO bound with a mixture prior stays below the exact ELBO.
        bound = float(kronvi.mixture_elbo_bound(q, q.log_marginals, q_n, prior_w, prior_n, stats))
        assert bound < _ref_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], True)


def test_mixture_prior_bound_exact_for_one_prior_component():
    with jax.enable_x64(True):
        p = _problem(6, num_prior_components=1)
        q, _, prior_w, _, _ = _model(p, mixture_prior=True)
        exact = _ref_terms(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], True)[1]
        np.testing.assert_allclose(float(kronvi.mixture_prior_bound(q, prior_w)), exact, rtol=1e-12)
        q_w = kronvi.MeanField(q.logits[0])
        dense = kronvi.DiscretePrior(prior_w.values, prior_w.log_probs[0])
        np.testing.assert_allclose(
            kronvi.mixture_prior_bound(q_w, prior_w), kronvi.mixture_prior_bound(q_w, dense), rtol=1e-12
        )


# ---------------------------------------------------------------------------------------------------
# Stochastic estimate: unbiased gradient and value
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", kronvi.mixtures.ESTIMATORS)
@pytest.mark.parametrize("mixture_prior", [False, True])
def test_estimator_gradient_is_unbiased(mixture_prior, estimator):
    """Averaged over many keys the surrogate's gradient matches the enumerated ELBO gradient.

    num_samples=2 is the hardest case for the leave-one-out baseline: a baseline that used the sample
    itself would shrink the entropy gradient by half and fail this test.
    """
    with jax.enable_x64(True):
        p = _problem(7, num_prior_components=2 if mixture_prior else None)
        q, q_n, prior_w, prior_n, stats = _model(p, mixture_prior=mixture_prior)
        args = (q.logits, q.weight_logits, q_n.logits)
        exact = jax.grad(_jnp_elbo(p, mixture_prior), argnums=(0, 1, 2))(*args)
        np.testing.assert_allclose(
            _jnp_elbo(p, mixture_prior)(*args),
            _ref_elbo(p, *(np.asarray(a) for a in args), mixture_prior),
            rtol=1e-12,
        )

        def grad_one(key):
            def f(logits, wl, ln):
                qq, qn = kronvi.Mixture._unchecked(logits, wl), kronvi.MeanField._unchecked(ln)
                return kronvi.mixture_elbo_estimate(
                    key, qq, qn, prior_w, prior_n, stats, num_samples=2, estimator=estimator
                )

            return jax.grad(f, argnums=(0, 1, 2))(*args)

        K = 20000
        grads = jax.jit(jax.vmap(grad_one))(jax.random.split(jax.random.key(0), K))
        for g, e in zip(grads, exact, strict=True):
            mean = np.mean(g, axis=0)
            se = np.std(g, axis=0) / np.sqrt(K)
            z = np.abs(mean - e) / (se + 1e-12)
            assert np.all(z < 5), (np.max(z), mean, e)
        # Not trivially satisfied: the entropy part of the gradient is noisy but non-zero.
        assert np.max(np.std(grads[0], axis=0)) > 1e-3


@pytest.mark.parametrize("estimator", kronvi.mixtures.ESTIMATORS)
def test_estimator_gradient_in_mixture_prior_parameters_is_unbiased(estimator):
    """The prior's own parameters (a learnable MixturePrior) get the pathwise gradient of the sampled
    log p: averaged over keys it matches the enumerated gradient of E_q[log p]."""
    with jax.enable_x64(True):
        p = _problem(15, num_prior_components=2)
        q, q_n, prior_w, prior_n, stats = _model(p, mixture_prior=True)
        b, m = p["values"].shape
        cfg = enumerate_configs(b, m)
        qx = np.exp(_ref_log_q(p["mix_logits"], p["mix_wlogits"]))

        def e_log_p(lp, lw):
            per = jnp.sum(lp[:, np.arange(b), cfg], -1)  # (C, configs)
            return jnp.sum(qx * jax.nn.logsumexp(lw[:, None] + per, axis=0))

        exact = jax.grad(e_log_p, argnums=(0, 1))(prior_w.log_probs, prior_w.log_weights)

        def grad_one(key):
            g = jax.grad(
                lambda pw: kronvi.mixture_elbo_estimate(
                    key, q, q_n, pw, prior_n, stats, num_samples=2, estimator=estimator
                )
            )(prior_w)
            return g.log_probs, g.log_weights

        K = 20000
        grads = jax.jit(jax.vmap(grad_one))(jax.random.split(jax.random.key(0), K))
        for g, e in zip(grads, exact, strict=True):
            mean, se = np.mean(g, axis=0), np.std(g, axis=0) / np.sqrt(K)
            assert np.all(np.abs(mean - e) < 5 * se + 1e-12), (mean, e)
            assert np.max(np.abs(e)) > 1e-2


@pytest.mark.parametrize("estimator", kronvi.mixtures.ESTIMATORS)
def test_unbiased_value_matches_exact_elbo(estimator):
    with jax.enable_x64(True):
        p = _problem(8, num_prior_components=2)
        for mixture_prior in (False, True):
            q, q_n, prior_w, prior_n, stats = _model(p, mixture_prior=mixture_prior)
            exact = _ref_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], mixture_prior)
            key = jax.random.key(1)
            kw = dict(num_samples=50000, estimator=estimator)
            est, se = kronvi.mixture_elbo_unbiased(key, q, q_n, prior_w, prior_n, stats, **kw)
            assert abs(float(est) - exact) < 5 * float(se)
            assert 0 < float(se) < 0.05
            # The surrogate's value is the same estimate on the same draws.
            sur = kronvi.mixture_elbo_estimate(key, q, q_n, prior_w, prior_n, stats, **kw)
            np.testing.assert_allclose(float(sur), float(est), rtol=1e-12)


def test_unbiased_in_chunks_is_the_mean_of_the_chunk_estimates():
    """chunk_size runs num_samples // chunk_size estimates with split keys: their mean, and standard
    errors combined as for a mean of independent estimates; still unbiased against enumeration."""
    with jax.enable_x64(True):
        p = _problem(13)
        q, q_n, prior_w, prior_n, stats = _model(p)
        key = jax.random.key(5)
        est, se = kronvi.mixture_elbo_unbiased(
            key, q, q_n, prior_w, prior_n, stats, num_samples=4000, chunk_size=1000
        )
        parts = [
            kronvi.mixture_elbo_unbiased(k, q, q_n, prior_w, prior_n, stats, num_samples=1000)
            for k in jax.random.split(key, 4)
        ]
        np.testing.assert_allclose(float(est), np.mean([float(e) for e, _ in parts]), rtol=1e-12)
        np.testing.assert_allclose(
            float(se), np.sqrt(np.sum([float(s) ** 2 for _, s in parts])) / 4, rtol=1e-12
        )
        exact = _ref_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
        assert 0 < float(se) and abs(float(est) - exact) < 5 * float(se)
        # One compiled program for repeated calls with new values (a study calls it thousands of times).
        from kronvi.mixtures._core import _unbiased_in_chunks

        before = _unbiased_in_chunks._cache_size()
        for shift in (0.1, 0.2, 0.3):
            q2 = kronvi.Mixture(q.logits + shift, q.weight_logits)
            kronvi.mixture_elbo_unbiased(
                key, q2, q_n, prior_w, prior_n, stats, num_samples=4000, chunk_size=1000
            )
        assert _unbiased_in_chunks._cache_size() == before
        for bad in (0, 1, 3000, 1.5):
            with pytest.raises(ValueError, match="chunk_size"):
                kronvi.mixture_elbo_unbiased(
                    key, q, q_n, prior_w, prior_n, stats, num_samples=4000, chunk_size=bad
                )


def test_score_only_gradient_is_exact_at_identical_components():
    """At identical components the log-ratio g = log q_k - log q is zero at every draw, so the score-only
    gradients ("stratified", "local") are the exact ELBO gradient for every key; the pathwise variant is not (its
    extra term has expectation zero but is random), which is the noise the score-only form removes."""
    with jax.enable_x64(True):
        p = _problem(11)
        _, q_n, prior_w, prior_n, stats = _model(p)
        logits = np.repeat(p["mix_logits"][:1], 3, axis=0)  # three copies of one component
        args = (jnp.asarray(logits), jnp.asarray(np.array([0.3, -0.2, 0.1])), q_n.logits)
        exact = jax.grad(_jnp_elbo(p), argnums=(0, 1, 2))(*args)

        def grads(estimator, key):
            def f(lg, wl, ln):
                qq, qn = kronvi.Mixture._unchecked(lg, wl), kronvi.MeanField._unchecked(ln)
                return kronvi.mixture_elbo_estimate(
                    key, qq, qn, prior_w, prior_n, stats, num_samples=30, estimator=estimator
                )

            return jax.grad(f, argnums=(0, 1, 2))(*args)

        for key in jax.random.split(jax.random.key(3), 3):
            for est in ("stratified", "local"):
                for g, e in zip(grads(est, key), exact, strict=True):
                    np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
        a, b = (grads("stratified-pathwise", k)[0] for k in jax.random.split(jax.random.key(4)))
        assert np.max(np.abs(a - b)) > 1e-3  # the pathwise term is noise even here
        assert np.max(np.abs(a - exact[0])) > 1e-3


def _total_variance(estimator, q, q_n, prior_w, prior_n, stats, num_samples=40, num_keys=400):
    """Variance of the estimator's gradient in the component logits over keys, summed over the logits."""

    def g(key):
        def f(lg):
            qq = kronvi.Mixture._unchecked(lg, q.weight_logits)
            return kronvi.mixture_elbo_estimate(
                key, qq, q_n, prior_w, prior_n, stats, num_samples=num_samples, estimator=estimator
            )

        return jax.grad(f)(q.logits)

    G = jax.jit(jax.vmap(g))(jax.random.split(jax.random.key(1), num_keys))
    return float(np.sum(np.var(G, axis=0)))


def test_score_only_gradient_has_lower_variance_near_the_mean_field():
    """At a perturbed copy of one factorized q (as the SGD fit starts) the score-only gradient's total
    variance is a fraction of the pathwise variant's; both are unbiased (test above)."""
    with jax.enable_x64(True):
        p = _problem(12, b=6, m=4)
        _, q_n, prior_w, prior_n, stats = _model(p)
        q = kronvi.mixture_from_mean_field(
            jax.random.key(0), kronvi.MeanField(jnp.asarray(p["mix_logits"][0])), 4, noise_scale=0.05
        )

        score_only, pathwise = (
            _total_variance(e, q, q_n, prior_w, prior_n, stats) for e in ("stratified", "stratified-pathwise")
        )
        assert 0 < score_only < 0.2 * pathwise, (score_only, pathwise)


@pytest.mark.parametrize("mixture_prior", [False, True])
def test_local_scores_match_enumeration_over_each_site(mixture_prior):
    """For one draw x of component k, the local score of factor j is sum_l q_kj(l) f(x_-j, l) (e_l - q_kj)
    with f = log q_k - log q (+ log p): every single-site change of x evaluated by brute force."""
    from kronvi.mixtures._core import _local_scores

    with jax.enable_x64(True):
        p = _problem(14, b=4, m=3, r=3, num_prior_components=2)
        q, _, prior_w, _, _ = _model(p, mixture_prior=mixture_prior)
        rng = np.random.default_rng(0)
        idx = rng.integers(0, 3, size=(3, 2, 4))  # (r, draws per component, b)
        got = np.asarray(_local_scores(q, prior_w, jnp.asarray(idx), batch_size=4))
        lq = _log_softmax(p["mix_logits"])
        lw = _log_softmax(p["mix_wlogits"])

        def log_mix(log_probs, log_weights, x):
            return logsumexp(log_weights + log_probs[:, np.arange(len(x)), x].sum(-1))

        def f(k, x):
            out = lq[k, np.arange(len(x)), x].sum() - log_mix(lq, lw, x)
            if mixture_prior:
                out += log_mix(_log_softmax(p["prior_mix_logp"]), _log_softmax(p["prior_mix_logw"]), x)
            return out

        want = np.zeros_like(got)
        for k in range(3):
            for s in range(2):
                for j in range(4):
                    qkj = np.exp(lq[k, j])
                    F = np.array([f(k, np.r_[idx[k, s, :j], l, idx[k, s, j + 1 :]]) for l in range(3)])
                    want[k, j] += qkj * (F - qkj @ F) / 2
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        assert np.max(np.abs(want)) > 1e-2


def test_local_scores_float32_survive_peaked_and_separated_components():
    """Peaked, well-separated components (logit scale 60: levels e^-200 below the likeliest) underflow
    float32 probabilities. At draws from each component the scores match float64; at arbitrary
    configurations (which another component may explain e^100 times better: probability below e^-87 for a
    real draw) they stay finite."""
    from kronvi.mixtures._core import _local_scores, _sample_per_component

    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        logits = rng.normal(size=(3, 6, 4))  # sites 3-5: soft, overlapping components
        logits[:, :3] = 60.0 * rng.normal(size=(1, 3, 4))  # sites 0-2: shared, peaked
        logits[2, 0] = np.roll(logits[2, 0], 1)  # component 2 another mode at site 0: separated
        prior_w = kronvi.DiscretePrior(jnp.zeros((6, 4)), jnp.zeros((6, 4)))
        q64 = kronvi.Mixture(jnp.asarray(logits), jnp.asarray([0.0, -1.0, 1.0]))
        q32 = kronvi.Mixture(jnp.asarray(logits, jnp.float32), jnp.asarray([0.0, -1.0, 1.0], jnp.float32))
        draws = _sample_per_component(jax.random.key(0), q64.probs, 50)  # (3, 50, 6)
        got = np.asarray(_local_scores(q32, prior_w, draws, batch_size=16))
        want = np.asarray(_local_scores(q64, prior_w, draws, batch_size=16))
        np.testing.assert_allclose(got, want, atol=1e-4)
        assert np.max(np.abs(want)) > 1e-2
        anywhere = jnp.asarray(rng.integers(0, 4, size=(3, 20, 6)))
        assert np.all(np.isfinite(np.asarray(_local_scores(q32, prior_w, anywhere, batch_size=16))))
        # A mixture prior whose components exclude most configurations (levels 0 or 3 only, the rest
        # e^-100): its table has no link to q's draws, so it must be exact in float32 as well.
        lp = np.full((2, 6, 4), -100.0)
        lp[0, :, 0] = lp[1, :, 3] = 0.0
        soft = np.zeros((3, 6, 4))
        soft[:, :, 0] = [[0.5], [0.0], [-0.5]]
        out = {}
        for dt in (jnp.float32, jnp.float64):
            pw = kronvi.MixturePrior(jnp.zeros((6, 4), dt), jnp.asarray(lp, dt), jnp.zeros(2, dt))
            qq = kronvi.Mixture(jnp.asarray(soft, dt), jnp.zeros(3, dt))
            draws = _sample_per_component(jax.random.key(1), qq.probs.astype(jnp.float64), 40)
            out[dt] = np.asarray(_local_scores(qq, pw, draws, batch_size=16))
        scale = np.max(np.abs(out[jnp.float64]))
        assert scale > 1.0
        np.testing.assert_allclose(out[jnp.float32], out[jnp.float64], atol=1e-5 * scale)


def test_local_gradient_has_far_lower_variance_than_stratified():
    """Integrating each factor's own level exactly removes the noise of the other b - 1 factors from its
    score: at a perturbed mean field, at equal draws, a small fraction of the stratified variance."""
    with jax.enable_x64(True):
        p = _problem(12, b=8, m=4)
        _, q_n, prior_w, prior_n, stats = _model(p)
        q = kronvi.mixture_from_mean_field(
            jax.random.key(0), kronvi.MeanField(jnp.asarray(p["mix_logits"][0])), 4, noise_scale=0.1
        )

        local, stratified = (
            _total_variance(e, q, q_n, prior_w, prior_n, stats) for e in ("local", "stratified")
        )
        assert 0 < local < 0.01 * stratified, (local, stratified)  # measured ~1/2000


def test_stratified_estimator_is_exact_for_one_component_and_has_lower_variance():
    with jax.enable_x64(True):
        p = _problem(9)
        q, q_n, prior_w, prior_n, stats = _model(p, mixture_prior=False)
        one = kronvi.Mixture(q.logits[:1], q.weight_logits[:1])
        exact = kronvi.regression_elbo(kronvi.MeanField(q.logits[0]), q_n, prior_w, prior_n, stats)
        est, se = kronvi.mixture_elbo_unbiased(
            jax.random.key(0), one, q_n, prior_w, prior_n, stats, num_samples=8
        )
        np.testing.assert_allclose(float(est), float(exact), rtol=1e-12)
        assert float(se) == 0.0
        # Overlapping components (a perturbed mean field, as the SGD fit starts): far smaller error.
        close = kronvi.mixture_from_mean_field(
            jax.random.key(1), kronvi.MeanField(q.logits[0]), 3, noise_scale=0.1
        )
        ses = {
            e: float(kronvi.mixture_elbo_unbiased(
                jax.random.key(2), close, q_n, prior_w, prior_n, stats, num_samples=3000, estimator=e
            )[1])
            for e in ("stratified", "score")
        }  # fmt: skip
        assert ses["stratified"] < 0.2 * ses["score"], ses
    with pytest.raises(ValueError, match="estimator"):
        kronvi.mixture_elbo_estimate(
            jax.random.key(0), q, q_n, prior_w, prior_n, stats, num_samples=4, estimator="rb"
        )


def test_sampling_matches_mixture_probabilities():
    with jax.enable_x64(True):
        p = _problem(9)
        q = _model(p)[0]
        N = 40000
        x = kronvi.sample_mixture(jax.random.key(3), q, N)
        assert x.shape == (N, 3) and x.dtype == jnp.uint8
        codes = np.ravel_multi_index(np.asarray(x, int).T, (3, 3, 3))
        freq = np.bincount(codes, minlength=27) / N
        qx = np.exp(_ref_log_q(p["mix_logits"], p["mix_wlogits"]))
        assert np.all(np.abs(freq - qx) < 5 * np.sqrt(qx * (1 - qx) / N) + 1e-4)


# ---------------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------------


def test_predictive_moments_match_enumeration(dtype):
    p = _problem(10)
    q, q_n, prior_w, prior_n, stats = _model(p, dtype)
    Phi_new = np.random.default_rng(0).normal(size=(4, 3))
    mean, var = kronvi.predict_mixture(q, q_n, prior_w, prior_n, jnp.asarray(Phi_new, dtype))
    cfg = enumerate_configs(3, 3)
    W = p["values"][np.arange(3), cfg]
    qx = np.exp(_ref_log_q(p["mix_logits"], p["mix_wlogits"]))
    f = W @ Phi_new.T  # (C, N)
    m_ref = qx @ f
    e_s = softmax(p["qn_logits"])[0] @ p["noise_vals"][0]
    v_ref = qx @ (f - m_ref) ** 2 + e_s
    assert mean.dtype == dtype and var.dtype == dtype
    np.testing.assert_allclose(mean, m_ref, rtol=tol(dtype, x32=1e-4), atol=tol(dtype, x32=1e-5))
    np.testing.assert_allclose(var, v_ref, rtol=tol(dtype, x32=1e-4))


# ---------------------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------------------


def _bimodal_problem():
    """Two nearly identical features: the posterior puts ~0.6 / 0.4 on w = (1, 0, 0) and (0, 1, 0)."""
    rng = np.random.default_rng(0)
    n = 40
    z = rng.normal(size=(n, 1))
    Phi = np.concatenate([z + 0.01 * rng.normal(size=(n, 1)), z + 0.01 * rng.normal(size=(n, 1)),
                          rng.normal(size=(n, 1))], 1)  # fmt: skip
    y = Phi[:, 0] + 0.3 * rng.normal(size=n)
    stats = kronvi.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    prior_w = kronvi.gaussian_prior(3, 1.0, levels=3, width=1.0)
    prior_n = kronvi.noise_prior(0.09, levels=5)
    p = dict(Phi=Phi, y=y, values=np.asarray(prior_w.values), log_prior=np.asarray(prior_w.log_probs),
             noise_vals=np.asarray(prior_n.values), log_prior_n=np.asarray(prior_n.log_probs))  # fmt: skip
    # log evidence by enumeration over weights and noise
    cfg = enumerate_configs(3, 3)
    W = p["values"][np.arange(3), cfg]
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    s = p["noise_vals"][0]
    joint = (-0.5 * n * np.log(2 * np.pi * s)[None] - 0.5 * rss[:, None] / s[None]
             + _ref_log_prior(p)[:, None] + p["log_prior_n"][0][None])  # fmt: skip
    # Two components, each leaning (weakly) toward one mode.
    L = np.zeros((2, 3, 3))
    L[0, 0, 2] = L[0, 1, 1] = L[1, 0, 1] = L[1, 1, 2] = L[:, 2, 1] = 1.0
    return p, stats, prior_w, prior_n, logsumexp(joint), kronvi.Mixture(L, np.zeros(2))


@pytest.mark.parametrize("method", ["lbfgs", "optax-lbfgs"])
def test_fit_mixture_bound(method):
    with jax.enable_x64(True):
        p, stats, prior_w, prior_n, log_z, q0 = _bimodal_problem()
        q_w, q_n, info_mf = kronvi.fit_regression(stats, prior_w, prior_n, anneal_sweeps=20)
        mf = float(info_mf.elbo[info_mf.num_iter])
        # From a one-component mixture at the mean-field optimum the bound is the mean-field ELBO.
        q_mf = kronvi.Mixture.from_mean_field(q_w)
        at_mf = kronvi.mixture_elbo_bound(q_mf, q_mf.log_marginals, q_n, prior_w, prior_n, stats)
        np.testing.assert_allclose(float(at_mf), mf, rtol=1e-10)

        q, log_c, q_n2, info = kronvi.fit_mixture_bound(
            stats, prior_w, prior_n, init=(q0, q_n), method=method, max_iter=300
        )
        final = float(info.elbo[info.num_iter])
        assert final > float(info.elbo[0])
        np.testing.assert_allclose(
            final, float(kronvi.mixture_elbo_bound(q, log_c, q_n2, prior_w, prior_n, stats)), rtol=1e-10
        )
        exact = _ref_elbo(p, np.asarray(q.logits), np.asarray(q.weight_logits), np.asarray(q_n2.logits))
        assert final <= exact <= log_z + 1e-9
        assert final > mf + 0.4  # captures both modes: ~ +0.5 nats over mean field
        np.testing.assert_allclose(np.sort(np.asarray(q.weights)), [0.39, 0.61], atol=0.02)


def test_fit_mixture_sgd_and_noise_cavi():
    with jax.enable_x64(True):
        p, stats, prior_w, prior_n, log_z, q0 = _bimodal_problem()
        q_w, q_n, info_mf = kronvi.fit_regression(stats, prior_w, prior_n, anneal_sweeps=20)
        mf = float(info_mf.elbo[info_mf.num_iter])
        q, q_n2, info = kronvi.fit_mixture_sgd(
            jax.random.key(0), stats, prior_w, prior_n, init=(q0, q_n), optimizer=optax.adam(0.1),
            num_steps=400, num_samples=16,
        )  # fmt: skip
        assert info.elbo.shape == (400,) and info.grad_norm.shape == (400,)
        args = (q.logits, q.weight_logits, q_n2.logits)
        exact = _ref_elbo(p, *(np.asarray(a) for a in args))
        assert mf + 0.3 < exact <= log_z
        assert float(np.mean(info.elbo[-50:])) > mf + 0.3
        # The noise factor is the exact CAVI optimum given q: zero gradient of the exact ELBO there.
        g_noise = jax.grad(_jnp_elbo(p), argnums=2)(*args)
        np.testing.assert_allclose(g_noise, 0.0, atol=1e-8)


def test_mixture_from_mean_field_components():
    with jax.enable_x64(True):
        q_w = kronvi.MeanField(np.log(np.array([[1.0, 1e-300, 1e-300], [0.2, 0.3, 0.5]])))
        q = kronvi.mixture_from_mean_field(jax.random.key(0), q_w, 3, noise_scale=0.0, smoothing=0.3)
        np.testing.assert_allclose(q.probs, np.broadcast_to(0.7 * q_w.probs + 0.1, (3, 2, 3)), rtol=1e-12)
        np.testing.assert_allclose(q.weights, 1 / 3, rtol=1e-12)
        noisy = kronvi.mixture_from_mean_field(jax.random.key(0), q_w, 3, noise_scale=0.5)
        dev = np.asarray(noisy.logits - q_w.log_probs[None])
        assert 0.3 < dev.std() < 0.7 and not np.allclose(dev[0], dev[1])


def test_noise_cavi_update_maximizes_exact_elbo():
    with jax.enable_x64(True):
        p = _problem(11)
        q, q_n, prior_w, prior_n, stats = _model(p)
        best = _noise_cavi_logits(q, prior_w, prior_n, stats)
        f = _jnp_elbo(p)
        e_best = float(f(q.logits, q.weight_logits, best))
        rng = np.random.default_rng(0)
        for _ in range(5):
            assert float(f(q.logits, q.weight_logits, best + 0.3 * rng.normal(size=best.shape))) < e_best
        np.testing.assert_allclose(jax.grad(f, argnums=2)(q.logits, q.weight_logits, best), 0.0, atol=1e-10)


def test_sgd_init_step_jit_and_gradient_noise_update():
    with jax.enable_x64(True):
        p = _problem(12)
        q, q_n, prior_w, prior_n, stats = _model(p)
        opt = optax.sgd(1e-2)
        state = kronvi.mixture_sgd_init(q, q_n, optimizer=opt)
        step = jax.jit(
            lambda k, s: kronvi.mixture_sgd_step(
                k, s, stats, prior_w, prior_n, optimizer=opt, num_samples=8, noise_update="gradient"
            )
        )
        new, info = step(jax.random.key(0), state)
        assert jax.tree.structure(new) == jax.tree.structure(state)
        # With plain SGD the update is -lr * grad(-L / n): reproduce it from the estimator.
        n = float(stats.n)
        g = jax.grad(
            lambda qq, qn: kronvi.mixture_elbo_estimate(
                jax.random.key(0), qq, qn, prior_w, prior_n, stats, num_samples=8
            ),
            argnums=(0, 1),
        )(q, q_n)
        np.testing.assert_allclose(new.q.logits, q.logits + 1e-2 * g[0].logits / n, rtol=1e-12)
        np.testing.assert_allclose(new.q_noise.logits, q_n.logits + 1e-2 * g[1].logits / n, rtol=1e-12)
        assert np.isfinite(float(info.elbo)) and float(info.grad_norm) > 0


# ---------------------------------------------------------------------------------------------------
# Contracts: jit, vmap over folds, dtype
# ---------------------------------------------------------------------------------------------------


def test_vmap_over_folds_float32_and_no_retrace():
    p = _problem(13)
    q, q_n, prior_w, prior_n, _ = _model(p, np.float32)
    Phi, y = jnp.asarray(p["Phi"], jnp.float32), jnp.asarray(p["y"], jnp.float32)
    folds = [kronvi.regression_stats(Phi[:4], y[:4]), kronvi.regression_stats(Phi[3:], y[3:])]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *folds)
    traces = []

    def objectives(s, key):
        traces.append(1)
        bound = kronvi.mixture_elbo_bound(q, q.log_marginals, q_n, prior_w, prior_n, s)
        est = kronvi.mixture_elbo_estimate(key, q, q_n, prior_w, prior_n, s, num_samples=4)
        return bound, est

    f = jax.jit(jax.vmap(objectives))
    bound, est = f(stacked, jax.random.split(jax.random.key(0), 2))
    assert bound.shape == (2,) and bound.dtype == jnp.float32 and est.dtype == jnp.float32
    for k in range(2):
        one = kronvi.mixture_elbo_bound(q, q.log_marginals, q_n, prior_w, prior_n, folds[k])
        np.testing.assert_allclose(bound[k], one, rtol=1e-5)
    f(jax.tree.map(lambda x: 1.5 * x, stacked), jax.random.split(jax.random.key(1), 2))
    assert len(traces) == 1


# ---------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------


def test_bad_inputs():
    p = _problem(14, num_prior_components=2)
    q, q_n, prior_w, prior_n, stats = _model(p, np.float32)
    with pytest.raises(ValueError, match="`logits` must be 3-D"):
        kronvi.Mixture(np.zeros((3, 3)), np.zeros(1))
    with pytest.raises(ValueError, match="`weight_logits` has 3 entries"):
        kronvi.Mixture(np.zeros((2, 3, 3)), np.zeros(3))
    nan_logits = np.zeros((1, 3, 3))
    nan_logits[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match="`logits` contains 1 NaN"):
        kronvi.Mixture(nan_logits, [0.0])
    with pytest.raises(ValueError, match="`weight_logits` contains"):
        kronvi.Mixture(np.zeros((1, 3, 3)), [np.inf])
    with pytest.raises(ValueError, match="empty"):
        kronvi.Mixture(np.zeros((0, 3, 3)), np.zeros(0))
    with pytest.raises(ValueError, match="`log_probs` shape"):
        kronvi.MixturePrior(np.zeros((3, 3)), np.zeros((2, 3, 4)), np.zeros(2))
    with pytest.raises(ValueError, match="`log_weights` has 3 entries"):
        kronvi.MixturePrior(np.zeros((3, 3)), np.zeros((2, 3, 3)), np.zeros(3))
    with pytest.raises(TypeError, match="`q` must be a Mixture"):
        kronvi.mixture_elbo_bound(kronvi.MeanField(q.logits[0]), q.logits[0], q_n, prior_w, prior_n, stats)
    with pytest.raises(ValueError, match="`log_center` must have shape"):
        kronvi.mixture_elbo_bound(q, np.zeros((3, 4)), q_n, prior_w, prior_n, stats)
    with pytest.raises(ValueError, match="`log_center` contains"):
        kronvi.mixture_elbo_bound(q, np.full((3, 3), np.nan), q_n, prior_w, prior_n, stats)
    big = kronvi.gaussian_prior(4, 1.0, levels=3)
    with pytest.raises(ValueError, match="`prior_w` grid has shape"):
        kronvi.mixture_elbo_bound(q, q.log_marginals, q_n, big, prior_n, stats)
    with pytest.raises(TypeError, match="`prior_w` must be a DiscretePrior or MixturePrior"):
        kronvi.mixture_expected_loglik(q, q_n, np.zeros((3, 3)), prior_n, stats)
    with pytest.raises(TypeError, match="`stats` must be RegressionStats"):
        kronvi.mixture_expected_loglik(q, q_n, prior_w, prior_n, (1.0, 1.0))
    bad_stats = kronvi.regression_stats(np.ones((5, 4)), np.ones(5))
    with pytest.raises(ValueError, match="`stats` describe 4 features"):
        kronvi.mixture_expected_loglik(q, q_n, prior_w, prior_n, bad_stats)
    with pytest.raises(ValueError, match="`stats.n` must be positive"):
        kronvi.mixture_expected_loglik(q, q_n, prior_w, prior_n, stats._replace(n=jnp.asarray(0.0)))
    with pytest.raises(ValueError, match="`q_noise.logits` has shape"):
        kronvi.mixture_expected_loglik(q, kronvi.MeanField(np.zeros((1, 5))), prior_w, prior_n, stats)
    key = jax.random.key(0)
    for bad in (1, 0, 2.0, True):
        with pytest.raises(ValueError, match="`num_samples` must be an int >= 2"):
            kronvi.mixture_elbo_estimate(key, q, q_n, prior_w, prior_n, stats, num_samples=bad)
    with pytest.raises(ValueError, match="`num_samples` must be an int >= 1"):
        kronvi.sample_mixture(key, q, 0)
    with pytest.raises(ValueError, match="uint8 indices need <= 256"):
        kronvi.sample_mixture(key, kronvi.Mixture(np.zeros((1, 1, 300)), [0.0]), 3)
    with pytest.raises(ValueError, match="`Phi_new` has 2 features"):
        kronvi.predict_mixture(q, q_n, prior_w, prior_n, np.ones((4, 2)))
    with pytest.raises(ValueError, match="`num_components` must be an int >= 1"):
        kronvi.mixture_from_mean_field(key, kronvi.MeanField(q.logits[0]), 0)
    with pytest.raises(ValueError, match="`smoothing` must be in"):
        kronvi.mixture_from_mean_field(key, kronvi.MeanField(q.logits[0]), 2, smoothing=1.5)
    with pytest.raises(TypeError, match="`init` must be a tuple"):
        kronvi.fit_mixture_bound(stats, prior_w, prior_n, init=q)
    with pytest.raises(ValueError, match="`method` must be one of"):
        kronvi.fit_mixture_bound(stats, prior_w, prior_n, init=(q, q_n), method="adam")
    with pytest.raises(TypeError, match="`optimizer` must be an optax.GradientTransformation"):
        kronvi.fit_mixture_sgd(key, stats, prior_w, prior_n, init=(q, q_n), optimizer="adam", num_steps=2,
                               num_samples=4)  # fmt: skip
    with pytest.raises(ValueError, match="`noise_update` must be one of"):
        kronvi.fit_mixture_sgd(key, stats, prior_w, prior_n, init=(q, q_n), optimizer=optax.adam(0.1),
                               num_steps=2, num_samples=4, noise_update="exact")  # fmt: skip
    with pytest.raises(ValueError, match="`num_steps` must be an int >= 1"):
        kronvi.fit_mixture_sgd(key, stats, prior_w, prior_n, init=(q, q_n), optimizer=optax.adam(0.1),
                               num_steps=0, num_samples=4)  # fmt: skip
    with pytest.raises(TypeError, match="`state` must be a MixtureSGDState"):
        kronvi.mixture_sgd_step(key, (q, q_n), stats, prior_w, prior_n, optimizer=optax.adam(0.1),
                                num_samples=4)  # fmt: skip
    with pytest.raises(TypeError, match="`priors` must be a non-empty sequence"):
        kronvi.MixturePrior.from_priors([])
    with pytest.raises(ValueError, match="different grid"):
        kronvi.MixturePrior.from_priors([kronvi.gaussian_prior(3, 1.0, levels=3),
                                         kronvi.gaussian_prior(3, 2.0, levels=3)])  # fmt: skip
