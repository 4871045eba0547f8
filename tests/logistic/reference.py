"""Brute-force references for DIRECT logistic regression: enumeration of every weight configuration."""

import itertools

import numpy as np
from scipy.special import expit


def configurations(probs, values):
    """Yields (probability, w) for every one of the m**b configurations (float64 NumPy)."""
    probs, values = np.asarray(probs, np.float64), np.asarray(values, np.float64)
    b, m = probs.shape
    for ks in itertools.product(range(m), repeat=b):
        idx = (np.arange(b), np.array(ks))
        yield np.prod(probs[idx]), values[idx]


def expected_loglik(probs, values, Phi, y):
    """Exact sum_i E_q log p(y_i | w), P(y=1|w) = sigmoid(Phi w)."""
    Phi, y = np.asarray(Phi, np.float64), np.asarray(y, np.float64)
    total = 0.0
    for p, w in configurations(probs, values):
        z = Phi @ w
        total += p * np.sum(y * z - np.logaddexp(0.0, z))
    return total


def predictive(probs, values, Phi):
    """Exact E_q sigmoid(Phi w), (N,): all configurations at once, a sigmoid that cannot overflow."""
    probs, values, Phi = (np.asarray(a, np.float64) for a in (probs, values, Phi))
    b, m = probs.shape
    idx = np.array(list(itertools.product(range(m), repeat=b))).reshape(-1, b)  # (C, b)
    rows = np.arange(b)
    weight = np.prod(probs[rows, idx], axis=1)  # (C,)
    return expit(Phi @ values[rows, idx].T) @ weight


def cavi_sweep(log_q, prior_w, Phi, y, weights, bound, max_exp=60.0, min_logit=-200.0):
    """One coordinate-ascent sweep computed from scratch per weight (float64 NumPy): every row's log-MGFs,
    the bound's gradient by finite-free autodiff of `bound_from_mgfs`, then the closed-form update."""
    import jax
    import jax.numpy as jnp

    from kronvi.logistic._bound import _EXPONENTS, bound_from_mgfs

    log_q, values = np.array(log_q, np.float64), np.asarray(prior_w.values, np.float64)
    log_p = np.asarray(prior_w.log_probs, np.float64)
    Phi, y, weights = (np.asarray(a, np.float64) for a in (Phi, y, weights))
    s = 2.0 * y - 1.0
    C = s[:, None] * np.asarray(_EXPONENTS[bound])[None, :]  # (n, K)
    b = values.shape[0]
    with jax.enable_x64(True):
        for j in range(b):
            e = C[:, :, None, None] * Phi[:, None, :, None] * values[None, None] + log_q[None, None]
            L = np.sum(np.logaddexp.reduce(e, axis=-1), axis=-1)  # (n, K)
            sez = s * (Phi @ np.sum(np.exp(log_q) * values, axis=-1))
            total = lambda L_, sez_: jnp.sum(weights * bound_from_mgfs(L_, sez_, bound))  # noqa: E731
            gL, gE = (np.asarray(g) for g in jax.grad(total, argnums=(0, 1))(L, sez))
            ej = e[:, :, j, :] - log_q[j]  # c s_i Phi_ij v_jk, (n, K, m)
            lm = np.logaddexp.reduce(ej + log_q[j], axis=-1)
            ratio = np.exp(np.minimum(ej - lm[:, :, None], max_exp))
            coef = np.einsum("ic,ick->k", gL, ratio) + values[j] * np.sum(gE * s * Phi[:, j])
            new = log_p[j] + coef
            new = np.maximum(new - np.logaddexp.reduce(new), min_logit)
            log_q[j] = new - np.logaddexp.reduce(new)
    return log_q
