r"""A Gaussian prior discretized on grids placed where each weight's posterior lies.

A fixed grid (e.g. 15 levels on $\pm3\sigma_w$) is coarse wherever the data determine a weight far
better than the prior does: the posterior sd $\sigma/\sqrt{\lambda_j}$ can be a thousandth of
$\sigma_w$, and the mean field can only snap to the nearest level. `posterior_grid_prior`
keeps the prior density $N(0, \sigma_w^2)$ but evaluates it on `levels` points spanning
`center_j ± width * spread_j`. In the eigenbasis of $\Phi^\top\Phi$ (`kronvi.stats.eigenbasis`)
with the exact per-coordinate posterior as `center` and `spread`, the discrete mean-field posterior
is the exact Gaussian posterior quantized to `levels` points per coordinate.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_ndim,
    check_positive,
    check_positive_number,
    is_concrete,
    nonfinite_counts,
)
from .grids import DiscretePrior


def posterior_grid_prior(
    center: ArrayLike, spread: ArrayLike, prior_scale: ArrayLike, *, levels: int = 15, width: float = 4.0
) -> DiscretePrior:
    r"""The prior $N(0, \sigma_w^2)$ discretized on `center_j + spread_j * linspace(-width, width, levels)`.

    Args:
      center: `(b,)` grid centres (e.g. the exact posterior means).
      spread: `(b,)` positive grid scales (e.g. the exact posterior sds).
      prior_scale: $\sigma_w$, a positive scalar or `(b,)` array.
      levels: grid points per weight, an int >= 2.
      width: half-width of each grid in units of `spread`.

    Returns:
      `kronvi.model.DiscretePrior` `(b, levels)` with `log_probs` $\propto -v^2/(2\sigma_w^2)$.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> p = kronvi.model.posterior_grid_prior(jnp.array([1.0]), jnp.array([0.1]), 1.0, levels=3, width=2.0)
      >>> [round(float(v), 2) for v in p.values[0]]
      [0.8, 1.0, 1.2]
    """
    center = as_float_array(center, "center")
    check_ndim(center, 1, "center", "(num_weights,)")
    spread = as_float_array(spread, "spread").astype(center.dtype)
    if spread.shape != center.shape:
        raise ValueError(f"`spread` shape {spread.shape} must equal `center` shape {center.shape}")
    check_finite(center, "center")
    check_finite(spread, "spread")
    check_positive(spread, "spread")
    scale = as_float_array(prior_scale, "prior_scale").astype(center.dtype)
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape != center.shape):
        raise ValueError(f"`prior_scale` must be a scalar or shape {center.shape}, got {scale.shape}")
    check_finite(scale, "prior_scale")
    check_positive(scale, "prior_scale")
    levels = check_int(levels, "levels", minimum=2)
    check_positive_number(width, "width")
    return posterior_grid(center, spread, scale, levels=levels, width=float(width))


def posterior_grid(
    center: jax.Array, spread: jax.Array, prior_scale: jax.Array, *, levels: int, width: float
) -> DiscretePrior:
    """`posterior_grid_prior` of checked arguments (finite `(b,)` `center`, positive `spread`, positive
    `prior_scale` of their dtype, an int `levels`, a float `width`) for the library's own callers: only
    the grid it builds is checked (its levels and log-probabilities finite)."""
    values, log_probs = _grid(center, spread, prior_scale, levels=levels, width=width)
    # normalized already: `DiscretePrior(...)` would normalize again in a program of its own
    if is_concrete(values):
        bad_values, bad_log_probs = nonfinite_counts([values, log_probs])
        if bad_values:
            raise ValueError(
                f"`center` ± `width` * `spread` overflows: the grid's levels are not finite in {values.dtype}"
            )
        if bad_log_probs:
            raise ValueError(
                f"`prior_scale` is too small for the grid's levels: their log-probabilities are not finite in {values.dtype}"
            )
    return DiscretePrior._unchecked(values, log_probs)


@functools.partial(jax.jit, static_argnames=("levels", "width"))
def _grid(center, spread, scale, *, levels, width):
    """The levels and their log-probabilities, in one program (as separate operations, each compiled on
    its first call for a shape: about 0.1 s of a first fit)."""
    unit = jnp.linspace(-width, width, levels, dtype=center.dtype)
    values = center[:, None] + spread[:, None] * unit[None, :]
    scale = jnp.broadcast_to(scale, center.shape)
    log_probs = -0.5 * (values / scale[:, None]) ** 2
    return values, jax.nn.log_softmax(log_probs, axis=-1)
