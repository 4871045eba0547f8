r"""Exact predictive moments under a mixture posterior."""

from __future__ import annotations

import jax
from jax.typing import ArrayLike

from .._base.precision import matmul
from .._model.families import MeanField, grid_moments
from .._model.grids import DiscretePrior
from .._model.regression import check_phi_new, noise_moments
from ._family import Mixture, MixturePrior, check_mixture_args


def predict_mixture(
    q: Mixture,
    q_noise: MeanField,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
    Phi_new: ArrayLike,
) -> tuple[jax.Array, jax.Array]:
    r"""Exact predictive mean and variance of $y^* = \Phi^* w + \varepsilon$ under a mixture.

    With component means $\mu_k = \Phi^*\bar w_k$ and variances
    $v_k = (\Phi^*)^{\circ 2}\mathrm{Var}_{q^{(k)}}(w)$, the law of total variance gives

    $$
    E[y^*] = \sum_k \alpha_k \mu_k,\qquad
    \mathrm{Var}[y^*] = \sum_k \alpha_k\big(v_k + (\mu_k - E[y^*])^2\big) + E_{q_\sigma}[\sigma^2].
    $$

    Args:
      q: `Mixture` `(r, b, m)`.
      q_noise, prior_w, prior_noise: as in `mixture_elbo_bound` (only `prior_w.values` is used).
      Phi_new: test features `(num_points, b)`.

    Returns:
      `(mean, variance)`, each `(num_points,)`.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> pw, pn = kronvi.model.gaussian_prior(1, 1.0, levels=3, width=1.0), kronvi.model.noise_prior(1.0, levels=1)
      >>> q = kronvi.mixtures.Mixture(jnp.log(jnp.array([[[1.0, 1e-9, 1e-9]], [[1e-9, 1e-9, 1.0]]])), jnp.zeros(2))
      >>> m, v = kronvi.mixtures.predict_mixture(q, kronvi.model.MeanField.from_prior(pn), pw, pn, jnp.ones((1, 1)))
      >>> [round(float(m[0]), 6), round(float(v[0]), 6)]
      [0.0, 2.0]
    """
    check_mixture_args(q, q_noise, prior_w, prior_noise)
    Phi_new = check_phi_new(Phi_new, prior_w)
    return _predict(q, q_noise, prior_w.values, prior_noise, Phi_new)


@jax.jit
def _predict(q, q_noise, values, prior_noise, Phi_new):
    mean_k, var_k = grid_moments(q.probs, values)  # (r, b)
    mu = matmul(Phi_new, mean_k.T)  # (N, r)
    v = matmul(Phi_new**2, var_k.T)
    alpha = q.weights
    mean = matmul(mu, alpha)
    _, _, e_s = noise_moments(q_noise, prior_noise)
    return mean, matmul(v + (mu - mean[:, None]) ** 2, alpha) + e_s
