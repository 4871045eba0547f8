"""How much the default recipe's test RMSE moves with the seed, and which random step moves it.

For each dataset (fold 0 of its published folds) and each variant of the recipe, fits with
``jax.random.key(s)`` for ``s`` in 0..S-1 and reports the test RMSE of every seed, their spread (max / min)
and mean, and the NLPD on at most 500 test rows. With ``--decompose`` it then separates the two random steps
of the default recipe on the same fold: the GP step's (its subsample and restarts, drawn from the key) and the
random frequencies': "gp fixed" reuses seed 0's GP hyperparameters with every seed's features, "features
fixed" draws seed 0's features with every seed's GP hyperparameters (``prepare_fold(gp=...)``).

With ``--folds K`` it runs instead the first K of the published folds (the UCI study's folds,
``experiments/uci.py``'s ``fold_masks``) with the UCI study's keys (``fold_in(dataset_key(name, s), k)``: seed 0
is the study's own key) and reports, per variant, each seed's K-fold mean test RMSE (what the UCI tables
print), the spread (max / min) and mean of those seed means, and the same for fold 0. Every fit is one JSON
line in ``--jsonl`` (a rerun skips the fits already there); ``--report`` prints the summary from that file
alone. The default's GP step runs once per (fold, seed); the other variants reuse its hyperparameters
(``prepare_fold(gp=...)``, the same key, so the same features as their own GP step would give):

  default      ``DirectConfig()``: b = 2000 random Fourier features below 4,000 training rows, 2000 Nyström
               features from there and 6000 from 20,000 to 100,000 (4000 random Fourier features in the
               committed kin40k records, the default when they ran)
  b8000, b16000  b = 8000 or 16,000 features (with fewer training rows than features the eigenbasis comes
               from the n x n Gram matrix, so b costs linearly)
  exact-gp     the b -> infinity limit of the default's model: the exact GP predictive mean (dense, float64)
               on the standardized inputs and scaled targets, with the GP step's lengthscales, signal and
               noise variances and the default's centred features' kernel
               k(x, x') - m(x) - m(x') + mean(m), m(x) the mean of k(x, x_i) over the training rows
               (an intercept outside the prior)
  exact-gp-ev  the same with the signal and noise variances at the maximizer of that kernel's exact
               evidence (what the default's evidence step tends to as b grows)
  gp-fixed     the default with this seed's features and seed 0's GP hyperparameters (``--decompose``'s
               "gp fixed" per fold); features-fixed: seed 0's features with this seed's GP hyperparameters

Seconds are a fit's (preparation, fit and prediction), the GP step's included (for the variants that reuse
it, the default's GP seconds are added).

Usage:
  python experiments/seed_spread.py --data-dir ../shared/data/uci --datasets concrete,energy \\
      --variants default,b4000,halton,orthogonal --decompose > experiments/results/seed_spread.txt
  python experiments/seed_spread.py --data-dir ../shared/data/uci --datasets concrete,energy --folds 10 \\
      --variants default,b8000,b16000,exact-gp,exact-gp-ev --jsonl experiments/results/seed_spread_folds.jsonl
  python experiments/seed_spread.py --report --jsonl experiments/results/seed_spread_folds.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import sys
import time

# OpenBLAS threads inside XLA's thread pool deadlock on small machines: single-threaded before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.optimize  # noqa: E402
import uci  # noqa: E402  (experiments/uci.py: the study's folds and keys)

import kronvi  # noqa: E402
from kronvi import pipeline  # noqa: E402

_RFF = dict(feature_map="fourier")  # the variants of random Fourier features (the default from 4,000 rows is Nyström)
VARIANTS = {
    "default": {},
    "b4000": dict(num_frequencies=2000, **_RFF),
    "halton": dict(frequency_sampling="halton", **_RFF),
    "orthogonal": dict(frequency_sampling="orthogonal", **_RFF),
    "halton_b4000": dict(frequency_sampling="halton", num_frequencies=2000, **_RFF),
    "b8000": dict(num_frequencies=4000, **_RFF),
    "b16000": dict(num_frequencies=8000, **_RFF),
}
EXACT = ("exact-gp", "exact-gp-ev")  # --folds only: the dense GP of the default's GP step
# --folds only: the default with seed 0's GP hyperparameters and this seed's features, and the reverse
DECOMPOSE = ("gp-fixed", "features-fixed")


def rmse(model, X, y) -> float:
    return float(np.sqrt(np.mean((model.predict(X).mean - y) ** 2)))


def fit_with_gp(seed: int, gp, rows, config) -> float:
    """Test RMSE of the fit with `jax.random.key(seed)`'s features and the GP hyperparameters `gp`."""
    Xtr, ytr, Xte, yte = rows
    fold = pipeline.prepare_fold(jax.random.key(seed), Xtr, ytr, config, gp=gp)
    return rmse(pipeline.fit_prepared(fold, config).model, Xte, yte)


def spread_line(label: str, values) -> str:
    v = np.asarray(values)
    return (
        f"{label:<28} RMSE {' '.join(f'{x:.4f}' for x in v)}  spread {v.max() / v.min():.3f}  "
        f"mean {v.mean():.4f}"
    )


def _sq_dist(A, B):
    return np.maximum(np.sum(A**2, 1)[:, None] + np.sum(B**2, 1)[None, :] - 2.0 * A @ B.T, 0.0)


def exact_gp_means(fold: pipeline.PreparedFold, X_train, y_train, X_test) -> dict:
    """Exact GP predictive means of the test rows in the targets' units, with `fold`'s GP hyperparameters
    ("exact-gp") and with the signal and noise variances at the centred kernel's evidence maximizer
    ("exact-gp-ev", those variances: "evidence_optimum"); dense float64 (the b -> infinity limit of the
    default's centred features)."""
    mean = np.asarray(fold.standardizer.mean, np.float64)
    scale = np.asarray(fold.standardizer.scale, np.float64)
    ell = np.asarray(fold.hyper.lengthscales, np.float64)
    Xs = (np.asarray(X_train, np.float64) - mean) / scale / ell
    Xt = (np.asarray(X_test, np.float64) - mean) / scale / ell
    y_offset, y_scale = float(fold.y_offset), float(fold.y_scale)
    ys = (np.asarray(y_train, np.float64) - y_offset) / y_scale
    K = np.exp(-0.5 * _sq_dist(Xs, Xs))
    Ks = np.exp(-0.5 * _sq_dist(Xt, Xs))
    m_train, m_test = K.mean(1), Ks.mean(1)
    m_bar = m_train.mean()
    Kc = K - m_train[:, None] - m_train[None, :] + m_bar
    Ksc = Ks - m_test[:, None] - m_train[None, :] + m_bar
    lam, V = scipy.linalg.eigh(Kc)
    lam = np.maximum(lam, 0.0)
    c = V.T @ ys
    KsV = Ksc @ V

    def predict(s2, n2):
        return y_offset + y_scale * (s2 * KsV @ (c / (s2 * lam + n2)))

    def neg_evidence(log_params):
        s2, n2 = np.exp(log_params)
        d = s2 * lam + n2
        return 0.5 * np.sum(c**2 / d) + 0.5 * np.sum(np.log(d))

    s2, n2 = float(fold.hyper.signal_variance), float(fold.hyper.noise_variance)
    opt = scipy.optimize.minimize(
        neg_evidence,
        np.log([s2, n2]),
        method="Nelder-Mead",
        options=dict(xatol=1e-6, fatol=1e-9, maxiter=2000),
    )
    s2_ev, n2_ev = np.exp(opt.x)
    return {
        "exact-gp": predict(s2, n2),
        "exact-gp-ev": predict(s2_ev, n2_ev),
        "evidence_optimum": (s2_ev, n2_ev),
    }


def read_jsonl(path) -> list[dict]:
    p = pathlib.Path(path)
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def recorded_gp(record: dict, dtype) -> tuple[kronvi.inputs.GPHyperparameters, None]:
    """`prepare_fold`'s `gp=` from a default fit's record: its GP step's hyperparameters."""
    lengthscales, signal, noise = (np.asarray(a, dtype) for a in record["gp"])
    return kronvi.inputs.GPHyperparameters(lengthscales, signal, noise), None


def run_folds(args) -> None:
    """Every (dataset, fold, seed, variant) fit not yet in `args.jsonl`, appended to it one line each.

    A (fold, seed)'s default fit is recorded with its GP step's hyperparameters, which the other variants
    reuse from the record ("gp-fixed": seed 0's, "features-fixed": this seed's with seed 0's key)."""
    records_on_disk = read_jsonl(args.jsonl)
    done = {(r["dataset"], r["variant"], r["fold"], r["seed"]) for r in records_on_disk}
    defaults = {(r["dataset"], r["fold"], r["seed"]): r for r in records_on_disk if r["variant"] == "default"}
    variants = args.variants.split(",")
    for name in args.datasets.split(","):
        X, y, mask = kronvi.load_uci(os.path.join(args.data_dir, name))
        for k in range(args.folds):
            train, test = uci.fold_masks(mask, k)
            Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
            for s in range(args.seeds):
                todo = [v for v in variants if (name, v, k, s) not in done]
                if not todo:
                    continue
                key = jax.random.fold_in(uci.dataset_key(name, s), k)
                config = kronvi.DirectConfig()
                records = []
                fold = None
                if "default" in todo or any(v in EXACT for v in todo) or (name, k, s) not in defaults:
                    t0 = time.perf_counter()
                    fold = pipeline.prepare_fold(key, Xtr, ytr, config)
                    hyper = [np.asarray(a, np.float64).tolist() for a in fold.hyper]
                    base = dict(dataset=name, fold=k, seed=s, n_train=int(train.sum()))
                    rec = dict(base, variant="default", gp=hyper, gp_seconds=fold.init_seconds)
                    if "default" in todo:
                        rec["rmse"] = rmse(pipeline.fit_prepared(fold, config).model, Xte, yte)
                        rec["seconds"] = time.perf_counter() - t0
                        records.append(rec)
                    defaults.setdefault((name, k, s), rec)
                own = defaults[name, k, s]
                gp_seconds = own["gp_seconds"]
                base = dict(dataset=name, fold=k, seed=s, n_train=int(train.sum()), gp_seconds=gp_seconds)
                dtype = np.asarray(fold.X).dtype if fold is not None else np.float32
                for v in todo:
                    if v in DECOMPOSE and s == 0 and "rmse" in own:  # seed 0's own fit: the default's
                        records.append(dict(base, variant=v, rmse=own["rmse"], seconds=own["seconds"]))
                    elif v in VARIANTS and v != "default" or v in DECOMPOSE:
                        t1 = time.perf_counter()
                        cfg = kronvi.DirectConfig(**VARIANTS.get(v, {}))
                        gp = recorded_gp(own, dtype)
                        fkey = key
                        if v == "gp-fixed":
                            gp = recorded_gp(defaults[name, k, 0], dtype)
                        elif v == "features-fixed":
                            fkey = jax.random.fold_in(uci.dataset_key(name, 0), k)
                        model = pipeline.fit_prepared(
                            pipeline.prepare_fold(fkey, Xtr, ytr, cfg, gp=gp), cfg
                        ).model
                        value = rmse(model, Xte, yte)
                        secs = time.perf_counter() - t1 + gp_seconds
                        records.append(dict(base, variant=v, rmse=value, seconds=secs))
                if any(v in EXACT for v in todo):
                    t1 = time.perf_counter()
                    means = exact_gp_means(fold, Xtr, ytr, Xte)
                    secs = time.perf_counter() - t1 + gp_seconds
                    for v in EXACT:
                        if v in todo:
                            value = float(np.sqrt(np.mean((means[v] - yte) ** 2)))
                            records.append(dict(base, variant=v, rmse=value, seconds=secs))
                with open(args.jsonl, "a") as f:
                    for r in records:
                        r["load"] = os.getloadavg()[0]
                        f.write(json.dumps(r) + "\n")
                        print(
                            f"{name} fold {k} seed {s} {r['variant']:<12} RMSE {r['rmse']:.4f}  {r['seconds']:.1f} s",
                            flush=True,
                        )


def report(path) -> None:
    """The summary of the fits in `path`: per dataset and variant, each seed's mean RMSE over the folds every
    seed has, their spread and mean; fold 0's; seconds a fit."""
    records = read_jsonl(path)
    loads = [r["load"] for r in records]
    print(
        f"{len(records)} fits from {path}; load average (1 min) at the fits: {min(loads):.2f}-{max(loads):.2f}, median {np.median(loads):.2f}"
    )
    for name in dict.fromkeys(r["dataset"] for r in records):
        rows = [r for r in records if r["dataset"] == name]
        print(f"\n{name}: {rows[0]['n_train']} training rows (fold 0)")
        for v in dict.fromkeys(r["variant"] for r in rows):
            table = {(r["fold"], r["seed"]): r for r in rows if r["variant"] == v}
            seeds = sorted({s for _, s in table})
            folds = [k for k in sorted({k for k, _ in table}) if all((k, s) in table for s in seeds)]
            per_seed = [np.mean([table[k, s]["rmse"] for k in folds]) for s in seeds]
            secs = np.mean([table[k, s]["seconds"] for k in folds for s in seeds])
            med = np.median([table[k, s]["seconds"] for k in folds for s in seeds])  # the compiling fit aside
            versus = ""
            base = {(r["fold"], r["seed"]): r for r in rows if r["variant"] == "default"}
            pairs = [(k, s) for k in folds for s in seeds]
            if v != "default" and all(p in base for p in pairs):  # the default on the same folds and seeds
                ratio = np.mean([table[p]["rmse"] for p in pairs]) / np.mean([base[p]["rmse"] for p in pairs])
                slower = secs / np.mean([base[p]["seconds"] for p in pairs])
                by_median = med / np.median([base[p]["seconds"] for p in pairs])
                versus = (
                    f"; mean RMSE {100 * (ratio - 1):+.1f}% and {slower:.1f}x the seconds of the default's,"
                    f" {by_median:.1f}x by medians"
                )
            print(
                spread_line(f"{v}, {len(folds)}-fold mean", per_seed)
                + f"  {secs:.1f} s a fit, median {med:.1f} s ({len(seeds)} seeds{versus})"
            )
            if 0 in folds:
                print(spread_line(f"{v}, fold 0", [table[0, s]["rmse"] for s in seeds]))
            if v == "default":
                same = sum(all(table[k, s]["gp"] == table[k, seeds[0]]["gp"] for s in seeds) for k in folds)
                print(
                    f"{'':<28} the GP step's hyperparameters are the same for every seed in {same} of {len(folds)} folds"
                )
        worst = []
        for v in dict.fromkeys(r["variant"] for r in rows):
            values = {(r["fold"], r["seed"]): r["rmse"] for r in rows if r["variant"] == v}
            seeds = sorted({s for _, s in values})
            folds = [k for k in sorted({k for k, _ in values}) if all((k, s) in values for s in seeds)]
            fold_spreads = [
                max(values[k, s] for s in seeds) / min(values[k, s] for s in seeds) for k in folds
            ]
            worst.append(f"{v} {np.mean(fold_spreads):.3f} (max {np.max(fold_spreads):.3f})")
        print("spread of the seeds within a fold, mean over the folds: " + "; ".join(worst))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(uci.DEFAULT_DATA))
    ap.add_argument("--datasets", default="concrete,energy")
    ap.add_argument("--variants", default="default,b4000")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--decompose", action="store_true")
    ap.add_argument(
        "--folds", type=int, default=None, help="run the first FOLDS published folds (with --jsonl)"
    )
    ap.add_argument("--jsonl", default=None, help="--folds: one line per fit, appended; --report: read")
    ap.add_argument("--report", action="store_true", help="print the summary of --jsonl and stop")
    args = ap.parse_args(argv)
    if args.report or args.folds is not None:
        if args.jsonl is None:
            ap.error("--folds and --report need --jsonl")
        if args.report:
            report(args.jsonl)
            return
        print(
            f"kronvi {kronvi.__version__}, jax {jax.__version__}, load average {os.getloadavg()}", flush=True
        )
        print("$ python " + " ".join(map(shlex.quote, sys.argv)), flush=True)
        run_folds(args)
        print(f"load average at the end {os.getloadavg()}", flush=True)
        return
    print(f"kronvi {kronvi.__version__}, jax {jax.__version__}, {args.seeds} seeds, fold 0", flush=True)
    for name in args.datasets.split(","):
        X, y, mask = kronvi.load_uci(os.path.join(args.data_dir, name))
        te = mask[:, 0].astype(bool)
        Xtr, ytr, Xte, yte = X[~te], y[~te], X[te], y[te]
        print(f"\n{name}: {len(ytr)} training rows, {len(yte)} test rows", flush=True)
        for variant in args.variants.split(","):
            config = kronvi.DirectConfig(**VARIANTS[variant])
            values, nlpds, t0 = [], [], time.perf_counter()
            for s in range(args.seeds):
                run = kronvi.cv.run_fold(jax.random.key(s), Xtr, ytr, Xte, yte, config, density_rows=500)
                values.append(run.result.rmse)
                nlpds.append(run.result.nlpd)
            secs = (time.perf_counter() - t0) / args.seeds
            print(
                f"{spread_line(variant, values)}  NLPD {np.mean(nlpds):.3f}  {secs:.1f} s a fit", flush=True
            )
        if args.decompose:
            config = kronvi.DirectConfig()
            gps = [pipeline.prepare_fold(jax.random.key(s), Xtr, ytr, config) for s in range(args.seeds)]
            gps = [(f.hyper, f.gp_info) for f in gps]

            rows = (Xtr, ytr, Xte, yte)
            gp_fixed = [fit_with_gp(s, gps[0], rows, config) for s in range(args.seeds)]
            features_fixed = [fit_with_gp(0, gps[s], rows, config) for s in range(args.seeds)]
            print(spread_line("default, gp fixed", gp_fixed), flush=True)
            print(spread_line("default, features fixed", features_fixed), flush=True)
            same = all(
                np.allclose(np.asarray(g[0].lengthscales), np.asarray(gps[0][0].lengthscales)) for g in gps
            )
            print(f"the GP step's lengthscales are the same for every seed: {same}", flush=True)


if __name__ == "__main__":
    main()
