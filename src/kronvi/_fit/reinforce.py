r"""REINFORCE (score-function) gradients of the mean-field DIRECT regression ELBO.

The baseline that DIRECT's exact gradients replace (Evans & Nair 2018, section 5.1). For
$q(x) = \prod_j q_j(w_j)\,q_\sigma(\sigma^2)$ with $q_j = \mathrm{softmax}(\ell_j)$, the gradient
of $\mathcal{L} = E_q[\log p(y, x) - \log q(x)]$ is

$$ \nabla_\ell \mathcal{L} = E_q\big[(\log p(y, x) - \log q(x) - c)\,\nabla_\ell \log q(x)\big],
   \qquad \frac{\partial \log q(x)}{\partial \ell_{jk}} = [x_j = k] - q_{jk}, $$

for any $c$ that does not depend on $x$ (the score has mean zero), estimated from draws of
$q$. Each draw costs one evaluation of $\log p(y, x)$, here from the sufficient statistics in
$O(b^2)$.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import check_int
from .._base.deprecation import reordered_arguments
from .._base.precision import einsum, matmul
from .._model.families import MeanField
from .._model.grids import DiscretePrior, check_noise_prior, check_weight_prior
from .._model.regression import LOG_2PI, check_regression_args
from .._stats.regression import RegressionStats, check_stats


class ReinforceInfo(NamedTuple):
    r"""Diagnostics of one REINFORCE gradient estimate.

    Attributes:
      elbo: an unbiased estimate of the ELBO from the same draws (with `exact_entropy=True`: the
        sampled $E_q[\log p(y, x)]$ plus the exact entropy), a scalar.
      stderr: its standard error from the spread of the draws (NaN for one draw), a scalar.
    """

    elbo: jax.Array
    stderr: jax.Array


def _pick(table, idx):
    """`table[j, idx[s, j]]` for a `(b, m)` table and `(S, b)` level indices: `(S, b)`."""
    return jnp.take_along_axis(table[None], idx[..., None], axis=-1)[..., 0]


def _log_joint(idx_w, idx_noise, prior_w, prior_noise, stats):
    w = _pick(prior_w.values, idx_w)  # (S, b)
    s = prior_noise.values[0, idx_noise]  # (S,)
    rss = stats.yty - 2.0 * matmul(w, stats.Phity) + einsum("sb,bc,sc->s", w, stats.PhitPhi, w)
    loglik = -0.5 * stats.n * (LOG_2PI + jnp.log(s)) - 0.5 * rss / s
    log_prior = jnp.sum(_pick(prior_w.log_probs, idx_w), axis=-1) + prior_noise.log_probs[0, idx_noise]
    return loglik + log_prior


@reordered_arguments(
    ("idx_w", "idx_noise", "prior_w", "prior_noise", "stats"),
    lambda a: len(a) > 4 and isinstance(a[4], RegressionStats),
)
def regression_log_joint(
    stats: RegressionStats,
    idx_w: ArrayLike,
    idx_noise: ArrayLike,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
) -> jax.Array:
    r"""Log joint density $\log p(y, w, \sigma^2)$ of the regression model at given grid configurations.

    $$ \log p(y, w, \sigma^2) = -\tfrac n2 \log(2\pi\sigma^2)
       - \frac{y^\top y - 2 w^\top \Phi^\top y + w^\top \Phi^\top\Phi\, w}{2\sigma^2}
       + \textstyle\sum_j \log p_j(w_j) + \log p_\sigma(\sigma^2), $$

    with $w_j$ = `prior_w.values[j, idx_w[s, j]]` and $\sigma^2$ =
    `prior_noise.values[0, idx_noise[s]]`; $O(b^2)$ per configuration from the statistics.

    Args:
      stats: `RegressionStats` of the data.
      idx_w: `(S, b)` integer level indices of the weights, one row per configuration.
      idx_noise: `(S,)` integer level indices of the noise variance.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.

    Returns:
      `(S,)` log joint densities.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> stats = kronvi.stats.regression_stats(jnp.eye(2), jnp.array([1.0, 0.0]))
      >>> pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=3), kronvi.model.noise_prior(1.0, levels=1)
      >>> kronvi.fitting.regression_log_joint(stats, jnp.zeros((1, 2), int), jnp.zeros(1, int), pw, pn).shape
      (1,)
    """
    check_weight_prior(prior_w)
    check_noise_prior(prior_noise)
    check_stats(stats)
    check_weight_prior(prior_w, stats.Phity.shape[-1])
    idx_w, idx_noise = _check_draws(idx_w, idx_noise, prior_w)
    return _log_joint(idx_w, idx_noise, prior_w, prior_noise, stats)


def _check_draws(
    idx_w: ArrayLike, idx_noise: ArrayLike, prior_w: DiscretePrior
) -> tuple[jax.Array, jax.Array]:
    idx_w, idx_noise = jnp.asarray(idx_w), jnp.asarray(idx_noise)
    for x, name in ((idx_w, "idx_w"), (idx_noise, "idx_noise")):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise TypeError(f"`{name}` must hold integer level indices, got {x.dtype}")
    b = prior_w.values.shape[-2]
    if idx_w.ndim != 2 or idx_w.shape[1] != b:
        raise ValueError(f"`idx_w` must have shape (num_samples, {b}), got {tuple(idx_w.shape)}")
    if idx_noise.shape != idx_w.shape[:1]:
        raise ValueError(
            f"`idx_noise` must have shape ({idx_w.shape[0]},) (one noise level per row of `idx_w`), "
            f"got {tuple(idx_noise.shape)}"
        )
    return idx_w, idx_noise


def _baseline_mode(baseline, num_samples):
    if baseline is None:
        return "none", None
    if isinstance(baseline, str):
        if baseline != "leave-one-out":
            raise ValueError(f"`baseline` must be None, 'leave-one-out' or a scalar, got {baseline!r}")
        if num_samples < 2:
            raise ValueError("`baseline='leave-one-out'` needs at least 2 draws (`num_samples` >= 2)")
        return "leave-one-out", None
    value = jnp.asarray(baseline)
    if value.ndim != 0:
        raise ValueError(f"`baseline` must be a scalar when it is a value, got shape {tuple(value.shape)}")
    return "value", value


@functools.partial(jax.jit, static_argnames=("mode", "exact_entropy"))
def _from_draws(
    idx_w, idx_noise, logits_w, logits_n, prior_w, prior_noise, stats, value, *, mode, exact_entropy
):
    sg = lax.stop_gradient
    log_qw, log_qn = jax.nn.log_softmax(logits_w, -1), jax.nn.log_softmax(logits_n, -1)
    qw, qn = jnp.exp(log_qw), jnp.exp(log_qn)
    S = idx_w.shape[0]
    f = _log_joint(idx_w, idx_noise, prior_w, prior_noise, stats)  # (S,)
    if exact_entropy:
        ent_w = -jnp.sum(qw * log_qw, axis=-1, keepdims=True)
        ent_n = -jnp.sum(qn * log_qn, axis=-1, keepdims=True)
        exact = jnp.sum(ent_w) + jnp.sum(ent_n)
    else:
        f = f - (jnp.sum(_pick(log_qw, idx_w), axis=-1) + log_qn[0, idx_noise])
        exact = jnp.zeros((), f.dtype)
    f = sg(f)
    if mode == "leave-one-out":
        c = (jnp.sum(f) - f) / (S - 1)
    elif mode == "value":
        c = jnp.broadcast_to(sg(value).astype(f.dtype), f.shape)
    else:
        c = jnp.zeros_like(f)
    weight = (f - c) / S  # (S,)
    # mean_s (f_s - c_s) (onehot(x_s) - q): the one-hot part as a scatter-add of the weights
    m = logits_w.shape[-1]
    onehot_w = einsum("s,sbk->bk", weight, jax.nn.one_hot(idx_w, m, dtype=f.dtype))
    grad_w = onehot_w - jnp.sum(weight) * qw
    onehot_n = einsum("s,sk->k", weight, jax.nn.one_hot(idx_noise, logits_n.shape[-1], dtype=f.dtype))
    grad_n = onehot_n[None] - jnp.sum(weight) * qn
    if exact_entropy:  # dH/dl_jk = -q_jk (log q_jk + H_j)
        grad_w = grad_w - qw * (log_qw + ent_w)
        grad_n = grad_n - qn * (log_qn + ent_n)
    stderr = jnp.std(f, ddof=1) / jnp.sqrt(S) if S > 1 else jnp.full((), jnp.nan, f.dtype)
    return (grad_w, grad_n), ReinforceInfo(exact + jnp.mean(f), stderr)


@reordered_arguments(
    ("idx_w", "idx_noise", "q_w", "q_noise", "prior_w", "prior_noise", "stats"),
    lambda a: len(a) > 2 and isinstance(a[2], MeanField),
)
def reinforce_gradient_from_draws(
    idx_w: ArrayLike,
    idx_noise: ArrayLike,
    stats: RegressionStats,
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    baseline: str | ArrayLike | None = None,
    exact_entropy: bool = False,
) -> tuple[tuple[jax.Array, jax.Array], ReinforceInfo]:
    r"""The REINFORCE estimate of the ELBO's gradient in the logits of `q` from given draws of `q`.

    With draws $x_1, \dots, x_S \sim q$ and $f(x) = \log p(y, x) - \log q(x)$:

    $$ \hat g = \frac1S \sum_{s=1}^S \big(f(x_s) - c_s\big)\,\nabla_\ell \log q(x_s), \qquad
       \frac{\partial \log q(x)}{\partial \ell_{jk}} = [x_j = k] - q_{jk}, $$

    unbiased for $\nabla_\ell \mathcal{L}$ whenever $c_s$ is independent of $x_s$
    ($E_q[\nabla \log q] = 0$; the $-E_q[\nabla_\ell \log q]$ term of the entropy's
    gradient vanishes for the same reason). Baselines $c_s$: none (0), the leave-one-out mean
    $\frac{1}{S-1}\sum_{t \ne s} f(x_t)$ or a given constant. With `exact_entropy=True` the draws
    estimate only $\nabla E_q[\log p(y, x)]$ ($f = \log p(y, x)$) and the entropy's exact
    gradient $\partial H / \partial \ell_{jk} = -q_{jk}(\log q_{jk} + H_j)$ is added.

    Args:
      idx_w: `(S, b)` integer level indices of the weights, drawn from `q_w`.
      idx_noise: `(S,)` integer level indices of the noise variance, drawn from `q_noise`.
      stats: `RegressionStats` of the data.
      q_w: `MeanField` `(b, m)`.
      q_noise: `MeanField` `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      baseline: `None` (no baseline), `"leave-one-out"` (`S >= 2`) or a scalar independent of these
        draws (e.g. a moving average of earlier ELBO estimates).
      exact_entropy: sample only $E_q[\log p(y, x)]$ and add the entropy's exact gradient.

    Returns:
      `((grad_w, grad_noise), info)`: ascent directions of the ELBO in `q_w.logits` `(b, m)` and
      `q_noise.logits` `(1, m_sigma)`, and a `ReinforceInfo`.

    Raises:
      ValueError: draws of the wrong shape, or `baseline="leave-one-out"` with one draw.
      TypeError: non-integer draws.

    References:
      Williams (1992), REINFORCE; Evans & Nair (2018), section 5.1.
    """
    check_regression_args(q_w, q_noise, prior_w, prior_noise, stats)
    idx_w, idx_noise = _check_draws(idx_w, idx_noise, prior_w)
    mode, value = _baseline_mode(baseline, idx_w.shape[0])
    return _from_draws(
        idx_w,
        idx_noise,
        q_w.logits,
        q_noise.logits,
        prior_w,
        prior_noise,
        stats,
        value,
        mode=mode,
        exact_entropy=bool(exact_entropy),
    )


def sample_mean_field(key: jax.Array, q: MeanField, *, num_samples: int) -> jax.Array:
    r"""`num_samples` independent draws of grid level indices from a mean-field `q`.

    Args:
      key: a `jax.random` key.
      q: `MeanField` `(b, m)`.
      num_samples: `S`, an int >= 1.

    Returns:
      `(S, b)` int32 level indices, row `s` a draw of $x \sim \prod_j q_j$ (by the inverse
      CDF of each factor: $x_j = \#\{k < m - 1 : u_j \ge \sum_{l \le k} q_{jl}\}$,
      $u_j \sim U(0, 1)$).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> kronvi.fitting.sample_mean_field(jax.random.key(0), kronvi.model.MeanField(jnp.zeros((4, 3))), num_samples=5).shape
      (5, 4)
    """
    if not isinstance(q, MeanField):
        raise TypeError(f"`q` must be a MeanField, got {type(q).__name__}")
    S = check_int(num_samples, "num_samples", 1)
    # Inverse CDF: one uniform per weight and draw (jax.random.categorical's Gumbel trick needs m).
    u = jax.random.uniform(key, (S, q.logits.shape[-2]), q.logits.dtype)
    cdf = jnp.cumsum(q.probs, axis=-1)[:, :-1]  # (b, m - 1)
    return jnp.sum(u[:, :, None] >= cdf[None], axis=-1, dtype=jnp.int32)


@reordered_arguments(
    ("key", "q_w", "q_noise", "prior_w", "prior_noise", "stats"),
    lambda a: isinstance(a[1], MeanField),
)
def reinforce_gradient(
    key: jax.Array,
    stats: RegressionStats,
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    num_samples: int,
    baseline: str | ArrayLike | None = None,
    exact_entropy: bool = False,
) -> tuple[tuple[jax.Array, jax.Array], ReinforceInfo]:
    r"""REINFORCE (score-function) estimate of the exact ELBO's gradient in the logits of a mean-field q.

    Draws `num_samples` configurations $x_s = (w_s, \sigma^2_s) \sim q$ and returns
    `reinforce_gradient_from_draws` at them: with
    $f(x) = \log p(y, x) - \log q(x)$,

    $$ \hat g = \frac1S \sum_{s=1}^S \big(f(x_s) - c_s\big)\,\nabla_\ell \log q(x_s), \qquad
       E[\hat g] = \nabla_\ell \mathcal{L}, $$

    the gradient of `kronvi.model.regression_elbo` in `(q_w.logits, q_noise.logits)`.
    Cost $O(S b^2)$ from the statistics, whatever `n` is. Jittable (`num_samples` static).

    Args:
      key: a `jax.random` key.
      stats: `RegressionStats` of the data.
      q_w: `MeanField` `(b, m)`.
      q_noise: `MeanField` `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      num_samples: `S`, the number of draws, an int >= 1.
      baseline: `None`, `"leave-one-out"` (`S >= 2`) or a scalar independent of the draws.
      exact_entropy: sample only $E_q[\log p(y, x)]$ and add the entropy's exact gradient.

    Returns:
      `((grad_w, grad_noise), info)`: ascent directions `(b, m)` and `(1, m_sigma)`, and a
      `ReinforceInfo` (an unbiased ELBO estimate and its standard error).

    References:
      Williams (1992), REINFORCE; Evans & Nair (2018), section 5.1 and Figure 1.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (30, 3)); y = Phi @ jnp.array([1., 0., -1.])
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> pw, pn = kronvi.model.gaussian_prior(3, 1.0, levels=3), kronvi.model.noise_prior(0.1, levels=3)
      >>> (gw, gn), info = kronvi.fitting.reinforce_gradient(jax.random.key(1), stats, kronvi.model.MeanField.from_prior(pw),
      ...     kronvi.model.MeanField.from_prior(pn), pw, pn, num_samples=8, baseline="leave-one-out")
      >>> gw.shape, gn.shape
      ((3, 3), (1, 3))
    """
    check_int(num_samples, "num_samples", 1)
    _baseline_mode(baseline, num_samples)  # fail before drawing
    key_w, key_n = jax.random.split(key)
    idx_w = sample_mean_field(key_w, q_w, num_samples=num_samples)
    idx_n = sample_mean_field(key_n, q_noise, num_samples=num_samples)[:, 0]
    return reinforce_gradient_from_draws(
        idx_w,
        idx_n,
        stats,
        q_w,
        q_noise,
        prior_w,
        prior_noise,
        baseline=baseline,
        exact_entropy=exact_entropy,
    )
