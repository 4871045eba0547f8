r"""One L-BFGS driver for every exact objective in kronvi (mean field, mixtures, GP hyperparameters).

Two backends: `jaxopt.LBFGS` (the paper's recipe; configured in `jaxopt_lbfgs`) and `optax.lbfgs`.
Why jaxopt is configured the way it is: `docs/decisions/fitting.md#one-l-bfgs-driver`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.typing import ArrayLike

from .info import FitInfo, fit_info

BACKENDS = ("lbfgs", "optax-lbfgs")


def jaxopt_lbfgs(loss, *, max_iter, tol):
    """`jaxopt.LBFGS` on `loss` with its own zoom line search, every search started at a step of 1.

    The line search passed in keeps its own step cap (`2**maxiter`) instead of LBFGS's `max_stepsize=1`,
    so a first step along a tiny gradient can expand until the strong-Wolfe curvature condition holds, as
    `optax.lbfgs`'s does (`docs/decisions/fitting.md#one-l-bfgs-driver`).
    """
    from .jaxopt import LBFGS, ZoomLineSearch

    linesearch = ZoomLineSearch(fun=loss, maxiter=30)
    return LBFGS(fun=loss, maxiter=max_iter, tol=tol, linesearch=linesearch, linesearch_init="max")


def minimize_lbfgs(
    loss: Callable[[Any], jax.Array],
    params: Any,
    scale: ArrayLike = 1.0,
    *,
    max_iter: int,
    tol: ArrayLike,
    backend: str = "optax-lbfgs",
    stall_rtol: float | None = None,
    stall_atol: ArrayLike | None = None,
) -> tuple[Any, FitInfo]:
    """L-BFGS on `loss(params)` in a `lax.while_loop` (traceable; call inside `jit` or `vmap`).

    `backend="lbfgs"` uses `jaxopt.LBFGS` (the paper's recipe, configured by `jaxopt_lbfgs`),
    `"optax-lbfgs"` uses `optax.lbfgs`; both take the value and gradient their line search stored at
    the accepted point, so an iteration costs one line search and nothing more.

    Stops after `max_iter` iterations, when the gradient norm falls below `tol` (converged), or at a
    stall: with `stall_rtol`, when an iteration lowers the loss by no more than
    `stall_rtol * max(1, |loss|)`; with `stall_atol`, when two iterations in a row each lower it by
    less than `stall_atol` (`docs/decisions/gp-step.md#when-a-start-stops`).

    Returns:
      `(best, info)`: the best iterate (lowest finite `loss`; the start if no step improved on it),
      so a fit never ends worse than it began, and a `FitInfo` (`optimizer=backend`) whose trace holds
      `-(best loss so far) * scale` (the ELBO when `loss = -ELBO / scale`), whose `iterate_elbo`
      holds `-loss * scale` at every iterate, and whose `grad_norm` is the gradient norm at `best`.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> x, info = kronvi.fitting.minimize_lbfgs(lambda x: jnp.sum((x - 2.0) ** 2), jnp.zeros(3), max_iter=50, tol=1e-6)
      >>> [round(float(v), 4) for v in x], bool(info.converged)
      ([2.0, 2.0, 2.0], True)
    """
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {BACKENDS}, got {backend!r}")
    dtypes = jax.tree.map(lambda p: jnp.result_type(p), params)

    def cast_loss(p):  # the line searches' float64 step sizes (x64 on) must not promote float32 parameters
        return loss(jax.tree.map(lambda a, dt: a.astype(dt), p, dtypes))

    value0, grad0 = jax.value_and_grad(cast_loss)(params)
    gnorm0 = optax.tree.norm(grad0)
    trace = jnp.full((max_iter + 1,), -value0 * scale)
    iterates = trace

    if backend == "lbfgs":
        solver = jaxopt_lbfgs(cast_loss, max_iter=max_iter, tol=tol)
        state = solver.init_state(params)

        def step(params, state, value, grad):
            params, state = solver.update(params, state)
            return params, state, state.value, state.grad

    else:
        opt = optax.lbfgs()
        state = opt.init(params)

        def step(params, state, value, grad):
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=cast_loss)
            params = optax.apply_updates(params, updates)
            return params, state, optax.tree.get(state, "value"), optax.tree.get(state, "grad")

    def cond(st):
        it, *_, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, params, state, value, grad, best, best_value, best_gnorm, tr, its, small, _ = st
        params, state, new_value, grad = step(params, state, value, grad)
        gnorm = optax.tree.norm(grad)
        better = new_value < best_value  # False for NaN
        best = jax.tree.map(lambda new, old: jnp.where(better, new, old), params, best)
        best_value = jnp.where(better, new_value, best_value)
        best_gnorm = jnp.where(better, gnorm, best_gnorm)
        done = gnorm <= tol
        if stall_rtol is not None:
            done = done | ~(value - new_value > stall_rtol * jnp.maximum(1.0, jnp.abs(new_value)))
        if stall_atol is not None:
            small = jnp.where(value - new_value < stall_atol, small + 1, 0)
            done = done | (small >= 2)
        tr = tr.at[it + 1].set(-best_value * scale)
        its = its.at[it + 1].set(-new_value * scale)
        return it + 1, params, state, new_value, grad, best, best_value, best_gnorm, tr, its, small, done

    done0 = ~jnp.isfinite(value0)
    init = (
        jnp.asarray(0), params, state, value0, grad0, params, value0, gnorm0, trace, iterates, jnp.asarray(0), done0
    )  # fmt: skip
    it, *_, best, _, best_gnorm, tr, its, _, _ = lax.while_loop(cond, body, init)
    past = jnp.arange(max_iter + 1) > it
    tr, its = jnp.where(past, tr[it], tr), jnp.where(past, its[it], its)
    return best, fit_info(
        tr, it, best_gnorm <= tol, optimizer=backend, grad_norm=best_gnorm, iterate_elbo=its
    )
