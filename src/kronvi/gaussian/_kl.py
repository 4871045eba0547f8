r"""The KL divergence between two multivariate Gaussians, through their Cholesky factors.

For $q = N(m_q, S_q)$ and $p = N(m_p, S_p)$ in $k$ dimensions, with
$S_q = L_q L_q^\top$ and $S_p = L_p L_p^\top$:

$$
\mathrm{KL}(q \,\|\, p) = \tfrac12\Big(\|L_p^{-1} L_q\|_F^2 + \|L_p^{-1}(m_p - m_q)\|^2 - k
  + 2\textstyle\sum_i \log (L_p)_{ii} - 2\sum_i \log (L_q)_{ii}\Big).
$$

Two triangular solves replace the explicit inverse and both log-determinants come from the factors'
diagonals, so nothing is squared or inverted: the formula keeps the conditioning of the covariances
themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base.checks import as_float_array, check_finite, check_ndim, fetch, is_concrete


def _check_gaussian(
    mean: ArrayLike, cov: ArrayLike, mean_name: str, cov_name: str
) -> tuple[jax.Array, jax.Array]:
    mean = as_float_array(mean, mean_name)
    cov = as_float_array(cov, cov_name)
    check_ndim(mean, 1, mean_name, "(dim,)")
    check_ndim(cov, 2, cov_name, "(dim, dim)")
    k = mean.shape[0]
    if cov.shape != (k, k):
        raise ValueError(
            f"`{cov_name}` must have shape ({k}, {k}) for `{mean_name}` of shape ({k},), got {cov.shape}"
        )
    check_finite(mean, mean_name)
    check_finite(cov, cov_name)
    if is_concrete(cov):  # the factorization averages the two triangles: refuse what is no covariance at all,
        C = np.asarray(fetch(cov), np.float64)  # keep the rounding of a computed inverse (1% of the largest entry)
        if np.max(np.abs(C - C.T), initial=0.0) > 1e-2 * np.max(np.abs(C), initial=0.0):
            raise ValueError(f"`{cov_name}` must be symmetric (a covariance), got one that is not")
    return mean, cov


def gaussian_kl(q_mean: ArrayLike, q_cov: ArrayLike, p_mean: ArrayLike, p_cov: ArrayLike) -> jax.Array:
    r"""$\mathrm{KL}(N(m_q, S_q) \,\|\, N(m_p, S_p))$ in nats, through Cholesky factors of both covariances.

    $$
    \mathrm{KL} = \tfrac12\Big(\mathrm{tr}(S_p^{-1}S_q) + (m_p - m_q)^\top S_p^{-1}(m_p - m_q) - k
      + \log|S_p| - \log|S_q|\Big)
    $$

    with $\mathrm{tr}(S_p^{-1}S_q) = \|L_p^{-1}L_q\|_F^2$ and the log-determinants from the factors'
    diagonals (two triangular solves, $O(k^3)$). Both covariances must be symmetric positive
    definite; where the working precision cannot factor one, the result is NaN (no jitter is added: a KL
    against a silently regularized covariance would be a different number).

    Args:
      q_mean: `(k,)` mean of the first argument $q$.
      q_cov: `(k, k)` covariance of $q$.
      p_mean: `(k,)` mean of the reference $p$.
      p_cov: `(k, k)` covariance of $p$.

    Returns:
      The KL divergence, a scalar in the inputs' (promoted) dtype.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> round(float(kronvi.gaussian.gaussian_kl(jnp.zeros(2), jnp.eye(2), jnp.ones(2), 2.0 * jnp.eye(2))), 4)
      0.6931
    """
    q_mean, q_cov = _check_gaussian(q_mean, q_cov, "q_mean", "q_cov")
    p_mean, p_cov = _check_gaussian(p_mean, p_cov, "p_mean", "p_cov")
    if q_mean.shape != p_mean.shape:
        raise ValueError(f"`q_mean` has shape {q_mean.shape} but `p_mean` has shape {p_mean.shape}")
    dtype = jnp.result_type(q_mean, q_cov, p_mean, p_cov)
    return _kl(*(a.astype(dtype) for a in (q_mean, q_cov, p_mean, p_cov)))


@jax.jit
def _kl(q_mean, q_cov, p_mean, p_cov):
    Lq = jnp.linalg.cholesky(q_cov)
    Lp = jnp.linalg.cholesky(p_cov)
    M = jax.scipy.linalg.solve_triangular(Lp, Lq, lower=True)
    z = jax.scipy.linalg.solve_triangular(Lp, p_mean - q_mean, lower=True)
    logdet_ratio = 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lp)) - jnp.log(jnp.diagonal(Lq)))
    return 0.5 * (jnp.sum(M**2) + jnp.sum(z**2) - q_mean.shape[0] + logdet_ratio)
