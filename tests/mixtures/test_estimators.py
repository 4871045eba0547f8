"""Stochastic ELBO estimates: unbiased gradients and values against enumeration, variance orderings."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    enumerate_configs,
    jnp_mixture_elbo,
    mixture_model,
    mixture_problem,
    ref_mixture_elbo,
    ref_mixture_log_q,
)

import kronvi
from kronvi.mixtures._estimators import _unbiased_in_chunks


@pytest.mark.parametrize("estimator", kronvi.mixtures.ESTIMATORS)
@pytest.mark.parametrize("mixture_prior", [False, True])
def test_estimator_gradient_is_unbiased(mixture_prior, estimator):
    """Averaged over many keys the surrogate's gradient matches the enumerated ELBO gradient.

    num_samples=2 is the hardest case for the leave-one-out baseline: a baseline that used the sample
    itself would shrink the entropy gradient by half and fail this test.
    """
    with jax.enable_x64(True):
        p = mixture_problem(7, num_prior_components=2 if mixture_prior else None)
        q, q_n, prior_w, prior_n, stats = mixture_model(p, mixture_prior=mixture_prior)
        args = (q.logits, q.weight_logits, q_n.logits)
        exact = jax.grad(jnp_mixture_elbo(p, mixture_prior), argnums=(0, 1, 2))(*args)
        np.testing.assert_allclose(
            jnp_mixture_elbo(p, mixture_prior)(*args),
            ref_mixture_elbo(p, *(np.asarray(a) for a in args), mixture_prior),
            rtol=1e-12,
        )

        def grad_one(key):
            def f(logits, wl, ln):
                qq, qn = kronvi.mixtures.Mixture._unchecked(logits, wl), kronvi.model.MeanField._unchecked(ln)
                return kronvi.mixtures.mixture_elbo_estimate(
                    key, stats, qq, qn, prior_w, prior_n, num_samples=2, estimator=estimator
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
        p = mixture_problem(15, num_prior_components=2)
        q, q_n, prior_w, prior_n, stats = mixture_model(p, mixture_prior=True)
        b, m = p["values"].shape
        cfg = enumerate_configs(b, m)
        qx = np.exp(ref_mixture_log_q(p["mix_logits"], p["mix_wlogits"]))

        def e_log_p(lp, lw):
            per = jnp.sum(lp[:, np.arange(b), cfg], -1)  # (C, configs)
            return jnp.sum(qx * jax.nn.logsumexp(lw[:, None] + per, axis=0))

        exact = jax.grad(e_log_p, argnums=(0, 1))(prior_w.log_probs, prior_w.log_weights)

        def grad_one(key):
            g = jax.grad(
                lambda pw: kronvi.mixtures.mixture_elbo_estimate(
                    key, stats, q, q_n, pw, prior_n, num_samples=2, estimator=estimator
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
        p = mixture_problem(8, num_prior_components=2)
        for mixture_prior in (False, True):
            q, q_n, prior_w, prior_n, stats = mixture_model(p, mixture_prior=mixture_prior)
            exact = ref_mixture_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"], mixture_prior)
            key = jax.random.key(1)
            kw = dict(num_samples=50000, estimator=estimator)
            est, se = kronvi.mixtures.mixture_elbo_unbiased(key, stats, q, q_n, prior_w, prior_n, **kw)
            assert abs(float(est) - exact) < 5 * float(se)
            assert 0 < float(se) < 0.05
            # The surrogate's value is the same estimate on the same draws.
            sur = kronvi.mixtures.mixture_elbo_estimate(key, stats, q, q_n, prior_w, prior_n, **kw)
            np.testing.assert_allclose(float(sur), float(est), rtol=1e-12)


def test_unbiased_in_chunks_is_the_mean_of_the_chunk_estimates():
    """chunk_size runs num_samples // chunk_size estimates with split keys: their mean, and standard
    errors combined as for a mean of independent estimates; still unbiased against enumeration."""
    with jax.enable_x64(True):
        p = mixture_problem(13)
        q, q_n, prior_w, prior_n, stats = mixture_model(p)
        key = jax.random.key(5)
        est, se = kronvi.mixtures.mixture_elbo_unbiased(
            key, stats, q, q_n, prior_w, prior_n, num_samples=4000, chunk_size=1000
        )
        parts = [
            kronvi.mixtures.mixture_elbo_unbiased(k, stats, q, q_n, prior_w, prior_n, num_samples=1000)
            for k in jax.random.split(key, 4)
        ]
        np.testing.assert_allclose(float(est), np.mean([float(e) for e, _ in parts]), rtol=1e-12)
        np.testing.assert_allclose(
            float(se), np.sqrt(np.sum([float(s) ** 2 for _, s in parts])) / 4, rtol=1e-12
        )
        exact = ref_mixture_elbo(p, p["mix_logits"], p["mix_wlogits"], p["qn_logits"])
        assert 0 < float(se) and abs(float(est) - exact) < 5 * float(se)
        # One compiled program for repeated calls with new values (a study calls it thousands of times).
        before = _unbiased_in_chunks._cache_size()
        for shift in (0.1, 0.2, 0.3):
            q2 = kronvi.mixtures.Mixture(q.logits + shift, q.weight_logits)
            kronvi.mixtures.mixture_elbo_unbiased(
                key, stats, q2, q_n, prior_w, prior_n, num_samples=4000, chunk_size=1000
            )
        assert _unbiased_in_chunks._cache_size() == before
        for bad in (0, 1, 3000, 1.5):
            with pytest.raises(ValueError, match="chunk_size"):
                kronvi.mixtures.mixture_elbo_unbiased(
                    key, stats, q, q_n, prior_w, prior_n, num_samples=4000, chunk_size=bad
                )


def test_score_only_gradient_is_exact_at_identical_components():
    """At identical components the log-ratio g = log q_k - log q is zero at every draw, so the score-only
    gradients ("stratified", "local") are the exact ELBO gradient for every key; the pathwise variant is not (its
    extra term has expectation zero but is random), which is the noise the score-only form removes."""
    with jax.enable_x64(True):
        p = mixture_problem(11)
        _, q_n, prior_w, prior_n, stats = mixture_model(p)
        logits = np.repeat(p["mix_logits"][:1], 3, axis=0)  # three copies of one component
        args = (jnp.asarray(logits), jnp.asarray(np.array([0.3, -0.2, 0.1])), q_n.logits)
        exact = jax.grad(jnp_mixture_elbo(p), argnums=(0, 1, 2))(*args)

        @functools.partial(jax.jit, static_argnums=0)  # one compile per estimator, not per key
        def grads(estimator, key):
            def f(lg, wl, ln):
                qq, qn = kronvi.mixtures.Mixture._unchecked(lg, wl), kronvi.model.MeanField._unchecked(ln)
                return kronvi.mixtures.mixture_elbo_estimate(
                    key, stats, qq, qn, prior_w, prior_n, num_samples=30, estimator=estimator
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
            qq = kronvi.mixtures.Mixture._unchecked(lg, q.weight_logits)
            return kronvi.mixtures.mixture_elbo_estimate(
                key, stats, qq, q_n, prior_w, prior_n, num_samples=num_samples, estimator=estimator
            )

        return jax.grad(f)(q.logits)

    G = jax.jit(jax.vmap(g))(jax.random.split(jax.random.key(1), num_keys))
    return float(np.sum(np.var(G, axis=0)))


def test_score_only_gradient_has_lower_variance_near_the_mean_field():
    """At a perturbed copy of one factorized q (as the SGD fit starts) the score-only gradient's total
    variance is a fraction of the pathwise variant's; both are unbiased (test above)."""
    with jax.enable_x64(True):
        p = mixture_problem(12, b=6, m=4)
        _, q_n, prior_w, prior_n, stats = mixture_model(p)
        q = kronvi.mixtures.mixture_from_mean_field(
            jax.random.key(0), kronvi.model.MeanField(jnp.asarray(p["mix_logits"][0])), 4, noise_scale=0.05
        )

        score_only, pathwise = (
            _total_variance(e, q, q_n, prior_w, prior_n, stats) for e in ("stratified", "stratified-pathwise")
        )
        assert 0 < score_only < 0.2 * pathwise, (score_only, pathwise)


def test_local_gradient_has_far_lower_variance_than_stratified():
    """Integrating each factor's own level exactly removes the noise of the other b - 1 factors from its
    score: at a perturbed mean field, at equal draws, a small fraction of the stratified variance."""
    with jax.enable_x64(True):
        p = mixture_problem(12, b=8, m=4)
        _, q_n, prior_w, prior_n, stats = mixture_model(p)
        q = kronvi.mixtures.mixture_from_mean_field(
            jax.random.key(0), kronvi.model.MeanField(jnp.asarray(p["mix_logits"][0])), 4, noise_scale=0.1
        )

        local, stratified = (
            _total_variance(e, q, q_n, prior_w, prior_n, stats) for e in ("local", "stratified")
        )
        assert 0 < local < 0.01 * stratified, (local, stratified)  # measured ~1/2000


def test_stratified_estimator_is_exact_for_one_component_and_has_lower_variance():
    with jax.enable_x64(True):
        p = mixture_problem(9)
        q, q_n, prior_w, prior_n, stats = mixture_model(p, mixture_prior=False)
        one = kronvi.mixtures.Mixture(q.logits[:1], q.weight_logits[:1])
        exact = kronvi.model.regression_elbo(
            stats, kronvi.model.MeanField(q.logits[0]), q_n, prior_w, prior_n
        )
        est, se = kronvi.mixtures.mixture_elbo_unbiased(
            jax.random.key(0), stats, one, q_n, prior_w, prior_n, num_samples=8
        )
        np.testing.assert_allclose(float(est), float(exact), rtol=1e-12)
        assert float(se) == 0.0
        # Overlapping components (a perturbed mean field, as the SGD fit starts): far smaller error.
        close = kronvi.mixtures.mixture_from_mean_field(
            jax.random.key(1), kronvi.model.MeanField(q.logits[0]), 3, noise_scale=0.1
        )
        ses = {
            e: float(kronvi.mixtures.mixture_elbo_unbiased(
                jax.random.key(2), stats, close, q_n, prior_w, prior_n, num_samples=3000, estimator=e
            )[1])
            for e in ("stratified", "score")
        }  # fmt: skip
        assert ses["stratified"] < 0.2 * ses["score"], ses
        # inside the float64 block: the float64 arrays built above cannot be checked outside it
        with pytest.raises(ValueError, match="estimator"):
            kronvi.mixtures.mixture_elbo_estimate(
                jax.random.key(0), stats, q, q_n, prior_w, prior_n, num_samples=4, estimator="rb"
            )
