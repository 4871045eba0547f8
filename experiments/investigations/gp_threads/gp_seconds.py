"""The pipeline's GP step on fold 0: warm median seconds of `prepare_fold`'s GP (`init_seconds`) and a
hash of the chosen hyperparameters, to compare two versions of the library bit for bit
(docs/notes/2026-11-27-gp-threads.md). Run it once per version, e.g. with `PYTHONPATH` pointing at a
worktree of the older commit.

Usage: python experiments/investigations/gp_threads/gp_seconds.py --datasets yacht,energy,concrete,kin40k
"""

import argparse
import hashlib
import pathlib
import statistics
import sys

import jax
import numpy as np

from kronvi import pipeline

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_vs_peers import DATA, load  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="yacht,energy,concrete,kin40k")
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    for name in args.datasets.split(","):
        Xtr, ytr, _, _ = load(name, args.data_dir)
        seconds = []
        for _ in range(args.repeats + 1):  # the first call compiles
            fold = pipeline.prepare_fold(jax.random.key(0), Xtr, ytr)
            seconds.append(fold.init_seconds)
        h = np.concatenate([np.ravel(np.asarray(a)) for a in jax.tree.leaves(fold.hyper)])
        lmls = np.round(np.asarray(fold.gp_info.log_marginal_likelihoods), 3).tolist()
        print(f"{name:10s} n={len(Xtr):6d}  GP {statistics.median(seconds[1:]):.3f} s  "
              f"hyperparameters sha1 {hashlib.sha1(h.tobytes()).hexdigest()[:12]}  refined starts' log ML {lmls}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
