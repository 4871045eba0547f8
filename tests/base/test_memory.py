"""Memory checked before a fit: estimates against the measured peak, and the limit's sources."""

import os
import re
import subprocess
import sys

import pytest

from kronvi._base import memory

# The peak resident memory of this process's image (VmHWM), which starts afresh at exec; getrusage's
# ru_maxrss would start at the pytest parent's size, inherited through fork.
MEASURE = r"""
import sys, numpy as np, jax, kronvi
def hwm():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
n, D = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
X = rng.normal(size=(n, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
fit = lambda D: kronvi.pipeline.fit_direct(jax.random.key(0), X, y, kronvi.pipeline.DirectConfig(num_frequencies=D))
fit(4)  # jax and the programs' first compilation, outside the measured peak
base = hwm()
fit(D)
print(hwm() - base)
"""


@pytest.mark.parametrize("n", [150, 2500])  # fewer rows than features (the Gram route), and more
def test_the_fit_estimate_bounds_the_measured_peak_within_a_factor_of_three(n):
    b = 2400
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(n), str(b // 2)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    measured = int(done.stdout.split()[-1])
    estimate = memory.regression_fit_bytes(n, b, dtype="float32")
    assert 8 * b * b < measured <= estimate <= 3 * measured, (measured, estimate)


def test_estimates_grow_as_b_squared_and_count_the_dtype():
    f32 = memory.regression_fit_bytes(100, 20000, dtype="float32")
    assert f32 == 8 * 6 * 20000**2 + 4 * 2 * 20000**2 + 12 * 100 * 20000 + 12 * 100 * 100
    assert memory.regression_fit_bytes(100, 20000, dtype="float64") > f32
    assert (
        memory.regression_fit_bytes(10**6, 100, chunk_size=2048)
        == 8 * 6 * 100**2 + 4 * 2 * 100**2 + 12 * 2048 * 100
    )
    assert memory.prediction_bytes(10, 1000, dtype="float32") == 4 * 1000**2 + 3 * 4 * 10 * 1000 + 4 * 4 * 10
    assert memory.format_bytes(149 * 2**30) == "149.0 GiB" and memory.format_bytes(12) == "12 B"


def test_check_memory_names_the_argument_and_obeys_the_limit(monkeypatch):
    monkeypatch.setenv("KRONVI_MEMORY_LIMIT", "1.5G")
    assert memory.available_memory() == int(1.5 * 2**30)
    memory.check_memory(2**30, what="a fit", argument="`n_frequencies`")
    with pytest.raises(memory.MemoryLimitError, match=re.escape(
        "a fit needs about 2.0 GiB of memory, more than the 1.5 GiB KRONVI_MEMORY_LIMIT: lower `n_frequencies`"
    )) as err:  # fmt: skip
        memory.check_memory(2**31, what="a fit", argument="`n_frequencies`")
    assert isinstance(err.value, MemoryError) and isinstance(err.value, ValueError)
    for off in ("none", "0"):
        monkeypatch.setenv("KRONVI_MEMORY_LIMIT", off)
        assert memory.available_memory() is None
        memory.check_memory(2**60, what="a fit", argument="b")
    monkeypatch.setenv("KRONVI_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="KRONVI_MEMORY_LIMIT='lots': give a number of bytes"):
        memory.available_memory()
    monkeypatch.delenv("KRONVI_MEMORY_LIMIT")
    room = memory.available_memory()
    assert room is None or 0 < room < 2**50
    with pytest.raises(memory.MemoryLimitError, match="available on this machine: lower b"):
        memory.check_memory(2**60, what="a fit", argument="b")
