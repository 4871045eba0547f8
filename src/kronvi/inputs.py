r"""Inputs and features: loading data, folds, standardizing, random Fourier features and the GP
hyperparameters they are drawn from.

`load_demo` (the bundled yacht data), `load_csv` and `load_uci` read data; `fold_indices` splits rows into
folds; `fit_standardizer` and `standardize` (a `Standardizer`) scale inputs. `rff_init` draws a
`RandomFourierFeatures` map and `rff_features` applies it (`feature_mean`: the features' mean);
`nystrom_init` draws a `NystromFeatures` map on landmarks among the rows (or places them by k-means) and
`nystrom_features` applies it;
`fit_gp_hyperparameters` fits the lengthscales, signal and noise variance it is drawn from by the exact GP
marginal likelihood (`gp_log_marginal_likelihood`). Feature maps with trainable parameters are in
`kronvi.feature_learning`.
"""

from ._inputs.data import Standardizer as Standardizer
from ._inputs.data import fit_standardizer as fit_standardizer
from ._inputs.data import fold_indices as fold_indices
from ._inputs.data import load_csv as load_csv
from ._inputs.data import load_demo as load_demo
from ._inputs.data import load_uci as load_uci
from ._inputs.data import standardize as standardize
from ._inputs.features import NystromFeatures as NystromFeatures
from ._inputs.features import RandomFourierFeatures as RandomFourierFeatures
from ._inputs.features import feature_mean as feature_mean
from ._inputs.features import nystrom_features as nystrom_features
from ._inputs.features import nystrom_init as nystrom_init
from ._inputs.features import rff_features as rff_features
from ._inputs.features import rff_init as rff_init
from ._inputs.gp import GPFit as GPFit
from ._inputs.gp import GPFitInfo as GPFitInfo
from ._inputs.gp import GPHyperparameters as GPHyperparameters
from ._inputs.gp import fit_gp_hyperparameters as fit_gp_hyperparameters
from ._inputs.gp import gp_log_marginal_likelihood as gp_log_marginal_likelihood

__all__ = [
    "load_demo",
    "load_csv",
    "load_uci",
    "fold_indices",
    "Standardizer",
    "fit_standardizer",
    "standardize",
    "RandomFourierFeatures",
    "rff_init",
    "rff_features",
    "feature_mean",
    "NystromFeatures",
    "nystrom_init",
    "nystrom_features",
    "GPHyperparameters",
    "GPFit",
    "GPFitInfo",
    "fit_gp_hyperparameters",
    "gp_log_marginal_likelihood",
]
