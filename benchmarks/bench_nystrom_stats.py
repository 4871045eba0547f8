"""The float64 statistics pass of Nyström features: every row whitened by XLA, or the kernel rows whitened by a
triangular product in the host BLAS; and their mean, per row or once.

For n = 36,000 rows of d = 8 standard normal inputs (kin40k's size) and b Nyström landmarks among them
(unit lengthscales, the library's jitter), in float64, two ways each:

1. the features' mean (the offset `prepare_fold` centres them by): the features of every chunk computed and
   averaged (each row whitened: $2nb^2$ multiply-adds), against `kronvi.inputs.feature_mean`, which averages
   the kernel rows and whitens the mean once;
2. the statistics $\\Phi^\\top\\Phi$, $\\Phi^\\top y$: `regression_stats_from_inputs` of `nystrom_features` (XLA
   computes each chunk's features, a general product by $L^{-1}$; the host BLAS its rank-k update), against
   the pipeline's `host_whitened_stats` (XLA computes the kernel rows; the host BLAS the triangular product,
   half the flops, and the update).

Medians of --repeats runs after a warm-up, in one process, with the BLAS thread count of the environment
(`OPENBLAS_NUM_THREADS`, printed); the largest relative difference between the two ways' results.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_nystrom_stats.py > benchmarks/results/bench_nystrom_stats_cpu.txt
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import kronvi  # noqa: E402
from kronvi._inputs.features import nystrom_kernel_unchecked  # noqa: E402
from kronvi._stats.regression import host_whitened_stats  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, timed  # noqa: E402


def mean_per_row(params, X, chunk=4096):
    """The features' mean with every row whitened (the pass before this change)."""
    total = np.zeros(params.whiten.shape[0])
    for s in range(0, X.shape[0], chunk):
        total += np.asarray(kronvi.inputs.nystrom_features(params, X[s : s + chunk])).sum(axis=0)
    return total / X.shape[0]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=36_000)
    ap.add_argument("--features", default="2000,4000", help="comma list of b")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"# Nyström statistics in float64: {machine()}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; n = {args.rows}, d = 8; medians of {args.repeats} "
          f"after a warm-up; {load_average()}", flush=True)  # fmt: skip
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(args.rows, 8)), rng.normal(size=args.rows)
    print("| b | step | each row whitened s | whitened once / on the host s | speedup | relative difference |")
    print("|---:|---|---:|---:|---:|---:|")
    for b in (int(v) for v in args.features.split(",")):
        params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(8, jnp.float64), b)
        old = timed(mean_per_row, params, X, repeats=args.repeats)
        new = timed(kronvi.inputs.feature_mean, params, jnp.asarray(X), repeats=args.repeats)
        print(f"| {b} | feature mean | {old.median:.2f} | {new.median:.2f} | {old.median / new.median:.1f}x | "
              f"{rel(new.result, old.result):.1e} |", flush=True)  # fmt: skip
        params = params._replace(offset=new.result)
        fmap = functools.partial(kronvi.inputs.nystrom_features, params)
        old = timed(kronvi.stats.regression_stats_from_inputs, fmap, X, y, chunk_size=2048, repeats=args.repeats)
        kernel = functools.partial(nystrom_kernel_unchecked, params._replace(offset=None))
        new = timed(host_whitened_stats, kernel, params.whiten, params.offset, X, y, chunk_size=2048,
                    repeats=args.repeats)  # fmt: skip
        diff = max(rel(new.result.PhitPhi, old.result.PhitPhi), rel(new.result.Phity, old.result.Phity))
        print(f"| {b} | statistics | {old.median:.2f} | {new.median:.2f} | {old.median / new.median:.1f}x | "
              f"{diff:.1e} |", flush=True)  # fmt: skip
    print(f"# at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
