"""Variational families over discrete grids.

`MeanField` is $q(w) = \\bigotimes_{j=1}^b q_j$ with $q_j = \\mathrm{softmax}(\\ell_j)$
over the `m` levels of weight `j`'s grid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base.checks import as_float_array, check_finite, check_ndim
from .._base.pytree import validated_pytree
from .grids import DiscretePrior, log_normalized


@jax.jit
def _normalized(logits: jax.Array) -> jax.Array:
    """`jax.nn.softmax(logits, axis=-1)` in one program."""
    return jax.nn.softmax(logits, axis=-1)


@validated_pytree
class MeanField:
    r"""Fully factorized discrete distribution, `q_j = softmax(logits[j])`.

    Args:
      logits: `(b, m)` unnormalized log-probabilities, finite.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> q = kronvi.model.MeanField(jnp.zeros((2, 4)))
      >>> q.probs.sum(-1).tolist()
      [1.0, 1.0]
    """

    _fields = ("logits",)
    logits: jax.Array
    # added by `validated_pytree`: construction without validation, and a copy with fields replaced
    _unchecked: ClassVar[Callable[..., MeanField]]
    _replace: Callable[..., MeanField]

    def __init__(self, logits):
        logits = as_float_array(logits, "logits")
        check_ndim(logits, 2, "logits", "(num_weights, num_levels)")
        if logits.shape[0] == 0 or logits.shape[1] == 0:
            raise ValueError(f"`logits` is empty (shape {tuple(logits.shape)})")
        check_finite(logits, "logits")
        object.__setattr__(self, "logits", logits)

    @property
    def probs(self):
        return _normalized(self.logits)

    @property
    def log_probs(self):
        return log_normalized(self.logits)

    @classmethod
    def from_prior(cls, prior):
        """The mean-field distribution equal to a factorized prior (the usual initialization)."""
        if isinstance(prior, DiscretePrior):  # finite log-probabilities, checked when it was built
            return cls._unchecked(prior.log_probs)
        return cls(prior.log_probs)


def check_family(q, prior, name: str, prior_name: str):
    """Checks that a MeanField's shape matches its prior's grid."""
    if not isinstance(q, MeanField):
        raise TypeError(f"`{name}` must be a MeanField, got {type(q).__name__}")
    if q.logits.shape[-2:] != prior.values.shape[-2:]:
        raise ValueError(
            f"`{name}.logits` has shape {tuple(q.logits.shape)} but `{prior_name}` grid has shape "
            f"{tuple(prior.values.shape)}: they must agree (num_weights, num_levels)"
        )


def grid_moments(probs: ArrayLike, values: ArrayLike) -> tuple[jax.Array, jax.Array]:
    r"""Mean and variance of each weight under factor probabilities `probs` on grid `values`.

    Both arrays `(..., b, m)`. The variance is computed around the mean (not as
    $E[w^2] - E[w]^2$) to avoid cancellation.
    """
    mean = jnp.sum(probs * values, axis=-1)
    var = jnp.sum(probs * (values - mean[..., None]) ** 2, axis=-1)
    return mean, var


def entropy(q: MeanField) -> jax.Array:
    r"""Entropy $-E_q[\log q] = -\sum_j \langle q_j, \log q_j \rangle$ (Prop. 2: log of a Kronecker
    product is a Kronecker sum)."""
    return -jnp.sum(q.probs * q.log_probs, axis=(-2, -1))
