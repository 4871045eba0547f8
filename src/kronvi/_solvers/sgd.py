r"""The one stochastic-gradient driver behind every `method="sgd"` fit (REPARAM, mixture SGD, ELRG's
local reparameterization, logistic SGD).

A fit states its problem as a stochastic objective `objective(key, params) -> (loss, metrics)`: `loss`
the scalar the optimizer minimizes (an unbiased estimate of $-\mathcal{L}/n$), `metrics` a `dict` of
this draw's diagnostics holding at least `"elbo"`, the estimate of $\mathcal{L}$ that the fit's trace
records. `sgd_step` takes one optax step on it; `run_sgd` runs `num_steps` of them in one `lax.scan`,
step `i` with key `jax.random.split(key, num_steps)[i]`, reports to `progress` from inside the scan
(`kronvi/_base/progress.py`) and ends with one more estimate at the returned parameters, on the key
`jax.random.fold_in(key, num_steps)` that no step used.

Both are traced helpers: the caller jits the fit, closing over the optimizer once per configuration
(`kronvi._solvers.optimizers.cache_by_optimizer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from .._base.progress import report_progress
from .info import FitInfo, fit_info

__all__ = ["SGDInfo", "SGDResult", "minibatch_rows", "run_sgd", "sgd_step"]


class SGDInfo(NamedTuple):
    """Diagnostics of one step when the fit names no type of its own.

    Attributes:
      elbo: the objective's `"elbo"` estimate at the parameters before the step.
      grad_norm: norm of the stochastic gradient of the loss.
    """

    elbo: jax.Array
    grad_norm: jax.Array


def minibatch_rows(key, num_rows: int, batch_size: int):
    """One step's minibatch, `batch_size` row indices drawn uniformly with replacement from `num_rows`,
    and the key left for the step's other draws: `(idx, key)`."""
    k_idx, k_rest = jax.random.split(key)
    return jax.random.randint(k_idx, (batch_size,), 0, num_rows), k_rest


def sgd_step(optimizer, objective, key, params, opt_state, *, info=SGDInfo, project=None):
    """One optax step on `objective(key, params) -> (loss, metrics)`.

    Args:
      optimizer: an `optax.GradientTransformation`.
      objective: the stochastic objective (see the module docstring); only `params` is differentiated.
      key: this step's PRNG key, passed to `objective` as it is.
      params: the parameter pytree.
      opt_state: `optimizer`'s state for `params`.
      info: the step's diagnostics type, built as `info(**metrics, grad_norm=...)`.
      project: optional `params -> params` applied after the update (e.g. a coordinate that is set to
        its exact optimum instead of moved by the optimizer).

    Returns:
      `(params, opt_state, info)` after the step; `info` describes the parameters before it.
    """
    (_, metrics), grads = jax.value_and_grad(objective, argnums=1, has_aux=True)(key, params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    if project is not None:
        params = project(params)
    return params, opt_state, info(**metrics, grad_norm=optax.tree.norm(grads))


class SGDResult(NamedTuple):
    """The result of `run_sgd`.

    Attributes:
      params: the parameters after the last step.
      opt_state: the optimizer's state after the last step.
      info: `FitInfo` (`optimizer="sgd"`): `elbo` `(num_steps + 1,)` holds each step's estimate at the
        parameters before it, then one at `params`; `steps` the stacked per-step `info`.
    """

    params: Any
    opt_state: optax.OptState
    info: FitInfo


def run_sgd(
    optimizer,
    objective: Callable,
    params,
    key,
    *,
    num_steps: int,
    opt_state=None,
    info=SGDInfo,
    project=None,
    progress=None,
) -> SGDResult:
    """Runs `num_steps` of `sgd_step` in one `lax.scan`, reporting to `progress` as it goes.

    Args:
      optimizer: an `optax.GradientTransformation`, captured by the caller's compiled fit.
      objective: `(key, params) -> (loss, metrics)`, see the module docstring.
      params: the starting parameter pytree.
      key: PRNG key; step `i` uses `jax.random.split(key, num_steps)[i]`, the final estimate
        `jax.random.fold_in(key, num_steps)`.
      num_steps: the static number of steps.
      opt_state: the optimizer's starting state (default `optimizer.init(params)`).
      info: the per-step diagnostics type (a `NamedTuple` with a field `elbo`), as in `sgd_step`.
      project: as in `sgd_step`.
      progress: what `kronvi._base.progress.progress_scope` yielded (`None`: no callback in the
        program); each report's metrics are that step's `info` fields.

    Returns:
      `SGDResult` `(params, opt_state, info)`.
    """
    if opt_state is None:
        opt_state = optimizer.init(params)

    def body(carry, xs):
        k, i = xs
        params, opt_state, step_info = sgd_step(optimizer, objective, k, *carry, info=info, project=project)
        report_progress(progress, i, num_steps, step_info._asdict())
        return (params, opt_state), step_info

    xs = (jax.random.split(key, num_steps), jnp.arange(num_steps))
    (params, opt_state), steps = lax.scan(body, (params, opt_state), xs)
    _, final = objective(jax.random.fold_in(key, num_steps), params)
    trace = jnp.concatenate([steps.elbo, final["elbo"][None]])
    return SGDResult(
        params,
        opt_state,
        fit_info(trace, jnp.asarray(num_steps), jnp.asarray(False), optimizer="sgd", steps=steps),
    )
