r"""Discrete priors, the mean-field family and the exact objective of DIRECT regression.

A `DiscretePrior` puts each weight (or the noise variance) on a grid of values: `gaussian_prior`,
`noise_prior`, and `posterior_grid_prior` (a Gaussian prior on grids placed around a posterior). A `MeanField`
holds one categorical factor per weight (`entropy`, `grid_moments`). `regression_elbo` is the exact ELBO
from the sufficient statistics (`kronvi.stats`); `noise_moments`, `expected_sparsity`,
`predict_regression` (exact predictive moments) and `predictive_log_density` (the exact predictive
density, `DensityToleranceError` when it cannot meet its tolerance) read a fitted posterior. `CompactBasis`,
`compact_posterior`, `compact_features` and `complement_split` are the compact recipe's form of an
eigenbasis posterior.
"""

from ._model.compact import CompactBasis as CompactBasis
from ._model.compact import compact_features as compact_features
from ._model.compact import compact_posterior as compact_posterior
from ._model.compact import complement_split as complement_split
from ._model.density import DensityToleranceError as DensityToleranceError
from ._model.density import predictive_log_density as predictive_log_density
from ._model.families import MeanField as MeanField
from ._model.families import entropy as entropy
from ._model.families import grid_moments as grid_moments
from ._model.grids import DiscretePrior as DiscretePrior
from ._model.grids import gaussian_prior as gaussian_prior
from ._model.grids import noise_prior as noise_prior
from ._model.posterior_grid import posterior_grid_prior as posterior_grid_prior
from ._model.regression import expected_sparsity as expected_sparsity
from ._model.regression import noise_moments as noise_moments
from ._model.regression import predict_regression as predict_regression
from ._model.regression import regression_elbo as regression_elbo

__all__ = [
    "DiscretePrior",
    "gaussian_prior",
    "noise_prior",
    "posterior_grid_prior",
    "MeanField",
    "entropy",
    "grid_moments",
    "regression_elbo",
    "noise_moments",
    "expected_sparsity",
    "predict_regression",
    "predictive_log_density",
    "DensityToleranceError",
    "CompactBasis",
    "compact_features",
    "compact_posterior",
    "complement_split",
]
