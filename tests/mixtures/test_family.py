"""The mixture family: construction, starts from a mean field, and bad input everywhere in kronvi.mixtures."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    mixture_model,
    mixture_problem,
)

import kronvi


def test_mixture_from_mean_field_components():
    with jax.enable_x64(True):
        q_w = kronvi.model.MeanField(np.log(np.array([[1.0, 1e-300, 1e-300], [0.2, 0.3, 0.5]])))
        q = kronvi.mixtures.mixture_from_mean_field(jax.random.key(0), q_w, 3, noise_scale=0.0, smoothing=0.3)
        np.testing.assert_allclose(q.probs, np.broadcast_to(0.7 * q_w.probs + 0.1, (3, 2, 3)), rtol=1e-12)
        np.testing.assert_allclose(q.weights, 1 / 3, rtol=1e-12)
        noisy = kronvi.mixtures.mixture_from_mean_field(jax.random.key(0), q_w, 3, noise_scale=0.5)
        dev = np.asarray(noisy.logits - q_w.log_probs[None])
        assert 0.3 < dev.std() < 0.7 and not np.allclose(dev[0], dev[1])


def test_bad_inputs():
    p = mixture_problem(14, num_prior_components=2)
    q, q_n, prior_w, prior_n, stats = mixture_model(p, np.float32)
    with pytest.raises(ValueError, match="`logits` must be 3-D"):
        kronvi.mixtures.Mixture(np.zeros((3, 3)), np.zeros(1))
    with pytest.raises(ValueError, match="`weight_logits` has 3 entries"):
        kronvi.mixtures.Mixture(np.zeros((2, 3, 3)), np.zeros(3))
    nan_logits = np.zeros((1, 3, 3))
    nan_logits[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match="`logits` contains 1 NaN"):
        kronvi.mixtures.Mixture(nan_logits, [0.0])
    with pytest.raises(ValueError, match="`weight_logits` contains"):
        kronvi.mixtures.Mixture(np.zeros((1, 3, 3)), [np.inf])
    with pytest.raises(ValueError, match="empty"):
        kronvi.mixtures.Mixture(np.zeros((0, 3, 3)), np.zeros(0))
    with pytest.raises(ValueError, match="`log_probs` shape"):
        kronvi.mixtures.MixturePrior(np.zeros((3, 3)), np.zeros((2, 3, 4)), np.zeros(2))
    with pytest.raises(ValueError, match="`log_weights` has 3 entries"):
        kronvi.mixtures.MixturePrior(np.zeros((3, 3)), np.zeros((2, 3, 3)), np.zeros(3))
    with pytest.raises(TypeError, match="`q` must be a Mixture"):
        kronvi.mixtures.mixture_elbo_bound(
            stats, kronvi.model.MeanField(q.logits[0]), q_n, q.logits[0], prior_w, prior_n
        )
    with pytest.raises(ValueError, match="`log_center` must have shape"):
        kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, np.zeros((3, 4)), prior_w, prior_n)
    with pytest.raises(ValueError, match="`log_center` contains"):
        kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, np.full((3, 3), np.nan), prior_w, prior_n)
    big = kronvi.model.gaussian_prior(4, 1.0, levels=3)
    with pytest.raises(ValueError, match="`prior_w` grid has shape"):
        kronvi.mixtures.mixture_elbo_bound(stats, q, q_n, q.log_marginals, big, prior_n)
    with pytest.raises(TypeError, match="`prior_w` must be a DiscretePrior or MixturePrior"):
        kronvi.mixtures.mixture_expected_loglik(stats, q, q_n, np.zeros((3, 3)), prior_n)
    with pytest.raises(TypeError, match="`stats` must be RegressionStats"):
        kronvi.mixtures.mixture_expected_loglik((1.0, 1.0), q, q_n, prior_w, prior_n)
    bad_stats = kronvi.stats.regression_stats(np.ones((5, 4)), np.ones(5))
    with pytest.raises(ValueError, match="`stats` describe 4 features"):
        kronvi.mixtures.mixture_expected_loglik(bad_stats, q, q_n, prior_w, prior_n)
    with pytest.raises(ValueError, match="`stats.n` must be positive"):
        kronvi.mixtures.mixture_expected_loglik(stats._replace(n=jnp.asarray(0.0)), q, q_n, prior_w, prior_n)
    with pytest.raises(ValueError, match="`q_noise.logits` has shape"):
        kronvi.mixtures.mixture_expected_loglik(
            stats, q, kronvi.model.MeanField(np.zeros((1, 5))), prior_w, prior_n
        )
    key = jax.random.key(0)
    for bad in (1, 0, 2.0, True):
        with pytest.raises(ValueError, match="`num_samples` must be an int >= 2"):
            kronvi.mixtures.mixture_elbo_estimate(key, stats, q, q_n, prior_w, prior_n, num_samples=bad)
    with pytest.raises(ValueError, match="`num_samples` must be an int >= 1"):
        kronvi.mixtures.sample_mixture(key, q, 0)
    with pytest.raises(ValueError, match="uint8 indices need <= 256"):
        kronvi.mixtures.sample_mixture(key, kronvi.mixtures.Mixture(np.zeros((1, 1, 300)), [0.0]), 3)
    with pytest.raises(ValueError, match="`Phi_new` has 2 features"):
        kronvi.mixtures.predict_mixture(q, q_n, prior_w, prior_n, np.ones((4, 2)))
    with pytest.raises(ValueError, match="`num_components` must be an int >= 1"):
        kronvi.mixtures.mixture_from_mean_field(key, kronvi.model.MeanField(q.logits[0]), 0)
    with pytest.raises(ValueError, match="`smoothing` must be in"):
        kronvi.mixtures.mixture_from_mean_field(key, kronvi.model.MeanField(q.logits[0]), 2, smoothing=1.5)
    with pytest.raises(TypeError, match="`init` must be a tuple"):
        kronvi.mixtures.fit_mixture_bound(stats, prior_w, prior_n, init=q)
    with pytest.raises(ValueError, match="`method` must be one of"):
        kronvi.mixtures.fit_mixture_bound(stats, prior_w, prior_n, init=(q, q_n), method="adam")
    with pytest.raises(TypeError, match="`optimizer` must be an optax.GradientTransformation"):
        kronvi.mixtures.fit_mixture_sgd(key, stats, prior_w, prior_n, init=(q, q_n), optimizer="adam", num_steps=2,
                               num_samples=4)  # fmt: skip
    with pytest.raises(ValueError, match="`noise_update` must be one of"):
        kronvi.mixtures.fit_mixture_sgd(key, stats, prior_w, prior_n, init=(q, q_n), optimizer=optax.adam(0.1),
                               num_steps=2, num_samples=4, noise_update="exact")  # fmt: skip
    with pytest.raises(ValueError, match="`num_steps` must be an int >= 1"):
        kronvi.mixtures.fit_mixture_sgd(key, stats, prior_w, prior_n, init=(q, q_n), optimizer=optax.adam(0.1),
                               num_steps=0, num_samples=4)  # fmt: skip
    with pytest.raises(TypeError, match="`state` must be a MixtureSGDState"):
        kronvi.mixtures.mixture_sgd_step(key, stats, (q, q_n), prior_w, prior_n, optimizer=optax.adam(0.1),
                                num_samples=4)  # fmt: skip
    with pytest.raises(TypeError, match="`priors` must be a non-empty sequence"):
        kronvi.mixtures.MixturePrior.from_priors([])
    with pytest.raises(ValueError, match="different grid"):
        kronvi.mixtures.MixturePrior.from_priors([kronvi.model.gaussian_prior(3, 1.0, levels=3),
                                         kronvi.model.gaussian_prior(3, 2.0, levels=3)])  # fmt: skip
