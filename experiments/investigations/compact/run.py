"""Issue 27: compact candidates against exact Bayesian linear regression on the same features (fold 0).

For each data set: the default recipe's preparation (GP hyperparameters, b random Fourier features, the
float64 eigenbasis, the evidence-optimal prior scale and noise), then

* ``exact-blr``: the exact posterior on those features (closed form, the noise at the evidence optimum);
* ``eigen``: the default recipe (``DirectConfig()``), the reference for bytes and prediction time;
* ``compact-tol<t>``: ``DirectConfig(basis="compact", compact_tol=t)``, the eigen fit compacted
  (``kronvi.compact_posterior``);
* ``compact-<L>lv``: the same at tol 0.1 with L = 7 or 3 levels (3 and 2 bits; grids of ±3 and ±sqrt(3)
  posterior sds);
* ``compact-v16``: tol 0.1 with the kept eigenvectors rounded to float16 (what halving their bytes costs);
* ``paper``: ``DirectConfig(basis="features")``, the paper's sparse 4-bit recipe;
* ``gptq-<L>lv``: Hessian-aware rounding (GPTQ / Optimal Brain Quantization) of the exact posterior mean
  in the feature basis onto one grid of L levels with a zero level (±3 prior sds; L = 3, 7, 15), using
  ``H = Phi^T Phi / s2 + I / sw^2``, then mean-field CAVI in the feature basis from the rounded codes;
* ``sparse-<p>``: the feature basis with a spike-and-slab grid prior: the zero level holds prior mass p, the
  other 14 levels of the ±3 prior-sd grid share 1 - p in proportion to N(0, sw^2); CAVI from the prior and
  from the Gaussian optimum, the higher ELBO kept.

The noise grid of every DIRECT candidate spans 3x around the evidence optimum (the default's), except
``paper`` (its own). Per candidate: test RMSE and NLPD, their ratio/difference to exact-blr, expected
sparsity of a posterior sample (the mass of each grid's zero level), bits per weight, weights, the saved
model's bytes (``kronvi.save_model`` of the whole ``FittedDirect``, compressed), and the prediction time
per 1,000 points (``fold_features`` + ``predict_regression`` as a user calls them; candidates interleaved,
median of repeats).

    python experiments/investigations/compact/run.py yacht concrete energy autompg airfoil

Appends one JSON line per data set to ``results/results.jsonl``; ``table.py`` renders ``results/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import norm

import kronvi
from kronvi import pipeline

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_fold(name, fold):
    X, y, mask = kronvi.load_uci(ROOT.parent / "shared" / "data" / "uci" / name)
    test = kronvi.fold_indices(mask) == fold
    return X[~test], y[~test], X[test], y[test]


def log_density(model, Phi, y_c):
    try:
        return kronvi.predictive_log_density(
            model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y_c
        )[0]
    except kronvi.DensityToleranceError as e:  # a few points below the rounding floor: keep the best values
        warnings.warn(f"NLPD: {e}", stacklevel=2)
        return jnp.asarray(e.log_density)


def zero_mass(model):
    """Expected fraction of zero weights of a posterior sample: the mass of each grid's zero level."""
    values = np.asarray(model.prior_w.values, np.float64)
    probs = np.asarray(model.q_w.probs, np.float64)
    return float(np.mean(np.sum(np.where(values == 0.0, probs, 0.0), axis=1)))


def file_bytes(model):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.npz")
        kronvi.save_model(path, model)
        loaded = kronvi.load_model(path)
        return os.path.getsize(path), loaded


def evaluate(name, model, X_test, y_test, extra=None):
    Phi = pipeline.fold_features(model, X_test)
    y_c = jnp.asarray(y_test, Phi.dtype) - model.y_offset
    mean, _ = kronvi.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    ld = log_density(model, Phi, y_c)
    size, loaded = file_bytes(model)
    levels = int(model.prior_w.values.shape[1])
    same = bool(np.array_equal(pipeline.fold_features(loaded, X_test), Phi))
    row = dict(
        candidate=name,
        rmse=float(jnp.sqrt(jnp.mean((mean - y_c) ** 2))),
        nlpd=float(-jnp.mean(ld)),
        sparsity=zero_mass(model),
        levels=levels,
        bits=math.ceil(math.log2(levels)),
        weights=int(model.prior_w.values.shape[0]),
        kept_directions=int(model.basis.vectors.shape[1])
        if isinstance(model.basis, kronvi.CompactBasis)
        else None,
        file_bytes=size,
        reload_identical=same,
        noise_variance=float(kronvi.noise_moments(model.q_noise, model.prior_noise)[2]),
    )
    row.update(extra or {})
    return row


def exact_blr(fold, X_test, y_test):
    """The exact posterior at the evidence optimum; in the eigenbasis it is diagonal."""
    with jax.enable_x64(True):
        lam = np.asarray(fold.basis.eigenvalues, np.float64)
        c = np.asarray(fold.stats.Phity, np.float64)
        s2, sw = float(fold.noise_variance), float(fold.prior_scale)
        prec = lam / s2 + 1.0 / sw**2
        mu, var = c / s2 / prec, 1.0 / prec
        Phi = np.asarray(pipeline.fold_features(fold, X_test), np.float64)
        m = Phi @ mu
        v = (Phi**2) @ var + s2
    y_c = np.asarray(y_test, np.float64) - float(fold.y_offset)
    return dict(
        candidate="exact-blr",
        rmse=float(np.sqrt(np.mean((m - y_c) ** 2))),
        nlpd=float(-np.mean(norm.logpdf(y_c, m, np.sqrt(v)))),
        sparsity=0.0,
    )


def feature_basis_moments(fold):
    """Exact posterior mean and covariance of the feature-basis weights, and H^-1, from the eigenbasis."""
    V = np.asarray(fold.basis.vectors, np.float64)
    lam = np.asarray(fold.basis.eigenvalues, np.float64)
    c = np.asarray(fold.stats.Phity, np.float64)
    s2, sw = float(fold.noise_variance), float(fold.prior_scale)
    prec = lam / s2 + 1.0 / sw**2
    mean = V @ (c / s2 / prec)
    Hinv = (V / prec) @ V.T
    return mean, Hinv


def gptq_round(w, Hinv, grid):
    """GPTQ (Frantar et al. 2023; Optimal Brain Quantization in a fixed order): quantize weight j to the
    nearest grid level and spread its error over the later weights through row j of the upper Cholesky
    factor of H^-1, which minimizes the increase of (w - q)^T H (w - q). Returns the codes."""
    U = np.linalg.cholesky(Hinv).T  # upper Cholesky factor: H^-1 = U^T U
    w = w.copy()
    codes = np.empty(len(w), np.int64)
    for j in range(len(w)):
        k = int(np.argmin(np.abs(grid - w[j])))
        codes[j] = k
        err = (w[j] - grid[k]) / U[j, j]
        w[j + 1 :] -= err * U[j, j + 1 :]
    return codes


def fitted(fold, prior_w, q_w, q_n, prior_n, basis=None):
    return pipeline.FittedDirect(
        fold.standardizer, fold.features, fold.y_offset, prior_w, prior_n, q_w, q_n, fold.hyper, basis
    )


def feature_candidates(fold_e, fold_f, X_test, y_test, args):
    """GPTQ-rounded and spike-and-slab candidates in the feature basis (the paper's statistics)."""
    rows, models = [], {}
    sw = float(fold_e.prior_scale)
    prior_n = kronvi.noise_prior(fold_e.noise_variance, levels=15, span=3.0)
    stats = fold_f.stats
    b = stats.Phity.shape[0]
    mean, Hinv = feature_basis_moments(fold_e)
    for levels in args.gptq_levels:
        t0 = time.perf_counter()
        prior_w = kronvi.gaussian_prior(b, sw, levels=levels, width=3.0)
        grid = np.asarray(prior_w.values[0], np.float64)
        grid = np.where(np.abs(grid) <= 1e-6 * np.abs(grid).max(), 0.0, grid)
        prior_w = kronvi.DiscretePrior(jnp.asarray(np.tile(grid, (b, 1)), jnp.float32), prior_w.log_probs)
        codes = gptq_round(mean, Hinv, grid)
        rounded_rmse_train = float(np.sqrt(np.mean((grid[codes] - mean) ** 2)))
        logits = np.full((b, levels), -12.0, np.float32)
        logits[np.arange(b), codes] = 0.0
        q0 = kronvi.MeanField(jnp.asarray(logits))
        q_w, q_n, info = kronvi.fit_regression(
            stats, prior_w, prior_n, method="cavi", init=(q0, kronvi.MeanField.from_prior(prior_n))
        )
        secs = time.perf_counter() - t0
        m = fitted(fold_e, prior_w, q_w, q_n, prior_n)
        # the rounded mean alone, before the fit: its test RMSE
        Phi = pipeline.fold_features(m, X_test)
        y_c = jnp.asarray(y_test, jnp.float32) - fold_e.y_offset
        pred = np.asarray(Phi, np.float64) @ grid[codes]
        extra = dict(
            rounded_mean_test_rmse=float(np.sqrt(np.mean((pred - np.asarray(y_c, np.float64)) ** 2))),
            rounding_rms_weight_error=rounded_rmse_train,
            fit_seconds=secs,
            sweeps=int(info.num_iter),
        )
        name = f"gptq-{levels}lv"
        rows.append(evaluate(name, m, X_test, y_test, extra))
        models[name] = m
    for p0 in args.spike_mass:
        t0 = time.perf_counter()
        base = kronvi.gaussian_prior(b, sw, levels=15, width=3.0)
        values = np.asarray(base.values, np.float64)
        zero = np.abs(values) <= 1e-6 * np.abs(values).max()
        values = np.where(zero, 0.0, values)
        slab = np.where(zero, -np.inf, -0.5 * (values / sw) ** 2)
        slab = slab - np.logaddexp.reduce(slab, axis=1, keepdims=True) + np.log1p(-p0)
        logp = np.where(zero, np.log(p0), slab)
        prior_w = kronvi.DiscretePrior(jnp.asarray(values, jnp.float32), jnp.asarray(logp, jnp.float32))
        config = pipeline.DirectConfig(basis="features", starts=("prior", "gaussian"), noise_cv=())
        q_w, q_n, info = pipeline.fit_best_start(stats, prior_w, prior_n, config, key=fold_f.key)
        secs = time.perf_counter() - t0
        m = fitted(fold_e, prior_w, q_w, q_n, prior_n)
        name = f"sparse-{p0:g}"
        rows.append(evaluate(name, m, X_test, y_test, dict(fit_seconds=secs, sweeps=int(info.num_iter))))
        models[name] = m
    return rows, models


def time_predictions(models, X_test, repeats, points):
    """Median seconds of fold_features + predict_regression on `points` rows, candidates interleaved."""
    reps = -(-points // X_test.shape[0])
    X = np.tile(X_test, (reps, 1))[:points]

    def call(m):
        Phi = pipeline.fold_features(m, X)
        return jax.block_until_ready(
            kronvi.predict_regression(m.q_w, m.q_noise, m.prior_w, m.prior_noise, Phi)
        )

    for m in models.values():
        call(m)
        call(m)
    times = {k: [] for k in models}
    rng = np.random.default_rng(0)
    for _ in range(repeats):
        for k in rng.permutation(list(models)):
            t0 = time.perf_counter()
            call(models[k])
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def run(name, args):
    log(f"== {name}")
    Xtr, ytr, Xte, yte = load_fold(name, args.fold)
    key = jax.random.key(args.seed)
    cfg = pipeline.DirectConfig()
    t0 = time.perf_counter()
    fold = pipeline.prepare_fold(key, Xtr, ytr, cfg)
    log(f"   prepared in {time.perf_counter() - t0:.1f} s (n={Xtr.shape[0]}, b={fold.stats.Phity.shape[0]})")
    rows = [exact_blr(fold, Xte, yte)]
    models = {}
    eigen, _, _ = pipeline.fit_prepared(fold, cfg)
    rows.append(evaluate("eigen", eigen, Xte, yte))
    models["eigen"] = eigen
    for tol in args.tols:
        m, _, _ = pipeline.fit_prepared(fold, cfg._replace(basis="compact", compact_tol=tol))
        rows.append(evaluate(f"compact-tol{tol:g}", m, Xte, yte, dict(tol=tol)))
        models[f"compact-tol{tol:g}"] = m
    for levels, width in ((7, 3.0), (3, math.sqrt(3.0))):
        prior_w = pipeline.eigen_posterior_grid(
            fold.stats, fold.basis, fold.prior_scale, fold.noise_variance, levels=levels, width=width
        )
        c = cfg._replace(basis="compact", compact_tol=0.1, levels=levels, width=width)
        m, _, _ = pipeline.fit_prepared(fold._replace(prior_w=prior_w), c)
        rows.append(evaluate(f"compact-{levels}lv", m, Xte, yte, dict(tol=0.1)))
        models[f"compact-{levels}lv"] = m
    base = models.get("compact-tol0.1")
    if base is not None:
        v16 = base.basis._replace(vectors=base.basis.vectors.astype(jnp.float16))
        m = base._replace(basis=v16._replace(vectors=v16.vectors.astype(jnp.float32)))
        row = evaluate("compact-v16", m, Xte, yte, dict(tol=0.1))
        base_bytes = next(r["file_bytes"] for r in rows if r["candidate"] == "compact-tol0.1")
        row["file_bytes"] = int(base_bytes - base.basis.vectors.size * 2)  # the vectors stored in float16
        rows.append(row)
    if not args.skip_features:
        t0 = time.perf_counter()
        cfg_f = pipeline.DirectConfig(basis="features")
        fold_f = pipeline.prepare_fold(key, Xtr, ytr, cfg_f, gp=(fold.hyper, fold.gp_info))
        paper, _, _ = pipeline.fit_prepared(fold_f, cfg_f)
        rows.append(evaluate("paper", paper, Xte, yte, dict(fit_seconds=time.perf_counter() - t0)))
        models["paper"] = paper
        more, more_models = feature_candidates(fold, fold_f, Xte, yte, args)
        rows.extend(more)
        models.update(more_models)
    log("   timing predictions ...")
    times = time_predictions(models, Xte, args.repeats, args.points)
    ref = rows[0]
    eig = next(r for r in rows if r["candidate"] == "eigen")
    for r in rows:
        r["rmse_ratio"] = r["rmse"] / ref["rmse"]
        r["nlpd_diff"] = r["nlpd"] - ref["nlpd"]
        if r["candidate"] in times:
            r["predict_s_per_1000"] = times[r["candidate"]] * 1000.0 / args.points
            r["bytes_vs_eigen"] = r["file_bytes"] / eig["file_bytes"]
        log(
            f"   {r['candidate']:16s} RMSE {r['rmse']:.4f} ({r['rmse_ratio']:.3f}x) NLPD {r['nlpd']:.3f} "
            f"({r['nlpd_diff']:+.3f}) sparsity {r['sparsity']:.2f} bytes {r.get('file_bytes', 0):,} "
            f"predict {1e3 * r.get('predict_s_per_1000', float('nan')):.1f} ms/1000"
        )
    return dict(
        dataset=name, fold=args.fold, n_train=int(Xtr.shape[0]), n_test=int(Xte.shape[0]),
        d=int(Xtr.shape[1]), b=int(fold.stats.Phity.shape[0]), rows=rows,
    )  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tols", type=float, nargs="+", default=[0.02, 0.05, 0.1, 0.2])
    ap.add_argument("--gptq-levels", type=int, nargs="+", default=[3, 7, 15])
    ap.add_argument("--spike-mass", type=float, nargs="+", default=[0.5, 0.9])
    ap.add_argument("--skip-features", action="store_true", help="only exact-blr, eigen and compact")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--out", default=str(HERE / "results" / "results.jsonl"))
    args = ap.parse_args(argv)
    log(f"devices {jax.devices()}, {os.cpu_count()} CPUs, load average {os.getloadavg()}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.datasets:
        rec = run(name, args)
        rec["load_average"] = os.getloadavg()
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
