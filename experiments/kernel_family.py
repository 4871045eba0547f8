"""The kernel family of the features (issue 49, item 3): the default recipe with squared-exponential,
Matérn 5/2 and Matérn 3/2 random features, and `DirectConfig(kernel="auto")`'s choice among them by the
exact log evidence of each fold's features.

For each of the first `--folds` published folds of each dataset, the default recipe with random Fourier
features (`DirectConfig(feature_map="fourier")`, b = 2000 below 20,000 training rows and 4000 above; with
`--feature-map nystrom` Nyström features, b = 2000 below 20,000 rows and 6000 above) is prepared and fitted once per kernel
(`DirectConfig(kernel=k)`), all with the same key, so the GP step sees the same rows and the features the
same draws; the GP step fits that kernel's hyperparameters. Per kernel: the DIRECT fit's test RMSE
(`kronvi.predict`), its NLPD (`kronvi.log_density`, the exact predictive density of every test row, the
noise included; a far-tail point whose value misses the density's tolerance keeps its best value, counted in
`density_below_tolerance`, as `kronvi fit` does), the GP step's log marginal likelihood (of its chosen start, on its <= 1,000 rows in the committed run), the
features' exact log evidence (`PreparedFold.log_evidence`: Bayesian linear regression on the centred
features at the evidence-chosen prior scale and noise) and the seconds of `prepare_fold` and `fit_prepared`.
`--num-features` sets b for every kernel (write those records to a file of their own).
`"auto"` is read off the records: the kernel of the largest log evidence (what `kernel="auto"` fits; its
time is the three preparations' plus the chosen fit). Every record holds the 1-minute load average.

Usage:
  python experiments/kernel_family.py --data-dir ../shared/data/uci --datasets protein,kin40k,elevators,bike \\
      --folds 3 --out experiments/results/kernel_family.jsonl --resume
  python experiments/kernel_family.py --out experiments/results/kernel_family.jsonl \\
      --table experiments/results/kernel_family.md
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

from kronvi.pipeline import DirectConfig  # noqa: E402

KERNELS = ("rbf", "matern52", "matern32")


def run_kernel(X, y, test, kernel, key, num_features=None, feature_map="fourier"):
    """One kernel on one fold (b = `num_features`, default the recipe's): the record's measured fields."""
    config = DirectConfig(
        kernel=kernel, feature_map=feature_map, num_frequencies=None if num_features is None else num_features // 2
    )  # random features of each kernel's spectral density, or landmarks of its kernel
    fold, _, fields = study_cli.fit_and_score(X, y, test, config, key)
    info = fold.gp_info
    return dict(
        fields,
        gp_lml=float(np.asarray(info.log_marginal_likelihoods)[int(info.chosen)]),
        b=int(fold.stats.Phity.shape[0]),
        feature_map=feature_map,
        lengthscales=[float(v) for v in np.asarray(fold.hyper.lengthscales)],
    )


def main(argv=None):
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_cli.add_fold_options(ap, "kernels", KERNELS, "(dataset, fold, kernel)")
    ap.add_argument("--feature-map", default="fourier", choices=("fourier", "nystrom"), help="the features of every kernel")
    args = ap.parse_args(argv)
    if args.table:
        return study_cli.write_table(ap, pathlib.Path(args.out), args.table, render)
    out, names, kernels = study_cli.fold_options(ap, args, "kernels", KERNELS)
    print(f"# kernel family: jax {jax.__version__}, {os.cpu_count()} cores; {names} x {args.folds} folds x "
          f"{kernels}", flush=True)  # fmt: skip
    t_start = time.perf_counter()
    for name, k, X, y, test in study_cli.published_folds(args.data_dir, names, args.folds):
        for kernel in kernels:
            done = {(r["dataset"], r["fold"], r["kernel"]) for r in study_cli.read_jsonl(out)}
            if (name, k, kernel) in done:
                continue
            rec = dict(dataset=name, fold=k, kernel=kernel, n=int((~test).sum()), d=int(X.shape[1]))
            key = jax.random.fold_in(jax.random.key(0), k)
            rec.update(run_kernel(X, y, test, kernel, key, args.num_features, args.feature_map))
            rec["load"] = os.getloadavg()[0]
            study_cli.append_jsonl(out, rec)
            print(f"[{name} fold {k}] {kernel}: RMSE {rec['rmse']:.4f} NLPD {rec['nlpd']:.3f} log evidence "
                  f"{rec['log_evidence']:.1f} GP LML {rec['gp_lml']:.1f}; {rec['prepare_seconds']:.1f} + "
                  f"{rec['fit_seconds']:.1f} s; load {rec['load']:.2f}; elapsed "
                  f"{time.perf_counter() - t_start:.0f} s", flush=True)  # fmt: skip
    return 0


def complete_folds(records):
    """`{(dataset, fold): {kernel: record}}` of the folds every kernel ran on (the first record of each)."""
    by = {}
    for r in records:
        by.setdefault((r["dataset"], r["fold"]), {}).setdefault(r["kernel"], r)
    return {key: runs for key, runs in by.items() if all(k in runs for k in KERNELS)}


def auto_kernel(runs: dict) -> str:
    """What `kernel="auto"` fits: the kernel of the largest log evidence (the first of `KERNELS` on a tie)."""
    return max(KERNELS, key=lambda k: (runs[k]["log_evidence"], -KERNELS.index(k)))


def render(records) -> str:
    folds = complete_folds(records)
    lines = [
        "# The kernel family of the features: squared exponential, Matérn 5/2, Matérn 3/2, and the evidence's choice",
        "",
        "Rendered from `experiments/results/kernel_family.jsonl` by `python experiments/kernel_family.py --out "
        "experiments/results/kernel_family.jsonl --table experiments/results/kernel_family.md` (the run's command "
        "is in `experiments/README.md`). The default recipe per kernel (`DirectConfig(kernel=...)`), the same key "
        "per fold; RMSE and NLPD in the targets' units (NLPD: the exact predictive density of every test row); "
        "log evidence: the features' exact log evidence at the evidence-chosen prior scale and noise (what "
        "`kernel=\"auto\"` compares); GP LML: the GP step's log marginal likelihood on its rows (<= 1,000 when this ran); "
        "seconds: `prepare_fold` + `fit_prepared` on this machine's 2 cores, shared with other jobs (load in "
        "the records).",
        "",
        "| dataset | fold | n | b | kernel | RMSE | NLPD | log evidence | GP LML | seconds | auto |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for (name, k), runs in sorted(folds.items()):
        chosen = auto_kernel(runs)
        for kernel in KERNELS:
            r = runs[kernel]
            lines.append(
                f"| {name} | {k} | {r['n']} | {r['b']} | {kernel} | {r['rmse']:.4f} | {r['nlpd']:.3f} | "
                f"{r['log_evidence']:.1f} | {r['gp_lml']:.1f} | {r['prepare_seconds'] + r['fit_seconds']:.1f} | "
                f"{'chosen' if kernel == chosen else ''} |"
            )
    lines += [
        "",
        "Per dataset, over its folds: mean per-fold RMSE ratio and mean NLPD difference against the squared "
        "exponential (the default), for each Matérn kernel and for `\"auto\"`, and how often `\"auto\"` chose each "
        "kernel; `\"auto\"` seconds: the median over folds of the three preparations plus the chosen fit, over the "
        "default's.",
        "",
        "| dataset | folds | matern52 RMSE ratio / NLPD diff | matern32 RMSE ratio / NLPD diff | auto RMSE ratio / "
        "NLPD diff | auto chose (rbf/m52/m32) | auto seconds ratio |",
        "|---|---:|---|---|---|---|---:|",
    ]
    names = sorted({name for name, _ in folds})
    for name in names:
        runs_list = [runs for (n, _), runs in sorted(folds.items()) if n == name]
        cells = []
        for pick in ("matern52", "matern32", None):
            ratios, diffs = [], []
            for runs in runs_list:
                r = runs[pick or auto_kernel(runs)]
                ratios.append(r["rmse"] / runs["rbf"]["rmse"])
                diffs.append(r["nlpd"] - runs["rbf"]["nlpd"])
            cells.append(f"{statistics.mean(ratios):.3f} / {statistics.mean(diffs):+.3f}")
        chose = [auto_kernel(runs) for runs in runs_list]
        counts = "/".join(str(chose.count(k)) for k in KERNELS)
        secs = statistics.median(
            (sum(runs[k]["prepare_seconds"] for k in KERNELS) + runs[auto_kernel(runs)]["fit_seconds"])
            / (runs["rbf"]["prepare_seconds"] + runs["rbf"]["fit_seconds"])
            for runs in runs_list
        )
        lines.append(f"| {name} | {len(runs_list)} | {' | '.join(cells)} | {counts} | {secs:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    study_cli.run(main)
