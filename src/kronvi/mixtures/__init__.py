r"""Mixture posteriors and mixture priors beyond mean field (Evans & Nair 2018, section 4).

A `Mixture` is $q(w) = \sum_{k=1}^r \alpha_k \bigotimes_{j=1}^b q^{(k)}_j$. Everything linear in
`q` (expected log-likelihood, expected log of a factorized prior, predictive moments) is exact; the entropy
is not, and two ways around it are implemented:

* `mixture_elbo_bound`, the deterministic lower bound of Theorem 3, fitted with L-BFGS by
  `fit_mixture_bound`;
* `mixture_elbo_estimate`, an unbiased stochastic ELBO and gradient (score function, eq. 13, by
  default Rao-Blackwellized per factor), fitted with any optax optimizer by `mixture_sgd_init` /
  `mixture_sgd_step` / `fit_mixture_sgd`.

A `MixturePrior` has no exact expected log-density; `mixture_prior_bound` is the lower bound
of Theorem 4. The noise variance keeps a mean-field factor, whose exact coordinate-ascent update stays
closed form for mixtures.

Modules: `_family` (pytrees, validation, starts), `_sampling`, `_bounds` (exact terms, Theorems 3
and 4), `_local` (local-expectation score tables), `_estimators`, `_predict`, `_fit_bound`,
`_sgd`.

References:
  Evans & Nair (2018), "Discretely Relaxing Continuous Variables for tractable Variational Inference",
  NeurIPS; section 4, Theorems 3 and 4, eq. 13, appendix C.
"""

from ._bounds import mixture_elbo_bound as mixture_elbo_bound
from ._bounds import mixture_expected_loglik as mixture_expected_loglik
from ._bounds import mixture_prior_bound as mixture_prior_bound
from ._estimators import ESTIMATORS as ESTIMATORS
from ._estimators import mixture_elbo_estimate as mixture_elbo_estimate
from ._estimators import mixture_elbo_unbiased as mixture_elbo_unbiased
from ._family import Mixture as Mixture
from ._family import MixtureFit as MixtureFit
from ._family import MixturePrior as MixturePrior
from ._family import mixture_from_mean_field as mixture_from_mean_field
from ._fit_bound import fit_mixture_bound as fit_mixture_bound
from ._predict import predict_mixture as predict_mixture
from ._sampling import sample_mixture as sample_mixture
from ._sgd import MixtureSGDInfo as MixtureSGDInfo
from ._sgd import MixtureSGDState as MixtureSGDState
from ._sgd import fit_mixture_sgd as fit_mixture_sgd
from ._sgd import mixture_sgd_init as mixture_sgd_init
from ._sgd import mixture_sgd_step as mixture_sgd_step

__all__ = [
    "ESTIMATORS",
    "Mixture",
    "MixtureFit",
    "MixturePrior",
    "MixtureSGDInfo",
    "MixtureSGDState",
    "fit_mixture_bound",
    "fit_mixture_sgd",
    "mixture_elbo_bound",
    "mixture_elbo_estimate",
    "mixture_elbo_unbiased",
    "mixture_expected_loglik",
    "mixture_from_mean_field",
    "mixture_prior_bound",
    "mixture_sgd_init",
    "mixture_sgd_step",
    "predict_mixture",
    "sample_mixture",
]
