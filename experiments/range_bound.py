"""A bound from the training rows' range: does it mend folds that Nyström features blow up, and at what cost?
(issue 49, item 0; `docs/decisions/default-recipe.md#nystrom-features`).

Nyström features are the default from 4,000 training rows without the off-support bound (they vanish away from
every landmark). Bike's fold 1 under key 0 blew up with the GP step on 1,000 rows (the committed records' default;
with the refinement on 2,000 rows adopted since, a rerun measures the refined default): a test row near the
training inputs whose eigen-coordinates leave the training rows' span in many directions. Per fold this prepares the default recipe
(`kronvi.pipeline.prepare_fold`) and predicts the test rows with exact Bayesian linear regression in the
eigenbasis (the default's posterior mean `u`; the evidence's prior scale and noise) under each rule for the test
rows' rotated features `z` (the predictive variance is the unclipped row's, as the library's bound does):

- `plain`: no bound;
- `rms20`: the library's bound for random Fourier features, `|z_j| <= 20 sqrt(lambda_j / n)`;
- `range<k>`: `|z_j| <= k max_i |z_ij|` over the training rows `i`, which needs their rotated features (one more
  pass over the training rows, timed: `range_seconds`).

`--key` chooses the fold keys: `uci` (`experiments/uci.py`'s, `fold_in(dataset_key(name, 0), k)`) or `zero`
(`jax.random.key(0)` for every fold: `experiments/peers_rmse_time.py`'s). Every record is appended to `--out` as
soon as it exists; a (dataset, key, fold) already there is skipped.

Usage:
  python experiments/range_bound.py --data-dir ../shared/data/uci --datasets bike,elevators,parkinsons,pumadyn32nm \\
      --folds 10 --key uci --out experiments/results/range_bound.jsonl
  python experiments/range_bound.py --out experiments/results/range_bound.jsonl --table experiments/results/range_bound.md
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import study_cli  # noqa: E402

RANGES = (1.0, 1.5, 2.0)
RULES = ("plain", "rms20", *(f"range{k:g}" for k in RANGES))


def rule_bounds(lam, n: float, train_max) -> dict:
    """`{rule: (b,) bound on |z_j|}` (inf: unbounded)."""
    rms = np.sqrt(np.maximum(np.asarray(lam, np.float64), 0.0) / n)
    out = {"plain": np.full(rms.shape, np.inf), "rms20": 20.0 * rms}
    out.update({f"range{k:g}": k * np.asarray(train_max, np.float64) for k in RANGES})
    return out


def score(z, y, u, var, bound) -> dict:
    """RMSE and NLPD of the test rows `z` (rotated features) with the mean at the clipped coordinates, the variance
    `var` unchanged, and how many rows the bound moved."""
    zc = np.clip(z, -bound, bound)
    err = y - zc @ u
    moved = int(np.sum(np.any(zc != z, axis=1)))
    rmse = float(np.sqrt(np.mean(err**2)))
    return dict(rmse=rmse, nlpd=float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * err**2 / var)), moved=moved)


def one_fold(name, k, X, y, test, key_rule: str) -> dict:
    import jax

    from kronvi import pipeline

    key = jax.random.key(0) if key_rule == "zero" else jax.random.fold_in(uci_key(name), k)
    t0 = time.perf_counter()
    fold = pipeline.prepare_fold(key, X[~test], y[~test])
    prepare_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    train_max = np.max(np.abs(np.asarray(pipeline.fold_features(fold, X[~test]))), axis=0).astype(np.float64)
    range_seconds = time.perf_counter() - t0
    z = np.asarray(pipeline.fold_features(fold, X[test]), np.float64)
    lam = np.asarray(fold.basis.eigenvalues, np.float64)
    c = np.asarray(fold.stats.Phity, np.float64)
    sw2, s2 = float(fold.prior_scale) ** 2, float(fold.noise_variance)
    prec = lam + s2 / sw2
    u = np.where(lam > 0, c / prec, 0.0)
    var = s2 + (z**2) @ (s2 / prec)
    unit = float(fold.y_scale)
    yt = (y[test] - float(fold.y_offset)) / unit
    rules = {}
    for rule, bound in rule_bounds(lam, float(fold.stats.n), train_max).items():
        s = score(z, yt, u, var, bound)
        rules[rule] = dict(rmse=s["rmse"] * unit, nlpd=s["nlpd"] + float(np.log(unit)), moved=s["moved"])
    nystrom = type(fold.features).__name__ == "NystromFeatures"
    return dict(
        n=int((~test).sum()), b=int(lam.size), feature_map="nystrom" if nystrom else "fourier",
        prepare_seconds=prepare_seconds, range_seconds=range_seconds, rules=rules,
    )  # fmt: skip


def uci_key(name: str):
    """`experiments/uci.py`'s key of a dataset at seed 0 (`dataset_key`), without importing the study."""
    import jax

    return jax.random.fold_in(jax.random.key(0), sum(map(ord, name)))


def render(records) -> str:
    lines = [
        "# A bound from the training rows' range",
        "",
        "Rendered by `python experiments/range_bound.py --out <records> --table <this file>` (commands in "
        "`experiments/README.md`). Exact Bayesian linear regression on the default recipe's features, the mean at "
        "the test rows' eigen-coordinates clipped by each rule (`plain`: none; `rms20`: 20 training RMS; `range<k>`: "
        "k times the training rows' largest |coordinate|). Per dataset and key: each rule's mean RMSE, its largest "
        f"fold over its median fold, the folds above {study_cli.BLOWN_UP:g}x the median, and its largest fold-by-fold RMSE "
        "ratio against `plain`; the mean NLPD; the seconds of the preparation and of the training range's pass "
        "(medians).",
        "",
        "| dataset | key | folds | map, b | rule | mean RMSE | max / median fold | blown up | worst fold vs plain | "
        "mean NLPD | prepare s | range pass s |",
        "|---|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    groups = {}
    for r in records:
        groups.setdefault((r["dataset"], r["key"]), []).append(r)
    for (name, key), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["fold"])
        plain = np.array([r["rules"]["plain"]["rmse"] for r in rs])
        for rule in RULES:
            rmse = np.array([r["rules"][rule]["rmse"] for r in rs])
            ratio, blown = study_cli.spread(rmse)
            nlpd = np.mean([r["rules"][rule]["nlpd"] for r in rs])
            lines.append(
                f"| {name} | {key} | {len(rs)} | {rs[0]['feature_map']}, {rs[0]['b']} | {rule} | {rmse.mean():.4g} | "
                f"{ratio:.2f} | {' '.join(str(rs[i]['fold']) for i in blown) or 'none'} | {np.max(rmse / plain):.3f} | "
                f"{nlpd:.3f} | "
                f"{np.median([r['prepare_seconds'] for r in rs]):.1f} | {np.median([r['range_seconds'] for r in rs]):.1f} |"
            )  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_cli.add_record_options(ap, datasets="bike,elevators,parkinsons,pumadyn32nm", folds=10)
    ap.add_argument("--key", default="uci", choices=("uci", "zero"), help="the folds' keys (see above)")
    args = ap.parse_args(argv)
    if args.table:
        return study_cli.write_table(ap, args.out, args.table, render)
    names = study_cli.record_datasets(ap, args)

    def line(rec):
        cells = ", ".join(f"{rule} {v['rmse']:.4g}" for rule, v in rec["rules"].items())
        return (
            f"[{rec['dataset']} {rec['key']} fold {rec['fold']}] {cells}; prepare {rec['prepare_seconds']:.1f} s, "
            f"range pass {rec['range_seconds']:.1f} s"
        )

    def one(name, k, X, y, test):
        return one_fold(name, k, X, y, test, args.key)

    return study_cli.run_folds(args, names, one, line, extra={"key": args.key})


if __name__ == "__main__":
    study_cli.run(main)
