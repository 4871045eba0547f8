"""Fixtures only: both precisions (``dtype``) and a fresh compilation cache per module. Shared references
live in ``helpers.py``. The suite compiles with LLVM's cheap passes (below)."""

import gc
import os

# Most of the suite's time is XLA compiling small programs that then run for milliseconds: LLVM's
# optimization level 0 cuts the CPU time of compile-bound modules by about a quarter
# (docs/notes/2026-11-27-test-time.md). Set before JAX creates its backend; subprocesses inherit it.
# KRONVI_TEST_FULL_OPT=1 runs the suite with XLA's default optimization instead.
if os.environ.get("KRONVI_TEST_FULL_OPT") != "1":
    os.environ["XLA_FLAGS"] = " ".join(
        [
            os.environ.get("XLA_FLAGS", ""),
            "--xla_backend_optimization_level=0",
            "--xla_llvm_disable_expensive_passes=true",
        ]
    ).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _fresh_compilation_caches():
    """Drops every compiled program after each test module: a long-lived xdist worker would otherwise keep
    the programs of every module it ran."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """Runs a test in float32 (x64 off) and float64 (x64 on)."""
    if request.param == "float64":
        with jax.enable_x64(True):
            yield np.float64
    else:
        with jax.enable_x64(False):
            yield np.float32
