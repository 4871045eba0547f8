r"""Gaussian-process hyperparameters by maximizing the exact log marginal likelihood.

DIRECT's random-feature models need a kernel (lengthscales, signal variance) and a noise level. They are
initialized, as in Evans & Nair (2018, Sec. 5), from an exact GP fit on a subsample of at most
`num_points` training rows. The GP marginal likelihood is multimodal: besides the optimum that explains
the data by a function, there is a *degenerate* one that explains everything as noise (noise variance
$\approx \operatorname{var}(y)$, lengthscales at a bound or no signal variance), and a single
optimizer run from a poor start can end there (test RMSE = std of y). `fit_gp_hyperparameters`
therefore runs several starts in parallel (batched by `vmap` on accelerators, side by side on a CPU's
cores), keeps every parameter inside sane bounds by
construction, and prefers a non-degenerate optimum whose likelihood is comparable to the best one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import math
import operator
import os
import threading
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.buckets import choice_rows, pad_rows, row_bucket, to_device
from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_nonempty,
    check_nonnegative_number,
    check_positive,
    check_xy,
    fetch,
    host_arrays,
    is_concrete,
    num_nonfinite,
)
from .._base.compiling import quick_jit
from .._base.deprecation import renamed_arguments
from .._base.precision import dot, matmul
from .._base.threads import run_single_threaded, single_blas_thread
from .._solvers.lbfgs import minimize_lbfgs
from .features import MATERN_NU, check_kernel
from .gp_host import HostRows, handle_lml, handle_loo_mse, host_scales
from .gp_host import host_lml as _host_lml

# Bounds, relative to the reference scales (lengthscales: median column std of X; variances: var(y)).
_LENGTHSCALE_BOUNDS = (1e-2, 1e3)
_SIGNAL_BOUNDS = (1e-4, 1e2)
_NOISE_UPPER = 10.0
# Starts whose log marginal likelihoods differ by less than this are a tie (float32 rounding of the
# likelihood is ~0.2 nats at 300 rows): the first such start is returned.
_TIE_NATS = 0.5
# A start whose noise variance ends at most this fraction of var(y) (float32's noise floor, where the pinned-noise
# rule was measured) interpolates the rows: `_choose` weighs it as one pinned at the bound
# (docs/decisions/gp-step.md#an-interpolating-start-is-weighed-as-a-pinned-one).
_INTERPOLATING = 1e-4
# From this many rows a float32 likelihood gradient on a CPU inverts K with LAPACK's potri in the host
# (_cholesky_inverse); below, in XLA.
_HOST_INVERSE_MIN_ROWS = 400
# Held while a GP program that calls back into Python runs (_run_starts' workers, _run_held).
_HOST_CALLBACKS = threading.Lock()
# Where fit_gp_hyperparameters computes the likelihood (its `precision`).
PRECISIONS = ("native", "float64")
# Start i uses lengthscales sqrt(d) * _LENGTHSCALE_FACTORS[i % 8] and noise _NOISE_FRACTIONS[i % 8] * var(y).
_LENGTHSCALE_FACTORS = (1.0, 0.3, 3.0, 0.1, 1.0, 0.3, 3.0, 10.0)
_NOISE_FRACTIONS = (0.1, 0.01, 0.1, 0.01, 0.5, 0.3, 0.3, 0.1)


class GPHyperparameters(NamedTuple):
    r"""Hyperparameters of a GP with squared-exponential ARD kernel and Gaussian noise.

    $k(x, x') = s^2 \exp(-\tfrac12 \sum_d (x_d - x'_d)^2 / \ell_d^2)$, $y = f(x) + \varepsilon$,
    $\varepsilon \sim N(0, \sigma^2)$.

    Attributes:
      lengthscales: `(d,)` $\ell_d > 0$.
      signal_variance: `()` $s^2 > 0$.
      noise_variance: `()` $\sigma^2 > 0$.
    """

    lengthscales: jax.Array
    signal_variance: jax.Array
    noise_variance: jax.Array


class GPFitInfo(NamedTuple):
    """Diagnostics of `fit_gp_hyperparameters`; per-start arrays have a leading `(S,)` axis.

    Attributes:
      log_marginal_likelihoods: `(S,)` final log marginal likelihood of each start on the subsample
        (`-inf` where a start failed numerically).
      chosen: `()` index of the start that was returned.
      degenerate: `()` whether the returned optimum is degenerate (explains the data as noise); true
        only when no start found a comparable non-degenerate optimum.
      degenerate_starts: `(S,)` which starts ended at a degenerate optimum.
      starts: `GPHyperparameters` stacked `(S, ...)`, the optimum of every start.
      loo_mse: `(S,)` leave-one-out mean squared error of each start's posterior mean on the subsample
        (compare with `var(y)`: a degenerate start predicts no better than the mean).
      num_iterations: `(S,)` L-BFGS iterations of every start.
      converged: `(S,)` whether the gradient-norm criterion was met (rather than `max_iter` or a stall).
      grad_norms: `(S,)` final gradient norm of $-\\log p / n$ in the unconstrained parameters.
      num_points: `()` rows of the subsample the likelihood was computed on.
      noise_at_bound: `(S,)` which starts ended with the noise variance pinned at its lower bound.
      screened: with `restarts="screened"`, the `GPFitInfo` of the screening run
        (every start, on `screen_points` rows); else `None`. In a fit whose GP step was refined on more rows
        (`kronvi.GPOptions.refine_points`), the info is the refinement's (one start) and `screened` the
        search's, whose own `screened` is the screening.
    """

    log_marginal_likelihoods: jax.Array
    chosen: jax.Array
    degenerate: jax.Array
    degenerate_starts: jax.Array
    starts: GPHyperparameters
    loo_mse: jax.Array
    num_iterations: jax.Array
    converged: jax.Array
    grad_norms: jax.Array
    num_points: jax.Array
    noise_at_bound: jax.Array
    screened: GPFitInfo | None = None


class GPFit(NamedTuple):
    """What `fit_gp_hyperparameters` returns: the chosen hyperparameters and how they were found.

    Attributes:
      hyper: `GPHyperparameters`.
      info: `GPFitInfo`.
    """

    hyper: GPHyperparameters
    info: GPFitInfo


def _sq_dists(X1, X2, lengthscales):
    A = X1 / lengthscales
    B = X2 / lengthscales
    d2 = jnp.sum(A**2, -1)[:, None] + jnp.sum(B**2, -1)[None, :] - 2.0 * matmul(A, B.T)
    return jnp.maximum(d2, 0.0)


def _kernel(hyper, X1, X2, kernel="rbf"):
    return hyper.signal_variance * unit_kernel(_sq_dists(X1, X2, hyper.lengthscales), kernel)


def unit_kernel(d2, kernel="rbf"):
    r"""The kernel of signal variance 1 at squared scaled distances `d2` ($|x - x'|^2$ over the lengthscales):
    $e^{-d^2/2}$ (`"rbf"`), $(1 + r + r^2/3)e^{-r}$ with $r = \sqrt{5 d^2}$ (`"matern52"`), $(1 + r)e^{-r}$ with
    $r = \sqrt{3 d^2}$ (`"matern32"`); differentiable at $d^2 = 0$ (the square root's gradient is masked
    there, where a Matérn kernel's derivative in $d^2$ is finite and $d^2$'s in the inputs is zero)."""
    if kernel == "rbf":
        return jnp.exp(-0.5 * d2)
    positive = d2 > 0
    r = jnp.where(positive, jnp.sqrt(jnp.where(positive, (2.0 * MATERN_NU[kernel]) * d2, 1.0)), 0.0)
    poly = 1.0 + r + r * r / 3.0 if kernel == "matern52" else 1.0 + r
    return poly * jnp.exp(-r)


@jax.custom_vjp
def _gaussian_log_density(K, y):
    r"""$\log N(y \mid 0, K) + \tfrac n2 \log 2\pi$, with the closed-form gradient
    $\partial/\partial K = \tfrac12(\alpha\alpha^\top - K^{-1})$, $\partial/\partial y = -\alpha$
    (Rasmussen & Williams 2006, eq. 5.9); cheaper than differentiating through the Cholesky factorization.
    """
    return _gaussian_log_density_fwd(K, y)[0]


def _gaussian_log_density_fwd(K, y):
    L = jnp.linalg.cholesky(K)
    alpha = jax.scipy.linalg.cho_solve((L, True), y)
    value = -0.5 * dot(y, alpha) - jnp.sum(jnp.log(jnp.diagonal(L)))
    return value, (L, alpha)


def _gaussian_log_density_bwd(res, g):
    L, alpha = res
    K_inv = _cholesky_inverse(L)
    dK = 0.5 * g * (jnp.outer(alpha, alpha) - K_inv)
    return dK, -g * alpha


def _cholesky_inverse(L):
    r"""$K^{-1}$ from the lower Cholesky factor $L$ of $K$. In float32 on a CPU from `_HOST_INVERSE_MIN_ROWS`
    rows, LAPACK's `potri` in the host ($\tfrac23 m^3$ flops, about a third of the time of the two
    triangular solves with the identity, the bulk of a likelihood gradient); elsewhere those two solves in
    XLA (below 400 rows they are the faster, and the program has no host callback, so it can run beside
    others). Not for float64: the callback runs on an XLA thread, where a `jax.enable_x64` context
    (thread-local) does not hold, and its float64 operand would arrive as float32."""

    def in_xla(L):
        return jax.scipy.linalg.cho_solve((L, True), jnp.eye(L.shape[-1], dtype=L.dtype))

    if not _inverts_on_host(L.shape[-1], L.dtype):
        return in_xla(L)

    def on_host(L):
        out = jax.ShapeDtypeStruct(L.shape, L.dtype)
        lower = jax.pure_callback(_potri, out, L, vmap_method="sequential")
        return jnp.tril(lower) + jnp.tril(lower, -1).mT  # fused by XLA; in NumPy it cost a quarter of potri

    return lax.platform_dependent(L, cpu=on_host, default=in_xla)


def _inverts_on_host(rows, dtype):
    """Whether the likelihood gradient on `rows` rows of `dtype` inverts K with `potri` in the host (on
    a CPU; elsewhere `_cholesky_inverse` stays in XLA)."""
    return dtype == jnp.float32 and rows >= _HOST_INVERSE_MIN_ROWS


def _likelihood_on_host(precision, dtype):
    """Whether `precision` puts the whole likelihood in the host (`_lml64`) for inputs of `dtype`."""
    return precision == "float64" and dtype != jnp.float64


def _potri(L):
    from scipy.linalg import lapack

    L = np.asarray(L)
    potri = lapack.dpotri if L.dtype == np.float64 else lapack.spotri
    # L (C order) is, read in Fortran order, the upper factor L^T of the same K: LAPACK takes it with no
    # reordering copy, and the transpose of its answer (upper triangle) is C-ordered with K^{-1} in the
    # lower triangle
    inv, info = potri(L.T, lower=0)
    if info != 0 or not np.all(np.isfinite(np.diagonal(L))):  # a failed factorization: the fit sees NaN
        return np.full(L.shape, np.nan, L.dtype)
    return inv.T  # K^{-1} in the lower triangle (the caller mirrors it)


_gaussian_log_density.defvjp(_gaussian_log_density_fwd, _gaussian_log_density_bwd)


def _lml(hyper, X, y, w=None, kernel="rbf"):
    """The log marginal likelihood; with row weights `w` (1: a row, 0: padding, whose `y` is 0), of the rows
    of weight 1 only: padding rows get unit variance and no covariance, so they add nothing."""
    n = X.shape[0]
    K = _kernel(hyper, X, X, kernel)
    if w is None:
        K = 0.5 * (K + K.T) + hyper.noise_variance * jnp.eye(n, dtype=X.dtype)
        count = n
    else:
        K = 0.5 * (K + K.T) * (w[:, None] * w[None, :]) + jnp.diag(hyper.noise_variance * w + (1 - w))
        count = jnp.sum(w)
    return _gaussian_log_density(K, y) - 0.5 * count * jnp.log(jnp.asarray(2 * math.pi, X.dtype))


def _cholesky(hyper, X, w=None, kernel="rbf"):
    """The Cholesky factor of the kernel matrix of `_lml` (with row weights `w`)."""
    K = _kernel(hyper, X, X, kernel)
    if w is None:
        K = 0.5 * (K + K.T) + hyper.noise_variance * jnp.eye(X.shape[0], dtype=X.dtype)
    else:
        K = 0.5 * (K + K.T) * (w[:, None] * w[None, :]) + jnp.diag(hyper.noise_variance * w + (1 - w))
    return jnp.linalg.cholesky(K)


def _host_call(theta, X, y, w, with_grad, kernel):
    """`_host_lml` (`gp_host.host_lml`) through `jax.pure_callback`: `(value, gradient)` in the dtype of `X`."""
    out = jax.ShapeDtypeStruct((), X.dtype), jax.ShapeDtypeStruct(theta.shape, X.dtype)
    host = functools.partial(_host_lml, with_grad=with_grad, kernel=kernel)
    return jax.pure_callback(host, out, theta, X, y, w=w, vmap_method="sequential")


def _lml64(theta, X, y, w=None, kernel="rbf"):
    """`_lml64_weighted` with every row of weight 1 unless `w` says otherwise."""
    return _lml64_weighted(theta, X, y, jnp.ones(X.shape[0], X.dtype) if w is None else w, kernel)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _lml64_weighted(theta, X, y, w, kernel):
    """The log marginal likelihood at the log-parameters `theta` of the rows of weight 1 (`_host_lml`:
    float64, on the host) with `kernel`; differentiable in `theta` only."""
    return _host_call(theta, X, y, w, with_grad=False, kernel=kernel)[0]


def _lml64_fwd(theta, X, y, w, kernel):
    value, grad = _host_call(theta, X, y, w, with_grad=True, kernel=kernel)
    return value, (grad, X, y, w)


def _lml64_bwd(kernel, res, g):
    grad, X, y, w = res
    return g * grad, jnp.zeros_like(X), jnp.zeros_like(y), jnp.zeros_like(w)


_lml64_weighted.defvjp(_lml64_fwd, _lml64_bwd)


def _loo_mse(hyper, X, y, w, kernel="rbf"):
    r"""Leave-one-out mean squared error of the GP posterior mean, $\operatorname{mean}_i
    (\alpha_i / [K_y^{-1}]_{ii})^2$ (Rasmussen & Williams 2006, eq. 5.12), over the rows of weight 1
    (padding rows have $\alpha_i = 0$)."""
    L = _cholesky(hyper, X, w, kernel)
    Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(X.shape[0], dtype=X.dtype), lower=True)
    alpha = matmul(Linv.T, matmul(Linv, y))
    return jnp.sum((alpha / jnp.sum(Linv**2, axis=0)) ** 2) / jnp.sum(w)


def _check_hyper(hyper, d, name="hyper"):
    if not isinstance(hyper, GPHyperparameters):
        raise TypeError(f"`{name}` must be GPHyperparameters, got {type(hyper).__name__}")
    ls = jnp.asarray(hyper.lengthscales)
    if ls.shape != (d,):
        raise ValueError(f"`{name}.lengthscales` must have shape ({d},), got {tuple(ls.shape)}")
    for field in ("signal_variance", "noise_variance"):
        v = jnp.asarray(getattr(hyper, field))
        if v.ndim != 0:
            raise ValueError(f"`{name}.{field}` must be a scalar, got shape {tuple(v.shape)}")
    for field in GPHyperparameters._fields:
        check_finite(jnp.asarray(getattr(hyper, field)), f"{name}.{field}")
        check_positive(jnp.asarray(getattr(hyper, field)), f"{name}.{field}")


def _validate_xy(X: ArrayLike, y: ArrayLike) -> tuple[jax.Array, jax.Array]:
    X, y = check_xy(X, y, what="(num_points, num_inputs)")
    check_nonempty(X, "X")
    if X.shape[1] == 0:
        raise ValueError(f"`X` has no columns (shape {tuple(X.shape)})")
    check_finite(X, "X")
    check_finite(y, "y")
    dtype = jnp.result_type(X, y)
    return X.astype(dtype), y.astype(dtype)


def gp_log_marginal_likelihood(
    hyper: GPHyperparameters, X: ArrayLike, y: ArrayLike, *, kernel: str = "rbf"
) -> jax.Array:
    r"""Exact log marginal likelihood of a zero-mean GP regression model.

    $$
    \log p(y \mid X, \theta) = -\tfrac12 y^\top (K + \sigma^2 I)^{-1} y
    - \tfrac12 \log\lvert K + \sigma^2 I\rvert - \tfrac n2 \log 2\pi,
    $$

    computed from the Cholesky factor $LL^\top = K + \sigma^2 I$ in $O(n^3)$ time and
    $O(n^2)$ memory. Differentiable in `hyper` (and `X`, `y`); runs under `jit`/`vmap`.

    Args:
      hyper: `GPHyperparameters` with `lengthscales` of shape `(d,)`.
      X: inputs `(n, d)`.
      y: targets `(n,)` (centred: the GP has zero mean).
      kernel: `"rbf"` (the squared exponential of `GPHyperparameters`, default), `"matern52"` or
        `"matern32"` (Matérn 5/2 and 3/2 of the same scaled distance).

    Returns:
      A scalar in the promoted dtype of `X` and `y`.

    References:
      Rasmussen & Williams (2006), *Gaussian Processes for Machine Learning*, eq. (2.30) and Algorithm 2.1.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> h = kronvi.inputs.GPHyperparameters(jnp.ones(1), jnp.asarray(1.0), jnp.asarray(1.0))
      >>> # one point: y ~ N(0, s2 + noise) = N(0, 2)
      >>> round(float(kronvi.inputs.gp_log_marginal_likelihood(h, jnp.zeros((1, 1)), jnp.zeros(1))), 4)
      -1.2655
    """
    check_kernel(kernel)
    X, y = _validate_xy(X, y)
    _check_hyper(hyper, X.shape[1])
    hyper = jax.tree.map(lambda a: jnp.asarray(a, X.dtype), hyper)
    return _lml(hyper, X, y, kernel=kernel)


# ----------------------------------------------------------------------------------------------------
# Fitting


class _Bounds(NamedTuple):
    """Log-space bounds `(lo, hi)` of the packed vector `[log l (d), log s2, log noise]`."""

    lo: jax.Array
    hi: jax.Array


def _log_params(u, bounds: _Bounds):
    """The packed log-parameters `[log l (d), log s2, log noise]` of the unconstrained `u`."""
    return bounds.lo + (bounds.hi - bounds.lo) * jax.nn.sigmoid(u)


def _unpack(u, bounds: _Bounds) -> GPHyperparameters:
    p = jnp.exp(_log_params(u, bounds))
    return GPHyperparameters(p[:-2], p[-2], p[-1])


def _pack(hyper: GPHyperparameters, bounds: _Bounds):
    theta = jnp.concatenate(
        [
            jnp.log(hyper.lengthscales),
            jnp.log(hyper.signal_variance)[None],
            jnp.log(hyper.noise_variance)[None],
        ]
    )
    frac = (theta - bounds.lo) / (bounds.hi - bounds.lo)
    eps = 1e-3  # keep starts strictly inside the bounds
    frac = jnp.clip(frac, eps, 1 - eps)
    return jnp.log(frac) - jnp.log1p(-frac)


@functools.partial(jax.jit, static_argnums=(0, 1, 3))
def _default_starts(num_starts, d, var_y, dtype):
    i = jnp.arange(num_starts) % len(_LENGTHSCALE_FACTORS)
    factors = jnp.asarray(_LENGTHSCALE_FACTORS, dtype)[i]
    fracs = jnp.asarray(_NOISE_FRACTIONS, dtype)[i]
    ls = jnp.sqrt(jnp.asarray(d, dtype)) * factors[:, None] * jnp.ones((1, d), dtype)
    return GPHyperparameters(ls, var_y * (1 - fracs), var_y * fracs)


def _is_degenerate(hyper, loo_mse, var_y, ls_lo, ls_hi, active):
    """A start explains the data as noise: its leave-one-out error or its noise variance is ~ var(y),
    or every lengthscale (of a non-constant input) sits at the same bound."""
    noise_dominates = hyper.noise_variance >= 0.9 * var_y
    no_prediction = ~(loo_mse < 0.9 * var_y)
    ls = hyper.lengthscales
    all_long = jnp.all(jnp.where(active, ls >= 0.5 * ls_hi, True))
    all_short = jnp.all(jnp.where(active, ls <= 2.0 * ls_lo, True))
    return noise_dominates | no_prediction | all_long | all_short


def _choose(lmls, degenerate, pinned, loo, margin):
    """The start `fit_gp_hyperparameters` returns: `_select`'s, unless its noise is `pinned` (at the lower
    bound, or interpolating: at most `_INTERPOLATING` var(y)) and a non-pinned non-degenerate start predicts at
    least as well by leave-one-out (then the best such one by likelihood). A pinned start is an optimum of the
    bound or of an interpolant, not of the data's noise (e.g. integer targets or repeated rows that the GP
    interpolates): its likelihood is not comparable (docs/decisions/gp-step.md#screened-starts)."""
    chosen = _select(lmls, degenerate, margin)
    alt_ok = ~pinned & ~degenerate & (loo <= loo[chosen])
    alt = jnp.argmax(jnp.where(alt_ok, lmls, -jnp.inf))
    return jnp.where(pinned[chosen] & jnp.any(alt_ok), alt, chosen)


def _select(lmls, degenerate, margin):
    """Index of the best start, preferring a non-degenerate one within `margin` nats of the best; among
    starts within `_TIE_NATS` of that one (and as degenerate), the first: a near-tie is decided by start
    order, not by rounding (docs/decisions/gp-step.md#rounding-decides-between-near-equal-starts)."""
    best = jnp.argmax(lmls)
    good_lmls = jnp.where(degenerate, -jnp.inf, lmls)
    best_good = jnp.argmax(good_lmls)
    use_good = degenerate[best] & (good_lmls[best_good] >= lmls[best] - margin)
    chosen = jnp.where(use_good, best_good, best)
    tied = (lmls >= lmls[chosen] - _TIE_NATS) & (degenerate == degenerate[chosen])
    return jnp.argmax(tied)


@renamed_arguments(num_restarts="num_starts")
def fit_gp_hyperparameters(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    *,
    num_points: int = 1000,
    num_starts: int = 4,
    max_iter: int = 200,
    tol: float = 1e-5,
    gain_tol: float = 0.1,
    min_noise_variance: float | None = None,
    degenerate_margin: float = 2.0,
    init: GPHyperparameters | None = None,
    parallel_restarts: bool | None = None,
    restarts: str = "all",
    screen_points: int = 300,
    precision: str = "float64",
    kernel: str = "rbf",
) -> GPFit:
    r"""GP hyperparameters by maximizing the exact marginal likelihood from several starts.

    `min(n, num_points)` rows are drawn without replacement with `key` (all rows when `n` is
    smaller; the result is deterministic given `key`). Each start maximizes
    `gp_log_marginal_likelihood` on that subsample with `optax.lbfgs` over an unconstrained
    $u$ with $\log\theta = \log\theta_{lo} + (\log\theta_{hi} - \log\theta_{lo})\,
    \mathrm{sigmoid}(u)$, so every parameter stays inside its bounds:

    * lengthscales in $[10^{-2}, 10^{3}] \cdot c$ with $c$ the median column standard deviation
      of the subsample (1 for standardized inputs);
    * signal variance in $[10^{-4}, 10^{2}] \cdot \operatorname{var}(y)$;
    * noise variance in $[\sigma^2_{\min}, 10\,\operatorname{var}(y)]$.

    The starts run in parallel under `vmap` on accelerators and in turn on a CPU (`parallel_restarts`). Start `i`
    has lengthscales $\sqrt d \cdot (1, 0.3, 3, 0.1, 1, 0.3, 3, 10)_i$, noise variance
    $(0.1, 0.01, 0.1, 0.01, 0.5, 0.3, 0.3, 0.1)_i \operatorname{var}(y)$ and signal variance
    $\operatorname{var}(y)$ minus the noise (cycling for more than 8 starts).

    A start is *degenerate* when it explains the data as noise: noise variance
    $\ge 0.9\operatorname{var}(y)$, a leave-one-out mean squared error of its posterior mean
    $\ge 0.9\operatorname{var}(y)$ (it predicts no better than the mean; this also catches a
    lengthscale so short that the "signal" is white noise), or every lengthscale of a non-constant input
    within a factor 2 of the same bound. The start with the largest
    marginal likelihood is returned, unless it is degenerate and a non-degenerate start is within
    `degenerate_margin` nats of it, in which case the best non-degenerate start is returned instead.
    `info.degenerate` reports whether the returned optimum is still degenerate (then the data show no
    signal the GP can find: check the inputs). A start whose noise variance ends pinned at its lower bound
    (`info.noise_at_bound`) optimized the bound, not the data (integer targets that the GP can
    interpolate do this), and one whose noise variance ends at most $10^{-4}\operatorname{var}(y)$ interpolates
    the rows (repeated rows reward it); when the chosen start is either and a start that is neither, and not
    degenerate, has a leave-one-out error at least as small, the best such start is returned instead.

    Inputs are expected standardized (`kronvi.inputs.fit_standardizer`) and `y` centred.

    Args:
      key: PRNG key for the subsample.
      X: training inputs `(n, d)`.
      y: training targets `(n,)`, centred.
      num_points: maximum subsample size (the cost is $O(\text{num\_points}^3)$ per iteration).
      num_starts: number of starts `S` (ignored when `init` is given).
      max_iter: maximum L-BFGS iterations per start.
      tol: stop a start when the gradient norm of $-\log p / n$ in $u$ falls below `tol`;
        a start also stops when an iteration no longer decreases the objective.
      gain_tol: stop a start when two iterations in a row each raise its log marginal likelihood by
        less than `gain_tol` nats (`0`: never). A likelihood ratio under $e^{0.1} \approx 1.1$ (the
        default) tells the hyperparameters apart no better than the float32 likelihood's own rounding
        at small noise (above), and such iterations can be a large share of a start's evaluations
        (`docs/decisions/gp-step.md#when-a-start-stops`).
      min_noise_variance: lower bound of the noise variance; default
        $10^{-6}\operatorname{var}(y)$ for a fit in float64 (the default `precision`, or float64 inputs)
        and $10^{-4}\operatorname{var}(y)$ in float32 (where a smaller noise makes the Cholesky
        factorization fail).
      degenerate_margin: how many nats below the best start a non-degenerate start may be and still be
        preferred to a degenerate best (a log Bayes factor).
      init: optional starting points, `GPHyperparameters` stacked `(S, ...)`, replacing the
        default starts (clipped into the bounds).
      restarts: `"all"` (default): every start runs on the subsample and the rule above picks one.
        `"screened"`: every start runs on the first `screen_points` rows of the subsample and the rule
        picks one; on the whole subsample, that one is refined from its screened optimum and the first
        (data-driven) start runs from cold, and the rule picks between the two (one start when the
        screening chose the first). The starts cost $O(\text{screen\_points}^3)$ per iteration instead
        of $O(\text{num\_points}^3)$. If the refined winner fails numerically, or the choice is
        degenerate or has its noise variance at the lower bound, every start runs on the whole subsample
        (with concrete inputs; inside `jit` there is no fallback).
        `info` describes the refinement (one or two starts) or the fallback, and `info.screened` the
        screening. Why both the winner and the first start: `docs/decisions/gp-step.md#screened-starts`.
      screen_points: rows of the screening run of `restarts="screened"`.
      parallel_restarts: run the starts in parallel with `vmap` (`True`) or as one program per start
        (`False`). With `False`, concrete inputs on a CPU and `precision="float64"`, the rows stay in
        host memory and one program, whose shapes do not depend on the rows, runs each start in turn
        with its likelihood computed on the host: a new row count compiles nothing
        (`docs/decisions/gp-step.md#the-gp-programs-see-no-rows`). With `"native"`, the starts run side
        by side from host threads, one per core, when the inputs are concrete; one after another with
        `lax.map` inside `jit` or on one core (with concrete inputs the two give the same results to the
        bit). Default: `vmap` on GPU/TPU, separate programs on CPU, where a `vmap`-batched Cholesky gains
        nothing over sequential calls and, with few cores, can deadlock XLA's CPU thread pool (batched
        LAPACK kernels waiting on each other's pool tasks).
      precision: `"float64"` (default): the whole fit in float64, whatever the dtype of `X`: for concrete
        inputs of a narrower dtype, the subsample, the optimizer, the likelihood, the bounds and the choice
        of start run under a `jax.enable_x64` context (thread-local: JAX's global configuration does not
        change), and the result is returned in the dtype of `X` (integers in int32). Float64 NumPy `X`
        and `y` are fitted at their own values even where JAX would round them to float32, so a float32
        and a float64 working dtype get the same fit from the same float64 rows (the pipeline passes them
        so), and so do one and several host devices. Inside `jit` (traced inputs) only the likelihood and
        its gradient are float64, computed on the host (NumPy and LAPACK through `jax.pure_callback`).
        `"native"`: everything in the dtype of `X` (float32's $K^{-1}$ from LAPACK's `potri` on a CPU).
        The float32 likelihood is off by 0.02-8 nats at the small noise levels of many datasets' optima, and
        its rounding (which also changes with XLA's CPU kernels, e.g. with four host devices) moves where
        a start stops on a flat likelihood
        (`docs/decisions/gp-step.md#the-gp-step-in-float64-whatever-the-working-dtype`).
      kernel: the kernel family whose hyperparameters are fitted: `"rbf"` (squared exponential, default),
        `"matern52"` or `"matern32"` (`gp_log_marginal_likelihood(kernel=...)`). The likelihoods of two
        families on the same `key` and rows compare their evidence (`kronvi.DirectConfig(kernel="auto")`).

    Returns:
      `GPFit` `(hyper, info)`: the chosen `GPHyperparameters` and a `GPFitInfo`.

    References:
      Rasmussen & Williams (2006), Sec. 5.4.1 (marginal likelihood, local optima, Fig. 5.5); Evans &
      Nair (2018), Sec. 5 (GP initialization of DIRECT's kernel hyperparameters).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> X = jnp.linspace(-2, 2, 40)[:, None]
      >>> y = jnp.sin(2 * X[:, 0]) + 0.1 * jax.random.normal(jax.random.key(1), (40,))
      >>> hyper, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), X, y - y.mean())
      >>> bool(hyper.noise_variance < 0.1 * jnp.var(y)), bool(info.degenerate)
      (True, False)
    """
    rows64 = _numpy_float64(X, y) if precision == "float64" else None
    X, y = _validate_xy(X, y)
    n, d = X.shape
    num_points = int(num_points)
    if num_points < 2:
        raise ValueError(f"`num_points` must be >= 2, got {num_points}")
    if int(max_iter) < 1:
        raise ValueError(f"`max_iter` must be >= 1, got {max_iter}")
    if not float(degenerate_margin) >= 0:
        raise ValueError(f"`degenerate_margin` must be >= 0, got {degenerate_margin}")
    if not float(tol) >= 0:
        raise ValueError(f"`tol` must be >= 0, got {tol}")
    check_nonnegative_number(gain_tol, "gain_tol")
    if n < 2:
        raise ValueError(f"`X` needs at least 2 rows to fit a GP, got {n}")
    if restarts not in ("all", "screened"):
        raise ValueError(f"`restarts` must be 'all' or 'screened', got {restarts!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be {' or '.join(map(repr, PRECISIONS))}, got {precision!r}")
    screen = check_int(screen_points, "screen_points", minimum=2)
    check_kernel(kernel)
    in_float64 = _whole_fit_in_float64(precision, X, (key, X, y, init, min_noise_variance))
    out_dtype = X.dtype
    with contextlib.ExitStack() as scope:
        if in_float64:  # thread-local: nothing global changes
            scope.enter_context(jax.enable_x64(True))
            X, y = rows64 if rows64 is not None else (np.asarray(fetch(a), np.float64) for a in (X, y))
            if init is not None:
                init = jax.tree.map(lambda a: to_device(fetch(a), np.float64), init)
        fit = _fit(
            key, X, y, num_points=num_points, num_starts=num_starts, max_iter=max_iter, tol=tol,
            gain_tol=gain_tol, min_noise_variance=min_noise_variance, degenerate_margin=degenerate_margin,
            init=init, parallel_restarts=parallel_restarts, restarts=restarts, screen=screen, precision=precision,
            kernel=kernel,
        )  # fmt: skip
        if in_float64:
            fit = fetch(fit)
    return jax.tree.map(functools.partial(_narrowed, dtype=np.dtype(out_dtype)), fit) if in_float64 else fit


def _fit(
    key,
    X,
    y,
    *,
    num_points,
    num_starts,
    max_iter,
    tol,
    gain_tol,
    min_noise_variance,
    degenerate_margin,
    init,
    parallel_restarts,
    restarts,
    screen,
    precision,
    kernel="rbf",
) -> GPFit:
    """`fit_gp_hyperparameters` after its checks, in the dtype of `X` (float64 NumPy rows: in float64)."""
    n, d = X.shape
    dtype = X.dtype
    views = host_arrays(y)
    var_host = None
    if views is not None:  # by NumPy: no program per row count
        var_host = np.var(views[0], dtype=np.float64).astype(dtype)
        var_y = to_device(var_host)
    else:
        var_y = jnp.var(y)
    if is_concrete(var_y) and not float(fetch(var_y)) > 0:
        raise ValueError("`y` is constant (zero variance): there is nothing to fit")
    if init is None:
        if int(num_starts) < 1:
            raise ValueError(f"`num_starts` must be >= 1, got {num_starts}")
        starts = _default_starts(int(num_starts), d, var_y, dtype)
    else:
        if not isinstance(init, GPHyperparameters):
            raise TypeError(f"`init` must be GPHyperparameters, got {type(init).__name__}")
        starts = jax.tree.map(lambda a: jnp.asarray(a, dtype), init)
        if starts.lengthscales.ndim != 2 or starts.lengthscales.shape[1] != d:
            raise ValueError(
                f"`init.lengthscales` must have shape (num_starts, {d}), got {starts.lengthscales.shape}"
            )
        S = starts.lengthscales.shape[0]
        for field in ("signal_variance", "noise_variance"):
            if getattr(starts, field).shape != (S,):
                raise ValueError(f"`init.{field}` must have shape ({S},), got {getattr(starts, field).shape}")
        for field in GPHyperparameters._fields:
            check_positive(getattr(starts, field), f"init.{field}")

    if min_noise_variance is None:
        rel = 1e-6 if dtype == jnp.float64 else 1e-4
        # by NumPy on the host's variance (the same rounding as in `dtype`): no program to compile
        min_noise = rel * var_y if var_host is None else to_device(np.asarray(rel, dtype) * var_host)
    else:
        min_noise = jnp.asarray(as_float_array(min_noise_variance, "min_noise_variance"), dtype)
        if min_noise.ndim != 0:
            raise ValueError(f"`min_noise_variance` must be a scalar, got shape {min_noise.shape}")
        check_positive(min_noise, "min_noise_variance")

    m = min(n, num_points)
    if m < n:
        views = host_arrays(X, y) if _concrete(key) else None
        if views is not None:  # jax.random.choice's rows, taken on the host: no program per row count
            picked = choice_rows(key, n, m)
            X, y = (
                v[picked] if isinstance(a, np.ndarray) else to_device(v[picked])
                for a, v in zip((X, y), views, strict=True)
            )
        else:
            idx = jax.random.choice(key, n, (m,), replace=False)
            if isinstance(X, np.ndarray):  # float64 rows of a fit in float64 (fit_gp_hyperparameters)
                idx = fetch(idx)
            X, y = X[idx], y[idx]
    if parallel_restarts is None:
        parallel_restarts = jax.default_backend() != "cpu"
    parallel = bool(parallel_restarts)
    concrete = not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((X, y, starts, min_noise)))
    margin = _scalar(degenerate_margin, dtype)
    screened_rows = restarts == "screened" and screen < m
    with contextlib.ExitStack() as stack:
        if _rows_on_host(concrete, parallel, precision, dtype):
            # No program sees the rows: one program per input width serves every row count.
            X, y = (np.asarray(fetch(a), np.float64) for a in (X, y))
            rows = _hold(stack, X, y, min_noise, kernel)
            first = _pick(starts, 0) if screened_rows else None
            screen_rows = _hold(stack, X[:screen], y[:screen], min_noise, kernel) if screened_rows else None
            run = functools.partial(
                _run_held, max_iter=int(max_iter), tol=_scalar(tol, dtype), gain_tol=_scalar(gain_tol, dtype)
            )
            summarize = functools.partial(
                _summarize_held, min_noise=min_noise, margin=margin, size=starts.noise_variance.shape[0]
            )
        else:
            # Fewer rows than `num_points`: padded to a bucket (rows of weight 0 that add nothing to the
            # likelihood), so that another row count in the bucket reuses the compiled programs.
            rows = _padded(X, y, min(row_bucket(m, steps=4), max(num_points, m)), concrete)
            first, screen_rows = _heads(starts, *rows, screen) if screened_rows else (None, None)
            workers = _start_workers(starts.noise_variance.shape[0]) if concrete and not parallel else 1
            pool = None
            if workers > 1:  # every start of the fit below on one core, one BLAS thread each (_run_starts)
                stack.enter_context(single_blas_thread())
                pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(workers))
            run = functools.partial(
                _run_starts, pool=pool, min_noise=min_noise, max_iter=int(max_iter), tol=_scalar(tol, dtype),
                gain_tol=_scalar(gain_tol, dtype), parallel=parallel, precision=precision, kernel=kernel,
            )  # fmt: skip
            summarize = functools.partial(_summarize, min_noise=min_noise, margin=margin)
        hyper, info = _search(run, summarize, rows, screen_rows, starts, first)
        jax.block_until_ready((hyper, info))
    lmls = info.log_marginal_likelihoods
    if is_concrete(lmls) and num_nonfinite(lmls) == lmls.size:
        raise FloatingPointError(
            "every start of fit_gp_hyperparameters failed (non-finite marginal likelihood); "
            "standardize `X`, centre `y`, or raise `min_noise_variance`"
        )
    return GPFit(hyper, info)


def _search(run, summarize, rows, screen_rows, starts, first):
    """`(hyper, info)` of the starts' search on `rows`: every start (`screen_rows` is `None`), or the starts
    screened on `screen_rows`, then the screened winner and the first start (`first`) refined on `rows`.
    `run(rows, starts)` starts the starts and returns a function that returns their results;
    `summarize(rows, results)` chooses among them."""
    if screen_rows is None:
        return summarize(rows, run(rows, starts)())
    cold = run(rows, first)  # refined whatever the screening chooses: runs beside the screening
    _, screened = summarize(screen_rows, run(screen_rows, starts)())
    chosen = screened.chosen
    if is_concrete(chosen) and int(fetch(chosen)) == 0:
        refined = [cold]
    else:  # the screened winner (from its screened optimum) and the first start
        refined = [run(rows, _pick(screened.starts, chosen)), cold]
    hyper, info = summarize(rows, _concat([r() for r in refined]))
    # the refined winner failed numerically, or the choice is degenerate or pinned at the noise bound
    failed = _failed(info)
    if is_concrete(failed) and bool(failed):  # every start on all rows (the first is done)
        rest = [run(rows, _rows_of(starts, slice(1, None)))] if starts.noise_variance.shape[0] > 1 else []
        hyper, info = summarize(rows, _concat([r() for r in [cold, *rest]]))
    return hyper, info._replace(screened=screened)


def _rows_on_host(concrete, parallel, precision, dtype) -> bool:
    """Whether the starts see the rows through host callbacks only (`gp_host`): concrete rows, the starts
    one after another on a CPU, the likelihood in float64
    (`docs/decisions/gp-step.md#the-gp-programs-see-no-rows`)."""
    on_cpu = jax.default_backend() == "cpu"
    return concrete and not parallel and on_cpu and precision == "float64" and dtype == jnp.float64


class _Held(NamedTuple):
    """Rows held on the host (`gp_host.HostRows`) as a program sees them: their handle, their count, the
    box of the packed log-parameters and the reference scales of the degeneracy test."""

    handle: jax.Array
    m: jax.Array
    lo: jax.Array
    hi: jax.Array
    var_y: jax.Array
    ls_lo: jax.Array
    ls_hi: jax.Array
    active: jax.Array


def _hold(stack, X, y, min_noise, kernel="rbf") -> _Held:
    """`X`, `y` (float64 NumPy) held on the host, with their `kernel`, until `stack` closes."""
    rows = stack.enter_context(HostRows(X, y, kernel))
    scales = host_scales(
        rows.X, rows.y, float(fetch(min_noise)), _LENGTHSCALE_BOUNDS, _SIGNAL_BOUNDS, _NOISE_UPPER
    )
    return _Held(to_device(np.int32(rows.handle)), to_device(np.float64(len(rows.y))), *scales)


def _run_held(rows: _Held, starts, *, max_iter, tol, gain_tol):
    """`_run_starts` on rows held on the host: one program, for one start, run now for each start (a program
    over all of them would compile again for each number of starts), the results stacked by NumPy. Its host
    callbacks compute with one BLAS thread (the same answer with any thread count), and programs that call
    back run one at a time (`_HOST_CALLBACKS`)."""
    results, starts = [], fetch(starts)  # NumPy: no program to compile per number of starts
    with _HOST_CALLBACKS, single_blas_thread():
        for i in range(starts.noise_variance.shape[0]):
            start = jax.tree.map(lambda a, i=i: to_device(a[i]), starts)
            results.append(fetch(_held_start(rows, start, max_iter, tol, gain_tol)))
    raw = jax.tree.map(lambda *a: to_device(np.stack(a)), *results)
    return lambda: raw


@quick_jit(static_argnums=2)  # its time is the callbacks': XLA's expensive passes save it nothing
def _held_start(rows: _Held, start, max_iter, tol, gain_tol):
    """`_run_start` of one start on rows held on the host, in a program whose shapes are the start's: the
    likelihood and the leave-one-out error are host callbacks (`gp_host`)."""
    bounds = _Bounds(rows.lo, rows.hi)

    def loss(u):
        return -handle_lml(_log_params(u, bounds), rows.handle) / rows.m

    u, info = minimize_lbfgs(
        loss, _pack(start, bounds), rows.m, max_iter=max_iter, tol=tol, stall_rtol=_stall_rtol(rows.lo.dtype),
        stall_atol=gain_tol / rows.m,
    )  # fmt: skip
    return _start_result(u, info, bounds, handle_loo_mse(_log_params(u, bounds), rows.handle))


def _whole_fit_in_float64(precision, X, arguments) -> bool:
    """Whether `precision` runs the whole fit of `X` in float64 under `jax.enable_x64`: `"float64"`, inputs
    of a narrower dtype, and nothing traced among `arguments` (inside `jit` the likelihood alone is
    float64: `_lml64`)."""
    traced = any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(arguments))
    return precision == "float64" and X.dtype != jnp.float64 and not traced


def _numpy_float64(X, y):
    """`(X, y)` when both are float64 NumPy arrays (kept at their precision by `precision="float64"` even
    where JAX would round them to float32), else `None`."""
    if all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in (X, y)):
        return X, y
    return None


def _narrowed(a, dtype):
    """A leaf of a fit in float64 (a NumPy array) as without x64: floats in `dtype`, integers int32."""
    if np.issubdtype(a.dtype, np.floating):
        a = a.astype(dtype)
    elif np.issubdtype(a.dtype, np.integer):
        a = a.astype(np.int32)
    return to_device(a)  # by NumPy: no program to compile


def _scalar(x, dtype):
    """A number as a JAX scalar of `dtype`, cast by NumPy (no program to compile; beyond the dtype's range:
    inf). A JAX array, not a NumPy one: the starts' host threads do not share `jax.enable_x64`."""
    with np.errstate(over="ignore"):
        return to_device(x, dtype)


def _padded(X, y, size, concrete):
    """`(X, y, w)`: `X` and `y` padded with zero rows to `size` rows and the row weights `w` (1, then 0);
    concrete arrays are padded by NumPy (no program to compile per row count)."""
    m = X.shape[0]
    if concrete:
        w = np.zeros(size, X.dtype)
        w[:m] = 1
        return to_device(pad_rows(fetch(X), size)), to_device(pad_rows(fetch(y), size)), to_device(w)
    w = jnp.concatenate([jnp.ones(m, X.dtype), jnp.zeros(size - m, X.dtype)])
    pad = ((0, size - m),)
    return jnp.pad(X, pad + ((0, 0),)), jnp.pad(y, pad), w


@functools.partial(jax.jit, static_argnums=4)
def _heads(starts, X, y, w, screen):
    """`(starts[:1], (X[:screen], y[:screen], w[:screen]))` in one program."""
    return jax.tree.map(lambda a: a[:1], starts), (X[:screen], y[:screen], w[:screen])


def _failed(info):
    """The refined winner failed numerically, or the choice is degenerate or pinned at the noise bound: by
    NumPy for a concrete `info` (no program to compile), else in one program."""
    if _concrete(info):
        lmls, chosen, degenerate, pinned = fetch(
            (info.log_marginal_likelihoods, info.chosen, info.degenerate, info.noise_at_bound)
        )
        return not np.isfinite(lmls[0]) or bool(degenerate) or bool(pinned[int(chosen)])
    return _failed_traced(info)


@jax.jit
def _failed_traced(info):
    return (
        ~jnp.isfinite(info.log_marginal_likelihoods[0]) | info.degenerate | info.noise_at_bound[info.chosen]
    )


def _pick(starts, i):
    """Start `i` of `starts`, keeping the leading axis: by NumPy when concrete, else in one program."""
    if _concrete(starts, i):
        i = int(fetch(i))
        return jax.tree.map(lambda a: to_device(a[i : i + 1]), fetch(starts))
    return _pick_traced(starts, i)


@jax.jit
def _pick_traced(starts, i):
    return jax.tree.map(lambda a: a[i][None], starts)


def _rows_of(starts, rows: slice):
    """`starts[rows]` (a slice of the leading axis): by NumPy when concrete, else traced."""
    if _concrete(starts):
        return jax.tree.map(lambda a: to_device(a[rows]), fetch(starts))
    return jax.tree.map(lambda a: a[rows], starts)


def _concrete(*trees) -> bool:
    return all(is_concrete(a) for a in jax.tree.leaves(trees))


def _stall_rtol(dtype):
    """A start stops when an iteration raises the log marginal likelihood by no more than this fraction."""
    return 10 * jnp.finfo(dtype).eps


def _start_workers(num_starts):
    """Host threads that run GP starts side by side (`_run_starts`): one per core, at most one per start."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(int(num_starts), cores)


def _run_starts(rows, starts, *, pool, min_noise, max_iter, tol, gain_tol, parallel, precision, kernel="rbf"):
    """Start every start of `starts` on `rows` `(X, y, w)` (row weights `w`); returns a function that returns
    their `_run_start` results, stacked along a leading axis.

    Without `pool`: one program for all the starts (`vmap` or `lax.map`), run now with one BLAS thread
    (kronvi._base.threads). With `pool` (concrete inputs on a CPU): one program per start, queued on the
    pool's host threads. A program's LAPACK calls run one after another on the thread that runs it, and
    JAX runs programs called from different host threads at the same time, so the starts share the
    cores; each computes what the body of `lax.map` computes, so the results are the same to the bit
    (`docs/decisions/gp-step.md#one-blas-thread-for-factorizations-the-starts-on-both-cores`).
    """
    X, y, w = rows
    if pool is None:
        raw = run_single_threaded(
            _fit_starts, X, y, w, starts, min_noise, max_iter, tol, gain_tol, parallel, precision, kernel
        )
        return lambda: raw
    each = _unstack(starts)
    # Traced and compiled here, not in the workers: JAX's configuration contexts (`jax.enable_x64`, say)
    # belong to the thread that enters them.
    one = _start_fit.lower(
        X, y, w, each[0], min_noise, max_iter=max_iter, tol=tol, gain_tol=gain_tol, precision=precision,
        kernel=kernel,
    ).compile()  # fmt: skip
    # A host callback (`potri`, the float64 likelihood) hands its operands to Python through XLA's CPU
    # thread pool, from a thread of that pool: two programs in callbacks at once can hold every pool
    # thread and wait on each other, a deadlock on a machine with few cores. Such programs run one at a time.
    calls_host = _likelihood_on_host(precision, X.dtype) or _inverts_on_host(X.shape[0], X.dtype)
    exclusive = _HOST_CALLBACKS if calls_host else contextlib.nullcontext()

    def run(start):
        with exclusive:
            return jax.block_until_ready(one(X, y, w, start, min_noise, tol=tol, gain_tol=gain_tol))

    futures = [pool.submit(run, s) for s in each]
    return lambda: _stack([f.result() for f in futures])


@jax.jit
def _unstack(tree):
    """The pytree of each start of `tree` (leaves with a leading start axis), in one program."""
    num = jax.tree.leaves(tree)[0].shape[0]
    return [jax.tree.map(operator.itemgetter(i), tree) for i in range(num)]


@jax.jit
def _stack(trees):
    """`_unstack`'s inverse, in one program."""
    return jax.tree.map(lambda *a: jnp.stack(a), *trees)


def _concat(raws):
    """`_run_starts` results of several calls, as one (by NumPy when concrete: no program per shape)."""
    if len(raws) == 1:
        return raws[0]
    if _concrete(raws):
        return jax.tree.map(lambda *a: to_device(np.concatenate(a)), *fetch(raws))
    return jax.tree.map(lambda *a: jnp.concatenate(a), *raws)


def _weighted_moments(a, w):
    """Mean and variance over the rows of weight 1 (`w`: 1 or 0 per row of `a`)."""
    count = jnp.sum(w)
    ww = w.reshape(w.shape + (1,) * (a.ndim - 1))
    mean = jnp.sum(ww * a, axis=0) / count
    return mean, jnp.sum(ww * (a - mean) ** 2, axis=0) / count


def _bounds(X, y, w, min_noise):
    """The box of `_unpack` and the reference scales of `_is_degenerate` (rows of weight `w` = 1)."""
    d = X.shape[1]
    dtype = X.dtype
    var_y = _weighted_moments(y, w)[1]
    mean_x, var_x = _weighted_moments(X, w)
    std = jnp.sqrt(var_x)
    active = std > 100 * jnp.finfo(dtype).eps * jnp.maximum(jnp.abs(mean_x), 1.0)
    ref = jnp.where(jnp.any(active), jnp.nanmedian(jnp.where(active, std, jnp.nan)), 1.0)
    ls_lo, ls_hi = _LENGTHSCALE_BOUNDS[0] * ref, _LENGTHSCALE_BOUNDS[1] * ref
    lo = jnp.concatenate(
        [
            jnp.full((d,), jnp.log(ls_lo)),
            jnp.log(_SIGNAL_BOUNDS[0] * var_y)[None],
            jnp.log(min_noise)[None],
        ]
    ).astype(dtype)
    hi = jnp.concatenate(
        [
            jnp.full((d,), jnp.log(ls_hi)),
            jnp.log(_SIGNAL_BOUNDS[1] * var_y)[None],
            jnp.log(jnp.maximum(_NOISE_UPPER * var_y, 10 * min_noise))[None],
        ]
    ).astype(dtype)
    return _Bounds(lo, hi), ls_lo, ls_hi, active


def _run_start(X, y, w, start, min_noise, max_iter, tol, gain_tol, precision, kernel="rbf"):
    """One start: L-BFGS from `start`, then its leave-one-out error on the same rows (of weight `w` = 1)."""
    m = jnp.sum(w)
    dtype = X.dtype
    bounds = _bounds(X, y, w, min_noise)[0]

    def loss(u):
        if _likelihood_on_host(precision, dtype):
            return -_lml64(_log_params(u, bounds), X, y, w, kernel) / m
        return -_lml(_unpack(u, bounds), X, y, w, kernel) / m

    # Stops at a stall too (no decrease beyond rounding, or two gains under gain_tol in a row).
    u, info = minimize_lbfgs(
        loss, _pack(start, bounds), m, max_iter=max_iter, tol=tol, stall_rtol=_stall_rtol(dtype),
        stall_atol=gain_tol / m,
    )  # fmt: skip
    return _start_result(u, info, bounds, _loo_mse(_unpack(u, bounds), X, y, w, kernel))


def _start_result(u, info, bounds, loo):
    """A start's result from its L-BFGS optimum `u` (its `FitInfo`) and leave-one-out error: `(hyper, lml,
    iterations, converged, gradient norm, loo)`, a failed likelihood `-inf` and a failed `loo` `inf`."""
    lml = jnp.where(jnp.isfinite(info.final_elbo), info.final_elbo, -jnp.inf)
    loo = jnp.where(jnp.isfinite(loo), loo, jnp.inf)
    return _unpack(u, bounds), lml, info.num_iter, info.converged, info.grad_norm, loo


_start_fit = jax.jit(_run_start, static_argnames=("max_iter", "precision", "kernel"))


@jax.jit
def _summarize(rows, results, min_noise, margin):
    """`GPFitInfo` and the chosen hyperparameters from every start's `_run_start` result (stacked) on
    `rows` `(X, y, w)`."""
    X, y, w = rows
    var_y = _weighted_moments(y, w)[1]
    _, ls_lo, ls_hi, active = _bounds(X, y, w, min_noise)
    return _summary(results, var_y, ls_lo, ls_hi, active, min_noise, margin, jnp.sum(w))


def _summarize_held(rows: _Held, results, *, min_noise, margin, size):
    """`_summarize` of starts on rows held on the host. Fewer than `size` results (the refinement of a
    screening) are padded to `size` with failed starts (a likelihood of `-inf`, degenerate), which the
    choice never takes, and cut back after it: one program for every number of starts."""
    results = fetch(results)
    k = results[1].shape[0]
    if k < size:  # (hyper, lml, iterations, converged, gradient norm, loo) of failed starts
        hypers, *rest = results
        hypers = jax.tree.map(lambda a: np.concatenate([a, np.repeat(a[:1], size - k, axis=0)]), hypers)
        fills = (-np.inf, 0, False, np.inf, np.inf)
        rest = [np.concatenate([a, np.full(size - k, f, a.dtype)]) for a, f in zip(rest, fills, strict=True)]
        results = (hypers, *rest)
    hyper, info = _summarize_held_jit(rows, to_device(results), min_noise, margin)
    if k < size:
        per_start = ("log_marginal_likelihoods", "degenerate_starts", "starts", "loo_mse", "num_iterations",
                     "converged", "grad_norms", "noise_at_bound")  # fmt: skip
        cut = {f: jax.tree.map(lambda a: to_device(a[:k]), fetch(getattr(info, f))) for f in per_start}
        info = info._replace(**cut)
    return hyper, info


@quick_jit
def _summarize_held_jit(rows: _Held, results, min_noise, margin):
    return _summary(results, rows.var_y, rows.ls_lo, rows.ls_hi, rows.active, min_noise, margin, rows.m)


def _summary(results, var_y, ls_lo, ls_hi, active, min_noise, margin, num_points):
    """`_summarize` given the rows' scales."""
    hypers, lmls, iters, converged, gnorms, loo = results
    degenerate = jax.vmap(lambda h, e: _is_degenerate(h, e, var_y, ls_lo, ls_hi, active))(hypers, loo)
    pinned = hypers.noise_variance <= 1.5 * min_noise
    interpolating = pinned | (hypers.noise_variance <= _INTERPOLATING * var_y)
    chosen = _choose(lmls, degenerate, interpolating, loo, margin)
    hyper = jax.tree.map(lambda a: a[chosen], hypers)
    info = GPFitInfo(
        log_marginal_likelihoods=lmls,
        chosen=chosen,
        degenerate=degenerate[chosen],
        degenerate_starts=degenerate,
        starts=hypers,
        loo_mse=loo,
        num_iterations=iters,
        converged=converged,
        grad_norms=gnorms,
        num_points=num_points.astype(jnp.int32),
        noise_at_bound=pinned,
    )
    return hyper, info


@functools.partial(jax.jit, static_argnums=(5, 8, 9, 10))
def _fit_starts(X, y, w, starts, min_noise, max_iter, tol, gain_tol, parallel, precision, kernel):
    """`_run_start` of every start, in one program."""

    def judged(start):
        return _run_start(X, y, w, start, min_noise, max_iter, tol, gain_tol, precision, kernel)

    # vmap batches the starts' Cholesky factorizations into one LAPACK call per step; lax.map runs the
    # starts one after another (see `parallel_restarts`).
    batch_map = jax.vmap if parallel else (lambda f: functools.partial(lax.map, f))
    return batch_map(judged)(starts)
