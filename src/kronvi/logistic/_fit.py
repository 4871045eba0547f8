r"""Fitting mean-field DIRECT logistic regression by maximizing a lower bound on its ELBO.

`"optax-lbfgs"` and `"lbfgs"`: L-BFGS (`optax.lbfgs`, `jaxopt.LBFGS`) on the exact gradient of the
full-data bound (`kronvi.fitting.minimize_lbfgs`).
`"sgd"`: any optax optimizer on unbiased minibatch estimates of it, for large `n`. Both are pure
(`lax.while_loop`/`lax.scan`), run under `jit` and `vmap` (e.g. CV folds stacked on a leading axis)
and return a `LogisticFit` `(q_w, info)`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from .._base.buckets import to_device
from .._base.checks import (
    all_finite,
    check_int,
    check_optimizer,
    host_arrays,
    is_concrete,
    reduce_on_device,
)
from .._base.deprecation import renamed_arguments
from .._base.kron import kron_sum_expectation
from .._base.precision import matmul
from .._base.progress import ProgressCallback, check_progress, progress_scope
from .._base.threads import run_single_threaded
from .._model.families import MeanField, check_family, grid_moments
from .._model.grids import DiscretePrior
from .._solvers.info import FitInfo
from .._solvers.lbfgs import minimize_lbfgs
from .._solvers.optimizers import cache_by_optimizer
from .._solvers.sgd import run_sgd
from ._bound import DEFAULT_BOUND, bound_rows_sum, check_bound, check_logistic_args, check_weights
from ._cavi import exponentials, fit_cavi
from ._laplace import MAP_ONLY, NEWTON_MAX_ITER, better_start, laplace_fit, neg_log_joint

METHODS = ("optax-lbfgs", "lbfgs", "sgd", "cavi")
STARTS = ("laplace", "prior")
NEWTON_MAX_FEATURES = 512  # the start's MAP by Newton up to here, by L-BFGS above


class LogisticFit(NamedTuple):
    """The result of `fit_logistic`.

    Attributes:
      q_w: `kronvi.model.MeanField` `(b, m)` over the weights.
      info: `kronvi.FitInfo`; its `elbo` trace holds the bound on the ELBO that the fit
        maximizes.
    """

    q_w: MeanField
    info: FitInfo


def laplace_start_map(prior_w, Phi, y, weights):
    r"""The MAP $\hat w$ of $\sum_i \text{weights}_i\log\sigma(s_i \Phi_i w) - \sum_j (w_j - \mu_j)^2 / (2\tau_j^2)$,
    `(b,)`, with $\mu_j, \tau_j^2$ the mean and variance of the discrete prior `j`.

    Up to `NEWTON_MAX_FEATURES` weights by damped Newton (`laplace_fit`,
    $O(nb^2 + b^3)$ per iteration, the compiled program that
    `laplace_grid_prior` runs), else by L-BFGS ($O(nb)$ per iteration,
    at most 100). Either searches from whichever of $\mu$ and the grids' centres (midpoints of their
    ranges) has the lower objective (`better_start`). Grids placed by `laplace_grid_prior` are centred
    on the Gaussian-prior MAP, next to this one (`docs/decisions/classifier.md#coordinate-ascent-from-a-laplace-start-a-warm-newton-start`).
    """
    mu, prec, centre = _prior_moments(prior_w)
    if Phi.shape[1] <= NEWTON_MAX_FEATURES:
        tol = to_device(100.0 * np.finfo(Phi.dtype).eps, Phi.dtype)  # by NumPy: no program
        fit = laplace_fit(
            Phi, y, weights, prec, mu, centre, max_iter=NEWTON_MAX_ITER, tol=tol, mode=MAP_ONLY
        )
        return fit.mean
    return _lbfgs_map(Phi, y, weights, mu, prec, centre)


def _prior_moments(prior_w):
    r"""`(mu, prec, centre)`, each `(b,)`: the mean and precision $1/\tau^2$ of each discrete prior
    (`grid_moments`) and the midpoint of its grid's range. Computed in NumPy when the grids are concrete
    and in host memory, so that a first fit compiles no program for them (about 0.2 s)."""
    host = host_arrays(prior_w.values, prior_w.log_probs)
    if host is None:
        return _prior_moments_on_device(prior_w.values, prior_w.log_probs)
    # inf and 0 as the device computes them (a point-mass prior's precision, a square beyond the dtype's
    # range), without NumPy's warnings
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        return _moments(np, *host)


@jax.jit
def _prior_moments_on_device(values, log_probs):
    return _moments(jnp, values, log_probs)


def _moments(xp, values, log_probs):
    """`_prior_moments` in the array module `xp` (NumPy or `jax.numpy`)."""
    probs = xp.exp(log_probs)
    mu = xp.sum(probs * values, axis=-1)
    tau2 = xp.sum(probs * (values - mu[..., None]) ** 2, axis=-1)  # around the mean, as `grid_moments`
    return mu, 1.0 / tau2, 0.5 * xp.min(values, axis=-1) + 0.5 * xp.max(values, axis=-1)


@jax.jit
def _lbfgs_map(Phi, y, weights, mu, prec, start):
    s = 2.0 * y - 1.0
    w0 = better_start(Phi, y, weights, prec, mu, start)

    def loss(w):
        return neg_log_joint(matmul(Phi, w), w, s, weights, prec, mu) / jnp.sum(weights)

    return minimize_lbfgs(loss, w0, max_iter=100, tol=1e-7)[0]


def start_logits(prior_w, Phi, y, weights, w):
    r"""Starting logits from a Gaussian (Laplace) approximation at `w` (`laplace_start_map`).

    With the diagonal of the Hessian there,
    $H_{jj} = \sum_i \sigma_i(1-\sigma_i)\Phi_{ij}^2 + \tau_j^{-2}$ (the precision of the
    mean-field Gaussian fitted to that Laplace approximation),
    $\log q_j(v) = \log p_j(v) + \log N(v; \hat w_j, H_{jj}^{-1}) - \log N(v; \mu_j, \tau_j^2)$.
    """
    mu, tau2 = grid_moments(prior_w.probs, prior_w.values)
    p = jax.nn.sigmoid(matmul(Phi, w))
    # sum_i (sqrt(weights_i p_i (1 - p_i)) Phi_ij)^2: no 0 * inf where Phi^2 overflows and p (1 - p) is 0
    prec = jnp.sum((jnp.sqrt(weights * p * (1.0 - p))[:, None] * Phi) ** 2, axis=0) + 1.0 / tau2
    V = prior_w.values
    logits = (
        prior_w.log_probs
        - 0.5 * prec[:, None] * (V - w[:, None]) ** 2
        + 0.5 * (V - mu[:, None]) ** 2 / tau2[:, None]
    )
    # a weight whose Gaussian overflows (features beyond ~1e19 in float32) starts from its prior
    usable = jnp.all(jnp.isfinite(logits), axis=-1, keepdims=True) & jnp.any(
        logits > -jnp.inf, axis=-1, keepdims=True
    )
    return jnp.where(usable, logits, prior_w.log_probs)


def laplace_start_logits(prior_w, Phi, y, weights):
    """The default start: `start_logits` at `laplace_start_map`."""
    return start_logits(prior_w, Phi, y, weights, laplace_start_map(prior_w, Phi, y, weights))


def _neg_elbo_per_row(logits, prior_w, Phi, y, weights, bound, chunk_size, n):
    log_q = jax.nn.log_softmax(logits, axis=-1)
    q = jnp.exp(log_q)
    ll = bound_rows_sum(log_q, prior_w.values, Phi, y, weights, bound, chunk_size)
    kl = kron_sum_expectation(log_q - prior_w.log_probs, q)
    return -(ll - kl) / n


@functools.partial(jax.jit, static_argnames=("bound", "chunk_size", "max_iter", "tol", "backend"))
def _fit_lbfgs(logits, prior_w, Phi, y, weights, start, *, bound, chunk_size, max_iter, tol, backend):
    n = jnp.sum(weights)
    if start is not None:
        logits = start_logits(prior_w, Phi, y, weights, start)
    loss = lambda lg: _neg_elbo_per_row(lg, prior_w, Phi, y, weights, bound, chunk_size, n)  # noqa: E731
    logits, info = minimize_lbfgs(loss, logits, n, max_iter=max_iter, tol=tol, backend=backend)
    return MeanField._unchecked(logits), info


@functools.partial(jax.jit, static_argnames=("bound", "max_iter", "tol", "mode"))
def _fit_cavi(logits, prior_w, Phi, y, weights, start, *, bound, max_iter, tol, mode):
    if start is not None:
        logits = start_logits(prior_w, Phi, y, weights, start)
    log_q, info = fit_cavi(
        logits, prior_w, Phi, y, weights, bound=bound, max_iter=max_iter, tol=tol, mode=mode
    )
    return MeanField._unchecked(log_q), info


@cache_by_optimizer
def _compiled_sgd(optimizer):
    def fit(
        key, logits, prior_w, Phi, y, weights, start, progress, *, bound, chunk_size, num_steps, batch_size
    ):
        rows = Phi.shape[0]
        n = jnp.sum(weights)
        if start is not None:
            logits = start_logits(prior_w, Phi, y, weights, start)

        def objective(k, lg):  # `batch_size` rows drawn without replacement
            idx = jax.random.choice(k, rows, (batch_size,), replace=False)
            w = weights[idx] * (rows / batch_size)
            loss = _neg_elbo_per_row(lg, prior_w, Phi[idx], y[idx], w, bound, chunk_size, n)
            return loss, {"elbo": -loss * n}

        logits, _, info = run_sgd(optimizer, objective, logits, key, num_steps=num_steps, progress=progress)
        return MeanField._unchecked(logits), info._replace(steps=None)

    return jax.jit(fit, static_argnames=("bound", "chunk_size", "num_steps", "batch_size"))


@renamed_arguments(q_init="init")
def fit_logistic(
    Phi: ArrayLike,
    y: ArrayLike,
    prior_w: DiscretePrior,
    *,
    method: str = "optax-lbfgs",
    bound: str = DEFAULT_BOUND,
    init: str | MeanField | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    key: jax.Array | None = None,
    batch_size: int | None = None,
    optimizer: optax.GradientTransformation | None = None,
    num_steps: int | None = None,
    chunk_size: int | None = None,
    weights: ArrayLike | None = None,
    progress: bool | ProgressCallback | None = None,
    progress_every: int | None = None,
) -> LogisticFit:
    r"""Fits mean-field DIRECT logistic regression by maximizing `logistic_elbo_bound`.

    The objective is $B(q) + E_q[\log p(w)] - E_q[\log q(w)]$ with $B$ the chosen lower
    bound on $\sum_i E_q\log p(y_i \mid w)$ (`logistic_loglik_bound`), optimized over the
    logits of $q_j = \mathrm{softmax}(\ell_j)$.

    Methods:
      `"optax-lbfgs"` (default): L-BFGS (`kronvi.fitting.minimize_lbfgs`, `optax.lbfgs`) on
      the exact gradient of $-\mathcal{L}/n$ over all rows; $O(nbm)$ per evaluation. `"lbfgs"`: the
      same with `jaxopt.LBFGS`, as in the other fits.
      `"sgd"`: `num_steps` steps of `optimizer` on unbiased minibatch estimates
      ($\frac{n}{B}\sum_{i \in \text{batch}}$, `batch_size` rows drawn without replacement
      each step); $O(Bbm)$ per step, for large `n`.
      `"cavi"`: closed-form coordinate ascent (minorize-maximize; for `"theorem2"` the exact
      coordinate optimum): $\log q_j = \log p_j + \partial B / \partial q_j$ at the current
      point, one weight at a time, never decreasing the bound; $O(nbm)$ per sweep. Against L-BFGS:
      `docs/decisions/classifier.md#coordinate-ascent-from-a-laplace-start-a-warm-newton-start`.

    Args:
      Phi: `(n, b)` features, in the dtype of `prior_w`.
      y: `(n,)` labels in $\{0, 1\}$.
      prior_w: `kronvi.model.DiscretePrior` `(b, m)`.
      method: `"optax-lbfgs"`, `"lbfgs"`, `"sgd"` or `"cavi"`.
      bound: `"tilted"` (default), `"jensen"` or `"theorem2"` (`logistic_loglik_bound`).
      init: where to start: `"laplace"` (default, also `None`; `laplace_start_logits`, the
        mean-field Gaussian at the MAP of the Gaussian-prior model with the grids' moments: damped
        Newton up to 512 weights, L-BFGS above), `"prior"`, or a `kronvi.model.MeanField`.
      max_iter: L-BFGS iterations (default 100) or CAVI sweeps (default 30).
      tol: L-BFGS gradient-norm tolerance on $-\mathcal{L}/n$ (default 1e-6); CAVI stops when a
        sweep gains less than `tol * n` nats (default 1e-7).
      key: `jax.random` key, required for `"sgd"`.
      batch_size: `"sgd"` rows per step (default `min(n, 256)`).
      optimizer: `"sgd"`'s `optax.GradientTransformation` minimizing $-\mathcal{L}/n$
        (default `optax.adam(0.05)`).
      num_steps: `"sgd"` steps (default 500).
      chunk_size: rows per chunk of the bound (default: about 2**20 numbers per chunk).
      weights: `(n,)` non-negative row weights (default ones): row `i`'s log-likelihood counts
        `weights[i]` times. Zero-weight rows pad folds of different sizes to one shape (one compile,
        `vmap` over folds).
      progress: `"sgd"`: `None` (default: no reporting, nothing added to the compiled loop), `True` (a
        tqdm bar, or lines on stderr without tqdm) or a callable `(step, total, metrics)` receiving each
        reported step's minibatch estimate `elbo` and gradient norm `grad_norm` as floats; see
        `kronvi/_base/progress.py`. Ignored by the other methods (one compiled loop without steps).
      progress_every: report every this many steps and at the last (default: about 100 reports).

    Returns:
      `LogisticFit` `(q_w, info)`: the fitted
      `kronvi.model.MeanField` and a `kronvi.FitInfo` whose `elbo` trace holds
      the bound (L-BFGS: best so far; SGD: each step's minibatch estimate at the logits before it, then one
      at the returned logits).

    Raises:
      ValueError: naming the argument: labels other than 0/1 or NaN (`y`), shapes (`Phi`, `y`,
        `init`), `weights` negative or all zero, unknown `method` or `bound`, `"sgd"` without `key`.
      FloatingPointError: a fit on concrete inputs that ended with non-finite logits.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi, kronvi.logistic as kl
      >>> Phi = jax.random.normal(jax.random.key(0), (200, 3))
      >>> y = (Phi @ jnp.array([2.0, -1.0, 0.0]) > 0).astype(jnp.float32)
      >>> prior = kronvi.model.gaussian_prior(3, 2.0, levels=9)
      >>> q, info = kl.fit_logistic(Phi, y, prior, max_iter=50)
      >>> p = kl.predict_logistic(q, prior, Phi)
      >>> bool(jnp.mean((p > 0.5) == (y == 1)) > 0.9)
      True
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}")
    check_bound(bound)
    laplace = init is None or (isinstance(init, str) and init == "laplace")
    if laplace or (isinstance(init, str) and init == "prior"):
        q0 = MeanField.from_prior(prior_w)
    elif isinstance(init, MeanField):
        q0 = init
    else:
        raise ValueError(f'`init` must be "laplace", "prior", None or a MeanField, got {init!r}')
    check_family(q0, prior_w, "init", "prior_w")
    Phi, y = check_logistic_args(q0, prior_w, Phi, y)
    if chunk_size is not None:
        chunk_size = check_int(chunk_size, "chunk_size", 1)
    n = Phi.shape[0]
    if n == 0:
        raise ValueError("`Phi` is empty (no rows)")
    weights = check_weights(weights, n, Phi.dtype)

    def start():  # the start's MAP apart from the fit: Newton's compiled program is laplace_grid_prior's
        return run_single_threaded(laplace_start_map, prior_w, Phi, y, weights) if laplace else None

    if method in ("optax-lbfgs", "lbfgs"):
        max_iter = 100 if max_iter is None else check_int(max_iter, "max_iter", 1)
        tol = 1e-6 if tol is None else float(tol)
        return _checked(
            run_single_threaded(
                _fit_lbfgs, q0.logits, prior_w, Phi, y, weights, start(), bound=bound, chunk_size=chunk_size,
                max_iter=max_iter, tol=tol, backend=method,
            ),
            Phi,
        )  # fmt: skip
    if method == "cavi":
        max_iter = 30 if max_iter is None else check_int(max_iter, "max_iter", 1)
        tol = 1e-7 if tol is None else float(tol)
        return _checked(
            run_single_threaded(
                _fit_cavi, q0.logits, prior_w, Phi, y, weights, start(), bound=bound, max_iter=max_iter, tol=tol,
                mode=exponentials(prior_w, Phi, y),
            ),
            Phi,
        )  # fmt: skip
    if key is None:
        raise ValueError('`key` is required for method="sgd" (a jax.random key)')
    batch_size = min(n, 256) if batch_size is None else check_int(batch_size, "batch_size", 1)
    if batch_size > n:
        raise ValueError(f"`batch_size` must be <= the {n} rows of `Phi`, got {batch_size}")
    num_steps = 500 if num_steps is None else check_int(num_steps, "num_steps", 1)
    optimizer = optax.adam(0.05) if optimizer is None else optimizer
    check_optimizer(optimizer)
    every = check_progress(progress, progress_every, num_steps)
    begin = start()
    with progress_scope(progress, total=num_steps, every=every, desc="logistic SGD") as prog:
        result = run_single_threaded(
            _compiled_sgd(optimizer), key, q0.logits, prior_w, Phi, y, weights, begin, prog, bound=bound,
            chunk_size=chunk_size, num_steps=num_steps, batch_size=batch_size,
        )  # fmt: skip
    return _checked(result, Phi)


def _checked(result, Phi):
    """`result` `(q_w, info)` as a `LogisticFit`; `FloatingPointError` when a concrete fit ended with
    non-finite logits."""
    q, info = result
    if is_concrete(q.logits) and not all_finite(q.logits):
        big = float(reduce_on_device(lambda P: jnp.max(jnp.abs(P)), Phi))
        raise FloatingPointError(
            f"fit_logistic ended with non-finite logits; `Phi` reaches {big:.3g} in {Phi.dtype}: standardize it"
        )
    return LogisticFit(q, info)
