r"""Learning a feature map by maximizing the exact DIRECT ELBO, through the sufficient statistics.

The ELBO sees the data only through $s(\theta) = (n, y^\top y, \Phi_\theta^\top y, \Phi_\theta^\top\Phi_\theta)$,
so for a feature map $\Phi_\theta = f(\theta, X)$

$$
\nabla_\theta \mathcal{L} = \Big(\frac{\partial s}{\partial \theta}\Big)^{\!\top} \frac{\partial \mathcal{L}}{\partial s},
\qquad
\frac{\partial \mathcal{L}}{\partial \Phi_\theta} = y\,g^\top + \Phi_\theta (G + G^\top),
$$

with $g = \partial\mathcal{L}/\partial(\Phi^\top y)$ and $G = \partial\mathcal{L}/\partial(\Phi^\top\Phi)$, both
$O(b^2)$ and computed once. `feature_stats` has this pullback as
its custom VJP: one forward pass over row chunks for the statistics and one backward pass that
recomputes each chunk's features and pulls $y_c g^\top + \Phi_c(G + G^\top)$ back through the feature map,
so memory stays $O(\text{chunk}\cdot b + b^2)$ plus the parameters, never $O(nb)$.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import check_finite, check_int, check_nonempty, check_xy, is_concrete
from .._base.deprecation import renamed_arguments, reordered_arguments
from .._base.precision import matmul
from .._base.pytree import as_traced_callable
from .._model.families import MeanField
from .._model.grids import DiscretePrior
from .._model.regression import check_regression_args, regression_elbo
from .._solvers.info import register_static_optimizer
from .._solvers.lbfgs import BACKENDS, minimize_lbfgs
from .._stats.regression import RegressionStats, check_stats, stats_from_inputs
from .regression import fit_regression

_STARTS = ("previous", "gaussian", "prior")


@register_static_optimizer
class FeatureFitInfo(NamedTuple):
    """Diagnostics of `fit_features`: the fields of
    `kronvi.FitInfo` (an iteration is a round), then the objective's.

    Attributes:
      elbo: `(max_iter + 1,)` the ELBO after the first fit of `q` (index 0) and after each round (a
        parameter step, then a refit of `q`); entries past `num_iter` repeat the final value.
      final_elbo: the ELBO at the returned parameters and `q`, `elbo[num_iter]`.
      num_iter: rounds run.
      converged: whether a round gained less than `tol * n` nats before `max_iter` rounds.
      optimizer: the method of the parameter steps, `"optax-lbfgs"` or `"lbfgs"` (static).
      objective: `(max_iter + 1,)` the objective (the ELBO, plus `log_prior(params)` when given) at the
        same points. It never decreases.
      grad_norm: norm of the gradient of the objective divided by `n`, in the parameters, at the returned
        parameters, with the `q` of that round's step (`nan` when no round was accepted).
      attempted: `(max_iter + 1,)` the objective each round reached before the no-progress test (`nan`
        where every refit's ELBO was non-finite): `objective`, except at a last round that the test
        undid. With `"previous"` among the starts it does not decrease either, by the argument above
        and not by that test.
    """

    elbo: np.ndarray
    final_elbo: float
    num_iter: int
    converged: bool
    optimizer: str
    objective: np.ndarray
    grad_norm: float
    attempted: np.ndarray | None = None


class FeatureFit(NamedTuple):
    """The result of `fit_features`.

    Attributes:
      params: the learned parameters of the feature map (a pytree like the starting ones).
      q_w: `MeanField` `(b, m)` over the weights of the learned features.
      q_noise: `MeanField` `(1, m_sigma)` over the noise variance.
      info: `FeatureFitInfo`.
    """

    params: object
    q_w: MeanField
    q_noise: MeanField
    info: FeatureFitInfo


def _apply(fn, params, X):
    return fn(params, X)


def _resolve_chunk(n, chunk_size):
    if chunk_size is None:  # equal chunks of at most 4096 rows, as regression_stats
        return -(-n // max(1, -(-n // 4096)))
    return check_int(chunk_size, "chunk_size", 1)


def feature_stats(
    params: Any,
    X: ArrayLike,
    y: ArrayLike,
    *,
    feature_fn: Callable[[Any, jax.Array], jax.Array],
    chunk_size: int | None = None,
) -> RegressionStats:
    r"""Sufficient statistics of $\Phi =$ `feature_fn(params, X)`, differentiable in `params`, `X`, `y`.

    The forward pass is `regression_stats_from_inputs`
    (chunked, compensated sums). The backward pass is a custom VJP: given the cotangents
    $(\bar n, \bar a, g, G)$ of $(n, y^\top y, \Phi^\top y, \Phi^\top\Phi)$ it revisits the row chunks,
    recomputes $\Phi_c$ and pulls

    $$
    \bar\Phi_c = y_c\, g^\top + \Phi_c\,(G + G^\top), \qquad \bar y_c = 2\bar a\, y_c + \Phi_c\, g
    $$

    back through `feature_fn`. Memory: $O(\text{chunk}\cdot b + b^2)$ and the parameters; plain
    reverse-mode through the scan would keep every chunk's features, $O(nb)$.

    Args:
      params: a pytree of float arrays, the feature map's parameters.
      X: inputs `(n, d)`.
      y: targets `(n,)` (centre them: see `regression_stats`).
      feature_fn: a pure function `(params, X_chunk) -> Phi_chunk` mapping `(c, d)` to `(c, b)`. Bind fixed
        arrays with `functools.partial` or `jax.tree_util.Partial`: they are traced, not baked in.
      chunk_size: rows per chunk; `None`: equal chunks of at most 4096 rows.

    Returns:
      `RegressionStats` in the dtype of the features.

    Raises:
      ValueError: bad shapes, NaN/inf in `X` or `y`, or non-finite statistics (checked when concrete).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> from kronvi.feature_learning import feature_stats, rff_lengthscale_map
      >>> fmap = rff_lengthscale_map(jax.random.key(0), 2, 8)
      >>> X, y = jax.random.normal(jax.random.key(1), (20, 2)), jnp.arange(20.0)
      >>> stats = feature_stats(jnp.zeros(2), X, y, feature_fn=fmap)
      >>> g = jax.grad(lambda t: feature_stats(t, X, y, feature_fn=fmap).PhitPhi.sum())(jnp.zeros(2))
      >>> stats.PhitPhi.shape, g.shape
      ((16, 16), (2,))
    """
    X, y = check_xy(X, y, what="(num_points, num_inputs)")
    check_nonempty(X, "X")
    check_finite(X, "X")
    check_finite(y, "y")
    fn = as_traced_callable(feature_fn)
    chunk = _resolve_chunk(X.shape[0], chunk_size)
    stats = _stats_jit(chunk, fn, params, X, y)
    if is_concrete(stats.PhitPhi):
        check_stats(stats, "feature_stats")
    return stats


@functools.partial(jax.jit, static_argnums=(0,))
def _stats_jit(chunk, fn, params, X, y):
    return _stats_vjp(chunk, fn, params, X, y)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _stats_vjp(chunk, fn, params, X, y):
    dtype = jax.eval_shape(fn, params, X[:1]).dtype
    fmap = jax.tree_util.Partial(_apply, fn, params)
    return stats_from_inputs(fmap, X, y.astype(dtype), chunk_size=chunk)


def _stats_fwd(chunk, fn, params, X, y):
    return _stats_vjp(chunk, fn, params, X, y), (fn, params, X, y)


def _stats_bwd(chunk, res, g):
    fn, params, X, y = res
    _, g_yty, g_Phity, g_PhitPhi = g
    S = g_PhitPhi + g_PhitPhi.T
    n, d = X.shape

    def chunk_vjp(x, yy):
        Phi, pull = jax.vjp(_apply, fn, params, x)
        yy = yy.astype(Phi.dtype)
        g_Phi = jnp.outer(yy, g_Phity.astype(Phi.dtype)) + matmul(Phi, S.astype(Phi.dtype))
        g_fn, g_params, g_x = pull(g_Phi)
        g_y = 2.0 * g_yty * yy + matmul(Phi, g_Phity.astype(Phi.dtype))
        return (g_fn, g_params), g_x, g_y

    num_full = n // chunk
    n_full = num_full * chunk
    acc = jax.tree.map(jnp.zeros_like, (fn, params))
    gX, gy = [], []
    if num_full:
        Xc = X[:n_full].reshape(num_full, chunk, d)
        yc = y[:n_full].reshape(num_full, chunk)

        def body(acc, xs):
            gp, gx, gyy = chunk_vjp(*xs)
            return jax.tree.map(jnp.add, acc, gp), (gx, gyy)

        acc, (gx, gyy) = lax.scan(body, acc, (Xc, yc))
        gX.append(gx.reshape(n_full, d))
        gy.append(gyy.reshape(n_full))
    if n_full < n:
        gp, gx, gyy = chunk_vjp(X[n_full:], y[n_full:])
        acc = jax.tree.map(jnp.add, acc, gp)
        gX.append(gx)
        gy.append(gyy)
    g_fn, g_params = acc
    gX = jnp.concatenate(gX).astype(X.dtype)
    gy = jnp.concatenate(gy).astype(y.dtype)
    return g_fn, g_params, gX, gy


_stats_vjp.defvjp(_stats_fwd, _stats_bwd)


@reordered_arguments(
    ("params", "q_w", "q_noise", "prior_w", "prior_noise", "X", "y"), lambda a: isinstance(a[1], MeanField)
)
def feature_elbo(
    params: Any,
    X: ArrayLike,
    y: ArrayLike,
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    feature_fn: Callable[[Any, jax.Array], jax.Array],
    chunk_size: int | None = None,
) -> jax.Array:
    r"""The exact DIRECT ELBO of the features $\Phi_\theta =$ `feature_fn(params, X)`, differentiable in `params`.

    $$
    \mathcal{L}(\theta, q) = \mathcal{L}\big(q;\ s(\theta)\big), \qquad
    s(\theta) = (n,\ y^\top y,\ \Phi_\theta^\top y,\ \Phi_\theta^\top\Phi_\theta),
    $$

    the ELBO of `regression_elbo` on the statistics of
    `feature_stats`. `jax.grad` with respect to `params` costs
    one forward and one backward pass over the rows (chained through the $O(b^2)$ gradient of the
    ELBO in the statistics); with respect to the logits of `q_w` and `q_noise` it is the gradient of
    `regression_elbo`.

    Args:
      params: pytree of float arrays, the feature map's parameters.
      X: inputs `(n, d)`.
      y: centred targets `(n,)`.
      q_w: `MeanField` over the weights, logits `(b, m)`.
      q_noise: `MeanField` over the noise variance, logits `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      feature_fn: `(params, X_chunk) -> Phi_chunk`, `(c, d) -> (c, b)`, pure and differentiable.
      chunk_size: rows per chunk (`None`: at most 4096).

    Returns:
      The ELBO, a scalar in the dtype of the features.

    References:
      Evans & Nair (2018), Theorem 1 (the ELBO from the statistics).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> from kronvi.feature_learning import feature_elbo, rff_lengthscale_map
      >>> fmap = rff_lengthscale_map(jax.random.key(0), 1, 4)
      >>> X = jnp.linspace(-2, 2, 30)[:, None]; y = jnp.sin(2 * X[:, 0])
      >>> pw, pn = kronvi.model.gaussian_prior(8, 1.0, levels=5), kronvi.model.noise_prior(0.1)
      >>> qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
      >>> g = jax.grad(feature_elbo)(jnp.zeros(1), X, y, qw, qn, pw, pn, feature_fn=fmap)
      >>> g.shape, bool(jnp.all(jnp.isfinite(g)))
      ((1,), True)
    """
    stats = feature_stats(params, X, y, feature_fn=feature_fn, chunk_size=chunk_size)
    return regression_elbo(stats, q_w, q_noise, prior_w, prior_noise)


@renamed_arguments(max_rounds="max_iter", backend="method")
def fit_features(
    params: Any,
    X: ArrayLike,
    y: ArrayLike,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    feature_fn: Callable[[Any, jax.Array], jax.Array],
    init: str | tuple[MeanField, MeanField] = "gaussian",
    max_iter: int = 10,
    param_iter: int = 20,
    fit_iter: int | None = None,
    starts: tuple[str, ...] = ("previous", "gaussian"),
    tol: float = 1e-6,
    inner_sweeps: int = 0,
    log_prior: Callable[[Any], jax.Array] | None = None,
    method: str = "optax-lbfgs",
    chunk_size: int | None = None,
) -> FeatureFit:
    r"""Learns feature-map parameters and the mean-field posterior by maximizing the exact DIRECT ELBO.

    Block coordinate ascent on $\mathcal{L}(\theta, q) + \log p(\theta)$ (variational EM with the feature
    map's parameters as point estimates). Each round

    1. moves $\theta$ by at most `param_iter` L-BFGS iterations on
       $-(\mathcal{L}(\theta, q) + \log p(\theta))/n$ with $q$ fixed, the gradient from
       `feature_elbo` (one forward and one backward pass over the
       rows per evaluation);
    2. refits $q$ on the new statistics with `fit_regression` (coordinate
       ascent) from each of `starts` and keeps the highest ELBO.

    L-BFGS returns its best iterate and `"previous"` (the current $q$) never loses ELBO under coordinate
    ascent, so with `"previous"` among the starts the objective never decreases (`info.attempted`
    records each round's objective before the no-progress test that would undo a round). The priors stay fixed:
    to learn the prior scale, give the feature map an output scale (scaling $\Phi$ by $a$ is scaling
    the weights by $a$).

    Args:
      params: pytree of float arrays, the starting parameters $\theta_0$.
      X: inputs `(n, d)`.
      y: centred targets `(n,)`.
      prior_w: `DiscretePrior` `(b, m)` over the weights of the `b` features.
      prior_noise: `DiscretePrior` `(1, m_sigma)` over the noise variance.
      feature_fn: `(params, X_chunk) -> Phi_chunk`, `(c, d) -> (c, b)`, pure and differentiable (e.g.
        `rff_lengthscale_map` or
        `mlp_features`).
      init: the first $q$: `"gaussian"` (`gaussian_start`), `"prior"` or a
        tuple `(q_w, q_noise)`; it is fitted on $\theta_0$'s statistics before the first round.
      max_iter: at most this many rounds.
      param_iter: L-BFGS iterations on $\theta$ per round.
      fit_iter: coordinate-ascent sweeps per refit of $q$ (default: `fit_regression`'s).
      starts: where each refit of $q$ starts, the best ELBO kept: any of `"previous"`, `"gaussian"`,
        `"prior"`.
      tol: stop when a round gains less than `tol * n` nats.
      log_prior: optional `log_prior(params) -> scalar`, added to the objective (e.g. a Gaussian prior on
        the weights of an MLP: MAP for $\theta$); a `functools.partial` or `jax.tree_util.Partial` has
        its arrays traced.
      method: the L-BFGS of the parameter steps: `"optax-lbfgs"` (`optax.lbfgs`) or `"lbfgs"`
        (`jaxopt.LBFGS`), see `minimize_lbfgs`.
      chunk_size: rows per chunk of the statistics (`None`: at most 4096).

    Returns:
      `FeatureFit` `(params, q_w, q_noise, info)`.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> from kronvi.feature_learning import fit_features, rff_lengthscale_map
      >>> fmap = rff_lengthscale_map(jax.random.key(0), 1, 10)
      >>> X = jnp.linspace(-3, 3, 100)[:, None]
      >>> y = jnp.sin(3 * X[:, 0]) + 0.1 * jax.random.normal(jax.random.key(1), (100,))
      >>> pw, pn = kronvi.model.gaussian_prior(20, 1.0, levels=15), kronvi.model.noise_prior(0.01, levels=7, span=10.0)
      >>> theta, q_w, q_n, info = fit_features(jnp.log(jnp.ones(1) * 3.0), X, y, pw, pn,
      ...                                      feature_fn=fmap, max_iter=2, param_iter=10)
      >>> bool(info.objective[-1] >= info.objective[0]), float(jnp.exp(theta[0])) < 3.0
      (True, True)
    """
    X, y = check_xy(X, y, what="(num_points, num_inputs)")
    check_nonempty(X, "X")
    check_finite(X, "X")
    check_finite(y, "y")
    max_iter = check_int(max_iter, "max_iter", 0)
    param_iter = check_int(param_iter, "param_iter", 1)
    inner_sweeps = check_int(inner_sweeps, "inner_sweeps", 0)
    if not starts or any(s not in _STARTS for s in starts):
        raise ValueError(f"`starts` must name one or more of {_STARTS}, got {starts!r}")
    if method not in BACKENDS:
        raise ValueError(f"`method` must be one of {BACKENDS}, got {method!r}")
    if log_prior is not None and not callable(log_prior):
        raise TypeError(f"`log_prior` must be callable or None, got {type(log_prior).__name__}")
    fn = as_traced_callable(feature_fn)
    lp = as_traced_callable(log_prior if log_prior is not None else _zero_log_prior)
    chunk = _resolve_chunk(X.shape[0], chunk_size)

    def stats_of(p):
        return feature_stats(p, X, y, feature_fn=fn, chunk_size=chunk)

    stats = stats_of(params)
    if isinstance(init, str):
        if init not in ("gaussian", "prior"):
            raise ValueError(f'`init` must be "gaussian", "prior" or a tuple (q_w, q_noise), got {init!r}')
        q_w, q_n, _ = fit_regression(stats, prior_w, prior_noise, init=init, max_iter=fit_iter)
    else:
        if not (isinstance(init, tuple) and len(init) == 2):
            raise TypeError('`init` must be "gaussian", "prior" or a tuple (q_w, q_noise) of MeanField')
        check_regression_args(*init, prior_w, prior_noise, stats)
        q_w, q_n, _ = fit_regression(stats, prior_w, prior_noise, init=init, max_iter=fit_iter)
    n = float(stats.n)

    def value(p, qw, qn, st):
        return float(regression_elbo(st, qw, qn, prior_w, prior_noise)), float(lp(p))

    elbo0, lp0 = value(params, q_w, q_n, stats)
    elbos, objs = [elbo0], [elbo0 + lp0]
    attempted = [elbo0 + lp0]
    converged = False
    rounds = 0
    grad_norm = float("nan")
    for _ in range(max_iter):
        static = (chunk, param_iter, method, inner_sweeps)
        new_params, step_grad_norm = _param_step(
            *static, fn, lp, params, q_w.logits, q_n.logits, prior_w, prior_noise, X, y
        )
        stats = stats_of(new_params)
        best = None
        for start in starts:
            init_q = (q_w, q_n) if start == "previous" else start
            fit = fit_regression(stats, prior_w, prior_noise, init=init_q, max_iter=fit_iter)
            e, lp_new = value(new_params, fit[0], fit[1], stats)
            if np.isfinite(e) and (best is None or e > best[0]):
                best = (e, lp_new, fit[0], fit[1])
        rounds += 1
        attempted.append(float("nan") if best is None else best[0] + best[1])
        if best is None or not best[0] + best[1] >= objs[-1]:  # no progress (or a non-finite ELBO): keep
            elbos.append(elbos[-1])
            objs.append(objs[-1])
            converged = best is not None
            break
        e, lp_new, q_w, q_n = best
        params, grad_norm = new_params, float(step_grad_norm)
        gain = e + lp_new - objs[-1]
        elbos.append(e)
        objs.append(e + lp_new)
        if gain < tol * n:
            converged = True
            break
    pad = max_iter + 1 - len(objs)
    info = FeatureFitInfo(
        elbo=np.asarray(elbos + [elbos[-1]] * pad),
        final_elbo=elbos[-1],
        num_iter=rounds,
        converged=converged,
        optimizer=method,
        objective=np.asarray(objs + [objs[-1]] * pad),
        grad_norm=grad_norm,
        attempted=np.asarray(attempted + [attempted[-1]] * pad),
    )
    return FeatureFit(params, q_w, q_n, info)


def _zero_log_prior(params):
    return jnp.zeros(())


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _param_step(
    chunk, param_iter, backend, inner_sweeps, fn, lp, params, logits_w, logits_n, prior_w, prior_noise, X, y
):
    q_w, q_n = MeanField._unchecked(logits_w), MeanField._unchecked(logits_n)
    n = jnp.asarray(X.shape[0], logits_w.dtype)

    def loss(p):
        stats = _stats_vjp(chunk, fn, p, X, y)
        qw, qn = q_w, q_n
        if inner_sweeps:  # the profiled ELBO: q refitted at p, no gradient through the refit (envelope)
            qw, qn, _ = fit_regression(
                jax.lax.stop_gradient(stats), prior_w, prior_noise, init=(q_w, q_n), max_iter=inner_sweeps
            )
        return -(regression_elbo(stats, qw, qn, prior_w, prior_noise) + lp(p)) / n

    best, info = minimize_lbfgs(loss, params, n, max_iter=param_iter, tol=0.0, backend=backend)
    return best, info.grad_norm
