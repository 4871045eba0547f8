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


def choice_rows(key, n: int, m: int) -> np.ndarray | jax.Array:
    """The rows `jax.random.choice(key, n, (m,), replace=False)` draws, in its order, as a NumPy array computed
    in NumPy (a traced `key`: `jax.random.choice` itself): no program per `n`.

    `jax.random.choice` without replacement is the first `m` of `jax.random.permutation(key, n)`, which sorts
    `arange(n)` by 32 random bits per row, in `ceil(3 log n / log(2^32 - 1))` rounds, splitting a key off
    each time. With JAX's default threefry and `jax_threefry_partitionable` (the default), a split and the
    bits of row `i` are Threefry-2x32 of the key at counters `(0, i)` (the bits: the two output words' xor),
    which `_threefry2x32` computes here; rows are sorted stably. XLA's sort is not stable: where two rows'
    bits tie (probability about `n**2 / 2**33`), or with another generator, it is `jax.random.choice`'s draw.

    Example:
      >>> import jax, numpy as np
      >>> from kronvi._base.buckets import choice_rows
      >>> key = jax.random.key(0)
      >>> bool(np.array_equal(choice_rows(key, 1100, 1000), jax.random.choice(key, 1100, (1000,), replace=False)))
      True
    """
    rows = _threefry_permutation(key, n) if is_concrete(key) else None
    if rows is not None:
        return rows[:m]
    draw = jax.random.choice(key, n, (m,), replace=False)
    return np.asarray(draw) if is_concrete(key) else draw


def _threefry_permutation(key, n: int) -> np.ndarray | None:
    """`jax.random.permutation(key, n)` of a concrete threefry key in NumPy; `None` for another generator or
    where two rows' bits tie (XLA's unstable sort decides their order)."""
    words = _threefry_key(key)
    if words is None:
        return None
    rounds = int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))
    rows, counters = np.arange(n), np.arange(n, dtype=np.uint32)
    for _ in range(rounds):
        a, b = _threefry2x32(words, np.zeros(2, np.uint32), np.arange(2, dtype=np.uint32))
        words, subkey = (a[0], b[0]), (a[1], b[1])
        bits = np.bitwise_xor(*_threefry2x32(subkey, np.zeros(n, np.uint32), counters))
        order = np.argsort(bits, kind="stable")
        if np.any(bits[order[1:]] == bits[order[:-1]]):
            return None
        rows = rows[order]
    return rows


def _threefry_key(key):
    """The two uint32 words of a threefry key (typed or raw) under partitionable threefry, else `None`."""
    if not jax.config.jax_threefry_partitionable:
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if "threefry" not in str(jax.random.key_impl(key)):
            return None
        data = np.asarray(jax.random.key_data(key))
    else:
        if jax.config.jax_default_prng_impl != "threefry2x32":
            return None
        data = np.asarray(key)
    if data.shape != (2,) or data.dtype != np.uint32:
        return None
    return data[0], data[1]


def _threefry2x32(key, x1, x2):
    """Threefry-2x32 (20 rounds; Salmon et al. 2011, as `jax.random`'s) of counters `(x1, x2)` (uint32
    arrays) under the key's two words; uint32 arithmetic wraps as the hash needs."""
    k1, k2 = np.uint32(key[0]), np.uint32(key[1])
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x1 = x1 + x2
            x2 = ((x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r))) ^ x1
        x1, x2 = x1 + ks[(i + 1) % 3], x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


# Above FEATURE_ROWS rows, a features program runs on blocks of FEATURE_ROWS rows times a power of two,
# at most this many blocks.
_MAX_FEATURE_BLOCKS = 64


def feature_block(n: int) -> int:
    """The rows of each block in which a features program of a fit runs over `n` rows (the last block padded):
    `FEATURE_ROWS` times the smallest power of two that covers `n` in at most 64 blocks (`FEATURE_ROWS`, one
    block, up to that many rows). A new row count reuses the program of its block size, one size per 64-fold
    range of rows.

    Example:
      >>> from kronvi._base.buckets import feature_block
      >>> [feature_block(n) for n in (10, 1030, 65_536, 65_537, 1_000_000)]
      [1024, 1024, 1024, 2048, 16384]
    """
    blocks = -(-int(n) // (FEATURE_ROWS * _MAX_FEATURE_BLOCKS))
    return FEATURE_ROWS << max(0, (blocks - 1).bit_length())


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


def to_device(a, dtype=None):
    """A NumPy array (or anything `np.asarray` takes), or every leaf of a pytree of them, on JAX's default
    device, cast by NumPy to `dtype` if given (its dtype then canonicalized as `jnp.asarray` would: float64
    becomes float32 unless x64 is on), compiling nothing: `jnp.asarray` of a NumPy array, or a cast in JAX,
    compiles a program per shape. A list or tuple is a pytree (each item placed on its own): pass
    `np.asarray(items)` for one array."""
    return jax.tree.map(lambda leaf: jax.device_put(np.asarray(leaf, dtype)), a)
