"""Features learned by maximizing the exact DIRECT ELBO against the GP-initialized default, on UCI folds.

For each dataset and fold (the published 10-fold splits in ``../shared/data/uci``; the first ``--folds``),
every method ends in kronvi's default recipe (basis "eigen": weights discretized in the eigenbasis of
Phi^T Phi, 15 levels over +-4 posterior sds, the noise on 15 levels spanning 3x around the exact-evidence
maximizer, CAVI from the Gaussian start) on the training rows, standardized as the pipeline does:

  rff-gp       the default: random Fourier features with the GP marginal-likelihood lengthscales
               (``kronvi.pipeline.prepare_fold`` + ``fit_prepared``).
  rff-elbo     the same draws, the lengthscales learned by the exact ELBO from the GP ones
               (``kronvi.feature_learning.fit_features``), then the same pipeline with those lengthscales.
  mlp-elbo     a tanh MLP (``--mlp-sizes`` hidden widths; the last is the number of features b) learned by the
               exact ELBO from a random start, with a N(0, 1) prior on its weights (MAP); then the eigenbasis
               recipe on its features, built from the public pieces.

Learning (both), in float64: ``kronvi.feature_learning.fit_features_eigen``, rounds of (1) the eigenbasis
recipe placed at the current parameters (statistics, eigenbasis, evidence-maximizing noise, posterior grids)
and q fitted, (2) ``fit_features`` with those grids and rotation fixed: L-BFGS on the parameters against the
ELBO profiled over q (``inner_sweeps`` CAVI sweeps per evaluation; the gradient through the statistics by
the envelope theorem), then q refitted; the placed model with the highest ELBO is kept. The reported ELBO
is the final model's (the one that predicts); ``learn_trace`` in the JSON is the placed model's ELBO per
round.

Metrics on the fold's test rows (targets in stored units): RMSE of the predictive mean, NLPD by
``kronvi.model.predictive_log_density`` (exact density of the discrete posterior) on every test row.

Usage:
  nice -n 10 python experiments/feature_learning.py --json experiments/results/feature_learning.json \
      --md experiments/results/feature_learning.md
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import study_cli  # noqa: E402

import kronvi  # noqa: E402
from kronvi.feature_learning import (  # noqa: E402
    fit_features_eigen,
    mlp_features,
    mlp_init,
    predict_features,
    rff_lengthscale_map,
)
from kronvi.pipeline import DirectConfig, fit_prepared, fold_features, prepare_fold  # noqa: E402

DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"
METHODS = ("rff-gp", "rff-elbo", "mlp-elbo")


def gaussian_log_prior(params):
    """N(0, 1) on every MLP weight and bias."""
    return -0.5 * sum(jnp.sum(a**2) for a in jax.tree.leaves(params))


def metrics(q_w, q_n, prior_w, prior_n, Phi_test, y_test):
    mean, _ = kronvi.model.predict_regression(q_w, q_n, prior_w, prior_n, Phi_test)
    ld, err = kronvi.model.predictive_log_density(q_w, q_n, prior_w, prior_n, Phi_test, y_test)
    rmse = float(jnp.sqrt(jnp.mean((mean - y_test) ** 2)))
    return rmse, float(-jnp.mean(ld)), float(jnp.max(err))


def run_fold(name, X, y, mask, k, args, log):
    test = kronvi.inputs.fold_indices(mask) == k
    Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(args.seed), sum(map(ord, name))), k)
    config = DirectConfig(num_frequencies=args.num_frequencies, gp=kronvi.GPOptions(restarts=args.gp_restarts))
    out = {}

    t0 = time.perf_counter()
    fold = prepare_fold(key, Xtr, ytr, config)
    model, _, info = fit_prepared(fold, config)
    yc = jnp.asarray(yte, jnp.float32) - model.y_offset
    Phi = fold_features(model, Xte)
    rmse, nlpd, err = metrics(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, yc)
    out["rff-gp"] = dict(
        rmse=rmse, nlpd=nlpd, nlpd_max_rel_error=err, elbo=float(info.final_elbo),
        seconds=time.perf_counter() - t0, lengthscales=np.asarray(fold.hyper.lengthscales).tolist(),
    )  # fmt: skip
    log(f"{name} fold {k} rff-gp rmse {rmse:.4f} nlpd {nlpd:.3f} ({out['rff-gp']['seconds']:.1f}s)")

    _, k_rff, _ = jax.random.split(key, 3)  # prepare_fold's split: the same spectral draws
    prior_scale = jnp.sqrt(fold.hyper.signal_variance)
    with jax.enable_x64(True):
        f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
        Xs, ys, sw, s2 = f64(fold.X), f64(fold.y), f64(prior_scale), f64(fold.hyper.noise_variance)
        Xte_s = f64(kronvi.inputs.standardize(fold.standardizer, jnp.asarray(Xte, jnp.float32)))
        yte_c = f64(yte) - f64(fold.y_offset)
        if "rff-elbo" in args.methods:
            t0 = time.perf_counter()
            fmap = jax.tree.map(f64, rff_lengthscale_map(k_rff, X.shape[1], args.num_frequencies))
            learned, learn_info = fit_features_eigen(
                f64(jnp.log(fold.hyper.lengthscales)), Xs, ys, feature_fn=fmap, prior_scale=sw,
                noise_variance=s2, max_iter=args.rounds, param_iter=args.param_iter,
                inner_sweeps=args.inner_sweeps,
            )  # fmt: skip
            theta, trace = learned.params, learn_info.iterate_elbo
            learn_s = time.perf_counter() - t0
            hyper = fold.hyper._replace(lengthscales=jnp.exp(jnp.asarray(theta, jnp.float32)))
            fold2 = prepare_fold(key, Xtr, ytr, config, gp=(hyper, fold.gp_info))
            model2, _, info2 = fit_prepared(fold2, config)
            rmse, nlpd, err = metrics(
                model2.q_w, model2.q_noise, model2.prior_w, model2.prior_noise, fold_features(model2, Xte), yc
            )
            out["rff-elbo"] = dict(
                rmse=rmse, nlpd=nlpd, nlpd_max_rel_error=err, elbo=float(info2.final_elbo),
                seconds=time.perf_counter() - t0, learn_seconds=learn_s, learn_trace=trace.tolist(),
                lengthscales=np.exp(np.asarray(theta)).tolist(),
            )  # fmt: skip
            log(f"{name} fold {k} rff-elbo rmse {rmse:.4f} nlpd {nlpd:.3f} elbo {trace[0]:.1f} -> {trace[-1]:.1f} "
                f"({out['rff-elbo']['seconds']:.1f}s)")  # fmt: skip
        if "mlp-elbo" in args.methods:
            t0 = time.perf_counter()
            sizes = (X.shape[1], *args.mlp_sizes)
            params = jax.tree.map(f64, mlp_init(jax.random.fold_in(key, 7), sizes))
            m, learn_info = fit_features_eigen(
                params, Xs, ys, feature_fn=mlp_features, prior_scale=sw, noise_variance=s2,
                max_iter=args.mlp_rounds, param_iter=args.param_iter, inner_sweeps=args.inner_sweeps,
                log_prior=gaussian_log_prior,
            )  # fmt: skip
            learn_s, trace = time.perf_counter() - t0, learn_info.iterate_elbo
            Phi_te = predict_features(m, Xte_s, feature_fn=mlp_features)
            rmse, nlpd, err = metrics(m.q_w, m.q_noise, m.prior_w, m.prior_noise, Phi_te, yte_c)
            out["mlp-elbo"] = dict(
                rmse=rmse, nlpd=nlpd, nlpd_max_rel_error=err, elbo=m.elbo, seconds=time.perf_counter() - t0,
                learn_seconds=learn_s, learn_trace=trace.tolist(),
            )  # fmt: skip
            log(f"{name} fold {k} mlp-elbo rmse {rmse:.4f} nlpd {nlpd:.3f} elbo {trace[0]:.1f} -> {trace[-1]:.1f} "
                f"({out['mlp-elbo']['seconds']:.1f}s)")  # fmt: skip
    return out


def render(records, settings) -> str:
    """The markdown table: mean ± sd over folds of test RMSE, NLPD and the final model's ELBO."""
    lines = [
        "# Features learned by the exact DIRECT ELBO vs the GP-initialized default",
        "",
        f"Command: `{settings['command']}`",
        "",
        f"Folds {settings['folds']} of the published 10-fold splits (per dataset, those finished); b = {2 * settings['num_frequencies']} random "
        f"Fourier features; MLP hidden widths {settings['mlp_sizes']} (b = {settings['mlp_sizes'][-1]} features); "
        f"{settings['rounds']} rounds for rff-elbo, {settings['mlp_rounds']} for mlp-elbo, {settings['param_iter']} "
        f"L-BFGS iterations per round with {settings['inner_sweeps']} CAVI sweeps per evaluation. Every model is "
        "the eigenbasis recipe on its features; NLPD by `kronvi.model.predictive_log_density` on every test row. "
        "Mean ± sd over folds; ELBO of the final model (training rows), in nats.",
        "",
        "| dataset | method | test RMSE | test NLPD | ELBO | seconds per fold |",
        "|---|---|---|---|---|---:|",
    ]
    for name, folds in records.items():
        for method in METHODS:
            rows = [f[method] for f in folds if method in f]
            if not rows:
                continue

            def ms(field, fmt, rows=rows):
                v = np.asarray([r[field] for r in rows], float)
                sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
                return f"{np.mean(v):{fmt}} ± {sd:{fmt}}"

            secs = np.mean([r["seconds"] for r in rows])
            lines.append(
                f"| {name} | {method} | {ms('rmse', '.3f')} | {ms('nlpd', '.3f')} | {ms('elbo', '.1f')} | {secs:.1f} |"
            )
    lines += ["", "Per fold (RMSE / NLPD):", "", "| dataset | fold | " + " | ".join(METHODS) + " |",
              "|---|---|" + "---|" * len(METHODS)]  # fmt: skip
    for name, folds in records.items():
        for k, f in enumerate(folds):
            cells = [f"{f[m]['rmse']:.3f} / {f[m]['nlpd']:.3f}" if m in f else "" for m in METHODS]
            lines.append(f"| {name} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    p = study_cli.Parser(prog="feature_learning.py", description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", type=pathlib.Path, default=DEFAULT_DATA)
    p.add_argument("--datasets", default="yacht,energy,concrete")
    p.add_argument("--folds", type=int, default=2, help="the first FOLDS of the 10 published folds")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--num-frequencies", type=int, default=250, help="D; b = 2 D random Fourier features")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--mlp-rounds", type=int, default=8)
    p.add_argument("--mlp-sizes", default="50,50", help="hidden widths; the last is b")
    p.add_argument("--param-iter", type=int, default=10)
    p.add_argument("--inner-sweeps", type=int, default=20)
    p.add_argument(
        "--gp-restarts", type=int, default=4, help="DirectConfig.gp_restarts (default: the pipeline's)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=pathlib.Path)
    p.add_argument("--md", type=pathlib.Path)
    p.add_argument("--overwrite", action="store_true", help="replace existing --json and --md files")
    args = p.parse_args(argv)
    args.methods = tuple(m for m in args.methods.split(",") if m)
    bad = [m for m in args.methods if m not in METHODS]
    if bad or "rff-gp" not in args.methods:
        p.error(f"--methods must include rff-gp and name only {METHODS}, got {args.methods}")
    args.mlp_sizes = tuple(int(s) for s in args.mlp_sizes.split(","))
    names = args.datasets.split(",")
    inputs = [args.data_dir / d / f for d in names for f in ("data.csv.gz", "test_mask.csv.gz")]
    try:
        outputs = [("--json", args.json), ("--md", args.md)]
        study_cli.check_outputs(outputs, inputs=inputs, overwrite=args.overwrite)
    except (ValueError, OSError) as e:
        p.error(str(e))
    return args


def main(argv=None):
    args = parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    settings = dict(
        command="python experiments/feature_learning.py " + " ".join(sys.argv[1:] if argv is None else argv),
        folds=list(range(args.folds)), num_frequencies=args.num_frequencies, rounds=args.rounds,
        mlp_rounds=args.mlp_rounds, mlp_sizes=list(args.mlp_sizes), param_iter=args.param_iter,
        inner_sweeps=args.inner_sweeps, gp_restarts=args.gp_restarts, seed=args.seed, methods=list(args.methods),
        jax=jax.__version__, machine=platform.machine(), cpus=os.cpu_count(),
    )  # fmt: skip
    records = {}
    t0 = time.perf_counter()

    def write():  # after every fold, so an interrupted run keeps what it finished
        settings["total_seconds"] = time.perf_counter() - t0
        table = render(records, settings)
        if args.json:
            text = json.dumps(dict(settings=settings, records=records), indent=1) + "\n"
            kronvi.files.write_atomic(args.json, text)
        if args.md:
            kronvi.files.write_atomic(args.md, table)
        return table

    data = {name: kronvi.load_uci(args.data_dir / name) for name in args.datasets.split(",")}
    records.update({name: [] for name in data})
    for k in range(args.folds):  # fold-major: an interrupted run has the same folds of every dataset
        for name, (X, y, mask) in data.items():
            records[name].append(run_fold(name, X, y, mask, k, args, log))
            write()
    print(write())


if __name__ == "__main__":
    main()
