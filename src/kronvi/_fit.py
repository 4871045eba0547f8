r"""Fitting mean-field DIRECT regression: exact coordinate ascent and L-BFGS on the exact ELBO.

Both are pure functions built on ``lax.while_loop``: they run under ``jit`` and ``vmap`` (e.g. over CV
folds stacked on a leading axis) and return ``(q_w, q_noise, info)`` instead of raising inside a
compiled program.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from ._families import MeanField, grid_moments
from ._regression import (
    _elbo_terms,
    check_regression_args,
    expected_rss,
    noise_moments,
    noise_optimum_logits,
)

METHODS = ("cavi", "lbfgs", "optax-lbfgs")
ORDERS = ("random", "cyclic", "greedy", "gain")


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


def _elbo_from_logits(logits_w, logits_n, prior_w, prior_noise, stats):
    ell, lp, lq = _elbo_terms(
        MeanField._unchecked(logits_w), MeanField._unchecked(logits_n), prior_w, prior_noise, stats
    )
    return ell + lp - lq


def fit_regression(
    stats,
    prior_w,
    prior_noise,
    *,
    method: str = "cavi",
    init=None,
    max_iter: int | None = None,
    tol: float | None = None,
    order: str = "gain",
    key=None,
    anneal_sweeps: int = 0,
    anneal_start: float = 4.0,
):
    r"""Fits mean-field DIRECT regression by maximizing the exact ELBO.

    Methods:
      ``"cavi"`` (default): exact coordinate ascent. Given the rest, the optimal factor is
      :math:`\log q_j(v) = \log p_j(v) + E[\sigma^{-2}]\,(v h_j - \tfrac12 (\Phi^\top\Phi)_{jj} v^2)` with
      :math:`h_j = (\Phi^\top y)_j - \sum_{i\ne j}(\Phi^\top\Phi)_{ij}\bar w_i`, and
      :math:`\log q_\sigma(s) = \log p_\sigma(s) - \tfrac n2\log s - E\|y-\Phi w\|^2/(2s)`. A sweep updates
      every weight in turn (keeping :math:`\Phi^\top\Phi\bar w` current in :math:`O(b)` per weight) and
      then the noise: :math:`O(b^2)` per sweep and the ELBO never decreases.
      ``"lbfgs"``: the paper's recipe, ``jaxopt.LBFGS`` on :math:`-\mathcal{L}/n` over the logits with
      gradients from ``jax.grad``. ``"optax-lbfgs"``: the same with ``optax.lbfgs``.

    Args:
      stats: :class:`RegressionStats`.
      prior_w: :class:`DiscretePrior` ``(b, m)``.
      prior_noise: :class:`DiscretePrior` ``(1, m_sigma)``.
      method: one of ``"cavi"``, ``"lbfgs"``, ``"optax-lbfgs"``.
      init: where to start: ``"prior"`` (default, also ``None``), ``"gaussian"`` (the exact optimum of
        the continuous mean-field problem, :func:`kronvi.gaussian_start`) or a tuple ``(q_w, q_noise)``.
      max_iter: sweeps (CAVI, default 100) or iterations (L-BFGS, default 1000).
      tol: stop when the ELBO gains less than ``tol * n`` nats in a sweep (CAVI, default 1e-7) or when
        the gradient norm of :math:`-\mathcal{L}/n` falls below ``tol`` (L-BFGS, default 1e-6).
      order: CAVI update order (default ``"gain"``, which reached the highest ELBO in
        ``benchmarks/bench_fit_methods.py``): ``"random"`` (a fresh permutation per sweep from ``key``),
        ``"cyclic"`` (0..b-1), ``"greedy"`` (each sweep visits weights by decreasing
        :math:`|(\Phi^\top y)_j| / \sqrt{(\Phi^\top\Phi)_{jj}}`) or ``"gain"`` (each sweep visits
        weights by decreasing exact single-coordinate gain, see :func:`coordinate_gains`).
      key: PRNG key for ``order="random"`` (default ``jax.random.key(0)``).
      anneal_sweeps: CAVI only; the first ``anneal_sweeps`` sweeps maximize
        :math:`E_q[\log p(y, w)] + T\,H[q]` with the temperature ``T`` decaying geometrically from
        ``anneal_start`` to 1 (deterministic annealing, to escape poor local optima); the ELBO is
        monotone only after them.

    Returns:
      ``(q_w, q_noise, info)`` with ``info`` a :class:`FitInfo`.
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}")
    if order not in ORDERS:
        raise ValueError(f"`order` must be one of {ORDERS}, got {order!r}")
    if init is None or (isinstance(init, str) and init == "prior"):
        q_w0, q_n0 = MeanField.from_prior(prior_w), MeanField.from_prior(prior_noise)
    elif isinstance(init, str) and init == "gaussian":
        from ._starts import gaussian_start  # noqa: PLC0415 (it builds on this module)

        q_w0, q_n0 = gaussian_start(stats, prior_w, prior_noise)
    else:
        if not (isinstance(init, tuple) and len(init) == 2):
            raise TypeError('`init` must be "prior", "gaussian" or a tuple (q_w, q_noise) of MeanField')
        q_w0, q_n0 = init
    check_regression_args(q_w0, q_n0, prior_w, prior_noise, stats)
    if method == "cavi":
        max_iter = 100 if max_iter is None else int(max_iter)
        tol = 1e-7 if tol is None else float(tol)
        if key is None:
            key = jax.random.key(0)
        return _fit_cavi(
            q_w0.logits,
            q_n0.logits,
            prior_w,
            prior_noise,
            stats,
            key,
            max_iter=max_iter,
            tol=tol,
            order=order,
            anneal_sweeps=int(anneal_sweeps),
            anneal_start=float(anneal_start),
        )
    max_iter = 1000 if max_iter is None else int(max_iter)
    tol = 1e-6 if tol is None else float(tol)
    return _fit_lbfgs(
        q_w0.logits,
        q_n0.logits,
        prior_w,
        prior_noise,
        stats,
        max_iter=max_iter,
        tol=tol,
        backend=method,
    )


def _noise_update(logits_w, prior_w, prior_noise, stats):
    rss = expected_rss(MeanField._unchecked(logits_w), prior_w, stats)
    return noise_optimum_logits(rss, prior_noise, stats.n)


def _coordinate_optimum(e_inv, mean, g, prior_w, stats):
    """Optimal logits of every weight given all the others (a Jacobi candidate), ``(b, m)``."""
    A_diag = jnp.diagonal(stats.PhitPhi)
    h = stats.Phity - (g - A_diag * mean)
    V = prior_w.values
    return prior_w.log_probs + e_inv * (V * h[:, None] - 0.5 * A_diag[:, None] * V * V)


def coordinate_gains(logits_w, logits_n, prior_w, prior_noise, stats):
    r"""ELBO gain of updating each weight alone to its coordinate optimum: :math:`KL(q_j \| q_j^*)`.

    As a function of one factor the ELBO is :math:`-KL(q_j \| q_j^*) + 	ext{const}`, so this is the
    exact gain of each single-coordinate update; ``order="gain"`` visits weights by decreasing gain
    (Gauss-Southwell). Cost :math:`O(b^2 + bm)`.
    """
    e_inv, _, _ = noise_moments(MeanField._unchecked(logits_n), prior_noise)
    probs = jax.nn.softmax(logits_w, -1)
    mean, _ = grid_moments(probs, prior_w.values)
    star = jax.nn.log_softmax(_coordinate_optimum(e_inv, mean, stats.PhitPhi @ mean, prior_w, stats), -1)
    return jnp.sum(probs * (jax.nn.log_softmax(logits_w, -1) - star), axis=-1)


def cavi_sweep(logits_w, logits_n, prior_w, prior_noise, stats, order, temperature=1.0):
    """One coordinate-ascent sweep over the weights in ``order``, then the noise. Returns new logits."""
    A, c, V, logp = stats.PhitPhi, stats.Phity, prior_w.values, prior_w.log_probs
    e_inv, _, _ = noise_moments(MeanField._unchecked(logits_n), prior_noise)
    mean, _ = grid_moments(jax.nn.softmax(logits_w, -1), V)
    g = A @ mean

    def body(i, carry):
        logits, mean, g = carry
        j = order[i]
        a_jj = A[j, j]
        h = c[j] - (g[j] - a_jj * mean[j])
        v = V[j]
        new = (logp[j] + e_inv * (v * h - 0.5 * a_jj * v * v)) / temperature
        m_new = jnp.sum(jax.nn.softmax(new) * v)
        g = g + A[j] * (m_new - mean[j])
        return logits.at[j].set(new), mean.at[j].set(m_new), g

    logits_w, _, _ = lax.fori_loop(0, order.shape[0], body, (logits_w, mean, g))
    logits_n = _noise_update(logits_w, prior_w, prior_noise, stats) / temperature
    return logits_w, logits_n


@functools.partial(jax.jit, static_argnames=("max_iter", "tol", "order", "anneal_sweeps", "anneal_start"))
def _fit_cavi(
    logits_w,
    logits_n,
    prior_w,
    prior_noise,
    stats,
    key,
    *,
    max_iter,
    tol,
    order,
    anneal_sweeps,
    anneal_start,
):
    b = logits_w.shape[0]
    dtype = logits_w.dtype
    elbo0 = _elbo_from_logits(logits_w, logits_n, prior_w, prior_noise, stats)
    trace = jnp.full((max_iter + 1,), elbo0, dtype)
    greedy = jnp.argsort(-jnp.abs(stats.Phity) / jnp.sqrt(jnp.diagonal(stats.PhitPhi) + 1e-30))

    def cond(st):
        it, _, _, tr, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, lw, ln, tr, _ = st
        if order == "random":
            perm = jax.random.permutation(jax.random.fold_in(key, it), b)
        elif order == "gain":
            perm = jnp.argsort(-coordinate_gains(lw, ln, prior_w, prior_noise, stats))
        elif order == "greedy":
            perm = greedy
        else:
            perm = jnp.arange(b)
        if anneal_sweeps > 0:
            frac = jnp.minimum(it.astype(dtype) / anneal_sweeps, 1.0)
            temperature = jnp.asarray(anneal_start, dtype) ** (1.0 - frac)
        else:
            temperature = jnp.asarray(1.0, dtype)
        lw, ln = cavi_sweep(lw, ln, prior_w, prior_noise, stats, perm, temperature)
        e = _elbo_from_logits(lw, ln, prior_w, prior_noise, stats)
        gain = e - tr[it]
        done = (it + 1 > anneal_sweeps) & (gain < tol * stats.n)
        return it + 1, lw, ln, tr.at[it + 1].set(e), done

    it, lw, ln, tr, done = lax.while_loop(
        cond, body, (jnp.asarray(0), logits_w, logits_n, trace, jnp.asarray(False))
    )
    tr = jnp.where(jnp.arange(max_iter + 1) <= it, tr, tr[it])
    return MeanField._unchecked(lw), MeanField._unchecked(ln), FitInfo(tr, it, done)


def jaxopt_lbfgs(loss, *, max_iter, tol):
    """The ``jaxopt.LBFGS`` solver of :func:`minimize_lbfgs` (``backend="lbfgs"``), with its own zoom line
    search.

    jaxopt.LBFGS hands the line search it builds a step cap of ``max_stepsize`` (default 1). Its first
    direction is the raw gradient, so its first step moved the parameters by at most ``|grad|``: about
    2e-6 for the ``-bound/n`` loss of a mixture at n = 44,000 (keggdirected). A curvature pair from so
    short a step is dominated by rounding or, near a saddle such as a mixture started at a perturbed mean
    field, has ``s.y < 0``; jaxopt keeps it, the next direction points uphill, the line search fails, and
    its approximate-Wolfe test (value within ``1e-6 |f|``) still accepted steps that lowered the bound at
    every iteration (``experiments/results/lb_method_check.md``;
    ``tests/test_fit.py::test_lbfgs_leaves_a_saddle_at_any_loss_scale``). A line search passed in keeps
    its own cap, ``2**maxiter``, so a search may expand a step past 1 until the strong-Wolfe curvature
    condition holds, as ``optax.lbfgs``'s does. Every search starts at a step of 1 (``linesearch_init=
    "max"`` with LBFGS's ``max_stepsize`` of 1), the natural L-BFGS step, as optax's does; jaxopt's default
    (``"increase"``: 1.5 times the last step) started the searches after a long first step far out on
    the plateaus where the softmax saturates, and from the prior the mean-field fit ended 2,700 nats lower
    at b = 2000 (``benchmarks/results/bench_fit_methods_init_increase.txt``).
    """
    from ._jaxopt import LBFGS, ZoomLineSearch

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


@functools.partial(jax.jit, static_argnames=("max_iter", "tol", "backend"))
def _fit_lbfgs(logits_w, logits_n, prior_w, prior_noise, stats, *, max_iter, tol, backend):
    def loss(params):
        lw, ln = params
        return -_elbo_from_logits(lw, ln, prior_w, prior_noise, stats) / stats.n

    (lw, ln), info = minimize_lbfgs(
        loss, (logits_w, logits_n), stats.n, max_iter=max_iter, tol=tol, backend=backend
    )
    return MeanField._unchecked(lw), MeanField._unchecked(ln), info
