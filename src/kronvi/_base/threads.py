"""The host BLAS/LAPACK thread pools (OpenBLAS, MKL, BLIS), limited where kronvi needs it.

LAPACK's factorizations synchronize their BLAS threads at every panel, and OpenBLAS threads spin while they
wait: when another core is busy, a threaded factorization is many times slower than a single-threaded one,
and XLA's CPU programs, which call LAPACK (Cholesky, triangular solves) from their own worker threads, make
the same competition. Threaded LAPACK also rounds differently, and the GP likelihood's local optima
amplify that into results that change with `OPENBLAS_NUM_THREADS`
(`docs/decisions/gp-step.md#one-blas-thread-for-factorizations-the-starts-on-both-cores`). Large matrix
products keep the library's threads: they synchronize rarely. `single_blas_thread` runs a block with one
BLAS thread, whatever the environment says; `threadpoolctl` finds the loaded libraries.
"""

from __future__ import annotations

import contextlib
import functools

import jax


@functools.cache
def _controller():
    """threadpoolctl's view of the loaded BLAS libraries, found once (a scan of the process's shared
    libraries, which `threadpool_limits` would repeat at every call)."""
    # jaxlib's CPU LAPACK kernels come from SciPy's BLAS library, which jaxlib loads only at its first
    # factorization: load it now, or threadpoolctl would not see (and limit) it.
    import scipy.linalg.cython_lapack  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextlib.contextmanager
def single_blas_thread():
    """Within the block, every loaded BLAS/LAPACK library uses one thread (restored afterwards)."""
    with _controller().limit(limits=1, user_api="blas"):
        yield


def run_single_threaded(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with one BLAS thread, its JAX results waited for inside the limit (XLA runs
    asynchronously, so the LAPACK calls would otherwise run after the limit is lifted). Under a trace
    (`jit`) nothing runs now, and the call is made as it is."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
        return fn(*args, **kwargs)
    with single_blas_thread():
        return jax.block_until_ready(fn(*args, **kwargs))
