"""kronvi: exact variational inference with discrete, quantized priors (DIRECT) in JAX."""

from ._families import MeanField as MeanField
from ._families import entropy as entropy
from ._fit import FitInfo as FitInfo
from ._fit import cavi_sweep as cavi_sweep
from ._fit import fit_regression as fit_regression
from ._grids import DiscretePrior as DiscretePrior
from ._grids import gaussian_prior as gaussian_prior
from ._grids import noise_prior as noise_prior
from ._regression import expected_sparsity as expected_sparsity
from ._regression import predict_regression as predict_regression
from ._regression import predictive_log_density as predictive_log_density
from ._regression import regression_elbo as regression_elbo
from ._stats import RegressionStats as RegressionStats
from ._stats import kfold_stats as kfold_stats
from ._stats import merge_stats as merge_stats
from ._stats import regression_stats as regression_stats
from ._stats import regression_stats_from_inputs as regression_stats_from_inputs
from ._stats import subtract_stats as subtract_stats

__version__ = "0.1.0"
