"""GP restarts against test accuracy: does the best of 4 starts predict better than fewer?

For each dataset and its first two folds, the default recipe's preparation (GP hyperparameters on at most
1,000 rows, features, eigenbasis, evidence-optimal prior scale and noise) with `gp_restarts` 4, 2 and 1
(every start run, the best kept: `gp_restart_rule="all"`), scored in closed form by the exact BLR
predictive on its features (the default recipe matches it). One JSON line per (dataset, fold, restarts).

Usage (about 40 min on 2 busy cores):
  python experiments/investigations/gp_restarts/run.py --data-dir ../shared/data/uci --datasets all \
      --out experiments/investigations/gp_restarts/results/gp_restarts.jsonl
  python experiments/investigations/gp_restarts/summary.py experiments/investigations/gp_restarts/results/gp_restarts.jsonl
"""

import argparse
import json
import pathlib
import sys

import jax
import numpy as np

import kronvi
from kronvi import pipeline as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from gp_common import dataset_names, exact_blr_score  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="all")
    ap.add_argument("--restarts", default="4,2,1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    root = pathlib.Path(args.data_dir)
    names = dataset_names(root, args.datasets)
    out = open(args.out, "a")
    for name in names:
        X, y, mask = kronvi.load_uci(root / name)
        for k in (0, 1):
            test = np.asarray(mask)[:, k].astype(bool)
            for restarts in [int(r) for r in args.restarts.split(",")]:
                cfg = P.DirectConfig(gp_restarts=restarts, gp_restart_rule="all")
                times = []
                for _ in range(2 if (~test).sum() < 5000 else 1):  # the second run is warm
                    fold = P.prepare_fold(jax.random.key(0), X[~test], y[~test], cfg)
                    times.append(fold.init_seconds)
                rmse, nlpd = exact_blr_score(fold, X[test], y[test])
                rec = dict(
                    dataset=name, fold=k, restarts=restarts, rmse=rmse, nlpd=nlpd,
                    gp_s=times[-1], gp_first_s=times[0], sw=float(fold.prior_scale), s2=float(fold.noise_variance),
                    gp_iters=np.asarray(fold.gp_info.num_iterations).tolist(),
                    lml=np.asarray(fold.gp_info.log_marginal_likelihoods).tolist(),
                )  # fmt: skip
                print(json.dumps(rec), flush=True)
                out.write(json.dumps(rec) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
