"""Mixture posteriors (r mean-field components) and mixture priors: Theorems 3 and 4 of the DIRECT paper."""

from ._core import ESTIMATORS as ESTIMATORS
from ._core import Mixture as Mixture
from ._core import MixturePrior as MixturePrior
from ._core import MixtureSGDInfo as MixtureSGDInfo
from ._core import MixtureSGDState as MixtureSGDState
from ._core import fit_mixture_bound as fit_mixture_bound
from ._core import fit_mixture_sgd as fit_mixture_sgd
from ._core import mixture_elbo_bound as mixture_elbo_bound
from ._core import mixture_elbo_estimate as mixture_elbo_estimate
from ._core import mixture_elbo_unbiased as mixture_elbo_unbiased
from ._core import mixture_expected_loglik as mixture_expected_loglik
from ._core import mixture_from_mean_field as mixture_from_mean_field
from ._core import mixture_prior_bound as mixture_prior_bound
from ._core import mixture_sgd_init as mixture_sgd_init
from ._core import mixture_sgd_step as mixture_sgd_step
from ._core import predict_mixture as predict_mixture
from ._core import sample_mixture as sample_mixture
