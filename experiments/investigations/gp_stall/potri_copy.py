"""LAPACK's spotri on the C-ordered lower Cholesky factor (a reordering copy) against the same array read
as the Fortran-ordered upper factor (no copy), one BLAS thread (docs/notes/2026-11-27-gp-stall.md)."""

import time

import numpy as np
import scipy.linalg.lapack as L
from threadpoolctl import threadpool_limits

rng = np.random.default_rng(0)
n = 692
A = rng.standard_normal((n, n)).astype(np.float32)
K = A @ A.T / n + np.eye(n, dtype=np.float32)
Lc = np.ascontiguousarray(np.linalg.cholesky(K))
Lc.setflags(write=False)


def med(f):
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1e3 * np.median(ts)


with threadpool_limits(1):
    print(
        f"n = {n}: C-order lower {med(lambda: np.ascontiguousarray(L.spotri(Lc, lower=1)[0])):.2f} ms, "
        f"F-view upper {med(lambda: L.spotri(Lc.T, lower=0)[0].T):.2f} ms"
    )
    a = np.ascontiguousarray(L.spotri(Lc, lower=1)[0])
    b = L.spotri(Lc.T, lower=0)[0].T
    print("max |difference| of the lower triangles:", float(np.abs(np.tril(a) - np.tril(b)).max()))
