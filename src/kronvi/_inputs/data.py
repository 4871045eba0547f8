r"""Data handling: loading regression data sets, cross-validation folds and input standardization.

Loading happens once, eagerly, in NumPy float64 (the files are small text tables); everything downstream
is JAX. The UCI folder format is `data.csv.gz` (comma-separated, no header, the last column is the target)
plus `test_mask.csv.gz` (an `n x K` 0/1 matrix whose column `k` marks the test rows of fold `k`).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import importlib.resources
import io
import itertools
import os
import zlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base.buckets import on_row_bucket, pad_rows, row_bucket, to_device
from .._base.checks import as_float_array, check_finite, check_ndim, check_nonempty, host_arrays

# ----------------------------------------------------------------------------------------------------
# Standardization


class Standardizer(NamedTuple):
    r"""Per-column affine map $x \mapsto (x - \text{mean}) / \text{scale}$.

    Attributes:
      mean: `(d,)` column means of the training inputs.
      scale: `(d,)` column standard deviations, with 1 for constant columns.
    """

    mean: jax.Array
    scale: jax.Array


def fit_standardizer(X: ArrayLike) -> Standardizer:
    r"""Column means and standard deviations of the training inputs `X`.

    A column whose standard deviation is zero up to rounding ($\sigma_d \le 100\,\epsilon\,|\mu_d|$,
    with $\epsilon$ the machine epsilon of the dtype) is constant: it gets `scale = 1`, so that
    `standardize` maps it to zeros instead of NaN or inf.

    The moments are computed on each column divided by the power of two just above its largest
    magnitude, then scaled back: exact (a power-of-two scaling rounds nothing), and finite for every
    finite column, where squaring the raw values would overflow above about `1.8e19` (float32) or
    `1.3e154` (float64).

    Args:
      X: Training inputs `(n, d)`, `n >= 1`. Fit on training rows only, then apply to both splits.

    Returns:
      Standardizer: `mean` and `scale`, both `(d,)`, in the dtype of `X`.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> st = kronvi.inputs.fit_standardizer(jnp.array([[1.0, 5.0], [3.0, 5.0]]))
      >>> st.mean.tolist(), st.scale.tolist()
      ([2.0, 5.0], [1.0, 1.0])
      >>> kronvi.inputs.standardize(st, jnp.array([[3.0, 5.0]])).tolist()
      [[1.0, 0.0]]
    """
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    check_nonempty(X, "X")
    check_finite(X, "X")
    n = X.shape[0]
    views = host_arrays(X)
    if views is not None:  # zero rows of weight 0 up to a bucket: one program per bucket of row counts
        size = row_bucket(n)
        w = np.zeros(size, views[0].dtype)
        w[:n] = 1
        return Standardizer(*_moments(to_device(pad_rows(views[0], size)), to_device(w)))
    X = jnp.asarray(X)
    return Standardizer(*_moments(X, jnp.ones(n, X.dtype)))


@jax.jit
def _moments(X, w):
    """`fit_standardizer`'s mean and scale over the rows of weight `w` = 1 (padding rows are zeros of weight
    0), in one program (as separate operations, each compiled on its first call for a shape: about 0.4 s of
    a first fit)."""
    unit = jnp.ldexp(jnp.ones((), X.dtype), jnp.frexp(jnp.max(jnp.abs(X), axis=0))[1])  # 2^e >= max |x|
    Z = X / unit
    count = jnp.sum(w)
    mean = jnp.sum(Z, axis=0) / count  # padding rows are zeros
    std = jnp.sqrt(jnp.sum(w[:, None] * (Z - mean) ** 2, axis=0) / count)
    eps = jnp.finfo(X.dtype).eps
    constant = ~(std > 100 * eps * jnp.abs(mean))
    return mean * unit, jnp.where(constant, jnp.ones_like(std), std * unit)


def standardize(st: Standardizer, X: ArrayLike) -> jax.Array:
    r"""Applies $(X - \text{mean}) / \text{scale}$ column-wise.

    Args:
      st: A `Standardizer` from `fit_standardizer`.
      X: Inputs `(n, d)` with the same `d` as the standardizer.

    Returns:
      jax.Array: Standardized inputs `(n, d)`.
    """
    if not isinstance(st, Standardizer):
        raise TypeError(f"`st` must be a Standardizer, got {type(st).__name__}")
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    if X.shape[1] != st.mean.shape[-1]:
        raise ValueError(f"`X` has {X.shape[1]} columns but the standardizer was fit on {st.mean.shape[-1]}")
    return on_row_bucket(_standardize, X.shape[0], (X,), st)


@jax.jit
def _standardize(X, st):
    return (X - st.mean) / st.scale


# ----------------------------------------------------------------------------------------------------
# Reading tables


MAX_INFLATED_BYTES = 2**30  # the default cap on a gzip file's decompressed size: 1 GiB
_BLOCK_VALUES = 2**16  # numbers parsed into one float64 block: bounds the memory of Python objects


class _Capped(io.RawIOBase):
    """A binary stream of at most `limit` bytes of `raw` (a decompressing reader); `ValueError` naming
    `name` as soon as more would be read."""

    def __init__(self, raw, limit: int, name: str):
        self._raw, self._limit, self._name, self._count = raw, limit, name, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        n = self._raw.readinto(buffer)
        self._count += n or 0
        if self._count > self._limit:
            raise _too_big(self._name, self._limit)
        return n


def _too_big(name: str, limit: int) -> ValueError:
    return ValueError(
        f"{name}: the gzip data inflate to more than `max_inflated_bytes`={limit} bytes (a compression "
        "bomb, or a larger table than expected: pass a larger `max_inflated_bytes`, or None for no limit, "
        "if you trust the file)"
    )


def _corrupt(name: str, e: BaseException, where: str = "") -> ValueError:
    return ValueError(f"{name}: truncated or corrupt gzip data{where} ({type(e).__name__}: {e})")


def _check_inflated_size(f, name: str, limit: int) -> None:
    """Inflates the gzip data of the seekable binary file `f` without keeping them (fast, constant
    memory) and raises as soon as they pass `limit` bytes; then seeks `f` back."""
    start = f.tell()
    total = 0
    try:
        with gzip.GzipFile(fileobj=f, mode="rb") as gz:
            while chunk := gz.read(2**18):
                total += len(chunk)
                if total > limit:
                    raise _too_big(name, limit)
    except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise _corrupt(name, e) from None
    f.seek(start)


def _open_text(source, name: str, max_inflated_bytes: int | None, stack: contextlib.ExitStack):
    """A text stream of a path or a binary file-like object: gzip (by its magic bytes) decompressed,
    after a first pass has found that it inflates to at most `max_inflated_bytes` (a bomb is refused in
    the seconds its inflating takes, before any parsing), UTF-8 with an optional byte-order mark."""
    if hasattr(source, "read"):
        if isinstance(source, io.TextIOBase):
            return source
        f = source if getattr(source, "seekable", lambda: False)() else io.BytesIO(source.read())
    else:
        path = os.fspath(source)
        if os.path.isdir(path):
            raise IsADirectoryError(f"{name}: {path!r} is a folder, not a file")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name}: no such file {path!r}")
        f = stack.enter_context(open(path, "rb"))  # noqa: SIM115 - closed by the stack
    start = f.tell()
    magic = f.read(2)
    f.seek(start)
    raw: Any = stack.enter_context(io.BufferedReader(_Unclosed(f)))  # closing it leaves the caller's `f` open
    if magic == b"\x1f\x8b":
        if max_inflated_bytes is not None:
            _check_inflated_size(f, name, max_inflated_bytes)
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
        if max_inflated_bytes is not None:  # the file may have grown since the first pass
            raw = io.BufferedReader(_Capped(raw, max_inflated_bytes, name))
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


class _Unclosed(io.RawIOBase):
    """`f` for `io.BufferedReader`, which closes its raw stream: the caller's file object stays open."""

    def __init__(self, f):
        self._f = f

    def readable(self):
        return True

    def readinto(self, buffer):
        if hasattr(self._f, "readinto"):
            return self._f.readinto(buffer)
        data = self._f.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _rows(text, name: str):
    """`(line, fields)` of the non-blank rows of the CSV text stream, fields stripped; the line is the
    1-based line the row ends on. Decoding, gzip and csv errors become one-line `ValueError`s naming
    `name` and the line."""
    reader = csv.reader(text)
    while True:
        try:
            r = next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError as e:
            raise ValueError(f"{name} is not UTF-8 text (after line {reader.line_num}: {e.reason})") from None
        except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            raise _corrupt(name, e, f" after line {reader.line_num}") from None
        except csv.Error as e:
            if "field larger than field limit" in str(e):
                raise ValueError(
                    f"{name}: line {reader.line_num} has a field longer than {csv.field_size_limit()} "
                    "characters: not a table of numbers"
                ) from None
            raise ValueError(f"{name}: line {reader.line_num}: not comma-separated values ({e})") from None
        r = [c.strip() for c in r]
        if any(r):
            yield reader.line_num, r


def _add_block(blocks, buf, lines, num_bad, first_bad):
    """Appends the rows `buf` (read from `lines`) to `blocks` as a float64 array; returns the running
    count of non-finite values and the `(line, column)` of the first."""
    block = np.array(buf, dtype=np.float64)
    blocks.append(block)
    bad = ~np.isfinite(block)
    if bad.any():
        if num_bad == 0:
            r, c = np.argwhere(bad)[0]
            first_bad = (lines[r], int(c))
        num_bad += int(bad.sum())
    return num_bad, first_bad


def _read_table(source, name: str, *, header="never", max_inflated_bytes: int | None = MAX_INFLATED_BYTES):
    """Reads a comma-separated numeric table into a float64 `(rows, cols)` array, streaming: the text
    is parsed row by row into float64 blocks, so the memory it takes is the table's 8 bytes per number
    (twice, while the blocks are joined), whatever the file's size.

    `header`: `False`/`"never"` (every row is data), `True` (the first row is a header) or
    `"auto"` (the first row is a header when none of its fields is a number; some numbers and some
    not is an error). Blank lines are ignored. Raises `ValueError` naming the file and the 1-based line
    for rows whose width differs from the first row's (the header's included), non-numeric fields,
    over-long fields, NaN/inf values, and gzip data inflating past `max_inflated_bytes`.
    """
    with contextlib.ExitStack() as stack:
        rows = _rows(_open_text(source, name, max_inflated_bytes, stack), name)
        first = next(rows, None)
        head = None
        if first is not None and (
            header is True or (header == "auto" and not any(_is_number(c) for c in first[1]))
        ):
            head, first = first, next(rows, None)
        elif header == "auto" and first is not None and not all(_is_number(c) for c in first[1]):
            line, fields = first
            col = [_is_number(c) for c in fields].index(False)
            raise ValueError(
                f"{name}: line {line} mixes numbers and text (column {col}: {fields[col]!r}), so it is "
                "neither a header nor data; pass `header=True` to skip it or fix the value"
            )
        if first is None:
            raise ValueError(f"{name} has no data rows")
        width = len(first[1])
        if head is not None and len(head[1]) != width:
            raise ValueError(
                f"{name}: the header (line {head[0]}) has {len(head[1])} fields but line {first[0]} has "
                f"{width}: fix the header or the rows"
            )
        block_rows = max(1, _BLOCK_VALUES // width)
        blocks: list[np.ndarray] = []
        buf: list[list[float]] = []
        lines: list[int] = []
        num_bad, first_bad = 0, (0, 0)
        for line, r in itertools.chain([first], rows):
            if len(r) != width:
                what = "the header" if head is not None else "the first row"
                raise ValueError(
                    f"{name} has ragged rows: line {line} has {len(r)} fields, {what} has {width}"
                )
            try:
                buf.append([float(c) for c in r])
            except ValueError:
                word = next(c for c in r if not _is_number(c))
                raise ValueError(f"{name}: non-numeric value {word!r} on line {line}") from None
            lines.append(line)
            if len(buf) == block_rows:
                num_bad, first_bad = _add_block(blocks, buf, lines, num_bad, first_bad)
                buf, lines = [], []
        if buf:
            num_bad, first_bad = _add_block(blocks, buf, lines, num_bad, first_bad)
    if num_bad:
        raise ValueError(
            f"{name} contains {num_bad} NaN or infinite value(s); the first is on line {first_bad[0]}, "
            f"column {first_bad[1]}"
        )
    data = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    return data


def _check_mask(mask, n: int, name: str) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D (num_points, num_folds), got shape {mask.shape}")
    if mask.shape[0] != n:
        raise ValueError(f"`{name}` has {mask.shape[0]} rows but the data have {n}")
    if mask.shape[1] == 0:
        raise ValueError(f"`{name}` has no folds (shape {mask.shape})")
    if not np.all((mask == 0) | (mask == 1)):
        raise ValueError(f"`{name}` must contain only 0 and 1")
    sums = mask.sum(axis=1)
    if np.any(sums != 1):
        bad = np.flatnonzero(sums != 1)
        raise ValueError(
            f"every row of `{name}` must mark exactly one test fold; {bad.size} row(s) do not "
            f"(first: row {int(bad[0])} sums to {sums[bad[0]]:g})"
        )
    empty = np.flatnonzero(mask.sum(axis=0) == 0)
    if empty.size:
        raise ValueError(f"`{name}` leaves fold(s) {empty.tolist()} without test rows")
    return mask.astype(np.int64)


def _check_max_inflated(max_inflated_bytes) -> None:
    if max_inflated_bytes is not None and not (
        isinstance(max_inflated_bytes, (int, np.integer))
        and not isinstance(max_inflated_bytes, bool)
        and max_inflated_bytes >= 0
    ):
        raise ValueError(f"`max_inflated_bytes` must be an int >= 0 or None, got {max_inflated_bytes!r}")


def _load_pair(data_src, mask_src, data_name: str, mask_name: str, max_inflated_bytes=MAX_INFLATED_BYTES):
    data = _read_table(data_src, data_name, max_inflated_bytes=max_inflated_bytes)
    if data.shape[1] < 2:
        raise ValueError(f"{data_name} needs at least 2 columns (inputs and target), got {data.shape[1]}")
    mask = _read_table(mask_src, mask_name, max_inflated_bytes=max_inflated_bytes)
    mask = _check_mask(mask, data.shape[0], "test_mask")
    return data[:, :-1], data[:, -1], mask


def load_uci(
    path: str | os.PathLike[str], *, max_inflated_bytes: int | None = MAX_INFLATED_BYTES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Loads a regression data set stored as `<path>/data.csv.gz` and `<path>/test_mask.csv.gz`.

    Args:
      path: a folder in the format of the UCI collection: `data.csv.gz` is comma-separated without
        header, the last column is the target; `test_mask.csv.gz` is `n x K` 0/1 with exactly one 1
        per row (the row's test fold).
      max_inflated_bytes: The most bytes each gzip file may decompress to (default 1 GiB, `2**30`);
        `None`: no limit. A file that inflates further is refused as soon as it does, so a small
        compressed file cannot fill the memory or the time of the run.

    Returns:
      (X, y, test_mask): `X` float64 `(n, d)`, `y` float64 `(n,)`, `test_mask` int64 `(n, K)`.

    Raises:
      FileNotFoundError: If the folder or either file is missing.
      ValueError: For ragged rows, non-numeric or non-finite values, a mask whose rows do not sum to 1,
        or gzip data inflating past `max_inflated_bytes`.

    Example:
      >>> import kronvi, importlib.resources
      >>> folder = importlib.resources.files("kronvi") / "data" / "yacht"
      >>> X, y, mask = kronvi.load_uci(str(folder))
      >>> X.shape, y.shape, mask.shape
      ((308, 6), (308,), (308, 10))
    """
    path = os.fspath(path)
    _check_max_inflated(max_inflated_bytes)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"`path`: no such folder {path!r}")
    data_file = os.path.join(path, "data.csv.gz")
    mask_file = os.path.join(path, "test_mask.csv.gz")
    for f in (data_file, mask_file):
        if not os.path.isfile(f):
            raise FileNotFoundError(f"`path` {path!r} has no {os.path.basename(f)}")
    return _load_pair(data_file, mask_file, data_file, mask_file, max_inflated_bytes)


def load_demo() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The yacht hydrodynamics data set (308 rows, 6 inputs, 10 folds) shipped with kronvi.

    Returns:
      (X, y, test_mask): As `load_uci`.

    Example:
      >>> import kronvi
      >>> X, y, mask = kronvi.load_demo()
      >>> X.shape, int(mask.sum())
      ((308, 6), 308)
    """
    folder = importlib.resources.files("kronvi").joinpath("data").joinpath("yacht")
    data_res = folder.joinpath("data.csv.gz")
    mask_res = folder.joinpath("test_mask.csv.gz")
    with data_res.open("rb") as fd, mask_res.open("rb") as fm:
        return _load_pair(fd, fm, "kronvi demo data.csv.gz", "kronvi demo test_mask.csv.gz")


def load_csv(
    path: str | os.PathLike[str],
    *,
    target_column: int = -1,
    header: bool | str = "auto",
    max_inflated_bytes: int | None = MAX_INFLATED_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Loads a plain comma-separated numeric table as `(X, y)`.

    gzip files are decompressed; a UTF-8 byte-order mark is ignored. The file is read as a stream, row
    by row into float64 blocks: memory is about the table's 8 bytes per number (twice while the blocks
    are joined), whatever the length of the text.

    Args:
      path: The CSV file.
      target_column: index of the target column (negative indices count from the end); the other
        columns are `X` in their original order.
      header: `"auto"`: the first row is a header when none of its fields is a number, data when all
        are, and an error otherwise; `True`: the first row is a header; `False`: every row is data. A
        header must have as many fields as the rows.
      max_inflated_bytes: The most bytes a gzip file may decompress to (default 1 GiB, `2**30`);
        `None`: no limit.

    Returns:
      (X, y): `X` float64 `(n, d)`, `y` float64 `(n,)`.

    Raises:
      FileNotFoundError: If there is no such file.
      ValueError: Naming the file and the line, for a header or row whose number of fields differs
        from the first row's, a non-numeric, NaN or infinite value, a field longer than 131,072
        characters, text that is not UTF-8, truncated or corrupt gzip data, or gzip data inflating
        past `max_inflated_bytes`.

    Example:
      >>> import kronvi, pathlib, tempfile
      >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
      >>> _ = p.write_text("a,b,y\n1,2,3\n4,5,6\n")
      >>> X, y = kronvi.load_csv(p)
      >>> X.tolist(), y.tolist()
      ([[1.0, 2.0], [4.0, 5.0]], [3.0, 6.0])
    """
    return csv_table(path, target_column=target_column, header=header, max_inflated_bytes=max_inflated_bytes)


def csv_table(
    path,
    *,
    target_column: int = -1,
    header: bool | str = "auto",
    max_inflated_bytes: int | None = MAX_INFLATED_BYTES,
    name: str = "path",
) -> tuple[np.ndarray, np.ndarray]:
    """`load_csv`, its errors naming the file as the argument `name` (the command line's `source`)."""
    if not (header == "auto" or isinstance(header, bool)):
        raise ValueError(f"`header` must be 'auto', True or False, got {header!r}")
    _check_max_inflated(max_inflated_bytes)
    data = _read_table(
        path, f"`{name}` {os.fspath(path)!r}", header=header, max_inflated_bytes=max_inflated_bytes
    )
    k = data.shape[1]
    if k < 2:
        raise ValueError(f"`{name}` needs at least 2 columns (inputs and target), got {k}")
    if not isinstance(target_column, (int, np.integer)) or isinstance(target_column, bool):
        raise TypeError(f"`target_column` must be an integer, got {type(target_column).__name__}")
    if not -k <= target_column < k:
        raise ValueError(f"`target_column` {target_column} is out of range for {k} columns")
    t = int(target_column) % k
    return np.delete(data, t, axis=1), data[:, t]


def fold_indices(test_mask: ArrayLike) -> np.ndarray:
    r"""The test fold of every row: `folds[i] = k` where `test_mask[i, k] == 1`.

    Args:
      test_mask: `(n, K)` 0/1 matrix with exactly one 1 per row.

    Returns:
      `(n,)` int64 NumPy array of fold ids in `[0, K)`, the `folds` argument of
      `kronvi.stats.kfold_stats`.

    Example:
      >>> import kronvi
      >>> kronvi.inputs.fold_indices([[0, 1], [1, 0], [0, 1]]).tolist()
      [1, 0, 1]
    """
    mask = np.asarray(test_mask)
    mask = _check_mask(mask, mask.shape[0] if mask.ndim == 2 else -1, "test_mask")
    return np.argmax(mask, axis=1).astype(np.int64)
