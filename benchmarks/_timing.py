"""Timing helpers shared by every benchmark script: wall-clock seconds of a call that has finished on the
device, medians over repeats after a compiling call, and the machine and its load for a result's header.

The scripts import it as `from _timing import ...` after putting their own folder on `sys.path`."""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any, NamedTuple

import jax


class Timing(NamedTuple):
    """What `timed` measured: the median of the timed calls, the first (compiling) call, the last result."""

    median: float
    first: float
    result: Any


def seconds(fn, *args, **kwargs):
    """`(result, seconds)` of `fn(*args, **kwargs)`, waiting for every JAX array in the result."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, time.perf_counter() - t0


def timed(fn, *args, repeats: int, **kwargs) -> Timing:
    """Times `fn(*args, **kwargs)`: a first call (it compiles and warms up; its time is `first`), then
    `repeats` calls whose median is `median`. Each call waits for every JAX array in its result."""
    result, first = seconds(fn, *args, **kwargs)
    times = []
    for _ in range(repeats):
        result, t = seconds(fn, *args, **kwargs)
        times.append(t)
    return Timing(statistics.median(times), first, result)


def median_seconds(fn, *args, repeats: int, warmup: bool = True):
    """Median wall-clock seconds of `repeats` calls of `fn(*args)` (after one untimed call if `warmup`)."""
    if warmup:
        return timed(fn, *args, repeats=repeats).median
    return statistics.median(seconds(fn, *args)[1] for _ in range(repeats))


def load_average() -> str:
    """The 1-minute load average and the core count, for the header of a result file."""
    try:
        load = f"{os.getloadavg()[0]:.2f}"
    except OSError:  # not available on this platform
        load = "n/a"
    return f"load average {load} on {os.cpu_count()} cores"


def machine() -> str:
    """One line naming the JAX version, the device and the host."""
    dev = jax.devices()[0]
    return f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), {platform.machine()}, {os.cpu_count()} cores"
