"""Fixtures only: both precisions (``dtype``). Shared references live in ``helpers.py``."""

import jax
import numpy as np
import pytest


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """Runs a test in float32 (x64 off) and float64 (x64 on)."""
    if request.param == "float64":
        with jax.enable_x64(True):
            yield np.float64
    else:
        with jax.enable_x64(False):
            yield np.float32
