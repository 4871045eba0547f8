"""Folds that blow up: does an exact Gaussian process blow up on the same folds as kronvi's default? (issue 49,
item 0: "no fold may blow up where the paper's recipe and a GP do not"; `docs/decisions/default-recipe.md`,
"Test rows far from the training inputs").

For each of the 10 published folds of each dataset with at most `--max-rows` rows, fits scikit-learn's
`GaussianProcessRegressor` (the exact GP a user would pick on a few hundred rows: a constant times an ARD squared
exponential kernel plus white noise, `normalize_y`, `--restarts` optimizer restarts, on the inputs standardized
with the training rows' mean and sd) and records its test RMSE, NLPD (the Gaussian predictive with the noise) and
seconds. Every record is appended to `--out` as soon as it exists; a (dataset, fold) already there is skipped.

`--table` renders, per dataset, the largest fold's RMSE over the median fold's for the exact GP and for the
records of `experiments/uci.py` named by `--uci` (a comma list of its JSON files; `direct-mf` is kronvi's default,
`direct-mf-sparse` the paper's recipe; a later file's record of a dataset and method replaces an earlier one's),
with each method's folds beyond 2x its median.

Usage:
  python experiments/fold_spread.py --data-dir ../shared/data/uci --out experiments/results/fold_spread.jsonl
  python experiments/fold_spread.py --out experiments/results/fold_spread.jsonl --table \\
      experiments/results/fold_spread.md --uci experiments/results/uci.json,experiments/results/uci_support.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import study_cli  # noqa: E402
from study_cli import BLOWN_UP, spread  # noqa: E402

METHODS = {"direct-mf": "kronvi default", "direct-mf-sparse": "paper's recipe", "exact-gp": "exact GP"}


def exact_gp(X, y, test, restarts: int, seed: int) -> dict:
    """One record's fields: scikit-learn's exact GP on the training rows of one fold, scored on its test rows."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)  # an input constant on the training rows carries no information
    d = X.shape[1]
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(d), (1e-2, 1e3)) + WhiteKernel(1e-2, (1e-6, 1e1))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a bound reached (an input switched off) is a fit
        gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=restarts, random_state=seed)
        gp.fit((Xtr - mu) / sd, ytr)
    seconds = time.perf_counter() - t0
    mean, std = gp.predict((Xte - mu) / sd, return_std=True)  # the noise is part of the kernel: y's predictive
    var = np.maximum(std**2, 1e-300)
    nlpd = float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (yte - mean) ** 2 / var))
    return dict(
        rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=nlpd, seconds=seconds,
        log_marginal_likelihood=float(gp.log_marginal_likelihood_value_), kernel=str(gp.kernel_),
    )  # fmt: skip


def uci_folds(paths) -> dict:
    """``{(dataset, method): {fold: RMSE}}`` of `experiments/uci.py` JSON files; a later file's record of a dataset
    and method replaces an earlier file's."""
    out = {}
    for path in paths:
        for r in json.loads(pathlib.Path(path).read_text()):
            if r["method"] in METHODS:
                out[(r["dataset"], r["method"])] = {int(f["fold"]): float(f["rmse"]) for f in r["per_fold"]}
    return out


def num_rows(folder) -> int:
    """The rows of a dataset folder, counted from its test mask without parsing the data."""
    import gzip

    with gzip.open(pathlib.Path(folder) / "test_mask.csv.gz", "rt") as f:
        return sum(1 for line in f if line.strip())


def render(records, uci=None) -> str:
    uci = uci or {}
    gp = {}
    for r in records:
        gp.setdefault(r["dataset"], {})[r["fold"]] = r
    lines = [
        "# Folds that blow up: kronvi's default, the paper's recipe and an exact GP",
        "",
        "Rendered by `python experiments/fold_spread.py --out <records> --table <this file> --uci <files>` (commands "
        "in `experiments/README.md`). Per dataset: each method's mean RMSE over the 10 folds, its largest fold's "
        f"RMSE over its median fold's, and the folds above {BLOWN_UP:g}x the median (a blown-up fold). The exact GP: "
        "scikit-learn's `GaussianProcessRegressor` (constant x ARD squared exponential + white noise, normalized "
        "targets, restarts) on the standardized training rows; kronvi's default (`direct-mf`) and the paper's "
        "recipe (`direct-mf-sparse`) from `experiments/uci.py`'s records.",
        "",
        "| dataset | folds | " + " | ".join(f"{m}: mean, max/median, blown up" for m in METHODS.values()) + " | GP s a fold |",
        "|---|---:|" + "---|" * len(METHODS) + "---:|",
    ]
    for name in sorted(gp):
        ks = sorted(gp[name])
        folds = [gp[name][k] for k in ks]
        cells = []
        for method in METHODS:
            if method == "exact-gp":
                rmse = [f["rmse"] for f in folds]
            else:  # the GP's folds only, so every column spreads over the same folds
                theirs = uci.get((name, method), {})
                rmse = [theirs[k] for k in ks] if all(k in theirs for k in ks) else None
            if not rmse:
                cells.append("—")
                continue
            ratio, blown = spread(rmse)
            cells.append(f"{np.mean(rmse):.4g}, {ratio:.2f}, {' '.join(map(str, blown)) or 'none'}")
        secs = np.median([f["seconds"] for f in folds])
        lines.append(f"| {name} | {len(folds)} | " + " | ".join(cells) + f" | {secs:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="", help="comma list (default: every folder of --data-dir)")
    ap.add_argument("--max-rows", type=int, default=1100, help="skip datasets with more rows than this")
    ap.add_argument("--folds", type=int, default=10, help="the first K published folds")
    ap.add_argument("--restarts", type=int, default=3, help="the GP optimizer's restarts")
    ap.add_argument("--out", required=True, help="JSON-lines records, appended")
    ap.add_argument("--table", default=None, help="render the markdown table from --out and stop")
    ap.add_argument("--uci", default="", help="comma list of experiments/uci.py JSON files for --table")
    args = ap.parse_args(argv)
    if args.table:
        paths = [p for p in args.uci.split(",") if p]
        missing = [p for p in paths if not pathlib.Path(p).is_file()]
        if missing:
            ap.error(f"--uci names no file {missing}")
        uci = uci_folds(paths)
        return study_cli.write_table(ap, args.out, args.table, lambda records: render(records, uci))
    if args.folds < 1 or args.restarts < 0 or args.max_rows < 2:
        ap.error(f"--folds must be >= 1, --restarts >= 0, --max-rows >= 2, got {args.folds}, {args.restarts}, {args.max_rows}")
    if not pathlib.Path(args.data_dir).is_dir():
        ap.error(f"--data-dir {args.data_dir} is not a folder")
    datasets = args.datasets or ",".join(sorted(p.name for p in pathlib.Path(args.data_dir).iterdir() if p.is_dir()))
    names = study_cli.dataset_names(ap, args.data_dir, datasets)
    names = [d for d in names if num_rows(pathlib.Path(args.data_dir) / d) <= args.max_rows]

    def one(name, k, X, y, test):
        return dict(n=int((~test).sum()), **exact_gp(X, y, test, args.restarts, seed=k))

    def line(rec):
        return f"[{rec['dataset']} fold {rec['fold']}] exact GP RMSE {rec['rmse']:.4g}, NLPD {rec['nlpd']:.3f}, {rec['seconds']:.1f} s"

    return study_cli.run_folds(args, names, one, line)


if __name__ == "__main__":
    study_cli.run(main)
