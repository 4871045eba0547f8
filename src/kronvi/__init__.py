"""kronvi: exact variational inference with discrete, quantized priors (DIRECT) in JAX.

The names below follow the data flow: inputs and features -> sufficient statistics -> priors and the
exact objective -> fitting -> prediction. Families have their own namespaces as well:
`kronvi.mixtures`, `kronvi.gaussian` (baselines), `kronvi.logistic` (classification, Theorem 2),
`kronvi.bnn` (quadratic-activation networks), `kronvi.feature_learning` (features learned by the exact
ELBO), `kronvi.quantize` (4-bit samples and model files) and `kronvi.pipeline` (the configured
end-to-end fit used by `kronvi fit` and the experiments). Their public names are re-exported here.
`kronvi.sklearn` (scikit-learn estimators) is imported on demand only, so scikit-learn stays optional.
"""

from . import bnn as bnn
from . import cv as cv
from . import feature_learning as feature_learning
from . import gaussian as gaussian
from . import logistic as logistic
from . import mixtures as mixtures
from . import pipeline as pipeline
from . import quantize as quantize

# Output files and the compilation cache
from ._base.cache import enable_compilation_cache as enable_compilation_cache
from ._base.files import check_output_path as check_output_path
from ._base.files import write_atomic as write_atomic

# Fitting and model choice
from ._fit.cavi import cavi_sweep as cavi_sweep
from ._fit.cavi import coordinate_gains as coordinate_gains
from ._fit.cavi import diagonal_sweep as diagonal_sweep
from ._fit.features import FeatureFitInfo as FeatureFitInfo
from ._fit.features import feature_elbo as feature_elbo
from ._fit.features import feature_stats as feature_stats
from ._fit.features import fit_features as fit_features
from ._fit.regression import RegressionFit as RegressionFit
from ._fit.regression import fit_regression as fit_regression
from ._fit.reinforce import ReinforceInfo as ReinforceInfo
from ._fit.reinforce import regression_log_joint as regression_log_joint
from ._fit.reinforce import reinforce_gradient as reinforce_gradient
from ._fit.reinforce import reinforce_gradient_from_draws as reinforce_gradient_from_draws
from ._fit.reinforce import sample_mean_field as sample_mean_field
from ._fit.select import HeldoutScores as HeldoutScores
from ._fit.select import cv_scores as cv_scores
from ._fit.select import heldout_scores as heldout_scores
from ._fit.select import heldout_sq_error as heldout_sq_error
from ._fit.select import select_prior as select_prior
from ._fit.starts import gaussian_start as gaussian_start

# Inputs and features
from ._inputs.data import Standardizer as Standardizer
from ._inputs.data import fit_standardizer as fit_standardizer
from ._inputs.data import fold_indices as fold_indices
from ._inputs.data import load_csv as load_csv
from ._inputs.data import load_demo as load_demo
from ._inputs.data import load_uci as load_uci
from ._inputs.data import standardize as standardize
from ._inputs.features import RandomFourierFeatures as RandomFourierFeatures
from ._inputs.features import feature_mean as feature_mean
from ._inputs.features import rff_features as rff_features
from ._inputs.features import rff_init as rff_init
from ._inputs.gp import GPFit as GPFit
from ._inputs.gp import GPFitInfo as GPFitInfo
from ._inputs.gp import GPHyperparameters as GPHyperparameters
from ._inputs.gp import fit_gp_hyperparameters as fit_gp_hyperparameters
from ._inputs.gp import gp_log_marginal_likelihood as gp_log_marginal_likelihood
from ._inputs.learned import mlp_features as mlp_features
from ._inputs.learned import mlp_init as mlp_init
from ._inputs.learned import rff_lengthscale_features as rff_lengthscale_features
from ._inputs.learned import rff_lengthscale_map as rff_lengthscale_map
from ._model.compact import CompactBasis as CompactBasis
from ._model.compact import compact_features as compact_features
from ._model.compact import compact_posterior as compact_posterior
from ._model.compact import complement_split as complement_split
from ._model.density import DensityToleranceError as DensityToleranceError
from ._model.density import predictive_log_density as predictive_log_density

# Priors, variational families and the exact objective
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
from ._solvers.info import FitInfo as FitInfo
from ._solvers.lbfgs import minimize_lbfgs as minimize_lbfgs
from ._stats.eigen import Eigenbasis as Eigenbasis
from ._stats.eigen import eigenbasis as eigenbasis
from ._stats.eigen import eigenbasis_from_inputs as eigenbasis_from_inputs
from ._stats.eigen import rotate_features as rotate_features

# Sufficient statistics
from ._stats.regression import RegressionStats as RegressionStats
from ._stats.regression import kfold_stats as kfold_stats
from ._stats.regression import kfold_stats_from_inputs as kfold_stats_from_inputs
from ._stats.regression import merge_stats as merge_stats
from ._stats.regression import regression_stats as regression_stats
from ._stats.regression import regression_stats_from_inputs as regression_stats_from_inputs
from ._stats.regression import subtract_stats as subtract_stats
from ._stats.streaming import regression_stats_from_chunks as regression_stats_from_chunks
from .bnn import BNNFit as BNNFit
from .bnn import BNNStats as BNNStats
from .bnn import bnn_elbo as bnn_elbo
from .bnn import bnn_expected_rss as bnn_expected_rss
from .bnn import bnn_init as bnn_init
from .bnn import bnn_stats as bnn_stats
from .bnn import fit_bnn as fit_bnn
from .bnn import merge_bnn_stats as merge_bnn_stats
from .bnn import predict_bnn as predict_bnn
from .bnn import quadratic_net as quadratic_net
from .feature_learning import EigenFeatureFit as EigenFeatureFit
from .feature_learning import EigenFeatureModel as EigenFeatureModel
from .feature_learning import FeatureFit as FeatureFit
from .feature_learning import eigen_feature_model as eigen_feature_model
from .feature_learning import fit_features_eigen as fit_features_eigen
from .feature_learning import predict_features as predict_features
from .gaussian import ELRG as ELRG
from .gaussian import ELRGFit as ELRGFit
from .gaussian import GaussianFit as GaussianFit
from .gaussian import GaussianMeanField as GaussianMeanField
from .gaussian import ReparamInfo as ReparamInfo
from .gaussian import ReparamState as ReparamState

# Families: re-exported from their namespaces
from .gaussian import blr_evidence_noise as blr_evidence_noise
from .gaussian import blr_log_evidence as blr_log_evidence
from .gaussian import blr_posterior as blr_posterior
from .gaussian import elrg_elbo as elrg_elbo
from .gaussian import elrg_kl as elrg_kl
from .gaussian import elrg_minibatch_elbo as elrg_minibatch_elbo
from .gaussian import fit_elrg as fit_elrg
from .gaussian import fit_gaussian_mf as fit_gaussian_mf
from .gaussian import fit_gaussian_reparam as fit_gaussian_reparam
from .gaussian import gaussian_kl as gaussian_kl
from .gaussian import gaussian_mf_elbo as gaussian_mf_elbo
from .gaussian import gaussian_reparam_init as gaussian_reparam_init
from .gaussian import gaussian_reparam_step as gaussian_reparam_step
from .gaussian import predict_blr as predict_blr
from .gaussian import predict_elrg as predict_elrg
from .gaussian import predict_gaussian_mf as predict_gaussian_mf
from .gaussian import reparam_noise_variance as reparam_noise_variance
from .gaussian import spectral_evidence_optimum as spectral_evidence_optimum
from .gaussian import spectral_log_evidence as spectral_log_evidence
from .logistic import ClassifierConfig as ClassifierConfig
from .logistic import ClassifierFit as ClassifierFit
from .logistic import ClassifierInfo as ClassifierInfo
from .logistic import FittedClassifier as FittedClassifier
from .logistic import LaplaceInfo as LaplaceInfo
from .logistic import LogisticFit as LogisticFit
from .logistic import fit_classifier as fit_classifier
from .logistic import fit_logistic as fit_logistic
from .logistic import laplace_grid_prior as laplace_grid_prior
from .logistic import logistic_elbo_bound as logistic_elbo_bound
from .logistic import logistic_loglik_bound as logistic_loglik_bound
from .logistic import logistic_loglik_estimate as logistic_loglik_estimate
from .logistic import logistic_loglik_minibatch as logistic_loglik_minibatch
from .logistic import predict_logistic as predict_logistic
from .mixtures import Mixture as Mixture
from .mixtures import MixtureFit as MixtureFit
from .mixtures import MixturePrior as MixturePrior
from .mixtures import MixtureSGDInfo as MixtureSGDInfo
from .mixtures import MixtureSGDState as MixtureSGDState
from .mixtures import fit_mixture_bound as fit_mixture_bound
from .mixtures import fit_mixture_sgd as fit_mixture_sgd
from .mixtures import mixture_elbo_bound as mixture_elbo_bound
from .mixtures import mixture_elbo_estimate as mixture_elbo_estimate
from .mixtures import mixture_elbo_unbiased as mixture_elbo_unbiased
from .mixtures import mixture_expected_loglik as mixture_expected_loglik
from .mixtures import mixture_from_mean_field as mixture_from_mean_field
from .mixtures import mixture_prior_bound as mixture_prior_bound
from .mixtures import mixture_sgd_init as mixture_sgd_init
from .mixtures import mixture_sgd_step as mixture_sgd_step
from .mixtures import predict_mixture as predict_mixture
from .mixtures import sample_mixture as sample_mixture

# The front door: fit, predict, save and load (kronvi.save_model, kronvi.load_model)
from .pipeline import Compact as Compact
from .pipeline import DirectConfig as DirectConfig
from .pipeline import DirectFit as DirectFit
from .pipeline import Eigen as Eigen
from .pipeline import Features as Features
from .pipeline import FittedDirect as FittedDirect
from .pipeline import GPOptions as GPOptions
from .pipeline import Prediction as Prediction
from .pipeline import RecipeOptionError as RecipeOptionError
from .pipeline import fit_direct as fit_direct
from .pipeline import log_density as log_density
from .pipeline import predict as predict
from .quantize import DirectModel as DirectModel
from .quantize import IntegerSamples as IntegerSamples
from .quantize import integer_error_bound as integer_error_bound
from .quantize import integer_samples as integer_samples
from .quantize import load_model as load_model
from .quantize import pack_codes as pack_codes
from .quantize import predict_from_codes as predict_from_codes
from .quantize import predict_integer as predict_integer
from .quantize import sample_codes as sample_codes
from .quantize import save_model as save_model
from .quantize import unpack_codes as unpack_codes

__version__ = "0.1.0"

__all__ = [
    "DirectConfig",
    "Eigen",
    "Compact",
    "Features",
    "GPOptions",
    "RecipeOptionError",
    "DirectFit",
    "FittedDirect",
    "Prediction",
    "fit_direct",
    "log_density",
    "predict",
    "BNNFit",
    "BNNStats",
    "ClassifierConfig",
    "ClassifierFit",
    "ClassifierInfo",
    "CompactBasis",
    "DensityToleranceError",
    "DirectModel",
    "DiscretePrior",
    "ELRG",
    "ELRGFit",
    "EigenFeatureFit",
    "EigenFeatureModel",
    "Eigenbasis",
    "FeatureFit",
    "FeatureFitInfo",
    "FitInfo",
    "FittedClassifier",
    "GPFit",
    "GPFitInfo",
    "GPHyperparameters",
    "GaussianFit",
    "GaussianMeanField",
    "HeldoutScores",
    "IntegerSamples",
    "LaplaceInfo",
    "LogisticFit",
    "MeanField",
    "Mixture",
    "MixtureFit",
    "MixturePrior",
    "MixtureSGDInfo",
    "MixtureSGDState",
    "RandomFourierFeatures",
    "RegressionFit",
    "RegressionStats",
    "ReinforceInfo",
    "ReparamInfo",
    "ReparamState",
    "Standardizer",
    "blr_evidence_noise",
    "blr_log_evidence",
    "blr_posterior",
    "bnn",
    "bnn_elbo",
    "bnn_expected_rss",
    "bnn_init",
    "bnn_stats",
    "cavi_sweep",
    "check_output_path",
    "compact_features",
    "compact_posterior",
    "complement_split",
    "coordinate_gains",
    "cv_scores",
    "diagonal_sweep",
    "eigen_feature_model",
    "eigenbasis",
    "eigenbasis_from_inputs",
    "elrg_elbo",
    "elrg_kl",
    "elrg_minibatch_elbo",
    "enable_compilation_cache",
    "entropy",
    "expected_sparsity",
    "feature_elbo",
    "feature_learning",
    "feature_mean",
    "feature_stats",
    "fit_bnn",
    "fit_classifier",
    "fit_elrg",
    "fit_features",
    "fit_features_eigen",
    "fit_gaussian_mf",
    "fit_gaussian_reparam",
    "fit_gp_hyperparameters",
    "fit_logistic",
    "fit_mixture_bound",
    "fit_mixture_sgd",
    "fit_regression",
    "fit_standardizer",
    "fold_indices",
    "gaussian",
    "gaussian_kl",
    "gaussian_mf_elbo",
    "gaussian_prior",
    "gaussian_reparam_init",
    "gaussian_reparam_step",
    "gaussian_start",
    "gp_log_marginal_likelihood",
    "grid_moments",
    "heldout_scores",
    "heldout_sq_error",
    "integer_error_bound",
    "integer_samples",
    "kfold_stats",
    "kfold_stats_from_inputs",
    "laplace_grid_prior",
    "load_csv",
    "load_demo",
    "load_model",
    "load_uci",
    "logistic",
    "logistic_elbo_bound",
    "logistic_loglik_bound",
    "logistic_loglik_estimate",
    "logistic_loglik_minibatch",
    "merge_bnn_stats",
    "merge_stats",
    "minimize_lbfgs",
    "mixture_elbo_bound",
    "mixture_elbo_estimate",
    "mixture_elbo_unbiased",
    "mixture_expected_loglik",
    "mixture_from_mean_field",
    "mixture_prior_bound",
    "mixture_sgd_init",
    "mixture_sgd_step",
    "mixtures",
    "mlp_features",
    "mlp_init",
    "noise_moments",
    "noise_prior",
    "pack_codes",
    "pipeline",
    "cv",
    "posterior_grid_prior",
    "predict_blr",
    "predict_bnn",
    "predict_elrg",
    "predict_features",
    "predict_from_codes",
    "predict_gaussian_mf",
    "predict_integer",
    "predict_logistic",
    "predict_mixture",
    "predict_regression",
    "predictive_log_density",
    "quadratic_net",
    "quantize",
    "regression_elbo",
    "regression_log_joint",
    "regression_stats",
    "regression_stats_from_chunks",
    "regression_stats_from_inputs",
    "reinforce_gradient",
    "reinforce_gradient_from_draws",
    "reparam_noise_variance",
    "rff_features",
    "rff_init",
    "rff_lengthscale_features",
    "rff_lengthscale_map",
    "rotate_features",
    "sample_codes",
    "sample_mean_field",
    "sample_mixture",
    "save_model",
    "select_prior",
    "spectral_evidence_optimum",
    "spectral_log_evidence",
    "standardize",
    "subtract_stats",
    "unpack_codes",
    "write_atomic",
]
