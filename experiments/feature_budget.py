"""How many random features, and which: b = 2000, 4000, 8000 and structured frequencies at b = 2000.

On the large shared datasets the default recipe matches exact Bayesian linear regression on its features,
so the gap to the best regressors is in the features. For each dataset and fold this study fits the GP
hyperparameters once (the default recipe's) and then, for each feature setting, the default recipe's
preparation (features, eigenbasis, evidence-optimal prior and noise) and its DIRECT fit, timed; it scores
the DIRECT posterior mean (RMSE) and, in closed form, the exact BLR predictive on the same features (NLPD;
the default recipe matches it, `experiments/results/uci_default_table.md`).

Settings: `iid` frequencies at b = 2000, 4000, 8000 (`--sizes`) and `orthogonal` and `halton` frequencies
(`kronvi.inputs.rff_init(sampling=...)`) at the first size.

Usage:
  python experiments/feature_budget.py --data-dir ../shared/data/uci --datasets kin40k,protein,elevators,bike \
      --json experiments/results/feature_budget.json --overwrite
  (writes the JSON and a markdown table next to it)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import jax
import numpy as np
import study_cli

import kronvi
from kronvi.pipeline import DirectConfig, fit_prepared, fold_features, prepare_fold


def parse(argv=None):
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="kin40k,protein,elevators,bike")
    ap.add_argument("--sizes", default="2000,4000,8000", help="b values for iid frequencies (even)")
    ap.add_argument("--samplings", default="orthogonal,halton", help="structured samplings at the first size")
    ap.add_argument("--folds", type=int, default=1, help="the first K published folds")
    ap.add_argument("--json", required=True)
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if not sizes or any(s < 2 or s % 2 for s in sizes):
        ap.error(f"--sizes must be even numbers >= 2, got {args.sizes!r}")
    samplings = [s for s in args.samplings.split(",") if s]
    if any(s not in kronvi.pipeline.SAMPLINGS for s in samplings):
        ap.error(f"--samplings must name {kronvi.pipeline.SAMPLINGS}, got {args.samplings!r}")
    if args.folds < 1:
        ap.error(f"--folds must be >= 1, got {args.folds}")
    names = [d for d in args.datasets.split(",") if d]
    missing = [d for d in names if not (pathlib.Path(args.data_dir) / d).is_dir()]
    if missing:
        ap.error(f"no dataset folder {missing} in --data-dir {args.data_dir}")
    inputs = [pathlib.Path(args.data_dir) / d / f for d in names for f in ("data.csv.gz", "test_mask.csv.gz")]
    table = str(pathlib.Path(args.json).with_suffix(".md"))
    try:
        study_cli.check_outputs(
            [("--json", args.json), ("its table", table)], inputs=inputs, overwrite=args.overwrite
        )
    except (ValueError, OSError) as e:
        ap.error(str(e))
    return args, names, sizes, samplings, table


def score(fold, model, X_test, y_test):
    """DIRECT's RMSE and the exact BLR predictive's NLPD on the same (rotated) features, in float64."""
    Phi = np.asarray(fold_features(fold, X_test), np.float64)
    y = np.asarray(y_test, np.float64) - float(fold.y_offset)
    mean, _ = kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    lam = np.asarray(fold.basis.eigenvalues, np.float64)
    c = np.asarray(fold.stats.Phity, np.float64)
    v, s2 = float(fold.prior_scale) ** 2, float(fold.noise_variance)
    mu, var = c / (lam + s2 / v), s2 / (lam + s2 / v)
    m, pv = Phi @ mu, (Phi**2) @ var + s2
    return dict(
        rmse=float(np.sqrt(np.mean((np.asarray(mean, np.float64) - y) ** 2))),
        exact_rmse=float(np.sqrt(np.mean((m - y) ** 2))),
        exact_nlpd=float(np.mean(0.5 * np.log(2 * np.pi * pv) + 0.5 * (y - m) ** 2 / pv)),
    )


def main(argv=None):
    args, names, sizes, samplings, table_path = parse(argv)
    settings = [("iid", b) for b in sizes] + [(s, sizes[0]) for s in samplings]
    print(f"# feature budget: jax {jax.__version__}, {os.cpu_count()} cores; {len(names)} datasets x "
          f"{args.folds} folds x {len(settings)} settings", flush=True)  # fmt: skip
    records, t_start = [], time.perf_counter()
    for name in names:
        X, y, mask = kronvi.load_uci(pathlib.Path(args.data_dir) / name)
        for k in range(args.folds):
            test = np.asarray(mask)[:, k].astype(bool)
            gp = None
            for sampling, b in settings:
                config = DirectConfig(num_frequencies=b // 2, frequency_sampling=sampling, feature_map="fourier")
                t0 = time.perf_counter()
                fold = prepare_fold(jax.random.key(0), X[~test], y[~test], config, gp=gp)
                model, timings, _ = fit_prepared(fold, config)
                jax.block_until_ready(model.q_w.logits)
                seconds = time.perf_counter() - t0
                gp = gp or (fold.hyper, fold.gp_info)  # one GP fit per fold, timed in the first setting
                rec = dict(dataset=name, fold=k, n=int((~test).sum()), sampling=sampling, b=b, seconds=seconds,
                           stats_seconds=timings.stats_seconds, gp_seconds=timings.init_seconds,
                           **score(fold, model, X[test], y[test]))  # fmt: skip
                records.append(rec)
                print(f"  [{name} fold {k + 1}] {sampling:10s} b={b:5d}: RMSE {rec['rmse']:.4f}, exact NLPD "
                      f"{rec['exact_nlpd']:.3f}, {seconds:.1f} s (statistics and eigenbasis "
                      f"{rec['stats_seconds']:.1f} s); elapsed {time.perf_counter() - t_start:.0f} s", flush=True)  # fmt: skip
                kronvi.files.write_atomic(args.json, json.dumps(records, indent=1))
    table = render(records, settings)
    kronvi.files.write_atomic(table_path, table)
    print(table)
    return 0


def render(records, settings):
    cmd = "python experiments/feature_budget.py " + " ".join(sys.argv[1:])
    lines = [
        "# Feature budget: more random features, or better ones",
        "",
        f"Produced by `{cmd}`. Per setting: DIRECT's RMSE, the exact BLR NLPD on the same features (the default "
        "recipe matches it), and the seconds of the preparation and fit after the GP (the GP is fitted once "
        "per fold and timed in the first setting).",
        "",
        "| dataset | fold | " + " | ".join(f"{s} b={b}" for s, b in settings) + " |",
        "|---|---:|" + "---|" * len(settings),
    ]
    keys = sorted(
        {(r["dataset"], r["fold"]) for r in records},
        key=lambda t: ([r["dataset"] for r in records].index(t[0]), t[1]),
    )
    for d, k in keys:
        cells = []
        for s, b in settings:
            r = next(
                (r for r in records if (r["dataset"], r["fold"], r["sampling"], r["b"]) == (d, k, s, b)), None
            )
            cells.append(
                "—"
                if r is None
                else f"{r['rmse']:.4f} / {r['exact_nlpd']:.3f} / {r['seconds'] - r['gp_seconds']:.1f} s"
            )
        lines.append(f"| {d} | {k} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: RMSE / NLPD / seconds.")
    lines += ["", "Per dataset, over the folds run: mean RMSE ratio and mean NLPD difference against the first "
              "setting.", "", "| dataset | folds | " + " | ".join(f"{s} b={b}" for s, b in settings[1:]) + " |",
              "|---|---:|" + "---|" * (len(settings) - 1)]  # fmt: skip
    for d in dict.fromkeys(r["dataset"] for r in records):
        base = {r["fold"]: r for r in records if r["dataset"] == d and (r["sampling"], r["b"]) == settings[0]}
        cells = []
        for s, b in settings[1:]:
            pairs = [(base[r["fold"]], r) for r in records
                     if r["dataset"] == d and (r["sampling"], r["b"]) == (s, b) and r["fold"] in base]  # fmt: skip
            cells.append(
                "—" if not pairs else
                f"{np.mean([r['rmse'] / b0['rmse'] for b0, r in pairs]):.3f} / "
                f"{np.mean([r['exact_nlpd'] - b0['exact_nlpd'] for b0, r in pairs]):+.3f}"
            )  # fmt: skip
        lines.append(f"| {d} | {len(base)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    study_cli.run(main)
