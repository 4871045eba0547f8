"""The GP's pieces side by side: the first start refined on all (at most 1000) rows, the screening of the
4 starts on 300 rows, each alone and together, with one and two worker threads (`_run_starts`, private).
Shows what two programs on two cores cost each other (docs/notes/2026-11-27-gp-threads.md).

Usage: python experiments/investigations/gp_threads/overlap.py --datasets concrete,energy
"""

import argparse
import concurrent.futures
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

import kronvi._inputs.gp as G
from kronvi import fit_standardizer, standardize
from kronvi._base.threads import single_blas_thread

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_vs_peers import DATA, load  # noqa: E402


def rows(name, data_dir):
    """The GP's subsample of fold 0, as `prepare_fold` draws it (float32, standardized, centred)."""
    Xtr, ytr, _, _ = load(name, data_dir)
    X = jnp.asarray(Xtr, jnp.float32)
    X = standardize(fit_standardizer(X), X)
    y = jnp.asarray(ytr - ytr.mean(), jnp.float32)
    key = jax.random.split(jax.random.key(0), 3)[0]
    m = min(1000, len(y))
    idx = jax.random.choice(key, len(y), (m,), replace=False) if m < len(y) else jnp.arange(m)
    return X[idx], y[idx]


def timed(X, y, what, workers):
    starts = G._default_starts(4, X.shape[1], jnp.var(y), jnp.float32)
    first = jax.tree.map(lambda a: a[:1], starts)
    kw = dict(
        min_noise=1e-4 * jnp.var(y), max_iter=200, tol=jnp.float32(1e-5), parallel=False, precision="native"
    )
    with single_blas_thread(), concurrent.futures.ThreadPoolExecutor(workers) as pool:
        t = time.perf_counter()
        gets = [G._run_starts(X, y, first, pool=pool, **kw)] if "first" in what else []
        if "screening" in what:
            gets.append(G._run_starts(X[:300], y[:300], starts, pool=pool, **kw))
        jax.block_until_ready([g() for g in gets])
        return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="concrete,energy")
    ap.add_argument("--data-dir", default=str(DATA))
    args = ap.parse_args(argv)
    cases = [("first", 1), ("screening", 1), ("screening", 2), ("first+screening", 1), ("first+screening", 2)]
    for name in args.datasets.split(","):
        X, y = rows(name, args.data_dir)
        for case in cases:
            timed(X, y, *case)  # compiles
        for what, workers in cases:
            s = statistics.median(timed(X, y, what, workers) for _ in range(3))
            print(f"{name:10s} {what:16s} workers={workers}: {s:.3f} s (median of 3)", flush=True)


if __name__ == "__main__":
    main()
