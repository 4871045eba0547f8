r"""Memory a fit will need, checked before it starts: an error naming the option, not NumPy's
"Unable to allocate 149 GiB" traceback nor a machine that swaps for hours.

`check_memory(nbytes, what=..., argument=...)` compares an estimate of a computation's peak memory
with what the machine has available: the environment variable `KRONVI_MEMORY_LIMIT` when set (bytes,
or a number with a `K`, `M`, `G` or `T` suffix in powers of 1024: `KRONVI_MEMORY_LIMIT=8G`; `0` or
`none` turns the check off), else the smaller of the host's available memory (`MemAvailable` in
`/proc/meminfo`, else `os.sysconf`'s available pages) and the free room under a cgroup (v2) memory limit.

The estimates (`regression_fit_bytes`, `prediction_bytes`) count the arrays a DIRECT regression fit
and its prediction hold at their peak, in bytes:

- the fit: the $b \times b$ statistics $\Phi^\top\Phi$ in float64 (the eigenbasis is always computed in
  float64), their eigendecomposition (the eigenvectors, a working copy of the matrix and LAPACK's
  workspace: three more $b \times b$ float64 arrays), the basis and rotated statistics cast to the
  working dtype (two $b \times b$), and the features of one chunk of rows ($\text{chunk} \times b$, in
  float64 and in the working dtype). With fewer rows than features ($n < b$) the basis comes from the
  $n \times n$ Gram matrix instead, but its null-space completion is $b \times b$ too, so the
  estimate is the same up to the $n \times b$ features it holds whole.
- the prediction: the basis ($b \times b$, working dtype) and the features of one chunk of test rows,
  before and after the rotation.

They are upper estimates, within a factor of about two of the peak resident memory measured on CPU
(`tests/base/test_memory.py` measures it in a child process).
"""

from __future__ import annotations

import os
import re

import numpy as np

__all__ = [
    "MemoryLimitError",
    "available_memory",
    "check_memory",
    "format_bytes",
    "prediction_bytes",
    "regression_fit_bytes",
]

ENV = "KRONVI_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class MemoryLimitError(MemoryError, ValueError):
    """A computation would need more memory than is available: raised before it starts. A `MemoryError`
    and a `ValueError` (a setting the user can change: the message names it)."""


def format_bytes(n: float) -> str:
    """`n` bytes in binary units: `'149.0 GiB'`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def _limit_from_env() -> int | None:
    """`KRONVI_MEMORY_LIMIT` in bytes; `None` when unset; `0` when the check is off."""
    text = os.environ.get(ENV)
    if text is None or not text.strip():
        return None
    if text.strip().lower() in ("0", "none", "off"):
        return 0
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(
            f"{ENV}={text!r}: give a number of bytes, optionally with K, M, G or T (8G), or 'none'"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> int | None:
    """Free room under this process's cgroup v2 memory limit, `None` without one."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((ln.strip().split(":", 2)[2] for ln in f if ln.startswith("0::")), None)
        if path is None:
            return None
        folder = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(folder, "memory.max")) as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(folder, "memory.current")) as f:
            current = int(f.read().strip())
        return max(int(limit) - current, 0)
    except (OSError, ValueError, IndexError):
        return None


def available_memory() -> int | None:
    """Bytes a computation may use: `KRONVI_MEMORY_LIMIT` when set, else the host's available memory
    (and the room under a cgroup limit, if smaller); `None` when it cannot be told or the check is off."""
    env = _limit_from_env()
    if env is not None:
        return env or None
    sizes = [s for s in (_meminfo_available(), _cgroup_room()) if s is not None]
    return min(sizes) if sizes else None


def check_memory(nbytes: int, *, what: str, argument: str) -> None:
    """Raises `MemoryLimitError` naming `argument` when `nbytes` (an estimate of a computation's peak)
    is more than `available_memory()`; does nothing when the memory cannot be told or
    `KRONVI_MEMORY_LIMIT` is `none`.

    Args:
      nbytes: The estimate, in bytes (`regression_fit_bytes`, `prediction_bytes`).
      what: The computation, as the message names it (`"a fit with b = 400000 features"`).
      argument: The user's option or parameter that sets its size (`"--num-features"`,
        `` "`n_frequencies`" ``).
    """
    room = available_memory()
    if room is None or nbytes <= room:
        return
    source = f"{ENV}" if _limit_from_env() else "available on this machine"
    raise MemoryLimitError(
        f"{what} needs about {format_bytes(nbytes)} of memory, more than the {format_bytes(room)} {source}: "
        f"lower {argument} (or set {ENV}, in bytes or with a K/M/G/T suffix, to allow more)"
    )


def _itemsize(dtype) -> int:
    return np.dtype(dtype).itemsize


def regression_fit_bytes(num_rows: int, num_features: int, *, dtype="float32", chunk_size: int = 2048) -> int:
    r"""Peak bytes of a DIRECT regression fit on `num_rows` rows and `b = num_features` features (see
    the module's docstring for what is counted): $6 b^2$ float64 values for the statistics and their
    eigendecomposition, $2 b^2$ in the working `dtype`, and the features of a chunk (all $n$ rows when
    $n < b$) in float64 and `dtype`."""
    n, b, w = int(num_rows), int(num_features), _itemsize(dtype)
    rows = n if n < b else min(n, chunk_size)
    return 8 * 6 * b * b + w * 2 * b * b + (8 + w) * rows * b + (8 + w) * n * n * (n < b)


def prediction_bytes(num_rows: int, num_features: int, *, dtype="float32", chunk_size: int = 2048) -> int:
    r"""Peak bytes of predicting `num_rows` rows with `b = num_features` features: the $b \times b$ basis
    and three `chunk x b` feature arrays in the working `dtype`, plus the outputs."""
    n, b, w = int(num_rows), int(num_features), _itemsize(dtype)
    return w * b * b + 3 * w * min(n, chunk_size) * b + 4 * w * n
