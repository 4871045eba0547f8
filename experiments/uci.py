"""The DIRECT paper's UCI regression study (Evans & Nair 2018, Table 1 and Table 2), reproducible.

For every dataset folder (``data.csv.gz`` + ``test_mask.csv.gz``) and each of its 10 folds: standardize the
inputs with training-fold statistics, centre y on the training mean, fit the GP hyperparameters (ARD
lengthscales, signal variance sw^2, noise variance s2) on min(n, 1000) training rows, draw b = 2000 random
Fourier features (1000 frequencies, cos and sin), compute the sufficient statistics in one chunked pass,
and fit every requested method:

  direct-mf        DIRECT mean field: weights on linspace(-3 sw, 3 sw, 15) with a discretized N(0, sw^2)
                   prior, a uniform prior over 15 log-spaced noise variances in [s2/span, span s2]; exact
                   CAVI from the prior and from kronvi.gaussian_start, the higher ELBO kept (--direct-fit
                   lbfgs: the paper's L-BFGS recipe). The span is chosen per fold among --noise-cv (default
                   10, 3 and 1 = the noise fixed at s2) by inner 5-fold cross-validation on the training rows,
                   from per-inner-fold statistics of the same pass (kronvi.select_prior: pooled-variance
                   held-out log density); --noise-cv none is the paper's single grid of span 10. The mixtures
                   start from this fit and use the same noise grid.
  direct-mix5-sgd  r = 5 mixture started from the mean-field fit with perturbed components; optax Adam on
                   the unbiased ELBO gradient (score-function entropy term, each factor's score summed
                   exactly over its levels: --sgd-estimator local), 300 draws per step (--sgd-samples;
                   the paper's t = 3000 with --sgd-estimator stratified), 150 steps; fitted in float32.
  direct-mix5-lb   r = 5 mixture, Theorem-3 lower bound maximized by L-BFGS jointly over q and the centre,
                   started from the mean-field fit; 100 iterations, fitted in float64 (--lb-precision).
  reparam-mf       the paper's REPARAM: continuous prior N(0, sw^2), diagonal Gaussian q, reparameterization
                   gradients with minibatches of 100 and 10 Monte Carlo samples, 1000 steps (n < 3000) or
                   10000 (larger).
  gauss-mf-exact   the same Gaussian family fitted with the exact ELBO from the sufficient statistics
                   (closed-form coordinate ascent).

Both Gaussian baselines learn the noise variance as a point estimate, started at the GP estimate and kept
inside DIRECT's noise grid range [s2/10, 10 s2], so all methods see the same noise range.

Metrics per fold: test RMSE (all test rows, stored target units), test NLPD (exact predictive density: the
discrete posterior's by characteristic-function quadrature, the Gaussian posteriors' in closed form) on a
fixed random subset of at most --nlpd-points test rows per fold (the same rows for every method),
expected sparsity of a posterior sample, and seconds: GP initialization, features + statistics, fit.

Usage:
  python experiments/uci.py --data-dir ../shared/data/uci --datasets yacht,concrete \
      --methods direct-mf,reparam-mf,gauss-mf-exact --json out.json
  python experiments/uci.py --datasets all --methods all --json experiments/results/uci.json --resume
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import json
import os
import pathlib
import platform
import sys
import time

# OpenBLAS threads inside XLA's thread pool deadlock on small machines: single-threaded before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax import lax  # noqa: E402

import kronvi  # noqa: E402
from kronvi import grid_moments  # noqa: E402
from kronvi.pipeline import (  # noqa: E402
    DirectConfig,
    choose_noise_prior,
    fit_best_start,
    inner_fold_stats,
    parse_noise_cv,
)
from kronvi import noise_moments  # noqa: E402

METHODS = ("direct-mf", "direct-mix5-sgd", "direct-mix5-lb", "reparam-mf", "gauss-mf-exact")
DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """Every setting of the study (recorded in the JSON)."""

    num_frequencies: int = 1000  # b = 2000 features
    levels: int = 15  # 4-bit weight grid
    width: float = 3.0  # grid spans +-3 prior standard deviations
    noise_levels: int = 15
    # noise grid [s2 / span, s2 * span] without noise_cv; also the Gaussian baselines' noise range
    noise_span: float = 10.0
    # DIRECT's noise grid chosen per fold among these spans by cv_folds-fold cross-validation (cv_criterion)
    # on the training rows (kronvi.select_prior); 1 = noise fixed at the GP estimate. (): the paper's single
    # grid of noise_span.
    noise_cv: tuple = (10.0, 3.0, 1.0)
    cv_folds: int = 5
    cv_criterion: str = "log_density"  # kronvi.select_prior: pooled-variance held-out log density
    cv_max_iter: int = 10  # CAVI sweeps per inner fit, from kronvi.gaussian_start
    direct_fit: str = "cavi"
    direct_max_iter: int = 100
    direct_starts: tuple = ("prior", "gaussian")  # fit from each, keep the highest ELBO
    gp_points: int = 1000
    gp_restarts: int = 4
    chunk_size: int = 2048
    # REPARAM (the paper's settings) and its optimizer
    reparam_batch: int = 100
    reparam_samples: int = 10
    reparam_steps_small: int = 1000  # n < 3000
    reparam_steps_large: int = 10000
    reparam_lr: float = 1e-2
    reparam_init_std: float = 0.1  # initial q std, in prior standard deviations
    # mixtures
    mix_components: int = 5
    mix_init_noise: float = 0.03  # logit perturbation of the components (bound fit)
    sgd_init_noise: float = 0.03  # logit perturbation of the components (SGD fit)
    sgd_steps: int = 150
    # draws per step, stratified over the components (60 each): with the local-expectation gradient less
    # time per step than the paper's t = 3000 stratified draws and a small fraction of their gradient
    # variance near the start (benchmarks/results/bench_mixture.txt)
    sgd_samples: int = 300
    sgd_lr: float = 1e-2  # Adam, cosine-decayed to 0
    sgd_estimator: str = "local"  # kronvi.mixture_elbo_estimate's estimator
    sgd_eval_samples: int = 30000  # final unbiased ELBO estimates, in chunks of sgd_eval_chunk draws
    sgd_eval_chunk: int = 3000
    lb_max_iter: int = 100
    lb_tol: float = 0.0  # gradient-norm tolerance on -bound/n: at n ~ 1e4, 1e-6 stops 0.04 nats short
    lb_precision: str = "float64"  # float32 bound values carry ~1 nat of rounding at UCI scale
    # evaluation
    nlpd_points: int = 100
    nlpd_nodes: int = 64
    nlpd_nodes_max: int = 4096  # quadrupled for points whose truncation bound exceeds the tolerance
    nlpd_tail_tol: float = 1e-4


# ----------------------------------------------------------------------------------------------------
# Exact predictive density of discrete (mean-field or mixture) posteriors on regular grids


def _regular_grid_step(values):
    """``(b,)`` step of each row of ``values`` if every row is an evenly spaced grid, else ``None``."""
    v = np.asarray(values, np.float64)
    step = v[:, 1] - v[:, 0]
    k = np.arange(v.shape[1])
    ok = np.allclose(v, v[:, :1] + step[:, None] * k[None, :], rtol=1e-5, atol=1e-6 * np.abs(v).max())
    return step if ok else None


def _tilted_log_density(log_q, log_qn, values, svals, phi, y0, num_nodes, max_newton):
    r"""log p(y0) of y = phi.w + eps, w_j ~ q_j on the evenly spaced grid values[j], eps ~ sum_s qn_s N(0, s).

    Exponential tilting (the saddlepoint shift of the integration contour), an exact identity for any tau:

        p(y0) = M(tau) exp(-tau y0) p_tau(y0),   log M(tau) = sum_j LSE_k(log q_jk + tau phi_j v_jk)
                                                              + LSE_s(log qn_s + tau^2 s / 2),

    where p_tau is the density of the tilted variables, again independent: q^tau_jk ~ q_jk e^{tau phi_j v_jk},
    noise component s with weight ~ qn_s e^{tau^2 s/2} and mean tau s. Newton steps on tau move the tilted
    mean to y0, so p_tau(y0) is evaluated near its mode, where the characteristic-function quadrature
    (trapezoid rule, step 2 pi / L, L = 2 (|y0 - mean| + 12 sd): a 12-sd aliasing error) is accurate in
    relative terms. Without the tilt, a test point many standard deviations out has a density below the
    quadrature's float32 rounding floor (``kronvi.predictive_log_density`` then returns log(tiny) = -87).
    Each factor's characteristic function is the polynomial sum_k q_jk z^k, z = exp(i t phi_j step_j),
    evaluated by Horner's rule. Returns ``(log_density, tail_bound)`` (truncation bound relative to p_tau).
    """
    dtype = phi.dtype
    m = values.shape[-1]
    a = phi[:, None] * values  # (b, m) contribution of each level
    step = phi * (values[:, 1] - values[:, 0])  # (b,)

    def moments(tau):
        lt = log_q + tau * a
        lse = jax.nn.logsumexp(lt, axis=-1)
        p = jnp.exp(lt - lse[:, None])
        mj = jnp.sum(p * a, axis=-1)
        vf = jnp.sum(p * (a - mj[:, None]) ** 2)
        lw = log_qn + 0.5 * tau**2 * svals
        lme = jax.nn.logsumexp(lw)
        w = jnp.exp(lw - lme)
        me = jnp.sum(w * tau * svals)
        ve = jnp.sum(w * (svals + (tau * svals) ** 2)) - me**2
        return jnp.sum(mj) + me, vf + jnp.maximum(ve, 0.0), jnp.sum(lse) + lme, p, mj, w

    def cond(c):
        it, tau, mean, var = c
        return (it < max_newton) & (jnp.abs(mean - y0) > 0.5 * jnp.sqrt(var))

    def body(c):
        it, tau, mean, var = c
        delta = (y0 - mean) / var  # Newton on the convex log M(tau) - tau y0
        delta = jnp.clip(delta, -3.0 / jnp.sqrt(var), 3.0 / jnp.sqrt(var))  # move <= 3 sd per step
        tau = tau + delta
        mean, var = moments(tau)[:2]
        return it + 1, tau, mean, var

    mean0, var0 = moments(jnp.zeros((), dtype))[:2]
    _, tau, _, _ = lax.while_loop(cond, body, (jnp.asarray(0), jnp.zeros((), dtype), mean0, var0))
    mean, var, log_m, p, mj, w = moments(tau)
    var_f = var - (jnp.sum(w * (svals + (tau * svals) ** 2)) - jnp.sum(w * tau * svals) ** 2)
    s_max = jnp.max(jnp.where(w > 1e-12, svals, 0.0))
    L = 2.0 * (jnp.abs(y0 - mean) + 12.0 * jnp.sqrt(jnp.maximum(var_f, 0.0) + s_max))
    h = 2.0 * jnp.pi / L
    t = h * jnp.arange(num_nodes, dtype=dtype)
    theta = t[:, None] * step[None, :]  # (K, b)
    zr, zi = jnp.cos(theta), jnp.sin(theta)
    ar = jnp.broadcast_to(p[:, m - 1], theta.shape)
    ai = jnp.zeros_like(theta)
    for lvl in range(m - 2, -1, -1):
        ar, ai = ar * zr - ai * zi + p[:, lvl], ar * zi + ai * zr
    log_mod = 0.5 * jnp.sum(jnp.log(ar * ar + ai * ai), axis=-1)  # (K,)
    # phase of the centred tilted f: polynomial phases + t * sum_j (a_j0 - E_tau[phi_j w_j])
    ang = jnp.sum(jnp.arctan2(ai, ar), axis=-1) + t * jnp.sum(a[:, 0] - mj)
    f_mean = jnp.sum(mj)
    # Re[phi_fc(t) exp(-i t (y0 - f_mean - tau s))] for every noise level s: (S, K)
    base = jnp.exp(log_mod)[None] * jnp.cos(ang[None] - t[None] * (y0 - f_mean - tau * svals[:, None]))
    wts = jnp.full((num_nodes,), h, dtype).at[0].set(0.5 * h)
    gauss = jnp.exp(-0.5 * svals[:, None] * t[None] ** 2)
    dens = jnp.sum(w * jnp.sum(base * gauss * wts[None], axis=-1)) / jnp.pi
    T = h * (num_nodes - 0.5)
    tail = jnp.sum(w * jnp.sqrt(0.5 * jnp.pi / svals) * jax.scipy.special.erfc(T * jnp.sqrt(0.5 * svals)))
    tiny = jnp.finfo(dtype).tiny
    log_dens = log_m - tau * y0 + jnp.log(jnp.maximum(dens, tiny))
    return log_dens, tail / jnp.pi / jnp.maximum(dens, tiny)


@functools.partial(jax.jit, static_argnames=("num_nodes", "batch_size", "max_newton"))
def mixture_log_density_regular(
    log_probs, log_alpha, log_qn, values, svals, Phi, y, *, num_nodes: int = 64, batch_size: int = 8,
    max_newton: int = 50,
):  # fmt: skip
    """log q(y*) for q(w) = sum_k alpha_k prod_j q_kj on evenly spaced grids (see _tilted_log_density):
    ``log_probs (r, b, m)``, ``log_alpha (r,)``, ``log_qn (S,)``, ``values (b, m)``, ``svals (S,)``,
    ``Phi (N, b)``, ``y (N,)``. Returns ``(log_density, tail_bound)``, each ``(N,)``."""

    def one(phi, yy):
        ld, tail = jax.vmap(
            lambda lq: _tilted_log_density(lq, log_qn, values, svals, phi, yy, num_nodes, max_newton)
        )(log_probs)
        return jax.nn.logsumexp(log_alpha + ld), jnp.max(tail)

    return jax.lax.map(lambda a: one(*a), (Phi, y), batch_size=batch_size)


def _padded(n: int) -> int:
    """Next power of two >= max(n, 16): a handful of shapes (compiles) serve the whole study."""
    return max(16, 1 << (int(n) - 1).bit_length())


def discrete_log_density(probs, log_alpha, q_noise, prior_w, prior_noise, Phi, y, *, cfg: StudyConfig):
    """Exact log predictive density of a discrete mixture posterior (``r = 1``: mean field) at ``(Phi, y)``.

    Regular grids (``kronvi.gaussian_prior``) use :func:`mixture_log_density_regular` with
    ``cfg.nlpd_nodes`` nodes and redo points whose truncation bound exceeds ``cfg.nlpd_tail_tol`` with 4x
    the nodes, up to ``cfg.nlpd_nodes_max``; other grids go through ``kronvi.predictive_log_density`` per
    component.
    Inputs are padded to a power of two >= 16 points so that a few compiles serve every fold.
    """
    N = Phi.shape[0]
    if _regular_grid_step(prior_w.values) is None:
        logs = []
        for k in range(probs.shape[0]):
            qk = kronvi.MeanField(jnp.log(probs[k]))
            ld, _ = kronvi.predictive_log_density(qk, q_noise, prior_w, prior_noise, Phi, y)
            logs.append(ld + log_alpha[k])
        return np.asarray(jax.nn.logsumexp(jnp.stack(logs), axis=0))
    log_probs = jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))
    args = (log_probs, log_alpha, q_noise.log_probs[0], prior_w.values, prior_noise.values[0])
    pad = _padded(N) - N
    Phi_p = jnp.pad(Phi, ((0, pad), (0, 0)))
    y_p = jnp.pad(y, (0, pad))
    ld, tail = mixture_log_density_regular(*args, Phi_p, y_p, num_nodes=cfg.nlpd_nodes)
    ld, tail = np.array(ld[:N]), np.array(tail[:N])
    nodes = cfg.nlpd_nodes
    while nodes < cfg.nlpd_nodes_max:
        redo = np.flatnonzero(~(tail <= cfg.nlpd_tail_tol))
        if not redo.size:
            break
        nodes *= 4
        idx = np.concatenate([redo, np.zeros(_padded(redo.size) - redo.size, int)])
        ld2, tail2 = mixture_log_density_regular(*args, Phi[idx], y[idx], num_nodes=nodes)
        ld[redo] = np.asarray(ld2)[: redo.size]
        tail[redo] = np.asarray(tail2)[: redo.size]
    return ld


def gaussian_log_density(mean, var, y):
    return np.asarray(-0.5 * (jnp.log(2 * jnp.pi * var) + (y - mean) ** 2 / var))


# ----------------------------------------------------------------------------------------------------
# Data


def dataset_size(folder: pathlib.Path) -> int:
    with gzip.open(folder / "data.csv.gz", "rt") as f:
        return sum(1 for line in f if line.strip())


def list_datasets(data_dir: pathlib.Path, names: str):
    """Dataset folders ordered small to large; ``names`` is a comma list or ``all``."""
    if names == "all":
        folders = [p for p in sorted(data_dir.iterdir()) if (p / "data.csv.gz").is_file()]
    else:
        folders = []
        for name in names.split(","):
            p = pathlib.Path(name) if os.sep in name else data_dir / name
            if not (p / "data.csv.gz").is_file() or not (p / "test_mask.csv.gz").is_file():
                raise SystemExit(f"no dataset folder {p} (needs data.csv.gz and test_mask.csv.gz)")
            folders.append(p)
    sizes = {p: dataset_size(p) for p in folders}
    return sorted(folders, key=lambda p: (sizes[p], p.name))


class Fold:
    """One train/test split prepared for every method (inputs standardized, y centred)."""

    def __init__(self, X, y, train, test, standardizer, y_offset, dtype=jnp.float32):
        self.X_train = kronvi.standardize(standardizer, jnp.asarray(X[train], dtype))
        self.X_test = kronvi.standardize(standardizer, jnp.asarray(X[test], dtype))
        self.y_train = jnp.asarray(y[train] - y_offset, dtype)
        self.y_test = jnp.asarray(y[test] - y_offset, dtype)
        self.n_train = int(train.sum())


def fold_masks(test_mask, k):
    """Boolean ``(train, test)`` rows of fold ``k``: test = the mask's column k, train = the rest."""
    folds = kronvi.fold_indices(test_mask)
    test = folds == k
    return ~test, test


def nlpd_subset(num_test: int, cap: int, seed: int, fold: int) -> np.ndarray:
    """Indices of the test rows used for NLPD: all of them, or a fixed random subset of ``cap``."""
    if num_test <= cap:
        return np.arange(num_test)
    rng = np.random.default_rng([seed, fold, 7919])
    return np.sort(rng.choice(num_test, cap, replace=False))


def _block(x):
    return jax.block_until_ready(x)


@functools.cache
def adam(lr: float):
    """One optax.adam object per learning rate: the optimizer is a static argument of the jitted fits, and
    a fresh object (new closures, new hash) per fold would recompile the whole training loop every fold."""
    return optax.adam(lr)


@functools.cache
def adam_cosine(lr: float, steps: int):
    """Adam with the step size decaying from ``lr`` to 0 over ``steps`` (cosine), cached like :func:`adam`.
    The decay lets the stochastic mixture fit settle instead of jittering around its optimum."""
    return optax.adam(optax.cosine_decay_schedule(lr, steps))


# ----------------------------------------------------------------------------------------------------
# Methods


class Setup:
    """Everything shared by the methods of one fold: GP hyperparameters, features, statistics, priors."""

    def __init__(self, fold: Fold, hyper, feats, stats, cfg: StudyConfig, key, cv_stats=None):
        self.fold, self.hyper, self.feats, self.stats, self.cfg, self.key = (
            fold,
            hyper,
            feats,
            stats,
            cfg,
            key,
        )
        self.cv_stats = cv_stats  # (train, test) inner-fold statistics of the training rows, or None
        self.selection = None  # dict(noise_span, cv_mse, cv_log_density, select_seconds) once DIRECT's noise grid is chosen
        b = 2 * cfg.num_frequencies
        self.sw = jnp.sqrt(hyper.signal_variance)
        self.s2 = hyper.noise_variance
        self.prior_w = kronvi.gaussian_prior(b, self.sw, levels=cfg.levels, width=cfg.width)
        self.prior_n = kronvi.noise_prior(self.s2, levels=cfg.noise_levels, span=cfg.noise_span)  # see select
        self.noise_bounds = (self.s2 / cfg.noise_span, self.s2 * cfg.noise_span)
        self.Phi_test = kronvi.rff_features(feats, fold.X_test)
        self.nlpd_idx = None
        self.mf = None  # (q_w, q_n, elbo, seconds): the mean-field fit the mixtures start from

    def select_noise_grid(self):
        """DIRECT's noise grid: the paper's single grid, or the cross-validated choice among cfg.noise_cv."""
        cfg = self.cfg
        if self.selection is None:
            if not cfg.noise_cv:
                self.selection = dict(
                    noise_span=cfg.noise_span, cv_mse=None, cv_log_density=None, select_seconds=0.0
                )
                return self.selection
            t0 = time.perf_counter()
            span, self.prior_n, sc = choose_noise_prior(
                self.cv_stats, self.prior_w, self.s2, cfg.noise_cv, levels=cfg.noise_levels,
                criterion=cfg.cv_criterion, max_iter=cfg.cv_max_iter,
            )  # fmt: skip
            self.selection = dict(
                noise_span=span, cv_mse=[float(v) for v in sc.sq_error],
                cv_log_density=[float(v) for v in sc.log_density],
                select_seconds=time.perf_counter() - t0,
            )  # fmt: skip
        return self.selection

    def metrics(self, mean, log_dens_fn):
        y = self.fold.y_test
        rmse = float(jnp.sqrt(jnp.mean((mean - y) ** 2)))
        idx = self.nlpd_idx
        ld = log_dens_fn(self.Phi_test[idx], y[idx])
        return rmse, float(-np.mean(ld))


def _mean_field(setup: Setup):
    cfg = setup.cfg
    if setup.mf is None:
        setup.select_noise_grid()
        t0 = time.perf_counter()
        fit_cfg = DirectConfig(
            method=cfg.direct_fit, max_iter=cfg.direct_max_iter if cfg.direct_fit == "cavi" else 1000,
            starts=tuple(cfg.direct_starts),
        )  # fmt: skip
        q_w, q_n, info = fit_best_start(
            setup.stats, setup.prior_w, setup.prior_n, fit_cfg, key=jax.random.fold_in(setup.key, 1)
        )
        _block(q_w)
        secs = time.perf_counter() - t0
        setup.mf = (q_w, q_n, float(info.elbo[int(info.num_iter)]), secs, int(info.num_iter))
    return setup.mf


def _discrete_result(setup, probs, log_alpha, q_n, fit_seconds, elbo, extra):
    pw, pn = setup.prior_w, setup.prior_n
    mean_k, _ = grid_moments(probs, pw.values)  # (r, b)
    mean = setup.Phi_test @ (jnp.exp(log_alpha) @ mean_k)
    marg = jnp.einsum("k,kjm->jm", jnp.exp(log_alpha), probs)  # (b, m) mixture marginals
    sparsity = 100.0 * float(jnp.mean(jnp.sum(jnp.where(pw.values == 0, marg, 0.0), axis=-1)))
    rmse, nlpd = setup.metrics(
        mean,
        lambda P, y: discrete_log_density(probs, log_alpha, q_n, pw, pn, P, y, cfg=setup.cfg),
    )
    noise = float(noise_moments(q_n, pn)[2])
    return dict(
        rmse=rmse, nlpd=nlpd, sparsity_pct=sparsity, fit_seconds=fit_seconds, elbo=elbo,
        noise_variance=noise, **setup.selection, **extra,
    )  # fmt: skip


def run_direct_mf(setup: Setup):
    q_w, q_n, elbo, secs, iters = _mean_field(setup)
    probs = q_w.probs[None]
    log_alpha = jnp.zeros((1,), probs.dtype)
    return _discrete_result(setup, probs, log_alpha, q_n, secs, elbo, dict(iterations=iters))


def _f64(fn, *trees):
    """``fn(*trees)`` with every array cast to float64 under ``jax.enable_x64``: at UCI scale float32 ELBO
    values carry rounding errors of up to about a nat (experiments/results/elbo_precision_check.txt), larger
    than the mixture-vs-mean-field differences they are compared for."""
    with jax.enable_x64(True):
        cast = [jax.tree.map(lambda a: jnp.asarray(np.asarray(a, np.float64)), t) for t in trees]
        return jax.tree.map(float, fn(*cast))


def _in_precision(precision, fn, *trees):
    """``fn(*trees)`` computed in ``precision`` ("float32": as given; "float64": every array cast under
    ``jax.enable_x64``), the result's arrays returned as NumPy arrays in that precision (float64 ones
    feed :func:`_f64` without rounding; jnp.asarray outside x64 makes them float32)."""
    if precision == "float32":
        return jax.tree.map(np.asarray, jax.block_until_ready(fn(*trees)))
    if precision != "float64":
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
    with jax.enable_x64(True):
        cast = [jax.tree.map(lambda a: jnp.asarray(np.asarray(a, np.float64)), t) for t in trees]
        return jax.tree.map(np.asarray, jax.block_until_ready(fn(*cast)))


def _mf_elbo64(setup, q_w, q_n):
    return _f64(kronvi.regression_elbo, q_w, q_n, setup.prior_w, setup.prior_n, setup.stats)


def _unbiased64(setup, key, q, qn, *, num_samples=None):
    """Unbiased float64 ELBO estimate and its standard error from ``num_samples`` (default
    ``sgd_eval_samples``) draws, the mean of independent ``sgd_eval_chunk``-draw estimates (memory stays
    that of one chunk)."""
    cfg = setup.cfg
    return _f64(
        lambda *a: kronvi.mixture_elbo_unbiased(
            key, *a, num_samples=num_samples or cfg.sgd_eval_samples, chunk_size=cfg.sgd_eval_chunk
        ),
        q, qn, setup.prior_w, setup.prior_n, setup.stats,
    )  # fmt: skip


def run_mix_sgd(setup: Setup):
    cfg = setup.cfg
    q_w, q_n, mf_elbo, mf_secs, _ = _mean_field(setup)
    t0 = time.perf_counter()
    k_init, k_fit, k_eval = jax.random.split(jax.random.fold_in(setup.key, 2), 3)
    q0 = kronvi.mixture_from_mean_field(k_init, q_w, cfg.mix_components, noise_scale=cfg.sgd_init_noise)
    q, qn, info = kronvi.fit_mixture_sgd(
        k_fit, setup.stats, setup.prior_w, setup.prior_n, init=(q0, q_n),
        optimizer=adam_cosine(cfg.sgd_lr, cfg.sgd_steps),
        num_steps=cfg.sgd_steps, num_samples=cfg.sgd_samples, estimator=cfg.sgd_estimator,
    )  # fmt: skip
    _block(q.logits)
    secs = time.perf_counter() - t0
    # Compared in float64 (same q and statistics): float32 rounding exceeds the differences at large n.
    mf64 = _mf_elbo64(setup, q_w, q_n)
    est, se = _unbiased64(setup, k_eval, q, qn)
    est0, se0 = _unbiased64(setup, k_eval, q0, q_n, num_samples=cfg.sgd_eval_chunk)  # for the record only
    fallback = not est >= mf64
    extra = dict(
        mf_elbo=mf64, mf_elbo_f32=mf_elbo, mix_elbo=est, mix_elbo_se=se, mix_start_elbo=est0,
        mix_start_elbo_se=se0, fallback_to_mf=fallback, mixture_seconds=secs,
        weights=[float(a) for a in q.weights], compared_in="float64", estimator=cfg.sgd_estimator,
        eval_samples=cfg.sgd_eval_samples,
    )  # fmt: skip
    total = mf_secs + secs
    if fallback:
        return _discrete_result(setup, q_w.probs[None], jnp.zeros((1,)), q_n, total, mf_elbo, extra)
    return _discrete_result(setup, q.probs, q.log_weights, qn, total, est, extra)


def run_mix_lb(setup: Setup):
    cfg = setup.cfg
    q_w, q_n, mf_elbo, mf_secs, _ = _mean_field(setup)
    t0 = time.perf_counter()
    k_init, k_eval = jax.random.split(jax.random.fold_in(setup.key, 3))
    q0 = kronvi.mixture_from_mean_field(k_init, q_w, cfg.mix_components, noise_scale=cfg.mix_init_noise)
    q, log_c, qn, info = _in_precision(
        cfg.lb_precision,
        lambda *a: kronvi.fit_mixture_bound(
            *a[:3], init=a[3:], method="lbfgs", max_iter=cfg.lb_max_iter, tol=cfg.lb_tol
        ),
        setup.stats, setup.prior_w, setup.prior_n, q0, q_n,
    )  # fmt: skip
    secs = time.perf_counter() - t0
    # Compared in float64 (same q and statistics): float32 rounding exceeds the differences at large n.
    mf64 = _mf_elbo64(setup, q_w, q_n)
    pw, pn, st = setup.prior_w, setup.prior_n, setup.stats
    bound = _f64(kronvi.mixture_elbo_bound, q, log_c, qn, pw, pn, st)
    bound0 = _f64(kronvi.mixture_elbo_bound, q0, q0.log_marginals, q_n, pw, pn, st)  # the fit's start
    est, se = _unbiased64(setup, k_eval, q, qn)
    fallback = not bound >= mf64
    extra = dict(
        mf_elbo=mf64, mf_elbo_f32=mf_elbo, mix_bound=bound, fit_precision=cfg.lb_precision,
        mix_start_bound=bound0, mix_elbo=est, mix_elbo_se=se, fallback_to_mf=fallback, mixture_seconds=secs,
        iterations=int(info.num_iter), weights=[float(a) for a in q.weights], compared_in="float64",
    )  # fmt: skip
    total = mf_secs + secs
    if fallback:
        return _discrete_result(setup, q_w.probs[None], jnp.zeros((1,)), q_n, total, mf_elbo, extra)
    return _discrete_result(setup, q.probs, q.log_weights, qn, total, bound, extra)


def _gaussian_result(setup, q, s2, fit_seconds, extra):
    mean, var = kronvi.predict_gaussian_mf(q, s2, setup.Phi_test)
    elbo = float(kronvi.gaussian_mf_elbo(q, s2, setup.stats, prior_scale=setup.sw))
    rmse, nlpd = setup.metrics(
        mean, lambda P, y: gaussian_log_density(*kronvi.predict_gaussian_mf(q, s2, P), y)
    )
    return dict(
        rmse=rmse, nlpd=nlpd, sparsity_pct=0.0, fit_seconds=fit_seconds, elbo=elbo, noise_variance=float(s2),
        **extra,
    )  # fmt: skip


def run_gauss_exact(setup: Setup):
    t0 = time.perf_counter()
    q, s2, info = kronvi.fit_gaussian_mf(
        setup.stats, prior_scale=setup.sw, noise_variance=setup.s2, noise_bounds=setup.noise_bounds
    )
    _block(q.mean)
    secs = time.perf_counter() - t0
    return _gaussian_result(setup, q, s2, secs, dict(iterations=int(info.num_iter)))


def run_reparam(setup: Setup):
    cfg = setup.cfg
    fold = setup.fold
    b = 2 * cfg.num_frequencies
    steps = cfg.reparam_steps_small if fold.n_train + len(fold.y_test) < 3000 else cfg.reparam_steps_large
    # Weights in prior-standard-deviation units (w = sw * u, features scaled by sw): Adam's step size is
    # then independent of the target units; the model and its ELBO are unchanged. The training features are
    # computed once (counted in the fit time): gathering minibatch rows is ~7x cheaper than recomputing
    # 100 x 2000 cos/sin features every step.
    u0 = kronvi.GaussianMeanField(jnp.zeros((b,)), jnp.full((b,), float(np.log(cfg.reparam_init_std))))
    t0 = time.perf_counter()
    Phi_train = setup.sw * kronvi.rff_features(setup.feats, fold.X_train)
    qu, s2, info = kronvi.fit_gaussian_reparam(
        jax.random.fold_in(setup.key, 4), Phi_train, fold.y_train, init=(u0, setup.s2), prior_scale=1.0,
        optimizer=adam(cfg.reparam_lr), num_steps=steps, batch_size=cfg.reparam_batch,
        num_samples=cfg.reparam_samples, noise_bounds=setup.noise_bounds,
    )  # fmt: skip
    _block(qu.mean)
    secs = time.perf_counter() - t0
    del Phi_train
    q = kronvi.GaussianMeanField(setup.sw * qu.mean, qu.log_std + jnp.log(setup.sw))
    last = np.asarray(info.elbo[-min(50, steps) :])
    return _gaussian_result(setup, q, s2, secs, dict(steps=steps, last_minibatch_elbo=float(last.mean())))


RUNNERS = {
    "direct-mf": run_direct_mf,
    "direct-mix5-sgd": run_mix_sgd,
    "direct-mix5-lb": run_mix_lb,
    "reparam-mf": run_reparam,
    "gauss-mf-exact": run_gauss_exact,
}


# ----------------------------------------------------------------------------------------------------
# Folds


def prepare_fold_per_fold(X, y, train, test, cfg, key):
    """Faithful protocol: standardizer, GP hyperparameters and feature map from this fold's training rows."""
    k_gp, k_rff = jax.random.split(key)
    t0 = time.perf_counter()
    st = kronvi.fit_standardizer(jnp.asarray(X[train], jnp.float32))
    fold = Fold(X, y, train, test, st, float(np.mean(y[train])))
    hyper, gp_info = kronvi.fit_gp_hyperparameters(
        k_gp, fold.X_train, fold.y_train, num_points=cfg.gp_points, num_restarts=cfg.gp_restarts
    )
    _block(hyper)
    t1 = time.perf_counter()
    feats = kronvi.rff_init(k_rff, hyper.lengthscales, cfg.num_frequencies)
    fmap = functools.partial(kronvi.rff_features, feats)
    cv_stats = None
    if cfg.noise_cv:  # inner folds for the noise-grid choice, from the same single pass
        stats, cv_stats = inner_fold_stats(
            jax.random.fold_in(k_rff, 1),
            fmap,
            fold.X_train,
            fold.y_train,
            cfg.cv_folds,
            chunk_size=cfg.chunk_size,
        )
    else:
        stats = kronvi.regression_stats_from_inputs(
            fmap, fold.X_train, fold.y_train, chunk_size=cfg.chunk_size
        )
    _block(stats)
    t2 = time.perf_counter()
    return fold, hyper, feats, stats, t1 - t0, t2 - t1, bool(gp_info.degenerate), cv_stats


class SharedHyper:
    """``--shared-hyper``: one standardizer, GP fit and feature map from fold 0's training rows; training
    statistics of every fold from one pass over the data with ``kronvi.kfold_stats`` (train = total - fold).

    Slight leak: fold 0's hyperparameters (and the standardizer and y offset) saw rows that are test rows
    of the other folds.
    """

    def __init__(self, X, y, test_mask, cfg, key):
        folds = kronvi.fold_indices(test_mask)
        train0 = folds != 0
        k_gp, k_rff = jax.random.split(key)
        t0 = time.perf_counter()
        self.st = kronvi.fit_standardizer(jnp.asarray(X[train0], jnp.float32))
        self.offset = float(np.mean(y[train0]))
        Xs = kronvi.standardize(self.st, jnp.asarray(X, jnp.float32))
        yc = jnp.asarray(y - self.offset, jnp.float32)
        self.hyper, info = kronvi.fit_gp_hyperparameters(
            k_gp, Xs[train0], yc[train0], num_points=cfg.gp_points, num_restarts=cfg.gp_restarts
        )
        _block(self.hyper)
        t1 = time.perf_counter()
        self.feats = kronvi.rff_init(k_rff, self.hyper.lengthscales, cfg.num_frequencies)
        Phi = kronvi.rff_features(self.feats, Xs)
        self.train_stats, _ = kronvi.kfold_stats(Phi, yc, folds, chunk_size=cfg.chunk_size)
        _block(self.train_stats)
        t2 = time.perf_counter()
        K = test_mask.shape[1]
        self.init_seconds = (t1 - t0) / K  # amortized per fold
        self.stats_seconds = (t2 - t1) / K
        self.degenerate = bool(info.degenerate)

    def fold(self, X, y, train, test, k):
        fold = Fold(X, y, train, test, self.st, self.offset)
        stats = jax.tree.map(lambda a: a[k], self.train_stats)
        return (
            fold,
            self.hyper,
            self.feats,
            stats,
            self.init_seconds,
            self.stats_seconds,
            self.degenerate,
            None,
        )


# ----------------------------------------------------------------------------------------------------
# Driver


def summarize(dataset, method, n, d, per_fold, protocol, cfg):
    def ms(key):
        v = np.asarray([f[key] for f in per_fold], float)
        return float(v.mean()), (float(v.std(ddof=1)) if len(v) > 1 else 0.0)

    rmse, rmse_sd = ms("rmse")
    nlpd, nlpd_sd = ms("nlpd")
    rec = dict(
        dataset=dataset, method=method, n=n, d=d, rmse_mean=rmse, rmse_sd=rmse_sd, nlpd_mean=nlpd,
        nlpd_sd=nlpd_sd, sparsity_pct=ms("sparsity_pct")[0], fit_seconds=ms("fit_seconds")[0],
        stats_seconds=ms("stats_seconds")[0], init_seconds=ms("init_seconds")[0], folds=len(per_fold),
        protocol=protocol, elbo_mean=ms("elbo")[0],
    )  # fmt: skip
    if "select_seconds" in per_fold[0]:
        rec["select_seconds"] = ms("select_seconds")[0]
        spans = [f["noise_span"] for f in per_fold]
        rec["noise_span_counts"] = {str(s): spans.count(s) for s in sorted(set(spans))}
    if "fallback_to_mf" in per_fold[0]:
        rec["fallback_folds"] = int(sum(bool(f["fallback_to_mf"]) for f in per_fold))
        rec["mf_elbo_mean"] = ms("mf_elbo")[0]
        rec["mix_elbo_mean"] = ms("mix_elbo")[0]
        rec["mixture_seconds"] = ms("mixture_seconds")[0]
    rec["per_fold"] = per_fold
    return rec


def _fmt(x, w=8, p=3):
    return f"{x:{w}.{p}f}"


def dataset_key(name: str, seed: int):
    """The study's PRNG key for a dataset; fold ``k`` uses ``jax.random.fold_in(key, k)``."""
    return jax.random.fold_in(jax.random.key(seed), sum(map(ord, name)))


def fold_setup(name: str, k: int, cfg: StudyConfig, *, data_dir=DEFAULT_DATA, seed: int = 0):
    """The :class:`Setup` that :func:`run_dataset` builds for fold ``k`` of a dataset (per-fold protocol, same
    keys): check scripts start from exactly the study's fold."""
    X, y, mask = kronvi.load_uci(pathlib.Path(data_dir) / name)
    train, test = fold_masks(mask, k)
    fkey = jax.random.fold_in(dataset_key(name, seed), k)
    fold, hyper, feats, stats, *_, cv_stats = prepare_fold_per_fold(X, y, train, test, cfg, fkey)
    return Setup(fold, hyper, feats, stats, cfg, fkey, cv_stats)


def run_dataset(folder, methods, args, cfg, log):
    name = folder.name
    X, y, mask = kronvi.load_uci(folder)
    n, d = X.shape
    K = mask.shape[1] if args.max_folds is None else min(args.max_folds, mask.shape[1])
    key = dataset_key(name, args.seed)
    log(f"== {name}: n={n} d={d} folds={K} protocol={'shared-hyper' if args.shared_hyper else 'per-fold'}")
    shared = SharedHyper(X, y, mask, cfg, jax.random.fold_in(key, 10_000)) if args.shared_hyper else None
    per_method = {m: [] for m in methods}
    t_start = time.perf_counter()
    for k in range(K):
        train, test = fold_masks(mask, k)
        fkey = jax.random.fold_in(key, k)
        if shared is None:
            prep = prepare_fold_per_fold(X, y, train, test, cfg, fkey)
        else:
            prep = shared.fold(X, y, train, test, k)
        fold, hyper, feats, stats, t_init, t_stats, degenerate, cv_stats = prep
        setup = Setup(fold, hyper, feats, stats, cfg, fkey, cv_stats)
        setup.nlpd_idx = nlpd_subset(len(fold.y_test), cfg.nlpd_points, args.seed, k)
        parts = []
        for m in methods:
            res = RUNNERS[m](setup)
            res.update(
                fold=k, init_seconds=t_init, stats_seconds=0.0 if m == "reparam-mf" else t_stats,
                gp_degenerate=degenerate, nlpd_points=len(setup.nlpd_idx),
            )  # fmt: skip
            per_method[m].append(res)
            fb = "*" if res.get("fallback_to_mf") else ""
            if m == "direct-mf" and "noise_span" in res:
                fb += f" span {res['noise_span']:g} (cv {res['select_seconds']:.2f}s)"
            parts.append(
                f"{m}: rmse {res['rmse']:.4g} nlpd {res['nlpd']:.3f} fit {res['fit_seconds']:.2f}s{fb}"
            )
        elapsed = time.perf_counter() - t_start
        log(
            f"  [{name} fold {k + 1}/{K}] init {t_init:.2f}s stats {t_stats:.2f}s | " + " | ".join(parts)
            + f" | elapsed {elapsed:.0f}s, eta {elapsed / (k + 1) * (K - k - 1):.0f}s"
        )  # fmt: skip
    protocol = "shared-hyper" if args.shared_hyper else "per-fold"
    recs = [summarize(name, m, n, d, per_method[m], protocol, cfg) for m in methods]
    for r in recs:
        log(
            f"  {name:14s} {r['method']:16s} RMSE {r['rmse_mean']:.4g} +- {r['rmse_sd']:.3g}  NLPD "
            f"{r['nlpd_mean']:.3f}  sparsity {r['sparsity_pct']:.1f}%  fit {r['fit_seconds']:.2f}s  stats "
            f"{r['stats_seconds']:.2f}s  init {r['init_seconds']:.2f}s"
            + (f"  fallback {r['fallback_folds']}/{K}" if "fallback_folds" in r else "")
        )
    log(f"  {name} done in {time.perf_counter() - t_start:.0f}s")
    return recs


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="folder of dataset folders")
    p.add_argument("--datasets", default="all", help="comma-separated folder names (or paths), or 'all'")
    p.add_argument(
        "--methods", default="direct-mf,reparam-mf,gauss-mf-exact", help=f"comma list of {METHODS} or 'all'"
    )
    p.add_argument("--json", required=True, help="output JSON list (rewritten after every dataset)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shared-hyper", action="store_true", help="one feature map from fold 0 serves all folds")
    p.add_argument(
        "--direct-fit", default="cavi", choices=["cavi", "lbfgs"], help="lbfgs: the paper's recipe"
    )
    p.add_argument(
        "--direct-starts", default="prior,gaussian",
        help="comma list of DIRECT mean-field starts (prior, gaussian); the highest final ELBO is kept",
    )  # fmt: skip
    p.add_argument("--max-folds", type=int, default=None, help="run only the first K folds")
    p.add_argument(
        "--nlpd-points", type=int, default=StudyConfig.nlpd_points, help="test rows per fold for NLPD"
    )
    p.add_argument("--sgd-steps", type=int, default=StudyConfig.sgd_steps)
    p.add_argument("--sgd-samples", type=int, default=StudyConfig.sgd_samples, help="draws per SGD step")
    p.add_argument(
        "--sgd-init-noise", type=float, default=StudyConfig.sgd_init_noise,
        help="logit perturbation of the SGD mixture's components around the mean-field fit",
    )  # fmt: skip
    p.add_argument(
        "--sgd-estimator", default=StudyConfig.sgd_estimator, choices=kronvi.mixtures.ESTIMATORS,
        help="entropy-gradient estimator (kronvi.mixture_elbo_estimate)",
    )  # fmt: skip
    p.add_argument("--lb-iters", type=int, default=StudyConfig.lb_max_iter)
    p.add_argument(
        "--lb-precision", default=StudyConfig.lb_precision, choices=("float32", "float64"),
        help="precision of the Theorem-3 bound fit (float32 bound values carry ~1 nat of rounding at UCI scale)",
    )  # fmt: skip
    p.add_argument("--lb-tol", type=float, default=StudyConfig.lb_tol, help="L-BFGS gradient-norm tolerance")
    p.add_argument("--num-features", type=int, default=2 * StudyConfig.num_frequencies, help="b (even)")
    p.add_argument(
        "--noise-span", type=float, default=StudyConfig.noise_span, help="noise grid s2 x [1/span, span]"
    )
    p.add_argument(
        "--noise-cv", default="10,3,1",
        help="DIRECT noise grids s2 x [1/span, span] to choose from per fold by inner 5-fold CV (pooled-variance "
        "held-out log density; 1 = noise fixed at s2); 'none' = the paper's single grid of --noise-span",
    )  # fmt: skip
    p.add_argument("--reparam-steps", type=int, default=None, help="override the paper's 1000 / 10000 steps")
    p.add_argument("--resume", action="store_true", help="keep records already in --json, skip those pairs")
    p.add_argument("--log", help="also append progress lines to this file")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",")]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise SystemExit(f"unknown method(s) {bad}; choose from {METHODS}")
    if args.num_features < 2 or args.num_features % 2:
        raise SystemExit("--num-features must be an even number >= 2 (cos and sin pairs)")
    try:
        noise_cv = parse_noise_cv(args.noise_cv)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if noise_cv and args.shared_hyper:
        raise SystemExit("--noise-cv needs the per-fold protocol; pass --noise-cv none with --shared-hyper")
    steps = {}
    if args.reparam_steps is not None:
        steps = dict(reparam_steps_small=args.reparam_steps, reparam_steps_large=args.reparam_steps)
    cfg = StudyConfig(
        num_frequencies=args.num_features // 2, noise_span=args.noise_span, direct_fit=args.direct_fit,
        nlpd_points=args.nlpd_points, sgd_steps=args.sgd_steps, sgd_samples=args.sgd_samples,
        sgd_init_noise=args.sgd_init_noise, sgd_estimator=args.sgd_estimator,
        lb_max_iter=args.lb_iters, lb_tol=args.lb_tol, lb_precision=args.lb_precision, noise_cv=noise_cv, direct_starts=tuple(x.strip() for x in args.direct_starts.split(",")),
        **steps,
    )  # fmt: skip
    folders = list_datasets(pathlib.Path(args.data_dir), args.datasets)
    out = pathlib.Path(args.json)
    records = []
    if args.resume and out.is_file():
        records = json.loads(out.read_text())
    done = {(r["dataset"], r["method"]) for r in records}
    logf = open(args.log, "a") if args.log else None  # noqa: SIM115

    def log(msg):
        print(msg, flush=True)
        if logf:
            logf.write(msg + "\n")
            logf.flush()

    log(f"# started {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()}")
    log(
        f"# uci study: jax {jax.__version__} on {jax.devices()[0].platform} ({platform.machine()}, "
        f"{os.cpu_count()} cores), {len(folders)} datasets, methods {methods}, seed {args.seed}, "
        f"{'shared-hyper' if args.shared_hyper else 'per-fold'}; config {dataclasses.asdict(cfg)}"
    )
    t0 = time.perf_counter()
    for i, folder in enumerate(folders):
        todo = [m for m in methods if (folder.name, m) not in done]
        if not todo:
            log(f"== {folder.name}: already in {out}, skipped")
            continue
        log(f"[{i + 1}/{len(folders)}] {time.perf_counter() - t0:.0f}s elapsed")
        recs = run_dataset(folder, todo, args, cfg, log)
        for r in recs:
            r["config"] = dataclasses.asdict(cfg)
        records.extend(recs)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1))
        tmp.replace(out)
    log(
        f"# total {time.perf_counter() - t0:.0f}s, finished {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
