r"""DIRECT Bayesian neural networks with quadratic activations (Evans & Nair 2018, section 3.2, appendix D).

A network `quadratic_net` with `layer_sizes = (d, h_1, ..., h_L, 1)` squares every hidden
pre-activation and has a linear output. With a discrete prior on every weight and on the noise variance,
the mean-field ELBO is exact and needs the data only through moment statistics computed once
(`bnn_stats`): `bnn_elbo` evaluates it, `fit_bnn` maximizes it (L-BFGS on exact
gradients, or exact coordinate ascent), `predict_bnn` gives the exact predictive mean and variance.

Modules: `_net` (the network and its weight layout), `_stats` (statistics), `_elbo` (the exact ELBO:
a closed form for one hidden layer, a monomial expansion for any depth), `_fit` (fit and prediction).

References:
  Evans & Nair (2018), "Discretely Relaxing Continuous Variables for tractable Variational Inference",
  NeurIPS; section 3.2 and appendix D (eqs. 39-50).
"""

from ._elbo import bnn_elbo as bnn_elbo
from ._elbo import bnn_expected_rss as bnn_expected_rss
from ._fit import BNN_METHODS as BNN_METHODS
from ._fit import BNNFit as BNNFit
from ._fit import bnn_init as bnn_init
from ._fit import fit_bnn as fit_bnn
from ._fit import predict_bnn as predict_bnn
from ._net import num_weights as num_weights
from ._net import quadratic_net as quadratic_net
from ._stats import BNNStats as BNNStats
from ._stats import bnn_stats as bnn_stats
from ._stats import merge_bnn_stats as merge_bnn_stats
from ._stats import stats_layer_sizes as stats_layer_sizes

__all__ = [
    "BNNFit",
    "BNNStats",
    "BNN_METHODS",
    "bnn_elbo",
    "bnn_expected_rss",
    "bnn_init",
    "bnn_stats",
    "fit_bnn",
    "merge_bnn_stats",
    "num_weights",
    "predict_bnn",
    "quadratic_net",
    "stats_layer_sizes",
]
