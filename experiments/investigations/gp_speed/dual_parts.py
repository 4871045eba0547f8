"""Where the dual eigenbasis's time goes at n < b (docs/notes/2026-11-27-gp-speed.md): the n x n Gram
matrix, its eigendecomposition (one BLAS thread), the primal vectors, the null space (`_complement`) and
the whole `_dual_host`, random data, b = 2000, medians of 3 (ms).

Usage: python experiments/investigations/gp_speed/dual_parts.py > experiments/investigations/gp_speed/results/dual_parts.txt
"""

import time

import numpy as np
from threadpoolctl import threadpool_limits

from kronvi._stats import eigen as E


def median_ms(f):
    f()
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t)
    return 1e3 * np.median(ts), out


def main():
    rng = np.random.default_rng(0)
    print("| n | Gram | eigh (1 thread) | primal vectors | null space | whole dual |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (692, 927):
        b = 2000
        Phi, y = rng.standard_normal((n, b)), rng.standard_normal(n)
        t_gram, G = median_ms(lambda Phi=Phi: Phi @ Phi.T)
        with threadpool_limits(1):
            t_eigh, (s, U) = median_ms(lambda G=G: np.linalg.eigh(G))
        t_vec, V = median_ms(lambda Phi=Phi, U=U, s=s: Phi.T @ (U / np.sqrt(s)))
        t_null, _ = median_ms(lambda V=V: E._complement(V))
        t_all, _ = median_ms(lambda Phi=Phi, y=y: E._dual_host(Phi, y))
        print(f"| {n} | {t_gram:.0f} | {t_eigh:.0f} | {t_vec:.0f} | {t_null:.0f} | {t_all:.0f} |")


if __name__ == "__main__":
    main()
