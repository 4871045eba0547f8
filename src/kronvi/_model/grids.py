"""Discrete priors on grids of values: one grid of `m` levels per weight.

A `DiscretePrior` of shape `(b, m)` is the fully factorized prior
$p(w) = \\prod_{j=1}^b p_j(w_j)$ with $w_j \\in \\{v_{j1}, \\dots, v_{jm}\\}$; its log
probability vector over all $m^b$ configurations is the Kronecker sum
$\\bigoplus_j \\log p_j$ (Evans & Nair 2018, eq. 6). The same class with `b = 1` and positive
values is the prior over the noise variance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._base.buckets import to_device
from .._base.checks import (
    as_float_array,
    check_finite,
    check_finite_arrays,
    check_int,
    check_ndim,
    check_positive,
    is_concrete,
)
from .._base.pytree import validated_pytree


@jax.jit
def log_normalized(log_probs: jax.Array) -> jax.Array:
    """`jax.nn.log_softmax(log_probs, axis=-1)` in one program (on concrete arrays it is a few eager ones)."""
    return jax.nn.log_softmax(log_probs, axis=-1)


@validated_pytree
class DiscretePrior:
    r"""Factorized discrete prior: weight `j` takes value `values[j, k]` with prob `exp(log_probs[j, k])`.

    Args:
      values: `(b, m)` grid values, finite. Each row is one weight's grid.
      log_probs: `(b, m)` log-probabilities, finite (give an impossible level a tiny probability or
        drop it). They are normalized over the last axis (a constant shift per row is harmless).

    Leading batch axes (e.g. CV folds stacked for `vmap`) are allowed when constructing from arrays that
    were already validated; the constructor itself checks the unbatched `(b, m)` form.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> p = kronvi.model.DiscretePrior(jnp.array([[-1.0, 0.0, 1.0]]), jnp.zeros((1, 3)))
      >>> [round(float(x), 3) for x in p.probs[0]]
      [0.333, 0.333, 0.333]
    """

    _fields = ("values", "log_probs")
    values: jax.Array
    log_probs: jax.Array
    # added by `validated_pytree`: construction without validation, and a copy with fields replaced
    _unchecked: ClassVar[Callable[..., DiscretePrior]]
    _replace: Callable[..., DiscretePrior]

    def __init__(self, values, log_probs):
        values = as_float_array(values, "values")
        log_probs = as_float_array(log_probs, "log_probs")
        check_ndim(values, 2, "values", "(num_weights, num_levels)")
        if log_probs.shape != values.shape:
            raise ValueError(
                f"`log_probs` shape {tuple(log_probs.shape)} must equal `values` shape {tuple(values.shape)}"
            )
        if values.shape[0] == 0 or values.shape[1] == 0:
            raise ValueError(f"`values` is empty (shape {tuple(values.shape)})")
        check_finite(values, "values")
        check_finite(log_probs, "log_probs")
        dtype = jnp.result_type(values, log_probs)
        object.__setattr__(self, "values", values.astype(dtype))
        object.__setattr__(self, "log_probs", log_normalized(log_probs.astype(dtype)))

    @property
    def probs(self):
        return jnp.exp(self.log_probs)

    @property
    def num_weights(self) -> int:
        return self.values.shape[-2]

    @property
    def num_levels(self) -> int:
        return self.values.shape[-1]


def gaussian_prior(
    num_weights: int,
    scale: ArrayLike,
    *,
    levels: int = 15,
    width: float = 3.0,
    dtype: DTypeLike | None = None,
) -> DiscretePrior:
    r"""A zero-mean Gaussian $N(0, \text{scale}^2)$ discretized on an even grid.

    The grid is `linspace(-width*scale, width*scale, levels)` for every weight (15 levels fit in 4 bits;
    an odd count contains 0, which makes posterior samples sparse), with probabilities proportional to the
    Gaussian density at the grid points.

    Args:
      num_weights: `b`, the number of weights.
      scale: prior standard deviation, positive scalar or `(b,)` array (one scale per weight).
      levels: grid size `m`, an int >= 2 (the grid `(k - (m-1)/2) / ((m-1)/2)`, `k = 0..m-1`,
        needs two points; odd `m` puts a level at exactly 0, even `m` has none).
      width: half-width of the grid in prior standard deviations.
      dtype: float dtype of the grid; `None` keeps the dtype of `scale`. Fits need the priors and
        the statistics in one dtype (float32 or float64).

    Returns:
      A `DiscretePrior` of shape `(b, levels)`.

    Example:
      >>> import kronvi
      >>> p = kronvi.model.gaussian_prior(4, 0.5, levels=5, width=2.0)
      >>> p.values[0].tolist()
      [-1.0, -0.5, 0.0, 0.5, 1.0]
    """
    num_weights = check_int(num_weights, "num_weights", 1)
    levels = check_int(levels, "levels", 2)
    if not float(width) > 0:
        raise ValueError(f"`width` must be positive, got {width}")
    scale = _as_dtype(as_float_array(scale, "scale"), dtype)
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape[0] != num_weights):
        raise ValueError(f"`scale` must be a scalar or shape ({num_weights},), got {scale.shape}")
    check_finite(scale, "scale")
    check_positive(scale, "scale")
    return gaussian_grid(num_weights, scale, levels=levels, width=width)


def gaussian_grid(num_weights: int, scale: jax.Array, *, levels: int, width: float) -> DiscretePrior:
    """`gaussian_prior` of checked arguments (a positive finite `scale` array of the grid's dtype, ints,
    a positive `width`) for the library's own callers: only the grid it builds is checked (finite levels
    and log-probabilities)."""
    # Symmetric by construction: k - (m-1)/2 is exact in floating point, so for odd `levels` the middle
    # level is exactly 0 (a float32 linspace leaves it at ~1e-8, and sparsity then reads as 0).
    half = (levels - 1) / 2.0
    unit = (jnp.arange(levels, dtype=scale.dtype) - half) * (width / half)
    scale = jnp.broadcast_to(scale, (num_weights,))
    values = scale[:, None] * unit[None, :]
    log_probs = jnp.broadcast_to(-0.5 * unit**2, values.shape)
    check_finite_arrays({"values": values, "log_probs": log_probs})
    return DiscretePrior._unchecked(values, jax.nn.log_softmax(log_probs, axis=-1))


def noise_prior(
    variance: ArrayLike, *, levels: int = 15, span: float = 10.0, dtype: DTypeLike | None = None
) -> DiscretePrior:
    r"""A uniform prior over a log-spaced grid of noise variances around an estimate.

    The grid runs from `variance / span` to `variance * span` in `levels` log-spaced steps
    (an odd `levels` contains the estimate itself).

    Args:
      variance: the noise-variance estimate, a positive scalar.
      levels: number of grid points `m_sigma`, an int >= 1 (1: the noise fixed at `variance`).
      span: ratio between the estimate and either end of the grid (> 1).
      dtype: float dtype of the grid; `None` keeps the dtype of `variance`.

    Returns:
      A `DiscretePrior` of shape `(1, levels)` over positive variances.

    Example:
      >>> import kronvi
      >>> [round(float(v), 4) for v in kronvi.model.noise_prior(1.0, levels=3, span=100.0).values[0]]
      [0.01, 1.0, 100.0]
    """
    variance = _as_dtype(as_float_array(variance, "variance"), dtype)
    if variance.ndim != 0:
        raise ValueError(f"`variance` must be a scalar, got shape {variance.shape}")
    check_finite(variance, "variance")
    check_positive(variance, "variance")
    levels = check_int(levels, "levels", 1)
    if not float(span) > 1.0:
        raise ValueError(f"`span` must be > 1, got {span}")
    return noise_grid(variance, levels=levels, span=span)


def noise_grid(variance: jax.Array, *, levels: int, span: float) -> DiscretePrior:
    """`noise_prior` of checked arguments (a positive finite scalar `variance` array of the grid's dtype,
    an int `levels`, `span > 1`) for the library's own callers: only the grid it builds is checked."""
    # exponents in float64 NumPy, then one cast: a NumPy float64 scalar would promote the grid's dtype
    exps = np.linspace(-1.0, 1.0, levels) if levels > 1 else np.zeros(1)
    dtype = np.dtype(variance.dtype)
    traced = isinstance(variance, jax.core.Tracer)
    with np.errstate(over="ignore"):  # a span beyond the dtype: inf, reported by the check below
        # a concrete variance by NumPy (the same rounding in `dtype`): no program to compile
        values = (variance if traced else np.asarray(variance)) * np.exp(exps * np.log(float(span))).astype(dtype)
    check_finite_arrays({"values": values})
    if traced:
        return DiscretePrior._unchecked(values[None, :], jax.nn.log_softmax(jnp.zeros((1, levels), dtype), axis=-1))
    uniform = np.full((1, levels), 0.0 - np.log(levels), np.float64).astype(dtype)  # 0.0, not -0.0, for one level
    return DiscretePrior._unchecked(to_device(values[None, :]), to_device(uniform))


def _as_dtype(x: jax.Array, dtype: DTypeLike | None) -> jax.Array:
    """`x` cast to `dtype` (a float dtype), or unchanged for `None`."""
    if dtype is None:
        return x
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {jnp.dtype(dtype)}")
    return x.astype(dtype)


def check_noise_prior(prior: DiscretePrior, name: str = "prior_noise"):
    """Validates that `prior` is a `(1, m)` grid of positive variances."""
    if not isinstance(prior, DiscretePrior):
        raise TypeError(f"`{name}` must be a DiscretePrior, got {type(prior).__name__}")
    if prior.values.ndim < 2 or prior.values.shape[-2] != 1:
        raise ValueError(
            f"`{name}` must have shape (1, m_sigma) (one noise variance), got {prior.values.shape}"
        )
    if is_concrete(prior.values):
        check_positive(prior.values, f"{name}.values (noise variances)")


def check_weight_prior(prior: DiscretePrior, num_weights: int | None = None, name: str = "prior_w"):
    if not isinstance(prior, DiscretePrior):
        raise TypeError(f"`{name}` must be a DiscretePrior, got {type(prior).__name__}")
    if num_weights is not None and prior.values.shape[-2] != num_weights:
        raise ValueError(
            f"`{name}` has {prior.values.shape[-2]} weights but the data have {num_weights} features"
        )
