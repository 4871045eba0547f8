r"""Exact DIRECT inference for Bayesian linear regression with discrete priors.

Model: $y = \Phi w + \varepsilon$, $\varepsilon \sim N(0, \sigma^2 I)$, weights
$w_j$ on grids with prior $p(w) = \prod_j p_j(w_j)$ and a discrete prior over
$\sigma^2$. With $q(w, \sigma^2) = \prod_j q_j(w_j)\, q_\sigma(\sigma^2)$ every term of the
ELBO is an inner product of Kronecker-structured vectors (Evans & Nair 2018, Theorem 1):

$$
\mathcal{L} = -\tfrac{n}{2}\log 2\pi - \tfrac{n}{2}E[\log\sigma^2]
  - \tfrac12 E[\sigma^{-2}]\big(y^\top y - 2\bar w^\top\Phi^\top y + \bar w^\top\Phi^\top\Phi\bar w
  + \textstyle\sum_j (\Phi^\top\Phi)_{jj}\mathrm{Var}_q(w_j)\big)
  + E_q[\log p] - E_q[\log q],
$$

computed in $O(bm + b^2)$ from the sufficient statistics, whatever `n` is.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base.buckets import on_row_bucket
from .._base.checks import as_float_array, check_finite, check_ndim, check_same_dtype
from .._base.deprecation import reordered_arguments
from .._base.kron import expected_quadratic, kron_sum_expectation
from .._base.precision import matmul
from .._stats.regression import RegressionStats, check_stats
from .families import MeanField, check_family, grid_moments
from .grids import DiscretePrior, check_noise_prior, check_weight_prior

LOG_2PI = math.log(2.0 * math.pi)


def check_regression_args(q_w, q_noise, prior_w, prior_noise, stats=None):
    """Validation shared by the ELBO, the fit and prediction: shapes and types, and with `stats` one
    float dtype for statistics, priors and `q` plus finite statistics (`check_stats`)."""
    if stats is not None:
        check_stats(stats)
    check_weight_prior(prior_w, None if stats is None else stats.Phity.shape[-1])
    check_noise_prior(prior_noise)
    check_family(q_w, prior_w, "q_w", "prior_w")
    check_family(q_noise, prior_noise, "q_noise", "prior_noise")
    if stats is not None:
        check_same_dtype(
            {
                "stats": stats.PhitPhi,
                "prior_w": prior_w.values,
                "prior_noise": prior_noise.values,
                "q_w": q_w.logits,
                "q_noise": q_noise.logits,
            }
        )


@jax.jit
def noise_moments(q_noise: MeanField, prior_noise: DiscretePrior) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""$(E[\sigma^{-2}], E[\log\sigma^2], E[\sigma^2])$ under `q_noise`."""
    p = q_noise.probs[..., 0, :]
    s = prior_noise.values[..., 0, :]
    return (
        jnp.sum(p / s, axis=-1),
        jnp.sum(p * jnp.log(s), axis=-1),
        jnp.sum(p * s, axis=-1),
    )


def noise_optimum_logits(expected_rss_value, prior_noise: DiscretePrior, n):
    r"""Exact coordinate-ascent update of the noise factor given $E_q\|y - \Phi w\|^2$:
    $\log q_\sigma(s) = \log p_\sigma(s) - \tfrac n2 \log s - E\|y-\Phi w\|^2 / (2s)$ (unnormalized).
    Shared by every family whose expected residual is available (mean-field, mixtures)."""
    s = prior_noise.values
    return prior_noise.log_probs - 0.5 * n * jnp.log(s) - 0.5 * expected_rss_value / s


def expected_rss(q_w: MeanField, prior_w: DiscretePrior, stats: RegressionStats):
    r"""$E_q\|y - \Phi w\|^2$ from the statistics (one matrix-vector product)."""
    mean, var = grid_moments(q_w.probs, prior_w.values)
    return (
        stats.yty - 2.0 * jnp.sum(mean * stats.Phity, axis=-1) + expected_quadratic(mean, var, stats.PhitPhi)
    )


def elbo_terms(q_w, q_noise, prior_w, prior_noise, stats):
    e_inv, e_log, _ = noise_moments(q_noise, prior_noise)
    ell = -0.5 * stats.n * (LOG_2PI + e_log) - 0.5 * e_inv * expected_rss(q_w, prior_w, stats)
    # E_q[log p] and E_q[log q]: inner products of Kronecker sums with Kronecker products (Prop. 3).
    qw, qn = q_w.probs, q_noise.probs
    log_prior = kron_sum_expectation(prior_w.log_probs, qw) + kron_sum_expectation(prior_noise.log_probs, qn)
    log_q = kron_sum_expectation(q_w.log_probs, qw) + kron_sum_expectation(q_noise.log_probs, qn)
    return ell, log_prior, log_q


@reordered_arguments(
    ("q_w", "q_noise", "prior_w", "prior_noise", "stats"), lambda a: isinstance(a[0], MeanField)
)
def regression_elbo(
    stats: RegressionStats,
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
) -> jax.Array:
    r"""Exact mean-field ELBO of DIRECT Bayesian linear regression (Theorem 1).

    The sum over all $m^b m_\sigma$ configurations of weights and noise variance, computed in
    $O(bm + b^2)$ from the sufficient statistics; a true lower bound on
    $\log p(y \mid \Phi)$ (the $-\frac n2 \log 2\pi$ constant included).

    Args:
      stats: `RegressionStats` of the data.
      q_w: `MeanField` over the weights, logits `(b, m)`.
      q_noise: `MeanField` over the noise variance, logits `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)` over positive variances.

    Returns:
      The ELBO, a scalar.

    References:
      Evans & Nair (2018), Theorem 1 and section 3.1.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (50, 3)); y = Phi @ jnp.array([1., 0., -1.])
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> pw, pn = kronvi.model.gaussian_prior(3, 1.0, levels=5), kronvi.model.noise_prior(0.1)
      >>> elbo = kronvi.model.regression_elbo(stats, kronvi.model.MeanField.from_prior(pw),
      ...                               kronvi.model.MeanField.from_prior(pn), pw, pn)
      >>> bool(jnp.isfinite(elbo))
      True
    """
    check_regression_args(q_w, q_noise, prior_w, prior_noise, stats)
    ell, log_prior, log_q = elbo_terms(q_w, q_noise, prior_w, prior_noise, stats)
    return ell + log_prior - log_q


def check_phi_new(Phi_new, prior_w):
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    if Phi_new.shape[1] != prior_w.values.shape[-2]:
        raise ValueError(
            f"`Phi_new` has {Phi_new.shape[1]} features but the model has {prior_w.values.shape[-2]} weights"
        )
    check_finite(Phi_new, "Phi_new")
    return Phi_new


def predict_regression(
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    Phi_new: ArrayLike,
) -> tuple[jax.Array, jax.Array]:
    r"""Exact predictive mean and variance of $y^* = \Phi^* w + \varepsilon$ under q.

    Mean $\Phi^*\bar w$ (eq. 9); variance $\sum_j (\Phi^*_j)^2 \mathrm{Var}_q(w_j) +
    E_q[\sigma^2]$ (the weights are independent under mean-field q). $O(b)$ per point.

    Args:
      q_w: `MeanField` over the weights, logits `(b, m)`.
      q_noise: `MeanField` over the noise variance, logits `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)` over positive variances.
      Phi_new: test features `(num_points, b)`.

    Returns:
      `(mean, variance)`, each `(num_points,)`.
    """
    check_regression_args(q_w, q_noise, prior_w, prior_noise)
    Phi_new = check_phi_new(Phi_new, prior_w)
    # one program per bucket of row counts (kronvi._base.buckets): each row's moments are its own
    return on_row_bucket(
        _predict_moments, jnp.shape(Phi_new)[0], (Phi_new,), q_w, q_noise, prior_w, prior_noise
    )


@jax.jit
def _predict_moments(Phi_new, q_w, q_noise, prior_w, prior_noise):
    """`predict_regression` after its checks, in one program (as separate operations, each compiled on its
    first call for a shape: about 0.4 s of a first prediction)."""
    mean, var = grid_moments(q_w.probs, prior_w.values)
    _, _, e_s = noise_moments(q_noise, prior_noise)
    return matmul(Phi_new, mean), matmul(Phi_new**2, var) + e_s


def expected_sparsity(q_w: MeanField, prior_w: DiscretePrior) -> jax.Array:
    r"""Expected fraction of zero weights in a posterior sample: the mean over weights of
    $q_j(w_j = 0)$. Weights whose grid has no zero level count as never zero."""
    check_family(q_w, prior_w, "q_w", "prior_w")
    is_zero = prior_w.values == 0
    return jnp.mean(jnp.sum(jnp.where(is_zero, q_w.probs, 0.0), axis=-1), axis=-1)


def elbo_from_logits(logits_w, logits_n, prior_w, prior_noise, stats):
    ell, lp, lq = elbo_terms(
        MeanField._unchecked(logits_w), MeanField._unchecked(logits_n), prior_w, prior_noise, stats
    )
    return ell + lp - lq


def noise_update(logits_w, prior_w, prior_noise, stats):
    rss = expected_rss(MeanField._unchecked(logits_w), prior_w, stats)
    return noise_optimum_logits(rss, prior_noise, stats.n)


def coordinate_optimum(e_inv, mean, g, prior_w, stats):
    """Optimal logits of every weight given all the others (a Jacobi candidate), `(b, m)`."""
    A_diag = jnp.diagonal(stats.PhitPhi)
    h = stats.Phity - (g - A_diag * mean)
    V = prior_w.values
    return prior_w.log_probs + e_inv * (V * h[:, None] - 0.5 * A_diag[:, None] * V * V)
