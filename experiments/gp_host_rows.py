"""The GP step with its rows held on the host against the GP step with its likelihood in XLA (issue 46).

The default GP step (`precision="float64"`) computes the likelihood, its gradient and the leave-one-out
error on the host (NumPy and LAPACK, float64), so its compiled programs see no row count and one program
serves every training-set size. Before, the same float64 likelihood ran inside the compiled L-BFGS program
(XLA), one program per bucket of row counts; `precision="native"` on float64 rows still runs that program.
For each dataset (fold 0 of the shared splits), both fit the GP hyperparameters of the default recipe on
the same standardized float64 rows (JAX's x64 on): the chosen start, its log marginal likelihood, the
largest relative change of a hyperparameter, and how far apart the two GPs predict the test rows (exact GP
predictive mean, in sds of y, and relative variance change, given the first 1,000 training rows; the
tolerance asked for: mean within 1e-3 sd, variance within 1%). The seconds are each call's wall time in one
process (the host step first; each compiles what it has not compiled before).

Usage:
  python experiments/gp_host_rows.py --data-dir ../shared/data/uci --datasets all \\
      --out experiments/results/gp_host_rows.jsonl
  python experiments/gp_host_rows.py --out experiments/results/gp_host_rows.jsonl \\
      --table experiments/results/gp_host_rows.md
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

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gp_precision import GP_ROWS, MEAN_TOL, VAR_TOL, compare, datasets, standardized  # noqa: E402

import kronvi  # noqa: E402
from kronvi.pipeline import DirectConfig, fit_direct  # noqa: E402


def gp_step(X, y, key, precision):
    """The default recipe's GP step on float64 rows, with `precision`; `(hyper, info, seconds)`."""
    gp = DirectConfig().gp
    t = time.perf_counter()
    with jax.enable_x64(True):
        fit = kronvi.inputs.fit_gp_hyperparameters(
            key, X, y, num_points=kronvi.pipeline.default_gp_points(len(y)) if gp.points is None else gp.points, num_starts=gp.restarts, restarts=gp.restart_rule,
            screen_points=gp.screen_points, degenerate_margin=gp.degenerate_margin, gain_tol=gp.gain_tol,
            precision=precision,
        )  # fmt: skip
        fit = jax.tree.map(lambda a: np.asarray(a, np.float64) if a is not None else None, fit)
    return fit.hyper, fit.info, time.perf_counter() - t


def run_one(data_dir, name, fold=0):
    X, y, mask = kronvi.load_uci(data_dir / name)
    test = mask[:, fold] == 1
    Xtr, ytr, Xte = X[~test], y[~test], X[test]
    Xs, Xts, yc = standardized(Xtr, Xtr), standardized(Xte, Xtr), ytr - ytr.mean()
    key = jax.random.key(fold)
    rec = {"dataset": name, "fold": fold, "n": int(Xtr.shape[0]), "d": int(X.shape[1])}
    fits = {}
    for label, precision in (("host", "float64"), ("xla", "native")):
        hyper, info, seconds = gp_step(Xs, yc, key, precision)
        fits[label] = hyper
        i = int(info.chosen)
        rec[f"chosen_{label}"] = i
        rec[f"lml_{label}"] = float(info.log_marginal_likelihoods[i])
        rec[f"iterations_{label}"] = int(info.num_iterations[i])
        rec[f"seconds_{label}"] = round(seconds, 2)
    pairs = zip(jax.tree.leaves(fits["host"]), jax.tree.leaves(fits["xla"]), strict=True)
    rec["max_rel"] = max(float(np.max(np.abs(a / b - 1))) for a, b in pairs)
    rows = slice(0, GP_ROWS)
    rec["mean_change_sd"], rec["var_change"] = compare(fits["xla"], fits["host"], Xs[rows], yc[rows], Xts)
    if rec["mean_change_sd"] > MEAN_TOL or rec["var_change"] > VAR_TOL:  # the GPs differ: what the recipe does
        for label, precision in (("host", "float64"), ("xla", "native")):
            rec[f"rmse_{label}"] = recipe_rmse(Xtr, ytr, Xte, y[test], key, precision)
    return rec


def recipe_rmse(Xtr, ytr, Xte, yte, key, precision):
    """Test RMSE of the default recipe (float32 working dtype) with the GP step's `precision`; under x64 the
    recipe hands the GP its float64 rows either way, so `"native"` is the float64 likelihood in XLA."""
    config = DirectConfig(gp=kronvi.GPOptions(precision=precision))
    with jax.enable_x64(True):
        model = fit_direct(key, Xtr, ytr, config, dtype=np.float32).model
        mean = np.asarray(kronvi.predict(model, Xte).mean, np.float64)
    return float(np.sqrt(np.mean((mean - yte) ** 2)))


def table(records) -> str:
    out = [
        "# The GP step with its rows on the host against its likelihood in XLA (issue 46)",
        "",
        "Command: `python experiments/gp_host_rows.py --data-dir ../shared/data/uci --datasets all --out "
        "experiments/results/gp_host_rows.jsonl`, then `python experiments/gp_host_rows.py --out "
        "experiments/results/gp_host_rows.jsonl --table experiments/results/gp_host_rows.md`.",
        "",
        "Fold 0, the default recipe's GP options, float64 rows. host: the default `precision=\"float64\"` "
        "(likelihood, gradient and leave-one-out error in NumPy/LAPACK; programs without rows); XLA: "
        '`precision="native"` (the same float64 likelihood inside the compiled program, the default before). '
        "Δmean / Δvar: largest change of the exact GP predictive mean on the test rows (sds of y) and "
        f"relative change of its variance; asked for: mean within {MEAN_TOL:g} sd, variance within {VAR_TOL:.0%}.",
        "",
        "| dataset | n | d | chosen host / XLA | LML host | LML XLA | max rel | Δmean (sd) | Δvar | s host | s XLA |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        out.append(
            f"| {r['dataset']} | {r['n']} | {r['d']} | {r['chosen_host']} / {r['chosen_xla']} | "
            f"{r['lml_host']:.3f} | {r['lml_xla']:.3f} | {r['max_rel']:.1g} | {r['mean_change_sd']:.1g} | "
            f"{r['var_change']:.1g} | {r['seconds_host']:.1f} | {r['seconds_xla']:.1f} |"
        )
    same = [r for r in records if r["mean_change_sd"] <= MEAN_TOL and r["var_change"] <= VAR_TOL]
    apart = [
        f"{r['dataset']} (the recipe's test RMSE {r['rmse_xla']:.4g} with the XLA step, {r['rmse_host']:.4g} with "
        "the host step)"
        if "rmse_host" in r
        else r["dataset"]
        for r in records
        if r not in same
    ]
    out += [
        "",
        f"{len(records)} datasets; the same GP within the tolerance on {len(same)} of {len(records)}"
        + (f"; apart: {', '.join(apart)}." if apart else "."),
    ]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("../shared/data/uci"))
    p.add_argument("--datasets", help="comma-separated names, or all (smallest first)")
    p.add_argument("--out", required=True, help="JSON lines, appended to (resumes)")
    p.add_argument("--table", help="write the markdown table of every record in --out here, and stop")
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if args.table:
        kronvi.files.write_atomic(args.table, table(records))
        print(table(records))
        return 0
    if not args.datasets:
        p.error("--datasets is required unless --table is given")
    done = {r["dataset"] for r in records}
    for name in datasets(args.data_dir, args.datasets):
        if name in done:
            continue
        rec = run_one(args.data_dir, name)
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
