"""Fixtures only: both precisions (``dtype``) and a fresh compilation cache per module. Shared references
live in ``helpers.py``. The suite compiles with the faster-compiling XLA flags of ``suite_flags.py`` and keeps
what it compiled on disk for later modules (below)."""

import gc
import os
import tempfile

# Most of the suite's time is XLA compiling small programs that then run for milliseconds: the flags in
# suite_flags.py compile them faster. Set before JAX creates its backend (importing helpers or kronvi
# creates it); subprocesses inherit them. KRONVI_TEST_FULL_OPT=1 runs the suite with XLA's defaults.
if os.environ.get("KRONVI_TEST_FULL_OPT") != "1":
    from suite_flags import SUITE_XLA_FLAGS

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *SUITE_XLA_FLAGS]).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Each module drops its compiled programs (below), and later modules compile many of the same ones again (a
# fit's loop at the same shapes, from another test file or a docstring). JAX's persistent compilation cache
# serves those from disk: a third of the suite's compilations, 8-19% of its time on two cores
# (docs/decisions/compilation.md#the-suites-xla-flags-and-a-full-optimization-run). The directory is this process's own and goes when it exits, so every
# run starts empty. It is set through jax.config rather than the environment, so the tests' subprocesses,
# two of which may run side by side, neither inherit nor share it. KRONVI_TEST_DISK_CACHE=0 turns it off.
_XLA_CACHE = tempfile.TemporaryDirectory(prefix="kronvi-test-xla-")
if os.environ.get("KRONVI_TEST_DISK_CACHE") != "0":
    jax.config.update("jax_compilation_cache_dir", _XLA_CACHE.name)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # the suite's programs are small
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


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
