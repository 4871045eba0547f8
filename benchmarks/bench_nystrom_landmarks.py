"""What placing Nyström landmarks by k-means costs, and what it buys in the kernel's approximation.

For each shape (n rows, d inputs, b landmarks: the default's shapes on the shared sets it reaches), rows are
drawn from a mixture of Gaussian clusters of unequal spread (standard normal cluster centres, the clusters'
sds 0.1 to 1, unit lengthscales), and `kronvi.inputs.nystrom_init` places b landmarks with
`placement="rows"` (the drawn rows, the default) and `placement="kmeans"` (the drawn rows moved by
Lloyd's iterations), the same key. Per shape: the median seconds of each over --repeats calls (the whitener's
Cholesky factor and inverse included, the same in both), and the Nyström error of each, the mean over the
rows of $k(x, x) - \\phi(x)^\\top\\phi(x)$ (0 where the landmarks span the kernel exactly; computed on up to
4,000 of the rows).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_nystrom_landmarks.py \\
        > benchmarks/results/bench_nystrom_landmarks_cpu.txt
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, timed  # noqa: E402

# (n, d, b): parkinsons, elevators, bike (b = 2000); kin40k, protein, keggdirected (b = 6000)
SHAPES = "5288x20x2000,14939x18x2000,15641x17x2000,36000x8x6000,41157x9x6000,43944x20x6000"


def clustered_rows(rng, n: int, d: int, clusters: int = 50) -> np.ndarray:
    centres = rng.standard_normal((clusters, d))
    spread = rng.uniform(0.1, 1.0, clusters)
    which = rng.integers(clusters, size=n)
    return centres[which] + spread[which, None] * rng.standard_normal((n, d))


def nystrom_error(params, X) -> float:
    Phi = np.asarray(kronvi.inputs.nystrom_features(params, X), np.float64)
    return float(np.mean(1.0 - np.sum(Phi * Phi, axis=1)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="comma list of NxDxB")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"# Nyström landmarks by k-means: {machine()}; medians of {args.repeats} after a first call; "
          f"{load_average()}")  # fmt: skip
    print("| n | d | b | rows s | kmeans s | ratio | rows error | kmeans error | error ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        n, d, b = (int(v) for v in shape.split("x"))
        rng = np.random.default_rng(0)
        X = clustered_rows(rng, n, d)
        sample = X[rng.choice(n, min(n, 4000), replace=False)]
        ls = jnp.ones(d, jnp.float32)
        out = {}
        for placement in ("rows", "kmeans"):
            t = timed(kronvi.inputs.nystrom_init, jax.random.key(0), X, ls, b, placement=placement,
                      repeats=args.repeats)  # fmt: skip
            out[placement] = (t.median, nystrom_error(t.result, sample))
        (tr, er), (tk, ek) = out["rows"], out["kmeans"]
        print(f"| {n} | {d} | {b} | {tr:.2f} | {tk:.2f} | {tk / tr:.2f} | {er:.4f} | {ek:.4f} | {ek / er:.2f} |",
              flush=True)  # fmt: skip
    print(f"# at the end: {load_average()}")


if __name__ == "__main__":
    main()
