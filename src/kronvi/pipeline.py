r"""The DIRECT regression pipeline for one train/test split, shared by the CLI and the experiments.

raw inputs -> standardized inputs -> GP hyperparameters -> random Fourier features -> statistics ->
exact ELBO fit -> exact predictive mean, variance and density.

Three recipes (`DirectConfig.basis`):

- `"eigen"` (default): the weights are discretized in the eigenbasis of $\Phi^\top\Phi$
  (`kronvi.eigenbasis`), where the likelihood factorizes; the noise grid is centred on the exact
  evidence maximizer (`kronvi.blr_evidence_noise`) and each weight's 15 levels span its exact
  posterior (`kronvi.posterior_grid_prior`). Accuracy matches exact Bayesian linear regression on the
  same features; the weights are not sparse and each needs its own grid (2 floats) plus the rotation.
- `"compact"`: the `"eigen"` fit in a compact form (`kronvi.compact_posterior`): the exact
  posterior mean in the feature basis, the eigenvectors of the directions the data determine (`b x k`), and
  one shared variance for the rest. The same predictive mean; a predictive variance between 1 and
  `1 + config.compact_tol` times the eigen fit's at every input where the shared variance is the prior's
  (few rows), within `config.compact_tol` noise variances of it on average over the training rows where it
  is the data's (many rows); a smaller model and faster predictions where `k` is well below `b`
  (`docs/notes/2026-11-27-compact.md`).
- `"features"`: the paper's recipe, weights of the random Fourier features on one grid of
  `±width` prior sds with a zero level: sparse 4-bit codes, less accurate
  (`docs/notes/2026-11-22-accuracy-defaults.md`).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ._base.buckets import to_device
from ._base.checks import check_int, check_nonnegative_number, host_arrays
from ._fit.regression import METHODS, RegressionFit, fit_regression
from ._fit.select import CRITERIA, HeldoutScores, select_prior
from ._inputs.data import Standardizer, fit_standardizer, standardize
from ._inputs.features import SAMPLINGS, RandomFourierFeatures, feature_mean, rff_features, rff_init
from ._inputs.gp import PRECISIONS as GP_PRECISIONS
from ._inputs.gp import GPFitInfo, GPHyperparameters, fit_gp_hyperparameters
from ._model.compact import CompactBasis, compact_features, compact_posterior
from ._model.density import DensityToleranceError, predictive_log_density
from ._model.families import MeanField
from ._model.grids import DiscretePrior, gaussian_prior, noise_prior
from ._model.posterior_grid import posterior_grid_prior
from ._model.regression import expected_sparsity, noise_moments, predict_regression
from ._solvers.info import FitInfo
from ._stats.eigen import Eigenbasis, eigenbasis_for_dtype, rotate_features
from ._stats.regression import RegressionStats, kfold_stats_from_inputs, regression_stats_from_inputs
from .gaussian._blr import spectral_evidence_noise, spectral_evidence_optimum

BASES = ("eigen", "features", "compact")
# Defaults that depend on the basis (`None` in DirectConfig): see `resolve_config`.
_BASIS_DEFAULTS: dict[str, dict[str, Any]] = {
    "eigen": dict(width=6.0, noise_span=3.0, noise_cv=(), starts=("prior",)),
    "features": dict(width=3.0, noise_span=10.0, noise_cv=(10.0, 3.0, 1.0), starts=("prior", "gaussian")),
    "compact": dict(width=6.0, noise_span=3.0, noise_cv=(), starts=("prior",)),
}


__all__ = [
    "BASES",
    "DirectConfig",
    "LARGE_DATA_ROWS",
    "default_num_frequencies",
    "FoldResult",
    "FittedDirect",
    "DirectTimings",
    "DirectInfo",
    "DirectFit",
    "RecentredFit",
    "FoldRun",
    "PreparedFold",
    "noise_prior_for_span",
    "inner_fold_stats",
    "choose_noise_prior",
    "parse_noise_cv",
    "resolve_config",
    "prepare_fold",
    "evidence_noise_variance",
    "eigen_posterior_grid",
    "fit_prepared",
    "fold_features",
    "fit_direct",
    "fit_best_start",
    "fit_with_noise_recentring",
    "run_fold",
    "summarize",
]


class DirectConfig(NamedTuple):
    r"""Settings of the DIRECT regression pipeline. `None` fields take the default of the `basis`
    (`resolve_config`): `"eigen"` width 6 posterior sds, noise grid spanning 3x around the evidence
    maximizer, no noise CV, the prior start (diagonal CAVI); `"features"` (the paper's appendix E) width 3 prior sds,
    noise grids spanning 10x, 3x or 1x around the GP estimate chosen by inner CV, both starts.

    Attributes:
      basis: `"eigen"` (accurate: the weights in the eigenbasis of $\Phi^\top\Phi$), `"compact"` (the
        eigen fit in a compact form, `compact_posterior`) or `"features"` (the paper's sparse 4-bit recipe
        on the random Fourier features).
      num_frequencies: random frequencies; the features are their cosines and sines, b = 2 `num_frequencies`.
        `None`: by the training rows, `default_num_frequencies(n)`.
      frequency_sampling: `"iid"`, `"orthogonal"` or `"halton"` (`rff_init(sampling=...)`).
      levels: levels of each weight's grid (15: 4-bit codes).
      width: the weight grid's half-width, in posterior sds (`"eigen"`) or prior sds (`"features"`).
      noise_levels: levels of the noise-variance grid.
      noise_span: the noise grid when `noise_cv` is empty: $s^2 \times [1/\text{span}, \text{span}]$ around
        the evidence maximizer (`"eigen"`) or the GP estimate (`"features"`).
      noise_cv: `"features"` only: the spans of the noise grids to choose from by `cv_folds`-fold
        cross-validation on the training rows (`select_prior` with `cv_criterion`); span 1 fixes the
        noise at the GP estimate. Empty: the paper's protocol, one grid of `noise_span`.
      cv_folds: folds of that inner cross-validation.
      cv_criterion: `"log_density"` or `"sq_error"` (`select_prior`).
      cv_max_iter: CAVI sweeps per inner fit (from `gaussian_start`, which is close).
      method: how `fit_regression` fits: `"cavi"`, `"lbfgs"` or `"optax-lbfgs"`.
      max_iter: its sweeps or iterations; `None`: its default.
      starts: fit from each start and keep the highest ELBO: `"prior"` and/or `"gaussian"`
        (`gaussian_start`).
      gp_points: training rows the GP hyperparameters are fitted on (at most).
      gp_restarts: starts of the GP hyperparameter fit.
      gp_restart_rule: `"screened"`: the GP's starts run on `gp_screen_points` of its rows, then the
        winner and the first start on all (`fit_gp_hyperparameters(restarts="screened")`); `"all"`: every
        start on every row.
      gp_screen_points: rows of that screening.
      gp_degenerate_margin: `fit_gp_hyperparameters(degenerate_margin=...)`.
      gp_precision: `fit_gp_hyperparameters(precision=...)`: `"native"` (the likelihood in the working
        dtype) or `"float64"` (for a float32 working dtype, in float64 on the host: the GP's optima
        without float32's rounding; a float64 working dtype is already float64;
        `docs/notes/2026-11-27-gp-float64.md`).
      chunk_size: rows per chunk of the statistics pass.
      max_noise_recentres: opt-in: refit with the noise grid recentred while `q_noise` piles up on an end
        of it, at most this many times (the paper's protocol: 0).
      compact_tol: `"compact"` only: the budget of the variance change, in noise variances
        (`compact_posterior(tol=...)`).
      compact_vectors: `"compact"` only: the kept eigenvectors stored in float16 (`"half"`: half the
        bytes; the predictive variance moves by float16's rounding, the mean not at all) or in the working
        dtype (`"full"`) (`compact_posterior(vectors_dtype=...)`).
      gp_gain_tol: `fit_gp_hyperparameters(gain_tol=...)`: a GP start ends after two iterations in a row
        that each raise its log marginal likelihood by less than this many nats (0: never).

    Example:
      >>> from kronvi.pipeline import DirectConfig
      >>> DirectConfig()  # the defaults  # doctest: +NORMALIZE_WHITESPACE
      DirectConfig(basis='eigen', num_frequencies=None, frequency_sampling='iid', levels=15, width=None,
        noise_levels=15, noise_span=None, noise_cv=None, cv_folds=5, cv_criterion='log_density',
        cv_max_iter=10, method='cavi', max_iter=None, starts=None, gp_points=1000, gp_restarts=4,
        gp_restart_rule='screened', gp_screen_points=300, gp_degenerate_margin=2.0, gp_precision='native',
        chunk_size=2048, max_noise_recentres=0, compact_tol=0.1, compact_vectors='half', gp_gain_tol=0.1)
    """

    basis: str = "eigen"
    num_frequencies: int | None = None
    frequency_sampling: str = "iid"
    levels: int = 15
    width: float | None = None
    noise_levels: int = 15
    noise_span: float | None = None
    noise_cv: tuple[float, ...] | None = None
    cv_folds: int = 5
    cv_criterion: str = "log_density"
    cv_max_iter: int = 10
    method: str = "cavi"
    max_iter: int | None = None
    starts: tuple[str, ...] | None = None
    gp_points: int = 1000
    gp_restarts: int = 4
    gp_restart_rule: str = "screened"
    gp_screen_points: int = 300
    gp_degenerate_margin: float = 2.0
    gp_precision: str = "native"
    chunk_size: int = 2048
    max_noise_recentres: int = 0
    # "compact" only: the budget of the variance change, in noise variances (kronvi.compact_posterior(tol=...))
    compact_tol: float = 0.1
    # "compact" only: its kept eigenvectors in float16 ("half") or the working dtype ("full")
    compact_vectors: str = "half"
    # fit_gp_hyperparameters(gain_tol=...): the last field, so that positions of the others stay put
    gp_gain_tol: float = 0.1


LARGE_DATA_ROWS = 20_000


def default_num_frequencies(num_rows: int) -> int:
    """The default recipe's random frequencies for `num_rows` training rows: 1000 (b = 2000 features)
    below `LARGE_DATA_ROWS` (20,000) rows, 2000 (b = 4000) from there, where more features pay for their
    $O(nb^2 + b^3)$ cost (`experiments/results/feature_budget.md`, `docs/notes/2026-11-26-speed.md`)."""
    return 2000 if int(num_rows) >= LARGE_DATA_ROWS else 1000


def _num_frequencies(config, num_rows: int) -> int:
    return (
        default_num_frequencies(num_rows) if config.num_frequencies is None else int(config.num_frequencies)
    )


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
    """Everything needed to predict on new raw inputs (`fold_features` maps them to the features the
    weights belong to).

    Attributes:
      standardizer: `Standardizer` of the training inputs.
      features: `RandomFourierFeatures`, the feature map of the standardized inputs (with `basis`, its
        `offset` centres the features on the training rows: an intercept outside the prior).
      y_offset: `()` the training targets' mean (a float64 NumPy scalar for concrete targets);
        predictions on the original scale add it back.
      prior_w: `DiscretePrior` `(b, m)` over the weights (in the eigenbasis when `basis` is set).
      prior_noise: `DiscretePrior` `(1, m_sigma)` over the noise variance.
      q_w: `MeanField` `(b, m)`, the posterior over the weights.
      q_noise: `MeanField` `(1, m_sigma)`, the posterior over the noise variance.
      hyper: `GPHyperparameters` the features were drawn for.
      basis: `Eigenbasis` rotating the features (`DirectConfig.basis` `"eigen"`), `CompactBasis`, the
        compact model's feature map (`"compact"`), else `None`.

    For every recipe, `predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise,
    fold_features(model, X))` is the model's predictive mean and variance; a `"compact"` model's variance
    includes its complement (one of its features carries it). Saved whole by `kronvi.save_model`.
    """

    standardizer: Standardizer
    features: RandomFourierFeatures
    y_offset: jax.Array
    prior_w: DiscretePrior
    prior_noise: DiscretePrior
    q_w: MeanField
    q_noise: MeanField
    hyper: GPHyperparameters
    basis: Eigenbasis | CompactBasis | None = None


class DirectTimings(NamedTuple):
    """Wall-clock seconds of the stages of `fit_direct`."""

    init_seconds: float  # standardizing and the GP hyperparameters
    stats_seconds: float  # features and statistics (with the inner folds', and the eigenbasis)
    select_seconds: float  # the cross-validated choice of the noise grid (0 without `noise_cv`)
    fit_seconds: float  # the mean-field fits


class DirectInfo(NamedTuple):
    """Diagnostics of `fit_direct`. The fields of the final fit's
    `kronvi.FitInfo` (`elbo`, `final_elbo`, `num_iter`, `converged`, `optimizer`) are
    also read here directly, as on every fit's `info`."""

    fit: FitInfo  # the mean-field fit that was kept
    gp: GPFitInfo  # the GP hyperparameter fit
    noise_recentres: int  # how many times the noise grid was recentred (`config.max_noise_recentres`)
    noise_span: float  # the noise grid used: s2 x [1/span, span]; 1 = fixed at the GP estimate
    cv_scores: object = None  # the inner-fold scores of every span with `config.noise_cv`, else None

    @property
    def elbo(self):
        return self.fit.elbo

    @property
    def final_elbo(self):
        return self.fit.final_elbo

    @property
    def num_iter(self):
        return self.fit.num_iter

    @property
    def converged(self):
        return self.fit.converged

    @property
    def optimizer(self) -> str:
        return self.fit.optimizer


class DirectFit(NamedTuple):
    """The result of `fit_direct` and `fit_prepared`.

    Attributes:
      model: `FittedDirect`, everything needed to predict.
      timings: `DirectTimings`.
      info: `DirectInfo`.
    """

    model: FittedDirect
    timings: DirectTimings
    info: DirectInfo


class RecentredFit(NamedTuple):
    """The result of `fit_with_noise_recentring`: a
    `kronvi.RegressionFit`'s fields, then the noise grid it ended on."""

    q_w: MeanField
    q_noise: MeanField
    info: FitInfo
    prior_noise: DiscretePrior  # the last (recentred) noise grid
    num_recentres: int


class FoldRun(NamedTuple):
    """The result of `run_fold`."""

    model: FittedDirect
    result: FoldResult


class PreparedFold(NamedTuple):
    """A training set prepared for fitting (`prepare_fold`): everything before the noise grid's choice."""

    standardizer: Standardizer  # from the training rows
    y_offset: jax.Array  # the training targets' mean (a float64 NumPy scalar for concrete targets)
    X: jax.Array  # standardized training inputs `(n, d)`
    y: jax.Array  # centred training targets `(n,)`
    hyper: GPHyperparameters
    gp_info: GPFitInfo
    features: RandomFourierFeatures
    # Training statistics of the `b = 2 * num_frequencies` features the weights belong to (rotated
    # to `basis` for "eigen").
    stats: RegressionStats
    cv_stats: tuple | None  # `(cv_train, cv_test)` per inner fold when `config.noise_cv`, else `None`
    prior_w: DiscretePrior  # the weight grids
    key: jax.Array  # the key of the fits that follow (`fit_prepared`)
    init_seconds: float  # standardizing and the GP hyperparameters
    stats_seconds: float  # features and statistics (with the inner folds', and the eigenbasis)
    basis: Eigenbasis | None  # "eigen": the rotation of the features
    noise_variance: jax.Array  # the centre of the noise grid: the evidence maximizer or the GP estimate
    # The prior sd of the weights: the evidence maximizer ("eigen") or the GP's signal sd ("features").
    prior_scale: jax.Array | None = None


def _block(x):
    return jax.block_until_ready(x)


def noise_prior_for_span(noise_variance: ArrayLike, span: float, levels: int) -> DiscretePrior:
    """The noise grid `noise_variance x [1/span, span]` with `levels` levels; `span == 1`: one level,
    the noise fixed at `noise_variance`."""
    if float(span) == 1.0:
        return noise_prior(noise_variance, levels=1)
    return noise_prior(noise_variance, levels=levels, span=span)


def inner_fold_stats(
    key: jax.Array,
    feature_map: Callable[[jax.Array], jax.Array],
    X: jax.Array | np.ndarray,
    y: ArrayLike,
    num_folds: int,
    *,
    chunk_size: int | None = None,
) -> tuple[RegressionStats, tuple[RegressionStats, RegressionStats]]:
    """Training statistics accumulated per random inner fold in one pass: `(stats, (cv_train, cv_test))`,
    `stats` being their sum (all rows) and the pair the stacked fold statistics for `choose_noise_prior`."""
    n = X.shape[0]
    if n < num_folds:
        raise ValueError(f"{n} training rows cannot make {num_folds} cross-validation folds")
    inner = np.asarray(jax.random.permutation(key, n)) % num_folds
    cv_train, cv_test = kfold_stats_from_inputs(feature_map, X, y, inner, chunk_size=chunk_size)
    return jax.tree.map(lambda a: jnp.sum(a, axis=0), cv_test), (cv_train, cv_test)


def choose_noise_prior(
    cv_stats: tuple[RegressionStats, RegressionStats],
    prior_w: DiscretePrior,
    noise_variance: ArrayLike,
    spans: Sequence[float],
    *,
    levels: int,
    criterion: str,
    max_iter: int | None,
) -> tuple[float, DiscretePrior, HeldoutScores]:
    """The noise grid `noise_variance x [1/span, span]` (`noise_prior_for_span`) among `spans` that
    `kronvi.select_prior` prefers on the inner folds `cv_stats = (cv_train, cv_test)`.
    Returns `(span, prior_noise, scores)`."""
    cands = [(prior_w, noise_prior_for_span(noise_variance, s, levels)) for s in spans]
    best, scores = select_prior(*cv_stats, cands, criterion=criterion, max_iter=max_iter)
    return float(spans[best]), cands[best][1], scores


def parse_noise_cv(text: str) -> tuple[float, ...]:
    """The `--noise-cv` command-line value: `"none"` -> `()`, else a comma list of spans >= 1."""
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


def resolve_config(config: DirectConfig | None = None) -> DirectConfig:
    """`config` (default `DirectConfig()`) with every `None` field set to its basis's default.

    Example:
      >>> from kronvi.pipeline import DirectConfig, resolve_config
      >>> c = resolve_config(DirectConfig(basis="features"))
      >>> c.width, c.noise_span, c.noise_cv, c.starts
      (3.0, 10.0, (10.0, 3.0, 1.0), ('prior', 'gaussian'))
    """
    config = DirectConfig() if config is None else config
    if not isinstance(config, DirectConfig):
        raise TypeError(f"`config` must be a DirectConfig, got {type(config).__name__}")
    if config.basis not in BASES:
        raise ValueError(f"`config.basis` must be one of {BASES}, got {config.basis!r}")
    defaults = _BASIS_DEFAULTS[config.basis]
    return config._replace(**{k: v for k, v in defaults.items() if getattr(config, k) is None})


def _check_config(config: DirectConfig | None) -> DirectConfig:
    """Validates every field before any compute; errors name the field (`config.<field>`)."""
    config = resolve_config(config)
    if config.basis != "features" and config.noise_cv:
        raise ValueError(
            f"`config.noise_cv` applies to basis='features' only: with basis={config.basis!r} the noise grid is "
            "centred on the evidence maximizer (set noise_cv=() or basis='features')"
        )
    check_nonnegative_number(config.gp_gain_tol, "config.gp_gain_tol")
    if not float(config.compact_tol) >= 0:
        raise ValueError(f"`config.compact_tol` must be >= 0, got {config.compact_tol!r}")
    if config.compact_vectors not in ("half", "full"):
        raise ValueError(f"`config.compact_vectors` must be 'half' or 'full', got {config.compact_vectors!r}")
    for field, minimum in [
        ("levels", 2), ("noise_levels", 1), ("gp_points", 2), ("gp_restarts", 1),
        ("chunk_size", 1), ("max_noise_recentres", 0), ("cv_max_iter", 1), ("gp_screen_points", 2),
    ]:  # fmt: skip
        check_int(getattr(config, field), f"config.{field}", minimum)
    if config.max_iter is not None:
        check_int(config.max_iter, "config.max_iter", 1)
    if config.num_frequencies is not None:
        check_int(config.num_frequencies, "config.num_frequencies", 1)
    if config.frequency_sampling not in SAMPLINGS:
        raise ValueError(
            f"`config.frequency_sampling` must be one of {SAMPLINGS}, got {config.frequency_sampling!r}"
        )
    if config.gp_restart_rule not in ("all", "screened"):
        raise ValueError(
            f"`config.gp_restart_rule` must be 'all' or 'screened', got {config.gp_restart_rule!r}"
        )
    if config.gp_precision not in GP_PRECISIONS:
        choices = " or ".join(map(repr, GP_PRECISIONS))
        raise ValueError(f"`config.gp_precision` must be {choices}, got {config.gp_precision!r}")
    # `config` is resolved (`resolve_config`): its `None` fields are set
    if not float(config.width) > 0:  # type: ignore[arg-type]
        raise ValueError(f"`config.width` must be positive, got {config.width!r}")
    if not float(config.noise_span) > 1.0:  # type: ignore[arg-type]
        raise ValueError(f"`config.noise_span` must be > 1, got {config.noise_span!r}")
    if config.method not in METHODS:
        raise ValueError(f"`config.method` must be one of {METHODS}, got {config.method!r}")
    if not config.starts or any(s not in ("prior", "gaussian") for s in config.starts):
        raise ValueError(f"`config.starts` must name 'prior' and/or 'gaussian', got {config.starts!r}")
    if config.noise_cv:
        if config.cv_criterion not in CRITERIA:
            raise ValueError(f"`cv_criterion` must be one of {CRITERIA}, got {config.cv_criterion!r}")
        if any(not float(s) >= 1.0 for s in config.noise_cv):
            raise ValueError(f"`noise_cv` spans must be >= 1 (1 = fixed noise), got {config.noise_cv}")
        check_int(config.cv_folds, "cv_folds", 2)
    return config


def prepare_fold(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    config: DirectConfig | None = None,
    *,
    dtype: DTypeLike = jnp.float32,
    gp: tuple[GPHyperparameters, GPFitInfo] | None = None,
) -> PreparedFold:
    """Prepares raw training rows for a DIRECT fit: standardizer and centred targets from these rows, GP
    hyperparameters on at most `config.gp_points` of them, `config.num_frequencies` (by default
    `default_num_frequencies` of the rows) random Fourier
    frequencies, the weight grid, and the training statistics in one chunked pass (accumulated per inner
    fold when `config.noise_cv` is set, for `choose_noise_prior`).

    Every study that fits one train/test split starts here; `fit_prepared` continues from it, and
    `fold_features` maps test inputs through the same standardizer and features.

    Args:
      key: PRNG key; split into the GP's, the features' and the fits' (`PreparedFold.key`).
      X: raw training inputs `(n, d)`.
      y: raw training targets `(n,)`.
      config: `DirectConfig` (default: the paper's settings).
      dtype: floating dtype of the inputs, statistics and fits.
      gp: `None`, or `(hyper, gp_info)` of an earlier preparation of the same rows with the same key
        (another `basis`, say), to skip refitting the GP hyperparameters.

    Returns:
      `PreparedFold`.
    """
    return _prepare_fold(key, X, y, _check_config(config), dtype=dtype, gp=gp)


def _prepare_fold(key, X, y, config: DirectConfig, *, dtype, gp) -> PreparedFold:
    """`prepare_fold` with a checked, resolved `config`."""
    k_gp, k_rff, k_fit = jax.random.split(key, 3)
    t0 = time.perf_counter()
    if isinstance(X, np.ndarray) and X.dtype.kind == "f":
        with np.errstate(over="ignore"):  # beyond the dtype's range: inf, which the checks below name
            X = to_device(X.astype(dtype))  # by NumPy: no program to compile
    X = jnp.asarray(X, dtype)
    std = fit_standardizer(X)
    Xs = standardize(std, X)
    y_offset, yc = _centre(y, dtype)
    if gp is None:
        hyper, gp_info = fit_gp_hyperparameters(
            k_gp, Xs, yc, num_points=config.gp_points, num_starts=config.gp_restarts,
            degenerate_margin=config.gp_degenerate_margin, restarts=config.gp_restart_rule,
            screen_points=config.gp_screen_points, precision=config.gp_precision, gain_tol=config.gp_gain_tol,
        )  # fmt: skip
    else:
        hyper, gp_info = gp
    _block(hyper)
    t1 = time.perf_counter()
    num_frequencies = _num_frequencies(config, X.shape[0])
    feats = rff_init(k_rff, hyper.lengthscales, num_frequencies, sampling=config.frequency_sampling)
    fmap = functools.partial(rff_features, feats)
    cv_stats = None
    prior_scale = jnp.sqrt(hyper.signal_variance)
    basis = None
    if config.basis != "features":
        feats = _centred(feats, Xs, config)
        stats, basis, prior_w, prior_scale, s2 = _eigen_setup(
            feats, Xs, yc, prior_scale, hyper.noise_variance, config
        )
    else:
        if config.noise_cv:
            stats, cv_stats = inner_fold_stats(
                jax.random.fold_in(k_fit, 1), fmap, Xs, yc, config.cv_folds, chunk_size=config.chunk_size
            )
        else:
            stats = regression_stats_from_inputs(fmap, Xs, yc, chunk_size=config.chunk_size)
        s2 = hyper.noise_variance
        b = 2 * num_frequencies
        prior_w = gaussian_prior(b, prior_scale, levels=config.levels, width=config.width)  # type: ignore[arg-type]  # resolved: set
    _block((stats, prior_w))
    t2 = time.perf_counter()
    return PreparedFold(
        std, y_offset, Xs, yc, hyper, gp_info, feats, stats, cv_stats, prior_w, k_fit, t1 - t0, t2 - t1,
        basis, s2, prior_scale,
    )  # fmt: skip


def _centre_like(y, offset, dtype):
    """`y - offset` in `dtype`, subtracted in float64 for concrete targets (see `_centre`)."""
    if isinstance(y, jax.core.Tracer) or isinstance(offset, jax.core.Tracer):
        return jnp.asarray(y, dtype) - offset
    return jnp.asarray(np.asarray(y, np.float64) - np.float64(offset), dtype)


def _centre(y, dtype):
    """`(y_offset, y - y_offset)`: the mean of concrete targets and the centring in float64 on the host (a
    float64 NumPy scalar, so that `mean + y_offset` returns the targets' units to their own precision: targets
    far from zero, y + 1e6 say, would lose their spread to a float32 offset), the centred targets in `dtype`;
    traced targets are centred in `dtype`."""
    if isinstance(y, jax.core.Tracer):
        y = jnp.asarray(y, dtype)
        return jnp.mean(y), y - jnp.mean(y)
    y = np.asarray(y, np.float64)
    offset = np.mean(y)
    with np.errstate(over="ignore"):  # beyond the dtype's range: inf, which the GP's checks name
        return offset, to_device((y - offset).astype(dtype))  # cast by NumPy: no program to compile


def _centred(feats, X, config):
    """`feats` with the training rows' mean of its features as `offset` (`kronvi.feature_mean`), computed
    in float64 and kept in the working dtype: every later use (statistics, predictions, saved models)
    subtracts the same vector, so the model has an unshrunk intercept, as `BayesianRidge`'s
    (`docs/notes/2026-11-27-intercept.md`)."""
    dtype = feats.frequencies.dtype
    with jax.enable_x64(True):
        mean = feature_mean(*_cast((feats, X), jnp.float64), chunk_size=config.chunk_size or 4096)
        return feats._replace(offset=_cast(mean, dtype))


def _cast(tree, dtype):
    """Every array of `tree` in `dtype`: by NumPy when all are in host memory (no program per shape of the
    training rows), else in one program (one program per array otherwise, each compiled on its first call
    for a shape). In float64 only inside `jax.enable_x64`."""
    leaves, treedef = jax.tree.flatten(tree)
    views = host_arrays(*leaves)
    if views is None:
        return _cast_program(tree, dtype)
    return treedef.unflatten([to_device(np.asarray(v).astype(dtype)) for v in views])


@functools.partial(jax.jit, static_argnums=1)
def _cast_program(tree, dtype):
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), tree)


def _eigen_setup(feats, X, y, prior_scale, gp_noise, config):
    r"""Eigenbasis, evidence-optimal prior scale and noise variance, and weight grids of the eigenbasis
    recipe: `(rotated_stats, basis, prior_w, prior_scale, noise_variance)`.

    Computed in float64 whatever the working dtype: the small eigenvalues of $\Phi^\top\Phi$ that
    still carry signal (down to $\sigma^2/\sigma_w^2$, e.g. 1e-4 of the largest on yacht) are below
    the rounding of float32 statistics. The results are cast back to the working dtype; in the eigenbasis
    the fit is well conditioned (`docs/notes/2026-11-22-accuracy-defaults.md`). With fewer rows than
    features the basis comes from the `n x n` Gram matrix (`kronvi.eigenbasis_from_inputs`).
    The prior scale and the noise variance maximize the exact evidence together, from the GP's values.
    """
    dtype = X.dtype
    with jax.enable_x64(True):
        feats64, X64, y64, scale64, noise64 = _cast((feats, X, y, prior_scale, gp_noise), jnp.float64)
        stats, basis = eigenbasis_for_dtype(
            functools.partial(rff_features, feats64), X64, y64, chunk_size=config.chunk_size, null_dtype=dtype
        )
        scale, s2 = spectral_evidence_optimum(
            basis.eigenvalues, stats.Phity, stats.yty, stats.n, scale64, noise64
        )
        prior_w = eigen_posterior_grid(stats, basis, scale, s2, levels=config.levels, width=config.width)
        stats, basis, scale, s2, values, log_probs = _cast(
            (stats, basis, scale, s2, prior_w.values, prior_w.log_probs), dtype
        )
        prior_w = DiscretePrior(values, log_probs)
    return stats, basis, prior_w, scale, s2


def evidence_noise_variance(
    rotated: RegressionStats,
    basis: Eigenbasis,
    prior_scale: ArrayLike,
    guess: ArrayLike,
    *,
    log_range: float = 12.0,
) -> jax.Array:
    """The noise variance maximizing the exact evidence (`kronvi.blr_evidence_noise`) within
    `guess * exp(±log_range)` (`guess`: e.g. the GP estimate), from the eigenbasis already computed:
    `(rotated, basis)` of `kronvi.eigenbasis`."""
    guess = jnp.asarray(guess, rotated.PhitPhi.dtype)
    lower, upper = guess * np.exp(-log_range), guess * np.exp(log_range)
    return spectral_evidence_noise(
        basis.eigenvalues, rotated.Phity, rotated.yty, rotated.n, prior_scale, lower, upper
    )


def eigen_posterior_grid(
    rotated: RegressionStats,
    basis: Eigenbasis,
    prior_scale: ArrayLike,
    noise_variance: ArrayLike,
    *,
    levels: int,
    width: float,
) -> DiscretePrior:
    r"""Weight grids for the eigenbasis recipe: coordinate `j` gets `levels` values spanning its exact
    posterior $N(\mu_j, \tau_j^2)$ ± `width` sds, $\tau_j^{-2} = \lambda_j/\sigma^2 +
    \sigma_w^{-2}$, $\mu_j = \tau_j^2 c_j/\sigma^2$ (`kronvi.posterior_grid_prior`)."""
    center, sd = _posterior_moments(basis.eigenvalues, rotated.Phity, prior_scale, noise_variance)
    return posterior_grid_prior(center, sd, prior_scale, levels=levels, width=width)


@jax.jit
def _posterior_moments(eigenvalues, Phity, prior_scale, noise_variance):
    """Each eigen-coordinate's exact posterior mean and sd, in one program."""
    precision = eigenvalues / noise_variance + 1.0 / prior_scale**2
    return Phity / noise_variance / precision, 1.0 / jnp.sqrt(precision)


def fit_prepared(fold: PreparedFold, config: DirectConfig | None = None) -> DirectFit:
    """Chooses the noise grid and fits DIRECT mean field on a `prepare_fold` result (with the same
    `config`). Returns a `DirectFit` `(model, timings, info)` as
    `fit_direct`.

    With `config.noise_cv` the grid `s2 x [1/span, span]` is chosen among those spans on the inner folds
    (`choose_noise_prior`, timed as `select_seconds`); otherwise it is the grid of
    `config.noise_span`. The fit keeps the best of `config.starts` (`fit_best_start`), refitted
    with a recentred noise grid up to `config.max_noise_recentres` times.
    """
    return _fit_prepared(fold, _check_config(config))


def _fit_prepared(fold: PreparedFold, config: DirectConfig) -> DirectFit:
    """`fit_prepared` with a checked, resolved `config`."""
    if (config.basis != "features") != (fold.basis is not None):
        raise ValueError(
            "`fold` was prepared with another `basis` than `config`'s: prepare it with this config"
        )
    if bool(config.noise_cv) != (fold.cv_stats is not None):
        raise ValueError(
            "`fold` was prepared with another `noise_cv` setting than `config`'s: prepare it with this config"
        )
    s2 = fold.noise_variance
    t2 = time.perf_counter()
    cv = None
    if config.noise_cv:
        span, prior_n, cv = choose_noise_prior(
            fold.cv_stats, fold.prior_w, s2, config.noise_cv, levels=config.noise_levels,  # type: ignore[arg-type]  # set with noise_cv
            criterion=config.cv_criterion, max_iter=config.cv_max_iter,
        )  # fmt: skip
    else:
        span = float(config.noise_span)  # type: ignore[arg-type]  # resolved: set
        prior_n = noise_prior(s2, levels=config.noise_levels, span=span)
    t3 = time.perf_counter()
    q_w, q_n, info, prior_n, recentres = _fit_with_noise_recentring(
        fold.stats, fold.prior_w, prior_n, config._replace(noise_span=span), key=fold.key
    )
    basis: Eigenbasis | CompactBasis | None = fold.basis
    prior_w = fold.prior_w
    if config.basis == "compact":
        basis, prior_w, q_w = compact_posterior(
            fold.basis, q_w, prior_w, fold.stats.n, noise_moments(q_n, prior_n)[2], tol=config.compact_tol,  # type: ignore[arg-type]  # an Eigenbasis
            width=config.width, vectors_dtype=jnp.float16 if config.compact_vectors == "half" else None,  # type: ignore[arg-type]  # resolved: set
        )  # fmt: skip
    _block(q_w)
    t4 = time.perf_counter()
    model = FittedDirect(
        fold.standardizer,
        fold.features,
        fold.y_offset,
        prior_w,
        prior_n,
        q_w,
        q_n,
        fold.hyper,
        basis,
    )
    timings = DirectTimings(
        init_seconds=fold.init_seconds,
        stats_seconds=fold.stats_seconds,
        select_seconds=(t3 - t2) if config.noise_cv else 0.0,
        fit_seconds=t4 - t3,
    )
    direct_info = DirectInfo(
        fit=info, gp=fold.gp_info, noise_recentres=recentres, noise_span=span, cv_scores=cv
    )
    return DirectFit(model, timings, direct_info)


def fold_features(fitted: PreparedFold | FittedDirect, X: ArrayLike) -> jax.Array:
    """Features of raw inputs `X (N, d)` through a `PreparedFold`'s or `FittedDirect`'s standardizer and
    random Fourier features, in the dtype of its statistics: `(N, b)`, rotated to its eigenbasis if it has
    one; for a `"compact"` model the `(N, 1 + k + J)` features of its weights (`kronvi.compact_features`).
    Either way they are what `model.q_w` and `model.prior_w` belong to, for `kronvi.predict_regression` and
    the other prediction functions."""
    dtype = fitted.features.frequencies.dtype
    X = to_device(X.astype(dtype)) if isinstance(X, np.ndarray) else jnp.asarray(X, dtype)  # no program
    Phi = rff_features(fitted.features, standardize(fitted.standardizer, X))
    if isinstance(fitted.basis, CompactBasis):
        return compact_features(fitted.basis, Phi)
    return Phi if fitted.basis is None else rotate_features(fitted.basis, Phi)


def fit_direct(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    config: DirectConfig | None = None,
    *,
    dtype: DTypeLike = jnp.float32,
) -> DirectFit:
    """Fits DIRECT mean-field regression on raw training data: `prepare_fold` then
    `fit_prepared`. Returns a `DirectFit`
    `(model, timings, info)`.

    With `config.noise_cv` (the default) the noise grid is chosen among those spans by
    `config.cv_folds`-fold cross-validation on the training rows: the statistics are accumulated per
    inner fold in the same single pass (their sum is the training statistics), each candidate is fitted
    on every `total - fold` (vmapped, CAVI from `kronvi.gaussian_start`) and scored exactly on the
    held-out fold (`kronvi.select_prior` with `config.cv_criterion`). That time is
    `select_seconds`.
    """
    config = _check_config(config)  # once: the two steps below take it as it is
    return _fit_prepared(_prepare_fold(key, X, y, config, dtype=dtype, gp=None), config)


def _sweep(config):
    """CAVI on the eigenbasis statistics (diagonal) updates every weight at once."""
    return dict(sweep="diagonal") if config.basis != "features" and config.method == "cavi" else {}


def fit_best_start(
    stats: RegressionStats,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    config: DirectConfig,
    *,
    key: jax.Array | None = None,
) -> RegressionFit:
    """Fits from each of `config.starts` and returns the `kronvi.RegressionFit`
    with the highest ELBO.

    Coordinate ascent on a grid stops at a local optimum that depends on the start; neither the prior nor
    the continuous optimum is the better start on every dataset (`docs/notes/2026-11-22-rmse-gap.md`).
    """
    config = _resolve_with_starts(config)
    return _fit_best_start(stats, prior_w, prior_noise, config, key=key)


def _resolve_with_starts(config: DirectConfig | None) -> DirectConfig:
    """`resolve_config`, and at least one start: what the fits below need of a config."""
    config = resolve_config(config)
    if not config.starts:
        raise ValueError("`config.starts` must name at least one start")
    return config


def _fit_best_start(stats, prior_w, prior_noise, config: DirectConfig, *, key) -> RegressionFit:
    """`fit_best_start` with a resolved `config`."""
    best, best_elbo = None, -float("inf")
    for start in config.starts or ():  # resolved and checked: never empty here
        fit = fit_regression(
            stats, prior_w, prior_noise, method=config.method, max_iter=config.max_iter, key=key, init=start,
            **_sweep(config),
        )  # fmt: skip
        elbo = float(fit.info.final_elbo)
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


def fit_with_noise_recentring(
    stats: RegressionStats,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    config: DirectConfig,
    *,
    key: jax.Array | None = None,
) -> RecentredFit:
    r"""Fits, and while the noise posterior puts most of its mass on an end level of its grid, moves the
    grid (same shape) to be centred on the current $E[\sigma^2]$ and refits from the current q.

    The GP's noise estimate is a good centre for a continuous posterior, but a 4-bit weight posterior
    fits less tightly and wants more noise; a grid that is too narrow saturates at its top level (seen on
    yacht: all mass on 10x the GP estimate) and makes the predictive density overconfident.
    Returns a `RecentredFit` `(q_w, q_noise, info, prior_noise, num_recentres)`.
    """
    config = _resolve_with_starts(config)
    return _fit_with_noise_recentring(stats, prior_w, prior_noise, config, key=key)


def _fit_with_noise_recentring(stats, prior_w, prior_noise, config: DirectConfig, *, key) -> RecentredFit:
    """`fit_with_noise_recentring` with a resolved `config`."""
    q_w, q_n, info = _fit_best_start(stats, prior_w, prior_noise, config, key=key)
    recentres = 0
    while recentres < config.max_noise_recentres and prior_noise.values.shape[-1] > 1:
        probs = q_n.probs[0]
        if not (float(probs[0]) > 0.5 or float(probs[-1]) > 0.5):
            break
        e_s = noise_moments(q_n, prior_noise)[2]
        prior_noise = noise_prior(e_s, levels=config.noise_levels, span=config.noise_span)  # type: ignore[arg-type]  # resolved: set
        q_w, q_n, info = fit_regression(
            stats,
            prior_w,
            prior_noise,
            method=config.method,
            max_iter=config.max_iter,
            key=key,
            init=(q_w, type(q_n).from_prior(prior_noise)),
            **_sweep(config),
        )
        recentres += 1
    return RecentredFit(q_w, q_n, info, prior_noise, recentres)


def run_fold(
    key: jax.Array,
    X_train: ArrayLike,
    y_train: ArrayLike,
    X_test: ArrayLike,
    y_test: ArrayLike,
    config: DirectConfig | None = None,
) -> FoldRun:
    """Fits on the training rows and evaluates on the test rows. Returns a `FoldRun`
    `(model, result)`."""
    model, timings, info = fit_direct(key, X_train, y_train, config)
    t0 = time.perf_counter()
    dtype = model.q_w.logits.dtype
    Phi = fold_features(model, X_test)
    mean, _ = predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    y_c = _centre_like(y_test, model.y_offset, dtype)
    try:
        log_dens, _ = predictive_log_density(
            model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y_c
        )
    except DensityToleranceError as e:  # a few points below the rounding floor: keep the best values, say so
        warnings.warn(f"NLPD: {e}", stacklevel=2)
        log_dens = jnp.asarray(e.log_density)
    _block(log_dens)
    t1 = time.perf_counter()
    result = FoldResult(
        rmse=float(jnp.sqrt(jnp.mean((mean - y_c) ** 2))),
        nlpd=float(-jnp.mean(log_dens)),
        sparsity_pct=100.0 * float(expected_sparsity(model.q_w, model.prior_w)),
        elbo=float(info.final_elbo),
        predict_seconds=t1 - t0,
        num_iter=int(info.num_iter),
        converged=bool(info.converged),
        noise_variance=float(noise_moments(model.q_noise, model.prior_noise)[2]),
        gp_degenerate=bool(info.gp.degenerate),
        noise_recentres=int(info.noise_recentres),
        noise_span=float(info.noise_span),
        **timings._asdict(),
    )
    return FoldRun(model, result)


def summarize(results: list[FoldResult]) -> dict:
    """Mean and standard deviation over folds of every numeric field."""
    out = {}
    for field in FoldResult._fields:
        vals = np.asarray([getattr(r, field) for r in results], dtype=float)
        out[f"{field}_mean"] = float(np.mean(vals))
        out[f"{field}_sd"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
    return out
