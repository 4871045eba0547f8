r"""Fitting a discrete posterior to the exact objective, and choosing its prior.

`fit_regression` maximizes the exact ELBO of `kronvi.model` by coordinate ascent (`cavi_sweep`,
`diagonal_sweep`, `coordinate_gains`) or L-BFGS (`minimize_lbfgs`, the one driver behind every exact
objective), from a prior or a Gaussian start (`gaussian_start`); every fit reports a `FitInfo`.
`select_prior` and `cv_scores` choose a prior by K-fold cross-validation from statistics
(`heldout_scores`, `heldout_sq_error`). The score-function (REINFORCE) gradients that DIRECT's exact
gradients are compared with are `reinforce_gradient`, `reinforce_gradient_from_draws`,
`sample_mean_field` and `regression_log_joint`.
"""

from ._fit.cavi import cavi_sweep as cavi_sweep
from ._fit.cavi import coordinate_gains as coordinate_gains
from ._fit.cavi import diagonal_sweep as diagonal_sweep
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
from ._solvers.info import FitInfo as FitInfo
from ._solvers.lbfgs import minimize_lbfgs as minimize_lbfgs

__all__ = [
    "RegressionFit",
    "fit_regression",
    "cavi_sweep",
    "diagonal_sweep",
    "coordinate_gains",
    "gaussian_start",
    "minimize_lbfgs",
    "FitInfo",
    "select_prior",
    "cv_scores",
    "heldout_scores",
    "heldout_sq_error",
    "HeldoutScores",
    "reinforce_gradient",
    "reinforce_gradient_from_draws",
    "sample_mean_field",
    "regression_log_joint",
    "ReinforceInfo",
]
