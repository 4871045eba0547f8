"""Classifiers through kronvi.quantize: save_model/load_model round trip, 4-bit codes, probabilities."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi
import kronvi.logistic as kl
from kronvi.quantize import DirectModel, load_model, pack_codes, predict_from_codes, sample_codes, save_model


def test_classifier_round_trip_and_code_probabilities(tmp_path):
    prior = kronvi.model.gaussian_prior(3, 1.0, levels=15)
    q = kronvi.model.MeanField(jax.random.normal(jax.random.key(0), (3, 15)))
    Phi = jax.random.normal(jax.random.key(1), (5, 3))
    codes = sample_codes(jax.random.key(2), q, 4000)
    model = DirectModel(prior, None, q, None, packed_codes=np.asarray(pack_codes(codes)))
    save_model(tmp_path / "clf.npz", model)
    back = load_model(tmp_path / "clf.npz")
    assert back.prior_noise is None and back.q_noise is None
    np.testing.assert_array_equal(back.q_w.logits, q.logits)
    probs = jnp.mean(jax.nn.sigmoid(predict_from_codes(back.packed_codes, back.prior_w, Phi)), axis=1)
    exact = kl.predict_logistic(back.q_w, back.prior_w, Phi)
    # 4000 samples: standard error at most 0.5 / sqrt(4000) = 0.008
    np.testing.assert_allclose(probs, exact, atol=0.04)


def test_half_a_noise_model_is_an_error(tmp_path):
    prior = kronvi.model.gaussian_prior(3, 1.0, levels=15)
    q = kronvi.model.MeanField.from_prior(prior)
    pn = kronvi.model.noise_prior(1.0)
    with pytest.raises(ValueError, match="both be None"):
        save_model(tmp_path / "bad.npz", DirectModel(prior, pn, q, None))
