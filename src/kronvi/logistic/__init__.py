r"""DIRECT logistic regression (Evans & Nair 2018, section 4, Theorem 2 and appendix B).

Labels $y \in \{0, 1\}$, $P(y = 1 \mid w) = \sigma(\Phi w)$, a factorized discrete prior on
the weights' grids and a mean-field posterior. The expected log-likelihood has no closed form; it is
bounded below from per-row moment generating functions of $\Phi_i w$, which are Kronecker products
and cost $O(bm)$ each:

* `logistic_loglik_bound` (`bound="theorem2"`: the paper's; `"jensen"`: the optimal per-row
  centre; `"tilted"`, the default: the tightest, a minimum over tilts), `logistic_elbo_bound`
  (with the exact prior and entropy terms), `logistic_loglik_minibatch` (unbiased minibatch
  estimate) and `logistic_loglik_estimate` (Monte Carlo estimate of the exact value, to measure gaps);
* `fit_logistic`: L-BFGS on the full bound, closed-form coordinate ascent (minorize-maximize), or
  optax SGD on minibatches;
* `predict_logistic`: exact $E_q[\sigma(\Phi^* w)]$ from the characteristic function;
* `laplace_grid_prior`: the accurate default grids, the prior
  $N(0, \sigma_w^2)$ on levels placed on the Laplace approximation to the posterior (MAP $\pm$ 4 sds);
* `fit_classifier` and `predict_proba`: the whole recipe from raw inputs and 0/1 labels (standardize,
  random Fourier features, the prior scale by the Laplace evidence, those grids, coordinate ascent) to
  exact probabilities: the recipe behind `kronvi.sklearn.DirectClassifier`.

Modules: `_bound`, `_cavi`, `_fit`, `_laplace`, `_predict`, `_recipe`. Why this recipe: `docs/decisions/classifier.md`.

References:
  Evans & Nair (2018), "Discretely Relaxing Continuous Variables for tractable Variational Inference",
  NeurIPS; section 4 and appendix B.
"""

from ._bound import BOUNDS as BOUNDS
from ._bound import logistic_elbo_bound as logistic_elbo_bound
from ._bound import logistic_loglik_bound as logistic_loglik_bound
from ._bound import logistic_loglik_estimate as logistic_loglik_estimate
from ._bound import logistic_loglik_minibatch as logistic_loglik_minibatch
from ._fit import LogisticFit as LogisticFit
from ._fit import fit_logistic as fit_logistic
from ._laplace import LaplaceInfo as LaplaceInfo
from ._laplace import laplace_grid_prior as laplace_grid_prior
from ._predict import predict_logistic as predict_logistic
from ._recipe import ClassifierConfig as ClassifierConfig
from ._recipe import ClassifierFit as ClassifierFit
from ._recipe import ClassifierInfo as ClassifierInfo
from ._recipe import FittedClassifier as FittedClassifier
from ._recipe import fit_classifier as fit_classifier
from ._recipe import predict_log_proba as predict_log_proba
from ._recipe import predict_proba as predict_proba

__all__ = [
    "BOUNDS",
    "ClassifierConfig",
    "ClassifierFit",
    "ClassifierInfo",
    "FittedClassifier",
    "LaplaceInfo",
    "LogisticFit",
    "fit_classifier",
    "fit_logistic",
    "laplace_grid_prior",
    "logistic_elbo_bound",
    "logistic_loglik_bound",
    "logistic_loglik_estimate",
    "logistic_loglik_minibatch",
    "predict_log_proba",
    "predict_logistic",
    "predict_proba",
]
