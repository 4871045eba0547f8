"""A small UCI study of the DIRECT quadratic-activation Bayesian network (issue 16, part 4).

Three models per fold, each trained on the fold's training rows and scored on its test rows:

  direct-bnn   one hidden layer of quadratic units, a discrete 15-level grid prior on every weight and on
               the noise variance, mean-field q fitted by exact coordinate ascent on the exact ELBO
               (kronvi.bnn.fit_bnn, method "cavi"); best ELBO of 8 random starts.
  direct-bnn-lbfgs  the same fitted by L-BFGS on exact gradients (method "lbfgs").
  direct-rff   kronvi's default DIRECT regression on random Fourier features (kronvi.cv.run_fold with
               DirectConfig(); b = 2000 features, the eigenbasis recipe).
  mc-bnn       the same quadratic network with a Gaussian prior and a mean-field Gaussian q trained by
               reparameterization gradients (Adam, full batch), the noise variance a point estimate.

Inputs are standardized with the training rows and get a constant column (the biases); targets are
centred and scaled for the two networks, and every metric is in the original units of y. NLPD is the
Gaussian density with each model's predictive mean and variance (for direct-bnn those moments are exact;
for mc-bnn they are Monte Carlo estimates); direct-rff also reports its exact discrete predictive density
(`nlpd_exact`). Parameter count: variational parameters (logits, or means and scales) plus noise ones.

  python experiments/bnn_study.py --json experiments/results/bnn_study.json \
      --md experiments/results/bnn_study.md
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import study_cli  # noqa: E402
from scipy.stats import norm  # noqa: E402

import kronvi  # noqa: E402
from kronvi import bnn  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "uci"
DATASETS = ("yacht", "energy", "concrete", "airfoil")
METHODS = ("direct-bnn", "direct-bnn-lbfgs", "direct-rff", "mc-bnn")


# ----------------------------------------------------------------------------------------------------
# Data


def prepare(X_train, y_train, X_test):
    """Standardized inputs with a constant column; centred and scaled targets (and the scale)."""
    mu, sd = X_train.mean(0), X_train.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    keep = X_train.std(0) > 0

    def tx(X):
        Z = ((X - mu) / sd)[:, keep]
        return np.concatenate([Z, np.ones((len(Z), 1))], axis=1)

    ym, ys = y_train.mean(), y_train.std()
    return tx(X_train), (y_train - ym) / ys, tx(X_test), ym, ys


def prior_scales(d, h):
    """Per-weight prior standard deviations: pre-activations and the output of order 1."""
    return np.concatenate([np.full(d * h, 1.0 / np.sqrt(d)), np.full(h, 1.0 / np.sqrt(3.0 * h))])


def scores(y, mean, var):
    rmse = float(np.sqrt(np.mean((y - mean) ** 2)))
    nlpd = float(-np.mean(norm.logpdf(y, mean, np.sqrt(var))))
    return rmse, nlpd


# ----------------------------------------------------------------------------------------------------
# Methods


def run_direct_bnn(Xtr, ytr, Xte, yte, ym, ys, cfg, method, max_iter, seed):
    d, h = Xtr.shape[1], cfg.hidden
    sizes = (d, h, 1)
    P = bnn.num_weights(sizes)
    t0 = time.perf_counter()
    stats = bnn.bnn_stats(jnp.asarray(Xtr), jnp.asarray(ytr), sizes)
    pw = kronvi.model.gaussian_prior(P, jnp.asarray(prior_scales(d, h)), levels=cfg.levels)
    pn = kronvi.model.noise_prior(0.05, levels=15, span=20.0)
    jax.block_until_ready(stats)
    stats_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    q, qn, info = bnn.fit_bnn(stats, pw, pn, method=method, key=jax.random.key(seed), max_iter=max_iter,
                              num_starts=cfg.starts)  # fmt: skip
    jax.block_until_ready(q.logits)
    fit_s = time.perf_counter() - t0
    elbo, iters = float(info.final_elbo), int(info.num_iter)
    mean, var = bnn.predict_bnn(q, qn, pw, pn, jnp.asarray(Xte), sizes)
    mean, var = np.asarray(mean) * ys + ym, np.asarray(var) * ys**2
    rmse, nlpd = scores(yte, mean, var)
    return dict(rmse=rmse, nlpd=nlpd, fit_seconds=fit_s, stats_seconds=stats_s, elbo=elbo, iterations=iters,
                num_weights=P, num_params=P * cfg.levels + 15)  # fmt: skip


def run_direct_rff(X_train, y_train, X_test, y_test, key):
    config = kronvi.pipeline.DirectConfig()
    model, res = kronvi.cv.run_fold(key, X_train, y_train, X_test, y_test, config)
    Phi = kronvi.pipeline.fold_features(model, X_test)
    mean, var = kronvi.model.predict_regression(
        model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi
    )
    mean = np.asarray(mean + model.y_offset, np.float64)
    rmse, nlpd = scores(y_test, mean, np.asarray(var, np.float64))
    b, m = model.prior_w.values.shape
    return dict(rmse=rmse, nlpd=nlpd, nlpd_exact=res.nlpd, fit_seconds=res.fit_seconds,
                init_seconds=res.init_seconds + res.select_seconds, stats_seconds=res.stats_seconds,
                elbo=res.elbo, num_weights=b, num_params=b * m + model.prior_noise.values.shape[-1])  # fmt: skip


@functools.cache
def _mc_trainer(sizes, steps, samples, lr):
    opt = optax.adam(lr)
    P = bnn.num_weights(sizes)

    def neg_elbo(params, key, X, y, prior_sd):
        mu, rho, log_s2 = params
        sd = jax.nn.softplus(rho)
        eps = jax.random.normal(key, (samples, P), mu.dtype)
        W = mu + sd * eps
        f = jax.vmap(lambda w: bnn.quadratic_net(w, X, sizes))(W)  # (S, n)
        n = y.shape[0]
        ell = -0.5 * n * (jnp.log(2 * jnp.pi) + log_s2) - 0.5 * jnp.mean(jnp.sum((y - f) ** 2, -1)) / jnp.exp(
            log_s2
        )
        kl = jnp.sum(jnp.log(prior_sd / sd) + 0.5 * (sd**2 + mu**2) / prior_sd**2 - 0.5)
        return -(ell - kl) / n

    @jax.jit
    def train(key, params, X, y, prior_sd):
        state = opt.init(params)

        def step(carry, k):
            params, state = carry
            loss, g = jax.value_and_grad(neg_elbo)(params, k, X, y, prior_sd)
            upd, state = opt.update(g, state, params)
            return (optax.apply_updates(params, upd), state), loss

        (params, _), losses = jax.lax.scan(step, (params, state), jax.random.split(key, steps))
        return params, losses

    return train


def run_mc_bnn(Xtr, ytr, Xte, yte, ym, ys, cfg, key):
    d, h = Xtr.shape[1], cfg.hidden
    sizes = (d, h, 1)
    P = bnn.num_weights(sizes)
    prior_sd = jnp.asarray(prior_scales(d, h), jnp.float32)
    k0, k1, k2 = jax.random.split(key, 3)
    params = (
        prior_sd * jax.random.normal(k0, (P,)),
        jnp.full((P,), -3.0),
        jnp.asarray(np.log(0.05), jnp.float32),
    )
    train = _mc_trainer(sizes, cfg.mc_steps, cfg.mc_samples, cfg.mc_lr)
    t0 = time.perf_counter()
    params, losses = train(k1, params, jnp.asarray(Xtr, jnp.float32), jnp.asarray(ytr, jnp.float32), prior_sd)
    jax.block_until_ready(params)
    fit_s = time.perf_counter() - t0
    mu, rho, log_s2 = params
    W = mu + jax.nn.softplus(rho) * jax.random.normal(k2, (cfg.mc_predict, P))
    f = np.asarray(
        jax.vmap(lambda w: bnn.quadratic_net(w, jnp.asarray(Xte, jnp.float32), sizes))(W), np.float64
    )
    mean = f.mean(0) * ys + ym
    var = (f.var(0) + float(jnp.exp(log_s2))) * ys**2
    rmse, nlpd = scores(yte, mean, var)
    return dict(rmse=rmse, nlpd=nlpd, fit_seconds=fit_s, final_loss=float(losses[-1]), num_weights=P,
                num_params=2 * P + 1)  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Driver


class Config(argparse.Namespace):
    pass


def run(cfg, log=print):
    records = []
    for name in cfg.datasets:
        X, y, mask = kronvi.load_uci(str(cfg.data_dir / name))
        for k in range(min(cfg.folds, mask.shape[1])):
            test = mask[:, k].astype(bool)
            Xtr, ytr, Xte, ym, ys = prepare(X[~test], y[~test], X[test])
            yte = y[test]
            for method in cfg.methods:
                key = jax.random.key(1000 * k + 7)
                t0 = time.perf_counter()
                with jax.enable_x64(method.startswith("direct-bnn")):
                    if method == "direct-bnn":
                        r = run_direct_bnn(Xtr, ytr, Xte, yte, ym, ys, cfg, "cavi", cfg.cavi_sweeps, k)
                    elif method == "direct-bnn-lbfgs":
                        r = run_direct_bnn(Xtr, ytr, Xte, yte, ym, ys, cfg, "lbfgs", cfg.bnn_iter, k)
                    elif method == "direct-rff":
                        r = run_direct_rff(X[~test], y[~test], X[test], yte, key)
                    else:
                        r = run_mc_bnn(Xtr, ytr, Xte, yte, ym, ys, cfg, key)
                r.update(dataset=name, fold=k, method=method, n=int(len(y)), d=int(X.shape[1]),
                         wall_seconds=time.perf_counter() - t0)  # fmt: skip
                records.append(r)
                log(f"{name} fold {k} {method}: rmse {r['rmse']:.4g} nlpd {r['nlpd']:.3f} "
                    f"fit {r['fit_seconds']:.2f}s wall {r['wall_seconds']:.1f}s")  # fmt: skip
    return records


def summarize(records):
    rows = {}
    for r in records:
        rows.setdefault((r["dataset"], r["method"]), []).append(r)
    out = []
    for (ds, method), rs in rows.items():

        def ms(key, rs=rs):
            v = np.array([r[key] for r in rs], float)
            return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0

        out.append(dict(dataset=ds, method=method, folds=len(rs), rmse=ms("rmse"), nlpd=ms("nlpd"),
                        fit_seconds=float(np.median([r["fit_seconds"] for r in rs])), num_params=rs[0]["num_params"],
                        num_weights=rs[0]["num_weights"],
                        nlpd_exact=ms("nlpd_exact")[0] if "nlpd_exact" in rs[0] else None,
                        elbo=ms("elbo")[0] if rs[0]["method"].startswith("direct-bnn") else None))  # fmt: skip
    return out


def render(summary, cfg_dict):
    lines = [
        "# Quadratic DIRECT BNN vs DIRECT on random Fourier features vs a Monte Carlo Gaussian BNN",
        "",
        f"Command: `{cfg_dict['command']}`. {cfg_dict['folds']} folds of the published splits per dataset; "
        f"one hidden layer of {cfg_dict['hidden']} quadratic units for both networks "
        f"({cfg_dict['levels']}-level grids for DIRECT, best ELBO of {cfg_dict['starts']} random starts "
        f"(`fit_bnn(num_starts=...)`), exact coordinate ascent ({cfg_dict['cavi_sweeps']} sweeps at most; "
        f"direct-bnn) or L-BFGS ({cfg_dict['bnn_iter']} iterations at most; direct-bnn-lbfgs); "
        f"MC: {cfg_dict['mc_steps']} Adam steps, "
        f"{cfg_dict['mc_samples']} samples per step). Mean ± sd over folds; RMSE in the units of y. NLPD: "
        "Gaussian with each model's predictive mean and variance (exact moments for direct-bnn and "
        "direct-rff, Monte Carlo for mc-bnn); in brackets direct-rff's exact discrete predictive density. "
        "Fit seconds: median over folds of the optimizer call (all starts; the first fold of each dataset "
        "also compiles, the median leaves it out with 3 folds; statistics and direct-rff's GP "
        "initialization excluded). Parameters: variational "
        "parameters (weights in brackets). ELBO: of the networks, on the standardized targets. 2-core CPU shared with other jobs: timings are indicative.",
        "",
        "| dataset | method | RMSE | NLPD | ELBO | fit s | parameters (weights) |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for s in summary:
        nl = f"{s['nlpd'][0]:.3f} ± {s['nlpd'][1]:.3f}"
        if s["nlpd_exact"] is not None:
            nl += f" [{s['nlpd_exact']:.3f}]"
        el = "" if s["elbo"] is None else f"{s['elbo']:.1f}"
        lines.append(
            f"| {s['dataset']} | {s['method']} | {s['rmse'][0]:.4g} ± {s['rmse'][1]:.3g} | {nl} | {el} | "
            f"{s['fit_seconds']:.2f} | {s['num_params']:,} ({s['num_weights']:,}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = study_cli.Parser(
        prog="bnn_study.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", type=pathlib.Path, default=DATA)
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--hidden", type=int, default=20)
    p.add_argument("--levels", type=int, default=15)
    p.add_argument("--starts", type=int, default=8)
    p.add_argument("--cavi-sweeps", type=int, default=50)
    p.add_argument("--bnn-iter", type=int, default=1000)
    p.add_argument("--mc-steps", type=int, default=5000)
    p.add_argument("--mc-samples", type=int, default=8)
    p.add_argument("--mc-lr", type=float, default=0.01)
    p.add_argument("--mc-predict", type=int, default=1000)
    p.add_argument("--json", type=pathlib.Path)
    p.add_argument("--md", type=pathlib.Path)
    p.add_argument("--overwrite", action="store_true", help="replace existing --json and --md files")
    cfg = p.parse_args(argv, namespace=Config())
    cfg.datasets = [s for s in cfg.datasets.split(",") if s]
    cfg.methods = [s for s in cfg.methods.split(",") if s]
    bad = sorted(set(cfg.methods) - set(METHODS))
    if bad:
        p.error(f"unknown methods {bad}; choose from {METHODS}")
    inputs = [cfg.data_dir / d / f for d in cfg.datasets for f in ("data.csv.gz", "test_mask.csv.gz")]
    try:
        outputs = [("--json", cfg.json), ("--md", cfg.md)]
        study_cli.check_outputs(outputs, inputs=inputs, overwrite=cfg.overwrite)
    except (ValueError, OSError) as e:
        p.error(str(e))
    t0 = time.perf_counter()
    records = run(cfg, log=lambda s: print(s, flush=True))
    summary = summarize(records)
    settings = {
        k: (str(v) if isinstance(v, pathlib.Path) else v)
        for k, v in vars(cfg).items()
        if k not in ("data_dir", "overwrite")
    }
    settings["command"] = "python experiments/bnn_study.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    settings["total_seconds"] = time.perf_counter() - t0
    md = render(summary, settings)
    if cfg.json:
        kronvi.files.write_atomic(
            cfg.json, json.dumps(dict(settings=settings, records=records, summary=summary), indent=1) + "\n"
        )
    if cfg.md:
        kronvi.files.write_atomic(cfg.md, md)
    print(md)
    return records, summary


if __name__ == "__main__":
    main()
