"""Fixtures only: both precisions (``dtype``) and a fresh compilation cache per module. Shared references
live in ``helpers.py``."""

import gc

import jax
import numpy as np
import pytest


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
