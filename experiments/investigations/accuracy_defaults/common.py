# ruff: noqa: E402, E731
"""Shared pieces for the issue-19 study: cached fold statistics, the exact Bayesian linear regression
(BLR) reference and DIRECT fits/metrics. float64 throughout (jax x64 on)."""

import math
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

import kronvi

CACHE = os.environ.get("KRONVI_ACCURACY_CACHE", "/tmp/kronvi_accuracy_cache")
LOG2PI = math.log(2 * math.pi)


class Fold:
    def __init__(self, name, fold=0):
        d = np.load(os.path.join(CACHE, f"{name}_f{fold}.npz"))
        self.name = name
        self.n = float(d["n"])
        self.yty = float(d["yty"])
        self.Phity = d["Phity"]
        self.PhitPhi = d["PhitPhi"]
        self.Phi_te = d["Phi_te"]
        self.y_te = d["y_te"]
        self.s2_f = float(d["signal_variance"])
        self.s2_n = float(d["noise_variance"])
        self.b = self.Phity.shape[0]
        t0 = time.perf_counter()
        lam, V = np.linalg.eigh(self.PhitPhi)
        self.eig_seconds = time.perf_counter() - t0
        self.lam = np.maximum(lam, 0.0)
        self.V = V
        self.c = V.T @ self.Phity  # rotated Phi^T y
        self.Phi_te_rot = self.Phi_te @ V  # rotated test features

    def stats(self, rotated=False):
        if rotated:
            return kronvi.RegressionStats(
                jnp.asarray(self.n),
                jnp.asarray(self.yty),
                jnp.asarray(self.c),
                jnp.asarray(np.diag(self.lam)),
            )
        return kronvi.RegressionStats(
            jnp.asarray(self.n), jnp.asarray(self.yty), jnp.asarray(self.Phity), jnp.asarray(self.PhitPhi)
        )

    # ---- exact BLR: w ~ N(0, s2w I), y | w ~ N(Phi w, s2 I) ----
    def blr_posterior_rot(self, s2, s2w):
        """Posterior mean and variance of the rotated weights V^T w (independent)."""
        prec = self.lam / s2 + 1.0 / s2w
        return (self.c / s2) / prec, 1.0 / prec

    def log_evidence(self, s2, s2w):
        lam, c, n = self.lam, self.c, self.n
        quad = (self.yty - np.sum(c**2 / (lam + s2 / s2w))) / s2
        logdet = n * np.log(s2) + np.sum(np.log1p(s2w * lam / s2))
        return -0.5 * (n * LOG2PI + logdet + quad)

    def evidence_noise(self, s2w):
        r = minimize_scalar(
            lambda t: -self.log_evidence(np.exp(t), s2w),
            bounds=(np.log(self.s2_n) - 12, np.log(self.s2_n) + 12),
            method="bounded",
            options=dict(xatol=1e-6),
        )
        return float(np.exp(r.x))

    def evidence_both(self):
        from scipy.optimize import minimize

        r = minimize(
            lambda t: -self.log_evidence(np.exp(t[0]), np.exp(t[1])),
            np.log([self.s2_n, self.s2_f]),
            method="Nelder-Mead",
            options=dict(xatol=1e-6, fatol=1e-8),
        )
        return float(np.exp(r.x[0])), float(np.exp(r.x[1]))

    def blr_metrics(self, s2, s2w):
        m, v = self.blr_posterior_rot(s2, s2w)
        mean = self.Phi_te_rot @ m
        var = (self.Phi_te_rot**2) @ v + s2
        return metrics_gauss(mean, var, self.y_te)


def metrics_gauss(mean, var, y):
    r = y - mean
    return dict(
        rmse=float(np.sqrt(np.mean(r**2))), nlpd=float(np.mean(0.5 * (LOG2PI + np.log(var) + r**2 / var)))
    )


def nlpd_noise_mixture(mean, var_f, y, s_vals, s_probs):
    """-mean log of sum_s q(s) N(y; mean, var_f + s): exact over the noise posterior, Gaussian (CLT,
    moment-matched) for f = Phi* w (a sum of b independent discrete terms)."""
    v = var_f[:, None] + s_vals[None, :]
    lp = np.log(np.maximum(s_probs, 1e-300))[None, :] - 0.5 * (
        LOG2PI + np.log(v) + (y - mean)[:, None] ** 2 / v
    )
    return float(-np.mean(logsumexp(lp, axis=1)))


def fit_and_score(stats, prior_w, prior_n, Phi_te, y_te, *, init="gaussian", exact_points=0, repeat=True):
    """DIRECT CAVI fit (kronvi.fit_regression) and its metrics. Fit seconds from a second, warm call."""

    def go():
        out = kronvi.fit_regression(stats, prior_w, prior_n, init=init)
        jax.block_until_ready(out[0].logits)
        return out

    t0 = time.perf_counter()
    q_w, q_n, info = go()
    t1 = time.perf_counter()
    if repeat:
        t0 = time.perf_counter()
        q_w, q_n, info = go()
        t1 = time.perf_counter()
    Pte = jnp.asarray(Phi_te)
    mean, var = kronvi.predict_regression(q_w, q_n, prior_w, prior_n, Pte)
    mean = np.asarray(mean)
    wm, wv = kronvi.grid_moments(q_w.probs, prior_w.values)
    var_f = np.asarray((Pte**2) @ wv)
    s_vals = np.asarray(prior_n.values[0])
    s_probs = np.asarray(q_n.probs[0])
    r = y_te - mean
    res = dict(
        rmse=float(np.sqrt(np.mean(r**2))),
        nlpd=nlpd_noise_mixture(mean, var_f, y_te, s_vals, s_probs),
        nlpd_mm=metrics_gauss(mean, np.asarray(var), y_te)["nlpd"],
        elbo=float(info.final_elbo),
        sparsity=float(kronvi.expected_sparsity(q_w, prior_w)),
        bits=math.log2(prior_w.values.shape[1]),
        fit_s=t1 - t0,
        iters=int(info.num_iter),
        E_s2=float(np.sum(s_vals * s_probs)),
        noise_at_top=float(s_probs[-1]) if len(s_vals) > 1 else float("nan"),
    )
    if exact_points:
        k = min(exact_points, len(y_te))
        ld, err = kronvi.predictive_log_density(q_w, q_n, prior_w, prior_n, Pte[:k], jnp.asarray(y_te[:k]))
        res["nlpd_exact_sub"] = float(-np.mean(np.asarray(ld)))
        res["nlpd_mix_sub"] = nlpd_noise_mixture(mean[:k], var_f[:k], y_te[:k], s_vals, s_probs)
        res["exact_pts"] = k
    return res, (q_w, q_n)


def noise_fixed(s2):
    return kronvi.noise_prior(jnp.asarray(s2), levels=1)


def adaptive_prior(center, sd, s2w, levels=15, width=3.0, include_zero=False):
    """Per-coordinate grid center_j + sd_j * linspace(-width, width, levels) with log-probabilities
    from the continuous prior N(0, s2w) at the grid values: the same Gaussian prior discretized on a
    data-adapted grid."""
    half = (levels - 1) / 2.0
    unit = (np.arange(levels) - half) * (width / half)
    vals = center[:, None] + sd[:, None] * unit[None, :]
    if include_zero:  # snap the level nearest 0 to exactly 0 where 0 lies inside the grid
        inside = (vals[:, 0] <= 0) & (vals[:, -1] >= 0)
        j = np.argmin(np.abs(vals), axis=1)
        vals[np.arange(len(vals))[inside], j[inside]] = 0.0
    return kronvi.DiscretePrior(jnp.asarray(vals), jnp.asarray(-0.5 * vals**2 / s2w))
