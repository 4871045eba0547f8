r"""Row sums over arrays sharded across devices and processes: one local pass per shard, one exact sum.

Sufficient statistics are sums over rows, so statistics of a row-sharded global `jax.Array` are a
map-reduce: every device runs the single-device chunked kernel on its own rows inside `shard_map` and the
per-shard results are added across the mesh. The cross-device sum is error-free up to a final rounding
(Rump, Ogita & Oishi's extraction): each shard splits its value $x_i = q_i + r_i$ at a power of two
$\sigma \ge (k + 2)\max_i |x_i|$, so that every $q_i$ is a multiple of
$\epsilon\sigma$ and $\sum_i q_i$ is exact in any order; the remainders are tiny
($|r_i| \le \epsilon\sigma$) and are summed in a second all-reduce. The total error is one rounding
of the result, whatever the number of devices, so the compensated accuracy of the local kernel carries
over to any mesh. The same code runs across processes after `jax.distributed.initialize` (the mesh then
spans every process's devices).

Padding: `jax.Array` shards are equal, so data sets whose row count does not divide the mesh (or whose
processes hold different numbers of rows) are padded, and a row mask says which rows count.

References:
  S. M. Rump, T. Ogita, S. Oishi, *Accurate floating-point summation part I: faithful rounding*,
  SIAM J. Sci. Comput. 31(1), 2008 (ExtractVector, Lemma 3.3 / Algorithm 3.4).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .._base.checks import fetch, is_concrete


def is_distributed(*arrays) -> bool:
    """True when one of `arrays` is a concrete `jax.Array` placed on more than one device.

    Tracers (inside a user's `jit`) are not distributed here: there XLA partitions the single-device
    computation itself.
    """
    return any(_spread(a) for a in arrays)


def _spread(a) -> bool:
    return isinstance(a, jax.Array) and is_concrete(a) and len(a.sharding.device_set) > 1


def row_mesh(*arrays) -> tuple[Mesh, tuple[str, ...]]:
    """The mesh and the mesh axes that split the rows of the first array of `arrays` spread over devices.

    A `NamedSharding` gives its own mesh and the axes of its first dimension (`()` when the rows are
    replicated). Any other sharding gives a one-axis mesh `"rows"` over its devices, ordered by the first
    row each holds. Arrays on one device give a one-device mesh.
    """
    for a in arrays:
        if not _spread(a):
            continue
        sharding = a.sharding
        if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, Mesh):
            spec = tuple(sharding.spec)
            rows = spec[0] if spec else None
            axes = () if rows is None else (rows,) if isinstance(rows, str) else tuple(rows)
            return sharding.mesh, axes
        index = sharding.devices_indices_map(a.shape)
        devices = sorted(sharding.device_set, key=lambda d: (index[d][0].start or 0, d.id))
        return Mesh(np.array(devices), ("rows",)), ("rows",)
    for a in arrays:
        if isinstance(a, jax.Array) and is_concrete(a):
            return Mesh(np.array(list(a.devices())), ("rows",)), ("rows",)
    return Mesh(np.array(jax.devices()[:1]), ("rows",)), ("rows",)


def exact_psum(x, axes: tuple[str, ...], num_shards: int):
    r"""The sum of `x` over the mesh `axes` (inside `shard_map`), rounded once.

    Each entry is split at $\sigma = 2^{M + e}$ with $2^M \ge k + 2$ and $2^e > \max_i
    |x_i|$ (an elementwise `pmax`): $q = (\sigma + x) - \sigma$ is exact to sum, $r = x - q$
    carries the rest. Two all-reduces (`pmax`, then `psum` of `q` and `r` together).

    Args:
      x: the local array (any shape, float).
      axes: mesh axis names to sum over; `()` returns `x`.
      num_shards: `k`, the number of participants along `axes`.
    """
    if not axes:
        return x
    big = math.ceil(math.log2(num_shards + 2))
    _, e = jnp.frexp(lax.pmax(jnp.abs(x), axes))
    sigma = jnp.ldexp(jnp.ones_like(x), e + big)
    q = (sigma + x) - sigma
    r = x - q
    q, r = lax.psum((q, r), axes)
    return q + r


def _shard_map(f, mesh, in_specs, out_specs):
    # jax >= 0.7 has jax.shard_map (check_vma); older releases jax.experimental.shard_map (check_rep).
    # The checks are off: the local kernel's scan carries start unvarying, and the outputs are all-reduced.
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map

    return shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def check_row_mask(mask, n: int):
    """`mask` as a `(n,)` array of booleans or 0/1 numbers; the values of a numeric mask are checked where they
    are concrete and addressable here (a mask sharded over processes is taken as it is)."""
    if mask is None:
        return None
    if not hasattr(mask, "shape") or not hasattr(mask, "dtype"):
        mask = np.asarray(mask)
    if tuple(mask.shape) != (n,):
        raise ValueError(f"`mask` must have shape ({n},), one entry per row, got {tuple(mask.shape)}")
    dtype = np.dtype(mask.dtype)
    if not (dtype == np.bool_ or np.issubdtype(dtype, np.number)):
        raise TypeError(f"`mask` must hold booleans (or 0/1), got {dtype}")
    if dtype != np.bool_ and is_concrete(mask) and getattr(mask, "is_fully_addressable", True):
        values = np.asarray(fetch(mask))
        if not np.all((values == 0) | (values == 1)):
            raise ValueError("`mask` must hold booleans or 0/1: it marks the rows to count, not weights")
    return mask


def sharded_row_sums(kernel, feature_map, X, y, mask, chunk_size: int, *, identity: bool):
    """`kernel`'s statistics of the rows of `(X, y)` where `mask` is true, on the mesh of the inputs.

    Inputs spread over several devices run in `shard_map` on their mesh (`row_mesh`), every output
    replicated; otherwise the masked kernel runs as it is (also inside a user's `jit`).

    Args:
      kernel: `kernel(feature_map, X, y, chunk_size)` -> a NamedTuple with a row count `n` and fields
        that are sums over rows (the single-device compensated kernel), traceable inside `shard_map`.
      feature_map: a pytree callable `(c, d) -> (c, b)`; its arrays are replicated.
      X: `(n, d)` rows, any sharding; y: `(n,)`; mask: `(n,)` or `None` (every row counts).
      chunk_size: rows per chunk of the local kernel.
      identity: `feature_map` is the identity, so zero rows add nothing and padding needs no mask.

    Returns:
      The kernel's NamedTuple with `n` the number of rows counted.
    """
    if not is_distributed(X, y, mask):
        return _sharded_jit(kernel, feature_map, X, y, mask, chunk_size, None, (), identity)
    mesh, axes = row_mesh(X, y, mask)
    feature_map, X, y, mask = jax.tree.map(lambda a: _on_mesh(a, mesh), (feature_map, X, y, mask))
    return _sharded_jit(kernel, feature_map, X, y, mask, chunk_size, mesh, axes, identity)


def _on_mesh(a, mesh):
    """`a` as an argument of a program on `mesh`: arrays already on its devices stay (the program
    reshards them if needed); others, e.g. the arrays a feature map holds, are replicated onto it."""
    if not isinstance(a, (jax.Array, np.ndarray)):
        return a
    if isinstance(a, jax.Array) and a.sharding.device_set == set(mesh.devices.flat):
        return a
    replicated = NamedSharding(mesh, P())
    if replicated.is_fully_addressable:
        return jax.device_put(a, replicated)
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        return a  # another process's devices: jit explains the mismatch
    host = np.asarray(a)  # the same values on every process (SPMD)
    return jax.make_array_from_callback(host.shape, replicated, lambda index: host[index])


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7, 8))
def _sharded_jit(kernel, feature_map, X, y, mask, chunk_size, mesh, axes, identity):
    n = X.shape[0]
    k = math.prod(mesh.shape[a] for a in axes)
    pad = (-n) % k
    masked = mask is not None or (pad and not identity)
    w = jnp.pad(jnp.ones((n,), bool) if mask is None else mask.astype(bool), (0, pad))
    if pad:
        X = jnp.pad(X, ((0, pad), (0, 0)))
        y = jnp.pad(y, (0, pad))
    rows = None if not axes else axes[0] if len(axes) == 1 else axes

    def local(feature_map, X, y, w):
        fm = feature_map
        if masked:
            y = jnp.where(w, y, 0)
            if identity:
                X = jnp.where(w[:, None], X, 0)
            else:
                X = jnp.concatenate([X, w[:, None].astype(X.dtype)], axis=1)
                fm = jax.tree_util.Partial(_masked_features, feature_map)
        stats = kernel(fm, X, y, chunk_size)
        summed = stats._make(exact_psum(x, axes, k) for x in stats)
        count = lax.psum(jnp.sum(w, dtype=jnp.int32), axes) if axes else jnp.sum(w, dtype=jnp.int32)
        return summed._replace(n=(count if masked else jnp.asarray(n)).astype(stats.n.dtype))

    if mesh is None:
        return local(feature_map, X, y, w)
    specs = (P(), P(rows, None), P(rows), P(rows))
    return _shard_map(local, mesh, specs, P())(feature_map, X, y, w)


def _masked_features(feature_map, x):
    """Features of `x[:, :-1]` on rows whose last column is 1, zero elsewhere (padding may hold anything)."""
    return jnp.where(x[:, -1:] > 0, feature_map(x[:, :-1]), 0)
