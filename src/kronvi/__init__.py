"""kronvi: exact variational inference with discrete, quantized priors (DIRECT) in JAX."""

import os as _os

# jaxlib's CPU linear algebra (Cholesky, triangular solves) calls scipy's OpenBLAS. OpenBLAS's own
# thread pool running inside XLA's thread pool oversubscribes a small machine and was seen to deadlock
# (2 cores, vmapped Cholesky) and to slow a 277x277 Cholesky 200x. A user's explicit setting wins.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ._data import Standardizer as Standardizer
from ._data import fit_standardizer as fit_standardizer
from ._data import fold_indices as fold_indices
from ._data import load_csv as load_csv
from ._data import load_demo as load_demo
from ._data import load_uci as load_uci
from ._data import standardize as standardize
from ._families import MeanField as MeanField
from ._families import entropy as entropy
from ._features import RandomFourierFeatures as RandomFourierFeatures
from ._features import rff_features as rff_features
from ._features import rff_init as rff_init
from ._fit import FitInfo as FitInfo
from ._fit import cavi_sweep as cavi_sweep
from ._fit import fit_regression as fit_regression
from ._gaussian_vi import GaussianMeanField as GaussianMeanField
from ._gaussian_vi import ReparamInfo as ReparamInfo
from ._gaussian_vi import ReparamState as ReparamState
from ._gaussian_vi import fit_gaussian_mf as fit_gaussian_mf
from ._gaussian_vi import fit_gaussian_reparam as fit_gaussian_reparam
from ._gaussian_vi import gaussian_mf_elbo as gaussian_mf_elbo
from ._gaussian_vi import gaussian_reparam_init as gaussian_reparam_init
from ._gaussian_vi import gaussian_reparam_step as gaussian_reparam_step
from ._gaussian_vi import predict_gaussian_mf as predict_gaussian_mf
from ._gaussian_vi import reparam_noise_variance as reparam_noise_variance
from ._gp import GPFitInfo as GPFitInfo
from ._gp import GPHyperparameters as GPHyperparameters
from ._gp import fit_gp_hyperparameters as fit_gp_hyperparameters
from ._gp import gp_log_marginal_likelihood as gp_log_marginal_likelihood
from ._grids import DiscretePrior as DiscretePrior
from ._grids import gaussian_prior as gaussian_prior
from ._grids import noise_prior as noise_prior
from ._io import DirectModel as DirectModel
from ._io import load_model as load_model
from ._io import save_model as save_model
from ._mixture import Mixture as Mixture
from ._mixture import MixturePrior as MixturePrior
from ._mixture import MixtureSGDInfo as MixtureSGDInfo
from ._mixture import MixtureSGDState as MixtureSGDState
from ._mixture import fit_mixture_bound as fit_mixture_bound
from ._mixture import fit_mixture_sgd as fit_mixture_sgd
from ._mixture import mixture_elbo_bound as mixture_elbo_bound
from ._mixture import mixture_elbo_estimate as mixture_elbo_estimate
from ._mixture import mixture_elbo_unbiased as mixture_elbo_unbiased
from ._mixture import mixture_expected_loglik as mixture_expected_loglik
from ._mixture import mixture_from_mean_field as mixture_from_mean_field
from ._mixture import mixture_prior_bound as mixture_prior_bound
from ._mixture import mixture_sgd_init as mixture_sgd_init
from ._mixture import mixture_sgd_step as mixture_sgd_step
from ._mixture import predict_mixture as predict_mixture
from ._mixture import sample_mixture as sample_mixture
from ._quantize import IntegerSamples as IntegerSamples
from ._quantize import integer_error_bound as integer_error_bound
from ._quantize import integer_samples as integer_samples
from ._quantize import pack_codes as pack_codes
from ._quantize import predict_from_codes as predict_from_codes
from ._quantize import predict_integer as predict_integer
from ._quantize import sample_codes as sample_codes
from ._quantize import unpack_codes as unpack_codes
from ._regression import expected_sparsity as expected_sparsity
from ._regression import predict_regression as predict_regression
from ._regression import predictive_log_density as predictive_log_density
from ._regression import regression_elbo as regression_elbo
from ._select import HeldoutScores as HeldoutScores
from ._select import cv_scores as cv_scores
from ._select import heldout_scores as heldout_scores
from ._select import heldout_sq_error as heldout_sq_error
from ._select import select_prior as select_prior
from ._starts import gaussian_start as gaussian_start
from ._stats import RegressionStats as RegressionStats
from ._stats import kfold_stats as kfold_stats
from ._stats import kfold_stats_from_inputs as kfold_stats_from_inputs
from ._stats import merge_stats as merge_stats
from ._stats import regression_stats as regression_stats
from ._stats import regression_stats_from_inputs as regression_stats_from_inputs
from ._stats import subtract_stats as subtract_stats

__version__ = "0.1.0"
