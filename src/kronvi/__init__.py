r"""kronvi: exact variational inference with discrete, quantized priors (DIRECT) in JAX.

The top level is the front door: fit a model, predict with it, configure the recipe, save and load it.

- `fit_direct(key, X, y, config)` fits the default recipe on raw inputs and returns a `DirectFit` whose
  `model` (`FittedDirect`) predicts (`predict`, a `Prediction`) and scores (`log_density`) new rows; its
  `info` reads the final fit's `FitInfo` fields, as every fit's does.
- `DirectConfig(recipe=...)` chooses the recipe, an object that carries its own options: `Eigen()` (the
  default), `Compact()` or `Features()`, and `GPOptions()` for the GP step; an option of one recipe given to
  another is a `RecipeOptionError`.
- `fit_classifier(key, X, y, config)` (a `ClassifierConfig`) fits a binary classifier: a `ClassifierFit`
  whose `model` (`FittedClassifier`) gives `predict_proba`.
- `save_model` and `load_model` write and read one model file (a `FittedDirect`, a `FittedClassifier` or a
  `DirectModel`); `load_demo`, `load_csv` and `load_uci` read data; `enable_compilation_cache` keeps
  compiled programs across processes.

The building blocks are in namespaces, in the order data flows through them:

- `kronvi.inputs`: loading, folds, standardizing, random Fourier features, GP hyperparameters;
- `kronvi.stats`: the sufficient statistics, K folds and the eigenbasis;
- `kronvi.model`: discrete priors, the mean-field family, the exact ELBO, predictive moments and density;
- `kronvi.fitting`: coordinate ascent, L-BFGS, starting points, prior choice, REINFORCE gradients;
- `kronvi.gaussian` (Gaussian baselines), `kronvi.mixtures` (mixture posteriors and priors),
  `kronvi.quantize` (4-bit samples, integer prediction, model files), `kronvi.logistic` (classification,
  Theorem 2), `kronvi.bnn` (quadratic-activation networks), `kronvi.feature_learning` (features learned by
  the exact ELBO);
- `kronvi.pipeline` (the recipe and the stages it composes), `kronvi.cv` (the cross-validation harness of
  `kronvi fit` and the experiments), `kronvi.files` (output files, the compilation cache).

`kronvi.sklearn` (scikit-learn estimators) is imported on demand only, so scikit-learn stays optional. The
building blocks were also top-level names until this release; read from `kronvi` they still work, with a
`DeprecationWarning` that names their namespace, for one release.
"""

from typing import Any as _Any

from . import bnn as bnn
from . import cv as cv
from . import feature_learning as feature_learning
from . import files as files
from . import fitting as fitting
from . import gaussian as gaussian
from . import inputs as inputs
from . import logistic as logistic
from . import mixtures as mixtures
from . import model as model
from . import pipeline as pipeline
from . import quantize as quantize
from . import stats as stats
from ._base.deprecation import warn_deprecated as _warn_deprecated
from .files import enable_compilation_cache as enable_compilation_cache
from .fitting import FitInfo as FitInfo
from .inputs import load_csv as load_csv
from .inputs import load_demo as load_demo
from .inputs import load_uci as load_uci
from .logistic import ClassifierConfig as ClassifierConfig
from .logistic import ClassifierFit as ClassifierFit
from .logistic import FittedClassifier as FittedClassifier
from .logistic import fit_classifier as fit_classifier
from .model import DensityToleranceError as DensityToleranceError
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
from .quantize import load_model as load_model
from .quantize import save_model as save_model

__version__ = "0.1.0"

__all__ = [
    # fit and predict
    "fit_direct",
    "DirectFit",
    "FittedDirect",
    "predict",
    "Prediction",
    "log_density",
    "DensityToleranceError",
    "FitInfo",
    # configure the recipe
    "DirectConfig",
    "Eigen",
    "Compact",
    "Features",
    "GPOptions",
    "RecipeOptionError",
    # classify
    "fit_classifier",
    "ClassifierConfig",
    "ClassifierFit",
    "FittedClassifier",
    # save, load, data
    "save_model",
    "load_model",
    "DirectModel",
    "load_demo",
    "load_csv",
    "load_uci",
    "enable_compilation_cache",
    # the building blocks, in the order data flows
    "inputs",
    "stats",
    "model",
    "fitting",
    "gaussian",
    "mixtures",
    "quantize",
    "logistic",
    "bnn",
    "feature_learning",
    "pipeline",
    "cv",
    "files",
]

# The names that were top-level until this release, by the namespace they live in now; read from `kronvi`
# they still resolve (module `__getattr__`), with a `DeprecationWarning`, and `dir(kronvi)` omits them.
_MOVED = {
    "inputs": (
        "GPFit", "GPFitInfo", "GPHyperparameters", "RandomFourierFeatures", "Standardizer", "feature_mean",
        "fit_gp_hyperparameters", "fit_standardizer", "fold_indices", "gp_log_marginal_likelihood",
        "rff_features", "rff_init", "standardize",
    ),
    "stats": (
        "Eigenbasis", "RegressionStats", "eigenbasis", "eigenbasis_from_inputs", "kfold_stats",
        "kfold_stats_from_inputs", "merge_stats", "regression_stats", "regression_stats_from_chunks",
        "regression_stats_from_inputs", "rotate_features", "subtract_stats",
    ),
    "model": (
        "CompactBasis", "DiscretePrior", "MeanField", "compact_features", "compact_posterior",
        "complement_split", "entropy", "expected_sparsity", "gaussian_prior", "grid_moments", "noise_moments",
        "noise_prior", "posterior_grid_prior", "predict_regression", "predictive_log_density",
        "regression_elbo",
    ),
    "fitting": (
        "HeldoutScores", "RegressionFit", "ReinforceInfo", "cavi_sweep", "coordinate_gains", "cv_scores",
        "diagonal_sweep", "fit_regression", "gaussian_start", "heldout_scores", "heldout_sq_error",
        "minimize_lbfgs", "regression_log_joint", "reinforce_gradient", "reinforce_gradient_from_draws",
        "sample_mean_field", "select_prior",
    ),
    "files": (
        "check_output_path", "write_atomic",
    ),
    "gaussian": (
        "ELRG", "ELRGFit", "GaussianFit", "GaussianMeanField", "ReparamInfo", "ReparamState",
        "blr_evidence_noise", "blr_log_evidence", "blr_posterior", "elrg_elbo", "elrg_kl",
        "elrg_minibatch_elbo", "fit_elrg", "fit_gaussian_mf", "fit_gaussian_reparam", "gaussian_kl",
        "gaussian_mf_elbo", "gaussian_reparam_init", "gaussian_reparam_step", "predict_blr", "predict_elrg",
        "predict_gaussian_mf", "reparam_noise_variance", "spectral_evidence_optimum", "spectral_log_evidence",
    ),
    "mixtures": (
        "Mixture", "MixtureFit", "MixturePrior", "MixtureSGDInfo", "MixtureSGDState", "fit_mixture_bound",
        "fit_mixture_sgd", "mixture_elbo_bound", "mixture_elbo_estimate", "mixture_elbo_unbiased",
        "mixture_expected_loglik", "mixture_from_mean_field", "mixture_prior_bound", "mixture_sgd_init",
        "mixture_sgd_step", "predict_mixture", "sample_mixture",
    ),
    "quantize": (
        "IntegerSamples", "integer_error_bound", "integer_samples", "pack_codes", "predict_from_codes",
        "predict_integer", "sample_codes", "unpack_codes",
    ),
    "logistic": (
        "ClassifierInfo", "LaplaceInfo", "LogisticFit", "fit_logistic", "laplace_grid_prior",
        "logistic_elbo_bound", "logistic_loglik_bound", "logistic_loglik_estimate",
        "logistic_loglik_minibatch", "predict_logistic",
    ),
    "bnn": (
        "BNNFit", "BNNStats", "bnn_elbo", "bnn_expected_rss", "bnn_init", "bnn_stats", "fit_bnn",
        "merge_bnn_stats", "predict_bnn", "quadratic_net",
    ),
    "feature_learning": (
        "EigenFeatureFit", "EigenFeatureModel", "FeatureFit", "FeatureFitInfo", "eigen_feature_model",
        "feature_elbo", "feature_stats", "fit_features", "fit_features_eigen", "mlp_features", "mlp_init",
        "predict_features", "rff_lengthscale_features", "rff_lengthscale_map",
    ),
}  # fmt: skip
_MOVED_TO = {name: namespace for namespace, names in _MOVED.items() for name in names}


def __getattr__(name: str) -> _Any:
    """A building block read from the top level: the same object from its namespace, with a
    `DeprecationWarning` naming it."""
    namespace = _MOVED_TO.get(name)
    if namespace is None:
        raise AttributeError(f"module 'kronvi' has no attribute {name!r}")
    _warn_deprecated(f"kronvi.{name} moved to kronvi.{namespace}.{name}")
    return getattr(globals()[namespace], name)
