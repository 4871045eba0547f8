r"""REPARAM: the Gaussian mean-field posterior trained by minibatch reparameterization gradients.

The baseline of Evans & Nair (2018, Table 1): stochastic gradients of a minibatch Monte Carlo ELBO with
$w = \mu + s\odot\epsilon$ and a closed-form KL, trained by any optax optimizer in the optax/blackjax
shape (`gaussian_reparam_init`, `gaussian_reparam_step`, the driver
`fit_gaussian_reparam`). The optimizer is captured in a closure built once per optimizer
configuration (`kronvi._solvers.optimizers.cache_by_optimizer`), never a static `jit` argument.

References:
  Evans & Nair (2018), Table 1 ("REPARAM"); Kingma & Welling (2014); Blundell et al. (2015), "Weight
  uncertainty in neural networks".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import as_float_array, check_finite, check_int, check_ndim, check_optimizer, check_xy
from .._base.deprecation import reordered_arguments
from .._base.precision import matmul
from .._base.progress import ProgressCallback, check_progress, progress_scope
from .._base.pytree import as_traced_callable
from .._model.regression import LOG_2PI
from .._solvers.optimizers import cache_by_optimizer
from .._solvers.sgd import minibatch_rows, run_sgd, sgd_step
from ._meanfield import (
    GaussianFit,
    GaussianMeanField,
    check_gaussian_q,
    check_noise_bounds,
    check_noise_variance,
    check_prior_scale,
    gaussian_kl,
)


class ReparamState(NamedTuple):
    """State of `gaussian_reparam_step`.

    Attributes:
      q: `GaussianMeanField`.
      noise_param: `()` unconstrained noise parameter: $\\log\\sigma^2$ without `noise_bounds`,
        else $u$ with $\\log\\sigma^2 = \\log lo + (\\log hi - \\log lo)\\,\\mathrm{sigmoid}(u)$;
        read it with `reparam_noise_variance`.
      opt_state: the optimizer's state for `(q.mean, q.log_std, noise_param)`.
    """

    q: GaussianMeanField
    noise_param: jax.Array
    opt_state: optax.OptState


class ReparamInfo(NamedTuple):
    """Diagnostics of one `gaussian_reparam_step` (stacked over steps by the driver).

    Attributes:
      elbo: the minibatch Monte Carlo ELBO estimate at the parameters before the step (unbiased for the
        full-data ELBO).
      grad_norm: norm of the stochastic gradient of $-\\mathcal{L}/n$.
    """

    elbo: jax.Array
    grad_norm: jax.Array


def _noise_from_param(u, bounds):
    if bounds is None:
        return jnp.exp(u)
    lo, hi = jnp.log(bounds[0]), jnp.log(bounds[1])
    return jnp.exp(lo + (hi - lo) * jax.nn.sigmoid(u))


def _noise_to_param(s, bounds):
    if bounds is None:
        return jnp.log(s)
    lo, hi = jnp.log(bounds[0]), jnp.log(bounds[1])
    frac = jnp.clip((jnp.log(s) - lo) / (hi - lo), 1e-3, 1 - 1e-3)
    return jnp.log(frac) - jnp.log1p(-frac)


def reparam_noise_variance(
    state: ReparamState, *, noise_bounds: tuple[float, float] | None = None
) -> jax.Array:
    """The noise variance $\\sigma^2$ held by a `ReparamState` (same `noise_bounds` as the
    fit)."""
    if not isinstance(state, ReparamState):
        raise TypeError(f"`state` must be a ReparamState, got {type(state).__name__}")
    bounds = check_noise_bounds(noise_bounds, state.noise_param.dtype)
    return _noise_from_param(state.noise_param, bounds)


def gaussian_reparam_init(
    q: GaussianMeanField,
    noise_variance: ArrayLike,
    *,
    optimizer: optax.GradientTransformation,
    noise_bounds: tuple[float, float] | None = None,
) -> ReparamState:
    r"""Initial `ReparamState` for `gaussian_reparam_step`.

    Args:
      q: `GaussianMeanField` to start from.
      noise_variance: starting $\sigma^2$ (clipped into `noise_bounds`).
      optimizer: an `optax.GradientTransformation` (it minimizes $-\mathcal{L}/n$).
      noise_bounds: optional `(lo, hi)` for the noise variance (a sigmoid reparameterization keeps it
        inside).
    """
    check_gaussian_q(q)
    check_optimizer(optimizer)
    dtype = jnp.asarray(q.mean).dtype
    s = check_noise_variance(noise_variance, dtype)
    bounds = check_noise_bounds(noise_bounds, dtype)
    u = _noise_to_param(s, bounds)
    return ReparamState(q, u, optimizer.init((q.mean, q.log_std, u)))


def _identity(x):
    return x


def _minibatch_elbo(key, params, Phi_b, y_b, n, scale, bounds, num_samples, learn_noise):
    mean, log_std, u = params
    if not learn_noise:
        u = lax.stop_gradient(u)
    s2 = _noise_from_param(u, bounds)
    eps = jax.random.normal(key, (num_samples, mean.shape[0]), mean.dtype)
    W = mean[None] + jnp.exp(log_std)[None] * eps  # (S, b)
    resid = y_b[:, None] - matmul(Phi_b, W.T)  # (B, S)
    B = y_b.shape[0]
    ll = -0.5 * B * (LOG_2PI + jnp.log(s2)) - 0.5 * jnp.mean(jnp.sum(resid**2, axis=0)) / s2
    return (n / B) * ll - gaussian_kl(mean, log_std, scale)


def _params(state):
    return (state.q.mean, state.q.log_std, state.noise_param)


def _objective(Phi_b, y_b, n, scale, bounds, num_samples, learn_noise):
    """The step objective `(key, params) -> (-elbo / n, {"elbo": elbo})` on one minibatch
    (`kronvi._solvers.sgd`)."""

    def objective(key, params):
        elbo = _minibatch_elbo(key, params, Phi_b, y_b, n, scale, bounds, num_samples, learn_noise)
        return -elbo / n, {"elbo": elbo}

    return objective


@cache_by_optimizer
def _compiled_step(optimizer):
    def step(key, state, Phi_b, y_b, n, scale, bounds, *, num_samples, learn_noise):
        objective = _objective(Phi_b, y_b, n, scale, bounds, num_samples, learn_noise)
        params, opt_state, info = sgd_step(
            optimizer, objective, key, _params(state), state.opt_state, info=ReparamInfo
        )
        mean, log_std, u = params
        return ReparamState(GaussianMeanField(mean, log_std), u, opt_state), info

    return jax.jit(step, static_argnames=("num_samples", "learn_noise"))


@cache_by_optimizer
def _compiled_fit(optimizer):
    def fit(
        key, state, fmap, X, y, scale, bounds, progress, *, num_steps, batch_size, num_samples, learn_noise
    ):
        n = X.shape[0]
        n_arr = jnp.asarray(n, X.dtype)

        def objective(k, params):
            idx, k_eps = minibatch_rows(k, n, batch_size)
            Phi_b = fmap(X[idx]).astype(X.dtype)
            return _objective(Phi_b, y[idx], n_arr, scale, bounds, num_samples, learn_noise)(k_eps, params)

        (mean, log_std, u), _, info = run_sgd(
            optimizer, objective, _params(state), key, num_steps=num_steps, opt_state=state.opt_state,
            info=ReparamInfo, progress=progress,
        )  # fmt: skip
        return GaussianFit(GaussianMeanField(mean, log_std), _noise_from_param(u, bounds), info)

    return jax.jit(fit, static_argnames=("num_steps", "batch_size", "num_samples", "learn_noise"))


@reordered_arguments(("key", "state", "Phi_batch", "y_batch"), lambda a: isinstance(a[1], ReparamState))
def gaussian_reparam_step(
    key: jax.Array,
    Phi_batch: ArrayLike,
    y_batch: ArrayLike,
    state: ReparamState,
    *,
    num_data: int,
    prior_scale: ArrayLike,
    optimizer: optax.GradientTransformation,
    num_samples: int = 10,
    learn_noise: bool = True,
    noise_bounds: tuple[float, float] | None = None,
) -> tuple[ReparamState, ReparamInfo]:
    r"""One reparameterization-gradient step on a minibatch (the REPARAM baseline; optax/blackjax shape).

    The minibatch ELBO estimate

    $$
    \hat{\mathcal{L}} = \frac{n}{B}\sum_{i \in \text{batch}} \frac1S\sum_{s=1}^S
    \log N(y_i \mid \phi_i^\top(\mu + s\odot\epsilon_s), \sigma^2) - \mathrm{KL}(q \,\|\, p),
    \qquad \epsilon_s \sim N(0, I),
    $$

    is unbiased for $\mathcal{L}$ (closed-form KL); `optimizer` is applied to the gradient of
    $-\hat{\mathcal{L}}/n$ with respect to $(\mu, \log s, \sigma^2\text{'s parameter})$.

    Args:
      key: PRNG key for the $\epsilon$ draws.
      Phi_batch: features of the minibatch `(B, b)`.
      y_batch: targets `(B,)`.
      state: `ReparamState`.
      num_data: $n$, the full data size (scales the likelihood).
      prior_scale: $\sigma_w$, scalar or `(b,)`.
      optimizer: the `optax.GradientTransformation` given to `gaussian_reparam_init`.
      num_samples: Monte Carlo samples $S$ (the paper: 10).
      learn_noise: whether $\sigma^2$ moves with the optimizer.
      noise_bounds: the `noise_bounds` given to `gaussian_reparam_init`.

    Returns:
      `(state, info)` with `info` a `ReparamInfo`.
    """
    if not isinstance(state, ReparamState):
        raise TypeError(f"`state` must be a ReparamState, got {type(state).__name__}")
    Phi_batch, y_batch = check_xy(Phi_batch, y_batch, "Phi_batch", "y_batch", "(batch_size, num_features)")
    check_gaussian_q(state.q, Phi_batch.shape[1], "state.q")
    check_optimizer(optimizer)
    dtype = state.q.mean.dtype
    scale = check_prior_scale(prior_scale, Phi_batch.shape[1], dtype)
    bounds = check_noise_bounds(noise_bounds, dtype)
    num_samples = check_int(num_samples, "num_samples", 1)
    return _compiled_step(optimizer)(
        key, state, Phi_batch.astype(dtype), y_batch.astype(dtype), jnp.asarray(num_data, dtype), scale,
        bounds, num_samples=num_samples, learn_noise=bool(learn_noise),
    )  # fmt: skip


def fit_gaussian_reparam(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    *,
    init: tuple[GaussianMeanField, ArrayLike],
    prior_scale: ArrayLike,
    optimizer: optax.GradientTransformation,
    num_steps: int,
    feature_map: Callable[[jax.Array], jax.Array] | None = None,
    batch_size: int = 100,
    num_samples: int = 10,
    learn_noise: bool = True,
    noise_bounds: tuple[float, float] | None = None,
    progress: bool | ProgressCallback | None = None,
    progress_every: int | None = None,
) -> GaussianFit:
    r"""Trains the diagonal Gaussian posterior with minibatch reparameterization gradients (REPARAM).

    Runs `gaussian_reparam_step` `num_steps` times inside `lax.scan` (one compile per optimizer
    configuration, static arguments and shapes). Each step
    draws `batch_size` row indices uniformly with replacement and, when `feature_map` is given,
    computes the minibatch features from the raw inputs on the fly (so the `n x b` feature matrix never
    exists).

    Args:
      key: PRNG key (minibatches and $\epsilon$ draws).
      X: inputs `(n, d)`, or features `(n, b)` when `feature_map` is `None`.
      y: targets `(n,)`.
      init: `(q, noise_variance)`: a `GaussianMeanField` and the starting $\sigma^2$.
      prior_scale: $\sigma_w$, scalar or `(b,)`.
      optimizer: an `optax.GradientTransformation`, e.g. `optax.adam(1e-2)`.
      num_steps: number of steps (the paper: 1000 for `n < 3000`, else 10000).
      feature_map: optional pure `(B, d) -> (B, b)` map (e.g. `functools.partial(kronvi.inputs.rff_features,
        params)`); its bound arrays are traced, so another fold's map does not recompile.
      batch_size: minibatch size $B$ (the paper: 100).
      num_samples: Monte Carlo samples per step (the paper: 10).
      learn_noise: learn $\sigma^2$ as a point estimate (else keep `init`'s value).
      noise_bounds: optional `(lo, hi)` for the learned noise variance.
      progress: `None` (default: no reporting, nothing added to the compiled loop), `True` (a tqdm bar,
        or lines on stderr without tqdm) or a callable `(step, total, metrics)` receiving the fields of
        `ReparamInfo` as floats; see `kronvi/_base/progress.py`.
      progress_every: report every this many steps and at the last (default: about 100 reports).

    Returns:
      `GaussianFit` `(q, noise_variance, info)`: `info` a
      `kronvi.FitInfo` (`optimizer="sgd"`) whose `elbo` trace `(num_steps + 1,)` holds
      each step's minibatch estimate at the parameters before it and one more at the returned
      parameters, and whose `steps` is the `ReparamInfo` of the steps,
      `(num_steps,)` arrays.

    References:
      Evans & Nair (2018), Table 1 ("REPARAM"); Blundell et al. (2015), "Weight uncertainty in neural
      networks".

    Example:
      >>> import jax, jax.numpy as jnp, optax, kronvi
      >>> X = jax.random.normal(jax.random.key(0), (500, 2)); y = X @ jnp.array([1.0, -1.0])
      >>> q0 = kronvi.gaussian.GaussianMeanField(jnp.zeros(2), jnp.full(2, -3.0))
      >>> q, s2, info = kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, init=(q0, 1.0),
      ...     prior_scale=1.0, optimizer=optax.adam(0.05), num_steps=500)
      >>> [round(float(v), 1) for v in q.mean]
      [1.0, -1.0]
    """
    if not (isinstance(init, tuple) and len(init) == 2):
        raise TypeError("`init` must be a tuple (q, noise_variance)")
    q, s0 = init
    X = as_float_array(X, "X")
    y = as_float_array(y, "y")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    check_ndim(y, 1, "y", "(num_points,)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"`X` has {X.shape[0]} rows but `y` has {y.shape[0]}")
    if X.shape[0] == 0:
        raise ValueError("`X` is empty")
    check_finite(X, "X")
    check_finite(y, "y")
    check_gaussian_q(q, None, "init[0]")
    dtype = jnp.asarray(q.mean).dtype
    b = q.mean.shape[0]
    if feature_map is None:
        if X.shape[1] != b:
            raise ValueError(f"`X` has {X.shape[1]} columns (features) but `init[0]` has {b} weights")
        fmap = jax.tree_util.Partial(_identity)
    else:
        fmap = as_traced_callable(feature_map)
    check_optimizer(optimizer)
    scale = check_prior_scale(prior_scale, b, dtype)
    bounds = check_noise_bounds(noise_bounds, dtype)
    num_steps = check_int(num_steps, "num_steps", 1)
    batch_size = check_int(batch_size, "batch_size", 1)
    num_samples = check_int(num_samples, "num_samples", 1)
    every = check_progress(progress, progress_every, num_steps)
    state = gaussian_reparam_init(q, s0, optimizer=optimizer, noise_bounds=noise_bounds)
    with progress_scope(progress, total=num_steps, every=every, desc="REPARAM") as prog:
        return _compiled_fit(optimizer)(
            key, state, fmap, X.astype(dtype), y.astype(dtype), scale, bounds, prog, num_steps=num_steps,
            batch_size=batch_size, num_samples=num_samples, learn_noise=bool(learn_noise),
        )  # fmt: skip
