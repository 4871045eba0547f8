"""Does JAX's CPU client run two programs at the same time? A loop of 60 Cholesky solves at n = 700, one
BLAS thread, run twice: one after another, both dispatched from one Python thread, and each called from
its own thread (docs/notes/2026-11-27-gp-threads.md).

Usage: python experiments/investigations/gp_threads/dispatch.py
"""

import concurrent.futures
import time

import jax
import jax.numpy as jnp
import numpy as np

from kronvi._base.threads import single_blas_thread

N = 700


@jax.jit
def solves(A):
    def body(i, c):
        L = jnp.linalg.cholesky(A + (c + i) * 1e-3 * jnp.eye(N))
        return c + jnp.sum(jax.scipy.linalg.cho_solve((L, True), jnp.ones(N))) * 1e-9

    return jax.lax.fori_loop(0, 60, body, 0.0)


def main():
    B = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)
    A1 = jnp.asarray(B @ B.T / N + np.eye(N, dtype=np.float32))
    A2 = A1 * 1.1
    with single_blas_thread(), concurrent.futures.ThreadPoolExecutor(2) as pool:
        solves(A1).block_until_ready()
        for _ in range(3):
            t = time.perf_counter()
            solves(A1).block_until_ready()
            solves(A2).block_until_ready()
            seq = time.perf_counter() - t
            t = time.perf_counter()
            a, b = solves(A1), solves(A2)
            jax.block_until_ready((a, b))
            dispatched = time.perf_counter() - t
            t = time.perf_counter()
            list(pool.map(lambda A: solves(A).block_until_ready(), [A1, A2]))
            threads = time.perf_counter() - t
            print(f"one after another {seq:.3f} s | both dispatched from one thread {dispatched:.3f} s | "
                  f"each from its own thread {threads:.3f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
