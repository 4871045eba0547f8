"""Predictive moments of a mixture against enumeration."""

import jax.numpy as jnp
import numpy as np
from helpers import (
    enumerate_configs,
    mixture_model,
    mixture_problem,
    ref_mixture_log_q,
    softmax,
    tol,
)

import kronvi


def test_predictive_moments_match_enumeration(dtype):
    p = mixture_problem(10)
    q, q_n, prior_w, prior_n, stats = mixture_model(p, dtype)
    Phi_new = np.random.default_rng(0).normal(size=(4, 3))
    mean, var = kronvi.mixtures.predict_mixture(q, q_n, prior_w, prior_n, jnp.asarray(Phi_new, dtype))
    cfg = enumerate_configs(3, 3)
    W = p["values"][np.arange(3), cfg]
    qx = np.exp(ref_mixture_log_q(p["mix_logits"], p["mix_wlogits"]))
    f = W @ Phi_new.T  # (C, N)
    m_ref = qx @ f
    e_s = softmax(p["qn_logits"])[0] @ p["noise_vals"][0]
    v_ref = qx @ (f - m_ref) ** 2 + e_s
    assert mean.dtype == dtype and var.dtype == dtype
    np.testing.assert_allclose(mean, m_ref, rtol=tol(dtype, x32=1e-4), atol=tol(dtype, x32=1e-5))
    np.testing.assert_allclose(var, v_ref, rtol=tol(dtype, x32=1e-4))
