r"""The classification recipe: raw inputs and 0/1 labels in, a fitted DIRECT logistic model out.

`fit_classifier` runs every stage of the accurate, fast recipe behind `kronvi.sklearn.DirectClassifier`
and the classification study (`experiments/classification.py`, method `direct-logistic`):

1. standardize the inputs with the training rows' moments (float64, NumPy);
2. the median heuristic: one lengthscale, the median distance between at most `lengthscale_points`
   standardized training rows drawn with the key;
3. features $\phi(x) = [D^{-1/2}\cos(xW),\ D^{-1/2}\sin(xW),\ x / \sqrt d,\ 1]$, `b = 2D + d + 1`: $D$
   random Fourier frequencies $W = Z / \ell$ ($Z$ standard normal, drawn with the key), the standardized
   inputs and a constant, so that $\phi(x)^\top\phi(x') \approx k_{SE}(x, x') + x^\top x'/d + 1$;
4. the prior sd $\sigma_w$ of every weight that maximizes the Laplace approximation to the evidence of the
   Gaussian-prior logistic model (`laplace_grid_prior`'s `log_evidence`), by a search along its exact slope
   in $\log\sigma_w^2$ (`docs/decisions/classifier.md#the-prior-sd-the-laplace-evidences-maximum`), or the
   best of the candidates `prior_scales`;
5. the grids: `"laplace"` (default) the prior $N(0, \sigma_w^2)$ on levels placed on the Laplace posterior
   (MAP $\pm$ `width` Laplace sds, `laplace_grid_prior`), or `"paper"`, the paper's even grids on
   $\pm$ `width` prior sds with a zero level (`kronvi.model.gaussian_prior`);
6. with the Laplace grids, the weights rotated to the eigenbasis of the Laplace Hessian at the MAP
   (`basis="eigen"`, default): the prior $N(0, \sigma_w^2 I)$ is the same in any orthonormal basis, and in
   this one the Laplace posterior is independent across weights, so a mean-field posterior loses far less of
   it (the regression recipe's eigenbasis,
   `docs/decisions/classifier.md#the-weights-in-the-eigenbasis-of-the-laplace-hessian`); the grids are placed
   on the rotated weights' Laplace marginals;
7. coordinate ascent from the Laplace start (`fit_logistic(method="cavi")`);

and `predict_proba` returns the exact $E_q[\sigma(\phi(x)^\top w)]$ (`predict_logistic`).

Training rows are padded with zero-weight rows to one of a fixed set of sizes (four per octave, at least
128), so that data sets and folds of nearby sizes share compiled programs; the zero-weight rows change
nothing but rounding. Prediction runs in row chunks of at most `PREDICT_CHUNK` rows.
"""

from __future__ import annotations

import functools
import math
import numbers
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._base.buckets import pad_rows, to_device
from .._base.checks import (
    check_input_columns,
    check_int,
    check_key,
    check_numeric,
    check_working_dtype,
    is_concrete,
)
from .._base.threads import run_single_threaded
from .._inputs.data import Standardizer
from .._inputs.features import RandomFourierFeatures
from .._model.families import MeanField
from .._model.grids import DiscretePrior, gaussian_prior
from .._model.posterior_grid import posterior_grid
from .._solvers.info import FitInfo
from ._bound import log_mgf
from ._fit import fit_logistic
from ._laplace import NEWTON_MAX_ITER, SEARCH, LaplaceInfo, laplace_fit
from ._predict import (
    MAX_NODES,
    even_log_cosh,
    host_coefficients,
    is_even_grid,
    mgf_log_cosh,
    predict_logistic,
    predict_rows,
    row_nodes,
    target_error,
)

GRIDS = ("laplace", "paper")
BASES = ("eigen", "features")
MIN_ROWS = 128  # the smallest row bucket of a fit
SCALE_START = 3.0  # where the search for the prior sd starts
SCALE_BOUNDS = (1e-2, 1e3)  # the prior sds it may reach
SCALE_STEP = 10.0  # the factor on the prior variance of each step before the optimum is bracketed
SCALE_RTOL = 0.1  # it stops once the maximum is bracketed within 10% in the prior sd
SLOPE_TOL = 1e-2  # or where the evidence's slope in log sigma_w^2 is at most this (nats)
GAIN_TOL = 0.05  # or where the bracket's cubic promises at most this over its better end (nats)
MAX_SCALE_FITS = 8  # Laplace fits at most
PREDICT_CHUNK = 4096  # rows per prediction chunk
_PREDICT_MIN_ROWS = 16  # the smallest row bucket of a prediction


class ClassifierConfig(NamedTuple):
    r"""Options of `fit_classifier` (the defaults are the recipe the classification study measured).

    Attributes:
      num_frequencies: $D$, random Fourier frequencies: `2 D` of the `b = 2D + d + 1` features.
      prior_scales: `None` (default): the prior sd $\sigma_w$ of every weight (the latent function's prior
        sd, the features being scaled to $\phi^\top\phi \approx 3$) that maximizes the Laplace evidence,
        searched for from 3 between 0.01 and 1000 along the evidence's slope (typically 2 to 5 Laplace
        fits; `docs/decisions/classifier.md#the-prior-sd-the-laplace-evidences-maximum`); or
        candidate sds, of which the one with the largest Laplace evidence is used (one sd pins it).
      levels: grid points per weight.
      width: grid half-width: in Laplace posterior sds for `grid="laplace"` (default 4), in prior sds for
        `grid="paper"` (default 3).
      grid: `"laplace"` (levels on the Laplace posterior) or `"paper"` (the paper's even grids on
        $\pm$ `width` prior sds, with a zero level for odd `levels`).
      max_iter: coordinate-ascent sweeps at most.
      tol: stop when a sweep gains less than `tol` nats per training row.
      lengthscale_points: training rows (at most) whose median pairwise distance is the lengthscale.
      basis: `grid="laplace"` only: `"eigen"` (the weights of the features rotated to the eigenbasis of the
        Laplace Hessian, `FittedClassifier.rotation`) or `"features"` (the weights of the features
        themselves). The paper's grids are always on the features.
    """

    num_frequencies: int = 50
    prior_scales: tuple[float, ...] | None = None
    levels: int = 15
    width: float | None = None
    grid: str = "laplace"
    max_iter: int = 10
    tol: float = 1e-3
    lengthscale_points: int = 1000
    basis: str = "eigen"


class FittedClassifier(NamedTuple):
    r"""A fitted classifier from `fit_classifier`: everything `predict_proba` needs, a pytree of arrays.

    Attributes:
      standardizer: `kronvi.inputs.Standardizer` `(d,)` of the raw inputs (float64 NumPy arrays: inputs are
        standardized in float64, then cast to the model's dtype).
      features: `kronvi.inputs.RandomFourierFeatures` `(d, D)`, the frequencies $W = Z / \ell$.
      lengthscale: `()` the median-heuristic lengthscale $\ell$, in standardized input units.
      prior_scale: `()` the chosen prior sd $\sigma_w$.
      prior_w: `kronvi.model.DiscretePrior` `(b, m)` over the weights of $\phi(x) = [D^{-1/2}\cos(xW),
        D^{-1/2}\sin(xW), x/\sqrt d, 1]$, `b = 2D + d + 1`.
      q_w: `kronvi.model.MeanField` `(b, m)`, the fitted posterior.
      rotation: `(b, b)` orthonormal $V$: the weights belong to the features $\phi(x)^\top V$
        (`ClassifierConfig.basis="eigen"`); `None`: to $\phi(x)$ (models saved before it load so).
    """

    standardizer: Standardizer
    features: RandomFourierFeatures
    lengthscale: jax.Array
    prior_scale: jax.Array
    prior_w: DiscretePrior
    q_w: MeanField
    rotation: jax.Array | None = None

    def predict_proba(self, X: ArrayLike) -> jax.Array:
        r"""$P(y = 1 \mid x)$ `(N,)` for raw inputs `X` `(N, d)`: `kronvi.logistic.predict_proba`."""
        return predict_proba(self, X)

    def design(self, X: ArrayLike) -> jax.Array:
        r"""The features `(N, b)` the weights belong to, $\phi(x)$ or $\phi(x)^\top V$ (`rotation`), of raw
        inputs `X` `(N, d)` (all rows at once)."""
        Xs = _standardize(self.standardizer, X, self.prior_w.values.dtype)
        return _rotated(_design(self.features, Xs), self.rotation)


class ClassifierInfo(NamedTuple):
    """What `fit_classifier` did.

    Attributes:
      prior_scale: the chosen prior sd (a float).
      log_evidence: `(k,)` the Laplace log evidence at each scale evaluated (`scales`).
      laplace: `kronvi.logistic.LaplaceInfo` at the chosen scale (with `basis="eigen"`, the MAP and sds of the
        rotated weights; the rest is the same in any basis). Its log evidence and slope are the search's,
        from the Hessian of Newton's last iteration, whose step met the tolerance; with `grid="laplace"`
        its sds come from the Hessian at the MAP, with `grid="paper"` (which needs none) from the search's.
      fit: the coordinate-ascent fit's `kronvi.FitInfo`.
      num_rows: training rows (before padding); `padded_rows`: after.
      padded_rows: rows of the compiled programs (zero-weight rows added).
      standardize_seconds: wall time of the standardization and the median heuristic.
      features_seconds: wall time of the features.
      scale_seconds: wall time of the scale choice and the grids (one Laplace fit per scale evaluated).
      fit_seconds: wall time of the coordinate-ascent fit (its Laplace start included).
      scales: the prior sds evaluated, in order: the search's steps, or `config.prior_scales`.
    """

    prior_scale: float
    log_evidence: jax.Array
    laplace: LaplaceInfo
    fit: FitInfo
    num_rows: int
    padded_rows: int
    standardize_seconds: float
    features_seconds: float
    scale_seconds: float
    fit_seconds: float
    scales: tuple[float, ...] = ()


class ClassifierFit(NamedTuple):
    """The result of `fit_classifier`.

    Attributes:
      model: the `FittedClassifier`.
      info: the `ClassifierInfo`.
    """

    model: FittedClassifier
    info: ClassifierInfo


# ----------------------------------------------------------------------------------------------------
# Validation


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_config(config) -> ClassifierConfig:
    """`config` checked (`None`: the defaults), with `width` resolved; `ValueError` naming the field."""
    if config is None:
        config = ClassifierConfig()
    if not isinstance(config, ClassifierConfig):
        raise TypeError(f"`config` must be a ClassifierConfig or None, got {type(config).__name__}")
    check_int(config.num_frequencies, "config.num_frequencies", 1)
    check_int(config.levels, "config.levels", 2)
    check_int(config.max_iter, "config.max_iter", 1)
    check_int(config.lengthscale_points, "config.lengthscale_points", 2)
    if not (isinstance(config.grid, str) and config.grid in GRIDS):
        raise ValueError(f"`config.grid` must be one of {GRIDS}, got {config.grid!r}")
    if not (isinstance(config.basis, str) and config.basis in BASES):
        raise ValueError(f"`config.basis` must be one of {BASES}, got {config.basis!r}")
    scales = config.prior_scales
    if scales is not None:
        if isinstance(scales, numbers.Real) and not isinstance(scales, bool):
            scales = (scales,)
        try:
            scales = tuple(scales)
        except TypeError:
            raise ValueError(
                f"`config.prior_scales` must be None or a non-empty sequence of positive numbers, got {scales!r}"
            ) from None
        if not scales or not all(_real(s) and s > 0 for s in scales):
            raise ValueError(
                "`config.prior_scales` must be None or a non-empty sequence of positive numbers, got "
                f"{config.prior_scales!r}"
            )
        scales = tuple(float(s) for s in scales)
    width = config.width
    if width is None:
        width = 4.0 if config.grid == "laplace" else 3.0
    elif not (_real(width) and width > 0):
        raise ValueError(f"`config.width` must be a finite positive number or None, got {width!r}")
    if not (_real(config.tol) and config.tol >= 0):
        raise ValueError(f"`config.tol` must be a finite number >= 0, got {config.tol!r}")
    return config._replace(prior_scales=scales, width=float(width))


def _check_inputs(X, name="X"):
    """`X` as a finite float64 NumPy array `(n, d)`, `n, d >= 1`."""
    check_numeric(X, name)
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"`{name}` must be a 2-D array of numbers: {e}") from None
    if X.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D (num_points, num_inputs), got shape {X.shape}")
    if X.shape[1] == 0:
        raise ValueError(f"`{name}` has no columns")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"`{name}` holds {int(np.sum(~np.isfinite(X)))} non-finite value(s)")
    return X


def _check_labels(y, n):
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise ValueError(f"`y` must hold labels 0 or 1 (or bools), got dtype {y.dtype}")
    if y.shape != (n,):
        raise ValueError(f"`y` must have shape ({n},) (one 0/1 label per row of `X`), got {y.shape}")
    bad = int(np.sum((y != 0) & (y != 1)))
    if bad:
        raise ValueError(f"`y` must hold labels 0 or 1 only; {bad} value(s) are neither")
    if np.all(y == y.flat[0]):
        raise ValueError(
            f"`y` holds one class only (every label is {int(y.flat[0])}): a classifier needs rows of both labels"
        )
    return y.astype(np.float64)


def _check_key(key):
    """A NumPy generator seeded by the bits of the `jax.random` key `key` (typed or raw `uint32`)."""
    check_key(key)
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    bits = np.asarray(jax.random.key_data(key) if typed else key)
    return np.random.default_rng([int(b) for b in bits.ravel()])


# ----------------------------------------------------------------------------------------------------
# Stages


def standardizer_of(X) -> Standardizer:
    """`kronvi.inputs.fit_standardizer`'s rule in NumPy float64 (moments of each column scaled by a power of two,
    scale 1 for a constant column), so that data of every shape compile nothing."""
    unit = np.ldexp(1.0, np.frexp(np.max(np.abs(X), axis=0))[1])
    Z = X / unit
    mean = Z.mean(axis=0)
    std = np.sqrt(((Z - mean) ** 2).mean(axis=0))
    constant = ~(std > 100 * np.finfo(np.float64).eps * np.abs(mean))
    return Standardizer(mean * unit, np.where(constant, 1.0, std * unit))  # type: ignore[arg-type]


def median_lengthscale(Xs, rng, max_points: int) -> float:
    """The median distance between distinct pairs of at most `max_points` rows of `Xs` (1 when all
    coincide), the rows drawn without replacement by `rng` when there are more."""
    n = Xs.shape[0]
    sub = Xs[np.sort(rng.choice(n, max_points, replace=False))] if n > max_points else Xs
    from scipy.spatial.distance import pdist  # here: scipy.spatial is slow to import

    d2 = pdist(sub, "sqeuclidean")  # differences of coordinates, squared and summed: exact zeros for ties
    if not np.min(d2, initial=np.inf) > 0:
        d2 = d2[d2 > 0]
    return float(np.sqrt(_median(d2))) if d2.size else 1.0


def _median(a: np.ndarray) -> float:
    """`np.median` of a non-empty 1-d array without NaN, the same value, from one partition (`np.median`
    partitions an even-sized array at both middle ranks: `docs/decisions/classifier.md#the-median-heuristic-by-one-partition`)."""
    k = a.size // 2
    part = np.partition(a, k)  # part[k] in its sorted place, everything before it no larger
    return part[k] if a.size % 2 else 0.5 * (part[k] + np.max(part[:k]))


def _standardize(standardizer, X, dtype):
    """Raw inputs to standardized ones in `dtype`: in float64 NumPy for concrete inputs, else traced."""
    if is_concrete(X) and not isinstance(X, jax.core.Tracer):
        X = _check_inputs(X)
        if X.shape[1] != np.shape(standardizer.mean)[0]:
            raise ValueError(
                f"`X` has {X.shape[1]} columns but the model was fitted on {np.shape(standardizer.mean)[0]}"
            )
        Xs = (X - np.asarray(standardizer.mean, np.float64)) / np.asarray(standardizer.scale, np.float64)
        if Xs.size and not np.max(np.abs(Xs)) <= np.finfo(dtype).max:
            raise ValueError(
                f"`X` holds values too far from the training inputs: standardized, they overflow {np.dtype(dtype)}"
            )
        return Xs.astype(dtype)
    X = jnp.asarray(X)
    return ((X - jnp.asarray(standardizer.mean, dtype)) / jnp.asarray(standardizer.scale, dtype)).astype(
        dtype
    )


@jax.jit
def _design(features, Xs):
    """$[D^{-1/2}\\cos(X_sW), D^{-1/2}\\sin(X_sW), X_s/\\sqrt d, 1]$ `(n, 2D + d + 1)`."""
    W = features.frequencies.astype(Xs.dtype)
    d, D = W.shape
    Z = jnp.matmul(Xs, W, precision=jax.lax.Precision.HIGHEST)
    one = jnp.ones((Xs.shape[0], 1), Xs.dtype)
    return jnp.concatenate(
        [jnp.cos(Z) / math.sqrt(D), jnp.sin(Z) / math.sqrt(D), Xs / math.sqrt(d), one], axis=1
    )


@jax.jit
def _rotated(Phi, rotation):
    """`Phi` `(n, b)` in the model's basis: `Phi @ rotation`, or `Phi` without a rotation."""
    if rotation is None:
        return Phi
    return jnp.matmul(Phi, rotation.astype(Phi.dtype), precision=jax.lax.Precision.HIGHEST)


def _laplace_rotation(Phi, y, weights, mean, scale) -> tuple[np.ndarray, np.ndarray]:
    r"""`(V, lam)`: the eigenvectors `(b, b)` and eigenvalues `(b,)` (float64 NumPy; the eigenvalues at least
    $1/\sigma_w^2$, as they are exactly) of the Laplace Hessian
    $\Phi^\top\mathrm{diag}(\text{weights}\,\sigma(1-\sigma))\Phi + I/\sigma_w^2$ at the MAP `mean`."""
    P = np.asarray(Phi, np.float64)
    p = 1.0 / (1.0 + np.exp(-(P @ np.asarray(mean, np.float64))))
    h = np.asarray(weights, np.float64) * p * (1.0 - p)
    H = P.T @ (P * h[:, None]) + np.eye(P.shape[1]) / float(scale) ** 2
    lam, V = np.linalg.eigh(0.5 * (H + H.T))
    return V, np.maximum(lam, 1.0 / float(scale) ** 2)


def _grid_scale(evaluate, candidates):
    """The candidate prior sds one by one (each Newton from the MAP of the one before): `(scales, log
    evidences, index of the largest finite one (0 if none), its payload)`."""
    payloads, evidence, init = [], [], None
    for s in candidates:
        payload, log_ev, _, mean = evaluate(s, init)
        payloads.append(payload)
        evidence.append(log_ev)
        init = mean if np.all(np.isfinite(mean)) else None
    ok = np.isfinite(evidence)
    k = int(np.argmax(np.where(ok, evidence, -np.inf))) if ok.any() else 0
    return list(candidates), evidence, k, payloads[k]


def _cubic_maximum(left, right) -> tuple[float, float]:
    """`(u, value)`: the maximum of the cubic that matches `(u, value, slope)` at `left` (slope > 0) and
    `right` (slope < 0), which lies between them (Nocedal and Wright's interpolation step, written for a
    maximum), and the cubic's value there."""
    (a, fa, ga), (b, fb, gb) = left, right
    d1 = ga + gb - 3.0 * (fa - fb) / (a - b)
    d2 = math.sqrt(d1 * d1 - ga * gb)  # ga * gb < 0: real
    u = b - (b - a) * (gb - d2 - d1) / (gb - ga - 2.0 * d2)
    h, t = b - a, (u - a) / (b - a)  # the cubic in Hermite form on [a, b]
    value = (2 * t**3 - 3 * t**2 + 1) * fa + (3 * t**2 - 2 * t**3) * fb
    value += h * ((t**3 - 2 * t**2 + t) * ga + (t**3 - t**2) * gb)
    return u, value


def _search_scale(
    evaluate,
    *,
    start: float = SCALE_START,
    bounds: tuple[float, float] = SCALE_BOUNDS,
    max_fits: int = MAX_SCALE_FITS,
    rtol: float = SCALE_RTOL,
    slope_tol: float = SLOPE_TOL,
    gain_tol: float = GAIN_TOL,
):
    r"""The prior sd $\sigma_w$ of the largest Laplace evidence: a search on $u = \log\sigma_w^2$ along
    the evidence's exact slope (`LaplaceInfo.log_evidence_slope`).

    From `start`, steps of $\log$ `SCALE_STEP` in $u$ uphill until the slope changes sign (or a bound is
    reached), then inside that bracket the maximum of the cubic that matches the log evidence and its slope
    at both ends (`_cubic_maximum`), each point at least half the tolerance inside the bracket. It stops
    once the bracket's ends are within a factor `1 + rtol` in $\sigma_w$ (the evidence being unimodal, the
    best scale evaluated is then within that factor of the maximum), where that cubic promises at most
    `gain_tol` nats over the better end, where the slope is within `slope_tol` nats of zero, at a bound the
    slope points beyond, or after `max_fits` fits. A fit whose evidence or slope is not finite is a wall:
    the search goes halfway back to the last finite scale (toward smaller scales, down to the bound, when
    there is none), and inside a bracket it ends the search. Each
    fit's Newton starts at the MAP of the nearest scale evaluated. The arguments are the module's constants
    unless a test passes others (`rtol > 0`, `max_fits >= 1`).

    Args:
      evaluate: `(scale, init) -> (payload, log_evidence, slope, mean)`, one Laplace fit at `scale` from
        `init` (a MAP, or `None`).

    Returns:
      `(scales, log_evidences, k, payload)`: every scale evaluated in order, their log evidences, the index
      of the largest finite one (0 if none is) and its payload.
    """
    tried: list = []  # (u, log evidence, slope, MAP, payload, scale)

    def run(u, scale=None):
        near = [t for t in tried if np.all(np.isfinite(t[3]))]
        init = min(near, key=lambda t: abs(t[0] - u))[3] if near else None
        scale = math.exp(0.5 * u) if scale is None else scale
        payload, log_ev, slope, mean = evaluate(scale, init)
        tried.append((u, log_ev, slope, mean, payload, scale))
        return math.isfinite(log_ev) and math.isfinite(slope)

    u_lo, u_hi = (2.0 * math.log(b) for b in bounds)
    wall_lo, wall_hi = -math.inf, math.inf  # where a fit was not finite: the search stays strictly inside
    tol_u, step = 2.0 * math.log1p(rtol), math.log(SCALE_STEP)
    left = right = last = None  # (u, log evidence, slope): below the maximum (slope > 0), above it, last finite
    start = min(max(start, bounds[0]), bounds[1])
    ok = run(2.0 * math.log(start), start)
    while len(tried) < max_fits:
        u, _, g = tried[-1][:3]
        if not ok:  # a wall
            if left is not None and right is not None:
                break
            if last is None:  # nothing finite yet: smaller scales, down to the bound
                if u <= u_lo + 0.5 * tol_u:
                    break
                wall_hi, target = u, max(u - step, u_lo)
            else:
                if u > last[0]:
                    wall_hi = u
                else:
                    wall_lo = u
                target = 0.5 * (u + last[0])
                if abs(target - last[0]) <= 0.5 * tol_u:
                    break
            ok = run(target)
            continue
        last = tried[-1][:3]
        if abs(g) <= slope_tol:
            break
        if g > 0:
            left = last
        else:
            right = last
        if left is not None and right is not None:  # the maximum lies between
            u_next, value = _cubic_maximum(left, right)
            if right[0] - left[0] <= tol_u or value - max(left[1], right[1]) <= gain_tol:
                break
            ok = run(min(max(u_next, left[0] + 0.5 * tol_u), right[0] - 0.5 * tol_u))
            continue
        # uphill: a step, within the bounds (the bound itself once the step ends within rtol of it), at most
        # halfway to a wall
        if g > 0:
            target = u_hi if u_hi - (u + step) < tol_u else u + step
            target = min(target, 0.5 * (u + wall_hi))
        else:
            target = u_lo if (u - step) - u_lo < tol_u else u - step
            target = max(target, 0.5 * (u + wall_lo))
        if abs(target - u) <= 0.5 * tol_u:
            break
        ok = run(target)
    finite = [i for i, t in enumerate(tried) if math.isfinite(t[1])]
    k = max(finite, key=lambda i: tried[i][1]) if finite else 0
    return [t[5] for t in tried], [t[1] for t in tried], k, tried[k][4]


def row_bucket(n: int, minimum: int = MIN_ROWS) -> int:
    """The smallest of `minimum` and `2^k (1 + j/4)` (`j = 0..3`) at least `n`: at most 25% padding, four
    compiled shapes per doubling."""
    if n <= minimum:
        return minimum
    k = (n - 1).bit_length() - 1  # 2^k < n <= 2^(k+1)
    for j in range(1, 5):
        size = (1 << k) + j * (1 << k) // 4 if k >= 2 else 1 << (k + 1)
        if size >= n:
            return size
    return 1 << (k + 1)


def fit_classifier(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    config: ClassifierConfig | None = None,
    *,
    dtype: DTypeLike = jnp.float32,
    min_rows: int | None = None,
) -> ClassifierFit:
    r"""Fits the DIRECT logistic classifier to raw inputs and 0/1 labels: standardization, median-heuristic
    lengthscale, random Fourier, linear and constant features, the prior sd of the largest Laplace evidence,
    Laplace-placed (or the paper's) grids and coordinate ascent from the Laplace start.

    The model is $P(y = 1 \mid x, w) = \sigma(\phi(x)^\top w)$ with
    $\phi(x) = [D^{-1/2}\cos(x_sW), D^{-1/2}\sin(x_sW), x_s / \sqrt d, 1]$ ($x_s$ the standardized input,
    $W = Z / \ell$, $Z$ standard normal), the prior $N(0, \sigma_w^2)$ on each weight's grid, and
    $\sigma_w$ the scale that maximizes the Laplace approximation to $\log p(y \mid \Phi, \sigma_w)$
    (a search along its slope, `docs/decisions/classifier.md#the-prior-sd-the-laplace-evidences-maximum`;
    with `config.prior_scales`, the best of those candidates). The mean-field posterior maximizes
    `fit_logistic`'s default (`"tilted"`) bound on the ELBO. The stages and their defaults are the module
    docstring's.

    The same `key` (and data, config and dtype) gives the same model: the key seeds the lengthscale's
    subsample and the frequencies (drawn in NumPy, so that no program is compiled per input width).

    Args:
      key: `jax.random` key.
      X: `(n, d)` raw inputs (any finite real values).
      y: `(n,)` labels 0 or 1 (bool, int or float).
      config: `ClassifierConfig` (`None`: the defaults).
      dtype: the fit's precision, `jnp.float32` (default) or `jnp.float64` (needs `jax_enable_x64`).
      min_rows: pad the training rows (zero weights) to the size that `max(n, min_rows)` rows take: pass
        the largest training set of several fits (the folds of a cross-validation) to give them all one
        compiled program. Default `n`.

    Returns:
      `ClassifierFit` `(model, info)`: a `FittedClassifier` (`model.predict_proba(X_new)`) and a
      `ClassifierInfo` (the chosen scale, the evidence of every scale evaluated, the fit's `FitInfo`, per-stage
      wall times).

    Raises:
      ValueError: naming the argument or field: `X` not 2-D, empty or not finite; `y` not 0/1 or of the
        wrong shape; a `config` field out of range (`config.width`, ...); `dtype` not float32/float64.
      TypeError: `key` not a `jax.random` key; `config` not a `ClassifierConfig`.

    Example:
      >>> import jax, numpy as np, kronvi
      >>> rng = np.random.default_rng(0)
      >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] ** 2 + X[:, 1] ** 2 > 1.4).astype(int)
      >>> model, info = kronvi.fit_classifier(jax.random.key(0), X, y)
      >>> p = model.predict_proba(X)
      >>> p.shape, bool(np.mean((np.asarray(p) > 0.5) == y) > 0.9)
      ((300,), True)
    """
    config = check_config(config)
    dtype = check_working_dtype(dtype)
    rng = _check_key(key)
    inputs = _check_inputs(X)
    n, d = inputs.shape
    if n < 2:
        raise ValueError(f"`X` has {n} row(s): a classifier needs at least 2 (of both labels)")
    labels = _check_labels(y, n)
    if min_rows is not None:
        min_rows = check_int(min_rows, "min_rows", 1)
    finfo = np.finfo(dtype)
    for s in config.prior_scales or ():  # each scale, its variance and its precision must be normal in `dtype`
        if not float(finfo.tiny) ** 0.5 < s < float(finfo.max) ** 0.5:
            raise ValueError(
                f"`config.prior_scales` holds {s!r}: its variance is not a normal {dtype} number (scales between "
                f"{float(finfo.tiny) ** 0.5:.1e} and {float(finfo.max) ** 0.5:.1e}); give a scale in the units of the "
                "standardized inputs' latent function (about 1-30)"
            )
    width = 4.0 if config.width is None else config.width  # resolved by check_config

    t0 = time.perf_counter()
    standardizer = standardizer_of(inputs)
    Xs = (inputs - standardizer.mean) / standardizer.scale
    ls = median_lengthscale(Xs, rng, config.lengthscale_points)
    z = rng.standard_normal((d, config.num_frequencies))
    features = RandomFourierFeatures(to_device((z / ls).astype(dtype)))  # placed by NumPy: no program
    t1 = time.perf_counter()

    rows = row_bucket(max(n, min_rows or 0))
    Phi = _design(features, to_device(pad_rows(Xs.astype(dtype), rows)))
    yy = to_device(pad_rows(labels.astype(dtype), rows))
    ww = to_device(pad_rows(np.ones(n, dtype), rows))
    jax.block_until_ready(Phi)
    t2 = time.perf_counter()

    b = Phi.shape[1]
    zeros = np.zeros(b, dtype)
    tol = to_device(100.0 * np.finfo(dtype).eps, dtype)  # `laplace_grid_prior`'s default

    def evaluate(s, init):
        """The Laplace fit under N(0, s^2) alone: `laplace_grid_prior`'s, without its checks of our own `Phi`
        and without a grid, which only the chosen scale needs; its evidence and slope from the Hessian of
        Newton's last iteration (`SEARCH`), the chosen scale's Hessian at its MAP below."""
        s = np.asarray(s, dtype)
        prec, mean = to_device(np.full(b, 1 / (s * s), dtype)), to_device(zeros)  # as `laplace_grid_prior`'s
        lap = run_single_threaded(
            laplace_fit, Phi, yy, ww, prec, mean, mean if init is None else to_device(init, dtype),
            max_iter=NEWTON_MAX_ITER, tol=tol, mode=SEARCH,
        )  # fmt: skip
        w, log_ev, slope = jax.device_get((lap.mean, lap.log_evidence, lap.log_evidence_slope))
        return lap, float(log_ev), float(slope), w

    if config.prior_scales is None:
        scales, evidence, k, lap = _search_scale(evaluate)
    else:
        scales, evidence, k, lap = _grid_scale(evaluate, config.prior_scales)
    scales = [float(np.asarray(s, dtype)) for s in scales]  # as the fits used them
    scale = scales[k]
    rotation = None
    if config.grid == "paper":
        prior = gaussian_prior(b, scale, levels=config.levels, width=width, dtype=dtype)
    else:  # the grids on the weights' Laplace marginals
        if not np.all(np.isfinite(np.asarray(lap.mean))):
            raise FloatingPointError(
                f"the Laplace fit at every prior sd evaluated ({', '.join(f'{s:.3g}' for s in scales)}) has a "
                "non-finite MAP: the features or labels are degenerate in this dtype (try dtype=np.float64)"
            )
        V, lam = _laplace_rotation(Phi, yy, ww, lap.mean, scale)  # the Hessian at the MAP
        if config.basis == "eigen":  # of the rotated weights
            # In V's basis the prior is the same and the Hessian diagonal: the rotated weights' MAP is V'w and
            # their Laplace sds 1 / sqrt(lam), with no second Newton solve; evidence and slope are unchanged.
            rotation = to_device(V, dtype)
            Phi = _rotated(Phi, rotation)
            mean, sd = to_device(V.T @ np.asarray(lap.mean, np.float64), dtype), to_device(lam**-0.5, dtype)
            lap = lap._replace(mean=mean, sd=sd)
        else:  # sqrt(diag(H^-1))
            lap = lap._replace(sd=to_device(np.sqrt(np.sum(V**2 / lam, axis=1)), dtype))
        prior = posterior_grid(lap.mean, lap.sd, to_device(scale, dtype), levels=config.levels, width=width)
    jax.block_until_ready(prior.values)
    t3 = time.perf_counter()

    q, fit_info = fit_logistic(
        Phi, yy, prior, method="cavi", max_iter=config.max_iter, tol=config.tol, weights=ww
    )
    jax.block_until_ready(q.logits)
    t4 = time.perf_counter()

    model = FittedClassifier(
        standardizer, features, to_device(ls, dtype), to_device(scale, dtype), prior, q,
        rotation,
    )
    info = ClassifierInfo(
        scale, to_device(np.asarray(evidence)), lap, fit_info, n, rows, t1 - t0, t2 - t1, t3 - t2, t4 - t3,
        tuple(scales),
    )
    return ClassifierFit(model, info)


# ----------------------------------------------------------------------------------------------------
# Prediction


@functools.partial(jax.jit, static_argnames=("chunk",))
def _traced_proba(model, Xs, *, chunk):
    """Probabilities inside a trace: row chunks of `chunk` through `lax.map` (default quadrature nodes)."""
    n, d = Xs.shape
    num = -(-n // chunk)
    Xs = jnp.concatenate([Xs, jnp.zeros((num * chunk - n, d), Xs.dtype)])

    def one(Xc):
        return predict_logistic(model.q_w, model.prior_w, _rotated(_design(model.features, Xc), model.rotation))

    return jax.lax.map(one, Xs.reshape(num, chunk, d)).reshape(-1)[:n]


def _traced_inputs(model, X):
    """`(dtype, Xs)` of a prediction: the model's dtype and, when `X` or the model is traced, `X` checked (shapes
    are static: checked while tracing) and standardized; `Xs` is `None` for concrete ones, which
    `_standardize` checks in float64."""
    if not isinstance(model, FittedClassifier):
        raise TypeError(f"`model` must be a FittedClassifier, got {type(model).__name__}")
    dtype = model.prior_w.values.dtype
    if is_concrete(X) and all(is_concrete(a) for a in jax.tree.leaves(model)):
        return dtype, None
    check_numeric(X, "X")
    X = jnp.asarray(X)
    check_input_columns(X.shape, np.shape(model.standardizer.mean)[-1])
    return dtype, _standardize(model.standardizer, X, dtype)


def predict_proba(model: FittedClassifier, X: ArrayLike) -> jax.Array:
    r"""$P(y = 1 \mid x) = E_q[\sigma(\phi(x)^\top w)]$ `(N,)` of a `FittedClassifier` for raw inputs
    `X` `(N, d)`: exact, `predict_logistic` on the model's features.

    Concrete inputs are standardized in float64 and predicted in chunks of at most `PREDICT_CHUNK` rows,
    every row with the fewest quadrature nodes whose bound, from its own margin, is within 1e-7 (float32)
    or 1e-13 (float64) (`row_nodes`), through one compiled program whatever the number of rows and their
    node counts (`predict_rows`): a row's probability does not depend on the rows predicted with it. Under `jit` the chunks run in `lax.map` with `predict_logistic`'s default nodes for
    traced inputs, whose error is larger on rows of very large margins (3e-4 on the rows of a separable
    set below; `predict_logistic(..., with_error_bound=True)` bounds it per row).

    Args:
      model: a `FittedClassifier` (`fit_classifier`).
      X: `(N, d)` raw inputs.

    Returns:
      `(N,)` probabilities of the label 1, in the model's dtype.

    Raises:
      ValueError: naming `X`: not 2-D, not finite, the wrong number of columns, or standardized values
        beyond the model's dtype.

    Example:
      >>> import jax, numpy as np, kronvi, kronvi.logistic as kl
      >>> X = np.random.default_rng(0).normal(size=(200, 3)); y = X[:, 0] > 0
      >>> model = kronvi.fit_classifier(jax.random.key(0), X, y).model
      >>> p = jax.jit(kl.predict_proba)(model, X[:5])
      >>> bool(np.allclose(p, model.predict_proba(X[:5]), atol=1e-3))
      True
    """
    dtype, Xs = _traced_inputs(model, X)
    if Xs is not None:
        return _traced_proba(model, Xs, chunk=min(max(Xs.shape[0], 1), 256))
    Xs = _standardize(model.standardizer, X, dtype)
    n = Xs.shape[0]
    if n == 0:
        return jnp.zeros((0,), dtype)
    out = []
    for start in range(0, n, PREDICT_CHUNK):
        Xc = Xs[start : start + PREDICT_CHUNK]
        out.append(_chunk_proba(model, Xc))
    return to_device(np.concatenate(out))


def predict_log_proba(model: FittedClassifier, X: ArrayLike) -> jax.Array:
    r"""$[\log P(y = 0 \mid x), \log P(y = 1 \mid x)]$ `(N, 2)` of a `FittedClassifier` for raw inputs `X`
    `(N, d)`, accurate in the tails, where `predict_proba`'s absolute error (1e-7 in float32) is larger than
    the probability itself.

    The smaller of the two probabilities, $E_q\sigma(\pm Z)$, lies between $E_q e^{\pm Z} - E_q e^{\pm 2Z}$ and
    $E_q e^{\pm Z}$ ($e^z - e^{2z} \le \sigma(z) \le e^z$ for every $z$), exact moment generating functions of
    the mean field. Where that bracket is narrower than the quadrature's interval (twice its error bound) or
    lies within its error, its midpoint is the estimate, with a relative error of at most
    $E e^{\pm 2Z} / (2 E e^{\pm Z})$; elsewhere the estimate is `predict_proba`'s, clipped into the bracket
    (a zero there: the middle of $[0, 10^{-7}]$ in float32). The larger probability is one minus the smaller: the two
    sum to one, and a row far on one side keeps a finite, ordered log-odds instead of a probability of
    exactly 0 (`docs/decisions/classifier.md#log-probabilities-in-the-tails`).

    Args:
      model: a `FittedClassifier` (`fit_classifier`).
      X: `(N, d)` raw inputs.

    Returns:
      `(N, 2)` log probabilities of the labels 0 and 1, in the model's dtype.

    Raises:
      ValueError: naming `X`, as `predict_proba`.

    Example:
      >>> import jax, numpy as np, kronvi, kronvi.logistic as kl
      >>> X = np.random.default_rng(2).normal(size=(200, 3)); y = X[:, 0] + 0.5 * X[:, 1] > 0
      >>> model = kronvi.fit_classifier(jax.random.key(0), X, y).model
      >>> far = np.array([[-2.0, -1.0, 0.0], [2.0, 1.0, 0.0]])
      >>> p = np.asarray(model.predict_proba(far))  # exact to 1e-7 (float32): the tails are rounding
      >>> bool(p[0] < 1e-6 and p[1] > 1 - 1e-6)
      True
      >>> L = np.asarray(kl.predict_log_proba(model, far))
      >>> bool(np.all(np.isfinite(L))), bool(L[0, 1] < -40 and L[1, 0] < -40)
      (True, True)
    """
    dtype, Xs = _traced_inputs(model, X)
    if Xs is not None:
        Phi = _rotated(_design(model.features, Xs), model.rotation)
        p, err = predict_logistic(model.q_w, model.prior_w, Phi, with_error_bound=True)
        L = _tail_mgfs(model.q_w.log_probs, model.prior_w.values, Phi)
        return _log_pair(p, L, err, target_error(dtype)).astype(dtype)
    p = np.asarray(predict_proba(model, X))
    n = p.shape[0]
    if n == 0:
        return jnp.zeros((0, 2), dtype)
    err = target_error(dtype)
    # The bracket matters only where the smaller probability is within a few thousand errors of 0: elsewhere
    # it contains the quadrature's estimate and its error bound (e^La >= P >= e^La - e^Lb).
    tail = np.flatnonzero(np.minimum(p, 1.0 - p) <= _TAIL_REACH * err)
    L = np.zeros((n, len(_TAIL_EXPONENTS)), dtype)  # elsewhere the bracket [0, 1]: the quadrature's estimate
    if tail.size:
        Xs = _standardize(model.standardizer, np.asarray(X)[tail], dtype)
        for start in range(0, tail.size, PREDICT_CHUNK):
            Xc = Xs[start : start + PREDICT_CHUNK]
            rows = Xc.shape[0]
            L[tail[start : start + rows]] = jax.device_get(
                _design_tail_mgfs(
                    model.features, model.rotation, model.q_w.log_probs, model.prior_w.values,
                    pad_rows(Xc, _bucket(rows)),
                )
            )[:rows]  # fmt: skip
    with np.errstate(divide="ignore"):  # log(0) of a probability the bracket then replaces
        pair = _log_pair(p.astype(np.float64), L.astype(np.float64), err, err, xp=np)
    return to_device(pair.astype(dtype))


_TAIL_REACH = 1e3  # predict_log_proba's bracket for rows whose smaller probability is at most this many errors
_TAIL_EXPONENTS = (1.0, 2.0, -1.0, -2.0)  # the MGFs of `_log_pair`'s brackets, in this order
_TAIL_BLOCK = 64  # rows per step of `_tail_mgfs`' loop: the (rows, 4, b, m) terms stay small


def _tail_mgfs(log_q, values, Phi):
    r"""$\log E_q e^{cZ}$ `(r, 4)` for $c$ in `_TAIL_EXPONENTS`, blocks of `_TAIL_BLOCK` rows."""
    r, b = Phi.shape
    num = -(-r // _TAIL_BLOCK)
    P = jnp.concatenate([Phi, jnp.zeros((num * _TAIL_BLOCK - r, b), Phi.dtype)]).reshape(num, _TAIL_BLOCK, b)
    c = jnp.broadcast_to(jnp.asarray(_TAIL_EXPONENTS, Phi.dtype), (_TAIL_BLOCK, len(_TAIL_EXPONENTS)))
    return jax.lax.map(lambda Pb: log_mgf(log_q, values, Pb, c), P).reshape(-1, len(_TAIL_EXPONENTS))[:r]


_jit_tail_mgfs = jax.jit(_tail_mgfs)


@jax.jit
def _design_tail_mgfs(features, rotation, log_q, values, Xs):
    return _tail_mgfs(log_q, values, _blocked_design(features, rotation, Xs))


def _log_pair(p, L, err, floor, xp=jnp):
    """`predict_log_proba` from the quadrature's probabilities `p` `(r,)`, their error bounds `err` (a scalar or
    `(r,)`) and the rows' log-MGFs `L` `(r, 4)` (`_tail_mgfs`), elementwise in the namespace `xp` (NumPy in
    float64 for concrete rows: no program per row count; `jax.numpy` in a trace). `floor`: the target error,
    the width of the interval a quadrature value of 0 stands for when the bracket says nothing."""
    p = xp.asarray(p, L.dtype)
    err = xp.broadcast_to(xp.asarray(err, L.dtype), p.shape)
    one_small = p <= 0.5  # the label whose probability is the smaller
    small = xp.where(one_small, p, 1.0 - p)
    La, Lb = _small_bracket(L, one_small, xp)
    log_two, log_err = math.log(2.0), xp.log(err)
    gap = Lb - La  # the bracket is [max(e^La - e^Lb, 0), e^La]
    lower = La + xp.log(-xp.expm1(xp.minimum(gap, -1e-30)))
    log_lo = xp.where(gap < 0, lower, -xp.inf)
    # its midpoint, where it is narrower than the quadrature's interval (twice its bound) or inside its error
    use_bracket = (Lb <= log_two + log_err) | (La <= log_err)
    mid = _bracket_midpoint(La, Lb, xp)
    # elsewhere the quadrature's, inside the bracket (a zero: the middle of [0, min(err, floor)])
    with_q = xp.clip(xp.log(small), log_lo, La)
    with_q = xp.where(xp.isfinite(with_q), with_q, xp.minimum(La, xp.log(xp.minimum(err, floor))) - log_two)
    log_small = xp.where(use_bracket, mid, with_q)
    log_large = xp.log1p(-xp.exp(log_small))
    return xp.stack(
        [xp.where(one_small, log_large, log_small), xp.where(one_small, log_small, log_large)], axis=1
    )


def _small_bracket(L, one_small, xp=jnp):
    r"""`(La, Lb)` `(r,)` of the label whose probability is the smaller, from the rows' log-MGFs `L` `(r, 4)`
    (`_tail_mgfs`): 1 where `one_small` (its MGFs at +1, +2), else 0 (-1, -2). Its probability lies in
    $[\max(e^{La} - e^{Lb}, 0), e^{La}]$."""
    return xp.where(one_small, L[:, 0], L[:, 2]), xp.where(one_small, L[:, 1], L[:, 3])


def _bracket_midpoint(La, Lb, xp=jnp):
    r"""The log of the midpoint of $[\max(e^{La} - e^{Lb}, 0), e^{La}]$."""
    gap = Lb - La
    return xp.where(gap < 0, La + xp.log1p(-0.5 * xp.exp(xp.minimum(gap, 0.0))), La - math.log(2.0))


def _bucket(rows: int) -> int:
    """Rows of a prediction program: 16, 64, 256, ... (powers of 4), at most `PREDICT_CHUNK`: few shapes per
    node count, whatever the sizes of the groups of rows that share one."""
    size = _PREDICT_MIN_ROWS
    while size < rows:
        size *= 4
    return min(size, PREDICT_CHUNK)


_DESIGN_BLOCK = 16  # rows of one features step in prediction (`_blocked_design`); the smallest row bucket


def _blocked_design(features, rotation, Xs):
    """`_rotated(_design(...))` of `Xs` `(r, d)` (`r` a multiple of `_DESIGN_BLOCK`) block by block."""
    r, d = Xs.shape
    blocks = Xs.reshape(r // _DESIGN_BLOCK, _DESIGN_BLOCK, d)
    Phi = jax.lax.map(lambda Xb: _rotated(_design(features, Xb), rotation), blocks)
    return Phi.reshape(r, -1)


@jax.jit
def _blocked_log_cosh(log_q, values, Phi):
    """`mgf_log_cosh` of `Phi` `(r, b)` (`r` a multiple of `_DESIGN_BLOCK`) block by block: a row's value
    whatever the rows beside it."""
    r, b = Phi.shape
    blocks = Phi.reshape(r // _DESIGN_BLOCK, _DESIGN_BLOCK, b)
    return jax.lax.map(lambda P: mgf_log_cosh(log_q, values, P), blocks).reshape(r)


@jax.jit
def _design_log_cosh(features, rotation, log_q, values, coefs, Xs):
    r"""The features `(r, b)`, each row's $\log E_q\cosh(\phi^\top w)$ `(r,)` and `(r,)` whether it must
    be recomputed by `log_mgf`: `even_log_cosh` with `coefs` (`host_coefficients`) on an even grid;
    `log_mgf` itself when `coefs` is `None`. In blocks of `_DESIGN_BLOCK` rows through one program body
    (`r` a multiple of it): XLA's CPU kernels round alike only at one shape, so a row's features and
    sums, and so its probability, are the same bits whatever the rows beside it."""

    def block(Xb):
        Phi = _rotated(_design(features, Xb), rotation)
        if coefs is not None:
            log_cosh, flag = even_log_cosh(coefs, Phi)
            return Phi, log_cosh, flag
        return Phi, mgf_log_cosh(log_q, values, Phi), jnp.zeros(Phi.shape[0], bool)

    r, d = Xs.shape
    Phi, log_cosh, flag = jax.lax.map(block, Xs.reshape(r // _DESIGN_BLOCK, _DESIGN_BLOCK, d))
    return Phi.reshape(r, -1), log_cosh.reshape(r), flag.reshape(r)


def _chunk_proba(model, Xc):
    """Probabilities of the standardized rows `Xc` (at most `PREDICT_CHUNK`): every row with the quadrature
    nodes its own margin needs (`row_nodes`), so that a row's probability does not depend on the rows
    predicted with it; rows beyond the node cap take the MGF bracket's midpoint where it is within the
    target error (`predict_log_proba`), the others `predict_logistic`'s own refinement."""
    rows = Xc.shape[0]
    dtype = Xc.dtype
    coefs = host_coefficients(model.q_w, model.prior_w) if is_even_grid(model.prior_w.values) else None
    Phi, log_cosh, flag = jax.device_get(
        _design_log_cosh(
            model.features, model.rotation, model.q_w.log_probs, model.prior_w.values, coefs,
            pad_rows(Xc, _bucket(rows)),
        )
    )  # fmt: skip
    Phi, log_cosh, flag = Phi[:rows], np.array(log_cosh[:rows]), flag[:rows]
    if np.any(flag):  # sums that may have underflowed: those rows' log E cosh by log_mgf
        idx = np.flatnonzero(flag)
        exact = _blocked_log_cosh(model.q_w.log_probs, model.prior_w.values, pad_rows(Phi[idx], _bucket(idx.size)))
        log_cosh[idx] = jax.device_get(exact)[: idx.size]
    nodes = row_nodes(log_cosh, dtype)
    p = np.empty(rows, dtype)
    big = nodes > MAX_NODES
    if np.any(big):  # beyond the cap: the MGF bracket where it is within the target, else predict_logistic's
        idx = np.flatnonzero(big)  # own refinement (and warning)
        L = jax.device_get(_jit_tail_mgfs(model.q_w.log_probs, model.prior_w.values, pad_rows(Phi[idx], _bucket(idx.size))))
        L = L[: idx.size].astype(np.float64)
        one_small = L[:, 0] <= L[:, 2]  # E e^Z <= E e^-Z: the label 1 is the less likely
        La, Lb = _small_bracket(L, one_small, np)
        tight = (Lb <= math.log(2.0 * target_error(dtype))) & (Lb < La)
        small = np.exp(_bracket_midpoint(La[tight], Lb[tight], np))
        p[idx[tight]] = np.where(one_small[tight], small, 1.0 - small)
        idx = idx[~tight]
        if idx.size:
            p[idx] = np.asarray(predict_logistic(model.q_w, model.prior_w, to_device(Phi[idx])))
    idx = np.flatnonzero(~big)
    order = idx[np.argsort(nodes[idx], kind="stable")]  # rows of like node counts share blocks
    p[order] = predict_rows(model.q_w, model.prior_w, Phi[order], nodes[order], log_cosh=log_cosh[order])
    return p
