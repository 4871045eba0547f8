"""The GP's screened restarts, refined warm: accuracy and GP seconds against the current rule.

`restarts="screened"` screens the 4 starts on 300 rows, then on all (at most 1,000) rows refines the
winner from its screened optimum and runs the first start from cold. The variants:

* `screened`: that rule (the reference);
* `warm2`: the winner and the first start, both from their screened optima (one start when they are the same);
* `warm1`: the winner alone, from its screened optimum;
* `screen`: the screened winner as it is (no refinement on all rows);
* `first300`: the first start alone on 300 rows.

Every variant keeps the fallback (every start on all rows when the refined winner fails, or the choice is
degenerate or pinned at the noise bound). Each fold's preparation then runs as the default recipe's
(features, eigenbasis, evidence-optimal prior scale and noise) and is scored in closed form by the exact
BLR predictive on its features. One JSON line per (dataset, fold, rule).

A second question, in separate processes (`--stall-rtol`): the GP's starts stop when an iteration raises the
log marginal likelihood by less than that fraction, instead of 10 float32 epsilons; near an optimum the
float32 likelihood is noisy at a few tenths of a nat, and the line searches spent most evaluations there.

Usage (about 25 min on 2 busy cores):
  python experiments/investigations/gp_warm/run.py --data-dir ../shared/data/uci --datasets all \
      --out experiments/investigations/gp_warm/results/gp_warm.jsonl
  python experiments/investigations/gp_warm/summary.py experiments/investigations/gp_warm/results/gp_warm.jsonl
"""

import argparse
import functools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi import pipeline as P
from kronvi._inputs import gp as G

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from gp_common import dataset_names, exact_blr_score  # noqa: E402


def fit_gp(key, Xs, yc, rule, config):
    """`fit_gp_hyperparameters(restarts="screened")` with the refinement `rule`."""
    if rule == "screened":
        return kronvi.fit_gp_hyperparameters(
            key, Xs, yc, num_points=config.gp_points, num_restarts=config.gp_restarts,
            degenerate_margin=config.gp_degenerate_margin, restarts="screened",
            screen_points=config.gp_screen_points,
        )  # fmt: skip
    n, d = Xs.shape
    var_y = jnp.var(yc)
    starts = G._default_starts(config.gp_restarts, d, var_y, Xs.dtype)
    min_noise = (1e-6 if Xs.dtype == jnp.float64 else 1e-4) * var_y
    m = min(n, config.gp_points)
    if m < n:
        idx = jax.random.choice(key, n, (m,), replace=False)
        Xs, yc = Xs[idx], yc[idx]
    fit = functools.partial(
        G._fitted, min_noise=min_noise, margin=config.gp_degenerate_margin, max_iter=200, tol=1e-5,
        parallel=False,
    )  # fmt: skip
    screen = config.gp_screen_points
    if rule == "first300":
        return fit(Xs[:screen], yc[:screen], jax.tree.map(lambda a: a[:1], starts))
    if screen >= m:
        return fit(Xs, yc, starts)
    hyper, screened = fit(Xs[:screen], yc[:screen], starts)
    if rule == "screen":
        return hyper, screened
    chosen = int(screened.chosen)
    pick = [chosen] if rule == "warm1" or chosen == 0 else [chosen, 0]
    refine = jax.tree.map(lambda a: a[jnp.asarray(pick)], screened.starts)
    hyper, info = fit(Xs, yc, refine)
    failed = (
        ~jnp.isfinite(info.log_marginal_likelihoods[0]) | info.degenerate | info.noise_at_bound[info.chosen]
    )
    if bool(failed):
        hyper, info = fit(Xs, yc, starts)
    return hyper, info._replace(screened=screened)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="all")
    ap.add_argument("--rules", default="screened,warm1,screen,first300")
    ap.add_argument("--folds", default="0,1")
    ap.add_argument("--stall-rtol", type=float, default=None,
                    help="stop a GP start when an iteration raises the LML by no more than this fraction "
                         "(default: the library's); the records' rule gets the suffix @VALUE")  # fmt: skip
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    suffix = ""
    if args.stall_rtol is not None:  # before anything is traced: the compiled fits read it once
        G._stall_rtol = lambda dtype: args.stall_rtol
        suffix = f"@{args.stall_rtol:g}"
    root = pathlib.Path(args.data_dir)
    names = dataset_names(root, args.datasets)
    out = open(args.out, "a")
    cfg = P.DirectConfig()
    for name in names:
        X, y, mask = kronvi.load_uci(root / name)
        for k in [int(f) for f in args.folds.split(",")]:
            test = np.asarray(mask)[:, k].astype(bool)
            Xtr = jnp.asarray(X[~test], jnp.float32)
            ytr = jnp.asarray(y[~test], jnp.float32)
            std = kronvi.fit_standardizer(Xtr)
            Xs, yc = kronvi.standardize(std, Xtr), ytr - jnp.mean(ytr)
            k_gp = jax.random.split(jax.random.key(0), 3)[0]
            for rule in args.rules.split(","):
                times = []
                for _ in range(2):  # the second run is warm
                    t0 = time.perf_counter()
                    hyper, info = jax.block_until_ready(fit_gp(k_gp, Xs, yc, rule, cfg))
                    times.append(time.perf_counter() - t0)
                fold = P.prepare_fold(jax.random.key(0), X[~test], y[~test], cfg, gp=(hyper, info))
                rmse, nlpd = exact_blr_score(fold, X[test], y[test])
                rec = dict(
                    dataset=name, fold=k, rule=rule + suffix, rmse=rmse, nlpd=nlpd,
                    gp_s=times[-1], gp_first_s=times[0], n_train=int((~test).sum()),
                    gp_iters=np.asarray(info.num_iterations).tolist(),
                    lml=float(np.asarray(info.log_marginal_likelihoods)[int(info.chosen)]),
                )  # fmt: skip
                print(json.dumps(rec), flush=True)
                out.write(json.dumps(rec) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
