"""The host BLAS/LAPACK thread pools (OpenBLAS, MKL, BLIS), limited where kronvi needs it.

XLA's CPU programs call LAPACK (Cholesky, triangular solves) from their own worker threads. With the
BLAS library's default of one thread per core, both pools compete for the same cores: a GP fit on 1,000
rows ran 40x slower on a busy 2-core machine, and its result changed with `OPENBLAS_NUM_THREADS`, because
threaded LAPACK rounds differently and the GP likelihood's local optima amplify the difference
(`docs/notes/2026-11-26-speed.md`). `single_blas_thread` runs a block with one BLAS thread, whatever the
environment says; `threadpoolctl` finds the loaded libraries.
"""

from __future__ import annotations

import contextlib

import jax


@contextlib.contextmanager
def single_blas_thread():
    """Within the block, every loaded BLAS/LAPACK library uses one thread (restored afterwards)."""
    # jaxlib's CPU LAPACK kernels come from SciPy's BLAS library, which jaxlib loads only at its first
    # factorization: load it now, or threadpoolctl would not see (and limit) it.
    import scipy.linalg.cython_lapack  # noqa: F401
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def run_single_threaded(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with one BLAS thread, its JAX results waited for inside the limit (XLA runs
    asynchronously, so the LAPACK calls would otherwise run after the limit is lifted). Under a trace
    (`jit`) nothing runs now, and the call is made as it is."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
        return fn(*args, **kwargs)
    with single_blas_thread():
        return jax.block_until_ready(fn(*args, **kwargs))
