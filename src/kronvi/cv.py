"""The cross-validation harness that the command line (`kronvi fit`) and the studies share: one train/test
split fitted by `kronvi.fit_direct` and scored (`run_fold`, `FoldResult`), the mean and spread over folds
(`summarize`), and the `--noise-cv` option's parser (`parse_noise_cv`).

The recipe itself (`DirectConfig`, `fit_direct`, `predict`, `log_density`, ...) is `kronvi.pipeline`'s; this
module only composes it. These names were `kronvi.pipeline`'s until this release and still read from there,
with a `DeprecationWarning`, for one release.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from ._base.checks import check_input_columns, check_int, check_training_rows
from ._base.progress import StageLine
from ._inputs.features import num_features
from ._model.density import DensityToleranceError
from ._model.regression import noise_moments
from .pipeline import DirectConfig, FittedDirect, fit_direct, log_density, predict

__all__ = ["FoldResult", "FoldRun", "run_fold", "summarize", "parse_noise_cv"]


class FoldResult(NamedTuple):
    """The scores and seconds of one `run_fold`: test RMSE and NLPD, the fit's diagnostics, its stages' times."""

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
    density_seconds: float = 0.0  # the exact test density (`predict_seconds`: the mean and variance)
    nlpd_rows: int = 0  # the test rows the NLPD averages (0: not computed, NaN)
    kernel: str = "rbf"  # the kernel of the features (`DirectConfig.kernel`, or the one "auto" chose)
    feature_map: str = "fourier"  # the map of the features (`DirectConfig.feature_map`, or the one "auto" chose)
    num_features: int = 0  # b, the model's features (`DirectConfig.num_frequencies`, or the feature budget's choice)


class FoldRun(NamedTuple):
    """The result of `run_fold`."""

    model: FittedDirect
    result: FoldResult


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


def run_fold(
    key: jax.Array,
    X_train: ArrayLike,
    y_train: ArrayLike,
    X_test: ArrayLike,
    y_test: ArrayLike,
    config: DirectConfig | None = None,
    *,
    density_rows: int | None = None,
    progress: bool | Callable[[int, int, dict], None] | None = None,
    progress_every: int | None = None,
) -> FoldRun:
    """Fits on the training rows and evaluates on the test rows. Returns a `FoldRun` `(model, result)`.

    The RMSE is over every test row. The NLPD is the exact log density (`kronvi.log_density`) of every test row
    when `density_rows` is `None`, of a random sample of `density_rows` of them (drawn with `key`) when there are
    more, and not computed (NaN) when it is 0; `FoldResult.nlpd_rows` says how many rows it averages.
    `progress` and `progress_every` are `fit_direct`'s.
    """
    if density_rows is not None:
        density_rows = check_int(density_rows, "density_rows", 0)
    X_test, y_test = check_training_rows(X_test, y_test, names=("X_test", "y_test"))  # before the fit
    if np.ndim(X_train) == 2:  # else the fit names `X`
        check_input_columns(X_test.shape, np.shape(X_train)[1], "X_test")
    report = StageLine() if progress is True else progress
    model, timings, info = fit_direct(
        key, X_train, y_train, config, progress=report, progress_every=progress_every
    )
    t0 = time.perf_counter()
    _stage(report, "predict", y_test.shape[0], y_test.shape[0])
    pred = predict(model, X_test)
    rmse = float(np.sqrt(np.mean((pred.mean - y_test) ** 2)))
    n_test = y_test.shape[0]
    rows = np.arange(n_test)
    if density_rows is not None and density_rows < n_test:
        rows = np.sort(np.asarray(jax.random.permutation(jax.random.fold_in(key, 7), n_test))[:density_rows])
    t1 = time.perf_counter()
    nlpd = float("nan")
    if rows.size:
        _stage(report, "density", int(rows.size), int(rows.size))
        try:
            log_dens = log_density(model, np.asarray(X_test)[rows], y_test[rows])
        except DensityToleranceError as e:
            # a few points below the rounding floor: keep the best values, say so
            warnings.warn(f"NLPD: {e}", stacklevel=2)
            log_dens = e.log_density
        nlpd = float(-np.mean(log_dens))
    t2 = time.perf_counter()
    result = FoldResult(
        rmse=rmse,
        nlpd=nlpd,
        sparsity_pct=100.0 * model.sparsity,
        elbo=float(info.final_elbo) - np.shape(X_train)[0] * float(np.log(float(model.y_scale))),
        predict_seconds=t1 - t0,
        num_iter=int(info.num_iter),
        converged=bool(info.converged),
        noise_variance=float(noise_moments(model.q_noise, model.prior_noise)[2]) * float(model.y_scale) ** 2,
        gp_degenerate=bool(info.gp.degenerate) if info.gp is not None else False,
        noise_recentres=int(info.noise_recentres),
        noise_span=float(info.noise_span),
        density_seconds=t2 - t1,
        nlpd_rows=int(rows.size),
        kernel=info.kernel,
        feature_map=info.feature_map,
        num_features=num_features(model.features),
        **timings._asdict(),
    )
    if isinstance(report, StageLine):
        report.close()
    return FoldRun(model, result)


def summarize(results: list[FoldResult]) -> dict:
    """Mean and standard deviation over folds of every numeric field (not `kernel`, `feature_map`)."""
    out = {}
    for field in FoldResult._fields:
        if field in ("kernel", "feature_map"):
            continue
        vals = np.asarray([getattr(r, field) for r in results], dtype=float)
        out[f"{field}_mean"] = float(np.mean(vals))
        if len(vals) > 1:
            out[f"{field}_sd"] = float(np.std(vals, ddof=1))
        else:  # one fold: no spread, unless its value is missing (NaN, JSON's null) or infinite
            out[f"{field}_sd"] = 0.0 if np.all(np.isfinite(vals)) else float("nan")
    return out


def _stage(progress, stage: str, done: int, total: int) -> None:
    """Reports `stage` to `progress` (a callable `progress(step, total, metrics)`, or `None`/`False`)."""
    if progress is not None and progress is not False:
        progress(int(done), int(total), {"stage": stage})
