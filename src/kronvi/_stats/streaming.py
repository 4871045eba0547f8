r"""Statistics of a stream of row blocks: data sets larger than memory, one block at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .regression import RegressionStats, merge_stats, regression_stats, regression_stats_from_inputs


def regression_stats_from_chunks(
    chunks: Iterable[tuple[ArrayLike, ...]],
    *,
    feature_map: Callable[[jax.Array], jax.Array] | None = None,
    chunk_size: int | None = None,
) -> RegressionStats:
    r"""Sufficient statistics of the rows of every block an iterator yields, one block in memory at a time.

    Each block's statistics come from `regression_stats` (or `regression_stats_from_inputs`
    with `feature_map`), compensated within the block, and the blocks are merged with
    `merge_stats` while the rounding error of every merge is carried along (Neumaier summation
    across blocks), so the result matches the one-shot statistics to the dtype's accuracy whatever the
    number of blocks. A block may be a global `jax.Array` sharded over devices or processes, as in
    `regression_stats`: then every process reads its own rows of each block.

    Args:
      chunks: an iterable of `(X, y)` or `(X, y, mask)` blocks: `X` features `(c, b)` (raw inputs
        `(c, d)` with `feature_map`), `y` targets `(c,)`, `mask` optional `(c,)` booleans of
        the rows to count. Blocks may differ in length (each new length compiles once); a block of no
        rows is skipped.
      feature_map: optional pure function `(c, d) -> (c, b)` applied to each block's `X`.
      chunk_size: rows per chunk within a block; `None` picks `min(c, 4096)`.

    Returns:
      `RegressionStats` of all the rows, in the dtype of the blocks.

    Raises:
      ValueError: `chunks` yields no rows, or a block is not `(X, y)` / `(X, y, mask)`, or a block is
        bad or its statistics are not finite (the message names the argument and the block).

    Example:
      A file too large for memory, read through a memory map one block of rows at a time:

      >>> import os, tempfile
      >>> import numpy as np, kronvi
      >>> path = os.path.join(tempfile.mkdtemp(), "rows.npy")
      >>> np.save(path, np.arange(24.0, dtype=np.float32).reshape(8, 3))  # 2 features, then y
      >>> def blocks(path, rows=3):
      ...     data = np.load(path, mmap_mode="r")  # nothing read yet
      ...     for start in range(0, data.shape[0], rows):
      ...         block = np.asarray(data[start : start + rows])  # only these rows in memory
      ...         yield block[:, :2], block[:, 2]
      >>> s = kronvi.stats.regression_stats_from_chunks(blocks(path))
      >>> float(s.n), s.Phity.tolist()
      (8.0, [1428.0, 1528.0])
    """
    total = errors = None
    count = empty = 0
    for count, block in enumerate(chunks, start=1):
        X, y, mask = _unpack(block, count - 1)
        if np.ndim(X) >= 1 and np.shape(X)[0] == 0 and np.shape(y)[:1] == (0,):  # e.g. a file's last block
            empty += 1
            continue
        try:
            if feature_map is None:
                stats = regression_stats(X, y, chunk_size=chunk_size, mask=mask)
            else:
                stats = regression_stats_from_inputs(feature_map, X, y, chunk_size=chunk_size, mask=mask)
        except ValueError as e:
            raise ValueError(f"{e} (block {count - 1} of `chunks`)") from None
        if total is None:
            total, errors = stats, jax.tree.map(jnp.zeros_like, stats)
        else:
            total, errors = _merge_compensated(total, errors, stats)
    if total is None:
        raise ValueError(
            f"`chunks` yielded no rows ({empty} empty block(s))" if empty else "`chunks` yielded no blocks of rows"
        )
    return _finish(total, errors)


def _unpack(block, index):
    if isinstance(block, (tuple, list)) and len(block) in (2, 3):
        X, y, *mask = block
        return X, y, (mask[0] if mask else None)
    raise ValueError(
        f"`chunks` must yield (X, y) or (X, y, mask) blocks; block {index} is a {type(block).__name__}"
        + (f" of length {len(block)}" if isinstance(block, (tuple, list)) else "")
    )


@jax.jit
def _merge_compensated(total, errors, stats):
    """`merge_stats(total, stats)` and the running sum of its rounding errors (Neumaier's two-sum)."""
    merged = merge_stats(total, stats)
    lost = jax.tree.map(
        lambda s, x, t: jnp.where(jnp.abs(s) >= jnp.abs(x), (s - t) + x, (x - t) + s), total, stats, merged
    )
    return merged, merge_stats(errors, lost)


@jax.jit
def _finish(total, errors):
    return merge_stats(total, errors)
