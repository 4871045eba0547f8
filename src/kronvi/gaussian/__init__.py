"""Gaussian baselines on the same statistics: the exact mean-field Gaussian and REPARAM."""

from ._meanfield import GaussianMeanField as GaussianMeanField
from ._meanfield import ReparamInfo as ReparamInfo
from ._meanfield import ReparamState as ReparamState
from ._meanfield import fit_gaussian_mf as fit_gaussian_mf
from ._meanfield import fit_gaussian_reparam as fit_gaussian_reparam
from ._meanfield import gaussian_mf_elbo as gaussian_mf_elbo
from ._meanfield import gaussian_reparam_init as gaussian_reparam_init
from ._meanfield import gaussian_reparam_step as gaussian_reparam_step
from ._meanfield import predict_gaussian_mf as predict_gaussian_mf
from ._meanfield import reparam_noise_variance as reparam_noise_variance
