"""The dual's null space (the complement of an orthonormal 2000 x n basis, `_complement`) computed in
float64 against float32: seconds (medians of 5) and orthogonality (docs/notes/2026-11-27-gp-stall.md).

Usage: python experiments/investigations/gp_stall/null_space.py
"""

import time

import numpy as np

from kronvi._stats import eigen


def median_ms(f, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1e3 * np.median(ts)


def main():
    rng = np.random.default_rng(0)
    for n in (692, 927):
        Q, _ = np.linalg.qr(rng.standard_normal((2000, n)))
        Q32 = Q.astype(np.float32)
        t64 = median_ms(lambda Q=Q: eigen._complement(Q))
        t32 = median_ms(lambda Q32=Q32: eigen._complement(Q32))
        print(f"n = {n}: float64 {t64:.1f} ms, float32 {t32:.1f} ms")
        for label, C in (
            ("float32", eigen._complement(Q32).astype(np.float64)),
            ("float64 cast to float32", eigen._complement(Q).astype(np.float32).astype(np.float64)),
        ):
            print(f"  {label}: max |C^T V| {np.abs(C.T @ Q).max():.1e}, "
                  f"max |C^T C - I| {np.abs(C.T @ C - np.eye(2000 - n)).max():.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
