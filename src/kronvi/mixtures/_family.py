r"""The mixture family: `Mixture` posteriors, `MixturePrior` priors and their validation.

A `Mixture` is $q(w) = \sum_{k=1}^r \alpha_k \bigotimes_{j=1}^b q^{(k)}_j$, a sum of `r`
Kronecker-product vectors over the $m^b$ grid configurations; a `MixturePrior` is
$p(w) = \sum_c \beta_c \bigotimes_j p^{(c)}_j$ on one grid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base.checks import as_float_array, check_finite, check_int, check_ndim, fetch, is_concrete
from .._base.pytree import validated_pytree
from .._model.families import MeanField, check_family
from .._model.grids import DiscretePrior, check_noise_prior
from .._solvers.info import FitInfo
from .._stats.regression import RegressionStats


@validated_pytree
class Mixture:
    r"""Mixture of mean-field distributions, $q = \sum_k \alpha_k \bigotimes_j q^{(k)}_j$.

    Component `k`'s factor `j` is `softmax(logits[k, j])`; the mixture weights are
    $\alpha = \mathrm{softmax}(\text{weight\_logits})$.

    Args:
      logits: `(r, b, m)` unnormalized log-probabilities, finite: `r` components over `b` weights
        with `m` grid levels each.
      weight_logits: `(r,)` unnormalized log mixture weights, finite.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> q = kronvi.mixtures.Mixture(jnp.zeros((2, 3, 4)), jnp.array([0.0, jnp.log(3.0)]))
      >>> [round(float(a), 3) for a in q.weights], q.marginals.sum(-1).tolist()
      ([0.25, 0.75], [1.0, 1.0, 1.0])
    """

    _fields = ("logits", "weight_logits")
    logits: jax.Array
    weight_logits: jax.Array
    # added by `validated_pytree`: construction without validation, and a copy with fields replaced
    _unchecked: ClassVar[Callable[..., Mixture]]
    _replace: Callable[..., Mixture]

    def __init__(self, logits, weight_logits):
        logits = as_float_array(logits, "logits")
        weight_logits = as_float_array(weight_logits, "weight_logits")
        check_ndim(logits, 3, "logits", "(num_components, num_weights, num_levels)")
        check_ndim(weight_logits, 1, "weight_logits", "(num_components,)")
        if 0 in logits.shape:
            raise ValueError(f"`logits` is empty (shape {tuple(logits.shape)})")
        if weight_logits.shape[0] != logits.shape[0]:
            raise ValueError(
                f"`weight_logits` has {weight_logits.shape[0]} entries but `logits` has "
                f"{logits.shape[0]} components"
            )
        check_finite(logits, "logits")
        check_finite(weight_logits, "weight_logits")
        dtype = jnp.result_type(logits, weight_logits)
        object.__setattr__(self, "logits", logits.astype(dtype))
        object.__setattr__(self, "weight_logits", weight_logits.astype(dtype))

    @property
    def probs(self):
        """Component factors `(r, b, m)`."""
        return jax.nn.softmax(self.logits, axis=-1)

    @property
    def log_probs(self):
        return jax.nn.log_softmax(self.logits, axis=-1)

    @property
    def weights(self):
        r"""Mixture weights $\alpha$, `(r,)`."""
        return jax.nn.softmax(self.weight_logits, axis=-1)

    @property
    def log_weights(self):
        return jax.nn.log_softmax(self.weight_logits, axis=-1)

    @property
    def marginals(self):
        r"""Per-weight marginals $\sum_k \alpha_k q^{(k)}_j$, `(b, m)`."""
        return jnp.exp(self.log_marginals)

    @property
    def log_marginals(self):
        """Log of `marginals`, computed in log space (finite whenever the logits are)."""
        return jax.nn.logsumexp(self.log_weights[..., :, None, None] + self.log_probs, axis=-3)

    @property
    def num_components(self) -> int:
        return self.logits.shape[-3]

    @classmethod
    def from_mean_field(cls, q_w: MeanField):
        """The one-component mixture equal to a `MeanField` distribution."""
        if not isinstance(q_w, MeanField):
            raise TypeError(f"`q_w` must be a MeanField, got {type(q_w).__name__}")
        return cls(q_w.logits[None], jnp.zeros((1,), q_w.logits.dtype))


@validated_pytree
class MixturePrior:
    r"""Mixture of factorized priors on one grid, $p(w) = \sum_c \beta_c \prod_j p^{(c)}_j(w_j)$.

    Args:
      values: `(b, m)` grid values shared by all components, finite.
      log_probs: `(C, b, m)` log-probabilities of each component's factors, finite; normalized over the
        last axis.
      log_weights: `(C,)` log mixture weights $\log\beta$, finite; normalized.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> grid = jnp.array([[-1.0, 0.0, 1.0]])
      >>> p = kronvi.mixtures.MixturePrior(grid, jnp.log(jnp.array([[[0.1, 0.8, 0.1]], [[0.3, 0.4, 0.3]]])),
      ...                         jnp.zeros(2))
      >>> p.weights.tolist(), p.num_components
      ([0.5, 0.5], 2)
    """

    _fields = ("values", "log_probs", "log_weights")
    values: jax.Array
    log_probs: jax.Array
    log_weights: jax.Array
    # added by `validated_pytree`: construction without validation, and a copy with fields replaced
    _unchecked: ClassVar[Callable[..., MixturePrior]]
    _replace: Callable[..., MixturePrior]

    def __init__(self, values, log_probs, log_weights):
        values = as_float_array(values, "values")
        log_probs = as_float_array(log_probs, "log_probs")
        log_weights = as_float_array(log_weights, "log_weights")
        check_ndim(values, 2, "values", "(num_weights, num_levels)")
        check_ndim(log_probs, 3, "log_probs", "(num_components, num_weights, num_levels)")
        check_ndim(log_weights, 1, "log_weights", "(num_components,)")
        if 0 in values.shape or log_probs.shape[0] == 0:
            raise ValueError(
                f"`values` {tuple(values.shape)} / `log_probs` {tuple(log_probs.shape)} are empty"
            )
        if log_probs.shape[1:] != values.shape:
            raise ValueError(
                f"`log_probs` shape {tuple(log_probs.shape)} must be (C, *values.shape) = "
                f"(C, {values.shape[0]}, {values.shape[1]})"
            )
        if log_weights.shape[0] != log_probs.shape[0]:
            raise ValueError(
                f"`log_weights` has {log_weights.shape[0]} entries but `log_probs` has "
                f"{log_probs.shape[0]} components"
            )
        for x, name in ((values, "values"), (log_probs, "log_probs"), (log_weights, "log_weights")):
            check_finite(x, name)
        dtype = jnp.result_type(values, log_probs, log_weights)
        object.__setattr__(self, "values", values.astype(dtype))
        object.__setattr__(self, "log_probs", jax.nn.log_softmax(log_probs.astype(dtype), axis=-1))
        object.__setattr__(self, "log_weights", jax.nn.log_softmax(log_weights.astype(dtype), axis=-1))

    @property
    def weights(self):
        return jnp.exp(self.log_weights)

    @property
    def num_components(self) -> int:
        return self.log_probs.shape[-3]

    @classmethod
    def from_priors(cls, priors, log_weights=None):
        """Stacks `DiscretePrior` components that share one grid (equal weights by default)."""
        priors = list(priors)
        if not priors or not all(isinstance(p, DiscretePrior) for p in priors):
            raise TypeError("`priors` must be a non-empty sequence of DiscretePrior")
        values = priors[0].values
        for c, p in enumerate(priors[1:], 1):
            if p.values.shape != values.shape or not bool(jnp.all(p.values == values)):
                raise ValueError(f"`priors[{c}]` has a different grid from `priors[0]`")
        if log_weights is None:
            log_weights = jnp.zeros((len(priors),), values.dtype)
        return cls(values, jnp.stack([p.log_probs for p in priors]), log_weights)


class MixtureFit(NamedTuple):
    """The result of `fit_mixture_bound` and
    `fit_mixture_sgd`.

    Attributes:
      q: `Mixture` `(r, b, m)` over the weights.
      q_noise: `MeanField` `(1, m_sigma)` over the noise variance.
      log_center: `(b, m)` the centre of the Theorem-3 bound at the optimum
        (`mixture_elbo_bound`); `None` for the SGD fit, which has no
        bound.
      info: `FitInfo`.
    """

    q: Mixture
    q_noise: MeanField
    log_center: jax.Array | None
    info: FitInfo


# ----------------------------------------------------------------------------------------------------
# Validation shared by the mixture modules
# ----------------------------------------------------------------------------------------------------


def check_mixture(q, name="q"):
    """Raises `TypeError` unless `q` is a `Mixture`."""
    if not isinstance(q, Mixture):
        raise TypeError(f"`{name}` must be a Mixture, got {type(q).__name__}")


def check_weight_prior(prior_w, q=None, name="prior_w"):
    """A `DiscretePrior` or `MixturePrior` whose grid matches `q`'s `(b, m)`."""
    if not isinstance(prior_w, DiscretePrior | MixturePrior):
        raise TypeError(f"`{name}` must be a DiscretePrior or MixturePrior, got {type(prior_w).__name__}")
    if q is not None and q.logits.shape[-2:] != prior_w.values.shape[-2:]:
        raise ValueError(
            f"`q.logits` has shape {tuple(q.logits.shape)} but `{name}` grid has shape "
            f"{tuple(prior_w.values.shape)}: they must agree (num_weights, num_levels)"
        )


def check_mixture_args(q, q_noise, prior_w, prior_noise, stats=None):
    """Static validation of a mixture model's arguments (types, shapes, and `stats.n > 0` if concrete)."""
    check_mixture(q)
    check_weight_prior(prior_w, q)
    check_noise_prior(prior_noise)
    check_family(q_noise, prior_noise, "q_noise", "prior_noise")
    if stats is not None:
        if not isinstance(stats, RegressionStats):
            raise TypeError(f"`stats` must be RegressionStats, got {type(stats).__name__}")
        b = prior_w.values.shape[-2]
        if stats.Phity.shape[-1:] != (b,) or stats.PhitPhi.shape[-2:] != (b, b):
            raise ValueError(
                f"`stats` describe {stats.Phity.shape[-1]} features (PhitPhi {tuple(stats.PhitPhi.shape)})"
                f" but the model has {b} weights"
            )
        if is_concrete(stats.n) and bool(np.any(fetch(stats.n) <= 0)):
            raise ValueError("`stats.n` must be positive: the statistics describe empty data")


def check_log_center(log_center, q):
    """`log_center` as a finite float array of shape `q.logits.shape[-2:]`."""
    log_center = jnp.asarray(log_center)
    if not jnp.issubdtype(log_center.dtype, jnp.floating):
        log_center = log_center.astype(q.logits.dtype)
    if log_center.shape != q.logits.shape[-2:]:
        raise ValueError(
            f"`log_center` must have shape {tuple(q.logits.shape[-2:])} (num_weights, num_levels), "
            f"got {tuple(log_center.shape)}"
        )
    check_finite(log_center, "log_center")
    return log_center


def mixture_from_mean_field(
    key: jax.Array, q_w: MeanField, num_components: int, *, noise_scale: float = 0.3, smoothing: float = 0.0
) -> Mixture:
    r"""A mixture of perturbed copies of a mean-field posterior, to start a mixture fit from.

    Component `k` has logits $\log\big((1-\epsilon) q_j + \epsilon/m\big) +
    \text{noise\_scale}\cdot z^{(k)}_j$, $z \sim N(0, I)$, with $\epsilon$ = `smoothing`,
    and the weights are equal. Identical components (`noise_scale=0`) stay identical under any
    deterministic optimizer (the gradients are symmetric), so some noise is needed for the components to
    specialize. Smoothing lets components differ where a mean-field factor is numerically one-hot (logit
    noise alone leaves a point mass a point mass), but it costs likelihood on every weight, so keep it
    small or zero for large models (`docs/decisions/fitting.md#mixtures`).

    Args:
      key: PRNG key.
      q_w: `MeanField` `(b, m)`, e.g. from `kronvi.fitting.fit_regression`.
      num_components: `r >= 1`.
      noise_scale: standard deviation of the logit perturbation, `>= 0`.
      smoothing: weight $\epsilon \in [0, 1]$ of the uniform distribution mixed into each factor.

    Returns:
      A `Mixture` `(r, b, m)`.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> q = kronvi.mixtures.mixture_from_mean_field(jax.random.key(0), kronvi.model.MeanField(jnp.zeros((3, 4))), 5)
      >>> q.logits.shape, [round(float(a), 3) for a in q.weights]
      ((5, 3, 4), [0.2, 0.2, 0.2, 0.2, 0.2])
    """
    if not isinstance(q_w, MeanField):
        raise TypeError(f"`q_w` must be a MeanField, got {type(q_w).__name__}")
    check_int(num_components, "num_components", 1)
    if not float(noise_scale) >= 0:
        raise ValueError(f"`noise_scale` must be >= 0, got {noise_scale}")
    if not 0.0 <= float(smoothing) <= 1.0:
        raise ValueError(f"`smoothing` must be in [0, 1], got {smoothing}")
    log_q = q_w.log_probs
    m = log_q.shape[-1]
    eps = jnp.asarray(smoothing, log_q.dtype)
    # log((1 - eps) q + eps / m) without underflow: logaddexp of the two log terms.
    base = jnp.logaddexp(jnp.log1p(-eps) + log_q, jnp.log(eps / m)) if smoothing > 0 else log_q
    z = jax.random.normal(key, (num_components,) + base.shape, base.dtype)
    return Mixture(base[None] + noise_scale * z, jnp.zeros((num_components,), base.dtype))
