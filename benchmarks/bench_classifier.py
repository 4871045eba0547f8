"""kronvi's default classifier against scikit-learn's cross-validated logistic regression, in one run.

For fold 0 of each classification dataset (`data.csv.gz` with a 0/1 label in the last column,
`test_mask.csv.gz`; the study's folders):

- **kronvi**: `kronvi.sklearn.DirectClassifier(random_state=0)` with its defaults (`kronvi.fit_classifier`:
  standardization, median-heuristic lengthscale, 50 random Fourier frequencies + the inputs + a constant,
  the prior scale of the largest Laplace evidence (searched), Laplace-placed grids of 15 levels, at most 10
  coordinate-ascent sweeps) on the raw training rows, then `predict_proba` on the raw test rows (exact).
  "first" is the first call in this process for the dataset (XLA compilation of its shapes included); the
  other columns are medians of `--repeats` warm calls, predict_proba the median of `--predict-repeats`
  calls on each warm fit (then the median over fits). Its stages come from the fit's own timings.
- **LRCV raw**: `LogisticRegressionCV(Cs=10, cv=5, scoring="neg_log_loss", max_iter=2000)` on the
  standardized raw inputs (training moments).
- **LRCV features**: the same on the very features kronvi fitted (`models_[0].design`, float64).

Log loss on the test rows, probabilities clipped to [1e-12, 1 - 1e-12]. The last table gives, per dataset, the
number of coordinate-ascent sweeps kronvi's fit ran, its coordinate-ascent stage's seconds against LRCV raw's
whole fit, and kronvi's worst test row (its label, both models' probabilities and losses) with both log losses
without that row. Everyone runs with the same thread
settings (the header prints `OPENBLAS_NUM_THREADS`); repeats are interleaved (kronvi, LRCV raw, LRCV features, kronvi, ...) and
medians reported, with the load average before each dataset.

Run: python benchmarks/bench_classifier.py [--repeats 3] [--predict-repeats 5] [--data-dir ../shared/data/classification]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
import warnings

import numpy as np

import kronvi
from kronvi.sklearn import DirectClassifier

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "classification"
DATASETS = ("anes96_vote", "breastcancer_wdbc", "digits_parity", "fair_affairs", "kin40k_median")


def load(name, data_dir):
    """`(X_train, y_train, X_test, y_test)` of fold 0, float64 NumPy arrays."""
    X, y, mask = kronvi.load_uci(pathlib.Path(data_dir) / name)
    test = np.asarray(mask)[:, 0].astype(bool)
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    return X[~test], y[~test], X[test], y[test]


def row_losses(p, y):
    """Each test row's log loss (nats), probabilities clipped to [1e-12, 1 - 1e-12]."""
    p = np.clip(np.asarray(p, np.float64), 1e-12, 1 - 1e-12)
    return -(y * np.log(p) + (1 - y) * np.log1p(-p))


def log_loss(p, y):
    return float(np.mean(row_losses(p, y)))


def run_kronvi(Xtr, ytr, Xte, yte, basis="eigen", predict_repeats=1):
    t0 = time.perf_counter()
    clf = DirectClassifier(random_state=0, basis=basis).fit(Xtr, ytr)
    t1 = time.perf_counter()
    p = clf.predict_proba(Xte)[:, 1]
    t2 = time.perf_counter()
    predict = [t2 - t1]
    for _ in range(predict_repeats - 1):  # the same fitted model again: warm calls only
        t = time.perf_counter()
        clf.predict_proba(Xte)
        predict.append(time.perf_counter() - t)
    info = clf.fit_info_[0]
    return clf, dict(
        fit=t1 - t0, predict=statistics.median(predict), logloss=log_loss(p, yte), scale=info.prior_scale,
        stages=(info.standardize_seconds + info.features_seconds, info.scale_seconds, info.fit_seconds),
        sweeps=int(info.fit.num_iter), p=np.asarray(p, np.float64),
    )  # fmt: skip


def run_lrcv(Xtr, ytr, Xte, yte):
    from sklearn.linear_model import LogisticRegressionCV

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs convergence notes at the largest C
        t0 = time.perf_counter()
        clf = LogisticRegressionCV(Cs=10, cv=5, scoring="neg_log_loss", max_iter=2000).fit(Xtr, ytr)
        t1 = time.perf_counter()
        p = clf.predict_proba(Xte)[:, 1]
        t2 = time.perf_counter()
    return dict(fit=t1 - t0, predict=t2 - t1, logloss=log_loss(p, yte), p=np.asarray(p, np.float64))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--predict-repeats", type=int, default=5,
        help="predict_proba calls timed per warm fit (their median; the first call's is one call)",
    )  # fmt: skip
    ap.add_argument(
        "--compare-basis", action="store_true",
        help="also time DirectClassifier(basis='features') (the weights of the features, unrotated)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    flag = " --compare-basis" if args.compare_basis else ""
    print(
        f"# python benchmarks/bench_classifier.py --datasets {args.datasets} --repeats {args.repeats} "
        f"--predict-repeats {args.predict_repeats}{flag}"
    )
    print(machine())
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; {load_average()}")
    rows = []
    for name in args.datasets.split(","):
        Xtr, ytr, Xte, yte = load(name, args.data_dir)
        print(
            f"\n== {name}: {len(Xtr)} training rows, {len(Xte)} test rows, {Xtr.shape[1]} inputs; {load_average()}"
        )
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd[sd == 0] = 1.0
        raw = ((Xtr - mu) / sd, ytr, (Xte - mu) / sd, yte)
        clf, first = run_kronvi(Xtr, ytr, Xte, yte)
        info = clf.fit_info_[0]
        searched = ", ".join(f"{s:.3g} ({e:.1f})" for s, e in zip(info.scales, np.asarray(info.log_evidence), strict=True))
        print(
            f"  kronvi first call: fit {first['fit']:.2f} s, predict_proba {first['predict']:.3f} s; "
            f"prior sds evaluated (Laplace log evidence): {searched}",
            flush=True,
        )
        model = clf.models_[0]
        feats = tuple(np.asarray(model.design(a), np.float64) for a in (Xtr, Xte))
        feat = (feats[0], ytr, feats[1], yte)
        runs = {"kronvi": [], "LRCV raw": [], "LRCV features": []}
        if args.compare_basis:
            runs["kronvi, features basis"] = []
        for r in range(args.repeats):
            runs["kronvi"].append(run_kronvi(Xtr, ytr, Xte, yte, predict_repeats=args.predict_repeats)[1])
            if args.compare_basis:
                runs["kronvi, features basis"].append(run_kronvi(Xtr, ytr, Xte, yte, basis="features")[1])
            runs["LRCV raw"].append(run_lrcv(*raw))
            runs["LRCV features"].append(run_lrcv(*feat))
            k, lr, lf = runs["kronvi"][-1], runs["LRCV raw"][-1], runs["LRCV features"][-1]
            print(
                f"  repeat {r + 1}/{args.repeats}: kronvi fit {k['fit']:.3f} s (scale {k['scale']:.3g}), "
                f"predict_proba {k['predict']:.3f} s, log loss {k['logloss']:.4f}; LRCV raw {lr['fit']:.3f} s "
                f"({lr['logloss']:.4f}); LRCV features {lf['fit']:.3f} s ({lf['logloss']:.4f})",
                flush=True,
            )
        med = {
            m: {f: statistics.median(x[f] for x in v) for f in ("fit", "predict", "logloss")}
            for m, v in runs.items()
        }
        stages = [statistics.median(x["stages"][i] for x in runs["kronvi"]) for i in range(3)]
        last = {m: v[-1] for m, v in runs.items()}  # the last repeat's probabilities (a fit is deterministic)
        rows.append(dict(name=name, n=len(Xtr), nte=len(Xte), first=first, stages=stages, yte=yte, last=last, **med))

    print("\n## Fit and predict seconds (warm medians) and test log loss, fold 0\n")
    print(
        "| dataset (train / test rows) | kronvi fit | its features / scale choice / CAVI | kronvi first call "
        "| kronvi predict_proba | LRCV raw fit | LRCV features fit | kronvi log loss | LRCV raw log loss "
        "| LRCV features log loss |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        k, lr, lf, s = r["kronvi"], r["LRCV raw"], r["LRCV features"], r["stages"]
        print(
            f"| {r['name']} ({r['n']} / {r['nte']}) | {k['fit']:.3f} | {s[0]:.3f} / {s[1]:.3f} / {s[2]:.3f} | "
            f"{r['first']['fit']:.2f} | {k['predict']:.3f} | {lr['fit']:.3f} | {lf['fit']:.3f} | "
            f"{k['logloss']:.4f} | {lr['logloss']:.4f} | {lf['logloss']:.4f} |"
        )
    if args.compare_basis:
        print("\n## The weights' basis: the Laplace Hessian's eigenbasis (default) against the features\n")
        print("| dataset | log loss, eigen | log loss, features | fit s, eigen | fit s, features |")
        print("|---|---:|---:|---:|---:|")
        for r in rows:
            k, kf = r["kronvi"], r["kronvi, features basis"]
            print(f"| {r['name']} | {k['logloss']:.4f} | {kf['logloss']:.4f} | {k['fit']:.3f} | {kf['fit']:.3f} |")
    print("\n## Targets: fit no slower than LRCV, log loss no worse, predict_proba under 0.1 s\n")
    print(
        "| dataset | fit / LRCV raw | fit / LRCV features | log loss - LRCV raw | log loss - LRCV features | predict_proba < 0.1 s |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        k, lr, lf = r["kronvi"], r["LRCV raw"], r["LRCV features"]
        print(
            f"| {r['name']} | {k['fit'] / lr['fit']:.2f} | {k['fit'] / lf['fit']:.2f} | "
            f"{k['logloss'] - lr['logloss']:+.4f} | {k['logloss'] - lf['logloss']:+.4f} | "
            f"{'yes' if k['predict'] < 0.1 else 'NO'} ({k['predict']:.3f} s) |"
        )
    print(
        "\n## What the targets leave: the coordinate ascent's sweeps, and each log loss without kronvi's worst "
        "test row\n"
    )
    print(
        "| dataset | CAVI sweeps | CAVI stage / LRCV raw fit | kronvi's worst test row: label, kronvi p(1) (nats) "
        "| LRCV raw p(1) (nats) | log loss without it: kronvi / LRCV raw |"
    )
    print("|---|---:|---:|---|---|---|")
    for r in rows:
        k, lr, y = r["last"]["kronvi"], r["last"]["LRCV raw"], r["yte"]
        lk, ll = row_losses(k["p"], y), row_losses(lr["p"], y)
        i = int(np.argmax(lk))
        rest = np.arange(len(y)) != i
        print(
            f"| {r['name']} | {k['sweeps']} | {r['stages'][2] / r['LRCV raw']['fit']:.2f} | {y[i]:.0f}, "
            f"{k['p'][i]:.5f} ({lk[i]:.2f}) | {lr['p'][i]:.5f} ({ll[i]:.2f}) | "
            f"{lk[rest].mean():.4f} / {ll[rest].mean():.4f} |"
        )
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
