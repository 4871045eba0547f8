r"""One L-BFGS driver for every exact objective in kronvi (mean field, mixtures, GP hyperparameters).

Two backends: ``jaxopt.LBFGS`` (the paper's recipe; configured in :func:`jaxopt_lbfgs`) and ``optax.lbfgs``.
Why jaxopt is configured the way it is: ``docs/notes/2026-11-15-lbfgs-safeguards.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

BACKENDS = ("lbfgs", "optax-lbfgs")


class FitInfo(NamedTuple):
    """Diagnostics of a fit.

    Attributes:
      elbo: ``(max_iter + 1,)`` ELBO at the start (index 0) and after each iteration (sweep for
        ``"cavi"``); entries past ``num_iter`` repeat the final value. For L-BFGS each entry is the
        best value so far (the fit returns its best iterate), so the trace never decreases.
      num_iter: iterations run.
      converged: whether the stopping criterion was met before ``max_iter``.
    """

    elbo: jax.Array
    num_iter: jax.Array
    converged: jax.Array


def jaxopt_lbfgs(loss, *, max_iter, tol):
    """``jaxopt.LBFGS`` on ``loss`` with its own zoom line search, every search started at a step of 1.

    The line search passed in keeps its own step cap (``2**maxiter``) instead of LBFGS's ``max_stepsize=1``,
    so a first step along a tiny gradient can expand until the strong-Wolfe curvature condition holds, as
    ``optax.lbfgs``'s does (``docs/notes/2026-11-15-lbfgs-safeguards.md``).
    """
    from .jaxopt import LBFGS, ZoomLineSearch

    linesearch = ZoomLineSearch(fun=loss, maxiter=30)
    return LBFGS(fun=loss, maxiter=max_iter, tol=tol, linesearch=linesearch, linesearch_init="max")


def minimize_lbfgs(loss, params, scale, *, max_iter, tol, backend):
    """L-BFGS on ``loss(params)`` in a ``lax.while_loop`` (traceable; call inside ``jit``).

    ``backend="lbfgs"`` uses ``jaxopt.LBFGS`` (the paper's recipe, configured by
    :func:`jaxopt_lbfgs`), anything else ``optax.lbfgs``. Stops after ``max_iter`` iterations or when the
    gradient norm falls below ``tol``. Returns the best iterate (lowest finite ``loss``; the start if
    no step improved on it), so the fit never ends worse than it began, and a :class:`FitInfo` whose
    trace holds ``-(best loss so far) * scale`` (the ELBO when ``loss = -ELBO / scale``): non-decreasing,
    its entry at ``num_iter`` that of the returned parameters.
    """
    value0 = loss(params)
    trace = jnp.full((max_iter + 1,), -value0 * scale)

    if backend == "lbfgs":
        solver = jaxopt_lbfgs(loss, max_iter=max_iter, tol=tol)
        state = solver.init_state(params)

        def step(params, state):
            params, state = solver.update(params, state)
            return params, state, state.value, state.error

    else:
        opt = optax.lbfgs()
        state = opt.init(params)
        value_and_grad = optax.value_and_grad_from_state(loss)

        def step(params, state):
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss)
            params = optax.apply_updates(params, updates)
            v, g = value_and_grad(params, state=state)
            return params, state, v, optax.tree.norm(g)

    def cond(st):
        it, *_, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, params, state, best, best_value, tr, _ = st
        params, state, value, err = step(params, state)
        better = value < best_value  # False for NaN
        best = jax.tree.map(lambda new, old: jnp.where(better, new, old), params, best)
        best_value = jnp.where(better, value, best_value)
        return it + 1, params, state, best, best_value, tr.at[it + 1].set(-best_value * scale), err <= tol

    init = (jnp.asarray(0), params, state, params, value0, trace, jnp.asarray(False))
    it, _, _, best, _, tr, done = lax.while_loop(cond, body, init)
    tr = jnp.where(jnp.arange(max_iter + 1) <= it, tr, tr[it])
    return best, FitInfo(tr, it, done)
