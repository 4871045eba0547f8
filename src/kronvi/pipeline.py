"""The DIRECT regression pipeline for one train/test split, shared by the CLI and the experiments.

raw inputs -> standardized inputs -> GP hyperparameters -> random Fourier features -> statistics ->
exact ELBO fit -> exact predictive mean, variance and density.
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._fit.regression import fit_regression
from ._fit.select import CRITERIA, select_prior
from ._inputs.data import fit_standardizer, standardize
from ._inputs.features import RandomFourierFeatures, rff_features, rff_init
from ._inputs.gp import GPHyperparameters, fit_gp_hyperparameters
from ._model.grids import gaussian_prior, noise_prior
from ._model.regression import expected_sparsity, noise_moments, predict_regression, predictive_log_density
from ._stats.regression import kfold_stats_from_inputs, regression_stats_from_inputs


class DirectConfig(NamedTuple):
    """Settings of the DIRECT regression pipeline (the paper's appendix E defaults)."""

    num_frequencies: int = 1000  # b = 2 * num_frequencies features
    levels: int = 15  # 4-bit weight grid
    width: float = 3.0  # grid spans +-width prior standard deviations
    noise_levels: int = 15
    noise_span: float = 10.0  # the noise grid when ``noise_cv`` is empty: s2 x [1/span, span]
    # Noise grids s2 x [1/span, span] to choose from by ``cv_folds``-fold cross-validation on the training
    # rows (kronvi.select_prior, ``cv_criterion``); span 1 = the noise fixed at the GP estimate s2.
    # Empty: the paper's protocol, one grid of ``noise_span``.
    noise_cv: tuple[float, ...] = (10.0, 3.0, 1.0)
    cv_folds: int = 5
    cv_criterion: str = "log_density"  # or "sq_error" (kronvi.select_prior)
    cv_max_iter: int = 10  # CAVI sweeps per inner fit (from kronvi.gaussian_start, which is close)
    method: str = "cavi"
    max_iter: int | None = None
    # Fit from each start and keep the highest ELBO: "prior" and/or "gaussian" (kronvi.gaussian_start).
    starts: tuple[str, ...] = ("prior", "gaussian")
    gp_points: int = 1000
    gp_restarts: int = 4
    chunk_size: int = 2048
    # Opt-in: refit with the noise grid recentred while q_noise piles up on an end of it (paper protocol: 0).
    max_noise_recentres: int = 0


class FoldResult(NamedTuple):
    rmse: float
    nlpd: float
    sparsity_pct: float
    elbo: float
    init_seconds: float
    stats_seconds: float
    fit_seconds: float
    predict_seconds: float
    num_iter: int
    converged: bool
    noise_variance: float
    gp_degenerate: bool
    noise_recentres: int
    select_seconds: float  # cross-validated choice of the noise grid (part of initialization)
    noise_span: float  # the noise grid used: s2 x [1/span, span]; 1 = fixed at the GP estimate


class FittedDirect(NamedTuple):
    """Everything needed to predict on new raw inputs."""

    standardizer: object
    features: RandomFourierFeatures
    y_offset: jax.Array
    prior_w: object
    prior_noise: object
    q_w: object
    q_noise: object
    hyper: GPHyperparameters


def _block(x):
    return jax.block_until_ready(x)


def noise_prior_for_span(noise_variance, span, levels):
    """The noise grid ``noise_variance x [1/span, span]`` with ``levels`` levels; ``span == 1``: one level,
    the noise fixed at ``noise_variance``."""
    if float(span) == 1.0:
        return noise_prior(noise_variance, levels=1)
    return noise_prior(noise_variance, levels=levels, span=span)


def inner_fold_stats(key, feature_map, X, y, num_folds: int, *, chunk_size=None):
    """Training statistics accumulated per random inner fold in one pass: ``(stats, (cv_train, cv_test))``,
    ``stats`` being their sum (all rows) and the pair the stacked fold statistics for :func:`choose_noise_prior`."""
    n = X.shape[0]
    if n < num_folds:
        raise ValueError(f"{n} training rows cannot make {num_folds} cross-validation folds")
    inner = np.asarray(jax.random.permutation(key, n)) % num_folds
    cv_train, cv_test = kfold_stats_from_inputs(feature_map, X, y, inner, chunk_size=chunk_size)
    return jax.tree.map(lambda a: jnp.sum(a, axis=0), cv_test), (cv_train, cv_test)


def choose_noise_prior(cv_stats, prior_w, noise_variance, spans, *, levels, criterion, max_iter):
    """The noise grid ``noise_variance x [1/span, span]`` (:func:`noise_prior_for_span`) among ``spans`` that
    :func:`kronvi.select_prior` prefers on the inner folds ``cv_stats = (cv_train, cv_test)``.
    Returns ``(span, prior_noise, scores)``."""
    cands = [(prior_w, noise_prior_for_span(noise_variance, s, levels)) for s in spans]
    best, scores = select_prior(*cv_stats, cands, criterion=criterion, max_iter=max_iter)
    return float(spans[best]), cands[best][1], scores


def parse_noise_cv(text: str) -> tuple[float, ...]:
    """The ``--noise-cv`` command-line value: ``"none"`` -> ``()``, else a comma list of spans >= 1."""
    if text.strip().lower() == "none":
        return ()
    try:
        spans = tuple(float(x) for x in text.split(","))
    except ValueError:
        spans = ()
    if not spans or any(not s >= 1.0 for s in spans):
        raise ValueError(
            f"--noise-cv must be 'none' or a comma list of spans >= 1 (1 = fixed noise), got {text!r}"
        )
    return spans


def _check_config(config: DirectConfig):
    if config.noise_cv:
        if config.cv_criterion not in CRITERIA:
            raise ValueError(f"`cv_criterion` must be one of {CRITERIA}, got {config.cv_criterion!r}")
        if any(not float(s) >= 1.0 for s in config.noise_cv):
            raise ValueError(f"`noise_cv` spans must be >= 1 (1 = fixed noise), got {config.noise_cv}")
        if isinstance(config.cv_folds, bool) or not isinstance(config.cv_folds, int) or config.cv_folds < 2:
            raise ValueError(f"`cv_folds` must be an int >= 2, got {config.cv_folds!r}")


def fit_direct(key, X, y, config: DirectConfig | None = None, *, dtype=jnp.float32):
    """Fits DIRECT mean-field regression on raw training data. Returns ``(model, timings, info)``.

    With ``config.noise_cv`` (the default) the noise grid is chosen among those spans by
    ``config.cv_folds``-fold cross-validation on the training rows: the statistics are accumulated per
    inner fold in the same single pass (their sum is the training statistics), each candidate is fitted
    on every ``total - fold`` (vmapped, CAVI from :func:`kronvi.gaussian_start`) and scored exactly on the
    held-out fold (:func:`kronvi.select_prior` with ``config.cv_criterion``). That time is
    ``select_seconds``.
    """
    config = DirectConfig() if config is None else config
    _check_config(config)
    k_gp, k_rff, k_fit = jax.random.split(key, 3)
    t0 = time.perf_counter()
    X = jnp.asarray(X, dtype)
    y = jnp.asarray(y, dtype)
    std = fit_standardizer(X)
    Xs = standardize(std, X)
    y_offset = jnp.mean(y)
    yc = y - y_offset
    hyper, gp_info = fit_gp_hyperparameters(
        k_gp, Xs, yc, num_points=config.gp_points, num_restarts=config.gp_restarts
    )
    _block(hyper)
    t1 = time.perf_counter()
    feats = rff_init(k_rff, hyper.lengthscales, config.num_frequencies)
    fmap = functools.partial(rff_features, feats)
    if config.noise_cv:
        stats, cv_stats = inner_fold_stats(
            jax.random.fold_in(k_fit, 1), fmap, Xs, yc, config.cv_folds, chunk_size=config.chunk_size
        )
    else:
        stats = regression_stats_from_inputs(fmap, Xs, yc, chunk_size=config.chunk_size)
    _block(stats)
    t2 = time.perf_counter()
    b = 2 * config.num_frequencies
    prior_w = gaussian_prior(b, jnp.sqrt(hyper.signal_variance), levels=config.levels, width=config.width)
    cv = None
    if config.noise_cv:
        span, prior_n, cv = choose_noise_prior(
            cv_stats, prior_w, hyper.noise_variance, config.noise_cv, levels=config.noise_levels,
            criterion=config.cv_criterion, max_iter=config.cv_max_iter,
        )  # fmt: skip
    else:
        span = float(config.noise_span)
        prior_n = noise_prior(hyper.noise_variance, levels=config.noise_levels, span=span)
    t3 = time.perf_counter()
    q_w, q_n, info, prior_n, recentres = fit_with_noise_recentring(
        stats, prior_w, prior_n, config._replace(noise_span=span), key=k_fit
    )
    _block(q_w)
    t4 = time.perf_counter()
    model = FittedDirect(std, feats, y_offset, prior_w, prior_n, q_w, q_n, hyper)
    timings = dict(
        init_seconds=t1 - t0,
        stats_seconds=t2 - t1,
        select_seconds=(t3 - t2) if config.noise_cv else 0.0,
        fit_seconds=t4 - t3,
    )
    info = dict(fit=info, gp=gp_info, noise_recentres=recentres, noise_span=span, cv_scores=cv)
    return model, timings, info


def fit_best_start(stats, prior_w, prior_noise, config: DirectConfig, *, key):
    """Fits from each of ``config.starts`` and returns the ``(q_w, q_noise, info)`` with the highest ELBO.

    Coordinate ascent on a grid stops at a local optimum that depends on the start; neither the prior nor
    the continuous optimum is the better start on every dataset (``experiments/results/rmse_gap.md``).
    """
    if not config.starts:
        raise ValueError("`config.starts` must name at least one start")
    best, best_elbo = None, -float("inf")
    for start in config.starts:
        fit = fit_regression(
            stats, prior_w, prior_noise, method=config.method, max_iter=config.max_iter, key=key, init=start
        )
        elbo = float(fit[2].elbo[int(fit[2].num_iter)])
        if not np.isfinite(elbo):
            warnings.warn(
                f"the fit from start {start!r} ended with a non-finite ELBO; it is skipped", stacklevel=2
            )
            continue
        if best is None or elbo > best_elbo:
            best, best_elbo = fit, elbo
    if best is None:
        raise FloatingPointError(f"every start in {config.starts} ended with a non-finite ELBO")
    return best


def fit_with_noise_recentring(stats, prior_w, prior_noise, config: DirectConfig, *, key):
    r"""Fits, and while the noise posterior puts most of its mass on an end level of its grid, moves the
    grid (same shape) to be centred on the current :math:`E[\sigma^2]` and refits from the current q.

    The GP's noise estimate is a good centre for a continuous posterior, but a 4-bit weight posterior
    fits less tightly and wants more noise; a grid that is too narrow saturates at its top level (seen on
    yacht: all mass on 10x the GP estimate) and makes the predictive density overconfident.
    Returns ``(q_w, q_noise, info, prior_noise, num_recentres)``.
    """
    q_w, q_n, info = fit_best_start(stats, prior_w, prior_noise, config, key=key)
    recentres = 0
    while recentres < config.max_noise_recentres and prior_noise.values.shape[-1] > 1:
        probs = q_n.probs[0]
        if not (float(probs[0]) > 0.5 or float(probs[-1]) > 0.5):
            break
        e_s = noise_moments(q_n, prior_noise)[2]
        prior_noise = noise_prior(e_s, levels=config.noise_levels, span=config.noise_span)
        q_w, q_n, info = fit_regression(
            stats,
            prior_w,
            prior_noise,
            method=config.method,
            max_iter=config.max_iter,
            key=key,
            init=(q_w, type(q_n).from_prior(prior_noise)),
        )
        recentres += 1
    return q_w, q_n, info, prior_noise, recentres


def run_fold(key, X_train, y_train, X_test, y_test, config: DirectConfig | None = None):
    """Fits on the training rows and evaluates on the test rows. Returns ``(FoldResult, model)``."""
    model, timings, info = fit_direct(key, X_train, y_train, config)
    t0 = time.perf_counter()
    dtype = model.q_w.logits.dtype
    Phi = rff_features(model.features, standardize(model.standardizer, jnp.asarray(X_test, dtype)))
    mean, _ = predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    y_c = jnp.asarray(y_test, dtype) - model.y_offset
    log_dens, _ = predictive_log_density(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y_c)
    _block(log_dens)
    t1 = time.perf_counter()
    fit = info["fit"]
    result = FoldResult(
        rmse=float(jnp.sqrt(jnp.mean((mean - y_c) ** 2))),
        nlpd=float(-jnp.mean(log_dens)),
        sparsity_pct=100.0 * float(expected_sparsity(model.q_w, model.prior_w)),
        elbo=float(fit.elbo[int(fit.num_iter)]),
        predict_seconds=t1 - t0,
        num_iter=int(fit.num_iter),
        converged=bool(fit.converged),
        noise_variance=float(noise_moments(model.q_noise, model.prior_noise)[2]),
        gp_degenerate=bool(info["gp"].degenerate),
        noise_recentres=int(info["noise_recentres"]),
        noise_span=float(info["noise_span"]),
        **timings,
    )
    return result, model


def summarize(results: list[FoldResult]) -> dict:
    """Mean and standard deviation over folds of every numeric field."""
    out = {}
    for field in FoldResult._fields:
        vals = np.asarray([getattr(r, field) for r in results], dtype=float)
        out[f"{field}_mean"] = float(np.mean(vals))
        out[f"{field}_sd"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
    return out
