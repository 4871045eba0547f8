r"""The row counts that row-dependent programs are padded to, so that a new number of rows reuses a program.

XLA compiles a program per input shape. A program whose shape follows the number of training rows (the GP
likelihood, the features of every row, the test rows' density) would compile again for every data set size
and for every fold whose size differs by one row. Padded to one of a few sizes, with the padding given no
weight, a new row count reuses the program of its bucket. `row_bucket(n)` is the smallest bucket holding
`n` rows: $2^k$ up to `minimum`, then `steps` sizes per doubling ($2^k (1 + j/\text{steps})$), so the
padding is at most a fraction $1/\text{steps}$ of the rows.
"""

from __future__ import annotations

import jax
import numpy as np

from .checks import host_arrays, is_concrete


def row_bucket(n: int, *, steps: int = 2, minimum: int = 8) -> int:
    """The smallest size `>= n` of the form `2**k` (`<= minimum`) or `2**k * (1 + j / steps)`, `0 <= j <
    steps` (above `minimum`): `steps = 1` gives powers of two, `steps = 2` sizes at most 50% above `n`,
    `steps = 4` at most 25%.

    Example:
      >>> from kronvi._base.buckets import row_bucket
      >>> [row_bucket(n, steps=1) for n in (1, 5, 100, 927)], [row_bucket(n, steps=4) for n in (100, 834, 927)]
      ([1, 8, 128, 1024], [112, 896, 1024])
    """
    n = int(n)
    if n <= minimum:
        return 1 << max(0, (n - 1).bit_length())
    k = (n - 1).bit_length() - 1  # 2**k < n <= 2**(k + 1)
    step = max(1, (1 << k) // steps)
    return -(-n // step) * step


# Programs of a fit's features (their mean, the statistics pass) run on at least this many rows: any
# training set up to it, and a new row count within it, reuses one program. Computing the features of a
# few hundred rows of zeros costs milliseconds; compiling the program again costs tenths of a second
# (`docs/decisions/compilation.md#a-new-row-count-compiles-nothing`).
FEATURE_ROWS = 1024


def feature_rows(n: int, cap: int | None = None) -> int:
    """The rows a features program of a fit is padded to for `n` rows: `row_bucket(max(n, FEATURE_ROWS))`,
    at most `cap` (a chunk size; at least `n`).

    Example:
      >>> from kronvi._base.buckets import feature_rows
      >>> [feature_rows(n) for n in (10, 741, 1024, 1100)], feature_rows(300, cap=512)
      ([1024, 1024, 1024, 1536], 512)
    """
    size = row_bucket(max(int(n), FEATURE_ROWS))
    return size if cap is None else max(min(size, int(cap)), int(n))


def pad_rows(a, size: int, value=0):
    """NumPy `a` with its first axis padded to `size` rows of `value` (no copy when it has them already)."""
    a = np.asarray(a)
    if a.shape[0] == size:
        return a
    out = np.full((size, *a.shape[1:]), value, a.dtype)
    out[: a.shape[0]] = a
    return out


def on_row_bucket(program, n: int, rows: tuple, *args, steps: int = 2):
    """`program(*rows, *args)` with each array of `rows` (`n` rows each, concrete and in host memory) padded
    to `row_bucket(n, steps=steps)` rows of zeros, and every output cut back to its first `n` rows, on the
    host: for programs that compute each row on its own (features, standardizing, predictions), whose
    padding rows change no real row. Arrays elsewhere (an accelerator), and any traced argument, run
    unpadded."""
    views = host_arrays(*rows)
    size = row_bucket(n, steps=steps)
    traced = any(not is_concrete(a) for a in jax.tree.leaves(args))  # differentiated, say: run as it is
    if views is None or traced or size == n:
        return program(*rows, *args)
    out = program(*(to_device(pad_rows(v, size)) for v in views), *args)
    return jax.tree.map(lambda a: to_device(jax.device_get(a)[:n]), out)


def to_device(a):
    """A NumPy array, or every leaf of a pytree of them, on JAX's default device (its dtype canonicalized as
    `jnp.asarray` would: float64 becomes float32 unless x64 is on), compiling nothing: `jnp.asarray` of a
    NumPy array compiles a copy program per shape."""
    return jax.tree.map(lambda leaf: jax.device_put(np.asarray(leaf)), a)
