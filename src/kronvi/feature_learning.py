r"""Learning features with kronvi's own objective: gradients of the exact DIRECT ELBO with respect to the
parameters of a feature map, through the sufficient statistics.

A feature map is any pure function `feature_fn(params, X) -> Phi` whose parameters are a pytree of
arrays: random Fourier features with learnable lengthscales
(`rff_lengthscale_map`), a multilayer perceptron as a plain
list of arrays (`mlp_init`,
`mlp_features`), or the arrays of an Equinox or Flax model
(`params, static = eqx.partition(model, eqx.is_array)`; `feature_fn = lambda p, X:
jax.vmap(eqx.combine(p, static))(X)`). `feature_elbo` is the exact
ELBO as a function of those parameters; `fit_features` learns them
together with the discrete posterior under fixed grids, and
`fit_features_eigen` does so inside kronvi's default recipe
(weights discretized in the eigenbasis, grids re-placed every round). Why it is not the default:
`docs/decisions/fitting.md#learned-features`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from ._base.checks import check_int
from ._base.deprecation import renamed_arguments
from ._base.precision import matmul
from ._base.pytree import as_traced_callable
from ._fit.features import FeatureFit as FeatureFit
from ._fit.features import FeatureFitInfo as FeatureFitInfo
from ._fit.features import feature_elbo as feature_elbo
from ._fit.features import feature_stats as feature_stats
from ._fit.features import fit_features as fit_features
from ._fit.regression import fit_regression
from ._inputs.learned import mlp_features as mlp_features
from ._inputs.learned import mlp_init as mlp_init
from ._inputs.learned import rff_lengthscale_features as rff_lengthscale_features
from ._inputs.learned import rff_lengthscale_map as rff_lengthscale_map
from ._model.families import MeanField
from ._model.grids import DiscretePrior, noise_prior
from ._solvers.info import FitInfo, fit_info
from ._stats.eigen import Eigenbasis, eigenbasis, rotate_features
from .pipeline import eigen_posterior_grid, evidence_noise_variance

__all__ = [
    "EigenFeatureFit",
    "EigenFeatureModel",
    "FeatureFit",
    "FeatureFitInfo",
    "eigen_feature_model",
    "feature_elbo",
    "feature_stats",
    "fit_features",
    "fit_features_eigen",
    "mlp_features",
    "mlp_init",
    "predict_features",
    "rff_lengthscale_features",
    "rff_lengthscale_map",
]


class EigenFeatureModel(NamedTuple):
    """A fitted model of the eigenbasis recipe on learned features (see
    `fit_features_eigen`).

    Attributes:
      params: the feature map's parameters.
      basis: `Eigenbasis` of $\\Phi^\\top\\Phi$; the weights belong to $\\Phi V$.
      prior_w: `DiscretePrior` `(b, m)`, each coordinate's grid over its exact posterior.
      prior_noise: `DiscretePrior` `(1, m_sigma)` around the evidence maximizer.
      q_w: `MeanField` over the rotated weights.
      q_noise: `MeanField` over the noise variance.
      elbo: the exact ELBO of this model on the training rows.
    """

    params: object
    basis: Eigenbasis
    prior_w: DiscretePrior
    prior_noise: DiscretePrior
    q_w: MeanField
    q_noise: MeanField
    elbo: float


class EigenFeatureFit(NamedTuple):
    """The result of `fit_features_eigen`.

    Attributes:
      model: the placed `EigenFeatureModel` with the highest
        ELBO (its `params` are the learned parameters).
      info: `kronvi.FitInfo` over the rounds: `elbo` `(max_iter + 1,)` the best ELBO of
        the models placed so far (before the first round, then after each), so `final_elbo` is
        `model.elbo`; `iterate_elbo` the ELBO of the model placed at each of those points, which can
        fall from one round to the next; `converged` is false (the rounds have no stopping test);
        `optimizer` the method of the parameter steps.
    """

    model: EigenFeatureModel
    info: FitInfo


def _rotated(fn, vectors, params, X):
    return matmul(fn(params, X), vectors)


def eigen_feature_model(
    params: Any, X: ArrayLike, y: ArrayLike, *, feature_fn: Callable[[Any, jax.Array], jax.Array],
    prior_scale: ArrayLike, noise_variance: ArrayLike, levels: int = 15, width: float = 4.0,
    noise_span: float = 3.0, chunk_size: int | None = None,
) -> EigenFeatureModel:  # fmt: skip
    r"""kronvi's default recipe on the features `feature_fn(params, X)`: eigenbasis, grids and fit.

    The statistics are rotated to the eigenbasis of $\Phi^\top\Phi$ (`eigenbasis`);
    the noise grid spans `noise_span`x around the exact-evidence maximizer
    (`evidence_noise_variance`, searched around
    `noise_variance`); coordinate $j$ gets `levels` values over its exact posterior ± `width` sds under
    the prior $N(0, \sigma_w^2)$ (`eigen_posterior_grid`); the
    mean field is fitted by coordinate ascent from `gaussian_start`.

    Computed in the dtype of the features: pass float64 inputs and parameters (under
    `jax.enable_x64(True)`) as the pipeline does, since the small eigenvalues that carry signal are below
    the rounding of float32 statistics (`docs/decisions/default-recipe.md#the-eigenbasis`).

    Args:
      params: the feature map's parameters (a pytree of arrays).
      X: inputs `(n, d)`.
      y: centred targets `(n,)`.
      feature_fn: `(params, X_chunk) -> Phi_chunk`.
      prior_scale: $\sigma_w$, the prior standard deviation of every weight.
      noise_variance: a guess of the noise variance (e.g. the GP estimate).
      levels: levels of every weight grid and of the noise grid.
      width: half-width of each weight grid in posterior sds.
      noise_span: the noise grid spans `noise_variance * [1/span, span]` around the maximizer.
      chunk_size: rows per chunk of the statistics.

    Returns:
      `EigenFeatureModel`.
    """
    stats = feature_stats(params, X, y, feature_fn=feature_fn, chunk_size=chunk_size)
    rotated, basis = eigenbasis(stats)
    s2 = evidence_noise_variance(rotated, basis, prior_scale, noise_variance)
    prior_w = eigen_posterior_grid(rotated, basis, prior_scale, s2, levels=levels, width=width)
    prior_n = noise_prior(s2, levels=levels, span=noise_span)
    q_w, q_n, info = fit_regression(rotated, prior_w, prior_n, init="gaussian")
    elbo = float(info.final_elbo)
    return EigenFeatureModel(params, basis, prior_w, prior_n, q_w, q_n, elbo)


def predict_features(
    model: EigenFeatureModel, X: ArrayLike, *, feature_fn: Callable[[Any, ArrayLike], jax.Array]
) -> jax.Array:
    r"""Features of new inputs in the model's eigenbasis, $\Phi(X) V$, `(N, b)`: pass them to
    `predict_regression` or
    `predictive_log_density` with the model's `q_w, q_noise, prior_w,
    prior_noise`.

    Args:
      model: `EigenFeatureModel`.
      X: inputs `(N, d)`, prepared as the training inputs were (standardized).
      feature_fn: the feature map the model was fitted with.
    """
    if not isinstance(model, EigenFeatureModel):
        raise TypeError(f"`model` must be an EigenFeatureModel, got {type(model).__name__}")
    return rotate_features(model.basis, feature_fn(model.params, X))


@renamed_arguments(rounds="max_iter")
def fit_features_eigen(
    params: Any, X: ArrayLike, y: ArrayLike, *, feature_fn: Callable[[Any, jax.Array], jax.Array],
    prior_scale: ArrayLike, noise_variance: ArrayLike, max_iter: int = 8, param_iter: int = 10,
    inner_sweeps: int = 20, log_prior: Callable[[Any], jax.Array] | None = None, levels: int = 15,
    width: float = 4.0, noise_span: float = 3.0, chunk_size: int | None = None,
) -> EigenFeatureFit:  # fmt: skip
    r"""Learns a feature map by the exact ELBO of kronvi's default (eigenbasis) recipe.

    The recipe's grids depend on the features: each coordinate's levels span its exact posterior. Each
    round therefore

    1. places the recipe at the current parameters (`eigen_feature_model`:
       eigenbasis $V$, grids, noise grid, $q$);
    2. holds $V$ and the grids fixed and runs `fit_features` for
       one round on the features $\Phi_\theta V$: `param_iter` L-BFGS iterations on
       $\max_q \mathcal{L}(\theta, q) + \log p(\theta)$, $q$ refitted by `inner_sweeps` sweeps of
       coordinate ascent at every evaluation and the gradient taken at that $q$ (the envelope theorem;
       `inner_sweeps=0` holds $q$ fixed: classic variational EM, slower here because a fixed $q$ on grids
       a few posterior sds wide resists any move of the features).

    Within a round the objective never decreases, but re-placing the grids changes the model (and
    coordinate ascent from the Gaussian start may stop at another local optimum), so the ELBO of the
    placed model can fall from one round to the next. The placed model with the highest ELBO is returned:
    never worse, by the ELBO, than the recipe at the starting parameters.

    Args:
      params: starting parameters of the feature map (a pytree of arrays).
      X: inputs `(n, d)`.
      y: centred targets `(n,)`.
      feature_fn: `(params, X_chunk) -> Phi_chunk`, pure and differentiable.
      prior_scale: $\sigma_w$.
      noise_variance: a guess of the noise variance; each round searches the evidence maximizer around the
        previous round's.
      max_iter: rounds of placement and learning (all of them run: there is no stopping test).
      param_iter: L-BFGS iterations per round.
      inner_sweeps: coordinate-ascent sweeps refitting $q$ at each evaluation of the objective.
      log_prior: optional `log_prior(params) -> scalar` added to the objective (MAP for the parameters).
      levels: levels of every weight grid and of the noise grid, as for
        `eigen_feature_model`.
      width: half-width of each weight grid in posterior sds.
      noise_span: the noise grid spans `noise_variance * [1/span, span]` around the maximizer.
      chunk_size: rows per chunk of the statistics.

    Returns:
      `EigenFeatureFit` `(model, info)`: the placed
      `EigenFeatureModel` with the highest ELBO (its `params`
      are the learned parameters) and a `kronvi.FitInfo` whose `iterate_elbo` holds the
      ELBO of the model placed before each round and at the end, `(max_iter + 1,)`, and `elbo` its running
      maximum.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> from kronvi.feature_learning import fit_features_eigen, rff_lengthscale_map
      >>> X = jnp.linspace(-3, 3, 100)[:, None]; y = jnp.sin(2 * X[:, 0])
      >>> fmap = rff_lengthscale_map(jax.random.key(0), 1, 10)
      >>> model, info = fit_features_eigen(jnp.zeros(1), X, y, feature_fn=fmap, prior_scale=1.0,
      ...     noise_variance=0.01, max_iter=2, param_iter=3, inner_sweeps=2)  # doctest: +SKIP
      >>> len(info.iterate_elbo), bool(info.final_elbo > info.elbo[0])  # doctest: +SKIP
      (3, True)
    """
    max_iter = check_int(max_iter, "max_iter", 0)
    fn = as_traced_callable(feature_fn)
    opts: dict[str, Any] = dict(levels=levels, width=width, noise_span=noise_span, chunk_size=chunk_size)
    model = eigen_feature_model(
        params, X, y, feature_fn=fn, prior_scale=prior_scale, noise_variance=noise_variance, **opts
    )
    trace = [model.elbo]
    best = model
    best_trace = [model.elbo]
    for _ in range(max_iter):
        rotated = jax.tree_util.Partial(_rotated, fn, model.basis.vectors)
        params = fit_features(
            params, X, y, model.prior_w, model.prior_noise, feature_fn=rotated, init=(model.q_w, model.q_noise),
            max_iter=1, param_iter=param_iter, inner_sweeps=inner_sweeps, starts=("previous",),
            log_prior=log_prior, chunk_size=chunk_size,
        ).params  # fmt: skip
        s2 = model.prior_noise.values[0, model.prior_noise.values.shape[-1] // 2]
        model = eigen_feature_model(
            params, X, y, feature_fn=fn, prior_scale=prior_scale, noise_variance=s2, **opts
        )
        trace.append(model.elbo)
        if model.elbo > best.elbo:
            best = model
        best_trace.append(best.elbo)
    info = fit_info(
        np.asarray(best_trace), np.asarray(max_iter), np.asarray(False), optimizer="optax-lbfgs",
        iterate_elbo=np.asarray(trace),
    )  # fmt: skip
    return EigenFeatureFit(best, info)
