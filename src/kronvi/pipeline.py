r"""The DIRECT regression pipeline for one train/test split, shared by the CLI and the experiments.

raw inputs -> standardized inputs -> GP hyperparameters -> random Fourier features -> statistics ->
exact ELBO fit -> exact predictive mean, variance and density.

Three recipes (`DirectConfig(recipe=...)`), each an object that carries its own options, keyword-only and
typed, as `lineax.CG(rtol=...)` or `optax.adam(learning_rate)` do:

- `Eigen(width=6.0, noise_span=3.0, starts=("prior",))` (default): the weights are discretized in the
  eigenbasis of $\Phi^\top\Phi$ (`kronvi.stats.eigenbasis`), where the likelihood factorizes; the noise grid is
  centred on the exact evidence maximizer (`kronvi.gaussian.blr_evidence_noise`) and each weight's 15 levels span its
  exact posterior (`kronvi.model.posterior_grid_prior`). Accuracy matches exact Bayesian linear regression on the
  same features; the weights are not sparse and each needs its own grid (2 floats) plus the rotation.
- `Compact(tol=0.1, vectors="half", ...)`: the `Eigen` fit in a compact form (`kronvi.model.compact_posterior`):
  the exact posterior mean in the feature basis, the eigenvectors of the directions the data determine
  (`b x k`), and one shared variance for the rest. The same posterior predictive mean; a predictive variance
  between 1 and `1 + tol` times the eigen fit's at every input where the shared variance is the prior's (few
  rows), within `tol` noise variances of it on average over the training rows where it is the data's (many
  rows); a smaller model and faster predictions where `k` is well below `b`
  (`docs/decisions/default-recipe.md#the-compact-recipe`). The bound on test rows beyond the training
  inputs' span (`Eigen.support_rms`) takes the shared directions together, one bound for the band where the
  eigen model bounds each direction, so the two models recentre such rows differently
  (`docs/decisions/default-recipe.md#test-rows-far-from-the-training-inputs`).
- `Features(width=3.0, noise_span=10.0, noise_cv=(10.0, 3.0, 1.0), starts=("prior", "gaussian"), ...)`: the
  paper's recipe, weights of the random Fourier features on one grid of `±width` prior sds with a zero
  level: sparse 4-bit codes, less accurate (`docs/decisions/default-recipe.md#the-eigenbasis`).

The GP step's options are `GPOptions(points=None, restarts=4, ...)` (`DirectConfig(gp=...)`). An option of
one recipe cannot be set on another: `Eigen(tol=0.1)` raises `RecipeOptionError` (a `TypeError` and a
`ValueError`) naming `tol` and the recipe it belongs to (`Compact`).

Deprecated (kept for one release): the old flat fields of `DirectConfig`, a `basis` string and the options
that applied "only for" one basis or meant "the basis's default" when `None` (`basis`, `width`,
`noise_span`, `noise_cv`, `starts`, `cv_folds`, `cv_criterion`, `cv_max_iter`, `support_rms`, `compact_tol`,
`compact_vectors`, and the GP step's `gp_points`, `gp_restarts`, `gp_restart_rule`, `gp_screen_points`,
`gp_degenerate_margin`, `gp_precision`, `gp_gain_tol`). Passed to `DirectConfig(...)` or
`config._replace(...)`, they emit one `DeprecationWarning` and build the same config as before (`None`: the
recipe's default); a value other than the default for an option of another recipe
(`DirectConfig(basis="eigen", compact_tol=0.2)`) is a `RecipeOptionError`. Reading them
(`config.basis`, `config.width`, `config.gp_points`, ...) stays supported without a warning, and
`DirectConfig.as_flat_dict()` lists them for records. The fitted model and the saved-model format are
unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import numbers
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ._base.buckets import pad_rows, row_bucket, to_device
from ._base.checks import (
    check_finite,
    check_input_columns,
    check_int,
    check_ints,
    check_key,
    check_nonnegative_number,
    check_numeric,
    check_positive_number,
    check_training_rows,
    check_working_dtype,
    errors_name,
    host_arrays,
)
from ._base.compiling import quick_jit
from ._base.memory import MemoryLimitError, check_memory, regression_fit_bytes
from ._base.precision import matmul
from ._base.progress import StageLine
from ._fit.regression import METHODS, RegressionFit, fit_regression, fit_regression_unchecked
from ._fit.select import CRITERIA, HeldoutScores, select_prior
from ._inputs.data import Standardizer, fit_standardizer, standardize
from ._inputs.features import (
    KERNELS,
    SAMPLINGS,
    NystromFeatures,
    RandomFourierFeatures,
    feature_dtype,
    feature_map_unchecked,
    feature_mean_unchecked,
    num_features,
    nystrom_init,
    nystrom_kernel_unchecked,
    rff_features_unchecked,
    rff_init,
    rff_init_unchecked,
)
from ._inputs.gp import PRECISIONS as GP_PRECISIONS
from ._inputs.gp import GPFitInfo, GPHyperparameters, fit_gp_hyperparameters
from ._inputs.host import (
    fit_standardizer_host,
    standardize_host,
    target_moments,
    target_unit,
)
from ._model.compact import (
    COPIES,
    CompactBasis,
    compact_features,
    compact_posterior,
    complement_split,
    weight_moments64,
)
from ._model.density import DensityToleranceError, predictive_log_density
from ._model.families import MeanField, grid_moments
from ._model.grids import DiscretePrior, gaussian_grid, log_normalized, noise_grid, noise_prior
from ._model.posterior_grid import posterior_grid, posterior_grid_prior
from ._model.regression import expected_sparsity, noise_moments, predict_regression
from ._solvers.info import FitInfo
from ._stats.eigen import Eigenbasis, eigenbasis, eigenbasis_for_dtype, rotate_features
from ._stats.regression import (
    RegressionStats,
    host_whitened_stats,
    kfold_stats_from_inputs,
    merge_stats,
    stats_from_inputs,
)
from .gaussian._blr import spectral_evidence_noise, spectral_evidence_optimum, spectral_log_evidence

__all__ = [
    "BASES",
    "RECIPES",
    "LEGACY_FIELDS",
    "Eigen",
    "Compact",
    "Features",
    "GPOptions",
    "RecipeOptionError",
    "DirectConfig",
    "LARGE_DATA_ROWS",
    "NYSTROM_MIN_ROWS",
    "NYSTROM_MAX_ROWS",
    "SUPPORT_RMS",
    "default_feature_map",
    "support_rms_for",
    "default_gp_points",
    "default_gp_refine_points",
    "default_num_frequencies",
    "FeatureStep",
    "FEATURE_GAIN",
    "GROWTH_START_FREQUENCIES",
    "FittedDirect",
    "SupportBound",
    "support_shift",
    "Prediction",
    "predict",
    "log_density",
    "DirectTimings",
    "DirectInfo",
    "DirectFit",
    "RecentredFit",
    "PreparedFold",
    "noise_prior_for_span",
    "inner_fold_stats",
    "choose_noise_prior",
    "resolve_config",
    "prepare_fold",
    "evidence_noise_variance",
    "eigen_posterior_grid",
    "fit_prepared",
    "fold_features",
    "fit_direct",
    "num_fit_features",
    "check_fit_memory",
    "StreamState",
    "stream_init",
    "stream_update",
    "stream_prepare",
    "fit_best_start",
    "fit_with_noise_recentring",
]


class RecipeOptionError(TypeError, ValueError):
    """An option given to a recipe it does not belong to (`Eigen(tol=0.1)`: `tol` is `Compact`'s), or a
    `DirectConfig` field of one recipe set on another. A `TypeError` (a wrong keyword) and a `ValueError`
    (what the old `DirectConfig` raised for `noise_cv` on the eigen recipe)."""


class _Recipe:
    """Keyword-only, frozen options of one recipe; an option of another recipe (caught by the subclasses'
    `**other`) is a `RecipeOptionError`."""

    __slots__ = ()
    name: ClassVar[str]  # the `DirectConfig.basis` it replaces

    def __init__(self, **options: Any) -> None:
        fields = [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]
        for option in options:
            if option not in fields:
                raise RecipeOptionError(_not_an_option(type(self).__name__, option, fields))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = options.get(f.name, f.default)
            object.__setattr__(self, f.name, tuple(value) if isinstance(value, list) else value)


def _not_an_option(recipe: str, option: str, fields: Sequence[str]) -> str:
    owners = [r.__name__ for r in (Eigen, Compact, Features, GPOptions) if option in _fields_of(r)]
    where = f" it is an option of {', '.join(f'`{o}`' for o in owners)};" if owners else ""
    return f"`{option}` is not an option of `{recipe}`:{where} `{recipe}` takes {', '.join(fields)}"


def _fields_of(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


@dataclasses.dataclass(frozen=True, init=False)
class Eigen(_Recipe):
    r"""The default recipe: the weights discretized in the eigenbasis of $\Phi^\top\Phi$ (`kronvi.stats.eigenbasis`),
    each weight's `levels` values spanning its exact posterior, the noise grid centred on the exact evidence
    maximizer. Accuracy matches exact Bayesian linear regression on the same features.

    Attributes:
      width: the weight grid's half-width, in posterior sds.
      noise_span: the noise grid $s^2 \times [1/\text{span}, \text{span}]$ around the evidence maximizer;
        1 fixes the noise variance there.
      starts: fit from each start and keep the highest ELBO: `"prior"` and/or `"gaussian"`.
      support_rms: the predictive mean of a new row counts each of its eigenbasis coordinates up to this many
        times the training rows' RMS in that direction, $\sqrt{\lambda_j / n}$ (`SupportBound`); the
        variance is unchanged. Rows like the training rows are untouched; a row far from them no longer
        projects onto weakly determined directions at random. `None`: no bound (the plain posterior
        predictive; `docs/decisions/default-recipe.md#test-rows-far-from-the-training-inputs`). `"auto"`
        (default): `SUPPORT_RMS` (20) with random Fourier features, `None` with Nyström features, which vanish
        away from the training rows by themselves (`support_rms_for`).

    Example:
      >>> import kronvi
      >>> kronvi.Eigen(width=4.0)
      Eigen(width=4.0, noise_span=3.0, starts=('prior',), support_rms='auto')
    """

    name: ClassVar[str] = "eigen"
    width: float = 6.0
    noise_span: float = 3.0
    starts: tuple[str, ...] = ("prior",)
    support_rms: float | str | None = "auto"

    def __init__(
        self,
        *,
        width: float = 6.0,
        noise_span: float = 3.0,
        starts: Sequence[str] = ("prior",),
        support_rms: float | str | None = "auto",
        **other: Any,
    ):
        _Recipe.__init__(
            self, width=width, noise_span=noise_span, starts=starts, support_rms=support_rms, **other
        )


@dataclasses.dataclass(frozen=True, init=False)
class Compact(_Recipe):
    r"""The `Eigen` fit in a compact form (`kronvi.model.compact_posterior`): the exact posterior mean in the
    feature basis, the eigenvectors of the directions the data determine, one shared variance for the rest.
    The same posterior predictive mean; a predictive variance within `tol` noise variances of the eigen fit's
    (`docs/decisions/default-recipe.md#the-compact-recipe`). Rows beyond the training inputs' span are
    recentred by a bound on the shared directions together, where the eigen model bounds each direction, so
    there its predictive mean can differ from the eigen model's
    (`docs/decisions/default-recipe.md#test-rows-far-from-the-training-inputs`).

    Attributes:
      width: as `Eigen.width`.
      noise_span: as `Eigen.noise_span`.
      starts: as `Eigen.starts`.
      support_rms: as `Eigen.support_rms`.
      tol: the budget of the variance change, in noise variances (`compact_posterior(tol=...)`).
      vectors: the kept eigenvectors in float16 (`"half"`: half the bytes; the predictive variance moves by
        float16's rounding, the mean not at all) or in the working dtype (`"full"`).

    Example:
      >>> import kronvi
      >>> kronvi.Compact(tol=0.05)
      Compact(width=6.0, noise_span=3.0, starts=('prior',), support_rms='auto', tol=0.05, vectors='half')
    """

    name: ClassVar[str] = "compact"
    width: float = 6.0
    noise_span: float = 3.0
    starts: tuple[str, ...] = ("prior",)
    support_rms: float | str | None = "auto"
    tol: float = 0.1
    vectors: str = "half"

    def __init__(
        self,
        *,
        width: float = 6.0,
        noise_span: float = 3.0,
        starts: Sequence[str] = ("prior",),
        support_rms: float | str | None = "auto",
        tol: float = 0.1,
        vectors: str = "half",
        **other: Any,
    ):
        _Recipe.__init__(
            self, width=width, noise_span=noise_span, starts=starts, support_rms=support_rms, tol=tol,
            vectors=vectors, **other,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True, init=False)
class Features(_Recipe):
    r"""The paper's recipe: the weights of the random Fourier features on one grid of ±`width` prior sds
    with a zero level (sparse 4-bit codes, less accurate:
    `docs/decisions/default-recipe.md#the-eigenbasis`), the noise grid around the GP estimate.

    Attributes:
      width: the weight grid's half-width, in prior sds.
      noise_span: the noise grid $s^2 \times [1/\text{span}, \text{span}]$ around the GP estimate when
        `noise_cv` is empty; 1 fixes the noise variance there.
      noise_cv: the spans of the noise grids to choose from by `cv_folds`-fold cross-validation on the
        training rows (`select_prior` with `cv_criterion`); span 1 fixes the noise at the GP estimate.
        Empty: the paper's protocol, one grid of `noise_span`.
      starts: as `Eigen.starts`.
      cv_folds: folds of that inner cross-validation.
      cv_criterion: `"log_density"` or `"sq_error"` (`select_prior`).
      cv_max_iter: CAVI sweeps per inner fit (from `gaussian_start`, which is close).

    Example:
      >>> import kronvi
      >>> kronvi.Features(noise_cv=()).noise_span
      10.0
    """

    name: ClassVar[str] = "features"
    width: float = 3.0
    noise_span: float = 10.0
    noise_cv: tuple[float, ...] = (10.0, 3.0, 1.0)
    starts: tuple[str, ...] = ("prior", "gaussian")
    cv_folds: int = 5
    cv_criterion: str = "log_density"
    cv_max_iter: int = 10

    def __init__(
        self,
        *,
        width: float = 3.0,
        noise_span: float = 10.0,
        noise_cv: Sequence[float] = (10.0, 3.0, 1.0),
        starts: Sequence[str] = ("prior", "gaussian"),
        cv_folds: int = 5,
        cv_criterion: str = "log_density",
        cv_max_iter: int = 10,
        **other: Any,
    ):
        _Recipe.__init__(
            self, width=width, noise_span=noise_span, noise_cv=noise_cv, starts=starts, cv_folds=cv_folds,
            cv_criterion=cv_criterion, cv_max_iter=cv_max_iter, **other,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True, init=False)
class GPOptions(_Recipe):
    """The GP step that sets the kernel's lengthscales and the signal and noise variances
    (`kronvi.inputs.fit_gp_hyperparameters`).

    Attributes:
      points: training rows the GP hyperparameters are searched on (at most) (`num_points`); `None` (default):
        `default_gp_points` of the training rows (1000, or 2000 from `LARGE_DATA_ROWS` rows), then refined on
        more (`refine_points`).
      restarts: starts of the GP hyperparameter fit (`num_starts`).
      restart_rule: `"screened"`: the starts run on `screen_points` of its rows, then the winner and the
        first start on all (`restarts="screened"`); `"all"`: every start on every row.
      screen_points: rows of that screening.
      degenerate_margin: `fit_gp_hyperparameters(degenerate_margin=...)`.
      precision: `"float64"` (the whole GP fit in float64 on the float64 standardized rows: the same
        hyperparameters whatever the working dtype and the host device count;
        `docs/decisions/gp-step.md#the-gp-step-in-float64-whatever-the-working-dtype`) or `"native"` (in the
        working dtype).
      gain_tol: a start ends after two iterations in a row that each raise its log marginal likelihood by
        less than this many nats (0: never).
      refine_points: after the starts' search on `points` rows, the chosen hyperparameters are refined from
        where they are, one start, on this many rows (at most all; a new draw of them) when they are more than
        the search's: `None` (default): `default_gp_refine_points` of the training rows when `points` is `None`
        too (2000 from `NYSTROM_MIN_ROWS` to below `LARGE_DATA_ROWS` rows), else none; 0: none. Rows or keys
        traced under `jit` or `vmap` are not refined (`docs/decisions/gp-step.md#a-warm-refinement-on-more-rows`).

    Example:
      >>> import kronvi
      >>> kronvi.GPOptions(points=500).restarts
      4
    """

    name: ClassVar[str] = "gp"
    points: int | None = None
    restarts: int = 4
    restart_rule: str = "screened"
    screen_points: int = 300
    degenerate_margin: float = 2.0
    precision: str = "float64"
    gain_tol: float = 0.1
    refine_points: int | None = None

    def __init__(
        self,
        *,
        points: int | None = None,
        restarts: int = 4,
        restart_rule: str = "screened",
        screen_points: int = 300,
        degenerate_margin: float = 2.0,
        precision: str = "float64",
        gain_tol: float = 0.1,
        refine_points: int | None = None,
        **other: Any,
    ):
        _Recipe.__init__(
            self, points=points, restarts=restarts, restart_rule=restart_rule, screen_points=screen_points,
            degenerate_margin=degenerate_margin, precision=precision, gain_tol=gain_tol,
            refine_points=refine_points, **other,
        )  # fmt: skip


# The recipes by their old `DirectConfig.basis` names
RECIPES = {"eigen": Eigen, "features": Features, "compact": Compact}
BASES = tuple(RECIPES)

# The old flat fields of `DirectConfig`, deprecated: `(where, option)`, read from the recipe or `gp`
_LEGACY_RECIPE = (
    "width", "noise_span", "noise_cv", "starts", "cv_folds", "cv_criterion", "cv_max_iter", "support_rms",
)  # fmt: skip
_LEGACY_COMPACT = {"compact_tol": "tol", "compact_vectors": "vectors"}
_LEGACY_GP = {
    "gp_points": "points", "gp_restarts": "restarts", "gp_restart_rule": "restart_rule",
    "gp_screen_points": "screen_points", "gp_degenerate_margin": "degenerate_margin",
    "gp_precision": "precision", "gp_gain_tol": "gain_tol",
}  # fmt: skip
LEGACY_FIELDS = ("basis", *_LEGACY_RECIPE, *_LEGACY_COMPACT, *_LEGACY_GP)
_FLAT_ORDER = (
    "basis", "num_frequencies", "frequency_sampling", "levels", "width", "noise_levels", "noise_span", "noise_cv",
    "cv_folds", "cv_criterion", "cv_max_iter", "method", "max_iter", "starts", "gp_points", "gp_restarts",
    "gp_restart_rule", "gp_screen_points", "gp_degenerate_margin", "gp_precision", "chunk_size",
    "max_noise_recentres", "compact_tol", "compact_vectors", "gp_gain_tol", "lengthscale", "support_rms",
)  # fmt: skip


class _DirectConfigFields(NamedTuple):
    recipe: Eigen | Compact | Features
    gp: GPOptions
    num_frequencies: int | None
    frequency_sampling: str
    levels: int
    noise_levels: int
    method: str
    max_iter: int | None
    chunk_size: int
    max_noise_recentres: int
    lengthscale: float | None
    kernel: str
    feature_map: str | None
    feature_budget: float | None
    feature_gain: float


# `DirectConfig.feature_budget`: b starts from this many frequencies (b = 1000) unless `num_frequencies` is set
GROWTH_START_FREQUENCIES = 500
# `DirectConfig.feature_gain`'s default: nats of log evidence per training row a doubling of b must add
FEATURE_GAIN = 0.002

# `DirectConfig.feature_map`: random Fourier features or Nyström features on landmarks among the training rows
FEATURE_MAPS = ("fourier", "nystrom")
# `DirectConfig.feature_map`: a map of `FEATURE_MAPS`, or the one of the larger evidence ("auto")
FEATURE_MAP_CHOICES = (*FEATURE_MAPS, "auto")
# `DirectConfig.kernel`: a family of `KERNELS`, or the GP step's choice among them by the evidence
KERNEL_CHOICES = (*KERNELS, "auto")


class DirectConfig(_DirectConfigFields):
    r"""Settings of the DIRECT regression pipeline: the recipe and its options (`Eigen`, `Compact` or
    `Features`), the GP step's (`GPOptions`), and the settings every recipe shares. Keyword-only.

    `kronvi.fit_direct(key, X, y, DirectConfig(recipe=kronvi.Compact(tol=0.05), gp=kronvi.GPOptions(points=500)))`.
    An option is set on the object it belongs to, so an option of one recipe cannot be set on another:
    `kronvi.Eigen(tol=0.1)` is a `RecipeOptionError` naming `Compact`.

    Deprecated, for one release: the old flat fields (`basis`, `width`, `noise_span`, `noise_cv`, `starts`,
    `cv_folds`, `cv_criterion`, `cv_max_iter`, `support_rms`, `compact_tol`, `compact_vectors`, `gp_points`,
    `gp_restarts`, `gp_restart_rule`, `gp_screen_points`, `gp_degenerate_margin`, `gp_precision`,
    `gp_gain_tol`) given to `DirectConfig(...)` or `._replace(...)` build the same config with a
    `DeprecationWarning` (`None` takes the recipe's default, as before); an option of another recipe with a
    value other than its default is a `RecipeOptionError`. Reading them (`config.basis`, `config.width`,
    `config.gp_points`, ...) is not deprecated: they are the recipe's (the default for an option the recipe
    does not have: `noise_cv` is `()` for `Eigen`).

    Attributes:
      recipe: `Eigen()` (default), `Compact(...)` or `Features(...)`.
      gp: `GPOptions(...)`.
      num_frequencies: random frequencies; the features are their cosines and sines, b = 2 `num_frequencies`
        (with Nyström features, b = 2 `num_frequencies` landmarks). `None`: by the training rows and the
        feature map, `default_num_frequencies(n, feature_map)`.
      frequency_sampling: `"iid"`, `"orthogonal"` or `"halton"` (`rff_init(sampling=...)`).
      levels: levels of each weight's grid (15: 4-bit codes).
      noise_levels: levels of the noise-variance grid.
      method: how `fit_regression` fits: `"cavi"`, `"lbfgs"` or `"optax-lbfgs"`.
      max_iter: its sweeps or iterations; `None`: its default.
      chunk_size: rows per chunk of the statistics pass.
      max_noise_recentres: opt-in: refit with the noise grid recentred while `q_noise` piles up on an end
        of it, at most this many times (the paper's protocol: 0).
      lengthscale: `None` (default): the kernel's lengthscales, signal and noise variances come from the
        GP step (`gp`); a positive number: one lengthscale for every standardized input, the signal variance
        of the (scaled) targets and a tenth of it as the noise guess, and no GP is fitted.
      kernel: the stationary ARD kernel of the features and the GP step: `"rbf"` (squared exponential,
        default), `"matern52"`, `"matern32"` (`kronvi.inputs.rff_init(kernel=...)`), or `"auto"` (the eigen
        and compact recipes): the fold is prepared with each of the three (the same GP rows and feature
        draws) and the one whose features have the largest exact log evidence is fitted (`DirectInfo.kernel`
        says which; three preparations' time; `docs/decisions/default-recipe.md#the-kernel-family`).
      feature_map: `None` (default): by the training rows, `default_feature_map(n)`: Nyström features (b =
        2000, 6000 from 20,000 rows) from 4,000 to 100,000 rows with the eigen and compact recipes, random
        Fourier features otherwise and for rows traced under `jit` or `vmap`; `"fourier"`: random Fourier features
        (`kronvi.inputs.rff_init`); `"nystrom"`:
        Nyström features on `2 num_frequencies` landmarks drawn from the training rows (all of them when there
        are fewer; `kronvi.inputs.nystrom_init`), more accurate per feature where the rows are many and
        returning to the mean away from them (`docs/decisions/default-recipe.md#nystrom-features`); or
        `"auto"` (the eigen and compact recipes): the fold prepared with both and the features of the larger
        exact log evidence fitted, as `kernel="auto"` (with it, every kernel and map; `DirectInfo.feature_map`
        says which). Not with a streamed fit. Predictions compute Nyström features in float64; under `jit` or
        `vmap` they are computed in the model's dtype, which can cost a float32 model digits (fit in float64).
      feature_budget: `None` (default): b is fixed (`num_frequencies`); seconds (the eigen and compact
        recipes): b is chosen by the data and the machine: from `2 num_frequencies` (by
        default `GROWTH_START_FREQUENCIES`, b = 1000) it doubles while the exact log evidence rises by at
        least `feature_gain` nats per training row a doubling and the next doubling is predicted to end
        within `feature_budget` seconds of feature work (the features, statistics and eigenbasis of every b
        tried; the GP step not counted; where a doubling would not fit, a last step grows b as far as the
        budget is predicted to allow: a prediction, which runs have overrun by up to 8%) and to fit in memory. `DirectInfo.feature_steps` lists every b tried
        (`docs/decisions/default-recipe.md#a-feature-budget-chosen-by-the-data`).
      feature_gain: with `feature_budget`: the least rise of the log evidence per training row that a
        doubling of b must bring for the next one to be tried (default `FEATURE_GAIN`).

    Example:
      >>> import kronvi
      >>> kronvi.DirectConfig()  # the defaults  # doctest: +NORMALIZE_WHITESPACE
      DirectConfig(recipe=Eigen(width=6.0, noise_span=3.0, starts=('prior',), support_rms='auto'),
        gp=GPOptions(points=None, restarts=4, restart_rule='screened', screen_points=300,
        degenerate_margin=2.0, precision='float64', gain_tol=0.1, refine_points=None), num_frequencies=None,
        frequency_sampling='iid', levels=15, noise_levels=15, method='cavi', max_iter=None, chunk_size=2048,
        max_noise_recentres=0, lengthscale=None, kernel='rbf', feature_map=None, feature_budget=None,
        feature_gain=0.002)
      >>> kronvi.DirectConfig(recipe=kronvi.Features(noise_cv=())).basis
      'features'
    """

    __slots__ = ()

    def __new__(
        cls,
        *,
        recipe: Eigen | Compact | Features | None = None,
        gp: GPOptions | None = None,
        num_frequencies: int | None = None,
        frequency_sampling: str = "iid",
        levels: int = 15,
        noise_levels: int = 15,
        method: str = "cavi",
        max_iter: int | None = None,
        chunk_size: int = 2048,
        max_noise_recentres: int = 0,
        lengthscale: float | None = None,
        kernel: str = "rbf",
        feature_map: str | None = None,
        feature_budget: float | None = None,
        feature_gain: float = FEATURE_GAIN,
        **legacy: Any,
    ) -> DirectConfig:
        recipe, gp = _from_legacy(recipe, gp, legacy, stacklevel=3)
        return super().__new__(
            cls, recipe, gp, num_frequencies, frequency_sampling, levels, noise_levels, method, max_iter,
            chunk_size, max_noise_recentres, lengthscale, kernel, feature_map, feature_budget, feature_gain,
        )  # fmt: skip

    def __reduce__(self):
        return (self._make, (tuple(self),))

    def as_flat_dict(self) -> dict[str, Any]:
        """Every setting under its old flat name (`basis`, `width`, ..., `gp_points`, ...), in the old order:
        a record of the config in plain values (for JSON), as `DirectConfig(basis=...)._asdict()` was; then
        `kernel`, `feature_map`, `feature_budget`, `feature_gain` and `gp_refine_points` where they are not the
        defaults (so that a record of the default reads as before, but for `gp_points`, `None` since the GP
        step's rows follow the training rows: `default_gp_points`)."""
        flat: dict[str, Any] = {"basis": self.basis}
        for name in _FLAT_ORDER[1:]:
            value = getattr(self, name)
            flat[name] = list(value) if isinstance(value, tuple) else value
        if self.kernel != "rbf":
            flat["kernel"] = self.kernel
        if self.feature_map is not None:
            flat["feature_map"] = self.feature_map
        if self.feature_budget is not None:
            flat["feature_budget"] = self.feature_budget
        if self.feature_gain != FEATURE_GAIN:
            flat["feature_gain"] = self.feature_gain
        if self.gp.refine_points is not None:
            flat["gp_refine_points"] = self.gp.refine_points
        return flat

    def _replace(self, **changes: Any) -> DirectConfig:
        legacy = {k: changes.pop(k) for k in list(changes) if k in LEGACY_FIELDS}
        if legacy:
            recipe, gp = _from_legacy(
                changes.pop("recipe", self.recipe), changes.pop("gp", self.gp), legacy, stacklevel=3,
                keep=True,
            )  # fmt: skip
            changes.update(recipe=recipe, gp=gp)
        return super()._replace(**changes)

    @property
    def basis(self) -> str:
        """The recipe's name: `"eigen"`, `"compact"` or `"features"`."""
        return type(self.recipe).name

    width = property(lambda self: self.recipe.width, doc="`recipe.width`.")
    noise_span = property(lambda self: self.recipe.noise_span, doc="`recipe.noise_span`.")
    starts = property(lambda self: self.recipe.starts, doc="`recipe.starts`.")
    noise_cv = property(
        lambda self: getattr(self.recipe, "noise_cv", ()), doc="`Features.noise_cv`; else ()."
    )
    cv_folds = property(lambda self: getattr(self.recipe, "cv_folds", 5), doc="`Features.cv_folds`.")
    cv_criterion = property(
        lambda self: getattr(self.recipe, "cv_criterion", "log_density"), doc="`Features.cv_criterion`."
    )
    cv_max_iter = property(
        lambda self: getattr(self.recipe, "cv_max_iter", 10), doc="`Features.cv_max_iter`."
    )
    compact_tol = property(lambda self: getattr(self.recipe, "tol", 0.1), doc="`Compact.tol`.")
    support_rms = property(
        lambda self: getattr(self.recipe, "support_rms", "auto"),
        doc="`Eigen.support_rms`, `Compact.support_rms`.",
    )
    compact_vectors = property(lambda self: getattr(self.recipe, "vectors", "half"), doc="`Compact.vectors`.")
    gp_points = property(lambda self: self.gp.points, doc="`gp.points`.")
    gp_restarts = property(lambda self: self.gp.restarts, doc="`gp.restarts`.")
    gp_restart_rule = property(lambda self: self.gp.restart_rule, doc="`gp.restart_rule`.")
    gp_screen_points = property(lambda self: self.gp.screen_points, doc="`gp.screen_points`.")
    gp_degenerate_margin = property(lambda self: self.gp.degenerate_margin, doc="`gp.degenerate_margin`.")
    gp_precision = property(lambda self: self.gp.precision, doc="`gp.precision`.")
    gp_gain_tol = property(lambda self: self.gp.gain_tol, doc="`gp.gain_tol`.")
    gp_refine_points = property(lambda self: self.gp.refine_points, doc="`gp.refine_points`.")


def _from_legacy(recipe, gp, legacy: dict, *, stacklevel: int, keep: bool = False):
    """`(recipe, gp)` of `DirectConfig(recipe=..., gp=..., **legacy)`: the old flat fields, with a
    `DeprecationWarning`, set on the recipe and `gp` (`keep`: those of `recipe`, as `_replace` does; else
    the defaults of `basis`'s recipe)."""
    unknown = [k for k in legacy if k not in LEGACY_FIELDS]
    if unknown:
        raise TypeError(f"DirectConfig got unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
    if recipe is not None and not isinstance(recipe, Eigen | Compact | Features):
        raise TypeError(f"`config.recipe` must be kronvi.Eigen, Compact or Features, got {recipe!r}")
    if gp is not None and not isinstance(gp, GPOptions):
        raise TypeError(f"`config.gp` must be kronvi.GPOptions, got {gp!r}")
    gp = GPOptions() if gp is None else gp
    if not legacy:
        return (Eigen() if recipe is None else recipe), gp
    if recipe is not None and not keep:
        raise TypeError(
            f"DirectConfig got `recipe` and the old fields {sorted(legacy)}: set them on the recipe"
        )
    warnings.warn(
        f"DirectConfig's fields {', '.join(sorted(legacy))} are deprecated and will be removed in the next "
        "release: set them on the recipe (recipe=kronvi.Eigen(width=...), kronvi.Compact(tol=...), "
        "kronvi.Features(noise_cv=...)) and the GP step's on gp=kronvi.GPOptions(...)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    basis = legacy.pop("basis", None if recipe is None else type(recipe).name)
    basis = "eigen" if basis is None else basis
    if basis not in RECIPES:
        raise ValueError(f"`config.basis` must be one of {BASES}, got {basis!r}")
    cls = RECIPES[basis]
    options = {}
    if recipe is not None and (type(recipe) is cls or {type(recipe), cls} == {Eigen, Compact}):
        options = {k: v for k, v in dataclasses.asdict(recipe).items() if k in _fields_of(cls)}
    for old, value in legacy.items():
        if old in _LEGACY_GP:
            gp = dataclasses.replace(gp, **{_LEGACY_GP[old]: value})
            continue
        option = _LEGACY_COMPACT.get(old, old)
        if option in _fields_of(cls):
            if value is not None or option in (
                "tol",
                "vectors",
                "cv_folds",
                "cv_criterion",
                "cv_max_iter",
                "support_rms",
            ):
                options[option] = value
            else:
                options.pop(option, None)  # None: the recipe's default
        elif value is not None and not _is_inert(option, value):
            owner = "compact" if old in _LEGACY_COMPACT else "eigen" if old == "support_rms" else "features"
            if old == "noise_cv":
                raise RecipeOptionError(
                    f"`config.noise_cv` applies to basis='features' only: with basis={basis!r} the noise grid is "
                    "centred on the evidence maximizer (set noise_cv=() or basis='features')"
                )
            raise RecipeOptionError(
                f"`config.{old}` applies to basis={owner!r} only (`kronvi.{RECIPES[owner].__name__}`), not to "
                f"basis={basis!r}"
            )
    return cls(**options), gp


def _inert(option: str) -> Any:
    """The value of an option a recipe does not have, as the old `DirectConfig` held it (ignored)."""
    return {"noise_cv": (), "cv_folds": 5, "cv_criterion": "log_density", "cv_max_iter": 10, "tol": 0.1,
            "vectors": "half", "support_rms": "auto"}[option]  # fmt: skip


def _is_inert(option: str, value: Any) -> bool:
    """Whether `value` of an option the recipe does not have is its inert default, today's or (the bound's
    20 before `"auto"`, as older records hold it) an earlier one."""
    return value == _inert(option) or (option == "support_rms" and value == SUPPORT_RMS)


LARGE_DATA_ROWS = 20_000
# the default map is Nyström from this many training rows up to (not including) `NYSTROM_MAX_ROWS`
NYSTROM_MIN_ROWS = 4_000
NYSTROM_MAX_ROWS = 100_000
# the off-support bound of `support_rms="auto"` with random Fourier features
SUPPORT_RMS = 20.0


def default_feature_map(num_rows: int, basis: str = "eigen") -> str:
    """The feature map of `DirectConfig(feature_map=None)` (the default) for `num_rows` concrete training rows:
    `"nystrom"` for the eigen and compact recipes from `NYSTROM_MIN_ROWS` (4,000) rows, where the default's
    landmarks are at most half the rows, up to `NYSTROM_MAX_ROWS` (100,000), where landmarks among the rows
    beat random frequencies at a cost a fold can afford; `"fourier"` below and above, and for the paper's
    recipe (`basis="features"`). Rows under `jit` or `vmap` (traced) always get `"fourier"`: Nyström
    landmarks are drawn on the host (`docs/decisions/default-recipe.md#nystrom-features`)."""
    if basis != "features" and NYSTROM_MIN_ROWS <= int(num_rows) < NYSTROM_MAX_ROWS:
        return "nystrom"
    return "fourier"


def support_rms_for(support_rms: float | str | None, feature_map: str) -> float | None:
    """The off-support bound (`Eigen.support_rms`) a fit with `feature_map` (`"fourier"` or `"nystrom"`)
    applies: `"auto"` gives `SUPPORT_RMS` (20) for random Fourier features, whose norm is 1 everywhere so that
    a row far from the training inputs projects onto weakly determined directions at random, and `None` for
    Nyström features, which vanish away from every landmark so that the plain predictive mean returns to one
    constant there (`docs/decisions/default-recipe.md#nystrom-features`); a number or `None` is kept."""
    if support_rms == "auto":
        return None if feature_map == "nystrom" else SUPPORT_RMS
    return None if support_rms is None else float(support_rms)


def default_num_frequencies(num_rows: int, feature_map: str | None = None) -> int:
    """The default recipe's `num_frequencies` (b = 2 `num_frequencies` features) for `num_rows` training rows
    and `feature_map` (`None`: `default_feature_map(num_rows)`): 1000 (b = 2000) below `LARGE_DATA_ROWS`
    (20,000) rows; from there, where more features pay for their $O(nb^2 + b^3)$ cost, 2000 (b = 4000)
    random frequencies or 3000 (b = 6000) Nyström landmarks
    (`docs/decisions/default-recipe.md#the-number-of-features`)."""
    if int(num_rows) < LARGE_DATA_ROWS:
        return 1000
    feature_map = default_feature_map(num_rows) if feature_map is None else feature_map
    return 3000 if feature_map == "nystrom" else 2000


def default_gp_points(num_rows: int) -> int:
    """The GP step's rows of `GPOptions(points=None)` (the default) for `num_rows` training rows: 1000 below
    `LARGE_DATA_ROWS` (20,000), 2000 from there, where a GP on 1,000 rows chose lengthscales too long for the
    features the fold can afford and 2,000 rows cost seconds of a minute's fold
    (`docs/decisions/gp-step.md#the-gp-steps-rows`)."""
    return 2000 if int(num_rows) >= LARGE_DATA_ROWS else 1000


def default_gp_refine_points(num_rows: int) -> int:
    """The rows of the GP step's warm refinement (`GPOptions(refine_points=None)`, with `points=None`) for
    `num_rows` training rows: 2000 from `NYSTROM_MIN_ROWS` (4,000) to below `LARGE_DATA_ROWS` (20,000) rows, where
    the search runs on 1,000; 0 (no refinement) below and from there, where the search runs on 2,000
    (`docs/decisions/gp-step.md#a-warm-refinement-on-more-rows`).

    Example:
      >>> import kronvi
      >>> [kronvi.pipeline.default_gp_refine_points(n) for n in (3_999, 4_000, 19_999, 20_000)]
      [0, 2000, 2000, 0]
    """
    return 2000 if NYSTROM_MIN_ROWS <= int(num_rows) < LARGE_DATA_ROWS else 0


def _resolve_map(config: DirectConfig, num_rows: int, *, traced: bool = False) -> DirectConfig:
    """`config` with `feature_map=None` (the default) replaced by `default_feature_map` of the rows (`"fourier"`
    for traced rows)."""
    if config.feature_map is not None:
        return config
    chosen = "fourier" if traced else default_feature_map(num_rows, config.basis)
    return config._replace(feature_map=chosen)


def _num_frequencies(config, num_rows: int) -> int:
    """`config.num_frequencies`; unset, `GROWTH_START_FREQUENCIES` when b grows (`config.feature_budget`), else
    `default_num_frequencies(num_rows, config.feature_map)`."""
    if config.num_frequencies is not None:
        return int(config.num_frequencies)
    if config.feature_budget is not None:
        return GROWTH_START_FREQUENCIES
    return default_num_frequencies(num_rows, _resolve_map(config, num_rows).feature_map)


class Prediction(NamedTuple):
    """The predictive distribution of new targets at new inputs (`kronvi.predict`), in the targets' units.

    Attributes:
      mean: `(N,)` exact predictive means.
      variance: `(N,)` exact predictive variances of a new target (the noise included).
    """

    mean: Any
    variance: Any


class SupportBound(NamedTuple):
    r"""How far along each of a model's feature columns the training rows reach, for the predictive mean of
    rows beyond them (`DirectConfig.support_rms`).

    With the model's features $f(x)$ (`fold_features`), the predictive mean is that of the posterior plus
    $\delta(x) = \sum_j (\mathrm{clip}(f_j(x), -\beta_j, \beta_j) - f_j(x))\,\bar w_j
    + \mathrm{clip}(c(x), -\beta_c, \beta_c) - c(x)$, $c(x) = f(x)^\top a$. For the eigen recipe $\beta_j$ is
    `support_rms` times the training rows' RMS coordinate $\sqrt{\lambda_j/n}$ and $\bar w_j$ the posterior
    mean of weight $j$ (no $c$), so the mean is the posterior's at the clipped coordinates. For the compact
    recipe the same holds for its kept directions, and $c$ is the complement's share of the mean,
    $\phi^\top m_C$ ($m_C = m - V_K\bar u_K$), bounded by `support_rms` times its training RMS
    $\sqrt{\sum_{j \in C}\lambda_j\bar u_j^2/n}$. $\delta = 0$ for every row within the bounds, the
    training rows among them (bar the few beyond `support_rms` RMS in some direction).

    Attributes:
      bound: `(p,)` $\beta_j$, one per feature column (`inf`: unbounded).
      weight: `(p,)` $\bar w_j$.
      mix: `(p,)` $a$, or `None` (no $c$).
      mix_bound: `()` $\beta_c$, or `None`.
    """

    bound: jax.Array
    weight: jax.Array
    mix: jax.Array | None = None
    mix_bound: jax.Array | None = None


def support_shift(support: SupportBound | None, Phi: ArrayLike) -> jax.Array:
    r"""$\delta$ of `SupportBound` for features `Phi` `(N, p)`: what `predict` adds to the posterior's
    predictive mean, in the units of the fit (0 when `support` is `None`).

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> support = kronvi.pipeline.SupportBound(jnp.array([1.0, jnp.inf]), jnp.array([2.0, 3.0]))
      >>> kronvi.pipeline.support_shift(support, jnp.array([[0.5, 9.0], [4.0, 9.0]])).tolist()  # (1 - 4) x 2
      [0.0, -6.0]
    """
    Phi = jnp.asarray(Phi)
    if support is None:
        return jnp.zeros(Phi.shape[:1], Phi.dtype)
    bound, weight = support.bound.astype(Phi.dtype), support.weight.astype(Phi.dtype)
    shift = matmul(jnp.clip(Phi, -bound, bound) - Phi, weight)
    if support.mix is not None:
        c = matmul(Phi, support.mix.astype(Phi.dtype))
        beta = jnp.asarray(support.mix_bound, Phi.dtype)
        shift = shift + jnp.clip(c, -beta, beta) - c
    return shift


@jax.jit
def _shifted_targets(y, support, Phi):
    """`y - support_shift(support, Phi)` in one program."""
    return y - support_shift(support, Phi)


class FittedDirect(NamedTuple):
    r"""A fitted DIRECT regression model (`kronvi.fit_direct`), of every recipe: it predicts on raw inputs in
    the targets' units.

    `model.predict(X)` (or `kronvi.predict(model, X)`, which also runs under `jit` and `vmap`) is the exact
    predictive mean and variance, `model.log_density(X, y)` the exact log predictive density. Saved whole by
    `kronvi.save_model`.

    Attributes:
      standardizer: `Standardizer` of the training inputs (float64 NumPy arrays when they were concrete:
        new inputs are standardized in float64, then cast to the working dtype).
      features: `RandomFourierFeatures` (or `NystromFeatures`, `DirectConfig.feature_map`), the feature map of
        the standardized inputs (with `basis`, its `offset` centres the features on the training rows: an intercept outside the prior).
      y_offset: `()` the training targets' mean (a float64 NumPy scalar for concrete targets).
      prior_w: `DiscretePrior` `(b, m)` over the weights (in the eigenbasis when `basis` is set).
      prior_noise: `DiscretePrior` `(1, m_sigma)` over the noise variance.
      q_w: `MeanField` `(b, m)`, the posterior over the weights.
      q_noise: `MeanField` `(1, m_sigma)`, the posterior over the noise variance.
      hyper: `GPHyperparameters` the features were drawn for.
      basis: `Eigenbasis` rotating the features (`DirectConfig.basis` `"eigen"`), `CompactBasis`, the
        compact model's feature map (`"compact"`), else `None`.
      y_scale: `()` the unit of the fitted targets: the model is fitted to `(y - y_offset) / y_scale`. It is 1
        (the targets' own units) unless their standard deviation lies outside $2^{\pm 16}$; then it is the power
        of two nearest it (a scaling that rounds nothing), so that no statistic overflows or underflows. The
        priors, posteriors and `hyper` are in the fit's units; `predict` and `log_density` return the targets'.
      support: `SupportBound` of the eigen and compact recipes' predictive mean (`DirectConfig.support_rms`),
        else `None` (also with Nyström features, by default: `support_rms_for`). Models saved before it load
        with `None`: the plain posterior predictive.

    `fold_features(model, X)` maps raw inputs to the features that `q_w` and `prior_w` belong to.
    """

    standardizer: Standardizer
    features: RandomFourierFeatures | NystromFeatures
    y_offset: jax.Array
    prior_w: DiscretePrior
    prior_noise: DiscretePrior
    q_w: MeanField
    q_noise: MeanField
    hyper: GPHyperparameters
    basis: Eigenbasis | CompactBasis | None = None
    y_scale: Any = 1.0
    support: SupportBound | None = None

    def predict(self, X: ArrayLike, *, chunk_size: int = 4096) -> Prediction:
        """`kronvi.predict(self, X, chunk_size=chunk_size)`: the exact predictive mean and variance."""
        return predict(self, X, chunk_size=chunk_size)

    def log_density(self, X: ArrayLike, y: ArrayLike, *, rtol: float | str | None = "auto") -> Any:
        """`kronvi.log_density(self, X, y, rtol=rtol)`: the exact log predictive density of each row."""
        return log_density(self, X, y, rtol=rtol)

    @property
    def sparsity(self) -> float:
        """The fraction of the stored weights that are zero: the expected fraction of zero codes in a posterior
        sample for the `"features"` recipe (whose grids have a zero level), 0 for the eigen and compact
        recipes, whose weights are stored densely."""
        if self.basis is not None:
            return 0.0
        return float(expected_sparsity(self.q_w, self.prior_w))


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
    gp: GPFitInfo | None  # the GP hyperparameter fit (None with a fixed `config.lengthscale`)
    noise_recentres: int  # how many times the noise grid was recentred (`config.max_noise_recentres`)
    noise_span: float  # the noise grid used: s2 x [1/span, span]; 1 = fixed at the GP estimate
    cv_scores: object = None  # the inner-fold scores of every span with `config.noise_cv`, else None
    kernel: str = "rbf"  # the kernel of the features: `config.kernel`, or the one "auto" chose
    feature_map: str = "fourier"  # the map of the features: `config.feature_map`, or the one "auto" chose
    # `config.feature_budget`: every number of features tried, in order; else ()
    feature_steps: tuple[FeatureStep, ...] = ()

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
    `kronvi.fitting.RegressionFit`'s fields, then the noise grid it ended on."""

    q_w: MeanField
    q_noise: MeanField
    info: FitInfo
    prior_noise: DiscretePrior  # the last (recentred) noise grid
    num_recentres: int


class FeatureStep(NamedTuple):
    """One number of features that `DirectConfig.feature_budget` tried (`DirectInfo.feature_steps`)."""

    num_features: int  # b
    # the exact log evidence of the b features at their evidence-optimal prior scale and noise variance, in
    # the standardized targets' units (`PreparedFold.log_evidence`)
    log_evidence: float
    seconds: float  # its features, statistics and eigenbasis (and, at the first b, the choices of "auto")


class PreparedFold(NamedTuple):
    """A training set prepared for fitting (`prepare_fold`): everything before the noise grid's choice."""

    standardizer: Standardizer  # from the training rows
    y_offset: jax.Array  # the training targets' mean (a float64 NumPy scalar for concrete targets)
    X: jax.Array  # standardized training inputs `(n, d)`
    y: jax.Array  # centred training targets `(n,)`
    hyper: GPHyperparameters
    gp_info: GPFitInfo
    features: RandomFourierFeatures | NystromFeatures
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
    y_scale: Any = 1.0  # the unit of `y`: the training targets are `(y_raw - y_offset) / y_scale`
    kernel: str = "rbf"  # the kernel of `features` and `hyper` (`config.kernel`, or its choice for "auto")
    # The eigen and compact recipes: the exact log evidence of the features at `prior_scale` and
    # `noise_variance` (in the units of `y`), which `config.kernel="auto"` compares; else None.
    log_evidence: Any = None
    # `config.feature_budget`: every b tried, in order (the kept one has the largest evidence); else ()
    feature_steps: tuple[FeatureStep, ...] = ()


def _block(x):
    return jax.block_until_ready(x)


def noise_prior_for_span(noise_variance: ArrayLike, span: float, levels: int) -> DiscretePrior:
    """The noise grid `noise_variance x [1/span, span]` with `levels` levels; `span == 1`: one level,
    the noise fixed at `noise_variance`."""
    if float(span) == 1.0:
        return noise_prior(noise_variance, levels=1)
    return noise_prior(noise_variance, levels=levels, span=span)


def _noise_grid(noise_variance: jax.Array, span: float, levels: int) -> DiscretePrior:
    """`noise_prior_for_span` of a noise variance this module computed (a positive finite scalar array)
    and checked `span` and `levels`: only the grid is checked (`noise_grid`)."""
    if float(span) == 1.0:
        return noise_grid(noise_variance, levels=1, span=10.0)
    return noise_grid(noise_variance, levels=levels, span=span)


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
    `kronvi.fitting.select_prior` prefers on the inner folds `cv_stats = (cv_train, cv_test)`.
    Returns `(span, prior_noise, scores)`."""
    cands = [(prior_w, noise_prior_for_span(noise_variance, s, levels)) for s in spans]
    best, scores = select_prior(*cv_stats, cands, criterion=criterion, max_iter=max_iter)
    return float(spans[best]), cands[best][1], scores


def resolve_config(config: DirectConfig | None = None) -> DirectConfig:
    """`config` (default `DirectConfig()`), checked to be a `DirectConfig`. Every option of a config is set
    (its recipe's, `Eigen`, `Compact` or `Features`, have no `None`), so nothing is left to resolve; the
    old `None` fields of `DirectConfig(basis=..., width=None, ...)` take the recipe's default when it is built.

    Example:
      >>> from kronvi.pipeline import DirectConfig, Features, resolve_config
      >>> c = resolve_config(DirectConfig(recipe=Features()))
      >>> c.width, c.noise_span, c.noise_cv, c.starts
      (3.0, 10.0, (10.0, 3.0, 1.0), ('prior', 'gaussian'))
    """
    config = DirectConfig() if config is None else config
    if not isinstance(config, DirectConfig):
        raise TypeError(f"`config` must be a DirectConfig, got {type(config).__name__}")
    return config


def _check_config(config: DirectConfig | None) -> DirectConfig:
    """Validates every field before any compute; errors name the field (`config.<field>`)."""
    config = resolve_config(config)
    if config.basis != "features" and config.noise_cv:
        raise ValueError(
            f"`config.noise_cv` applies to basis='features' only: with basis={config.basis!r} the noise grid is "
            "centred on the evidence maximizer (set noise_cv=() or basis='features')"
        )
    check_nonnegative_number(config.gp_gain_tol, "config.gp_gain_tol")
    if config.lengthscale is not None:
        check_positive_number(config.lengthscale, "config.lengthscale")
    if not float(config.compact_tol) >= 0:
        raise ValueError(f"`config.compact_tol` must be >= 0, got {config.compact_tol!r}")
    if config.compact_vectors not in ("half", "full"):
        raise ValueError(f"`config.compact_vectors` must be 'half' or 'full', got {config.compact_vectors!r}")
    ints = [
        ("levels", 2), ("noise_levels", 1), ("gp_points", 2), ("gp_restarts", 1),
        ("chunk_size", 1), ("max_noise_recentres", 0), ("cv_max_iter", 1), ("gp_screen_points", 2),
        ("max_iter", 1), ("num_frequencies", 1), ("gp_refine_points", 0),
    ]  # fmt: skip
    check_ints({f"config.{f}": (getattr(config, f), m) for f, m in ints if getattr(config, f) is not None})
    if config.frequency_sampling not in SAMPLINGS:
        raise ValueError(
            f"`config.frequency_sampling` must be one of {SAMPLINGS}, got {config.frequency_sampling!r}"
        )
    if config.kernel not in KERNEL_CHOICES:
        raise ValueError(f"`config.kernel` must be one of {KERNEL_CHOICES}, got {config.kernel!r}")
    if config.feature_map is not None and config.feature_map not in FEATURE_MAP_CHOICES:
        raise ValueError(
            f"`config.feature_map` must be None or one of {FEATURE_MAP_CHOICES}, got {config.feature_map!r}"
        )
    if config.feature_map == "auto" and config.basis == "features":
        raise ValueError(
            "`config.feature_map='auto'` compares the maps by the evidence that the eigen and compact recipes "
            "compute: with basis='features' name the map (e.g. feature_map='fourier')"
        )
    if config.feature_budget is not None:
        check_positive_number(config.feature_budget, "config.feature_budget")
        if config.basis == "features":
            raise ValueError(
                "`config.feature_budget` grows b by the exact evidence that the eigen and compact recipes compute: "
                "with basis='features' set `num_frequencies` (and feature_budget=None)"
            )
    gain = config.feature_gain
    if isinstance(gain, bool) or not isinstance(gain, numbers.Real) or not 0 <= float(gain) < np.inf:
        raise ValueError(f"`config.feature_gain` must be a finite number >= 0, got {gain!r}")
    if config.kernel == "auto" and config.basis == "features":
        raise ValueError(
            "`config.kernel='auto'` compares the kernels by the evidence that the eigen and compact recipes "
            "compute: with basis='features' name the kernel (e.g. kernel='rbf')"
        )
    if config.gp_restart_rule not in ("all", "screened"):
        raise ValueError(
            f"`config.gp_restart_rule` must be 'all' or 'screened', got {config.gp_restart_rule!r}"
        )
    if config.gp_precision not in GP_PRECISIONS:
        choices = " or ".join(map(repr, GP_PRECISIONS))
        raise ValueError(f"`config.gp_precision` must be {choices}, got {config.gp_precision!r}")
    if not _number(config.width) > 0:
        raise ValueError(f"`config.width` must be positive, got {config.width!r}")
    if not _number(config.noise_span) >= 1.0:
        raise ValueError(
            f"`config.noise_span` must be >= 1 (1 fixes the noise variance), got {config.noise_span!r}"
        )
    if config.method not in METHODS:
        raise ValueError(f"`config.method` must be one of {METHODS}, got {config.method!r}")
    if config.support_rms not in (None, "auto") and not 0 < _number(config.support_rms) < float("inf"):
        raise ValueError(
            f"`config.support_rms` must be a positive number, 'auto' or None, got {config.support_rms!r}"
        )
    if not config.starts or any(s not in ("prior", "gaussian") for s in config.starts):
        raise ValueError(f"`config.starts` must name 'prior' and/or 'gaussian', got {config.starts!r}")
    if config.noise_cv:
        if config.cv_criterion not in CRITERIA:
            raise ValueError(f"`cv_criterion` must be one of {CRITERIA}, got {config.cv_criterion!r}")
        if any(not float(s) >= 1.0 for s in config.noise_cv):
            raise ValueError(f"`noise_cv` spans must be >= 1 (1 = fixed noise), got {config.noise_cv}")
        check_int(config.cv_folds, "cv_folds", 2)
    return config


def _number(x) -> float:
    """`x` as a float if it is a real number (not a bool or a string), else NaN (which every range refuses)."""
    return float(x) if isinstance(x, numbers.Real) and not isinstance(x, bool) else float("nan")


def prepare_fold(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    config: DirectConfig | None = None,
    *,
    dtype: DTypeLike = jnp.float32,
    gp: tuple[GPHyperparameters, GPFitInfo] | None = None,
    progress: bool | Callable[[int, int, dict], None] | None = None,
    progress_every: int | None = None,
) -> PreparedFold:
    """Prepares raw training rows for a DIRECT fit: standardizer and centred targets from these rows, GP
    hyperparameters on at most `config.gp_points` of them (by default `default_gp_points` of the rows, refined
    on `default_gp_refine_points` from 4,000 rows),
    `config.num_frequencies` (by default
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
      progress: `None` (default: quiet), `True` (a progress bar or plain lines on `stderr`) or a callable
        `progress(step, total, metrics)`: `step` training rows of `total` have their statistics done,
        `metrics["stage"]` names the stage running (`"gp"`, `"statistics"`, `"eigen"`, `"fit"`) and, during
        the statistics pass over many rows, `metrics["rows_per_second"]` its speed.
      progress_every: rows per report of the statistics pass (default: a few seconds' work, 4,096 to 65,536
        rows by the number of features).

    Returns:
      `PreparedFold`.
    """
    check_key(key)
    dtype = check_working_dtype(dtype)
    progress = _reporter(progress, progress_every)
    return _prepare_fold(key, X, y, _check_config(config), dtype=dtype, gp=gp, progress=progress)


def _prepare_fold(key, X, y, config: DirectConfig, *, dtype, gp, progress=None) -> PreparedFold:
    """`prepare_fold` with a checked, resolved `config` and `progress` a callable or None."""
    config = _resolve_map(config, np.shape(X)[0], traced=_traced((X, y)))
    if config.feature_budget is not None:
        return _prepare_grown(key, X, y, config, dtype=dtype, gp=gp, progress=progress)
    if config.kernel == "auto" or config.feature_map == "auto":
        return _prepare_best_kernel(key, X, y, config, dtype=dtype, gp=gp, progress=progress)
    k_gp, k_rff, k_fit = _split3(key)
    t0 = time.perf_counter()
    check_fit_memory(np.shape(X)[0], config, dtype=dtype)
    if _traced((X, y)):  # inside a jit or vmap: standardize in the working dtype
        X = jnp.asarray(X, dtype)
        std = fit_standardizer(X)
        Xs = standardize(std, X)
        y_offset, yc = _centre(y, dtype)
        y_scale: Any = 1.0
        gp_rows = None
    else:  # concrete: moments, offsets and units in float64 on the host, then the cast
        X64, y64 = _host_xy(X, y)
        std = fit_standardizer_host(X64)
        Xs = to_device(standardize_host(std, X64, dtype))
        y_offset, y_scale = target_moments(y64)
        with np.errstate(over="ignore"):  # beyond the dtype's range: inf, which the GP's checks name
            yc = to_device(((y64 - y_offset) / y_scale).astype(dtype))
        # the GP sees the float64 rows, whatever the working dtype (gp_precision="float64")
        gp_rows = standardize_host(std, X64, np.float64), (y64 - y_offset) / y_scale
    _stage(progress, "gp", 0, Xs.shape[0])
    hyper, gp_info = _hyperparameters(k_gp, Xs, yc, config, gp, gp_rows)
    del gp_rows
    t1 = time.perf_counter()
    _stage(progress, "statistics", 0, Xs.shape[0])
    num_frequencies = _num_frequencies(config, Xs.shape[0])
    feats = _draw_features(
        k_rff, hyper, num_frequencies, config, fitted=gp is None and gp_info is not None, kernel=config.kernel,
        X=Xs,
    )  # fmt: skip
    fmap = functools.partial(feature_map_unchecked, feats)
    cv_stats = None
    prior_scale = _sqrt(hyper.signal_variance)
    basis, evidence = None, None
    if config.basis != "features":
        feats = _centred(feats, Xs, config)
        stats, basis, prior_w, prior_scale, s2, evidence = _eigen_setup(
            feats, Xs, yc, prior_scale, hyper.noise_variance, config, progress
        )
    else:
        if config.noise_cv:
            stats, cv_stats = inner_fold_stats(
                jax.random.fold_in(k_fit, 1), fmap, Xs, yc, config.cv_folds, chunk_size=config.chunk_size
            )
        else:
            stats = _stats_in_blocks(fmap, Xs, yc, chunk_size=config.chunk_size, progress=progress)
        s2 = hyper.noise_variance
        prior_w = _features_grid(num_features(feats), prior_scale, config)
    _block((stats, prior_w))
    t2 = time.perf_counter()
    return PreparedFold(
        std, y_offset, Xs, yc, hyper, gp_info, feats, stats, cv_stats, prior_w, k_fit, t1 - t0, t2 - t1,
        basis, s2, prior_scale, y_scale, config.kernel, evidence,
    )  # fmt: skip


def num_fit_features(num_rows: int, config: DirectConfig | None = None) -> int:
    """b, the features a fit of `num_rows` training rows with `config` starts from: `2 num_frequencies` (by
    default `default_num_frequencies` of the rows and their map), Nyström landmarks at most one per row, the
    larger of the two maps' with `feature_map="auto"` (which fits each), `2 GROWTH_START_FREQUENCIES` with
    `feature_budget` (b grows from there).

    Example:
      >>> import kronvi
      >>> kronvi.pipeline.num_fit_features(1000), kronvi.pipeline.num_fit_features(30000)
      (2000, 6000)
      >>> kronvi.pipeline.num_fit_features(1500, kronvi.DirectConfig(feature_map="nystrom"))
      1500
    """
    config = _resolve_map(resolve_config(config), num_rows)
    maps = FEATURE_MAPS if config.feature_map == "auto" else (config.feature_map,)  # "auto" fits each
    b = 0
    for feature_map in maps:
        b_map = 2 * _num_frequencies(config._replace(feature_map=feature_map), num_rows)
        b = max(b, min(b_map, int(num_rows)) if feature_map == "nystrom" else b_map)  # at most every row a landmark
    return b


def check_fit_memory(
    num_rows: int,
    config: DirectConfig,
    *,
    dtype: DTypeLike = jnp.float32,
    argument: str = "config.num_frequencies",
) -> None:
    """Raises a `MemoryError` (also a `ValueError`) naming `argument` before any compute when the peak of a
    fit of `num_rows` rows with `config`'s features would exceed the memory available (or the limit in the
    `KRONVI_MEMORY_LIMIT` environment variable, e.g. `8G`, `none` for no check). `fit_direct` calls it."""
    config = resolve_config(config)
    b = num_fit_features(num_rows, config)
    check_memory(
        regression_fit_bytes(num_rows, b, dtype=dtype, chunk_size=config.chunk_size),
        what=f"a fit with b = {b} features on {num_rows} rows", argument=argument,
    )  # fmt: skip


def _draw_features(
    key, hyper, num_frequencies, config, *, fitted: bool, kernel: str, X=None
) -> RandomFourierFeatures | NystromFeatures:
    """`rff_init` of `hyper`'s lengthscales for `kernel`; unchecked when the GP step of this call `fitted` them
    (inside its bounds), checked when they come from the caller (`gp=`) or `config.lengthscale`. With
    `config.feature_map="nystrom"`, `nystrom_init` on `2 num_frequencies` of the standardized rows `X` (all of
    them when there are fewer)."""
    if config.feature_map == "nystrom":
        if X is None or _traced(X):
            raise ValueError(
                "`config.feature_map='nystrom'` draws its landmarks from the training rows on the host: it needs "
                "concrete rows (not traced ones, nor a stream); use feature_map='fourier' there"
            )
        n = X.shape[0]
        return nystrom_init(key, np.asarray(X), hyper.lengthscales, min(2 * num_frequencies, n), kernel=kernel)
    draw = rff_init_unchecked if fitted else rff_init
    return draw(key, hyper.lengthscales, num_frequencies, sampling=config.frequency_sampling, kernel=kernel)


def _features_grid(b: int, prior_scale, config: DirectConfig) -> DiscretePrior:
    """The `"features"` recipe's weight grid: `levels` values on ±`config.width` prior sds, a zero among them."""
    with errors_name("config.width", config.width):
        return gaussian_grid(b, prior_scale, levels=config.levels, width=config.width)


def _traced(tree) -> bool:
    return any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(tree))


@jax.jit
def _split3(key):
    """`jax.random.split(key, 3)` as three keys in one program (unpacking the split is another)."""
    keys = jax.random.split(key, 3)
    return keys[0], keys[1], keys[2]


def _sqrt(x):
    """`jnp.sqrt(x)`; of a concrete array by NumPy (correctly rounded in both): no program to compile."""
    return jnp.sqrt(x) if _traced(x) else to_device(np.sqrt(np.asarray(x)))


def _host_xy(X, y) -> tuple[np.ndarray, np.ndarray]:
    """Concrete training rows as float64 NumPy arrays, checked (`check_training_rows`)."""
    return check_training_rows(X, y)


def _hyperparameters(k_gp, Xs, yc, config, gp, gp_rows=None):
    """`(hyper, gp_info)`: the GP step's for `config.kernel` (or `gp`'s), or those of `config.lengthscale`
    (`gp_info` None). `gp_rows`: the GP step's `(X, y)` if not `(Xs, yc)` (their float64 values)."""
    if config.lengthscale is not None:
        hyper, gp_info = _fixed_hyperparameters(config.lengthscale, Xs, yc), None
    elif gp is None:
        n = Xs.shape[0]
        points = default_gp_points(n) if config.gp_points is None else config.gp_points
        rows = gp_rows or (Xs, yc)
        options = dict(
            degenerate_margin=config.gp_degenerate_margin, precision=config.gp_precision,
            gain_tol=config.gp_gain_tol, kernel=config.kernel,
        )  # fmt: skip
        hyper, gp_info = fit_gp_hyperparameters(
            k_gp, *rows, num_starts=config.gp_restarts, num_points=points, restarts=config.gp_restart_rule,
            screen_points=config.gp_screen_points, **options,
        )  # fmt: skip
        refine = min(_gp_refine_rows(config, n), n)
        # more rows than the search's; concrete rows and key (the search's result is read on the host)
        if refine > min(points, n) and not _traced((k_gp, Xs, yc)):
            hyper, gp_info = _refined(jax.random.fold_in(k_gp, 1), rows, hyper, gp_info, refine, options)
    else:
        hyper, gp_info = gp
    hyper = _block(hyper)
    # the GP step answers in float64 from its float64 rows, which stays float64 under `jax.enable_x64`
    if any(jnp.result_type(a) != Xs.dtype for a in jax.tree.leaves(hyper)):
        hyper = _cast(hyper, Xs.dtype)
    return hyper, gp_info


def _gp_refine_rows(config: DirectConfig, num_rows: int) -> int:
    """The rows of the GP step's warm refinement for `num_rows` training rows with a checked `config`: its
    `gp.refine_points`, or by default `default_gp_refine_points` when `gp.points` is the default too (an explicit
    `points` is kept as it is); 0: none."""
    if config.gp_refine_points is not None:
        return int(config.gp_refine_points)
    return default_gp_refine_points(num_rows) if config.gp_points is None else 0


def _refined(key, rows, hyper, search: GPFitInfo, points: int, options: dict):
    """`(hyper, info)`: `hyper`, the search's optimum, refined by one start on `points` rows drawn with `key`;
    its `GPFitInfo` with the search's as `screened`. The search's optimum and info are kept where the refinement
    failed numerically or ended degenerate (explaining the data as noise) where the search's choice did not. A
    refinement whose noise ends at its lower bound is kept: on these rows that is a near-noiseless function
    (`docs/decisions/gp-step.md#a-warm-refinement-on-more-rows`)."""
    init = jax.tree.map(lambda a: np.asarray(a)[None], jax.device_get(hyper))  # one start: a leading axis
    try:
        refined, info = fit_gp_hyperparameters(key, *rows, num_points=points, init=init, restarts="all", **options)
    except FloatingPointError:  # the one start failed numerically
        return hyper, search
    # read on the host and indexed by NumPy: no eager JAX operation (a program to compile) on the fit's way
    lmls, degenerate, was_degenerate = jax.device_get(
        (info.log_marginal_likelihoods, info.degenerate, search.degenerate)
    )
    if not np.isfinite(lmls[0]) or (degenerate and not was_degenerate):
        return hyper, search
    return refined, info._replace(screened=search)


def _prepare_best_kernel(key, X, y, config: DirectConfig, *, dtype, gp, progress) -> PreparedFold:
    """`config.kernel="auto"` and/or `config.feature_map="auto"`: the fold prepared with each kernel of
    `KERNELS` and/or each map of `FEATURE_MAPS` (the same key: the same GP subsample and feature draws; one GP
    step per kernel), and the one whose features have the largest exact log evidence kept
    (`PreparedFold.log_evidence`; the squared exponential and Fourier features on a tie); its seconds are all
    the preparations'."""
    best, seconds = _best_kernel_fold(key, X, y, config, dtype=dtype, gp=gp, progress=progress)
    return best._replace(init_seconds=seconds[0], stats_seconds=seconds[1])


def _best_kernel_fold(key, X, y, config, *, dtype, gp, progress):
    """`_prepare_best_kernel`'s loop: `(best, [init seconds, stats seconds])`, the best fold with its own
    seconds and the sums over every preparation."""
    if gp is not None and config.kernel == "auto":
        raise ValueError(
            "`gp` gives hyperparameters without their kernel, which `config.kernel='auto'` would choose: "
            "name the kernel they belong to in `config.kernel`"
        )
    if _traced((X, y)):
        raise ValueError(
            "`config.kernel='auto'` and `config.feature_map='auto'` compare the evidence on the host: they need "
            "concrete rows, not traced ones (inside `jit` or `vmap`, name the kernel and the map)"
        )
    kernels = KERNELS if config.kernel == "auto" else (config.kernel,)
    maps = FEATURE_MAPS if config.feature_map == "auto" else (config.feature_map,)
    best, seconds = None, [0.0, 0.0]
    for kernel in kernels:
        hyper = gp
        for feature_map in maps:
            fold = _prepare_fold(
                key, X, y, config._replace(kernel=kernel, feature_map=feature_map), dtype=dtype, gp=hyper,
                progress=progress,
            )  # fmt: skip
            hyper = hyper or (fold.hyper, fold.gp_info)  # the same GP step for the other map
            seconds = [seconds[0] + fold.init_seconds, seconds[1] + fold.stats_seconds]
            if best is None or fold.log_evidence > best.log_evidence:
                best = fold
            del fold
    assert best is not None
    return best, seconds


def _map_name(features) -> str:
    return "nystrom" if isinstance(features, NystromFeatures) else "fourier"


def _prepare_grown(key, X, y, config: DirectConfig, *, dtype, gp, progress) -> PreparedFold:
    """`config.feature_budget`: the fold prepared at `2 num_frequencies` features (`_num_frequencies`; with
    `kernel`/`feature_map` "auto" choosing there), then again with more (the same GP step, kernel, map and
    key: b doubled, or as the last step the largest growth predicted to fit the budget,
    `_next_num_frequencies`) while the last step raised the exact log evidence by at least
    `config.feature_gain` nats per row and doubling of b, and the next fits in memory. Nyström features stop
    at every training row a landmark. Keeps the fold of the largest evidence; its seconds are all the b's."""
    if _traced((X, y)):
        raise ValueError(
            "`config.feature_budget` compares the evidence of several b on the host: it needs concrete rows, not "
            "traced ones (inside `jit` or `vmap`, set `num_frequencies` and feature_budget=None)"
        )
    n = int(np.shape(X)[0])
    assert config.feature_budget is not None  # the caller's dispatch
    budget, gain = float(config.feature_budget), float(config.feature_gain)
    m = _num_frequencies(config, n)
    fixed = config._replace(feature_budget=None, num_frequencies=m)
    if fixed.kernel == "auto" or fixed.feature_map == "auto":  # chosen at the first b
        fold, (init_seconds, first_seconds) = _best_kernel_fold(key, X, y, fixed, dtype=dtype, gp=gp, progress=progress)
    else:
        fold = _prepare_fold(key, X, y, fixed, dtype=dtype, gp=gp, progress=progress)
        init_seconds, first_seconds = fold.init_seconds, fold.stats_seconds
    fixed = fixed._replace(kernel=fold.kernel, feature_map=_map_name(fold.features))
    hyper = gp or (fold.hyper, fold.gp_info)
    # every step's seconds count against the budget (the first: every kernel and map "auto" prepared); the
    # prediction of the next step's seconds takes the kept map's own (`own`)
    best, steps = fold, [FeatureStep(num_features(fold.features), float(fold.log_evidence), first_seconds)]
    own = [steps[0]._replace(seconds=fold.stats_seconds)]
    while True:
        b = steps[-1].num_features
        if fixed.feature_map == "nystrom" and b >= n:
            break  # every training row is a landmark
        following_m = _next_num_frequencies(m, own, budget - sum(s.seconds for s in steps))
        if following_m is None:
            break
        m = following_m
        following = fixed._replace(num_frequencies=m)
        try:
            check_fit_memory(n, following, dtype=dtype)
        except MemoryLimitError:
            break
        fixed = following
        fold = _prepare_fold(key, X, y, fixed, dtype=dtype, gp=hyper, progress=progress)
        steps.append(FeatureStep(num_features(fold.features), float(fold.log_evidence), fold.stats_seconds))
        own.append(steps[-1])
        init_seconds += fold.init_seconds  # standardizing and checking the rows again
        # the rise asked of a doubling, in proportion to the doublings of this step
        rise = (fold.log_evidence - best.log_evidence) / n / np.log2(steps[-1].num_features / b)
        if fold.log_evidence > best.log_evidence:
            best = fold
        del fold
        if not rise >= gain:
            break
    return best._replace(
        init_seconds=init_seconds, stats_seconds=sum(s.seconds for s in steps), feature_steps=tuple(steps)
    )


# `DirectConfig.feature_budget`: the least growth of b worth a step when a doubling would not fit the budget
_MIN_GROWTH = 1.25


def _next_num_frequencies(m: int, steps: Sequence[FeatureStep], left: float) -> int | None:
    """The frequencies of the next b a feature budget tries after `m` (the last of `steps`, b = 2m), or None to
    stop, with `left` seconds of the budget left. The seconds of a step are predicted to grow as a power of b:
    the one the last two steps measured (between 1 and 3; 2 after the first b: the statistics pass,
    $O(nb^2)$). A doubling when its predicted seconds fit in `left`; else the largest growth predicted to fit,
    rounded down to a multiple of 8 frequencies, when it is at least `_MIN_GROWTH`; else None."""
    last, left = float(steps[-1].seconds), float(left)
    power = 2.0
    if len(steps) >= 2 and steps[-2].seconds > 0 and last > 0:
        power = np.log(last / steps[-2].seconds) / np.log(steps[-1].num_features / steps[-2].num_features)
        power = min(max(power, 1.0), 3.0)
    if last * 2.0**power <= left:
        return 2 * m
    if left <= 0:
        return None
    following = int(m * (left / max(last, 1e-9)) ** (1.0 / power)) // 8 * 8
    return following if following >= _MIN_GROWTH * m else None


def _fixed_hyperparameters(lengthscale, Xs, yc) -> GPHyperparameters:
    """`config.lengthscale`'s hyperparameters: that lengthscale for every input, the targets' variance as
    the signal variance and a tenth of it as the noise guess."""
    dtype = Xs.dtype
    if _traced(yc):  # inside jit or vmap: the variance in the working dtype
        v = jnp.var(yc)
        var: Any = jnp.where(v > 0, v, 1.0)
    else:
        var = float(np.var(np.asarray(yc, np.float64)))
        var = var if var > 0 else 1.0
    return GPHyperparameters(
        jnp.full((Xs.shape[1],), float(lengthscale), dtype),
        jnp.asarray(var, dtype),
        jnp.asarray(0.1 * var, dtype),
    )


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
    """`feats` with the training rows' mean of its features as `offset` (`kronvi.inputs.feature_mean`), computed
    in float64 and kept in the working dtype: every later use (statistics, predictions, saved models)
    subtracts the same vector, so the model has an unshrunk intercept, as `BayesianRidge`'s
    (`docs/decisions/default-recipe.md#an-intercept-outside-the-prior`)."""
    dtype = feature_dtype(feats)
    with jax.enable_x64(True):
        mean = feature_mean_unchecked(*_cast((feats, X), jnp.float64), chunk_size=config.chunk_size or 4096)
        return feats._replace(offset=_cast(mean, dtype))


def _cast(tree, dtype):
    """Every array of `tree` in `dtype`: by NumPy when all are in host memory (no program per shape of the
    training rows), else in one program (one program per array otherwise, each compiled on its first call
    for a shape). In float64 only inside `jax.enable_x64`."""
    leaves, treedef = jax.tree.flatten(tree)
    views = host_arrays(*leaves)
    if views is None:
        return _cast_program(tree, dtype)
    return treedef.unflatten([to_device(v, dtype) for v in views])


@functools.partial(jax.jit, static_argnums=1)
def _cast_program(tree, dtype):
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), tree)


def _eigen_setup(feats, X, y, prior_scale, gp_noise, config, progress=None):
    r"""Eigenbasis, evidence-optimal prior scale and noise variance, and weight grids of the eigenbasis
    recipe: `(rotated_stats, basis, prior_w, prior_scale, noise_variance)`.

    Computed in float64 whatever the working dtype: the small eigenvalues of $\Phi^\top\Phi$ that
    still carry signal (down to $\sigma^2/\sigma_w^2$ of the largest) are below the rounding of float32
    statistics. The results are cast back to the working dtype; in the eigenbasis the fit is well
    conditioned (`docs/decisions/default-recipe.md#the-eigenbasis`). With fewer rows than
    features the basis comes from the `n x n` Gram matrix (`kronvi.stats.eigenbasis_from_inputs`).
    The prior scale and the noise variance maximize the exact evidence together, from the GP's values.
    """
    dtype = X.dtype
    with jax.enable_x64(True):
        feats64, X64, y64, scale64, noise64 = _cast((feats, X, y, prior_scale, gp_noise), jnp.float64)
        fmap = functools.partial(feature_map_unchecked, feats64)
        stats_of = _whitened_stats_of(feats64, X64, y64)
        # the primal route, where the statistics are reported or whitened on the host
        if X.shape[0] >= num_features(feats) and (progress is not None or stats_of is not None):
            stats = _stats_in_blocks(fmap, X64, y64, chunk_size=config.chunk_size, progress=progress, stats_of=stats_of)
            _stage(progress, "eigen", X.shape[0], X.shape[0])
            stats, basis = eigenbasis(stats)
        else:
            stats, basis = eigenbasis_for_dtype(
                fmap, X64, y64, chunk_size=config.chunk_size, null_dtype=dtype
            )
        return _eigen_grids(stats, basis, scale64, noise64, config, dtype)


_PROGRESS_ROWS = 1 << 16  # rows per block of a statistics pass that reports its progress


def _reporter(progress, every=None):
    """`progress` and `progress_every` as a `_Progress` (`True`: a `_StageLine`), or None."""
    if progress is None or progress is False:
        return None
    if every is not None:
        every = check_int(every, "progress_every", 1)
    if progress is True:
        progress = StageLine()
    elif not callable(progress):
        raise TypeError(
            f"`progress` must be None, True or a callable (step, total, metrics), got {progress!r}"
        )
    return _Progress(progress, every)


class _Progress(NamedTuple):
    report: Callable[[int, int, dict], None]
    every: int | None  # rows per report of the statistics pass; None: `_rows_per_report(b)`


def _rows_per_report(b: int) -> int:
    """Rows per progress report of a statistics pass over `b` features: about 1.5e11 multiply-adds (a few
    seconds of a two-core machine's BLAS), a power of two between 4,096 and `_PROGRESS_ROWS`."""
    rows = 1.5e11 / max(b, 1) ** 2
    return int(min(_PROGRESS_ROWS, max(4096, 2 ** int(np.log2(max(rows, 1.0))))))


def _close(progress) -> None:
    """Closes the status line of `progress=True` (a callable the user passed is theirs)."""
    if progress is not None and isinstance(progress.report, StageLine):
        progress.report.close()


def _stage(progress, stage: str, done: int, total: int, **metrics) -> None:
    if progress is not None:
        progress.report(int(done), int(total), {"stage": stage, **metrics})


def _whitened_stats_of(feats, X, y):
    """For float64 Nyström features with a lower-triangular whitening and concrete rows in host memory: a
    `stats_of(X, y, chunk_size=...)` computing their statistics from the kernel rows, whitened by the host BLAS's
    triangular product (`host_whitened_stats`; half the flops of XLA's general product, at the
    BLAS rate); else None."""
    if not isinstance(feats, NystromFeatures) or feats.whiten.dtype != jnp.float64 or host_arrays(X, y) is None:
        return None
    whiten = np.asarray(feats.whiten)
    if np.any(np.triu(whiten, 1)):
        return None
    offset = np.zeros(whiten.shape[0]) if feats.offset is None else np.asarray(feats.offset, np.float64)
    kernel_map = functools.partial(nystrom_kernel_unchecked, feats._replace(offset=None))
    return functools.partial(host_whitened_stats, kernel_map, whiten, offset)


def _stats_in_blocks(fmap, X, y, *, chunk_size, progress, stats_of=None):
    """`regression_stats_from_inputs` (or `stats_of(X, y, chunk_size=...)`), in blocks of `progress.every` rows
    merged exactly (`kronvi.stats.merge_stats`) with the progress reported after each block, when `progress` is
    set and the rows are many; else in one call."""
    stats_of = stats_of or functools.partial(stats_from_inputs, fmap)
    b = jax.eval_shape(fmap, jax.ShapeDtypeStruct((1, X.shape[1]), X.dtype)).shape[-1]
    n = X.shape[0]
    every = progress.every if progress is not None and progress.every else _rows_per_report(b)
    if progress is None or n <= every:
        return stats_of(X, y, chunk_size=chunk_size)
    Xh, yh = np.asarray(X), np.asarray(y)  # host slices compile nothing
    t0 = time.perf_counter()
    stats = None
    _stage(progress, "statistics", 0, n)
    for start in range(0, n, every):
        block = stats_of(Xh[start : start + every], yh[start : start + every], chunk_size=chunk_size)
        stats = block if stats is None else merge_stats(stats, block)
        done = min(n, start + every)
        _stage(progress, "statistics", done, n, rows_per_second=done / max(time.perf_counter() - t0, 1e-9))
    return stats


def _eigen_grids(stats, basis, scale64, noise64, config, dtype):
    """The second half of `_eigen_setup`, from float64 rotated statistics and basis (inside `enable_x64`); then
    the log evidence at the optimum (float64; traced inside `jit`)."""
    scale, s2 = _evidence_optimum(basis.eigenvalues, stats.Phity, stats.yty, stats.n, scale64, noise64)
    evidence = _log_evidence(basis.eigenvalues, stats.Phity, stats.yty, stats.n, scale, s2)
    center, sd = _posterior_moments(basis.eigenvalues, stats.Phity, scale, s2)
    with errors_name("config.width", config.width):
        prior_w = posterior_grid(center, sd, scale, levels=config.levels, width=float(config.width))
    stats, basis, scale, s2, values, log_probs = _cast(
        (stats, basis, scale, s2, prior_w.values, prior_w.log_probs), dtype
    )
    prior_w = DiscretePrior._unchecked(values, log_normalized(log_probs))
    return stats, basis, prior_w, scale, s2, (evidence if _traced(evidence) else float(evidence))


# `spectral_log_evidence` in one program (a few dozen eager operations otherwise)
_log_evidence = jax.jit(spectral_log_evidence)

# `spectral_evidence_optimum`'s box, passed to it: each log variance within this of its start
_EVIDENCE_LOG_RANGE = 12.0


# `spectral_evidence_optimum` compiled cheaply for concrete data: Newton steps over b eigenvalues
# (`docs/decisions/compilation.md#cheaper-compilation-for-the-small-programs`)
_quick_optimum = quick_jit(spectral_evidence_optimum.__wrapped__, static_argnames=("max_iter",))  # type: ignore[attr-defined]


def _evidence_optimum(eigenvalues, c, yty, n, scale, noise, *, restarts: int = 3):
    """`spectral_evidence_optimum` from the GP's `(scale, noise)`, started again from where it stopped while it
    stops on the edge of its box (a log variance `_EVIDENCE_LOG_RANGE` from its start), at most `restarts`
    times in all. A GP noise variance pinned at its lower bound ($10^{-6}$ of the targets' variance, when
    the GP interpolates its 1,000 rows) can lie more than $e^{12}$ below the noise the evidence of every row
    wants (`docs/decisions/default-recipe.md#the-kernel-family`). Where the first run ends inside its box
    (every fit before this rule), its result is returned as it is."""
    start = (scale, noise)
    optimum = spectral_evidence_optimum if _traced((eigenvalues, c, yty, n, scale, noise)) else _quick_optimum
    search = functools.partial(optimum, log_range=_EVIDENCE_LOG_RANGE)
    result = search(eigenvalues, c, yty, n, scale, noise)
    active = _on_edge(result, start)
    current = result
    for _ in range(restarts - 1):
        if not _traced(active) and not bool(active):
            break
        following = search(eigenvalues, c, yty, n, *current)
        result, active = _restarted(active, following, result, current)
        current = following
    return result


@jax.jit
def _restarted(active, following, result, current):
    """`_evidence_optimum`'s restart step in one program: `following` where `active`, and whether it is still
    on the edge of its box."""
    result = tuple(jnp.where(active, f, r) for f, r in zip(following, result, strict=True))
    return result, active & _on_edge(following, current)


@jax.jit
def _on_edge(result, start):
    """Whether `spectral_evidence_optimum` stopped on the edge of its box around `start` (both `(scale, noise)`)."""
    moved = jnp.maximum(
        jnp.abs(2.0 * jnp.log(result[0] / start[0])), jnp.abs(jnp.log(result[1] / start[1]))
    )
    return moved > _EVIDENCE_LOG_RANGE - 1e-3


def evidence_noise_variance(
    rotated: RegressionStats,
    basis: Eigenbasis,
    prior_scale: ArrayLike,
    guess: ArrayLike,
    *,
    log_range: float = 12.0,
) -> jax.Array:
    """The noise variance maximizing the exact evidence (`kronvi.gaussian.blr_evidence_noise`) within
    `guess * exp(±log_range)` (`guess`: e.g. the GP estimate), from the eigenbasis already computed:
    `(rotated, basis)` of `kronvi.stats.eigenbasis`."""
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
    \sigma_w^{-2}$, $\mu_j = \tau_j^2 c_j/\sigma^2$ (`kronvi.model.posterior_grid_prior`)."""
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
        with errors_name("config.noise_cv", config.noise_cv):
            for s in config.noise_cv:  # every candidate grid is valid for this data
                noise_prior_for_span(s2, s, config.noise_levels)
        span, prior_n, cv = choose_noise_prior(
            fold.cv_stats, fold.prior_w, s2, config.noise_cv, levels=config.noise_levels,  # type: ignore[arg-type]  # set with noise_cv
            criterion=config.cv_criterion, max_iter=config.cv_max_iter,
        )  # fmt: skip
    else:
        span = float(config.noise_span)
        with errors_name("config.noise_span", config.noise_span):
            prior_n = _noise_grid(s2, span, config.noise_levels)
    t3 = time.perf_counter()
    q_w, q_n, info, prior_n, recentres = _fit_with_noise_recentring(
        fold.stats,
        fold.prior_w,
        prior_n,
        config._replace(recipe=dataclasses.replace(config.recipe, noise_span=span)),
        key=fold.key,
    )
    basis: Eigenbasis | CompactBasis | None = fold.basis
    prior_w = fold.prior_w
    support = None
    support_rms = support_rms_for(config.support_rms, _map_name(fold.features))
    if config.basis != "features" and support_rms is not None:
        traced = _traced((q_w, fold.basis))  # inside jit or vmap: in the working dtype
        mean, var = (grid_moments(q_w.probs, prior_w.values) if traced else weight_moments64(q_w, prior_w))
        support = _eigen_support(fold.basis, mean, fold.stats.n, support_rms, prior_w.values.dtype)
    if config.basis == "compact":
        if _traced(q_w):
            raise ValueError(
                "`config.basis='compact'` chooses the directions it keeps on the host: fit it outside `jit` and "
                "`vmap` (or use basis='eigen' there)"
            )
        noise = noise_moments(q_n, prior_n)[2]
        if support is not None:
            support = _compact_support(
                support, fold.basis, var, fold.stats.n, noise, config.compact_tol, support_rms
            )
        basis, prior_w, q_w = compact_posterior(
            fold.basis, q_w, prior_w, fold.stats.n, noise, tol=config.compact_tol,  # type: ignore[arg-type]  # an Eigenbasis
            width=config.width, vectors_dtype=jnp.float16 if config.compact_vectors == "half" else None,
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
        fold.y_scale,
        support,
    )
    timings = DirectTimings(
        init_seconds=fold.init_seconds,
        stats_seconds=fold.stats_seconds,
        select_seconds=(t3 - t2) if config.noise_cv else 0.0,
        fit_seconds=t4 - t3,
    )
    direct_info = DirectInfo(
        fit=info, gp=fold.gp_info, noise_recentres=recentres, noise_span=span, cv_scores=cv, kernel=fold.kernel,
        feature_map=_map_name(fold.features), feature_steps=fold.feature_steps,
    )
    return DirectFit(model, timings, direct_info)


def _eigen_support(basis, mean, n, support_rms, dtype) -> SupportBound:
    """`SupportBound` of an eigenbasis posterior with weight means `mean`: `support_rms` training RMS,
    sqrt(lambda_j / n), per direction; in float64 on the host, or in the working dtype where traced."""
    if _traced((basis, mean, n)):
        traced_bound = float(support_rms) * jnp.sqrt(jnp.maximum(basis.eigenvalues, 0.0) / n)
        return SupportBound(traced_bound.astype(dtype), jnp.asarray(mean).astype(dtype))
    lam = np.maximum(np.asarray(basis.eigenvalues, np.float64), 0.0)
    bound = float(support_rms) * np.sqrt(lam / float(n))
    return SupportBound(to_device(bound, dtype), to_device(mean, dtype))


def _compact_support(support, basis, var, n, noise_variance, tol, support_rms) -> SupportBound:
    """The eigen `support` on the compact model's columns: `[mean, kept directions, complement]`, the kept
    directions bounded as in the eigenbasis (`var`: the weights' variances, which choose them), the
    complement's share of the mean as one more coordinate."""
    keep, _ = complement_split(basis.eigenvalues, var, n, noise_variance, tol=tol)
    inf = np.full(1, np.inf)
    tail = np.full(COPIES, np.inf)
    bound = np.concatenate([inf, np.asarray(support.bound, np.float64)[keep], tail])
    mean = np.asarray(support.weight, np.float64)
    weight = np.concatenate([np.zeros(1), mean[keep], np.zeros(COPIES)])
    # the complement's share of the mean: column 0 (phi^T m) less the kept directions' share
    mix = np.concatenate([np.ones(1), -mean[keep], np.zeros(COPIES)])
    lam = np.maximum(np.asarray(basis.eigenvalues, np.float64), 0.0)
    rms = np.sqrt(np.sum(lam[~keep] * mean[~keep] ** 2) / float(n))
    dtype = support.bound.dtype
    return SupportBound(  # cast by NumPy, then placed: no program to compile
        *to_device(tuple(np.asarray(v, dtype) for v in (bound, weight, mix, float(support_rms) * rms)))
    )


def fold_features(fitted: PreparedFold | FittedDirect, X: ArrayLike) -> jax.Array:
    """Features of raw inputs `X (N, d)` through a `PreparedFold`'s or `FittedDirect`'s standardizer and
    random Fourier features, in the dtype of its statistics: `(N, b)`, rotated to its eigenbasis if it has
    one; for a `"compact"` model the `(N, 1 + k + J)` features of its weights (`kronvi.model.compact_features`).
    Either way they are what `model.q_w` and `model.prior_w` belong to, for `kronvi.model.predict_regression` and
    the other prediction functions (which predict the targets in the units of the fit:
    `(y - model.y_offset) / model.y_scale`; `kronvi.predict` returns the targets' own units)."""
    if _traced((fitted, X)):
        return _features_of(fitted, _standardized(fitted, X))
    return _concrete_features(fitted, _standardized(fitted, X, on_host=True))


def _standardized(fitted, X, name: str = "X", *, on_host: bool = False) -> Any:
    """`X` standardized as the training rows were, in the model's dtype: in float64 on the host when concrete.
    `on_host`: concrete rows are returned in host memory (NumPy, the model's dtype: `_concrete_features`)."""
    dtype = feature_dtype(fitted.features)
    check_numeric(X, name)
    check_input_columns(np.shape(X), np.shape(fitted.standardizer.mean)[-1], name)  # static: also while tracing
    if _traced((fitted, X)):
        st = fitted.standardizer
        return ((jnp.asarray(X, dtype) - st.mean) / st.scale).astype(dtype)
    X = np.asarray(X, np.float64)
    check_finite(X, name)
    Xs = standardize_host(fitted.standardizer, X, dtype, name)
    return Xs if on_host else to_device(Xs)


def _check_targets(shape, n: int) -> None:
    """`ValueError` naming `y` unless `shape` is `(n,)`, one target per row of `X`."""
    if tuple(shape) != (n,):
        raise ValueError(f"`y` must have shape ({n},) as the rows of `X`, got {tuple(shape)}")


def _concrete_features(fitted, Xs):
    """The features that `fitted.q_w` belongs to of standardized rows `Xs` in host memory (`_standardized(...,
    on_host=True)`, in the model's dtype, as the training rows were), in the model's dtype. Nyström features and
    their rotation are computed from them in float64 and then rounded, as the training statistics were: in the
    model's dtype the landmarks' whitening, whose norm reaches the jitter's -1/2 power, would cancel away the
    features' leading digits (`docs/decisions/default-recipe.md#nystrom-features`)."""
    dtype = feature_dtype(fitted.features)
    if not isinstance(fitted.features, NystromFeatures):
        return _features_of(fitted, to_device(Xs))
    with jax.enable_x64(True):
        feats, basis = _cast((fitted.features, fitted.basis), jnp.float64)
        Phi = _features_of(fitted._replace(features=feats, basis=basis), to_device(Xs, np.float64))
        return _cast(Phi, dtype)


def _features_of(fitted, Xs):
    """The features of standardized inputs `Xs` (checked by `_standardized`) that `fitted.q_w` belongs to."""
    Phi = feature_map_unchecked(fitted.features, Xs)
    if isinstance(fitted.basis, CompactBasis):
        return compact_features(fitted.basis, Phi)
    return Phi if fitted.basis is None else rotate_features(fitted.basis, Phi)


def _check_model(model) -> None:
    if not isinstance(model, FittedDirect):
        raise TypeError(
            f"`model` must be a FittedDirect (the `.model` of kronvi.fit_direct), got {type(model).__name__}"
        )


class _Parts(NamedTuple):
    """What prediction needs of a `FittedDirect` on standardized inputs (no float64 host arrays)."""

    features: RandomFourierFeatures | NystromFeatures
    basis: Any
    prior_w: DiscretePrior
    prior_noise: DiscretePrior
    q_w: MeanField
    q_noise: MeanField
    support: SupportBound | None


def _parts(model: FittedDirect) -> _Parts:
    return _Parts(
        model.features, model.basis, model.prior_w, model.prior_noise, model.q_w, model.q_noise, model.support
    )


@jax.jit
def _moments_of(parts: _Parts, Xs):
    """Predictive mean and variance, in the units of the fit, of standardized inputs."""
    return _moments_from(parts, _features_of(parts, Xs))


@jax.jit
def _moments_from(parts: _Parts, Phi):
    """Predictive mean and variance, in the units of the fit, of the features `Phi` the weights belong to."""
    mean, var = predict_regression(parts.q_w, parts.q_noise, parts.prior_w, parts.prior_noise, Phi)
    return mean + support_shift(parts.support, Phi), var


def predict(model: FittedDirect, X: ArrayLike, *, chunk_size: int = 4096) -> Prediction:
    r"""The exact predictive mean and variance of new targets at raw inputs `X`, in the targets' units.

    The mean is `y_offset + y_scale` $(\Phi(x)^\top E_q[w] + \delta(x))$, the variance `y_scale`$^2$ times
    $\sum_j \Phi_j(x)^2 \mathrm{Var}_q(w_j) + E_q[\sigma^2]$ (noise included), for every recipe
    (`kronvi.model.predict_regression` on `fold_features`); $\delta$ is 0 for rows within the training rows' span
    and recentres the others (`model.support`, `support_shift`). Rows are processed `chunk_size` at a time, so no
    buffer holds more than `chunk_size x b` features, and padded to a few fixed sizes, so that new row counts
    reuse compiled programs.

    Runs under `jax.jit` and `jax.vmap` (over models or inputs); there the result is in the model's dtype. For
    concrete inputs the inputs are standardized in float64 and the result is float64 NumPy arrays (the
    offset added in float64).

    Args:
      model: a `FittedDirect` (`kronvi.fit_direct(...).model`, `kronvi.load_model`).
      X: raw inputs `(N, d)`.
      chunk_size: rows per pass.

    Returns:
      `Prediction(mean, variance)`, each `(N,)`.

    Example:
      >>> import jax, numpy as np, kronvi
      >>> rng = np.random.default_rng(0)
      >>> X = rng.normal(size=(200, 2)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200) + 10.0
      >>> config = kronvi.DirectConfig(num_frequencies=50, lengthscale=1.0)
      >>> model = kronvi.fit_direct(jax.random.key(0), X, y, config).model
      >>> pred = kronvi.predict(model, X[:3])
      >>> bool(np.all(np.abs(pred.mean - y[:3]) < 0.5)), bool(np.all(pred.variance > 0))
      (True, True)
    """
    _check_model(model)
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    if _traced((model, X)):
        Xs = _standardized(model, X)
        mean, var = _chunked(functools.partial(_moments_of, _parts(model)), Xs, chunk_size)
        return Prediction(model.y_offset + model.y_scale * mean, model.y_scale**2 * var)
    Xh = np.asarray(_standardized(model, X, on_host=True))
    parts = _parts(model)
    means, variances = [], []
    for start in range(0, Xh.shape[0], chunk_size):
        rows = Xh[start : start + chunk_size]
        padded = pad_rows(rows, min(max(32, row_bucket(rows.shape[0], steps=1)), chunk_size))
        if isinstance(model.features, NystromFeatures):
            m, v = _moments_from(parts, _concrete_features(model, padded))
        else:
            m, v = _moments_of(parts, to_device(padded))
        means.append(np.asarray(m, np.float64)[: rows.shape[0]])
        variances.append(np.asarray(v, np.float64)[: rows.shape[0]])
    mean = np.concatenate(means) if means else np.zeros(0)
    var = np.concatenate(variances) if variances else np.zeros(0)
    scale = np.float64(model.y_scale)
    with np.errstate(over="ignore"):  # targets near 1e160 and beyond: a variance past float64's range is inf
        return Prediction(np.float64(model.y_offset) + scale * mean, var * scale * scale)


def _chunked(fn, Xs, chunk_size):
    """`fn(Xs)` for traced `Xs`, `chunk_size` rows at a time (`lax.map` over zero-padded chunks)."""
    n, d = Xs.shape
    if n <= chunk_size:
        return fn(Xs)
    k = -(-n // chunk_size)
    padded = jnp.concatenate([Xs, jnp.zeros((k * chunk_size - n, d), Xs.dtype)])
    outs = jax.lax.map(fn, padded.reshape(k, chunk_size, d))
    return jax.tree.map(lambda a: a.reshape((k * chunk_size,) + a.shape[2:])[:n], outs)


def log_density(
    model: FittedDirect,
    X: ArrayLike,
    y: ArrayLike,
    *,
    rtol: float | str | None = "auto",
    chunk_size: int = 4096,
) -> Any:
    r"""The exact log predictive density of targets `y` at raw inputs `X`, in the targets' units
    (`kronvi.model.predictive_log_density` of the fit's units, less `log(model.y_scale)`), the density `predict`'s
    moments belong to: the posterior predictive moved by `support_shift` (evaluated at $y - \delta(x)$).

    With concrete inputs every point meets `rtol` or `kronvi.DensityToleranceError` is raised (its
    `log_density` in the targets' units); under `jit` only the first pass runs (see
    `predictive_log_density`). Rows are processed `chunk_size` at a time.

    Args:
      model: a `FittedDirect`.
      X: raw inputs `(N, d)`.
      y: targets `(N,)`.
      rtol: `predictive_log_density(rtol=...)`.
      chunk_size: rows per pass.

    Returns:
      `(N,)` log densities: float64 NumPy for concrete inputs, the model's dtype under `jit`.
    """
    _check_model(model)
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    if _traced((model, X, y)):
        check_numeric(y, "y")
        Phi = fold_features(model, X)
        _check_targets(np.shape(y), Phi.shape[0])  # static: checked while tracing
        yc = (jnp.asarray(y) - model.y_offset) / model.y_scale
        yc = yc.astype(Phi.dtype) - support_shift(model.support, Phi)
        ld, _ = predictive_log_density(
            model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, yc, rtol=rtol
        )
        return ld - jnp.log(model.y_scale)
    shift = np.log(float(model.y_scale))
    check_numeric(y, "y")
    y64 = np.asarray(y, np.float64)
    Xs = _standardized(model, X, on_host=True)
    _check_targets(y64.shape, Xs.shape[0])
    check_finite(y64, "y")
    dtype = feature_dtype(model.features)
    yc = ((y64 - np.float64(model.y_offset)) / float(model.y_scale)).astype(dtype)
    out, errors, failed = [], [], []
    for start in range(0, Xs.shape[0], chunk_size):
        Phi = _concrete_features(model, Xs[start : start + chunk_size])
        y_chunk = _shifted_targets(yc[start : start + chunk_size], model.support, Phi)
        try:
            ld, err = predictive_log_density(
                model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y_chunk, rtol=rtol
            )
        except DensityToleranceError as e:
            ld, err = e.log_density, e.rel_error_bound
            failed.append(np.asarray(e.failed) + start)
        out.append(np.asarray(ld, np.float64) - shift)
        errors.append(np.asarray(err, np.float64))
    lds = np.concatenate(out) if out else np.zeros(0)
    if failed:
        idx = np.concatenate(failed)
        raise DensityToleranceError(
            f"{idx.size} of {lds.size} points did not meet the density's tolerance `rtol`={rtol!r}",
            lds, np.concatenate(errors), idx,
        )  # fmt: skip
    return lds


def fit_direct(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    config: DirectConfig | None = None,
    *,
    dtype: DTypeLike = jnp.float32,
    progress: bool | Callable[[int, int, dict], None] | None = None,
    progress_every: int | None = None,
) -> DirectFit:
    """Fits DIRECT mean-field regression on raw training data: `prepare_fold` then
    `fit_prepared`. Returns a `DirectFit`
    `(model, timings, info)`.

    The returned `model` predicts on raw inputs in the targets' units: `model.predict(X)` and
    `model.log_density(X, y)` (`kronvi.predict`, `kronvi.log_density`).

    With `config.noise_cv` (`basis="features"`) the noise grid is chosen among those spans by
    `config.cv_folds`-fold cross-validation on the training rows: the statistics are accumulated per
    inner fold in the same single pass (their sum is the training statistics), each candidate is fitted
    on every `total - fold` (vmapped, CAVI from `kronvi.fitting.gaussian_start`) and scored exactly on the
    held-out fold (`kronvi.fitting.select_prior` with `config.cv_criterion`). That time is
    `select_seconds`.

    `progress` (`None`, `True` or a callable `progress(step, total, metrics)`, as for `prepare_fold`)
    reports the stages and, over many rows, the statistics pass every `progress_every` rows: rows done, rows
    per second.
    """
    check_key(key)
    dtype = check_working_dtype(dtype)
    report = _reporter(progress, progress_every)
    fit = _fit_direct(key, X, y, _check_config(config), dtype, report)
    if progress is True:  # the line it drew; a callable passed in (a `StageLine` too) is the caller's
        _close(report)
    return fit


def _fit_direct(key, X, y, config: DirectConfig, dtype, report) -> DirectFit:
    """`fit_direct` with a checked `config` and its progress reporter."""
    fold = _prepare_fold(key, X, y, config, dtype=dtype, gp=None, progress=report)
    _stage(report, "fit", np.shape(X)[0], np.shape(X)[0])
    return _fit_prepared(fold, config)


class StreamState(NamedTuple):
    """A streamed fit (`stream_init`, `stream_update`, `stream_prepare`): the feature map fixed by the first
    rows and the exact statistics of every row added since.

    Attributes:
      standardizer: `Standardizer` of the first rows (float64 NumPy).
      features: `RandomFourierFeatures` drawn for `hyper` (not yet centred).
      hyper: `GPHyperparameters` of the first rows, for the targets in units of `y_unit`.
      gp_info: the GP step's `GPFitInfo` (None with `config.lengthscale`).
      y_shift: the first rows' target mean; the statistics hold `(y - y_shift) / y_unit`.
      y_unit: the first rows' target unit (`target_moments`).
      key: the key of the fits.
      stats: float64 NumPy `RegressionStats` of the features augmented with a constant column (which
        carries the row count, the sum of every feature and of the targets), or `None` before any rows.
      init_seconds: the seconds of `stream_init`.
      stats_seconds: the seconds of every `stream_update`.
      kernel: the kernel of `features` (`config.kernel`, or the one `"auto"` chose).
    """

    standardizer: Standardizer
    features: RandomFourierFeatures
    hyper: GPHyperparameters
    gp_info: GPFitInfo | None
    y_shift: float
    y_unit: float
    key: jax.Array
    stats: RegressionStats | None
    init_seconds: float
    stats_seconds: float
    kernel: str = "rbf"


def stream_init(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    config: DirectConfig | None = None,
    *,
    dtype: DTypeLike = jnp.float32,
) -> StreamState:
    """Fixes the feature map of a streamed fit from the rows `(X, y)` (a representative sample): the input
    standardizer, the GP hyperparameters and the random frequencies, drawn from `key` exactly as
    `fit_direct` draws them. No rows are counted yet: add them with `stream_update` (the same rows included).

    Streaming fits the same model as `fit_direct` on all the rows added, up to float64 summation order, when
    `stream_init` saw all the rows; otherwise the map is the first rows', and the targets' offset and unit, the
    features' centring and the priors are still those of every row added (exact: they are read off the
    statistics). A stream's features are random Fourier features (`config.feature_map` None or `"fourier"`):
    from 4,000 to 100,000 rows, where `fit_direct`'s default is Nyström features, pass
    `DirectConfig(feature_map="fourier")` to `fit_direct` for the same model. `config.noise_cv` is not supported.
    """
    check_key(key)
    dtype = check_working_dtype(dtype)
    config = _check_config(config)
    if config.noise_cv:
        raise ValueError("`config.noise_cv` is not supported by a streamed fit: set noise_cv=()")
    if config.kernel == "auto":
        raise ValueError(
            "`config.kernel='auto'` is not supported by a streamed fit (its features are drawn before the rows "
            "that would choose them): name the kernel, e.g. the one `fit_direct` chose on a sample (`info.kernel`)"
        )
    if config.feature_budget is not None:
        raise ValueError(
            "`config.feature_budget` must be None for a streamed fit (growing b needs every row's statistics "
            f"again for each b): set `num_frequencies`, got feature_budget={config.feature_budget!r}"
        )
    if config.feature_map is None:  # the default: random Fourier features (landmarks need the rows)
        config = config._replace(feature_map="fourier")
    if config.feature_map != "fourier":
        raise ValueError(
            "`config.feature_map` must be None or 'fourier' for a streamed fit (Nyström landmarks are training "
            f"rows, which a stream has not seen yet), got {config.feature_map!r}"
        )
    t0 = time.perf_counter()
    k_gp, k_rff, k_fit = jax.random.split(key, 3)
    X64, y64 = _host_xy(X, y)
    check_fit_memory(X64.shape[0], config, dtype=dtype)
    std = fit_standardizer_host(X64)
    Xs = to_device(standardize_host(std, X64, dtype))
    shift, unit = target_moments(y64)
    with np.errstate(over="ignore"):
        yc = to_device(((y64 - shift) / unit).astype(dtype))
    # the GP sees the float64 rows, as `prepare_fold`'s (the same hyperparameters as `fit_direct`)
    gp_rows = standardize_host(std, X64, np.float64), (y64 - shift) / unit
    hyper, gp_info = _hyperparameters(k_gp, Xs, yc, config, None, gp_rows)
    feats = _draw_features(
        k_rff, hyper, _num_frequencies(config, X64.shape[0]), config, fitted=gp_info is not None,
        kernel=config.kernel,
    )  # fmt: skip
    assert isinstance(feats, RandomFourierFeatures)  # config.feature_map is "fourier" (checked above)
    _block(feats)
    return StreamState(
        std, feats, hyper, gp_info, float(shift), unit, k_fit, None, time.perf_counter() - t0, 0.0, config.kernel
    )


def stream_update(stream: StreamState, X: ArrayLike, y: ArrayLike, *, chunk_size: int = 2048) -> StreamState:
    """Adds the exact statistics of the rows `(X, y)` to a streamed fit (float64 sums, `kronvi.stats.merge_stats`).
    Rows are padded to a few fixed sizes, so that chunks of many sizes share compiled programs."""
    t0 = time.perf_counter()
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    X64, y64 = _host_xy(X, y)
    d = np.shape(stream.standardizer.mean)[-1]
    if X64.shape[1] != d:
        raise ValueError(f"`X` has {X64.shape[1]} columns but the stream was started on {d}")
    n = X64.shape[0]
    rows = row_bucket(n)
    Xs = pad_rows(standardize_host(stream.standardizer, X64, np.float64), rows)
    yc = pad_rows((y64 - stream.y_shift) / stream.y_unit, rows)
    with jax.enable_x64(True):
        feats, Xs, yc = _cast((stream.features, Xs, yc), jnp.float64)
        stats = stats_from_inputs(
            functools.partial(_augmented_features, feats), Xs, yc, chunk_size=min(rows, chunk_size),
            mask=None if rows == n else np.arange(rows) < n,
        )  # fmt: skip
        if stream.stats is not None:
            stats = merge_stats(_cast(stream.stats, jnp.float64), stats)
        stats = jax.device_get(stats)
    return stream._replace(stats=stats, stats_seconds=stream.stats_seconds + time.perf_counter() - t0)


def _augmented_features(feats, X):
    Phi = rff_features_unchecked(feats, X)
    return jnp.concatenate([Phi, jnp.ones((Phi.shape[0], 1), Phi.dtype)], axis=1)


def stream_prepare(stream: StreamState, config: DirectConfig | None = None) -> PreparedFold:
    r"""The `PreparedFold` of every row added to a streamed fit, for `fit_prepared` (with the same `config`).

    The constant column's statistics give $n$, $s = \sum_i \phi_i$ and $\sum_i y_i$, so the targets are
    centred on the mean of all rows ($\Phi^\top(y - c) = \Phi^\top y - c\,s$, $\|y - c\|^2 = y^\top y - n c^2$),
    put in the unit of all rows (`target_moments`'s rule), and, for the eigen and compact recipes, the
    features centred on their mean $\mu = s / n$ ($\Phi_c^\top\Phi_c = \Phi^\top\Phi - n\mu\mu^\top$), as
    `fit_direct` does; the eigenbasis is that of these statistics.
    """
    config = _check_config(config)
    if config.noise_cv:
        raise ValueError("`config.noise_cv` is not supported by a streamed fit: set noise_cv=()")
    if stream.stats is None:
        raise ValueError("the stream has no rows: add them with `stream_update` first")
    t0 = time.perf_counter()
    dtype = stream.features.frequencies.dtype
    aug = stream.stats
    n = float(aug.PhitPhi[-1, -1])
    s_phi = np.asarray(aug.PhitPhi[:-1, -1], np.float64)
    c = float(aug.Phity[-1]) / n
    yty = max(float(aug.yty) - n * c**2, 0.0)
    Phity = np.asarray(aug.Phity[:-1], np.float64) - c * s_phi
    PhitPhi = np.asarray(aug.PhitPhi[:-1, :-1], np.float64)
    y_offset = np.float64(stream.y_shift + c * stream.y_unit)
    y_scale = target_unit(np.sqrt(yty / n) * stream.y_unit, y_offset)
    r = stream.y_unit / y_scale
    yty, Phity = yty * r**2, Phity * r
    feats = stream.features
    if config.lengthscale is not None:  # the variance of every row added, as `fit_direct`'s
        var = yty / n if yty > 0 else 1.0
        signal, noise = var, 0.1 * var
    else:
        signal, noise = float(stream.hyper.signal_variance) * r**2, float(stream.hyper.noise_variance) * r**2
    hyper = GPHyperparameters(
        stream.hyper.lengthscales, jnp.asarray(signal, dtype), jnp.asarray(noise, dtype)
    )
    if config.basis != "features":
        mu = s_phi / n
        PhitPhi = PhitPhi - n * np.outer(mu, mu)
        feats = feats._replace(offset=jnp.asarray(mu, dtype))
    with jax.enable_x64(True):
        stats64 = RegressionStats(*_cast((n, yty, Phity, PhitPhi), jnp.float64))
        scale64, noise64 = _cast((np.sqrt(signal), noise), jnp.float64)
        if config.basis != "features":
            rotated, basis = eigenbasis(stats64)
            stats, basis, prior_w, prior_scale, s2, evidence = _eigen_grids(
                rotated, basis, scale64, noise64, config, dtype
            )
        else:
            basis, evidence = None, None
            stats, prior_scale, s2 = _cast((stats64, scale64, noise64), dtype)
    if config.basis == "features":
        prior_w = _features_grid(PhitPhi.shape[0], prior_scale, config)
    _block((stats, prior_w))
    return PreparedFold(  # X and y are not kept by a stream
        stream.standardizer, y_offset, None, None, hyper, stream.gp_info, feats, stats, None,  # type: ignore[arg-type]
        prior_w, stream.key, stream.init_seconds, stream.stats_seconds + time.perf_counter() - t0, basis, s2,
        prior_scale, y_scale, stream.kernel, evidence,
    )  # fmt: skip


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
    """Fits from each of `config.starts` and returns the `kronvi.fitting.RegressionFit`
    with the highest ELBO.

    Coordinate ascent on a grid stops at a local optimum that depends on the start; neither the prior nor
    the continuous optimum is the better start on every dataset
    (`docs/decisions/default-recipe.md#two-starts-for-the-papers-recipe`).
    """
    config = _resolve_with_starts(config)
    return _fit_best_start(stats, prior_w, prior_noise, config, key=key, checked=True)


def _resolve_with_starts(config: DirectConfig | None) -> DirectConfig:
    """`resolve_config`, and at least one start: what the fits below need of a config."""
    config = resolve_config(config)
    if not config.starts:
        raise ValueError("`config.starts` must name at least one start")
    return config


def _fit_from(stats, prior_w, prior_noise, config: DirectConfig, *, key, checked, init) -> RegressionFit:
    """One fit of `config`'s method from `init` (`checked` as `_fit_best_start`)."""
    fit_fn = fit_regression if checked else fit_regression_unchecked
    return fit_fn(
        stats, prior_w, prior_noise, method=config.method, max_iter=config.max_iter, key=key, init=init,
        **_sweep(config),
    )  # fmt: skip


def _fit_best_start(stats, prior_w, prior_noise, config: DirectConfig, *, key, checked) -> RegressionFit:
    """`fit_best_start` with a resolved `config`; `checked=False` for statistics and priors this module
    built (`fit_regression_unchecked`)."""
    fits = [  # config.starts is resolved and checked: never empty here
        _fit_from(stats, prior_w, prior_noise, config, key=key, checked=checked, init=start)
        for start in config.starts or ()
    ]
    elbos = [f.info.final_elbo for f in fits]
    if _traced(elbos):  # inside jit or vmap: the best finite ELBO, selected in the trace
        stacked = jnp.stack(elbos)
        k = jnp.argmax(jnp.where(jnp.isfinite(stacked), stacked, -jnp.inf))
        return jax.tree.map(lambda *leaves: jnp.stack(leaves)[k], *fits)
    best, best_elbo = None, -float("inf")
    for start, fit in zip(config.starts or (), fits, strict=True):
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
    fits less tightly and wants more noise; a grid that is too narrow saturates at its top level (all
    mass on its largest value) and makes the predictive density overconfident. Why recentring is off by
    default: `docs/decisions/default-recipe.md#the-noise-grid`.
    Returns a `RecentredFit` `(q_w, q_noise, info, prior_noise, num_recentres)`.
    """
    config = _resolve_with_starts(config)
    return _fit_with_noise_recentring(stats, prior_w, prior_noise, config, key=key, checked=True)


def _fit_with_noise_recentring(
    stats, prior_w, prior_noise, config: DirectConfig, *, key, checked=False
) -> RecentredFit:
    """`fit_with_noise_recentring` with a resolved `config` (`checked` as `_fit_best_start`)."""
    q_w, q_n, info = _fit_best_start(stats, prior_w, prior_noise, config, key=key, checked=checked)
    recentres = 0
    while recentres < config.max_noise_recentres and prior_noise.values.shape[-1] > 1:
        probs = q_n.probs[0]
        if not (float(probs[0]) > 0.5 or float(probs[-1]) > 0.5):
            break
        e_s = noise_moments(q_n, prior_noise)[2]
        prior_noise = noise_grid(e_s, levels=config.noise_levels, span=config.noise_span)
        init = (q_w, type(q_n).from_prior(prior_noise))
        q_w, q_n, info = _fit_from(stats, prior_w, prior_noise, config, key=key, checked=checked, init=init)
        recentres += 1
    return RecentredFit(q_w, q_n, info, prior_noise, recentres)


_MOVED_TO_CV = ("FoldResult", "FoldRun", "run_fold", "summarize", "parse_noise_cv")


def __getattr__(name: str) -> Any:
    """The cross-validation harness moved to `kronvi.cv`: its names read here still, with a
    `DeprecationWarning`, for one release."""
    if name in _MOVED_TO_CV:
        warnings.warn(
            f"kronvi.pipeline.{name} moved to kronvi.cv.{name}; the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("kronvi.cv"), name)
    raise AttributeError(f"module 'kronvi.pipeline' has no attribute {name!r}")
