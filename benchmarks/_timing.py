"""Timing helpers shared by the benchmark scripts: wall-clock seconds of a call that has finished on the
device, medians over repeats, and the machine's load."""

from __future__ import annotations

import os
import platform
import statistics
import time

import jax


def seconds(fn, *args, **kwargs):
    """`(result, seconds)` of `fn(*args, **kwargs)`, waiting for every JAX array in the result."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, time.perf_counter() - t0


def median_seconds(fn, *args, repeats: int, warmup: bool = True):
    """Median wall-clock seconds of `repeats` calls of `fn(*args)` (after one untimed call if `warmup`)."""
    if warmup:
        jax.block_until_ready(fn(*args))
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
