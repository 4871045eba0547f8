r"""Fitting mean-field DIRECT regression: exact coordinate ascent and L-BFGS on the exact ELBO.

Pure functions built on `lax.while_loop`: they run under `jit` and `vmap` (e.g. over CV folds stacked
on a leading axis) and return a `RegressionFit` `(q_w, q_noise, info)` instead of
raising inside a compiled program.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
from jax import lax

from .._base.checks import check_int
from .._model.families import MeanField
from .._model.grids import DiscretePrior
from .._model.regression import check_regression_args, elbo_from_logits
from .._solvers.info import FitInfo
from .._solvers.lbfgs import minimize_lbfgs
from .._stats.regression import RegressionStats
from .cavi import ORDERS, SWEEPS, fit_cavi
from .placement import home_sharding, resolve_device, run_on
from .starts import gaussian_start_logits

METHODS = ("cavi", "lbfgs", "optax-lbfgs")


class RegressionFit(NamedTuple):
    """The result of `fit_regression` (and of the pipeline's fits of it).

    Attributes:
      q_w: `MeanField` `(b, m)` over the weights.
      q_noise: `MeanField` `(1, m_sigma)` over the noise variance.
      info: `FitInfo`.
    """

    q_w: MeanField
    q_noise: MeanField
    info: FitInfo


def fit_regression(
    stats: RegressionStats,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    method: str = "cavi",
    init: str | tuple[MeanField, MeanField] | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    order: str = "gain",
    key: jax.Array | None = None,
    anneal_sweeps: int = 0,
    anneal_start: float = 4.0,
    sweep: str = "auto",
    device: jax.Device | None = None,
) -> RegressionFit:
    r"""Fits mean-field DIRECT regression by maximizing the exact ELBO.

    The methods:

    - `"cavi"` (default): exact coordinate ascent. Given the rest, the optimal factor is
      $\log q_j(v) = \log p_j(v) + E[\sigma^{-2}]\,(v h_j - \tfrac12 (\Phi^\top\Phi)_{jj} v^2)$ with
      $h_j = (\Phi^\top y)_j - \sum_{i\ne j}(\Phi^\top\Phi)_{ij}\bar w_i$, and
      $\log q_\sigma(s) = \log p_\sigma(s) - \tfrac n2\log s - E\|y-\Phi w\|^2/(2s)$. A sweep updates
      every weight in turn (keeping $\Phi^\top\Phi\bar w$ current in $O(b)$ per weight) and
      then the noise: $O(b^2)$ per sweep and the exact ELBO never decreases. The values in `info.elbo`
      are computed in the working dtype and carry its rounding: in float32 they can dip by about
      $10^{-4}$ of their magnitude where the iterates' float64 ELBOs still rise.
    - `"lbfgs"`: the paper's recipe, `jaxopt.LBFGS` on $-\mathcal{L}/n$ over the logits with
      gradients from `jax.grad`.
    - `"optax-lbfgs"`: the same with `optax.lbfgs`.

    Args:
      stats: `RegressionStats`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      method: one of `"cavi"`, `"lbfgs"`, `"optax-lbfgs"`.
      init: where to start: `"prior"` (default, also `None`), `"gaussian"` (the exact optimum of
        the continuous mean-field problem, `kronvi.fitting.gaussian_start`) or a tuple `(q_w, q_noise)`.
      max_iter: sweeps (CAVI, default 100) or iterations (L-BFGS, default 1000).
      tol: stop when the ELBO gains less than `tol * n` nats in a sweep (CAVI, default 1e-7) or when
        the gradient norm of $-\mathcal{L}/n$ falls below `tol` (L-BFGS, default 1e-6).
      order: CAVI update order (default `"gain"`; the orders are compared in
        `benchmarks/bench_fit_methods.py`): `"random"` (a fresh permutation per sweep from `key`),
        `"cyclic"` (0..b-1), `"greedy"` (each sweep visits weights by decreasing
        $|(\Phi^\top y)_j| / \sqrt{(\Phi^\top\Phi)_{jj}}$) or `"gain"` (each sweep visits
        weights by decreasing exact single-coordinate gain, see `coordinate_gains`).
      key: PRNG key for `order="random"` (default `jax.random.key(0)`).
      anneal_sweeps: CAVI only; the first `anneal_sweeps` sweeps maximize
        $E_q[\log p(y, w)] + T\,H[q]$ with the temperature `T` decaying geometrically from
        `anneal_start` to 1 (deterministic annealing, to escape poor local optima); the ELBO is
        monotone only after them.
      sweep: CAVI only, how a sweep visits the weights. Each schedule keeps the ELBO monotone, and its
        fixed points are the points where every factor is at its coordinate optimum.
        `"sequential"`: one loop step per weight (`cavi_sweep`). `"blocked"`: the same updates
        in turn, in blocks of 16 weights that each read their rows of $\Phi^\top\Phi$ once (rounded
        differently). `"jacobi"`: the weights are first grouped into blocks of up to 64 weakly coupled
        weights (once per fit, $O(b^2)$); each block moves together towards its single-coordinate optima,
        the full way when the exact ELBO change allows it and damped otherwise, so the ELBO cannot fall:
        another path to a fixed point. `"diagonal"`: only for diagonal $\Phi^\top\Phi$ (statistics in
        an eigenbasis): every weight moves to its optimum at once, exactly what any sequential order gives
        there, in $O(bm)$ (`diagonal_sweep`). `"auto"` (default): `"sequential"` on a CPU, `"jacobi"` on an
        accelerator (GPU, TPU), where each loop step costs kernel launches
        (`docs/decisions/fitting.md#coordinate-ascent-on-accelerators`).
      device: `None` (default): the fit runs where the statistics live. A `jax.Device` (concrete
        inputs only): the inputs are copied there once and the results copied back to the statistics'
        device, e.g. `jax.devices("cpu")[0]` to fit on the host exactly as on a CPU-only machine.

    Returns:
      `RegressionFit` `(q_w, q_noise, info)`.
    """
    return _fit_regression(
        stats, prior_w, prior_noise, method=method, init=init, max_iter=max_iter, tol=tol, order=order,
        key=key, anneal_sweeps=anneal_sweeps, anneal_start=anneal_start, sweep=sweep, device=device, check=True,
    )  # fmt: skip


def fit_regression_unchecked(
    stats: RegressionStats,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    method: str = "cavi",
    init: str | tuple[MeanField, MeanField] | None = None,
    max_iter: int | None = None,
    key: jax.Array | None = None,
    sweep: str = "auto",
) -> RegressionFit:
    """`fit_regression` of statistics and priors the library built and checked itself (one dtype, matching
    shapes, finite): `check_regression_args` is skipped."""
    return _fit_regression(
        stats, prior_w, prior_noise, method=method, init=init, max_iter=max_iter, tol=None, order="gain",
        key=key, anneal_sweeps=0, anneal_start=4.0, sweep=sweep, device=None, check=False,
    )  # fmt: skip


def _fit_regression(
    stats, prior_w, prior_noise, *, method, init, max_iter, tol, order, key, anneal_sweeps, anneal_start, sweep,
    device, check: bool,
) -> RegressionFit:  # fmt: skip
    """`fit_regression`; `check=False` skips `check_regression_args`."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}")
    if order not in ORDERS:
        raise ValueError(f"`order` must be one of {ORDERS}, got {order!r}")
    if sweep not in SWEEPS:
        raise ValueError(f"`sweep` must be one of {SWEEPS}, got {sweep!r}")
    named = init is None or (isinstance(init, str) and init in ("prior", "gaussian"))
    if named:
        q_w0, q_n0 = MeanField.from_prior(prior_w), MeanField.from_prior(prior_noise)
    else:
        if not (isinstance(init, tuple) and len(init) == 2):
            raise TypeError('`init` must be "prior", "gaussian" or a tuple (q_w, q_noise) of MeanField')
        q_w0, q_n0 = init
    if check:
        check_regression_args(q_w0, q_n0, prior_w, prior_noise, stats)  # the one validation of this fit
    if named and init == "gaussian":
        # gaussian_start, unchecked
        logits_w, logits_n = gaussian_start_logits(prior_w, prior_noise, stats, 3)
        q_w0, q_n0 = MeanField._unchecked(logits_w), MeanField._unchecked(logits_n)
    args: tuple[Any, ...] = (q_w0.logits, q_n0.logits, prior_w, prior_noise, stats)
    target = resolve_device(device, args)
    if method == "cavi":
        max_iter = 100 if max_iter is None else check_int(max_iter, "max_iter", 1)
        tol = 1e-7 if tol is None else float(tol)
        if key is None:
            key = jax.random.key(0)
        fit = functools.partial(
            fit_cavi,
            max_iter=max_iter,
            tol=tol,
            order=order,
            anneal_sweeps=check_int(anneal_sweeps, "anneal_sweeps", 0),
            anneal_start=float(anneal_start),
            sweep=sweep,
        )
        args = args + (key,)
    else:
        max_iter = 1000 if max_iter is None else check_int(max_iter, "max_iter", 1)
        tol = 1e-6 if tol is None else float(tol)
        fit = functools.partial(_fit_lbfgs, max_iter=max_iter, tol=tol, backend=method)
    if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(args)):  # maybe under `vmap`
        fit = _one_by_one_under_vmap(fit)
    if target is None:
        return RegressionFit(*fit(*args))
    return RegressionFit(*run_on(target, fit, args, home_sharding(stats)))


def _one_by_one_under_vmap(fit):
    """`fit`, whose `jax.vmap` on a CPU fits the batch one element after another (`lax.map`) inside the one
    program instead of batching every operation: a batched `lax.while_loop` runs every fold until the
    slowest stops, and a sweep's per-coordinate reads and writes become gathers and scatters over the
    fold axis, which made 5 vmapped folds slower than a Python loop over them
    (`benchmarks/results/bench_vmap_folds_cpu.txt`). Elsewhere (GPU, TPU) the batch stays batched."""

    @jax.custom_batching.custom_vmap
    def one(*args):
        return fit(*args)

    @one.def_vmap
    def _rule(axis_size, in_batched, *args):
        leaves, treedef = jax.tree.flatten(args)
        flags = jax.tree.leaves(list(in_batched))
        if jax.default_backend() != "cpu":
            axes = treedef.unflatten([0 if b else None for b in flags])
            out = jax.vmap(fit, in_axes=tuple(axes))(*args)
        else:

            def each(batched):
                it = iter(batched)
                return one(
                    *treedef.unflatten([next(it) if b else a for a, b in zip(leaves, flags, strict=True)])
                )

            out = lax.map(each, [a for a, b in zip(leaves, flags, strict=True) if b])
        return out, jax.tree.map(lambda _: True, out)

    return one


@functools.partial(jax.jit, static_argnames=("max_iter", "tol", "backend"))
def _fit_lbfgs(logits_w, logits_n, prior_w, prior_noise, stats, *, max_iter, tol, backend):
    def loss(params):
        lw, ln = params
        return -elbo_from_logits(lw, ln, prior_w, prior_noise, stats) / stats.n

    (lw, ln), info = minimize_lbfgs(
        loss, (logits_w, logits_n), stats.n, max_iter=max_iter, tol=tol, backend=backend
    )
    return MeanField._unchecked(lw), MeanField._unchecked(ln), info
