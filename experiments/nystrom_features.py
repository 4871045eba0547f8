"""Nyström features against random Fourier features (issue 49, items 0 and 3): the default recipe with
`DirectConfig(feature_map="nystrom")` beside the default `"fourier"`, at the same b, on the same folds.

For each of the first `--folds` published folds of each dataset, the default recipe (b = 2000 features below
20,000 training rows and 4000 above, or `--num-features`) is prepared and fitted once per feature map with the
same key, so the GP step sees the same rows and fits the same hyperparameters; the features are `b` random
Fourier features (`b / 2` frequencies) or `b` Nyström features on `b` landmarks drawn from the training rows.
Per map: the test RMSE (`kronvi.predict`), also over the training targets' standard deviation (the unit of
issue 49's bars: kin40k <= 0.105, protein <= 0.58), the NLPD (`kronvi.log_density`, the exact predictive
density of every test row; a far-tail point whose value misses the density's tolerance keeps its best value,
counted in `density_below_tolerance`), the features' exact log evidence and the seconds of `prepare_fold` and
`fit_prepared`. Every record holds the 1-minute load average.

Usage:
  python experiments/nystrom_features.py --data-dir ../shared/data/uci --datasets kin40k,protein,elevators,bike \\
      --folds 3 --out experiments/results/nystrom_features.jsonl --resume
  python experiments/nystrom_features.py --out experiments/results/nystrom_features.jsonl \\
      --table experiments/results/nystrom_features.md
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import study_cli  # noqa: E402

from kronvi.pipeline import DirectConfig, default_num_frequencies  # noqa: E402

MAPS = ("fourier", "nystrom")


def run_map(X, y, test, feature_map, key, num_features=None):
    """One feature map on one fold: the record's measured fields."""
    n = int(np.sum(~test))  # unset, both maps at random Fourier features' default b (Nyström's own is larger)
    m = default_num_frequencies(n, "fourier") if num_features is None else num_features // 2
    config = DirectConfig(feature_map=feature_map, num_frequencies=m)
    _, model, fields = study_cli.fit_and_score(X, y, test, config, key)
    return dict(
        fields, rmse_std=fields["rmse"] / float(np.std(y[~test])), b=int(model.prior_w.values.shape[0])
    )


def main(argv=None):
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_cli.add_fold_options(ap, "maps", MAPS, "(dataset, fold, map, b)")
    args = ap.parse_args(argv)
    if args.table:
        return study_cli.write_table(ap, pathlib.Path(args.out), args.table, render)
    out, names, maps = study_cli.fold_options(ap, args, "maps", MAPS)
    print(f"# Nyström features: jax {jax.__version__}, {os.cpu_count()} cores; {names} x {args.folds} folds x "
          f"{maps}", flush=True)  # fmt: skip
    t_start = time.perf_counter()
    for name, k, X, y, test in study_cli.published_folds(args.data_dir, names, args.folds):
        for feature_map in maps:
            done = {(r["dataset"], r["fold"], r["feature_map"], r["requested_b"]) for r in study_cli.read_jsonl(out)}
            if (name, k, feature_map, args.num_features) in done:
                continue
            rec = dict(
                dataset=name, fold=k, feature_map=feature_map, requested_b=args.num_features,
                n=int((~test).sum()), d=int(X.shape[1]),
            )  # fmt: skip
            rec.update(
                run_map(X, y, test, feature_map, jax.random.fold_in(jax.random.key(0), k), args.num_features)
            )
            rec["load"] = os.getloadavg()[0]
            study_cli.append_jsonl(out, rec)
            print(f"[{name} fold {k}] {feature_map} b={rec['b']}: RMSE {rec['rmse']:.4f} ({rec['rmse_std']:.4f} "
                  f"sd) NLPD {rec['nlpd']:.3f} log evidence {rec['log_evidence']:.1f}; "
                  f"{rec['prepare_seconds']:.1f} + {rec['fit_seconds']:.1f} s; load {rec['load']:.2f}; elapsed "
                  f"{time.perf_counter() - t_start:.0f} s", flush=True)  # fmt: skip
    return 0


def paired(records):
    """`{(dataset, fold, requested_b): {map: record}}` of the folds both maps ran on (the first record of each)."""
    by = {}
    for r in records:
        by.setdefault((r["dataset"], r["fold"], r["requested_b"]), {}).setdefault(r["feature_map"], r)
    return {key: runs for key, runs in by.items() if all(m in runs for m in MAPS)}


def render(records) -> str:
    pairs = paired(records)
    lines = [
        "# Nyström features against random Fourier features, at the same b",
        "",
        "Rendered from `experiments/results/nystrom_features.jsonl` by `python experiments/nystrom_features.py --out "
        "experiments/results/nystrom_features.jsonl --table experiments/results/nystrom_features.md` (the run's "
        "commands are in `experiments/README.md`). The default recipe per feature map "
        "(`DirectConfig(feature_map=...)`), the same key per fold (the same GP step); RMSE and NLPD in the "
        "targets' units, RMSE/sd over the training targets' sd (NLPD: the exact predictive density of every test "
        "row); log evidence: the features' exact log evidence; seconds: `prepare_fold` + `fit_prepared` on this "
        "machine's 2 cores, shared with other jobs (load in the records).",
        "",
        "| dataset | fold | n | b | feature map | RMSE | RMSE/sd | NLPD | log evidence | seconds | load |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, k, _), runs in sorted(pairs.items(), key=lambda kv: (kv[0][0], kv[0][2] or 0, kv[0][1])):
        for m in MAPS:
            r = runs[m]
            lines.append(
                f"| {name} | {k} | {r['n']} | {r['b']} | {m} | {r['rmse']:.4f} | {r['rmse_std']:.4f} | "
                f"{r['nlpd']:.3f} | {r['log_evidence']:.1f} | {r['prepare_seconds'] + r['fit_seconds']:.1f} | "
                f"{r['load']:.1f} |"
            )
    lines += [
        "",
        "Per dataset and b, over its folds: mean RMSE (targets' units) and RMSE/sd of each map, the mean per-fold "
        "RMSE ratio and NLPD difference of Nyström against Fourier, and the median per-fold ratio of their seconds.",
        "",
        "| dataset | b | folds | Fourier RMSE | Nyström RMSE | Fourier RMSE/sd | Nyström RMSE/sd | RMSE ratio | "
        "NLPD difference | seconds ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups = sorted({(name, runs["fourier"]["b"]) for (name, _, _), runs in pairs.items()})
    for name, b in groups:
        rs = [runs for (n, _, _), runs in sorted(pairs.items()) if n == name and runs["fourier"]["b"] == b]
        ratio = statistics.mean(r["nystrom"]["rmse"] / r["fourier"]["rmse"] for r in rs)
        diff = statistics.mean(r["nystrom"]["nlpd"] - r["fourier"]["nlpd"] for r in rs)
        secs = statistics.median(
            (r["nystrom"]["prepare_seconds"] + r["nystrom"]["fit_seconds"])
            / (r["fourier"]["prepare_seconds"] + r["fourier"]["fit_seconds"])
            for r in rs
        )
        lines.append(
            f"| {name} | {b} | {len(rs)} | {statistics.mean(r['fourier']['rmse'] for r in rs):.4f} | "
            f"{statistics.mean(r['nystrom']['rmse'] for r in rs):.4f} | "
            f"{statistics.mean(r['fourier']['rmse_std'] for r in rs):.4f} | "
            f"{statistics.mean(r['nystrom']['rmse_std'] for r in rs):.4f} | "
            f"{ratio:.3f} | {diff:+.3f} | {secs:.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    study_cli.run(main)
