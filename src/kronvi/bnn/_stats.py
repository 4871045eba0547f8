r"""Sufficient statistics of the quadratic network (Evans & Nair 2018, appendix D, eqs. 45-50).

The output of a network with `L` hidden layers is linear in $z = x^{\otimes 2^L}$ (flattened
row-major, length $D = d^{2^L}$), with a coefficient tensor that is a polynomial in the weights.
So everything the exact ELBO needs from the data is

$$ n,\quad y^\top y,\quad p = \sum_i y_i\, z_i \in \mathbb{R}^{D},\quad
   V = \sum_i z_i z_i^\top \in \mathbb{R}^{D\times D}, $$

the paper's $y^\top y$, $\mathbf p$ and $\mathbf V$, here indexed by input monomials
instead of expanded hidden units. They are the regression statistics of the features `z`, so they are
accumulated by the same chunked, compensated pass (`kronvi.stats.regression_stats_from_inputs`) and are
additive over rows (`merge_bnn_stats`). Their size depends on `d` and the depth only:
$d^2$ and $d^4$ entries for one hidden layer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base.checks import fetch, is_concrete, nonfinite_counts
from .._stats.regression import regression_stats_from_inputs
from ._net import check_layer_sizes


class BNNStats(NamedTuple):
    r"""Sufficient statistics of a quadratic network; stack on a leading axis for `vmap` over folds.

    Attributes:
      n: number of rows (a float scalar).
      yty: $y^\top y$.
      yz: $\sum_i y_i z_i$, shape `(D,)` with $z = x^{\otimes 2^L}$, $D = d^{2^L}$.
      zz: $\sum_i z_i z_i^\top$, shape `(D, D)`.
      architecture: an empty array of shape `(0, *layer_sizes)`: its shape (static under `jit`;
        `vmap` strips the fold axis) records the network the statistics are for. Read it with
        `stats_layer_sizes`.
    """

    n: jax.Array
    yty: jax.Array
    yz: jax.Array
    zz: jax.Array
    architecture: jax.Array


def stats_layer_sizes(stats: BNNStats, name: str = "stats") -> tuple[int, ...]:
    """The `layer_sizes` recorded in unbatched statistics (inside `vmap` for stacked folds)."""
    if not isinstance(stats, BNNStats):
        raise TypeError(f"`{name}` must be BNNStats (from kronvi.bnn.bnn_stats), got {type(stats).__name__}")
    shape = stats.architecture.shape
    if len(shape) < 3 or shape[0] != 0:
        raise ValueError(
            f"`{name}.architecture` has shape {shape}: statistics stacked over folds go through jax.vmap"
        )
    return check_layer_sizes(shape[1:], f"{name}.architecture")


def check_bnn_stats(stats: BNNStats, name: str = "stats") -> tuple[int, ...]:
    """Validates shapes (static) and, for concrete arrays, `n > 0` and finiteness; returns `layer_sizes`."""
    sizes = stats_layer_sizes(stats, name)
    D = sizes[0] ** (2 ** (len(sizes) - 2))
    if stats.yz.shape[-1:] != (D,) or stats.zz.shape[-2:] != (D, D):
        raise ValueError(
            f"`{name}` for layer_sizes {sizes} needs yz ({D},) and zz ({D}, {D}), got "
            f"{stats.yz.shape} and {stats.zz.shape}"
        )
    dtype = jnp.dtype(stats.zz.dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise TypeError(f"`{name}` are {dtype}: use float32 or float64")
    if is_concrete(stats.n) and bool(np.any(fetch(stats.n) <= 0)):
        raise ValueError(f"`{name}.n` must be positive: the statistics describe empty data")
    fields = [(f, x) for f, x in zip(stats._fields[:4], stats[:4], strict=True) if is_concrete(x)]
    counts = nonfinite_counts([x for _, x in fields])
    bad = [f"`{name}.{f}`" for (f, _), k in zip(fields, counts, strict=True) if k]
    if bad:
        raise ValueError(f"`{name}` contains NaN or infinite values: {', '.join(bad)}")
    return sizes


@functools.cache
def tensor_power_map(depth: int):
    r"""The feature map $x \mapsto x^{\otimes 2^{\text{depth}}}$ on rows `(c, d) -> (c, d^{2^depth})`,
    one function object per depth (so that compiled statistics are reused)."""

    def feature_map(X):
        z = X
        for _ in range(depth):
            z = (z[:, :, None] * z[:, None, :]).reshape(z.shape[0], -1)
        return z

    feature_map.__name__ = f"tensor_power_{2**depth}"
    return feature_map


def bnn_stats(
    X: ArrayLike, y: ArrayLike, layer_sizes: Sequence[int], *, chunk_size: int | None = None
) -> BNNStats:
    r"""Sufficient statistics $(n, y^\top y, \sum_i y_i z_i, \sum_i z_i z_i^\top)$ of a quadratic network.

    $z_i = x_i^{\otimes 2^L}$ for `L = len(layer_sizes) - 2` hidden layers; rows are processed in
    chunks inside `lax.scan` with compensated sums (the pass of
    `kronvi.stats.regression_stats_from_inputs`), so the `n x D` matrix of `z` never exists. The
    cost is $O(n D^2)$ once; the ELBO afterwards never touches the data. Centre `y`.

    Args:
      X: inputs `(n, d)` (include a constant column for biases).
      y: targets `(n,)`.
      layer_sizes: `(d, h_1, ..., h_L, 1)`.
      chunk_size: rows per chunk; `None`: equal chunks of at most 4096 rows.

    Returns:
      `BNNStats` in the dtype of the inputs.

    Raises:
      ValueError: bad `layer_sizes`, `X` whose width is not `layer_sizes[0]`, bad shapes or NaN/inf.

    References:
      Evans & Nair (2018), appendix D, eqs. 45-50 ($y^\top y$, $\mathbf p$, $\mathbf V$).

    Example:
      >>> import jax.numpy as jnp
      >>> from kronvi.bnn import bnn_stats
      >>> s = bnn_stats(jnp.ones((4, 2)), jnp.arange(4.0), (2, 3, 1))
      >>> s.yz.shape, s.zz.shape, float(s.n)
      ((4,), (4, 4), 4.0)
    """
    sizes = check_layer_sizes(layer_sizes)
    Xa = jnp.asarray(X)
    if Xa.ndim != 2:
        raise ValueError(f"`X` must be 2-D (num_points, num_inputs), got shape {tuple(Xa.shape)}")
    if Xa.shape[1] != sizes[0]:
        raise ValueError(f"`X` has {Xa.shape[1]} columns but layer_sizes[0] is {sizes[0]}")
    rs = regression_stats_from_inputs(tensor_power_map(len(sizes) - 2), X, y, chunk_size=chunk_size)
    arch = jnp.zeros((0,) + sizes, rs.PhitPhi.dtype)
    return BNNStats(rs.n, rs.yty, rs.Phity, rs.PhitPhi, arch)


def merge_bnn_stats(a: BNNStats, b: BNNStats) -> BNNStats:
    """Statistics of the union of two disjoint data sets for the same network (they add).

    Raises:
      ValueError: the two were computed for different `layer_sizes`.
    """
    for s, name in ((a, "a"), (b, "b")):
        if not isinstance(s, BNNStats):
            raise TypeError(f"`{name}` must be BNNStats, got {type(s).__name__}")
    if a.architecture.shape != b.architecture.shape:
        raise ValueError(
            f"statistics are for different networks: {a.architecture.shape[1:]} vs {b.architecture.shape[1:]}"
        )
    return jax.tree.map(jnp.add, a, b)
