"""The GP step in float64 against the GP step in float32, on the UCI datasets (issue 47, item 4).

For each dataset and fold, the default recipe is fitted twice in float32 (the working dtype): with
`DirectConfig(gp=kronvi.GPOptions(precision="native"))` (the GP likelihood and its optimizer in float32, the default
before issue 47) and with the default `gp_precision="float64"` (the whole GP fit in float64). Each row
gives both fits' test RMSE, the change of the GP's chosen hyperparameters, and how far apart the two
GPs' predictions are: the exact GP predictive mean and variance, in float64, of the standardized test
rows given the first 1,000 training rows, with each fit's hyperparameters (the mean's largest change
in sds of y, the variance's largest relative change). Two more columns compare the new GP step with a
float32 and with a float64 working dtype (JAX's x64 off and on; the GP sees the float64 standardized
rows either way): the same measures, against the tolerance asked for (predictive mean within 1e-3 sd,
variance within 1%), and the largest relative difference of any hyperparameter.

Usage:
  python experiments/gp_precision.py --data-dir ../shared/data/uci --datasets all --folds 0 \\
      --out experiments/results/gp_precision.jsonl
  python experiments/gp_precision.py --out experiments/results/gp_precision.jsonl \\
      --table experiments/results/gp_precision.md    # the table from every record

`--datasets all` runs them smallest first; `--out` is appended to, and a (dataset, fold) already there
is skipped, so an interrupted run resumes.

`--lml` asks, where the two GP steps differ, which found the better optimum: it runs the GP step alone
(`kronvi.inputs.fit_gp_hyperparameters` with the default `GPOptions`, as `fit_direct` calls it, on the float64
standardized rows) with `precision="native"` (old) and `"float64"` (new), and evaluates the log marginal
likelihood of both chosen hyperparameters, and of every start's optimum, in float64 with one NumPy evaluator
on the rows the GP step fits on (its subsample of at most 1,000 training rows, drawn with the GP step's key;
for the screening, its first 300). A third fit is the reference: every start on the whole subsample in
float64 run to the gradient-norm test (`restarts="all"`, `gain_tol=0`, `max_iter=1000`), the best optimum
the four starts reach. `--rmse-from` adds each dataset's RMSE change from the main study's records.

  python experiments/gp_precision.py --lml --data-dir ../shared/data/uci \\
      --datasets bike,parkinsons,gas,autos,concreteslump,energy,stock,pendulum,sml,pumadyn32nm \\
      --out experiments/results/gp_precision_lml.jsonl
  python experiments/gp_precision.py --lml --out experiments/results/gp_precision_lml.jsonl \\
      --table experiments/results/gp_precision_lml.md
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402
from kronvi.pipeline import DirectConfig, fit_direct  # noqa: E402

GP_ROWS = 1000  # training rows the GP predictions are conditioned on
MEAN_TOL, VAR_TOL = 1e-3, 0.01  # the agreement asked for: mean within 1e-3 sd, variance within 1%
RMSE_FROM = "experiments/results/gp_precision.jsonl"  # --lml --table: the RMSE changes


def datasets(data_dir: pathlib.Path, names: str) -> list[str]:
    found = sorted(p.name for p in data_dir.iterdir() if (p / "data.csv.gz").exists())
    if names == "all":
        size = {n: (data_dir / n / "data.csv.gz").stat().st_size for n in found}
        return sorted(found, key=size.__getitem__)
    chosen = names.split(",")
    unknown = sorted(set(chosen) - set(found))
    if unknown:
        raise SystemExit(f"--datasets: no data for {unknown} in {data_dir}")
    return chosen


def standardized(X, X_train):
    mean, sd = X_train.mean(0), X_train.std(0)
    return (X - mean) / np.where(sd > 0, sd, 1.0)


def gp_predictive(hyper, X, y, Xt):
    """Exact GP predictive mean and variance (of f) in float64 with `hyper`'s lengthscales and variances."""
    ell = np.asarray(hyper.lengthscales, np.float64)
    s2, noise = float(hyper.signal_variance), float(hyper.noise_variance)

    def k(A, B):
        A, B = A / ell, B / ell
        d2 = (A**2).sum(1)[:, None] + (B**2).sum(1)[None, :] - 2 * A @ B.T
        return s2 * np.exp(-0.5 * np.maximum(d2, 0.0))

    L = np.linalg.cholesky(k(X, X) + noise * np.eye(len(y)))
    Ks = k(Xt, X)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    V = np.linalg.solve(L, Ks.T)
    return Ks @ alpha, s2 - (V**2).sum(0)


def chosen(info):
    i = int(info.chosen)
    return jax.tree.map(lambda a: np.asarray(a, np.float64)[i], info.starts)


def gp_on(X, y, x64, key):
    """The default GP step's search as `fit_direct` runs it (on the float64 standardized rows; from 4,000 to 20,000
    rows `fit_direct` then refines its optimum on 2,000 rows, which this study does not), with JAX's x64 off
    (a float32 working dtype) or on (float64)."""
    cfg = DirectConfig()
    with jax.enable_x64(x64):
        fit = kronvi.inputs.fit_gp_hyperparameters(
            key, X, y, num_points=rows_of(cfg.gp, len(y)), num_starts=cfg.gp_restarts, restarts=cfg.gp_restart_rule,
            screen_points=cfg.gp_screen_points, degenerate_margin=cfg.gp_degenerate_margin,
            gain_tol=cfg.gp_gain_tol, precision=cfg.gp_precision,
        )  # fmt: skip
        return jax.tree.map(lambda a: np.asarray(a, np.float64), fit.hyper)


def compare(h_a, h_b, X, y, Xt):
    m_a, v_a = gp_predictive(h_a, X, y, Xt)
    m_b, v_b = gp_predictive(h_b, X, y, Xt)
    sd = float(np.std(y))
    return float(np.max(np.abs(m_a - m_b)) / sd), float(np.max(np.abs(v_a - v_b) / np.maximum(v_a, 1e-300)))


def run_one(data_dir, name, fold):
    X, y, mask = kronvi.load_uci(data_dir / name)
    test = mask[:, fold] == 1
    Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
    key = jax.random.key(fold)
    rec = {"dataset": name, "fold": fold, "n": int(Xtr.shape[0]), "d": int(X.shape[1])}
    hypers = {}
    for label, precision in (("old", "native"), ("new", "float64")):
        t = time.perf_counter()
        model, timings, info = fit_direct(
            key, Xtr, ytr, DirectConfig(gp=kronvi.GPOptions(precision=precision))
        )
        pred = kronvi.predict(model, Xte)
        rec[f"rmse_{label}"] = float(np.sqrt(np.mean((np.asarray(pred.mean, np.float64) - yte) ** 2)))
        rec[f"gp_seconds_{label}"] = round(timings.init_seconds, 2)
        rec[f"seconds_{label}"] = round(time.perf_counter() - t, 2)
        hypers[label] = chosen(info.gp)
        rec[f"lengthscales_{label}"] = [round(float(v), 4) for v in hypers[label].lengthscales]
        rec[f"noise_{label}"] = float(hypers[label].noise_variance)
        rec[f"signal_{label}"] = float(hypers[label].signal_variance)
    Xs, Xts, yc = standardized(Xtr, Xtr), standardized(Xte, Xtr), ytr - ytr.mean()
    rows = slice(0, GP_ROWS)
    rec["mean_change_sd"], rec["var_change"] = compare(hypers["old"], hypers["new"], Xs[rows], yc[rows], Xts)
    # the new GP step with a float32 and a float64 working dtype
    k_gp = jax.random.split(key, 3)[0]
    h32, h64 = gp_on(Xs, yc, False, k_gp), gp_on(Xs, yc, True, k_gp)
    rec["dtype_mean_sd"], rec["dtype_var"] = compare(h32, h64, Xs[rows], yc[rows], Xts)
    rec["dtype_max_rel"] = max(float(np.max(np.abs(a / b - 1))) for a, b in zip(h32, h64, strict=True))
    rec["rmse_change_pct"] = 100 * (rec["rmse_new"] / rec["rmse_old"] - 1)
    return rec


GP = kronvi.GPOptions()  # the default GP step
# The reference fit of --lml: every start on the whole subsample, run to the gradient-norm test
REFERENCE = {"restarts": "all", "gain_tol": 0.0, "max_iter": 1000}


def gp_step_rows(X, y):
    """The float64 rows `fit_direct` hands the GP step: each input centred and scaled by its standard deviation
    (computed, as `kronvi.inputs.fit_standardizer` does, on the column divided by a power of two), the targets centred."""
    unit = np.ldexp(1.0, np.frexp(np.where(np.abs(X).max(0) > 0, np.abs(X).max(0), 1.0))[1])
    Z = X / unit
    mean = Z.mean(0)
    sd = np.sqrt(((Z - mean) ** 2).mean(0))
    scale = np.where(sd > 100 * np.finfo(np.float64).eps * np.abs(mean), sd * unit, 1.0)
    yc = y - y.mean()
    if not 2.0**-16 <= np.std(yc) <= 2.0**16:  # the recipe would fit y in another unit
        raise SystemExit("--lml: targets whose standard deviation is outside [2^-16, 2^16] are not supported")
    return (X - mean * unit) / scale, yc


def lml64(hyper, X, y) -> float:
    """The GP log marginal likelihood in float64 (NumPy): the one evaluator of every --lml column."""
    A = X / np.asarray(hyper.lengthscales, np.float64)
    sq = (A * A).sum(1)
    K = float(hyper.signal_variance) * np.exp(-0.5 * np.maximum(sq[:, None] + sq[None, :] - 2 * A @ A.T, 0.0))
    K = 0.5 * (K + K.T) + float(hyper.noise_variance) * np.eye(len(y))
    try:
        L = np.linalg.cholesky(K)
    except np.linalg.LinAlgError:
        return -np.inf
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return float(-0.5 * y @ alpha - np.log(np.diagonal(L)).sum() - 0.5 * len(y) * np.log(2 * np.pi))


def gp_subsample(key, n):
    """The GP step's rows (`fit_gp_hyperparameters` draws them with its key), and whether a float32 and a
    float64 fit draw the same ones."""
    m = min(n, rows_of(GP, n))
    idx = np.arange(n) if m == n else np.asarray(jax.random.choice(key, n, (m,), replace=False))
    with jax.enable_x64(True):
        idx64 = np.arange(n) if m == n else np.asarray(jax.random.choice(key, n, (m,), replace=False))
    return idx64, bool(np.array_equal(idx, idx64))


def start_ids(info):
    """The start behind each entry of `info`'s per-start arrays: every start without a screening or when
    the screening fell back to all of them; else the screened winner and start 0 (or start 0 alone), or,
    for a GP step that refines a runner-up when start 0 wins, start 0 and the best other screened start
    (the first within 0.5 nats of the best, as the GP step breaks ties; degenerate starts not told apart)."""
    count = len(np.asarray(info.log_marginal_likelihoods))
    if info.screened is None or count not in (1, 2):
        return list(range(count))
    winner = int(info.screened.chosen)
    if count == 1:
        return [0]
    others = np.asarray(info.screened.log_marginal_likelihoods, np.float64)[1:]
    return [winner, 0] if winner else [0, 1 + int(np.argmax(others >= others.max() - 0.5))]


def rows_of(gp, n):
    """The most rows the GP step `gp` fits on, for `n` training rows (`kronvi.pipeline.default_gp_points` for
    `points=None`)."""
    return kronvi.pipeline.default_gp_points(n) if gp.points is None else gp.points


def gp_arguments(gp, n):
    """`kronvi.inputs.fit_gp_hyperparameters`'s arguments of the GP step `gp` (`kronvi.GPOptions`) for `n` training
    rows, as `fit_direct` passes them to its search (not to the refinement on more rows that follows it from 4,000
    training rows)."""
    return {"num_points": rows_of(gp, n), "num_starts": gp.restarts, "restarts": gp.restart_rule,
            "screen_points": gp.screen_points, "degenerate_margin": gp.degenerate_margin,
            "precision": gp.precision, "gain_tol": gp.gain_tol}  # fmt: skip


def per_start(info, X, y, ids):
    """Every start's optimum in `info`: its start, the float64 likelihood on `(X, y)`, the fit's own value,
    its L-BFGS iterations, whether the gradient-norm test stopped it, and its noise variance over var(y)."""
    var_y = float(np.var(y))
    out = []
    for i, s in enumerate(ids):
        hyper = jax.tree.map(lambda a, i=i: np.asarray(a, np.float64)[i], info.starts)
        out.append({
            "start": s, "lml64": round(lml64(hyper, X, y), 3),
            "lml_fit": round(float(np.asarray(info.log_marginal_likelihoods)[i]), 3),
            "iters": int(np.asarray(info.num_iterations)[i]), "converged": bool(np.asarray(info.converged)[i]),
            "noise_rel": float(hyper.noise_variance) / var_y,
        })  # fmt: skip
    return out


def lml_one(data_dir, name, fold, proposal=None):
    """The --lml record of one dataset and fold; with `proposal` (`GPOptions` fields), the GP step with
    those options instead ("prop"), and the test RMSE of the default recipe with that GP step."""
    X, y, mask = kronvi.load_uci(data_dir / name)
    test = mask[:, fold] == 1
    Xtr, ytr = np.asarray(X[~test], np.float64), np.asarray(y[~test], np.float64)
    Xs, yc = gp_step_rows(Xtr, ytr)
    k_gp = jax.random.split(jax.random.key(fold), 3)[0]  # fit_direct's key of the GP step
    idx, same_rows = gp_subsample(k_gp, len(yc))
    Xg, yg = Xs[idx], yc[idx]
    rec = {"dataset": name, "fold": fold, "n": len(yc), "d": int(X.shape[1]), "gp_rows": len(idx),
           "same_rows": same_rows, "screened": len(idx) > GP.screen_points}  # fmt: skip
    runs = (("old", {"precision": "native"}), ("new", {}), ("ref", REFERENCE))
    if proposal is not None:
        runs = (("prop", gp_arguments(kronvi.GPOptions(**proposal), len(yc))),)
        rec["proposal"] = proposal
    for label, changes in runs:
        t = time.perf_counter()
        fit = kronvi.inputs.fit_gp_hyperparameters(k_gp, Xs, yc, **{**gp_arguments(GP, len(yc)), **changes})
        rec[f"seconds_{label}"] = round(time.perf_counter() - t, 2)
        hyper = jax.tree.map(lambda a: np.asarray(a, np.float64), fit.hyper)
        ids = start_ids(fit.info)
        rec[f"lml_{label}"] = lml64(hyper, Xg, yg)
        rec[f"start_{label}"] = ids[int(fit.info.chosen)]
        rec[f"noise_rel_{label}"] = float(hyper.noise_variance) / float(np.var(yg))
        rec[f"lengthscales_{label}"] = [round(float(v), 4) for v in hyper.lengthscales]
        rec[f"signal_{label}"] = float(hyper.signal_variance)
        rec[f"starts_{label}"] = per_start(fit.info, Xg, yg, ids)
        screened = fit.info.screened
        if screened is not None:
            rows = slice(0, GP.screen_points)
            rec[f"screen_chosen_{label}"] = int(screened.chosen)
            rec[f"screen_{label}"] = per_start(screened, Xg[rows], yg[rows], list(range(GP.restarts)))
        if label == "new":  # the evaluator against the library's, under x64
            with jax.enable_x64(True):
                lib = kronvi.inputs.gp_log_marginal_likelihood(kronvi.inputs.GPHyperparameters(*hyper), Xg, yg)
            rec["evaluator_gap"] = abs(float(lib) - rec["lml_new"])
    if proposal is not None:
        model = fit_direct(
            jax.random.key(fold), Xtr, ytr, DirectConfig(gp=kronvi.GPOptions(**proposal))
        ).model
        mean = np.asarray(kronvi.predict(model, X[test]).mean, np.float64)
        rec["rmse_prop"] = float(np.sqrt(np.mean((mean - y[test]) ** 2)))
        return rec
    rec["lml_change"] = rec["lml_new"] - rec["lml_old"]
    return rec


def lml_table(
    records, rmse_from=None, out_path="experiments/results/gp_precision_lml.jsonl",
    md_path="experiments/results/gp_precision_lml.md",
) -> str:
    main = {}  # the main study's records: the RMSE change, and the hyperparameters fit_direct's GP step chose
    if rmse_from is not None and pathlib.Path(rmse_from).exists():
        for line in pathlib.Path(rmse_from).read_text().splitlines():
            r = json.loads(line)
            main[(r["dataset"], r["fold"])] = r
    change = {k: r["rmse_change_pct"] for k, r in main.items()}

    def reproduced(r):
        """This GP step chose the main study's hyperparameters, old and new."""
        m = main.get((r["dataset"], r["fold"]))
        return m is not None and all(
            np.isclose(r[f"signal_{label}"], m[f"signal_{label}"], rtol=1e-6)
            and np.allclose(r[f"lengthscales_{label}"], m[f"lengthscales_{label}"], rtol=1e-6, atol=1e-4)
            for label in ("old", "new")
        )

    def starts(r, label):
        return ", ".join(f"{s['start']}: {s['lml64']:.1f}" for s in r[f"starts_{label}"])

    def screen(r, label):
        if f"screen_{label}" not in r:
            return "–"
        return (
            ", ".join(f"{s['lml64']:.1f}" for s in r[f"screen_{label}"]) + f" → {r[f'screen_chosen_{label}']}"
        )

    one_fold = all(r["fold"] == 0 for r in records)
    out = [
        "# Which GP step found the better optimum: log marginal likelihoods, float64 against float32 (issue 47)",
        "",
        "Command: `python experiments/gp_precision.py --lml --data-dir ../shared/data/uci "
        f"{run_arguments(records)} --out {out_path}`, "
        f"then `python experiments/gp_precision.py --lml --out {out_path} --table {md_path}"
        f"{'' if rmse_from == RMSE_FROM else f' --rmse-from {rmse_from}'}`.",
        "",
        "The GP step of the default recipe (`kronvi.GPOptions()`: 4 starts screened on 300 rows, the winner and "
        'start 0 refined on at most 1,000) with `precision="native"` (old: float32) and the default `"float64"` '
        f"(new), on the float64 standardized training rows of {'fold 0' if one_fold else 'each fold'}. Every "
        "likelihood below is evaluated in "
        "float64 by one NumPy evaluator on the GP step's rows (its subsample; screening: its first 300 rows). "
        "LML old / new: of the chosen hyperparameters; Δ = new − old (positive: the float64 step found the "
        "higher optimum). ref: every start on the whole subsample in float64 run to the gradient-norm test "
        f'(`restarts="all"`, `gain_tol=0`, `max_iter={REFERENCE["max_iter"]}`), the start the same rule chooses. '
        "start: the start returned; noise: its noise variance over var(y). Screened: the four starts' optima on "
        "the 300 screening rows → the start the screening chose. RMSE change: new against old, from "
        f"`{pathlib.Path(rmse_from or '').name}`.",
        "",
        "| dataset | n | RMSE change | LML old | LML new | Δ new − old | LML ref | ref − new | start old / new / ref "
        "| noise old / new | screened old | screened new | refined old | refined new | ref starts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        rc = change.get((r["dataset"], r["fold"]))
        out.append(
            f"| {_label(r, records)} | {r['n']} | {'–' if rc is None else f'{rc:+.1f}%'} | {r['lml_old']:.1f} | "
            f"{r['lml_new']:.1f} | {r['lml_change']:+.1f} | {r['lml_ref']:.1f} | {r['lml_ref'] - r['lml_new']:+.1f} | "
            f"{r['start_old']} / {r['start_new']} / {r['start_ref']} | {r['noise_rel_old']:.1e} / "
            f"{r['noise_rel_new']:.1e} | {screen(r, 'old')} | {screen(r, 'new')} | {starts(r, 'old')} | "
            f"{starts(r, 'new')} | {starts(r, 'ref')} |"
        )
    higher = [_label(r, records) for r in records if r["lml_change"] > 0]
    lower = [_label(r, records) for r in records if r["lml_change"] <= 0]
    short = [_label(r, records) for r in records if r["lml_ref"] - r["lml_new"] > 1]
    gap = max((r["evaluator_gap"] for r in records), default=0.0)
    out += [
        "",
        f"{len(records)} {'datasets' if all(r['fold'] == 0 for r in records) else 'folds'}; the float64 step's "
        f"optimum is higher on {len(higher)} "
        f"({', '.join(higher) or 'none'}) and lower or equal on {len(lower)} ({', '.join(lower) or 'none'}); "
        f"it is more than 1 nat below the reference on {len(short)} ({', '.join(short) or 'none'}). "
        f"Same subsample in both precisions: {sum(r['same_rows'] for r in records)} of {len(records)}; the "
        f"hyperparameters of the main study's fits reproduced: {sum(map(reproduced, records))} of {len(records)}; "
        f"the NumPy evaluator and `kronvi.inputs.gp_log_marginal_likelihood` under x64 agree within {gap:.1g} nats.",
    ]
    return "\n".join(out) + "\n"


def run_arguments(records) -> str:
    """`--datasets ... --folds ...` of the run that wrote `records`: the names in order, the folds."""
    names = ",".join(dict.fromkeys(r["dataset"] for r in records))
    folds = ",".join(str(f) for f in sorted({r["fold"] for r in records})) or "0"
    return f"--datasets {names} --folds {folds}"


def _label(r, records) -> str:
    """A row's dataset, with its fold when the records hold several folds."""
    return r["dataset"] if all(x["fold"] == 0 for x in records) else f"{r['dataset']} (fold {r['fold']})"


def read_records(path):
    """The JSON-lines records of `path` by (dataset, fold); none when it does not exist."""
    path = pathlib.Path(path)
    lines = path.read_text().splitlines() if path.exists() else []
    return {(r["dataset"], r["fold"]): r for r in map(json.loads, lines)}


def proposal_table(records, lml_from, rmse_from, out_path, md_path) -> str:
    """The table of `--lml --proposal` records beside the --lml records (`lml_from`: old, new, ref) and the
    main study's RMSEs (`rmse_from`)."""
    lml, main = read_records(lml_from), read_records(rmse_from)
    proposal = json.dumps(records[0]["proposal"]) if records else "{}"
    out = [
        "# A proposed GP step against the old and new ones (issue 47)",
        "",
        f"Command: `python experiments/gp_precision.py --lml --proposal '{proposal}' --data-dir ../shared/data/uci "
        f"{run_arguments(records)} --out {out_path}`, then the same "
        f"with `--out {out_path} --table {md_path} --rmse-from {rmse_from}`; at the commit that proposes the "
        "change to `src/kronvi/_inputs/gp.py`.",
        "",
        f"prop: the default recipe with `GPOptions(**{proposal})` at that commit. LML: float64 log marginal "
        "likelihood of the chosen hyperparameters on the GP step's rows (one NumPy evaluator); old, new and ref "
        f"(every start converged) from `{pathlib.Path(lml_from).name}`, RMSE old and new (fold 0, the default "
        f"recipe with the old and new GP steps) from `{pathlib.Path(rmse_from).name}`.",
        "",
        "| dataset | LML old | LML new | LML prop | prop − old | prop − new | ref − prop | start prop | RMSE old | "
        "RMSE new | RMSE prop | prop vs old | prop vs new | GP s prop |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for r in records:
        key = (r["dataset"], r["fold"])
        if key not in lml or key not in main:
            continue
        a, m = lml[key], main[key]
        rows.append((r, a, m))
        out.append(
            f"| {r['dataset']} | {a['lml_old']:.1f} | {a['lml_new']:.1f} | {r['lml_prop']:.1f} | "
            f"{r['lml_prop'] - a['lml_old']:+.1f} | {r['lml_prop'] - a['lml_new']:+.1f} | "
            f"{a['lml_ref'] - r['lml_prop']:+.1f} | {r['start_prop']} | {m['rmse_old']:.4g} | {m['rmse_new']:.4g} | "
            f"{r['rmse_prop']:.4g} | {100 * (r['rmse_prop'] / m['rmse_old'] - 1):+.1f}% | "
            f"{100 * (r['rmse_prop'] / m['rmse_new'] - 1):+.1f}% | {r['seconds_prop']:.1f} |"
        )
    below = [r["dataset"] for r, a, _ in rows if r["lml_prop"] < max(a["lml_old"], a["lml_new"]) - 0.5]
    short = [r["dataset"] for r, a, _ in rows if a["lml_ref"] - r["lml_prop"] > 1]
    within = [r["dataset"] for r, _, m in rows if abs(r["rmse_prop"] / m["rmse_old"] - 1) <= 0.01]

    def gmean(ratios):
        return float(np.exp(np.mean(np.log(ratios)))) if ratios else 1.0

    out += [
        "",
        f"{len(rows)} datasets; the proposal's optimum is more than 0.5 nats below the better of old and new on "
        f"{len(below)} ({', '.join(below) or 'none'}) and more than 1 nat below the reference on {len(short)} "
        f"({', '.join(short) or 'none'}); its RMSE is within 1% of the old one on {len(within)} "
        f"({', '.join(within) or 'none'}); geometric-mean RMSE ratio prop/old "
        f"{gmean([r['rmse_prop'] / m['rmse_old'] for r, _, m in rows]):.4f}, new/old "
        f"{gmean([m['rmse_new'] / m['rmse_old'] for _, _, m in rows]):.4f}, prop/new "
        f"{gmean([r['rmse_prop'] / m['rmse_new'] for r, _, m in rows]):.4f}.",
    ]
    return "\n".join(out) + "\n"


def table(records, out_path="experiments/results/gp_precision.jsonl", md_path=None) -> str:
    everything = len(records) >= 28 and all(r["fold"] == 0 for r in records)
    arguments = "--datasets all --folds 0" if everything else run_arguments(records)
    md_path = md_path or str(pathlib.Path(out_path).with_suffix(".md"))
    out = [
        "# The GP step in float64 against float32 (issue 47, item 4)",
        "",
        f"Command: `python experiments/gp_precision.py --data-dir ../shared/data/uci {arguments} "
        f"--out {out_path}`, then `python experiments/gp_precision.py --out {out_path} --table {md_path}`.",
        "",
        'Default recipe, float32 working dtype. old: `gp_precision="native"` (the GP in float32); new: the '
        'default `"float64"`. GP Δmean / Δvar: largest change of the exact GP predictive mean (in sds of '
        "y) and relative change of its variance on the test rows, old against new hyperparameters; "
        "f32/f64: the same between the new GP step with x64 off and on (largest relative difference of a "
        "hyperparameter: f32/f64 rel). "
        f"Agreement asked for: mean within {MEAN_TOL:g} sd, variance within {VAR_TOL:.0%}.",
        "",
        "| dataset | fold | n | RMSE old | RMSE new | change | GP Δmean (sd) | GP Δvar | f32/f64 Δmean | "
        "f32/f64 Δvar | f32/f64 rel | GP s old | GP s new |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        out.append(
            f"| {r['dataset']} | {r['fold']} | {r['n']} | {r['rmse_old']:.4g} | {r['rmse_new']:.4g} | "
            f"{r['rmse_change_pct']:+.1f}% | {r['mean_change_sd']:.2g} | {r['var_change']:.2g} | "
            f"{r['dtype_mean_sd']:.1g} | {r['dtype_var']:.1g} | {r['dtype_max_rel']:.1g} | {r['gp_seconds_old']:.1f} | {r['gp_seconds_new']:.1f} |"
        )
    moved = [r for r in records if abs(r["rmse_change_pct"]) > 1]
    same = sum(r["dtype_mean_sd"] <= MEAN_TOL and r["dtype_var"] <= VAR_TOL for r in records)
    ratio = (
        float(np.exp(np.mean([np.log(r["rmse_new"] / r["rmse_old"]) for r in records]))) if records else 1.0
    )
    out += [
        "",
        f"{len(records)} folds; geometric-mean RMSE ratio new/old {ratio:.4f}; RMSE moved by more than 1% on "
        f"{len(moved)} ({', '.join(r['dataset'] for r in moved) or 'none'}); float32 and float64 working dtypes "
        f"gave the same GP within the tolerance on {same} of {len(records)}.",
    ]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("../shared/data/uci"))
    p.add_argument("--datasets", help="comma-separated names, or all (smallest first)")
    p.add_argument("--folds", default="0", help="comma-separated fold indices")
    p.add_argument("--out", required=True, help="JSON lines, appended to (resumes)")
    p.add_argument("--table", help="write the markdown table of every record in --out here, and stop")
    p.add_argument("--lml", action="store_true", help="compare the two GP steps' log marginal likelihoods")
    p.add_argument("--proposal", type=json.loads, help="--lml: GPOptions fields (JSON) of a proposed GP step")
    p.add_argument(
        "--lml-from",
        default="experiments/results/gp_precision_lml.jsonl",
        help="--lml --proposal --table: the old, new and reference likelihoods from here",
    )
    p.add_argument(
        "--rmse-from",
        default=RMSE_FROM,
        help="--lml --table: RMSE changes from here",
    )
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if args.table:
        if args.proposal is not None:
            text = proposal_table(records, args.lml_from, args.rmse_from, args.out, args.table)
        else:
            text = lml_table(records, args.rmse_from, args.out, args.table) if args.lml else table(records, args.out, args.table)
        kronvi.files.write_atomic(args.table, text)
        print(text)
        return 0
    if not args.datasets:
        p.error("--datasets is required unless --table is given")
    done = {(r["dataset"], r["fold"]) for r in records}
    for name in datasets(args.data_dir, args.datasets):
        for fold in map(int, args.folds.split(",")):
            if (name, fold) in done:
                continue
            if args.lml:
                rec = lml_one(args.data_dir, name, fold, args.proposal)
            else:
                rec = run_one(args.data_dir, name, fold)
            with out.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
