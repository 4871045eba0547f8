"""Sampling from a mixture against its enumerated probabilities."""

import jax
import jax.numpy as jnp
import numpy as np
from helpers import (
    mixture_model,
    mixture_problem,
    ref_mixture_log_q,
)

import kronvi


def test_sampling_matches_mixture_probabilities():
    with jax.enable_x64(True):
        p = mixture_problem(9)
        q = mixture_model(p)[0]
        N = 40000
        x = kronvi.mixtures.sample_mixture(jax.random.key(3), q, N)
        assert x.shape == (N, 3) and x.dtype == jnp.uint8
        codes = np.ravel_multi_index(np.asarray(x, int).T, (3, 3, 3))
        freq = np.bincount(codes, minlength=27) / N
        qx = np.exp(ref_mixture_log_q(p["mix_logits"], p["mix_wlogits"]))
        assert np.all(np.abs(freq - qx) < 5 * np.sqrt(qx * (1 - qx) / N) + 1e-4)
