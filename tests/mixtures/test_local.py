"""Local-expectation score tables against brute force over every single-site change."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    log_softmax,
    mixture_model,
    mixture_problem,
)
from scipy.special import logsumexp

import kronvi
from kronvi.mixtures._local import local_scores as _local_scores
from kronvi.mixtures._sampling import sample_per_component as _sample_per_component

# Jitted once per module: eagerly, every call retraced and recompiled the batched map (test time only).
local_scores = jax.jit(_local_scores, static_argnames="batch_size")
sample_per_component = jax.jit(_sample_per_component, static_argnames="per_component")


@pytest.mark.parametrize("mixture_prior", [False, True])
def test_local_scores_match_enumeration_over_each_site(mixture_prior):
    """For one draw x of component k, the local score of factor j is sum_l q_kj(l) f(x_-j, l) (e_l - q_kj)
    with f = log q_k - log q (+ log p): every single-site change of x evaluated by brute force."""
    with jax.enable_x64(True):
        p = mixture_problem(14, b=4, m=3, r=3, num_prior_components=2)
        q, _, prior_w, _, _ = mixture_model(p, mixture_prior=mixture_prior)
        rng = np.random.default_rng(0)
        idx = rng.integers(0, 3, size=(3, 2, 4))  # (r, draws per component, b)
        got = np.asarray(local_scores(q, prior_w, jnp.asarray(idx), batch_size=4))
        lq = log_softmax(p["mix_logits"])
        lw = log_softmax(p["mix_wlogits"])

        def log_mix(log_probs, log_weights, x):
            return logsumexp(log_weights + log_probs[:, np.arange(len(x)), x].sum(-1))

        def f(k, x):
            out = lq[k, np.arange(len(x)), x].sum() - log_mix(lq, lw, x)
            if mixture_prior:
                out += log_mix(log_softmax(p["prior_mix_logp"]), log_softmax(p["prior_mix_logw"]), x)
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
    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        logits = rng.normal(size=(3, 6, 4))  # sites 3-5: soft, overlapping components
        logits[:, :3] = 60.0 * rng.normal(size=(1, 3, 4))  # sites 0-2: shared, peaked
        logits[2, 0] = np.roll(logits[2, 0], 1)  # component 2 another mode at site 0: separated
        prior_w = kronvi.model.DiscretePrior(jnp.zeros((6, 4)), jnp.zeros((6, 4)))
        q64 = kronvi.mixtures.Mixture(jnp.asarray(logits), jnp.asarray([0.0, -1.0, 1.0]))
        q32 = kronvi.mixtures.Mixture(
            jnp.asarray(logits, jnp.float32), jnp.asarray([0.0, -1.0, 1.0], jnp.float32)
        )
        draws = sample_per_component(jax.random.key(0), q64.probs, 50)  # (3, 50, 6)
        got = np.asarray(local_scores(q32, prior_w, draws, batch_size=16))
        want = np.asarray(local_scores(q64, prior_w, draws, batch_size=16))
        np.testing.assert_allclose(got, want, atol=1e-4)
        assert np.max(np.abs(want)) > 1e-2
        anywhere = jnp.asarray(rng.integers(0, 4, size=(3, 20, 6)))
        assert np.all(np.isfinite(np.asarray(local_scores(q32, prior_w, anywhere, batch_size=16))))
        # A mixture prior whose components exclude most configurations (levels 0 or 3 only, the rest
        # e^-100): its table has no link to q's draws, so it must be exact in float32 as well.
        lp = np.full((2, 6, 4), -100.0)
        lp[0, :, 0] = lp[1, :, 3] = 0.0
        soft = np.zeros((3, 6, 4))
        soft[:, :, 0] = [[0.5], [0.0], [-0.5]]
        out = {}
        for dt in (jnp.float32, jnp.float64):
            pw = kronvi.mixtures.MixturePrior(jnp.zeros((6, 4), dt), jnp.asarray(lp, dt), jnp.zeros(2, dt))
            qq = kronvi.mixtures.Mixture(jnp.asarray(soft, dt), jnp.zeros(3, dt))
            draws = sample_per_component(jax.random.key(1), qq.probs.astype(jnp.float64), 40)
            out[dt] = np.asarray(local_scores(qq, pw, draws, batch_size=16))
        scale = np.max(np.abs(out[jnp.float64]))
        assert scale > 1.0
        np.testing.assert_allclose(out[jnp.float32], out[jnp.float64], atol=1e-5 * scale)
