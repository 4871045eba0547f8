"""The GP step's budget against test accuracy: fewer rows for the GP and its screening (issue 26, item 5).

For each dataset and its first two folds, the default recipe's preparation (GP hyperparameters, features,
eigenbasis, evidence-optimal prior scale and noise) with `gp_points` and `gp_screen_points` set by each
`--configs` entry `points:screen[:linesearch]` (the optional third field sets the GP's L-BFGS
line-search cap, a private constant of the GP code at commit f637a9d, since reverted; 20 is optax's
default), scored in closed form by the exact BLR predictive on its features (the default recipe matches
it). GP seconds are warm (a second run) below 5,000 training rows. One JSON line
per (dataset, fold, config).

Usage (about 45 min on 2 cores; the committed run at commit f637a9d, today's code takes `points:screen` only):
  python experiments/investigations/gp_budget/run.py --data-dir ../shared/data/uci --datasets all \
      --configs 1000:300:20,1000:300,500:200,700:200 --out experiments/investigations/gp_budget/results/gp_budget.jsonl
  python experiments/investigations/gp_budget/summary.py experiments/investigations/gp_budget/results/gp_budget.jsonl
"""

import argparse
import json
import pathlib
import sys

import jax
import numpy as np

import kronvi
from kronvi import pipeline as P
from kronvi._inputs import gp as gp_module

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from gp_common import dataset_names, exact_blr_score  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="all")
    ap.add_argument("--configs", default="1000:300,500:200,700:200")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    root = pathlib.Path(args.data_dir)
    names = dataset_names(root, args.datasets)
    configs = [[int(v) for v in c.split(":")] for c in args.configs.split(",")]
    default_steps = getattr(gp_module, "_LINESEARCH_STEPS", None)  # only in the GP code of commit f637a9d
    if default_steps is None and any(len(c) > 2 for c in configs):
        raise SystemExit(
            "a line-search cap needs the GP code of commit f637a9d (the cap was reverted in 5ece2c8)"
        )
    with open(args.out, "a") as out:
        for name in names:
            X, y, mask = kronvi.load_uci(root / name)
            for k in (0, 1):
                test = np.asarray(mask)[:, k].astype(bool)
                for points, screen, *steps in configs:
                    want = steps[0] if steps else default_steps  # None: today's code, which has no cap
                    if want is not None and want != gp_module._LINESEARCH_STEPS:
                        gp_module._LINESEARCH_STEPS = want  # read when `_fit` is traced
                        gp_module._fit.clear_cache()
                    cfg = P.DirectConfig(gp_points=points, gp_screen_points=screen)
                    times = []
                    for _ in range(2 if (~test).sum() < 5000 else 1):  # the second run is warm
                        fold = P.prepare_fold(jax.random.key(0), X[~test], y[~test], cfg)
                        times.append(fold.init_seconds)
                    rmse, nlpd = exact_blr_score(fold, X[test], y[test])
                    info = fold.gp_info
                    rec = dict(
                        dataset=name, fold=k, points=points, screen=screen,
                        linesearch=getattr(gp_module, "_LINESEARCH_STEPS", 20), n=int((~test).sum()), rmse=rmse,
                        nlpd=nlpd, gp_s=times[-1], gp_first_s=times[0], stats_s=fold.stats_seconds,
                        gp_iters=np.asarray(info.num_iterations).tolist(),
                        lml=np.asarray(info.log_marginal_likelihoods).tolist(),
                        lengthscales=np.asarray(fold.hyper.lengthscales).round(4).tolist(),
                    )  # fmt: skip
                    print(json.dumps(rec), flush=True)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
