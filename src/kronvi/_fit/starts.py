r"""Starting points for mean-field DIRECT fits.

Coordinate ascent on a discrete grid stops at the first configuration that no single-weight update
improves. With many rows each factor is close to a point mass, so a fit started from the prior can stop far
from the continuous optimum. `gaussian_start` starts instead
from the exact optimum of the *continuous* mean-field problem with the same prior variances, which is one
Cholesky factorization of $\Phi^\top\Phi$ away.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._base.checks import check_int
from .._base.precision import matmul
from .._model.families import MeanField, grid_moments
from .._model.grids import DiscretePrior
from .._model.regression import check_regression_args, coordinate_optimum, noise_update
from .._stats.regression import RegressionStats
from ..gaussian._meanfield import fit_exact


@functools.partial(jax.jit, static_argnames="max_iter")
def gaussian_start_logits(prior_w, prior_noise, stats, max_iter):
    """`gaussian_start`'s logits `(logits_w, logits_noise)` for checked arguments (no validation)."""
    _, prior_var = grid_moments(jnp.exp(prior_w.log_probs), prior_w.values)
    scale = jnp.sqrt(prior_var)
    s = prior_noise.values[0]
    s0 = jnp.sum(jnp.exp(prior_noise.log_probs[0]) * s)
    q, s2, _ = fit_exact(
        stats, scale, s0, jnp.min(s), jnp.max(s), learn_noise=True, max_iter=max_iter, tol=1e-7
    )
    # Each factor's optimum given every other weight at its Gaussian mean (one Jacobi CAVI step).
    logits_w = coordinate_optimum(1.0 / s2, q.mean, matmul(stats.PhitPhi, q.mean), prior_w, stats)
    logits_w = jax.nn.log_softmax(logits_w, axis=-1)
    logits_n = jax.nn.log_softmax(noise_update(logits_w, prior_w, prior_noise, stats), axis=-1)
    return logits_w, logits_n


def gaussian_start(
    stats: RegressionStats, prior_w: DiscretePrior, prior_noise: DiscretePrior, *, max_iter: int = 3
) -> tuple[MeanField, MeanField]:
    r"""A starting point `(q_w, q_noise)` for `kronvi.fitting.fit_regression` from the continuous problem.

    Fits the diagonal Gaussian posterior $\prod_j N(\mu_j, s_j^2)$ under the prior
    $N(0, v_j)$, where $v_j$ is the variance of weight `j`'s discrete prior, with the noise
    variance learned inside the range of the noise grid (`kronvi.gaussian.fit_gaussian_mf`, exact, `max_iter`
    alternating updates: a start needs no more, CAVI refines the noise). Then each
    discrete factor is set to its exact coordinate optimum with every other weight at its Gaussian mean:
    $\log q_j(v) = \log p_j(v) + (v h_j - \tfrac12 (\Phi^\top\Phi)_{jj} v^2)/\sigma^2$,
    $h_j = (\Phi^\top y)_j - \sum_{i \ne j} (\Phi^\top\Phi)_{ij}\mu_i$; for a discretized Gaussian
    prior this is $N(\mu_j, s_j^2)$ restricted to the grid. The noise factor is its exact optimum
    given that $q_w$.

    Args:
      stats: `RegressionStats`.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      max_iter: updates of the continuous problem (each one Cholesky factorization of a `b x b` matrix).

    Returns:
      `(q_w, q_noise)`, two `MeanField`, to pass as `init` to `kronvi.fitting.fit_regression`.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (500, 4))
      >>> y = Phi @ jnp.array([1., 0., -1., 0.5]) + 0.1 * jax.random.normal(jax.random.key(1), (500,))
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> prior_w, prior_n = kronvi.model.gaussian_prior(4, 1.0), kronvi.model.noise_prior(0.01, levels=5, span=10.0)
      >>> q_w, q_n = kronvi.fitting.gaussian_start(stats, prior_w, prior_n)
      >>> q_w, q_n, info = kronvi.fitting.fit_regression(stats, prior_w, prior_n, init=(q_w, q_n))
      >>> [round(float(v), 2) for v in (q_w.probs * prior_w.values).sum(-1)]
      [0.86, 0.0, -0.86, 0.43]
    """
    max_iter = check_int(max_iter, "max_iter", 1)
    q_w0, q_n0 = MeanField.from_prior(prior_w), MeanField.from_prior(prior_noise)
    check_regression_args(q_w0, q_n0, prior_w, prior_noise, stats)
    logits_w, logits_n = gaussian_start_logits(prior_w, prior_noise, stats, max_iter)
    return MeanField._unchecked(logits_w), MeanField._unchecked(logits_n)
