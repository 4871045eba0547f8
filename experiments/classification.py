"""Binary classification study: DIRECT logistic regression against three baselines, 10 stratified folds.

For every dataset folder (``data.csv.gz`` with a 0/1 label in the last column, ``test_mask.csv.gz``) and fold,
the inputs are standardized with training-fold statistics. Methods:

  direct-logistic   kronvi.fit_classifier with its defaults (the options below aside), on the raw inputs:
                    DIRECT mean-field logistic regression (the default "tilted" bound) with posterior-placed
                    grids (kronvi.logistic.laplace_grid_prior): weight j on 15 levels spanning its Laplace
                    MAP +- 4 Laplace marginal sds, prior log-probabilities from N(0, s^2) at those levels.
                    Features: b = 2 D + d + 1: D = --num-frequencies
                    random Fourier features [cos, sin] / sqrt(D), the d standardized inputs / sqrt(d) and a
                    constant 1 (the kernel of the implied GP: squared-exponential plus linear plus constant).
                    Lengthscale: the median heuristic (the median pairwise distance between at most 1000
                    standardized training inputs). Prior sd s of the weights: per fold, the one of the
                    largest Laplace evidence of the Gaussian-prior model on the same features (searched
                    for along its slope), or the best of --prior-scales when given.
                    Coordinate ascent from the Laplace start: at most --max-iter sweeps, stopping when a
                    sweep gains less than --tol nats per training row. Every fold's training rows padded
                    alike with zero-weight rows (min_rows: one compiled fit per dataset). Exact predictive probabilities
                    (kronvi.logistic.predict_proba). Key of fold k: jax.random.key(1000 seed + k).
  direct-logistic-paper  (not in "all") the same with grid="paper": 15 levels on +-3 prior sd
                    (kronvi.model.gaussian_prior), which include 0 (sparsity).
  sklearn-logistic  scikit-learn L2 logistic regression (with intercept) on direct-logistic's features (its
                    fold's model.design), C chosen by inner 5-fold CV on
                    log loss among 10 values in [1e-3, 1e3] (LogisticRegressionCV; above 10,000 training rows C is
                    chosen by 3-fold CV on a random 5000-row subsample, then refitted on all rows).
  linear-logistic   the same on the standardized raw inputs.
  gauss-vi          mean-field Gaussian VI on the same features with the prior N(0, s^2) at direct-logistic's
                    chosen s: reparameterization gradients (local reparameterization of the logits, 4 draws per
                    row), minibatches of 256 rows, Adam(0.01), 2000 steps; predictive probabilities by 32-point
                    Gauss-Hermite quadrature of the Gaussian logit.

Metrics per fold: accuracy, log loss (probabilities clipped to [1e-12, 1 - 1e-12]), expected calibration error
(10 equal-width bins of P(y = 1): sum over bins of (bin size / n) |mean label - mean probability|), fit seconds
(direct-logistic: the whole kronvi.fit_classifier call, the first fold includes compilation; gauss-vi: the vmapped call over
all folds, compilation included, divided by the folds; records hold the mean, the median and every fold's),
predict seconds (the test rows' probabilities) and fold seconds (the wall time of one fold: fit, predict and
metrics; direct-logistic logs every stage of each fold)
and expected sparsity (direct methods: expected percent of weights at the grid's level nearest 0; others 0).
Reliability counts pooled over folds go to ``<json stem>_reliability.json``.

Usage:
  nice -n 10 python experiments/classification.py --data-dir ../shared/data/classification --datasets all \
      --methods all --json experiments/results/classification.json
  nice -n 10 python experiments/classification.py --data-dir ../shared/data/classification \
      --datasets all --methods direct-logistic,direct-logistic-paper --append --json experiments/results/classification.json
  python experiments/render_classification.py experiments/results/classification.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import study_cli

import kronvi

METHODS = ("direct-logistic", "sklearn-logistic", "linear-logistic", "gauss-vi", "direct-logistic-paper")
NUM_BINS = 10


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------------


def metrics(p, y):
    p = np.clip(np.asarray(p, np.float64), 1e-12, 1 - 1e-12)
    y = np.asarray(y, np.float64)
    acc = float(np.mean((p > 0.5) == (y == 1)))
    ll = float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))
    counts, psum, ysum = reliability(p, y)
    ece = float(np.sum(np.abs(ysum - psum)) / len(y))
    return acc, ll, ece


def reliability(p, y):
    """Per-bin counts, sums of probabilities and sums of labels (10 equal-width bins of P(y = 1))."""
    idx = np.minimum((np.asarray(p) * NUM_BINS).astype(int), NUM_BINS - 1)
    counts = np.bincount(idx, minlength=NUM_BINS).astype(float)
    psum = np.bincount(idx, weights=p, minlength=NUM_BINS)
    ysum = np.bincount(idx, weights=y, minlength=NUM_BINS)
    return counts, psum, ysum


# ------------------------------------------------------------------------------------------------
# Data and features
# ------------------------------------------------------------------------------------------------


def prepare(X, y, folds, k):
    """Fold ``k``'s raw and standardized (training moments) inputs and labels; the features of the baselines
    that share direct-logistic's (``Ptr``, ``Pte``) are added by ``run_dataset``."""
    te = folds == k
    Xtr, Xte = X[~te], X[te]
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    return dict(Rtr=Xtr, Rte=Xte, Xtr=(Xtr - mu) / sd, Xte=(Xte - mu) / sd, ytr=y[~te], yte=y[te], fold=k)


def recipe_features(X, y, folds, k, *, num_frequencies=50, prior_scales=(1.0, 3.0, 10.0, 30.0), seed=0):
    """Fold ``k`` in the features of ``kronvi.fit_classifier`` (``basis="features"``: the features themselves,
    not the Laplace eigenbasis) and its prior sd: ``prepare``'s dict plus ``Ptr``, ``Pte`` (float64) and
    ``scale``; the key is direct-logistic's for that fold. For the one-off studies that examine the recipe's
    Laplace stage (``classification_grid_check.py``, ``classification_bound_gap.py``)."""
    p = prepare(X, y, folds, k)
    config = kronvi.ClassifierConfig(num_frequencies=num_frequencies, prior_scales=prior_scales, basis="features")
    model, info = kronvi.fit_classifier(jax.random.key(seed * 1000 + k), p["Rtr"], p["ytr"], config)
    p.update(
        Ptr=np.asarray(model.design(p["Rtr"]), np.float64), Pte=np.asarray(model.design(p["Rte"]), np.float64),
        scale=info.prior_scale,
    )  # fmt: skip
    return p


def pad_stack(arrays, n, fill=0.0):
    out = []
    for a in arrays:
        pad = [(0, n - a.shape[0])] + [(0, 0)] * (a.ndim - 1)
        out.append(np.pad(a, pad, constant_values=fill))
    return np.stack(out)


# ------------------------------------------------------------------------------------------------
# Methods
# ------------------------------------------------------------------------------------------------


def run_direct(preps, args, paper=False):
    """kronvi.fit_classifier on each fold's raw training rows, then predict_proba on its test rows; every
    stage timed and logged. Returns the per-fold results and models."""
    config = kronvi.ClassifierConfig(
        num_frequencies=args.num_frequencies, max_iter=args.max_iter, tol=args.tol,
        prior_scales=None if args.prior_scales is None else tuple(args.prior_scales),
        grid="paper" if paper else "laplace",
    )  # fmt: skip
    out, models = [], []
    rows = max(len(p["ytr"]) for p in preps)  # every fold padded alike: one compiled fit per dataset
    for p in preps:
        t0 = time.perf_counter()
        key = jax.random.key(args.seed * 1000 + p["fold"])
        model, info = kronvi.fit_classifier(key, p["Rtr"], p["ytr"], config, min_rows=rows)
        t1 = time.perf_counter()
        prob = np.asarray(model.predict_proba(p["Rte"]), np.float64)
        t2 = time.perf_counter()
        sparsity = 100.0 * float(kronvi.model.expected_sparsity(model.q_w, model.prior_w))
        acc, ll, _ = metrics(prob, p["yte"])
        t3 = time.perf_counter()
        out.append(
            dict(
                prob=prob, seconds=t1 - t0, predict_seconds=t2 - t1, fold_seconds=t3 - t0, sparsity=sparsity,
                scale=info.prior_scale,
            )
        )  # fmt: skip
        models.append(model)
        log(
            f"    fold {p['fold']}: prior sd {info.prior_scale:g}, {info.num_rows} rows (padded {info.padded_rows}); "
            f"standardize {info.standardize_seconds:.3f}s, features {info.features_seconds:.3f}s, "
            f"scale {info.scale_seconds:.3f}s ({len(info.scales)} Laplace fits), fit {info.fit_seconds:.3f}s "
            f"({int(info.fit.num_iter)} sweeps), "
            f"fit_classifier {t1 - t0:.3f}s; predict {len(prob)} rows {t2 - t1:.3f}s; "
            f"fold {t3 - t0:.3f}s = {(t3 - t0) / (t1 - t0):.2f} x fit_classifier; log loss {ll:.4f}"
        )
    return out, models


def run_sklearn(Xtr, ytr, Xte, seed):
    """L2 logistic regression, C by inner 5-fold CV on log loss; above 10,000 rows C is chosen by 3-fold CV
    on a random 5000-row subsample and the model refitted on all rows."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    Xtr = np.asarray(Xtr, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.time()
        big = len(ytr) > 10000
        sub = np.random.default_rng(seed).choice(len(ytr), 5000, replace=False) if big else slice(None)
        clf = LogisticRegressionCV(
            Cs=np.logspace(-3, 3, 10), cv=3 if big else 5, scoring="neg_log_loss", max_iter=2000
        ).fit(Xtr[sub], ytr[sub])
        if big:
            clf = LogisticRegression(C=float(clf.C_[0]), max_iter=2000).fit(Xtr, ytr)
        seconds = time.time() - t
    t = time.time()
    prob = clf.predict_proba(np.asarray(Xte, np.float64))[:, 1]
    return prob, seconds, time.time() - t


def run_gauss_vi(preps, scales, args):
    """Mean-field Gaussian VI with local reparameterization, vmapped over folds."""
    F = len(preps)
    n = max(p["Ptr"].shape[0] for p in preps)
    Phi = jnp.asarray(pad_stack([p["Ptr"] for p in preps], n), jnp.float32)
    y = jnp.asarray(pad_stack([p["ytr"] for p in preps], n), jnp.float32)
    w = jnp.asarray(pad_stack([np.ones(p["Ptr"].shape[0]) for p in preps], n), jnp.float32)
    sw = jnp.asarray(scales, jnp.float32)
    opt = optax.adam(0.01)
    B, steps, draws = min(256, n), args.vi_steps, 4

    def fit(key, P, yy, ww, s):
        b = P.shape[1]
        ntot = jnp.sum(ww)
        params = (jnp.zeros(b), jnp.full(b, jnp.log(s) - 2.0))

        def loss(params, k):
            k1, k2 = jax.random.split(k)
            idx = jax.random.choice(k1, n, (B,), replace=False)
            mu, log_sd = params
            Pb = P[idx]
            m = Pb @ mu
            v = (Pb**2) @ jnp.exp(2 * log_sd)
            z = m[:, None] + jnp.sqrt(v + 1e-12)[:, None] * jax.random.normal(k2, (B, draws))
            sgn = 2 * yy[idx] - 1
            ll = jnp.sum(ww[idx] * jnp.mean(jax.nn.log_sigmoid(sgn[:, None] * z), axis=1)) * (n / B)
            var = jnp.exp(2 * log_sd)
            kl_ = 0.5 * jnp.sum((var + mu**2) / s**2 - 1 - 2 * log_sd + 2 * jnp.log(s))
            return -(ll - kl_) / ntot

        def body(carry, k):
            params, st = carry
            g = jax.grad(loss)(params, k)
            upd, st = opt.update(g, st, params)
            return (optax.apply_updates(params, upd), st), None

        (params, _), _ = jax.lax.scan(body, (params, opt.init(params)), jax.random.split(key, steps))
        return params

    keys = jax.random.split(jax.random.key(args.seed + 7), F)
    t = time.time()
    mu, log_sd = jax.jit(jax.vmap(fit))(keys, Phi, y, w, sw)
    jax.block_until_ready(mu)
    seconds = (time.time() - t) / F
    gh_x, gh_w = np.polynomial.hermite_e.hermegauss(32)
    out = []
    for f, p in enumerate(preps):
        t = time.time()
        P = p["Pte"].astype(np.float64)
        m = P @ np.asarray(mu[f], np.float64)
        sd = np.sqrt((P**2) @ np.exp(2 * np.asarray(log_sd[f], np.float64)))
        z = m[:, None] + sd[:, None] * gh_x[None]
        prob = (1 / (1 + np.exp(-z))) @ (gh_w / gh_w.sum())
        out.append(dict(prob=prob, seconds=seconds, predict_seconds=time.time() - t))
    return out


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------


OPTION_RANGES = {
    "seed": (0, study_cli.MAX_SEED), "folds": (1, None), "num_frequencies": (1, None), "max_iter": (1, None),
    "tol": (0, None), "vi_steps": (1, None),
}  # fmt: skip
DATA, MASK = "data.csv.gz", "test_mask.csv.gz"
EXISTS_HINT = "pass --append to keep its records of other datasets and methods, or --overwrite to replace it"


def parse_args(argv=None):
    ap = study_cli.Parser(
        prog="classification.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--datasets", default="all", help="comma-separated folder names, or all")
    ap.add_argument("--methods", default="all", help=f"comma-separated among {', '.join(METHODS)}, or all")
    ap.add_argument("--json", required=True, help="output records; also writes <stem>_reliability.json")
    ap.add_argument("--seed", type=int, default=0)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--append", action="store_true", help="keep the JSON's records of other datasets")
    mode.add_argument("--overwrite", action="store_true", help="replace an existing JSON")
    ap.add_argument("--folds", type=int, default=10, help="use the first K folds")
    ap.add_argument("--num-frequencies", type=int, default=50, help="D; b = 2D features")
    ap.add_argument(
        "--prior-scales", default="search",
        help="direct methods: 'search' (the prior sd of the largest Laplace evidence) or candidates, e.g. 1,3,10,30",
    )  # fmt: skip
    ap.add_argument(
        "--max-iter", type=int, default=10, help="direct methods: coordinate-ascent sweeps at most"
    )
    ap.add_argument("--tol", type=float, default=1e-3, help="direct methods: stop below this gain per row")
    ap.add_argument("--vi-steps", type=int, default=2000)
    study_cli.add_cache_option(ap)
    return ap.parse_args(argv)


def check_args(args) -> list[str]:
    """One line per bad option (an empty list: all good); needs no data. Parses ``--prior-scales``."""
    errors = study_cli.option_errors(args, OPTION_RANGES)
    try:
        if args.prior_scales == "search":
            args.prior_scales = None
        else:
            args.prior_scales = study_cli.float_list(args.prior_scales, "--prior-scales")
    except study_cli.UsageError as e:
        errors.append(str(e))
    methods = list(METHODS[:4]) if args.methods == "all" else args.methods.split(",")
    for m in methods:
        if m not in METHODS:
            errors.append(f"unknown method {m!r}; choose among {METHODS}")
    if "gauss-vi" in methods and "direct-logistic" not in methods:
        errors.append("gauss-vi uses direct-logistic's chosen prior scale; run both")
    if "sklearn-logistic" in methods and "direct-logistic" not in methods:
        errors.append("sklearn-logistic uses direct-logistic's features; run both")
    if not os.path.isdir(args.data_dir):
        errors.append(f"--data-dir {args.data_dir!r}: no such folder")
    return errors


def dataset_names(data_dir, datasets) -> list[str]:
    """The dataset folder names, each holding data.csv.gz and test_mask.csv.gz, else a UsageError."""
    if datasets == "all":
        names = sorted(d for d in os.listdir(data_dir) if os.path.isfile(os.path.join(data_dir, d, DATA)))
        if not names:
            raise study_cli.UsageError(f"--data-dir {data_dir!r} holds no dataset folders")
        return names
    names = datasets.split(",")
    for name in names:
        folder = os.path.join(data_dir, name)
        if not name or not all(os.path.isfile(os.path.join(folder, f)) for f in (DATA, MASK)):
            raise study_cli.UsageError(f"no dataset folder {folder!r} (needs {DATA} and {MASK})")
    return list(dict.fromkeys(names))


def input_files(data_dir, names) -> list[str]:
    return [os.path.join(data_dir, n, f) for n in names for f in (DATA, MASK)]


def reliability_path(json_path: str) -> str:
    return os.path.splitext(json_path)[0] + "_reliability.json"


def load_dataset(data_dir, name, num_folds):
    """``(X, y, folds, K)`` with the labels checked: 0 or 1, and both classes in every training fold."""
    try:
        X, y, mask = kronvi.load_uci(os.path.join(data_dir, name))
    except (OSError, ValueError) as e:
        raise study_cli.UsageError(f"dataset {name}: {e}") from None
    bad = np.unique(y[(y != 0) & (y != 1)])
    if bad.size:
        raise study_cli.UsageError(f"dataset {name}: labels must be 0 or 1, found {bad[:3].tolist()}")
    folds = kronvi.inputs.fold_indices(mask)
    K = min(num_folds, mask.shape[1])
    for k in range(K):
        if np.unique(y[folds != k]).size < 2:
            raise study_cli.UsageError(f"dataset {name}: the training rows of fold {k} hold one class only")
    return X, y, folds, K


def previous_records(args, names, methods):
    """With --append: the records and reliability counts of the existing outputs that this run keeps."""
    records, rel = [], {}
    if not args.append:
        return records, rel
    rel_path = reliability_path(args.json)
    try:
        if os.path.exists(args.json):
            with open(args.json) as fh:
                records = json.load(fh)
        if os.path.exists(rel_path):
            with open(rel_path) as fh:
                rel = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise study_cli.UsageError(f"--append: cannot read the outputs ({type(e).__name__}: {e})") from None
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("dataset"), str) and isinstance(r.get("method"), str)
        for r in records
    ):
        raise study_cli.UsageError(f"--append: {args.json} is not a JSON list of study records")
    if not isinstance(rel, dict) or not all(isinstance(v, dict) for v in rel.values()):
        raise study_cli.UsageError(f"--append: {rel_path} is not a JSON object of reliability counts")
    records = [r for r in records if not (r["dataset"] in names and r["method"] in methods)]
    for k in names:
        for m in methods:
            rel.get(k, {}).pop(m, None)
    return records, rel


def main(argv=None):
    args = parse_args(argv)
    errors = check_args(args)
    if errors:
        return study_cli.report("classification.py", errors)
    methods = list(METHODS[:4]) if args.methods == "all" else args.methods.split(",")
    try:
        names = dataset_names(args.data_dir, args.datasets)
        inputs = input_files(args.data_dir, names)
        for path, option in ((args.json, "--json"), (reliability_path(args.json), "the reliability file")):
            kronvi.files.check_output_path(
                path, option=option, inputs=inputs, overwrite=args.append or args.overwrite,
                exists_hint=EXISTS_HINT,
            )  # fmt: skip
        records, rel = previous_records(args, names, methods)
        data = {name: load_dataset(args.data_dir, name, args.folds) for name in names}
    except (study_cli.UsageError, ValueError, OSError) as e:
        return study_cli.report("classification.py", e)
    args.cache = study_cli.compilation_cache(args)
    log(f"compilation cache: {args.cache}")
    try:
        for name in names:
            run_dataset(name, data.pop(name), methods, args, records, rel)
            kronvi.files.write_atomic(args.json, json.dumps(records, indent=1))
            kronvi.files.write_atomic(reliability_path(args.json), json.dumps(rel))
    except KeyboardInterrupt:
        kept = f"{len(records)} record(s) in {args.json}" if os.path.exists(args.json) else "nothing written"
        log(f"interrupted: {kept}")
        return study_cli.EXIT_INTERRUPTED
    log(f"wrote {args.json}")
    return 0


def run_dataset(name, dataset, methods, args, records, rel):
    """Runs ``methods`` on one dataset; appends its records to ``records`` and its counts to ``rel``."""
    X, y, folds, K = dataset
    log(f"{name}: n={X.shape[0]} d={X.shape[1]}, {K} folds")
    preps = [prepare(X, y, folds, k) for k in range(K)]
    results = {}
    if "direct-logistic" in methods:
        results["direct-logistic"], models = run_direct(preps, args)
        for p, model in zip(preps, models, strict=True):  # the baselines' features: direct-logistic's
            p["Ptr"], p["Pte"] = (np.asarray(model.design(p[k]), np.float32) for k in ("Rtr", "Rte"))
    if "direct-logistic-paper" in methods:
        results["direct-logistic-paper"] = run_direct(preps, args, paper=True)[0]
    if "gauss-vi" in methods:
        results["gauss-vi"] = run_gauss_vi(preps, [o["scale"] for o in results["direct-logistic"]], args)
    for m, key in (("sklearn-logistic", "P"), ("linear-logistic", "X")):
        if m in methods:
            res = []
            for p in preps:
                prob, sec, pred = run_sklearn(p[key + "tr"], p["ytr"], p[key + "te"], args.seed)
                res.append(dict(prob=prob, seconds=sec, predict_seconds=pred))
            results[m] = res
    for m in methods:
        res = results[m]
        ms = np.array([metrics(r["prob"], p["yte"]) for r, p in zip(res, preps, strict=True)])
        rec = dict(
            dataset=name,
            method=m,
            n=int(X.shape[0]),
            d=int(X.shape[1]),
            accuracy_mean=float(ms[:, 0].mean()),
            accuracy_sd=float(ms[:, 0].std(ddof=1)) if K > 1 else 0.0,
            logloss_mean=float(ms[:, 1].mean()),
            logloss_sd=float(ms[:, 1].std(ddof=1)) if K > 1 else 0.0,
            ece_mean=float(ms[:, 2].mean()),
            fit_seconds=float(np.mean([r["seconds"] for r in res])),
            fit_seconds_median=float(np.median([r["seconds"] for r in res])),
            fit_seconds_folds=[round(float(r["seconds"]), 4) for r in res],
            sparsity_pct=float(np.mean([r.get("sparsity", 0.0) for r in res])),
            predict_seconds=float(np.mean([r["predict_seconds"] for r in res])),
            fold_seconds=float(
                np.mean([r.get("fold_seconds", r["seconds"] + r["predict_seconds"]) for r in res])
            ),
            compilation_cache=getattr(args, "cache", "off"),
        )
        if m.startswith("direct-"):  # how the prior sd was chosen, and each fold's
            rec["prior_scales"] = "search" if args.prior_scales is None else list(args.prior_scales)
            rec["prior_sd_folds"] = [float(f"{r['scale']:.6g}") for r in res]
        records.append(rec)
        counts = sum(
            reliability(np.clip(r["prob"], 0, 1), p["yte"])[0] for r, p in zip(res, preps, strict=True)
        )
        psum = sum(
            reliability(np.clip(r["prob"], 0, 1), p["yte"])[1] for r, p in zip(res, preps, strict=True)
        )
        ysum = sum(
            reliability(np.clip(r["prob"], 0, 1), p["yte"])[2] for r, p in zip(res, preps, strict=True)
        )
        rel.setdefault(name, {})[m] = dict(counts=counts.tolist(), psum=psum.tolist(), ysum=ysum.tolist())
        log(
            f"  {m:21s} acc {rec['accuracy_mean']:.4f}  logloss {rec['logloss_mean']:.4f}  "
            f"ece {rec['ece_mean']:.4f}  fit {rec['fit_seconds']:.2f}s  predict {rec['predict_seconds']:.3f}s  "
            f"fold {rec['fold_seconds']:.2f}s  sparsity {rec['sparsity_pct']:.1f}%"
        )


if __name__ == "__main__":
    study_cli.run(main)
