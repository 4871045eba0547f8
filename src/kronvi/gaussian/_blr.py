r"""Exact Bayesian linear regression from the sufficient statistics: the reference every family is held to.

Model $y = \Phi w + \varepsilon$, $w \sim N(0, D)$, $D = \mathrm{diag}(\sigma_w^2)$,
$\varepsilon \sim N(0, \sigma^2 I)$. With $A = \Phi^\top\Phi/\sigma^2 + D^{-1}$:

$$
w \mid y \sim N(A^{-1}\Phi^\top y/\sigma^2,\ A^{-1}), \qquad
\log p(y) = -\tfrac12\big(n\log 2\pi + n\log\sigma^2 + \log|D| + \log|A|
            + (y^\top y - (\Phi^\top y)^\top A^{-1}\Phi^\top y/\sigma^2)/\sigma^2\big)
$$

(Woodbury and the matrix determinant lemma), so both cost one Cholesky factorization of a `b x b`
matrix, whatever `n` is.
"""

from __future__ import annotations

import functools
import math

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
from .._base.precision import matmul
from .._model.regression import LOG_2PI
from .._solvers.linalg import jittered_cholesky
from .._stats.eigen import null_space
from .._stats.regression import RegressionStats, check_stats
from ._meanfield import check_noise_variance, check_prior_scale


def _check(stats, prior_scale, noise_variance):
    check_stats(stats)
    dtype = stats.PhitPhi.dtype
    b = stats.Phity.shape[-1]
    scale = jnp.broadcast_to(check_prior_scale(prior_scale, b, dtype), (b,))
    return scale, check_noise_variance(noise_variance, dtype)


def _factor(stats, scale, s2):
    # Scaled system s2 * A = PhitPhi + s2 / sw^2 (in the units of PhitPhi, as the mean-field solver).
    M = stats.PhitPhi + jnp.diag(s2 / scale**2)
    return jittered_cholesky(M)


def blr_posterior(
    stats: RegressionStats, prior_scale: ArrayLike, noise_variance: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    r"""Exact posterior $N(\mu, \Sigma)$ of the weights under the prior $N(0, \sigma_w^2 I)$.

    $\Sigma = (\Phi^\top\Phi/\sigma^2 + \sigma_w^{-2} I)^{-1}$, $\mu = \Sigma\Phi^\top y/\sigma^2$.

    Args:
      stats: `kronvi.stats.RegressionStats` with `b` features.
      prior_scale: $\sigma_w$, a positive scalar or `(b,)` array (one prior sd per weight).
      noise_variance: $\sigma^2$, a positive scalar.

    Returns:
      `(mean, cov)`: `(b,)` and `(b, b)`.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (200, 3))
      >>> y = Phi @ jnp.array([1.0, -2.0, 0.5]) + 0.1 * jax.random.normal(jax.random.key(1), (200,))
      >>> mean, cov = kronvi.gaussian.blr_posterior(kronvi.stats.regression_stats(Phi, y), 1.0, 0.01)
      >>> [round(float(m), 1) for m in mean]
      [1.0, -2.0, 0.5]
    """
    scale, s2 = _check(stats, prior_scale, noise_variance)
    return _posterior(stats, scale, s2)


@jax.jit
def _posterior(stats, scale, s2):
    L = _factor(stats, scale, s2)
    mean = jax.scipy.linalg.cho_solve((L, True), stats.Phity)
    eye = jnp.eye(L.shape[-1], dtype=L.dtype)
    cov = s2 * jax.scipy.linalg.cho_solve((L, True), eye)
    return mean, 0.5 * (cov + cov.T)


def blr_log_evidence(stats: RegressionStats, prior_scale: ArrayLike, noise_variance: ArrayLike) -> jax.Array:
    r"""Exact log marginal likelihood $\log p(y) = \log N(y;\ 0,\ \Phi D\Phi^\top + \sigma^2 I)$.

    Args:
      stats: `kronvi.stats.RegressionStats`.
      prior_scale: $\sigma_w$, a positive scalar or `(b,)` array.
      noise_variance: $\sigma^2$, a positive scalar.

    Returns:
      The log evidence, a scalar (nats).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (50, 3)); y = Phi @ jnp.ones(3)
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> [round(float(kronvi.gaussian.blr_log_evidence(stats, 1.0, s2)), 1) for s2 in (0.1, 1.0)]
      [1.0, -53.2]
    """
    scale, s2 = _check(stats, prior_scale, noise_variance)
    return _log_evidence(stats, scale, s2)


@jax.jit
def _log_evidence(stats, scale, s2):
    L = _factor(stats, scale, s2)
    b = L.shape[-1]
    # log|A| = log|s2 A| - b log s2 and s2 A = L L^T.
    logdet_A = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L))) - b * jnp.log(s2)
    z = jax.scipy.linalg.solve_triangular(L, stats.Phity, lower=True)
    quad = (stats.yty - jnp.sum(z**2)) / s2
    logdet_D = 2.0 * jnp.sum(jnp.log(scale))
    return -0.5 * (stats.n * (LOG_2PI + jnp.log(s2)) + logdet_D + logdet_A + quad)


def blr_evidence_noise(
    stats: RegressionStats, prior_scale: ArrayLike, *, lower: float, upper: float, num_steps: int = 60
) -> jax.Array:
    r"""The noise variance in `[lower, upper]` that maximizes the exact evidence `blr_log_evidence`.

    One eigendecomposition $\Phi^\top\Phi = V\Lambda V^\top$ makes each evidence evaluation
    $O(b)$: with $c = V^\top\Phi^\top y$ and a scalar $\sigma_w$,
    $\log p(y) = -\tfrac12\big(n\log 2\pi\sigma^2 + \sum_j \log(1 + \sigma_w^2\lambda_j/\sigma^2)
    + (y^\top y - \sum_j c_j^2/(\lambda_j + \sigma^2/\sigma_w^2))/\sigma^2\big)$. Golden-section search
    on $\log\sigma^2$ (`num_steps` steps shrink the bracket by $0.618^{\text{num\_steps}}$);
    the evidence is unimodal in practice but not provably, so the bracket should be a plausible range.

    Args:
      stats: `kronvi.stats.RegressionStats`.
      prior_scale: $\sigma_w$, a positive scalar.
      lower: the lower end of the bracket, a positive scalar below `upper`.
      upper: the upper end of the bracket, a positive scalar above `lower`.
      num_steps: golden-section steps.

    Returns:
      $\sigma^2$, a scalar.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (2000, 3))
      >>> y = Phi @ jnp.array([1.0, -2.0, 0.5]) + 0.3 * jax.random.normal(jax.random.key(1), (2000,))
      >>> s2 = kronvi.gaussian.blr_evidence_noise(kronvi.stats.regression_stats(Phi, y), 1.0, lower=1e-3, upper=10.0)
      >>> round(float(s2), 2)
      0.09
    """
    check_stats(stats)
    dtype = stats.PhitPhi.dtype
    scale = as_float_array(prior_scale, "prior_scale").astype(dtype)
    if scale.ndim != 0:
        raise ValueError(f"`prior_scale` must be a scalar here, got shape {scale.shape}")
    check_finite(scale, "prior_scale")
    check_positive(scale, "prior_scale")
    lo = check_noise_variance(lower, dtype, "lower")
    hi = check_noise_variance(upper, dtype, "upper")
    if is_concrete(lo) and is_concrete(hi) and not float(fetch(lo)) < float(fetch(hi)):
        raise ValueError(f"`lower` must be below `upper`, got {float(fetch(lo))} and {float(fetch(hi))}")
    return _evidence_noise(stats, scale, lo, hi, check_int(num_steps, "num_steps", minimum=1))


def spectral_log_evidence(
    eigenvalues: ArrayLike,
    c: ArrayLike,
    yty: ArrayLike,
    n: ArrayLike,
    prior_scale: ArrayLike,
    noise_variance: ArrayLike,
) -> jax.Array:
    r"""Log evidence from the spectrum of $\Phi^\top\Phi$ (scalar $\sigma_w$): `O(b)`.

    The residual $y^\top y - \sum_j c_j^2/(\lambda_j + \kappa)$, $\kappa = \sigma^2/\sigma_w^2$,
    is taken as the least-squares residual $r_0 = y^\top y - \sum_j c_j^2/\lambda_j$ (clipped at 0:
    below the rounding of $y^\top y$ it is not resolved) plus the positive
    $\sum_j c_j^2\kappa/(\lambda_j(\lambda_j + \kappa))$, so no small noise variance divides a
    difference of large numbers; null directions (where $c_j = 0$) drop out.
    """
    lam, safe, c2, r0 = _spectral_terms(eigenvalues, c, yty)
    s2, v = noise_variance, prior_scale**2
    kappa = s2 / v
    quad = r0 / s2 + jnp.sum(c2 / (v * safe * (safe + kappa)))
    logdet = n * jnp.log(s2) + jnp.sum(jnp.log1p(v * lam / s2))
    return -0.5 * (n * LOG_2PI + logdet + quad)


def _spectral_terms(eigenvalues, c, yty):
    r"""`(lam, safe, c2, r0)` of `spectral_log_evidence`: the eigenvalues clipped at 0, with the null space's
    set to 1 (`safe`), the squared projections with the null space's set to 0, and the least-squares residual
    $y^\top y - \sum_j c_j^2/\lambda_j$ clipped at 0."""
    lam = jnp.maximum(eigenvalues, 0.0)
    null = null_space(lam)
    safe = jnp.where(null, 1.0, lam)
    c2 = jnp.where(null, 0.0, c**2)
    return lam, safe, c2, jnp.maximum(yty - jnp.sum(c2 / safe), 0.0)


@functools.partial(jax.jit, static_argnums=4)
def _evidence_noise(stats, scale, lo, hi, num_steps):
    lam, V = jnp.linalg.eigh(stats.PhitPhi)
    c = matmul(V.T, stats.Phity)  # (null directions are masked in spectral_log_evidence)
    return spectral_evidence_noise(lam, c, stats.yty, stats.n, scale, lo, hi, num_steps=num_steps)


@functools.partial(jax.jit, static_argnames="num_steps")
def spectral_evidence_noise(eigenvalues, c, yty, n, prior_scale, lower, upper, *, num_steps: int = 60):
    r"""The golden-section search of `blr_evidence_noise` on an eigendecomposition already at hand:
    `eigenvalues` of $\Phi^\top\Phi$ and `c` $= V^\top\Phi^\top y$ (e.g. the `Phity` of
    `kronvi.stats.eigenbasis`'s rotated statistics). Unchecked: validate with `blr_evidence_noise`'s
    rules first."""

    def f(t):
        return spectral_log_evidence(eigenvalues, c, yty, n, prior_scale, jnp.exp(t))

    g = (math.sqrt(5.0) - 1.0) / 2.0

    def body(_, st):
        a, b = st
        x1, x2 = b - g * (b - a), a + g * (b - a)
        keep_left = f(x1) >= f(x2)
        return jnp.where(keep_left, a, x1), jnp.where(keep_left, x2, b)

    a, b = lax.fori_loop(0, num_steps, body, (jnp.log(lower), jnp.log(upper)))
    return jnp.exp(0.5 * (a + b))


@functools.partial(jax.jit, static_argnames=("max_iter",))
def spectral_evidence_optimum(
    eigenvalues: ArrayLike,
    c: ArrayLike,
    yty: ArrayLike,
    n: ArrayLike,
    prior_scale: ArrayLike,
    noise_variance: ArrayLike,
    *,
    log_range: float = 12.0,
    max_iter: int = 100,
) -> tuple[jax.Array, jax.Array]:
    r"""The prior scale $\sigma_w$ and noise variance $\sigma^2$ that jointly maximize the exact evidence
    `spectral_log_evidence`, from the spectrum of $\Phi^\top\Phi$: `O(b)` per step.

    Newton's method on $(\log\sigma_w^2, \log\sigma^2)$ from `(prior_scale, noise_variance)`, each step
    with a Hessian shifted to be negative definite (Levenberg-Marquardt) and halved until the evidence
    rises; both logarithms stay within `log_range` of their start. Stops when a step gains less than
    $10^{-12}$ of the evidence's magnitude, or after `max_iter` steps. This is the choice
    scikit-learn's `BayesianRidge` makes by its fixed-point iteration (MacKay 1992). Unchecked:
    validate the inputs as `blr_evidence_noise` does.

    Args:
      eigenvalues: `(b,)` eigenvalues of $\Phi^\top\Phi$.
      c: `(b,)` $V^\top\Phi^\top y$ in the eigenbasis.
      yty: $y^\top y$.
      n: number of rows.
      prior_scale: starting $\sigma_w$, a positive scalar.
      noise_variance: starting $\sigma^2$, a positive scalar.
      log_range: how far (in natural log units) each variance may move from its start.
      max_iter: Newton steps.

    Returns:
      `(prior_scale, noise_variance)`, two scalars.

    References:
      MacKay (1992), "Bayesian interpolation"; Bishop (2006), *Pattern Recognition and Machine
      Learning*, Sec. 3.5 (the evidence approximation).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (2000, 3))
      >>> w = jnp.array([1.0, -2.0, 0.5]); y = Phi @ w + 0.3 * jax.random.normal(jax.random.key(1), (2000,))
      >>> rotated, basis = kronvi.stats.eigenbasis(kronvi.stats.regression_stats(Phi, y))
      >>> sw, s2 = kronvi.gaussian.spectral_evidence_optimum(
      ...     basis.eigenvalues, rotated.Phity, rotated.yty, rotated.n, 1.0, 1.0)
      >>> round(float(s2), 2), round(float(sw), 1)  # noise 0.3^2; |w| / sqrt(3) = 1.3
      (0.09, 1.3)
    """
    dtype = jnp.result_type(eigenvalues, c)
    theta0 = jnp.stack([2.0 * jnp.log(prior_scale), jnp.log(noise_variance)]).astype(dtype)
    lo, hi = theta0 - log_range, theta0 + log_range

    def f(theta):
        return spectral_log_evidence(eigenvalues, c, yty, n, jnp.exp(0.5 * theta[0]), jnp.exp(theta[1]))

    scale = 1.0 + jnp.abs(f(theta0))

    def step(st):
        it, theta, value, _ = st
        g, H = _evidence_derivatives(eigenvalues, c, yty, n, theta)
        # the 2 x 2 algebra in closed form (no LAPACK calls: a smaller program to compile)
        p, q, r = H[0, 0], 0.5 * (H[0, 1] + H[1, 0]), H[1, 1]
        top = 0.5 * (p + r) + jnp.sqrt(0.25 * (p - r) ** 2 + q**2)  # the larger eigenvalue
        shift = jnp.maximum(top, 0.0) + 1e-6 * (1.0 + jnp.max(jnp.abs(H)))
        p, r = p - shift, r - shift  # negative definite: det > 0
        det = p * r - q * q
        d = jnp.stack([q * g[1] - r * g[0], q * g[0] - p * g[1]]) / det  # (H - shift I)^{-1} (-g)
        d = d / jnp.maximum(1.0, jnp.max(jnp.abs(d)))  # at most e-fold a step

        def halve(ls):
            t, _, _ = ls
            cand = jnp.clip(theta + t * d, lo, hi)
            return t * 0.5, cand, f(cand)

        def worse(ls):
            t, cand, v = ls
            return (t > 1e-6) & ~(v >= value)

        cand = jnp.clip(theta + d, lo, hi)
        _, cand, v = lax.while_loop(worse, halve, (jnp.asarray(0.5, dtype), cand, f(cand)))
        better = v >= value
        gain = jnp.where(better, v - value, 0.0)
        return it + 1, jnp.where(better, cand, theta), jnp.where(better, v, value), gain

    def cond(st):
        it, _, _, gain = st
        return (it < max_iter) & (gain > 1e-12 * scale)

    _, theta, _, _ = lax.while_loop(
        cond, step, (jnp.asarray(0), theta0, f(theta0), jnp.asarray(jnp.inf, dtype))
    )
    return jnp.exp(0.5 * theta[0]), jnp.exp(theta[1])


def _evidence_derivatives(eigenvalues, c, yty, n, theta):
    r"""Gradient and Hessian of `spectral_log_evidence` in $\theta = (\log\sigma_w^2, \log\sigma^2)$, in
    closed form (a smaller program than `jax.hessian`'s).

    With $v = \sigma_w^2$, $s = \sigma^2$, $A_j = v\lambda_j$, $D_j = A_j + s$ and $k_j = c_j^2/\lambda_j$, the
    evidence is $-\tfrac12[n\log 2\pi + n\log s + \sum_j\log(D_j/s) + r_0/s + \sum_j k_j/D_j]$
    (`spectral_log_evidence`'s terms); every derivative below is of those terms, null directions
    ($A_j = k_j = 0$) dropping out.
    """
    lam, safe, c2, r0 = _spectral_terms(eigenvalues, c, yty)
    k = c2 / safe
    v, s = jnp.exp(theta[0]), jnp.exp(theta[1])
    D = v * lam + s
    a, b_, kd = v * lam / D, s / D, k / D  # A/D, s/D (a + b_ = 1), k/D
    ab = jnp.sum(a * b_)
    g = -0.5 * jnp.stack([jnp.sum(a) - jnp.sum(kd * a), n - jnp.sum(a) - r0 / s - jnp.sum(kd * b_)])
    h_uu = ab + jnp.sum(kd * a * (a - b_))
    h_uw = -ab + 2.0 * jnp.sum(kd * a * b_)
    h_ww = ab + r0 / s + jnp.sum(kd * b_ * (b_ - a))
    return g, -0.5 * jnp.stack([jnp.stack([h_uu, h_uw]), jnp.stack([h_uw, h_ww])])


def predict_blr(
    mean: ArrayLike, cov: ArrayLike, noise_variance: ArrayLike, Phi_new: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    r"""Exact predictive $y^* \sim N(\Phi^*\mu,\ \mathrm{diag}(\Phi^*\Sigma\Phi^{*\top}) + \sigma^2)$.

    Args:
      mean: `(b,)` posterior mean from `blr_posterior`.
      cov: `(b, b)` posterior covariance.
      noise_variance: $\sigma^2$.
      Phi_new: `(num_points, b)` test features.

    Returns:
      `(mean, variance)`, each `(num_points,)`; the log predictive density of `y` is
      `-0.5 * (log(2 pi variance) + (y - mean)**2 / variance)`.
    """
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    check_finite(Phi_new, "Phi_new")
    mean = as_float_array(mean, "mean")
    cov = as_float_array(cov, "cov")
    b = Phi_new.shape[1]
    if mean.shape != (b,) or cov.shape != (b, b):
        raise ValueError(
            f"`mean` {mean.shape} and `cov` {cov.shape} must be ({b},) and ({b}, {b}) for `Phi_new` with {b} "
            "features"
        )
    s2 = check_noise_variance(noise_variance, Phi_new.dtype)
    return matmul(Phi_new, mean), jnp.sum(matmul(Phi_new, cov) * Phi_new, axis=-1) + s2
