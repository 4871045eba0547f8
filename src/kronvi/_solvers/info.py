r"""The diagnostics every fit returns (`FitInfo`), a pytree whose `optimizer` is static."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

OPTIMIZERS = ("cavi", "lbfgs", "optax-lbfgs", "sgd")


class FitInfo(NamedTuple):
    """Diagnostics of a fit: the same fields for every family and method.

    A pytree whose leaves are the arrays; `optimizer` is static (auxiliary data), so a fit returning it
    runs under `jit` and `vmap` (stacked over folds every array gains a leading axis).

    Attributes:
      elbo: `(max_iter + 1,)` the fit's objective (the ELBO, or the bound it maximizes) at the start
        (index 0) and after each iteration (sweep for `"cavi"`, step for `"sgd"`); entries past
        `num_iter` repeat the final value. For L-BFGS each entry is the best value so far (the fit
        returns its best iterate), so this trace cannot decrease; the value at each iterate is
        `iterate_elbo`. For `"sgd"` the entries are unbiased Monte Carlo estimates: entry `i < num_iter`
        the one step `i` computed with its gradient, the last one a fresh estimate at the returned
        parameters.
      final_elbo: `()` the objective at the returned parameters, `elbo[num_iter]`.
      num_iter: `()` iterations run (at most `max_iter`; `num_steps` for `"sgd"`).
      converged: `()` whether the stopping criterion was met before `max_iter` (always false for
        `"sgd"`, which runs a fixed number of steps).
      optimizer: the method that ran: `"cavi"` (coordinate ascent), `"lbfgs"` (`jaxopt.LBFGS`),
        `"optax-lbfgs"` (`optax.lbfgs`) or `"sgd"` (an optax optimizer on stochastic estimates). Static.
      grad_norm: L-BFGS only: the gradient norm at the returned parameters (`None` otherwise).
      iterate_elbo: L-BFGS only (`None` otherwise, where `elbo` already holds each iterate's value):
        `(max_iter + 1,)` the objective at the start and at the point each iteration reached, which a
        failed line search can leave below the one before (or at NaN); entries past `num_iter` repeat
        the last. `elbo` is its running maximum over finite values.
      steps: `"sgd"` only: the per-step diagnostics stacked over the `num_steps` steps (e.g.
        `ReparamInfo`, `MixtureSGDInfo`);
        `None` otherwise.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> stats = kronvi.stats.regression_stats(jnp.eye(3), jnp.ones(3))
      >>> pw, pn = kronvi.model.gaussian_prior(3, 1.0, levels=5), kronvi.model.noise_prior(0.1)
      >>> info = kronvi.fitting.fit_regression(stats, pw, pn).info
      >>> info.optimizer, bool(info.final_elbo == info.elbo[info.num_iter])
      ('cavi', True)
      >>> jax.tree.leaves(info)[0] is info.elbo  # `optimizer` is not a leaf
      True
    """

    elbo: jax.Array
    final_elbo: jax.Array
    num_iter: jax.Array
    converged: jax.Array
    optimizer: str
    grad_norm: jax.Array | None = None
    iterate_elbo: jax.Array | None = None
    steps: Any = None


def register_static_optimizer(cls):
    """Registers the NamedTuple `cls` as a pytree whose field `optimizer` is auxiliary (static) data and
    every other field a child, so that a string never becomes a leaf under `jit` or `vmap`."""
    fields = tuple(f for f in cls._fields if f != "optimizer")

    def flatten_with_keys(x):
        return tuple((jax.tree_util.GetAttrKey(f), getattr(x, f)) for f in fields), x.optimizer

    def flatten(x):
        return tuple(getattr(x, f) for f in fields), x.optimizer

    def unflatten(optimizer, children):
        return cls(optimizer=optimizer, **dict(zip(fields, children, strict=True)))

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls


register_static_optimizer(FitInfo)


def fit_info(elbo, num_iter, converged, *, optimizer: str, **optional) -> FitInfo:
    """A `FitInfo` with `final_elbo = elbo[num_iter]` (traceable: call it where
    `elbo` is one trace, inside `jit` or under `vmap`)."""
    return FitInfo(elbo, elbo[num_iter], num_iter, converged, optimizer, **optional)
