"""Where the first call of direct-logistic's fit goes (issue 26, item 9): XLA compilation per program.

The classification study's fold 0 includes compilation (2.2-2.4 s against warm fits of 0.1-0.2 s). This
runs what its `fit_direct` runs on one fold, on a synthetic problem of the anes96_vote fold's size (850
rows, b = 2 x 100 + 10 + 1 = 211): `laplace_grid_prior` at 4 prior scales, then
`fit_logistic(method="cavi")` from the Laplace start, twice, with `jax_log_compiles` on, and prints each
compiled program's XLA compile seconds, largest first, and the two calls' times.

Usage: python experiments/investigations/logistic_compile.py > experiments/investigations/results/logistic_compile.txt
"""

import logging
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi.logistic as kl


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.programs = []

    def emit(self, record):
        m = re.search(
            r"Finished XLA compilation of (?:jit\()?([\w<>]+).* in ([0-9.]+) sec", record.getMessage()
        )
        if m:
            self.programs.append((m.group(1), float(m.group(2))))


def main():
    collect = Collect()
    logging.getLogger("jax").addHandler(collect)
    logging.getLogger("jax").setLevel(logging.DEBUG)
    jax.config.update("jax_log_compiles", True)
    rng = np.random.default_rng(0)
    n, b = 850, 2 * 100 + 10 + 1
    Phi = jnp.asarray(rng.standard_normal((n, b)) / 10, jnp.float32)
    y = jnp.asarray(rng.random(n) < 0.5, jnp.float32)
    w = jnp.ones(n, jnp.float32)
    for call in ("first", "second"):
        t = time.perf_counter()
        grids = [
            kl.laplace_grid_prior(Phi, y, s, levels=15, width=4.0, weights=w) for s in (0.5, 1.0, 2.0, 4.0)
        ]
        jax.block_until_ready(grids[-1][0])
        t1 = time.perf_counter()
        q, _ = kl.fit_logistic(Phi, y, grids[1][0], method="cavi", max_iter=100, tol=1e-4, weights=w)
        jax.block_until_ready(q.logits)
        t2 = time.perf_counter()
        print(f"{call} call: laplace_grid_prior x 4 {t1 - t:.2f} s, fit_logistic(cavi) {t2 - t1:.2f} s")
    total = sum(s for _, s in collect.programs)
    print(f"\n{len(collect.programs)} programs compiled, {total:.2f} s of XLA compilation in all")
    print("| program | compile s |\n|---|---:|")
    big = sorted(collect.programs, key=lambda p: -p[1])
    for name, s in big[:2]:
        print(f"| {name} | {s:.3f} |")
    rest = big[2:]
    print(
        f"| {len(rest)} others ({', '.join(sorted({p for p, _ in rest}))}) | {sum(s for _, s in rest):.3f} |"
    )


if __name__ == "__main__":
    main()
