"""The float64 statistics pass (`dsyrk` into one triangle) is bitwise the same with 1 and 2 OpenBLAS threads
(docs/notes/2026-11-27-gp-speed.md): each thread count runs in its own process (the variable is read when
OpenBLAS loads), 20,000 rows, 1,000 features, and prints the MD5 of Phi^T Phi.

Usage: python experiments/investigations/gp_speed/stats_threads.py > experiments/investigations/gp_speed/results/stats_threads.txt
"""

import os
import subprocess
import sys

CHILD = """
import functools, hashlib, jax, jax.numpy as jnp, numpy as np, kronvi
with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20000, 3)), rng.standard_normal(20000)
    feats = kronvi.rff_init(jax.random.key(0), jnp.ones(3), 500)
    s = kronvi.regression_stats_from_inputs(functools.partial(kronvi.rff_features, feats), X, y)
    print(hashlib.md5(np.asarray(s.PhitPhi).tobytes()).hexdigest())
"""


def main():
    for threads in ("1", "2"):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=threads)
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
        print(f"OPENBLAS_NUM_THREADS={threads}: MD5 of Phi^T Phi {out.stdout.strip()}")


if __name__ == "__main__":
    main()
