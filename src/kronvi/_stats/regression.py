r"""Sufficient statistics of the linear-Gaussian model $y = \Phi w + \varepsilon$.

Everything the ELBO needs from the data is $n, y^\top y, \Phi^\top y, \Phi^\top\Phi$. They are
sums over rows, hence additive: the statistics of a union of data sets are the sum of theirs, K-fold
training statistics are `total - fold_k`, and streaming or multi-device accumulation is a map-reduce.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike
from scipy.linalg.blas import dsyrk, dtrmm

from .._base.buckets import FEATURE_ROWS, feature_block, feature_rows, pad_rows, to_device
from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_nonempty,
    check_xy,
    fetch,
    host_arrays,
    is_concrete,
    nonfinite_counts,
)
from .._base.precision import dot, matmul
from .._base.pytree import as_traced_callable
from .._solvers.linalg import mirror_lower
from .distributed import check_row_mask, is_distributed, sharded_row_sums


class RegressionStats(NamedTuple):
    r"""Sufficient statistics; stack on a leading axis for `vmap` over folds.

    Attributes:
      n: number of rows (a float scalar, so it flows through `grad`/`vmap` like the rest).
      yty: $y^\top y$.
      Phity: $\Phi^\top y$, shape `(b,)`.
      PhitPhi: $\Phi^\top \Phi$, shape `(b, b)`.
    """

    n: jax.Array
    yty: jax.Array
    Phity: jax.Array
    PhitPhi: jax.Array


def _nonfinite(stats: RegressionStats, name: str = "stats") -> list[str]:
    """A string "`<name>.<field>` (k of size entries)" per concrete field holding NaN or inf; tracers are skipped.
    Counted where the statistics live; only the counts reach the host."""
    fields = [(f, x) for f, x in zip(stats._fields, stats, strict=True) if is_concrete(x)]
    counts = nonfinite_counts([x for _, x in fields])
    return [
        f"`{name}.{f}` ({k} of {jnp.size(x)} entries)" for (f, x), k in zip(fields, counts, strict=True) if k
    ]


def check_stats(stats, name: str = "stats") -> int:
    r"""Validates the statistics a fit receives: a `RegressionStats` in float32 or float64 with
    `PhitPhi` of shape `(..., b, b)`, and, when the arrays are concrete (not traced inside `jit` or
    `vmap`), `n > 0` and no NaN or inf. Returns `b`.

    float16 statistics are rejected: float16 overflows at 65504 and has no Cholesky factorization.

    Raises:
      TypeError: `stats` is not a `RegressionStats` or not float32/float64.
      ValueError: `PhitPhi` has the wrong shape, `n <= 0`, or an entry is NaN or infinite.
    """
    if not isinstance(stats, RegressionStats):
        raise TypeError(f"`{name}` must be RegressionStats, got {type(stats).__name__}")
    b = stats.Phity.shape[-1]
    if stats.PhitPhi.shape[-2:] != (b, b):
        raise ValueError(f"`{name}.PhitPhi` must be ({b}, {b}), got {stats.PhitPhi.shape}")
    dtype = jnp.dtype(stats.PhitPhi.dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise TypeError(
            f"`{name}` are {dtype}: fits run in float32 or float64 (compute the statistics from float32 "
            "inputs and build the priors with `dtype=jnp.float32`)"
        )
    if is_concrete(stats.n) and bool(np.any(fetch(stats.n) <= 0)):  # n: a scalar (or one per fold)
        raise ValueError(f"`{name}.n` must be positive: the statistics describe empty data")
    bad = _nonfinite(stats, name)
    if bad:
        raise ValueError(
            f"`{name}` contains NaN or infinite values: {', '.join(bad)} "
            "(statistics that overflowed: compute them in float32/float64 or rescale the inputs)"
        )
    return b


def merge_stats(a: RegressionStats, b: RegressionStats) -> RegressionStats:
    """Statistics of the union of two disjoint data sets (the reduce step of a map-reduce)."""
    _check_compatible(a, b)
    return jax.tree.map(jnp.add, a, b)


def subtract_stats(a: RegressionStats, b: RegressionStats) -> RegressionStats:
    """Statistics of `a`'s data without the subset `b` (e.g. K-fold training = total - fold)."""
    _check_compatible(a, b)
    if is_concrete(a.n) and is_concrete(b.n) and bool(np.any(fetch(b.n) > fetch(a.n))):
        raise ValueError(
            f"`b` has more rows ({np.asarray(fetch(b.n)).tolist()}) than `a` ({np.asarray(fetch(a.n)).tolist()}): "
            "it must be a subset of `a`'s data"
        )
    return jax.tree.map(jnp.subtract, a, b)


def _check_compatible(a, b):
    if a.PhitPhi.shape[-1] != b.PhitPhi.shape[-1]:
        raise ValueError(
            f"statistics have different feature counts: {a.PhitPhi.shape[-1]} vs {b.PhitPhi.shape[-1]}"
        )


def _two_sum(s, c, x):
    """Kahan-Babuska (Neumaier) compensated addition of `x` into running sum `s` with error `c`."""
    t = s + x
    c = c + jnp.where(jnp.abs(s) >= jnp.abs(x), (s - t) + x, (x - t) + s)
    return t, c


def _validate_xy(
    X: ArrayLike, y: ArrayLike, xname: str, mask: ArrayLike | None = None
) -> tuple[jax.Array, jax.Array]:
    for name, a in ((xname, X), ("y", y)):  # before as_float_array, which calls bfloat16 no number
        dt = getattr(a, "dtype", None)
        if dt is not None and jnp.issubdtype(dt, jnp.floating) and jnp.dtype(dt) not in (jnp.float32, jnp.float64):
            raise TypeError(
                f"`{name}` is {jnp.dtype(dt)}: statistics are sums over rows, computed in float32 or float64 (a "
                "float16 row count stops at 2048); cast it with `.astype(np.float32)`"
            )
    y = as_float_array(y, "y")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    X, y = check_xy(X, y, xname)
    check_nonempty(X, xname)
    if X.shape[1] == 0:
        raise ValueError(f"`{xname}` has no columns (shape {tuple(X.shape)})")
    if mask is None and not is_distributed(X, y):  # others are checked through their statistics
        check_finite(X, xname)
        check_finite(y, "y")
    dtype = jnp.result_type(X, y)
    return X.astype(dtype), y.astype(dtype)


def regression_stats(
    Phi: ArrayLike, y: ArrayLike, *, chunk_size: int | None = None, mask: ArrayLike | None = None
) -> RegressionStats:
    r"""Sufficient statistics $(n, y^\top y, \Phi^\top y, \Phi^\top\Phi)$ of a data set.

    Rows are processed in chunks of `chunk_size` inside `lax.scan`; the running sums are
    compensated (Neumaier summation), so float32 statistics of millions of rows keep float32 accuracy
    rather than losing digits with `n`. Working memory beyond the input is
    $O(\text{chunk}\cdot b + b^2)$. Use `regression_stats_from_inputs` to compute features
    chunk by chunk so that the `n x b` feature matrix never exists.

    For an accurate ELBO, centre `y` (subtract its training mean): the expected residual
    $y^\top y - 2\bar w^\top \Phi^\top y + \dots$ cancels, and that cancellation is milder when
    $y^\top y$ is not dominated by the mean.

    Sharded inputs: when `Phi` and `y` are global `jax.Array` s split over the rows of a mesh (any
    sharding, e.g. `NamedSharding(mesh, P("rows"))`, on one process or across processes after
    `jax.distributed.initialize`), every device accumulates its own rows and the results are summed
    across devices with one rounding, so the statistics equal the single-device ones; they come back
    replicated on every device. Use `mask` for padding rows (shards are equal in size). Recipe:
    `docs/gpus.md`; why: `docs/decisions/precision.md#statistics-over-many-devices-and-processes`;
    streaming from files: `regression_stats_from_chunks`.

    Args:
      Phi: features `(n, b)`.
      y: targets `(n,)`.
      chunk_size: rows per chunk (per device when sharded); `None` splits the rows into equal chunks of at most 4096.
      mask: optional `(n,)` booleans, sharded like `y`: the rows to count (`False` marks padding,
        which may hold any values). `n` counts the `True` rows.

    Returns:
      `RegressionStats` in the dtype of the inputs.

    Raises:
      ValueError: for bad shapes or NaN/inf inputs, and when a statistic overflows the dtype (e.g. float32
        `Phi^T Phi` above 3.4e38); the check is skipped when called inside `jit`.
      TypeError: inputs in a precision other than float32 or float64 (float16, bfloat16).

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> s = kronvi.stats.regression_stats(jnp.ones((5, 2)), jnp.arange(5.0))
      >>> float(s.n), float(s.yty), s.Phity.tolist()
      (5.0, 30.0, [10.0, 10.0])
    """
    chunk_size = check_chunk_size(chunk_size)
    Phi, y = _validate_xy(Phi, y, "Phi", mask)
    return _chunked_stats(_identity, Phi, y, chunk_size, "Phi", mask)


def regression_stats_from_inputs(
    feature_map: Callable[[jax.Array], jax.Array],
    X: ArrayLike,
    y: ArrayLike,
    *,
    chunk_size: int | None = None,
    mask: ArrayLike | None = None,
) -> RegressionStats:
    r"""Statistics of `feature_map(X)` computed chunk by chunk: memory $O(\text{chunk}\cdot b + b^2)$.

    Args:
      feature_map: a pure function `(c, d) -> (c, b)`, e.g. `functools.partial(rff_features, params)`;
        the arrays bound in a `functools.partial` / `jax.tree_util.Partial` are traced, so new
        parameters (another fold's feature map) do not recompile.
      X: raw inputs `(n, d)`; may be sharded over rows as in `regression_stats`.
      y: targets `(n,)`.
      chunk_size: rows per chunk (per device when sharded); `None` splits the rows into equal chunks of at most 4096.
      mask: optional `(n,)` booleans: the rows to count (`False` marks padding).
    """
    chunk_size = check_chunk_size(chunk_size)
    X, y = _validate_xy(X, y, "X", mask)
    _check_feature_map(feature_map, X, chunk_size)
    return _chunked_stats(feature_map, X, y, chunk_size, "X", mask)


def _check_feature_map(feature_map, X, chunk_size) -> None:
    """`TypeError` / `ValueError` naming `feature_map` unless it maps `(c, d)` rows to `(c, b)` features; by
    shape (the jitted `_feature_chunk`'s, cached: a map rebuilt by `functools.partial` is not traced again)."""
    if not callable(feature_map):
        raise TypeError(f"`feature_map` must be a function (c, d) -> (c, b), got {type(feature_map).__name__}")
    rows = min(X.shape[0], _chunk_rows(X.shape[0], chunk_size))
    out = _feature_chunk.eval_shape(as_traced_callable(feature_map), jax.ShapeDtypeStruct((rows, X.shape[1]), X.dtype))
    shape = getattr(out, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != rows:
        raise ValueError(
            f"`feature_map` must map (c, d) inputs to (c, b) features: ({rows}, {X.shape[1]}) gave "
            f"{shape if shape is not None else type(out).__name__}"
        )


def stats_from_inputs(feature_map, X, y, *, chunk_size=None, mask=None) -> RegressionStats:
    """`regression_stats_from_inputs` for kronvi's own feature maps and a checked `chunk_size`: the rows
    checked, not the map's shapes."""
    X, y = _validate_xy(X, y, "X", mask)
    return _chunked_stats(feature_map, X, y, chunk_size, "X", mask)


def check_chunk_size(chunk_size) -> int | None:
    """`chunk_size` as an int >= 1, or `None`; `ValueError` naming it otherwise."""
    return None if chunk_size is None else check_int(chunk_size, "chunk_size", 1)


def _chunk_rows(n: int, chunk_size: int | None) -> int:
    """`chunk_size` as an int; `None`: equal chunks of at most 4096 rows (no remainder pass where `n` allows)."""
    return int(-(-n // max(1, -(-n // 4096))) if chunk_size is None else chunk_size)


def _identity(x):
    return x


def _chunked_stats(feature_map, X, y, chunk_size, xname="X", mask=None):
    n = X.shape[0]
    chunk_size = _chunk_rows(n, chunk_size)
    if chunk_size < 1:
        raise ValueError(f"`chunk_size` must be >= 1, got {chunk_size}")
    fm = as_traced_callable(feature_map)
    mask = check_row_mask(mask, n)
    traced_map = any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(fm))  # jax.grad in its parameters
    if mask is None and not is_distributed(X, y) and _on_host(X, y) and not traced_map:
        stats = _host_stats(fm, X, y, chunk_size)
    elif mask is None and not is_distributed(X, y):
        stats = _chunked_stats_jit(fm, X, y, chunk_size)
    else:  # sharded over devices or processes, or padded
        identity = feature_map is _identity
        stats = sharded_row_sums(_chunked_stats_jit, fm, X, y, mask, chunk_size, identity=identity)
    bad = _nonfinite(stats)
    if bad:
        unchecked = mask is not None or is_distributed(X, y)
        note = f"; `{xname}` or `y` may hold NaN/inf (unchecked if sharded or masked)" if unchecked else ""
        raise ValueError(
            f"statistics overflowed in {stats.PhitPhi.dtype}: {', '.join(bad)} not finite; use "
            f"{'float64' if stats.PhitPhi.dtype == jnp.float32 else 'smaller values'} or rescale `{xname}` and "
            f"`y`{note}"
        )
    return stats


def _on_host(X, y) -> bool:
    """Concrete float32/float64 inputs in host memory (a CPU device): the products go to the host BLAS."""
    return X.dtype in (jnp.float32, jnp.float64) and host_arrays(X, y) is not None


@jax.jit
def _feature_chunk(feature_map, x):
    return feature_map(x)


def host_features(feature_map, x, chunk_size=None):
    """`feature_map(x)` as a NumPy array, `x` NumPy with at most `chunk_size` rows: a whole chunk at once, up
    to 1,024 rows padded with zero rows to `feature_rows(rows, chunk_size)`, other row counts in blocks of
    `feature_block(rows)` rows (the last padded). One program for every row count up to 1,024 and one per
    block size above, whatever the row count; the features of each row are its own."""
    rows = x.shape[0]
    if rows == chunk_size or rows <= FEATURE_ROWS:
        size = feature_rows(rows, chunk_size)
        return np.asarray(jax.device_get(_feature_chunk(feature_map, pad_rows(x, size))))[:rows]
    block, out = feature_block(rows), None
    for start in range(0, rows, block):
        part = x[start : start + block]
        F = np.asarray(jax.device_get(_feature_chunk(feature_map, pad_rows(part, block))))
        if out is None:
            out = np.empty((rows, F.shape[1]), F.dtype)
        out[start : start + part.shape[0]] = F[: part.shape[0]]
    return out


def host_whitened_stats(kernel_map, whiten, offset, X, y, *, chunk_size: int | None) -> RegressionStats:
    r"""`regression_stats_from_inputs` of the features $W k(x) - \mu$ for concrete float64 `X` and `y` in host
    memory, `whiten` $W$ a lower-triangular float64 `(b, b)` matrix (Nyström features: $L^{-1}$) and `offset`
    $\mu$ `(b,)`: the rows `kernel_map(x)` `(c, b)` from XLA, the triangular product ($cb^2$ multiply-adds,
    half a general product's) and the rank-k update in the host BLAS."""
    chunk_size = _chunk_rows(X.shape[0], chunk_size)
    post = np.asfortranarray(np.asarray(whiten, np.float64)), np.asarray(offset, np.float64)
    stats = _host_stats(as_traced_callable(kernel_map), X, y, chunk_size, post=post)
    bad = _nonfinite(stats)
    if bad:
        raise ValueError(
            f"statistics of the whitened features overflowed in float64: {', '.join(bad)} not finite; `X`, `y` or "
            "the features' `whiten` hold values too large"
        )
    return stats


def _host_stats(feature_map, X, y, chunk_size, *, post=None):
    r"""The statistics with the products in the host BLAS (NumPy), the features from `feature_map` in
    chunks. XLA's CPU matrix product runs at a fraction of the BLAS rate in float64
    (`docs/decisions/gp-step.md#the-statistics-pass`), and $\Phi^\top\Phi$ as
    `F.T @ F` is a symmetric rank-k update (half the flops of a general product). In float64 each chunk's
    update is BLAS's `dsyrk` into the upper triangle of one accumulator, in place (NumPy's `F.T @ F`
    returns a new full b x b matrix per chunk, which the sum then reads again: at b = 4000 that is 128 MB
    written and read twice per 4,096 rows). Float32 chunk results are summed in float64, so float32
    statistics carry only each chunk's float32 rounding."""
    n = X.shape[0]
    Xh, yh = host_arrays(X, y)
    identity = isinstance(feature_map, jax.tree_util.Partial) and feature_map.func is _identity
    A = B = None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported by the caller's check
        for start in range(0, n, chunk_size):
            x, yc = Xh[start : start + chunk_size], yh[start : start + chunk_size]
            # a chunk shorter than `chunk_size` (the last) is padded to a bucket of row counts and its
            # features cut back: one program per bucket, not one per remainder
            F = x if identity else host_features(feature_map, x, chunk_size)
            if post is not None:  # F W^T - offset, W lower triangular (`host_whitened_stats`)
                F = dtrmm(1.0, post[0], F, side=1, lower=1, trans_a=1)
                F -= post[1]
            if A is None:  # Fortran order: `dsyrk` updates it in place
                A, B = np.zeros((F.shape[1],) * 2, order="F"), np.zeros(F.shape[1])
            if F.dtype == np.float64:  # the upper triangle, added in place: no b x b temporary per chunk
                A = dsyrk(1.0, F.T, beta=1.0, c=A, trans=0, lower=0, overwrite_c=1)
            else:  # float32 products, summed in float64
                A += F.T @ F
            B += F.T @ yc.astype(F.dtype)
        y64 = yh.astype(np.float64)
        A = mirror_lower(A.T).T if F.dtype == np.float64 else 0.5 * (A + A.T)  # dsyrk filled the upper triangle
        yty = y64 @ y64
    dtype = np.dtype(X.dtype)  # cast by NumPy, then placed: no program to compile
    return RegressionStats(*to_device(tuple(np.asarray(v, dtype) for v in (n, yty, B, A))))


@functools.partial(jax.jit, static_argnums=(3,))
def _chunked_stats_jit(feature_map, X, y, chunk_size):
    # Full chunks run in a scan; the remainder (< chunk_size rows) is one more chunk. No padding: a padded
    # copy of the input would cost as much memory traffic as the matmul itself.
    n, d = X.shape
    num_full = n // chunk_size
    n_full = num_full * chunk_size

    def chunk_stats(x, yy):
        F = feature_map(x)
        return (dot(yy, yy), matmul(F.T, yy), matmul(F.T, F))

    def add(acc, new):
        pairs = [_two_sum(s, c, x) for s, c, x in zip(*acc, new, strict=True)]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

    zeros = tuple(jnp.zeros(a.shape, a.dtype) for a in jax.eval_shape(chunk_stats, X[:1], y[:1]))
    acc = (zeros, zeros)  # compensated running (sums, errors)
    if num_full:
        Xc = X[:n_full].reshape(num_full, chunk_size, d)
        yc = y[:n_full].reshape(num_full, chunk_size)
        acc, _ = lax.scan(lambda a, xs: (add(a, chunk_stats(*xs)), None), acc, (Xc, yc))
    if n_full < n:
        acc = add(acc, chunk_stats(X[n_full:], y[n_full:]))
    sums = tuple(s_ + c for s_, c in zip(*acc, strict=True))
    yty, Phity, PhitPhi = sums
    PhitPhi = 0.5 * (PhitPhi + PhitPhi.T)
    return RegressionStats(jnp.asarray(n, X.dtype), yty, Phity, PhitPhi)


def kfold_stats(
    Phi: ArrayLike, y: ArrayLike, folds: ArrayLike, *, chunk_size: int | None = None
) -> tuple[RegressionStats, RegressionStats]:
    r"""Training and test statistics of every fold from one pass over the data.

    Args:
      Phi: features `(n, b)`.
      y: targets `(n,)`.
      folds: integer fold index per row `(n,)` in `[0, K)`; every fold must be non-empty.

    Returns:
      `(train, test)`: two `RegressionStats` stacked on a leading fold axis `(K, ...)`, with
      `train[k] = total - test[k]`, ready for `jax.vmap` over folds.
    """
    Phi, y = _validate_xy(Phi, y, "Phi")
    folds = _check_folds(folds, Phi.shape[0])
    return _stack_folds(_identity, Phi, y, folds, chunk_size, "Phi")


def kfold_stats_from_inputs(
    feature_map: Callable[[jax.Array], jax.Array],
    X: ArrayLike,
    y: ArrayLike,
    folds: ArrayLike,
    *,
    chunk_size: int | None = None,
) -> tuple[RegressionStats, RegressionStats]:
    r"""`kfold_stats` of `feature_map(X)`, the features built chunk by chunk (as in
    `regression_stats_from_inputs`): one pass over the rows. Memory: the `K` statistics,
    $O(K b^2)$, plus one fold's copy of the inputs at a time (no feature matrix).

    Args:
      feature_map: a pure function `(c, d) -> (c, b)`.
      X: raw inputs `(n, d)`.
      y: targets `(n,)`.
      folds: integer fold index per row `(n,)` in `[0, K)`; every fold must be non-empty.

    Returns:
      `(train, test)` stacked on a leading fold axis, `train[k] = total - test[k]`; the statistics of
      all rows are `jax.tree.map(lambda t: t.sum(0), test)`.
    """
    chunk_size = check_chunk_size(chunk_size)
    X, y = _validate_xy(X, y, "X")
    _check_feature_map(feature_map, X, chunk_size)
    folds = _check_folds(folds, X.shape[0])
    return _stack_folds(feature_map, X, y, folds, chunk_size)


def _check_folds(folds, n):
    folds = np.asarray(fetch(folds))  # one index per row, needed on the host to split the rows
    if folds.shape != (n,):
        raise ValueError(f"`folds` must have shape ({n},), got {folds.shape}")
    if not np.issubdtype(folds.dtype, np.integer) or folds.min() < 0:
        raise ValueError("`folds` must hold non-negative integer fold indices")
    counts = np.bincount(folds, minlength=int(folds.max()) + 1)
    if np.any(counts == 0):
        raise ValueError(f"`folds` leaves fold(s) {np.flatnonzero(counts == 0).tolist()} empty")
    return folds


def _stack_folds(feature_map, X, y, folds, chunk_size, xname="X"):
    K = int(folds.max()) + 1
    test = [_chunked_stats(feature_map, X[folds == k], y[folds == k], chunk_size, xname) for k in range(K)]
    test = jax.tree.map(lambda *xs: jnp.stack(xs), *test)
    total = jax.tree.map(lambda x: jnp.sum(x, axis=0), test)
    train = jax.tree.map(lambda t, x: t[None] - x, total, test)
    return train, test
