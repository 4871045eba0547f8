"""Gaussian baselines on the same statistics: exact Bayesian linear regression, the exact mean-field
Gaussian and REPARAM.

Modules: `_blr` (the exact posterior, evidence and predictive), `_meanfield` (the family, its exact ELBO, closed-form coordinate-ascent fit and prediction)
and `_reparam` (minibatch reparameterization gradients with any optax optimizer).
`_elrg`: the low-rank-plus-diagonal Gaussian family (ELRG, Tomczak et al. 2020); `_kl`: the KL
divergence between two multivariate Gaussians.
"""

from ._blr import blr_evidence_noise as blr_evidence_noise
from ._blr import blr_log_evidence as blr_log_evidence
from ._blr import blr_posterior as blr_posterior
from ._blr import predict_blr as predict_blr
from ._blr import spectral_evidence_optimum as spectral_evidence_optimum
from ._blr import spectral_log_evidence as spectral_log_evidence
from ._elrg import ELRG as ELRG
from ._elrg import ELRGFit as ELRGFit
from ._elrg import elrg_elbo as elrg_elbo
from ._elrg import elrg_kl as elrg_kl
from ._elrg import elrg_minibatch_elbo as elrg_minibatch_elbo
from ._elrg import fit_elrg as fit_elrg
from ._elrg import predict_elrg as predict_elrg
from ._kl import gaussian_kl as gaussian_kl
from ._meanfield import GaussianFit as GaussianFit
from ._meanfield import GaussianMeanField as GaussianMeanField
from ._meanfield import fit_gaussian_mf as fit_gaussian_mf
from ._meanfield import gaussian_mf_elbo as gaussian_mf_elbo
from ._meanfield import predict_gaussian_mf as predict_gaussian_mf
from ._reparam import ReparamInfo as ReparamInfo
from ._reparam import ReparamState as ReparamState
from ._reparam import fit_gaussian_reparam as fit_gaussian_reparam
from ._reparam import gaussian_reparam_init as gaussian_reparam_init
from ._reparam import gaussian_reparam_step as gaussian_reparam_step
from ._reparam import reparam_noise_variance as reparam_noise_variance

__all__ = [
    "ELRG",
    "ELRGFit",
    "GaussianFit",
    "GaussianMeanField",
    "ReparamInfo",
    "ReparamState",
    "blr_evidence_noise",
    "blr_log_evidence",
    "blr_posterior",
    "elrg_elbo",
    "elrg_kl",
    "elrg_minibatch_elbo",
    "fit_elrg",
    "fit_gaussian_mf",
    "fit_gaussian_reparam",
    "gaussian_kl",
    "gaussian_mf_elbo",
    "gaussian_reparam_init",
    "gaussian_reparam_step",
    "predict_blr",
    "predict_elrg",
    "predict_gaussian_mf",
    "reparam_noise_variance",
    "spectral_evidence_optimum",
    "spectral_log_evidence",
]
