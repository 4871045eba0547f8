r"""Fitting the DIRECT quadratic network and predicting with it.

Two optimizers on the exact ELBO of `kronvi.bnn._elbo`:

* L-BFGS on the softmax logits with exact gradients (`kronvi.fitting.minimize_lbfgs`);
* exact coordinate ascent. Under the mean field the expected log-likelihood is *multilinear* in the
  factors $q_1, \dots, q_P$ (each monomial's expectation is a product of one moment per weight), so
  as a function of one factor the ELBO is $\langle q_p, c_p + \log p_p\rangle + H[q_p] + \text{const}$
  and its maximizer is closed form, $\log q_p = \log p_p + c_p$ (normalized), with
  $c_{pl} = \partial E_q[\log p(y\mid w,\sigma^2)] / \partial q_{pl}$ read off by automatic
  differentiation (on the simplex, up to a constant that the softmax ignores). One sweep visits the
  `P` weights in turn, each at the cost of one gradient, then the noise; the ELBO never decreases.

The ELBO of a quadratic network is symmetric (a sign flip of a hidden unit's incoming weights, a
permutation of hidden units) and a symmetric start (`q = prior` on a symmetric grid) is a stationary
point, so fits start from randomly perturbed logits (`bnn_init`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_key,
    check_ndim,
    check_nonnegative_number,
    check_positive_number,
    is_concrete,
)
from .._base.deprecation import renamed_arguments
from .._model.families import MeanField
from .._model.grids import DiscretePrior
from .._model.regression import noise_moments, noise_optimum_logits
from .._solvers.info import FitInfo, fit_info
from .._solvers.lbfgs import minimize_lbfgs
from ._elbo import (
    check_bnn_args,
    elbo_from_logits,
    expected_rss_from_probs,
    general_fit_terms,
    one_hidden_point_moments,
)
from ._net import check_layer_sizes
from ._stats import BNNStats, check_bnn_stats, tensor_power_map

BNN_METHODS = ("lbfgs", "optax-lbfgs", "cavi")
# An L-BFGS fit has converged only if one coordinate-ascent sweep from it gains at most this many nats per row.
_SWEEP_GAIN = 1e-6


class BNNFit(NamedTuple):
    """The result of `fit_bnn`.

    Attributes:
      q_w: `kronvi.model.MeanField` `(P, m)` over the weights, in
        `quadratic_net` order.
      q_noise: `kronvi.model.MeanField` `(1, m_sigma)` over the noise variance.
      info: `kronvi.FitInfo`.
    """

    q_w: MeanField
    q_noise: MeanField
    info: FitInfo


def bnn_init(
    key: jax.Array, prior_w: DiscretePrior, prior_noise: DiscretePrior, *, scale: float = 1.0
) -> tuple[MeanField, MeanField]:
    r"""A symmetry-breaking start: `q_w` with logits `prior_w.log_probs + scale * N(0, 1)`, `q_noise`
    equal to its prior.

    Args:
      key: PRNG key.
      prior_w: `kronvi.model.DiscretePrior` `(P, m)`.
      prior_noise: `kronvi.model.DiscretePrior` `(1, m_sigma)`.
      scale: standard deviation of the logit perturbation.

    Returns:
      `(q_w, q_noise)`, two `kronvi.model.MeanField`.
    """
    noise = jax.random.normal(key, prior_w.log_probs.shape, prior_w.log_probs.dtype)
    return (
        MeanField._unchecked(prior_w.log_probs + scale * noise),
        MeanField._unchecked(prior_noise.log_probs),
    )


@renamed_arguments(q_init="init")
def fit_bnn(
    stats: BNNStats,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    method: str = "cavi",
    init: tuple[MeanField, MeanField] | None = None,
    key: jax.Array | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    init_scale: float = 3.0,
    num_starts: int = 1,
) -> BNNFit:
    r"""Fits the mean-field DIRECT quadratic network by maximizing the exact ELBO (`bnn_elbo`).

    Args:
      stats: `BNNStats` (they carry `layer_sizes`).
      prior_w: `kronvi.model.DiscretePrior` `(P, m)` over the weights in `quadratic_net` order.
      prior_noise: `kronvi.model.DiscretePrior` `(1, m_sigma)`.
      method: `"cavi"` (default; exact coordinate ascent, one gradient per weight per sweep; the ELBO
        never decreases), `"lbfgs"` (`jaxopt.LBFGS` on $-\mathcal L/n$ over the logits, exact
        gradients) or `"optax-lbfgs"` (the same with `optax.lbfgs`). L-BFGS on softmax logits stalls
        where factors saturate (their gradient vanishes away from any optimum): on this docstring's
        example it stops after 12 iterations at ELBO -595, where coordinate ascent reaches -78
        (`docs/decisions/fitting.md#quadratic-activation-bnns`).
      init: `(q_w, q_noise)` to start from; `None` (default): `bnn_init` with `key`
        and `init_scale` (`num_starts` of them).
      key: PRNG key for the random start (default `jax.random.key(0)`).
      max_iter: L-BFGS iterations (default 1000) or CAVI sweeps (default 50).
      tol: L-BFGS: gradient-norm tolerance on $-\mathcal L/n$ (default 1e-6); CAVI: stop when a
        sweep gains less than `tol * n` nats (default 1e-7). `info.converged` of an L-BFGS fit also
        requires that one coordinate-ascent sweep from its result gains at most `1e-6 n` nats (or
        rounding), so that a stall on saturated factors is not reported as converged.
      init_scale: logit perturbation of the random starts (3: far enough from the symmetric stationary
        point that the fits spread over different optima).
      num_starts: random starts fitted together (`vmap`); the fit with the highest final ELBO is
        returned. The ELBO of a quadratic network has many local optima
        (`docs/decisions/fitting.md#quadratic-activation-bnns`), so a handful of starts pays. Ignored with `init`.

    Returns:
      `BNNFit` `(q_w, q_noise, info)`.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> from kronvi.bnn import bnn_stats, fit_bnn
      >>> X = jax.random.normal(jax.random.key(0), (50, 2)); y = X[:, 0] ** 2 - 1.0
      >>> X1 = jnp.concatenate([X, jnp.ones((50, 1))], axis=1)
      >>> stats = bnn_stats(X1, y, (3, 2, 1))
      >>> pw, pn = kronvi.model.gaussian_prior(8, 1.0, levels=7), kronvi.model.noise_prior(0.1)
      >>> q_w, q_n, info = fit_bnn(stats, pw, pn)
      >>> round(float(info.final_elbo)), bool(info.converged)
      (-78, True)
    """
    if method not in BNN_METHODS:
        raise ValueError(f"`method` must be one of {BNN_METHODS}, got {method!r}")
    sizes = check_bnn_stats(stats)
    num_starts = check_int(num_starts, "num_starts", 1)
    if tol is not None:
        check_nonnegative_number(tol, "tol")
    if init is None:
        key = jax.random.key(0) if key is None else key
        check_key(key)
        if is_concrete(init_scale):  # a traced scale (fit_bnn inside jit) is the caller's
            check_positive_number(init_scale, "init_scale")
        q_w0, q_n0 = bnn_init(key, prior_w, prior_noise, scale=init_scale)
    else:
        num_starts = 1
        if not (isinstance(init, tuple) and len(init) == 2):
            raise TypeError("`init` must be None or a tuple (q_w, q_noise) of MeanField")
        q_w0, q_n0 = init
    check_bnn_args(q_w0, q_n0, prior_w, prior_noise, sizes)
    if method == "cavi":
        max_iter = 50 if max_iter is None else check_int(max_iter, "max_iter", 1)
        tol = 1e-7 if tol is None else float(tol)
        fit = functools.partial(_fit_cavi, max_iter=max_iter, tol=tol)
    else:
        max_iter = 1000 if max_iter is None else check_int(max_iter, "max_iter", 1)
        tol = 1e-6 if tol is None else float(tol)
        backend = "lbfgs" if method == "lbfgs" else "optax-lbfgs"
        fit = functools.partial(_fit_lbfgs, max_iter=max_iter, tol=tol, backend=backend)
    if num_starts == 1:
        return BNNFit(*fit(q_w0.logits, q_n0.logits, prior_w, prior_noise, stats))
    return BNNFit(*_best_of_starts(fit, key, init_scale, num_starts, prior_w, prior_noise, stats))


def _best_of_starts(fit, key, init_scale, num_starts, prior_w, prior_noise, stats):
    keys = jax.random.split(key, num_starts)
    lw0 = jax.vmap(lambda k: bnn_init(k, prior_w, prior_noise, scale=init_scale)[0].logits)(keys)
    ln0 = jnp.broadcast_to(prior_noise.log_probs, (num_starts,) + prior_noise.log_probs.shape)
    q_w, q_n, info = jax.vmap(fit, in_axes=(0, 0, None, None, None))(lw0, ln0, prior_w, prior_noise, stats)
    best = jnp.argmax(info.final_elbo)
    return jax.tree.map(lambda a: a[best], (q_w, q_n, info))


def _cavi_sweep(lw, ln, prior_w, prior_noise, stats, sizes):
    """One coordinate-ascent sweep: every weight factor in turn (its exact optimum given the rest), then the
    noise factor. Returns the new `(logits_w, logits_noise)`."""
    P = lw.shape[0]

    def rss_of(probs):  # on the simplex: the multilinear extension, normalized so gradients are exact
        return expected_rss_from_probs(
            probs / jnp.sum(probs, axis=-1, keepdims=True), prior_w.values, stats, sizes
        )

    rss_grad = jax.grad(rss_of)
    e_inv, _, _ = noise_moments(MeanField._unchecked(ln), prior_noise)

    def update(p, lw):
        g = rss_grad(jax.nn.softmax(lw, axis=-1))[p]
        return lw.at[p].set(jax.nn.log_softmax(prior_w.log_probs[p] - 0.5 * e_inv * g))

    lw = lax.fori_loop(0, P, update, lw)
    rss = expected_rss_from_probs(jax.nn.softmax(lw, axis=-1), prior_w.values, stats, sizes)
    return lw, noise_optimum_logits(rss, prior_noise, stats.n)


@functools.partial(jax.jit, static_argnames=("max_iter", "tol", "backend"))
def _fit_lbfgs(logits_w, logits_n, prior_w, prior_noise, stats, *, max_iter, tol, backend):
    sizes = check_bnn_stats(stats)

    def loss(params):
        lw, ln = params
        return -elbo_from_logits(lw, ln, prior_w, prior_noise, stats, sizes) / stats.n

    (lw, ln), info = minimize_lbfgs(
        loss, (logits_w, logits_n), stats.n, max_iter=max_iter, tol=tol, backend=backend
    )
    # A saturated softmax has a vanishing gradient far from any optimum: the fit has converged only when,
    # besides the gradient test, no factor can gain by moving to its exact coordinate optimum.
    gain = elbo_from_logits(
        *_cavi_sweep(lw, ln, prior_w, prior_noise, stats, sizes), prior_w, prior_noise, stats, sizes
    )
    value = info.final_elbo
    slack = jnp.maximum(_SWEEP_GAIN * stats.n, 16 * jnp.finfo(value.dtype).eps * jnp.abs(value))  # rounding
    info = info._replace(converged=info.converged & (gain - value <= slack))
    return MeanField._unchecked(lw), MeanField._unchecked(ln), info


@functools.partial(jax.jit, static_argnames=("max_iter", "tol"))
def _fit_cavi(logits_w, logits_n, prior_w, prior_noise, stats, *, max_iter, tol):
    sizes = check_bnn_stats(stats)

    def elbo(lw, ln):
        return elbo_from_logits(lw, ln, prior_w, prior_noise, stats, sizes)

    def cond(st):
        it, _, _, _, done, _ = st
        return (it < max_iter) & ~done

    def body(st):
        it, lw, ln, value, _, trace = st
        lw, ln = _cavi_sweep(lw, ln, prior_w, prior_noise, stats, sizes)
        new = elbo(lw, ln)
        trace = trace.at[it + 1].set(new)
        return it + 1, lw, ln, new, ~(new - value > tol * stats.n), trace

    value0 = elbo(logits_w, logits_n)
    trace = jnp.full((max_iter + 1,), value0)
    init = (jnp.asarray(0), logits_w, logits_n, value0, jnp.asarray(False), trace)
    it, lw, ln, _, done, trace = lax.while_loop(cond, body, init)
    trace = jnp.where(jnp.arange(max_iter + 1) <= it, trace, trace[it])
    return MeanField._unchecked(lw), MeanField._unchecked(ln), fit_info(trace, it, done, optimizer="cavi")


def predict_bnn(
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    X_new: ArrayLike,
    layer_sizes: Sequence[int],
) -> tuple[jax.Array, jax.Array]:
    r"""Exact predictive mean and variance of $y^* = f(x^*; w) + \varepsilon$ under `q`.

    Mean $E_q[f(x^*)]$, variance $\mathrm{Var}_q[f(x^*)] + E_q[\sigma^2]$, both exact sums over
    every weight configuration: for one hidden layer in $O(h d)$ per point
    ($E f = \sum_j \bar v_j g_j$, $\mathrm{Var} f = \sum_j (E[v_j^2] E[(W_j\cdot x)^4] - \bar v_j^2 g_j^2)$,
    $g_j = E[(W_j\cdot x)^2]$), for deeper networks by the monomial expansion at each point.

    Args:
      q_w: `kronvi.model.MeanField` over the `P` weights, logits `(P, m)`, as in
        `bnn_elbo`.
      q_noise: `kronvi.model.MeanField` over the noise variance, logits `(1, m_sigma)`.
      prior_w: `kronvi.model.DiscretePrior` `(P, m)`.
      prior_noise: `kronvi.model.DiscretePrior` `(1, m_sigma)` over positive variances.
      X_new: test inputs `(num_points, d)`.
      layer_sizes: `(d, h_1, ..., h_L, 1)`, Python ints (static under `jit`).

    Returns:
      `(mean, variance)`, each `(num_points,)`.

    Raises:
      ValueError: bad `layer_sizes`, or priors / `X_new` that do not match them.
    """
    sizes = check_layer_sizes(layer_sizes)
    check_bnn_args(q_w, q_noise, prior_w, prior_noise, sizes)
    X_new = as_float_array(X_new, "X_new")
    check_ndim(X_new, 2, "X_new", "(num_points, num_inputs)")
    if X_new.shape[1] != sizes[0]:
        raise ValueError(f"`X_new` has {X_new.shape[1]} columns but layer_sizes[0] is {sizes[0]}")
    check_finite(X_new, "X_new")
    probs, values = q_w.probs, prior_w.values
    if len(sizes) == 3:
        mean, var_f = one_hidden_point_moments(probs, values, X_new, sizes[0], sizes[1])
    else:
        Z = tensor_power_map(len(sizes) - 2)(X_new)

        def point(z):
            return general_fit_terms(probs, values, z, z[:, None] * z[None, :], sizes)

        mean, second = lax.map(point, Z)
        var_f = second - mean**2
    _, _, e_s = noise_moments(q_noise, prior_noise)
    return mean, var_f + e_s
