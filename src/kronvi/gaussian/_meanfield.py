r"""Exact Gaussian mean-field variational inference for Bayesian linear regression, from the statistics.

Model: $y = \Phi w + \varepsilon$, $w \sim N(0, \sigma_w^2 I)$ (the continuous Gaussian prior
that DIRECT discretizes), $\varepsilon \sim N(0, \sigma^2 I)$; variational family
$q(w) = \prod_j N(\mu_j, s_j^2)$. The noise variance $\sigma^2$ is a point estimate: kept fixed,
or learned by maximizing the ELBO (type-II maximum likelihood), optionally inside `noise_bounds`. The
exact ELBO

$$
\mathcal{L} = -\tfrac n2\log(2\pi\sigma^2) - \frac{1}{2\sigma^2}\Big(\|y - \Phi\mu\|^2
  + \textstyle\sum_j (\Phi^\top\Phi)_{jj} s_j^2\Big) - \mathrm{KL}\big(q \,\|\, N(0, \sigma_w^2 I)\big)
$$

is maximized by exact coordinate ascent (`fit_gaussian_mf`): for fixed $\sigma^2$ the optimal
factors are closed form, for fixed `q` the optimal noise is $E_q\|y-\Phi w\|^2/n$.

References:
  Evans & Nair (2018), section 5; Bishop (2006), section 10.1.2 for the mean-field Gaussian optimum.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_ndim,
    check_positive,
    fetch,
    is_concrete,
)
from .._base.deprecation import reordered_arguments
from .._base.kron import expected_quadratic
from .._base.precision import dot, matmul
from .._model.regression import LOG_2PI
from .._solvers.info import FitInfo, fit_info
from .._solvers.linalg import jittered_cholesky
from .._stats.regression import RegressionStats, check_stats


class GaussianMeanField(NamedTuple):
    r"""Diagonal Gaussian $q(w) = \prod_j N(\mu_j, s_j^2)$ with $s_j = \exp(\text{log\_std}_j)$.

    Attributes:
      mean: `(b,)` $\mu$.
      log_std: `(b,)` $\log s$.
    """

    mean: jax.Array
    log_std: jax.Array


class GaussianFit(NamedTuple):
    r"""The result of `fit_gaussian_mf` and
    `fit_gaussian_reparam`.

    Attributes:
      q: `GaussianMeanField`.
      noise_variance: `()` the final noise variance $\sigma^2$ (a point estimate).
      info: `kronvi.FitInfo`.
    """

    q: GaussianMeanField
    noise_variance: jax.Array
    info: FitInfo


# ----------------------------------------------------------------------------------------------------
# Validation shared with the REPARAM baseline


def check_gaussian_q(q, b=None, name="q"):
    """Checks a `GaussianMeanField` with finite `(b,)` fields (any `b` when `None`)."""
    if not isinstance(q, GaussianMeanField):
        raise TypeError(f"`{name}` must be a GaussianMeanField, got {type(q).__name__}")
    mean, log_std = jnp.asarray(q.mean), jnp.asarray(q.log_std)
    check_ndim(mean, 1, f"{name}.mean", "(num_features,)")
    if log_std.shape != mean.shape:
        raise ValueError(
            f"`{name}.log_std` shape {log_std.shape} must equal `{name}.mean` shape {mean.shape}"
        )
    if b is not None and mean.shape[0] != b:
        raise ValueError(f"`{name}` has {mean.shape[0]} weights but the data have {b} features")
    check_finite(mean, f"{name}.mean")
    check_finite(log_std, f"{name}.log_std")


def check_prior_scale(prior_scale, b, dtype):
    r"""$\sigma_w$ as a positive finite scalar or `(b,)` array of `dtype`."""
    scale = as_float_array(prior_scale, "prior_scale").astype(dtype)
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape[0] != b):
        raise ValueError(f"`prior_scale` must be a scalar or shape ({b},), got {scale.shape}")
    check_finite(scale, "prior_scale")
    check_positive(scale, "prior_scale")
    return scale


def check_noise_variance(noise_variance, dtype, name="noise_variance"):
    """A positive finite scalar of `dtype`."""
    s = as_float_array(noise_variance, name).astype(dtype)
    if s.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {s.shape}")
    check_finite(s, name)
    check_positive(s, name)
    return s


def check_noise_bounds(noise_bounds, dtype):
    """`None`, or `(lo, hi)` as positive scalars with `lo < hi`."""
    if noise_bounds is None:
        return None
    if not (isinstance(noise_bounds, tuple | list) and len(noise_bounds) == 2):
        raise TypeError("`noise_bounds` must be None or a pair (lo, hi)")
    lo = check_noise_variance(noise_bounds[0], dtype, "noise_bounds[0]")
    hi = check_noise_variance(noise_bounds[1], dtype, "noise_bounds[1]")
    if is_concrete(lo) and is_concrete(hi) and not float(fetch(lo)) < float(fetch(hi)):
        raise ValueError(f"`noise_bounds` must satisfy lo < hi, got ({float(fetch(lo))}, {float(fetch(hi))})")
    return lo, hi


# ----------------------------------------------------------------------------------------------------
# Exact ELBO from the statistics


def gaussian_kl(mean, log_std, prior_scale):
    r"""$\mathrm{KL}(\prod_j N(\mu_j, s_j^2) \,\|\, N(0, \sigma_w^2 I))$, summed over weights."""
    var_ratio = jnp.exp(2.0 * log_std) / prior_scale**2
    return 0.5 * jnp.sum(var_ratio + mean**2 / prior_scale**2 - 1.0 - jnp.log(var_ratio))


def gaussian_expected_rss(mean, log_std, stats):
    r"""$E_q\|y - \Phi w\|^2 = \|y - \Phi\mu\|^2 + \sum_j (\Phi^\top\Phi)_{jj} s_j^2$ for a diagonal
    Gaussian `q`, from the statistics."""
    return (
        stats.yty
        - 2.0 * dot(mean, stats.Phity)
        + expected_quadratic(mean, jnp.exp(2.0 * log_std), stats.PhitPhi)
    )


def _elbo(mean, log_std, noise_variance, stats, prior_scale):
    ell = -0.5 * stats.n * (LOG_2PI + jnp.log(noise_variance))
    ell = ell - 0.5 * gaussian_expected_rss(mean, log_std, stats) / noise_variance
    return ell - gaussian_kl(mean, log_std, prior_scale)


@reordered_arguments(("q", "noise_variance", "stats"), lambda a: isinstance(a[0], GaussianMeanField))
def gaussian_mf_elbo(
    stats: RegressionStats, q: GaussianMeanField, noise_variance: ArrayLike, *, prior_scale: ArrayLike
) -> jax.Array:
    r"""Exact ELBO of a diagonal Gaussian posterior for Bayesian linear regression, from the statistics.

    $$
    \mathcal{L}(q, \sigma^2) = -\tfrac n2\log(2\pi\sigma^2)
      - \frac{y^\top y - 2\mu^\top\Phi^\top y + \mu^\top\Phi^\top\Phi\mu
      + \sum_j(\Phi^\top\Phi)_{jj}s_j^2}{2\sigma^2}
      - \tfrac12\sum_j\Big(\frac{s_j^2 + \mu_j^2}{\sigma_w^2} - 1 - \log\frac{s_j^2}{\sigma_w^2}\Big),
    $$

    $O(b^2)$ whatever `n` is; a lower bound on $\log p(y \mid \Phi, \sigma^2)$.

    Args:
      stats: `RegressionStats` of the data (`b` features).
      q: `GaussianMeanField` with `(b,)` fields.
      noise_variance: $\sigma^2$, positive scalar.
      prior_scale: $\sigma_w$, positive scalar or `(b,)`.

    Returns:
      The ELBO, a scalar.

    References:
      Bishop (2006), eqs. 10.3 and 10.95; Evans & Nair (2018), section 5 (the continuous prior that the
      DIRECT grid discretizes).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (50, 3)); y = Phi @ jnp.array([1., 0., -1.])
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> q = kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3))
      >>> bool(jnp.isfinite(kronvi.gaussian.gaussian_mf_elbo(stats, q, 0.1, prior_scale=1.0)))
      True
    """
    b = check_stats(stats)
    check_gaussian_q(q, b)
    dtype = stats.PhitPhi.dtype
    s = check_noise_variance(noise_variance, dtype)
    scale = check_prior_scale(prior_scale, b, dtype)
    return _elbo(q.mean, q.log_std, s, stats, scale)


# ----------------------------------------------------------------------------------------------------
# Exact fit: closed-form coordinate ascent


def fit_gaussian_mf(
    stats: RegressionStats,
    *,
    prior_scale: ArrayLike,
    noise_variance: ArrayLike,
    learn_noise: bool = True,
    noise_bounds: tuple[float, float] | None = None,
    max_iter: int = 100,
    tol: float = 1e-7,
) -> GaussianFit:
    r"""Fits the diagonal Gaussian posterior by exact coordinate ascent on `gaussian_mf_elbo`.

    One iteration sets the factors to their exact optimum for the current noise variance,

    $$
    s_j^2 = \Big(\frac{(\Phi^\top\Phi)_{jj}}{\sigma^2} + \frac{1}{\sigma_w^2}\Big)^{-1},\qquad
    \mu = \Big(\Phi^\top\Phi + \frac{\sigma^2}{\sigma_w^2} I\Big)^{-1}\Phi^\top y
    $$

    (one Cholesky factorization; with a per-weight $\sigma_w$ the ridge term is diagonal; where the
    working precision cannot factor it, a small jitter is added instead of returning NaN, see
    `kronvi._solvers.linalg.jittered_cholesky`), then, when
    `learn_noise`, the noise variance to its exact optimum $E_q\|y - \Phi w\|^2/n$, clipped into
    `noise_bounds` (the constrained maximum: the ELBO is unimodal in $\sigma^2$). Every update is
    a block maximum, so the ELBO trace never decreases. With `learn_noise=False` one iteration is exact.

    Args:
      stats: `RegressionStats`.
      prior_scale: $\sigma_w$, positive scalar or `(b,)`.
      noise_variance: fixed $\sigma^2$, or the starting value when `learn_noise`.
      learn_noise: learn $\sigma^2$ as a point estimate (type-II maximum likelihood on the ELBO).
      noise_bounds: optional `(lo, hi)` for the learned noise variance.
      max_iter: maximum iterations.
      tol: stop when an iteration gains less than `tol * n` nats.

    Returns:
      `GaussianFit` `(q, noise_variance, info)`: a
      `GaussianMeanField`, the final noise variance and a
      `kronvi.FitInfo` (`optimizer="cavi"`) with the ELBO trace.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (200, 3))
      >>> y = Phi @ jnp.array([1., 0., -1.]) + 0.3 * jax.random.normal(jax.random.key(1), (200,))
      >>> q, s2, info = kronvi.gaussian.fit_gaussian_mf(kronvi.stats.regression_stats(Phi, y), prior_scale=1.0,
      ...                                      noise_variance=1.0)
      >>> [round(float(v), 1) for v in q.mean], bool(0.05 < s2 < 0.15), bool(info.converged)
      ([1.0, 0.0, -1.0], True, True)
    """
    b = check_stats(stats)
    dtype = stats.PhitPhi.dtype
    scale = check_prior_scale(prior_scale, b, dtype)
    s0 = check_noise_variance(noise_variance, dtype)
    bounds = check_noise_bounds(noise_bounds, dtype)
    max_iter = check_int(max_iter, "max_iter", 1)
    if not float(tol) >= 0:
        raise ValueError(f"`tol` must be >= 0, got {tol}")
    if bounds is None:
        lo = jnp.asarray(0.0, dtype)
        hi = jnp.asarray(jnp.inf, dtype)
    else:
        lo, hi = bounds
        s0 = jnp.clip(s0, lo, hi)
    return fit_exact(
        stats, scale, s0, lo, hi, learn_noise=bool(learn_noise), max_iter=max_iter, tol=float(tol)
    )


def _optimal_q(stats, scale, noise_variance):
    A = stats.PhitPhi
    b = A.shape[-1]
    prec_prior = jnp.broadcast_to(1.0 / scale**2, (b,))
    log_std = -0.5 * jnp.log(jnp.diagonal(A) / noise_variance + prec_prior)
    # Scaled system (I-regularized in the units of A): (A + s2 / sw^2) mu = Phi^T y.
    L = jittered_cholesky(A + jnp.diag(noise_variance * prec_prior))
    mean = jax.scipy.linalg.cho_solve((L, True), stats.Phity)
    return mean, log_std


@functools.partial(jax.jit, static_argnames=("learn_noise", "max_iter", "tol"))
def fit_exact(stats, scale, s0, lo, hi, *, learn_noise, max_iter, tol):
    """The traced coordinate ascent of `fit_gaussian_mf` on validated arrays (`lo`/`hi` bound the
    learned noise variance; use `0` and `inf` for none). Returns a `GaussianFit`."""
    dtype = stats.PhitPhi.dtype
    b = stats.PhitPhi.shape[-1]
    mean0 = jnp.zeros((b,), dtype)
    log_std0 = jnp.broadcast_to(jnp.log(scale), (b,)).astype(dtype)
    e0 = _elbo(mean0, log_std0, s0, stats, scale)
    trace = jnp.full((max_iter + 1,), e0, dtype)

    def cond(st):
        it, _, _, _, _, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, _, _, s, tr, _ = st
        mean, log_std = _optimal_q(stats, scale, s)
        if learn_noise:
            s = jnp.clip(gaussian_expected_rss(mean, log_std, stats) / stats.n, lo, hi)
        e = _elbo(mean, log_std, s, stats, scale)
        done = (e - tr[it] < tol * stats.n) if learn_noise else jnp.asarray(True)
        return it + 1, mean, log_std, s, tr.at[it + 1].set(e), done

    init = (jnp.asarray(0), mean0, log_std0, s0, trace, jnp.asarray(False))
    it, mean, log_std, s, tr, done = lax.while_loop(cond, body, init)
    tr = jnp.where(jnp.arange(max_iter + 1) <= it, tr, tr[it])
    return GaussianFit(GaussianMeanField(mean, log_std), s, fit_info(tr, it, done, optimizer="cavi"))


def predict_gaussian_mf(
    q: GaussianMeanField, noise_variance: ArrayLike, Phi_new: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    r"""Predictive mean and variance under a diagonal Gaussian posterior (exact, Gaussian).

    $y^* \sim N(\Phi^*\mu,\ (\Phi^*)^{\circ 2} s^2 + \sigma^2)$.

    Args:
      q: `GaussianMeanField`.
      noise_variance: $\sigma^2$.
      Phi_new: test features `(num_points, b)`.

    Returns:
      `(mean, variance)`, each `(num_points,)`; the log predictive density of `y` is
      `-0.5 * (log(2 pi variance) + (y - mean)**2 / variance)`.
    """
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    check_gaussian_q(q, Phi_new.shape[1])
    s = check_noise_variance(noise_variance, Phi_new.dtype)
    return matmul(Phi_new, q.mean), matmul(Phi_new**2, jnp.exp(2.0 * q.log_std)) + s
