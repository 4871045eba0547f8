r"""Data handling: loading regression data sets, cross-validation folds and input standardization.

Loading happens once, eagerly, in NumPy float64 (the files are small text tables); everything downstream
is JAX. The UCI folder format is `data.csv.gz` (comma-separated, no header, the last column is the target)
plus `test_mask.csv.gz` (an `n x K` 0/1 matrix whose column `k` marks the test rows of fold `k`).
"""

from __future__ import annotations

import csv
import gzip
import importlib.resources
import io
import os
import zlib
from typing import NamedTuple

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
      >>> st = kronvi.fit_standardizer(jnp.array([[1.0, 5.0], [3.0, 5.0]]))
      >>> st.mean.tolist(), st.scale.tolist()
      ([2.0, 5.0], [1.0, 1.0])
      >>> kronvi.standardize(st, jnp.array([[3.0, 5.0]])).tolist()
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


def _read_text(source, name: str) -> str:
    """The text of a path or a binary file-like object: gzip (by its magic bytes) decompressed, UTF-8 with
    an optional byte-order mark. Raises `ValueError` naming `name` for truncated or corrupt gzip data
    and for bytes that are not UTF-8."""
    if hasattr(source, "read"):
        raw = source.read()
    else:
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name}: no such file {path!r}")
        with open(path, "rb") as f:
            raw = f.read()
    if isinstance(raw, str):
        return raw.removeprefix("\ufeff")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(f"{name}: truncated or corrupt gzip data ({type(e).__name__}: {e})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name} is not UTF-8 text (byte {e.start}: {e.reason})") from None


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _read_table(source, name: str, *, header="never"):
    """Reads a comma-separated numeric table into a float64 `(rows, cols)` array.

    `header`: `False`/`"never"` (every row is data), `True` (the first row is a header) or
    `"auto"` (the first row is a header when none of its fields is a number; some numbers and some
    not is an error). Blank lines are ignored. Raises `ValueError` naming the file and the 1-based line
    for ragged rows and non-numeric fields, and for NaN/inf values.
    """
    text = _read_text(source, name)
    rows = [(i + 1, [c.strip() for c in r]) for i, r in enumerate(csv.reader(io.StringIO(text, newline="")))]
    rows = [(i, r) for i, r in rows if any(r)]
    if header is True and rows:
        rows = rows[1:]
    elif header == "auto" and rows:
        line, first = rows[0]
        numeric = [_is_number(c) for c in first]
        if not any(numeric):
            rows = rows[1:]
        elif not all(numeric):
            col = numeric.index(False)
            raise ValueError(
                f"{name}: line {line} mixes numbers and text (column {col}: {first[col]!r}), so it is "
                "neither a header nor data; pass `header=True` to skip it or fix the value"
            )
    if not rows:
        raise ValueError(f"{name} has no data rows")
    width = len(rows[0][1])
    for line, r in rows:
        if len(r) != width:
            raise ValueError(
                f"{name} has ragged rows: line {line} has {len(r)} fields, the first row has {width}"
            )
    try:
        data = np.array([r for _, r in rows], dtype=np.float64)
    except ValueError:
        for line, r in rows:
            words = [c for c in r if not _is_number(c)]
            if words:
                raise ValueError(f"{name}: non-numeric value {words[0]!r} on line {line}") from None
        raise
    bad = ~np.isfinite(data)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} contains {int(bad.sum())} NaN or infinite value(s); the first is on line "
            f"{rows[r][0]}, column {c}"
        )
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


def _load_pair(data_src, mask_src, data_name: str, mask_name: str):
    data = _read_table(data_src, data_name)
    if data.shape[1] < 2:
        raise ValueError(f"{data_name} needs at least 2 columns (inputs and target), got {data.shape[1]}")
    mask = _read_table(mask_src, mask_name)
    mask = _check_mask(mask, data.shape[0], "test_mask")
    return data[:, :-1], data[:, -1], mask


def load_uci(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Loads a regression data set stored as `<path>/data.csv.gz` and `<path>/test_mask.csv.gz`.

    Args:
      path: a folder in the format of the UCI collection: `data.csv.gz` is comma-separated without
        header, the last column is the target; `test_mask.csv.gz` is `n x K` 0/1 with exactly one 1
        per row (the row's test fold).

    Returns:
      (X, y, test_mask): `X` float64 `(n, d)`, `y` float64 `(n,)`, `test_mask` int64 `(n, K)`.

    Raises:
      FileNotFoundError: If the folder or either file is missing.
      ValueError: For ragged rows, non-numeric or non-finite values, or a mask whose rows do not sum to 1.

    Example:
      >>> import kronvi, importlib.resources
      >>> folder = importlib.resources.files("kronvi") / "data" / "yacht"
      >>> X, y, mask = kronvi.load_uci(str(folder))
      >>> X.shape, y.shape, mask.shape
      ((308, 6), (308,), (308, 10))
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"`path`: no such folder {path!r}")
    data_file = os.path.join(path, "data.csv.gz")
    mask_file = os.path.join(path, "test_mask.csv.gz")
    for f in (data_file, mask_file):
        if not os.path.isfile(f):
            raise FileNotFoundError(f"`path` {path!r} has no {os.path.basename(f)}")
    return _load_pair(data_file, mask_file, data_file, mask_file)


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
    path: str | os.PathLike[str], *, target_column: int = -1, header: bool | str = "auto"
) -> tuple[np.ndarray, np.ndarray]:
    r"""Loads a plain comma-separated numeric table as `(X, y)`.

    gzip files are decompressed; a UTF-8 byte-order mark is ignored.

    Args:
      path: The CSV file.
      target_column: index of the target column (negative indices count from the end); the other
        columns are `X` in their original order.
      header: `"auto"`: the first row is a header when none of its fields is a number, data when all
        are, and an error otherwise; `True`: the first row is a header; `False`: every row is data.

    Returns:
      (X, y): `X` float64 `(n, d)`, `y` float64 `(n,)`.

    Example:
      >>> import kronvi, pathlib, tempfile
      >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
      >>> _ = p.write_text("a,b,y\n1,2,3\n4,5,6\n")
      >>> X, y = kronvi.load_csv(p)
      >>> X.tolist(), y.tolist()
      ([[1.0, 2.0], [4.0, 5.0]], [3.0, 6.0])
    """
    if not (header == "auto" or isinstance(header, bool)):
        raise ValueError(f"`header` must be 'auto', True or False, got {header!r}")
    data = _read_table(path, f"`path` {os.fspath(path)!r}", header=header)
    k = data.shape[1]
    if k < 2:
        raise ValueError(f"`path` needs at least 2 columns (inputs and target), got {k}")
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
      `kronvi.kfold_stats`.

    Example:
      >>> import kronvi
      >>> kronvi.fold_indices([[0, 1], [1, 0], [0, 1]]).tolist()
      [1, 0, 1]
    """
    mask = np.asarray(test_mask)
    mask = _check_mask(mask, mask.shape[0] if mask.ndim == 2 else -1, "test_mask")
    return np.argmax(mask, axis=1).astype(np.int64)
