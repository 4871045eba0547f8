r"""Grids placed on the Laplace approximation to the logistic posterior (the accurate default recipe).

A fixed grid (15 levels on $\pm 3\sigma_w$) is too coarse once many rows determine the weights far
more finely than the prior does: the posterior sds can be a fraction of the grid's spacing and the MAP
can lie beyond its edge (`docs/decisions/classifier.md#grids-placed-by-a-laplace-approximation`). As on the regression
side (`kronvi.model.posterior_grid_prior`), the prior density
$N(0, \sigma_w^2)$ is kept but evaluated on levels placed where the posterior lies. Logistic regression
has no exact Gaussian posterior, so the grid is centred on the MAP $\hat w$ of the Gaussian-prior model and
scaled by the Laplace marginal sds $\sqrt{(H^{-1})_{jj}}$, found by damped Newton in
$O(nb^2 + b^3)$ per iteration.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.buckets import to_device
from .._base.checks import (
    as_float_array,
    check_finite,
    check_fit_dtype,
    check_int,
    check_ndim,
    check_positive,
    check_positive_number,
)
from .._base.precision import matmul
from .._base.threads import run_single_threaded
from .._model.grids import DiscretePrior
from .._model.posterior_grid import posterior_grid_prior
from ._bound import check_labels, check_weights

# The damped Newton step's trial lengths, longest first. NumPy, not jnp: a JAX array at import would start
# JAX's backend before the user's configuration (XLA_FLAGS, jax.distributed.initialize()).
_STEPS = 2.0 ** -np.arange(12.0)
NEWTON_MAX_ITER = 50

# What `laplace_fit` computes after Newton (its traced `mode`: one program for the three). NumPy int32 scalars:
# a Python int would be a weakly typed operand, another program.
EXACT = np.int32(0)  # the sds, the evidence and its slope from the Hessian at the MAP
SEARCH = np.int32(1)  # the same from the Hessian of Newton's last iteration, where it converged
MAP_ONLY = np.int32(2)  # the MAP alone (the rest NaN)


class LaplaceInfo(NamedTuple):
    r"""The Laplace approximation behind `laplace_grid_prior`.

    Attributes:
      mean: `(b,)` the MAP $\hat w$ of the Gaussian-prior logistic model (the grids' centres).
      sd: `(b,)` the Laplace marginal posterior sds $\sqrt{(H^{-1})_{jj}}$ (the grids' scales).
      log_evidence: the Laplace approximation to $\log p(y \mid \Phi)$ under $N(0, \sigma_w^2)$, to
        choose $\sigma_w$.
      num_iter: Newton iterations taken.
      converged: whether the Newton decrement fell below the tolerance within `max_iter` iterations.
      log_evidence_slope: the derivative of `log_evidence` with respect to $u$ when every prior variance
        is scaled by $e^u$ (at $u = 0$; for the prior $N(0, \sigma_w^2)$, $d/d\log\sigma_w^2$), the MAP
        and the Hessian following: zero at the evidence's best common scale (`fit_classifier`'s search).
    """

    mean: jax.Array
    sd: jax.Array
    log_evidence: jax.Array
    num_iter: jax.Array
    converged: jax.Array
    log_evidence_slope: jax.Array | None = None


def neg_log_joint(z, w, s, weights, prec, mean):
    r"""The negative log joint $-\sum_i \text{weights}_i\log\sigma(s_i z_i) + \tfrac12\sum_j \text{prec}_j (w_j - \text{mean}_j)^2$."""
    return -jnp.sum(weights * jax.nn.log_sigmoid(s * z)) + 0.5 * jnp.sum(prec * (w - mean) ** 2)


def better_start(Phi, y, weights, prec, mean, start):
    """Whichever of `start` and `mean` (both `(b,)`) has the lower `neg_log_joint`. `mean` on a tie, when
    `start` is not finite (traced, so unchecked, or beyond the dtype's range), or when its objective is not
    finite."""
    s = 2.0 * y - 1.0
    f = lambda w: neg_log_joint(matmul(Phi, w), w, s, weights, prec, mean)  # noqa: E731
    mean = jnp.broadcast_to(mean, start.shape).astype(start.dtype)
    return jnp.where(jnp.all(jnp.isfinite(start)) & (f(start) < f(mean)), start, mean)


def _hessian_eigh(Phi, z, weights, prec):
    r"""Eigendecomposition of $H = \Phi^\top \mathrm{diag}(\text{weights}\,\sigma(1-\sigma))\Phi + \mathrm{diag}(\text{prec})$,
    its eigenvalues clipped below at `min(prec)` (a bound that holds exactly; rounding can break it)."""
    p = jax.nn.sigmoid(z)
    H = matmul(Phi.T, (weights * p * (1.0 - p))[:, None] * Phi) + jnp.diag(prec)
    lam, U = jnp.linalg.eigh(0.5 * (H + H.T))
    return jnp.maximum(lam, jnp.min(prec)), U


def _newton_map(Phi, y, weights, prec, mean, start, *, max_iter: int, tol):
    r"""Damped Newton for the MAP of the Gaussian-prior logistic model (traceable).

    Minimizes $-\sum_i \text{weights}_i\log\sigma(s_i\Phi_i w) + \tfrac12\sum_j \text{prec}_j
    (w_j - \text{mean}_j)^2$ from whichever of `start` `(b,)` and `mean` has the lower objective
    (`better_start`):
    Newton directions from the eigendecomposition of the Hessian, a backtracking line search over 12
    halvings. $O(nb^2 + b^3)$ per iteration.

    Returns:
      `(w, num_iter, converged, lam, U)`: converged when half the squared Newton decrement fell below
      `tol * (1 + |f|)` (or no step lowered the objective) within `max_iter` iterations; `(lam, U)` the
      eigendecomposition of the Hessian (`_hessian_eigh`) where the last iteration started.
    """
    s = 2.0 * y - 1.0
    dtype = Phi.dtype
    steps = jnp.asarray(_STEPS, dtype)

    def step(w):
        z = matmul(Phi, w)
        f = neg_log_joint(z, w, s, weights, prec, mean)
        g = matmul(Phi.T, weights * (jax.nn.sigmoid(z) - y)) + prec * (w - mean)
        lam, U = _hessian_eigh(Phi, z, weights, prec)
        d = -(U @ ((U.T @ g) / lam))
        decrement = -jnp.dot(g, d)  # the squared Newton decrement, >= 0
        zd = matmul(Phi, d)
        trial_z = z[None, :] + steps[:, None] * zd[None, :]
        trial_w = w[None, :] + steps[:, None] * d[None, :]
        trial_f = jax.vmap(lambda zz, ww: neg_log_joint(zz, ww, s, weights, prec, mean))(trial_z, trial_w)
        ok = trial_f <= f - 1e-4 * steps * decrement
        k = jnp.where(jnp.any(ok), jnp.argmax(ok), steps.shape[0] - 1)
        improved = trial_f[k] < f
        w_new = jnp.where(improved, trial_w[k], w)
        done = (0.5 * decrement <= tol * (1.0 + jnp.abs(f))) | ~improved
        return w_new, done, lam, U

    def cond(state):
        _, it, done, *_ = state
        return (it < max_iter) & ~done

    def body(state):
        w, it, *_ = state
        w, done, lam, U = step(w)
        return w, it + 1, done, lam, U

    start = better_start(Phi, y, weights, prec, mean, jnp.broadcast_to(start, (Phi.shape[1],)).astype(dtype))
    b = Phi.shape[1]
    init = (start, jnp.asarray(0), jnp.asarray(False), jnp.ones(b, dtype), jnp.eye(b, dtype=dtype))
    return lax.while_loop(cond, body, init)


def laplace_fit(Phi, y, weights, prec, mean, start, *, max_iter: int, tol, mode=EXACT):
    r"""The Laplace approximation under the prior $N(\text{mean}, \mathrm{diag}(\text{prec})^{-1})$, all `(b,)`:
    damped Newton for the MAP from `start` `(b,)` or `mean`, whichever has the lower objective
    (`better_start`), then the marginal sds, the log evidence and its slope; see `LaplaceInfo`.

    `mode` (traced: one program for every mode): `EXACT`, all from the Hessian at the MAP; `SEARCH`, from
    the Hessian Newton computed at its last iteration, whose step met the tolerance (at the MAP exactly
    where the iterations ran out): one $O(nb^2)$ product fewer, for the prior sd's search, which needs the
    evidence and its slope to within that step; `MAP_ONLY`, the MAP alone, the rest NaN, without the
    Hessian at the MAP and `_slope`'s product.

    One compiled program per shape (`_laplace_fit`, which always receives `mode` as an int32 operand)
    serves `laplace_grid_prior` (prior mean 0), the prior sd's search of `fit_classifier` and the start of
    `fit_logistic` (the grid's moments).
    """
    if isinstance(mode, int | np.integer):  # concrete: int32 (a Python int would be weakly typed)
        mode = np.int32(mode)
    return _laplace_fit(Phi, y, weights, prec, mean, start, max_iter=max_iter, tol=tol, mode=mode)


@functools.partial(jax.jit, static_argnames=("max_iter",))
def _laplace_fit(Phi, y, weights, prec, mean, start, *, max_iter: int, tol, mode):
    """`laplace_fit`'s program."""
    s = 2.0 * y - 1.0
    w, num_iter, converged, lam0, U0 = _newton_map(Phi, y, weights, prec, mean, start, max_iter=max_iter, tol=tol)
    z = matmul(Phi, w)

    def moments(lam, U):
        var = jnp.sum(U**2 / lam[None, :], axis=1)  # diag(H^-1)
        log_evidence = (
            -neg_log_joint(z, w, s, weights, prec, mean)
            + 0.5 * jnp.sum(jnp.log(prec))
            - 0.5 * jnp.sum(jnp.log(lam))
        )
        return jnp.sqrt(var), log_evidence, _slope(Phi, z, w, weights, prec, mean, lam, U, var)

    def none():  # not computed (NaN, which no caller of `MAP_ONLY` reads)
        nan = jnp.full((), jnp.nan, w.dtype)
        return jnp.full_like(w, jnp.nan), nan, nan

    mode = jnp.asarray(mode, jnp.int32)

    def hessian():  # at the MAP, or the last iteration's
        at_map = lambda: _hessian_eigh(Phi, z, weights, prec)  # noqa: E731
        return moments(*lax.cond((mode == SEARCH) & converged, lambda: (lam0, U0), at_map))

    sd, log_evidence, slope = lax.cond(mode == MAP_ONLY, none, hessian)
    return LaplaceInfo(w, sd, log_evidence, num_iter, converged, slope)


def _slope(Phi, z, w, weights, prec, mean, lam, U, var):
    r"""$dE/du$ of the Laplace log evidence $E$ with the precisions `prec` $\cdot e^{-u}$, at $u = 0$.

    At fixed $w$, $\partial E/\partial u = \tfrac12[\sum_j \text{prec}_j (w_j - \text{mean}_j)^2 - b +
    \sum_j \text{prec}_j (H^{-1})_{jj}]$; the MAP moves by $dw/du = H^{-1}\mathrm{diag}(\text{prec})(w -
    \text{mean})$ (the stationarity condition differentiated), which changes $\log\det H$ through the
    curvatures $c_i = \text{weights}_i\,p_i(1 - p_i)$: $\sum_i c_i (1 - 2p_i)\,(\Phi\,dw/du)_i\,
    \phi_i^\top H^{-1}\phi_i$ (the MAP's own objective is stationary, so it adds nothing). One more
    $O(nb^2)$ product, $\Phi U$.
    """
    p = jax.nn.sigmoid(z)
    r = prec * (w - mean)
    dw = matmul(U, matmul(U.T, r) / lam)
    PU = matmul(Phi, U)
    leverage = jnp.sum(PU**2 / lam[None, :], axis=1)  # phi_i' H^-1 phi_i
    third = jnp.sum(weights * p * (1.0 - p) * (1.0 - 2.0 * p) * matmul(Phi, dw) * leverage)
    return 0.5 * (jnp.sum(r * (w - mean)) - w.shape[0] + jnp.sum(prec * var) - third)


@functools.partial(jax.jit, static_argnums=1)
def _zero_mean_prior(scale, b):
    """The prior's precisions and means (zeros), `(b,)` each: one program, not three eager operations to
    compile."""
    return jnp.broadcast_to(1.0 / scale**2, (b,)), jnp.zeros((b,), scale.dtype)


def laplace_grid_prior(
    Phi: ArrayLike,
    y: ArrayLike,
    prior_scale: ArrayLike,
    *,
    levels: int = 15,
    width: float = 4.0,
    weights: ArrayLike | None = None,
    max_iter: int = NEWTON_MAX_ITER,
    tol: float | None = None,
    init: ArrayLike | None = None,
) -> tuple[DiscretePrior, LaplaceInfo]:
    r"""The prior $N(0, \sigma_w^2)$ discretized on grids placed on the Laplace approximation to the
    posterior of logistic regression: the accurate default grids for
    `fit_logistic`.

    Weight $j$ gets `levels` points on $\hat w_j \pm$ `width` $\cdot\, \hat\sigma_j$, where $\hat w$ is the
    MAP of $\sum_i \text{weights}_i \log\sigma(s_i\Phi_i w) - \sum_j w_j^2 / (2\sigma_{w,j}^2)$
    ($s_i = 2y_i - 1$) and $\hat\sigma_j^2 = (H^{-1})_{jj}$ with
    $H = \Phi^\top\mathrm{diag}(\text{weights}_i\,\sigma_i(1-\sigma_i))\Phi + \mathrm{diag}(\sigma_w^{-2})$
    the Hessian at $\hat w$ (the Laplace marginal sds). The prior's log-probabilities are
    $-v^2/(2\sigma_{w,j}^2)$ at those levels, normalized
    (`kronvi.model.posterior_grid_prior`). The MAP comes from damped Newton
    (eigendecomposition of $H$, a backtracking line search), $O(nb^2 + b^3)$ per iteration, from
    `init` (or $w = 0$, whichever has the lower objective); the objective is strictly convex, so it
    converges from any start, and quadratically near the MAP.

    Jittable (shapes and the input checks on concrete arrays; traced inputs are not checked) and
    `vmap`-able over folds padded with zero-weight rows.

    Args:
      Phi: `(n, b)` features.
      y: `(n,)` labels in $\{0, 1\}$ (bool, int or float).
      prior_scale: $\sigma_w$, a positive scalar or `(b,)` array.
      levels: grid points per weight, an int >= 2.
      width: half-width of each grid in Laplace sds.
      weights: `(n,)` non-negative row weights (default ones).
      max_iter: Newton iterations at most.
      tol: stop when half the squared Newton decrement is at most `tol * (1 + |f|)`, `f` the negative
        log joint (default: 100 times the machine epsilon of `Phi`'s dtype).
      init: `(b,)` where Newton starts (default zeros; zeros too when they have the lower objective).
        When choosing $\sigma_w$ by `log_evidence` over several scales, the MAP at the neighbouring
        scale (`info.mean`) saves iterations.

    Returns:
      `(prior_w, info)`: a `kronvi.model.DiscretePrior` `(b, levels)` in `Phi`'s dtype
      and a `LaplaceInfo` (the MAP, the sds, the Laplace log evidence,
      the iterations, whether it converged, the evidence's slope in the log of the prior variances).

    Raises:
      ValueError: naming the argument: `Phi` not 2-D or not finite; `y` not 0/1, NaN or of the wrong
        shape; `prior_scale` not positive, not finite or of the wrong shape; `weights` negative or of the
        wrong shape; `init` not finite or not `(b,)`; `levels`, `width`, `max_iter` or `tol` out of
        range.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi.logistic as kl
      >>> Phi = jax.random.normal(jax.random.key(0), (500, 2))
      >>> y = (Phi @ jnp.array([2.0, -1.0]) > 0).astype(jnp.float32)
      >>> prior, info = kl.laplace_grid_prior(Phi, y, 3.0, levels=7)
      >>> prior.values.shape, bool(info.converged)
      ((2, 7), True)
      >>> bool(jnp.allclose(prior.values[:, 3], info.mean))
      True
    """
    Phi = as_float_array(Phi, "Phi")
    check_fit_dtype(Phi, "Phi")
    check_ndim(Phi, 2, "Phi", "(num_points, num_features)")
    n, b = Phi.shape
    if n == 0:
        raise ValueError("`Phi` is empty (no rows)")
    check_finite(Phi, "Phi")
    y = check_labels(y, n, Phi.dtype)
    weights = check_weights(weights, n, Phi.dtype)
    scale = as_float_array(prior_scale, "prior_scale").astype(Phi.dtype)
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape != (b,)):
        raise ValueError(f"`prior_scale` must be a scalar or shape ({b},), got {tuple(scale.shape)}")
    check_finite(scale, "prior_scale")
    check_positive(scale, "prior_scale")
    levels = check_int(levels, "levels", minimum=2)
    check_positive_number(width, "width")
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    if tol is None:
        tol = 100.0 * float(jnp.finfo(Phi.dtype).eps)
    elif not (isinstance(tol, int | float) and not isinstance(tol, bool) and tol >= 0):
        raise ValueError(f"`tol` must be a non-negative number, got {tol!r}")
    prec, mean = _zero_mean_prior(scale, b)
    if init is None:
        start = mean
    else:
        start = as_float_array(init, "init")
        if start.shape != (b,):
            raise ValueError(f"`init` must have shape ({b},), got {tuple(start.shape)}")
        check_finite(start, "init")
        start = start.astype(Phi.dtype)
    # LAPACK's eigh in one thread: a threaded eigh competes with XLA's threads (kronvi._base.threads)
    info = run_single_threaded(
        laplace_fit, Phi, y, weights, prec, mean, start, max_iter=max_iter, tol=to_device(tol, Phi.dtype)
    )
    return posterior_grid_prior(info.mean, info.sd, scale, levels=levels, width=width), info
