"""Bounding the evidence-optimal prior scale relative to the GP's: test RMSE and NLPD per rule.

The default recipe takes the prior scale and noise variance that maximize the exact evidence of Bayesian
linear regression on its features (``kronvi.spectral_evidence_optimum``, started at the GP's values). On
elevators and bike that scale is 15-20x the GP's and a few far test rows ruin the RMSE
(``docs/notes/2026-11-28-evidence-outliers.md``). This compares, on the same fold, features and centring
(the default recipe's ``fit_direct``), exact BLR with the prior scale and noise chosen by:

- ``gp``: the GP's ``sqrt(signal_variance)`` and ``noise_variance``;
- ``evidence``: the evidence optimum the default recipe uses (each variance within e^12 of the GP's);
- ``cap<c>``: the evidence optimum with each variance within a factor c^2 of the GP's (``log_range =
  2 log c``), so the prior scale is at most c times the GP's.

Exact BLR stands in for the DIRECT fit: on these features the two agree to 1.02x RMSE and 0.05 nats on all
28 datasets (``experiments/results/uci_table.md``). One JSON line per dataset, fold and rule.

Usage: python experiments/investigations/scale_cap/run.py --data-dir ../shared/data/uci \
    --cases elevators:0-9 bike:0-9 all:0 --out experiments/investigations/scale_cap/results/scale_cap.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import jax
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from gp_common import blr_predictive, rmse_nlpd  # noqa: E402

jax.config.update("jax_enable_x64", True)

CAPS = (2.0, 4.0, 8.0)
ALL = (  # the 28 shared datasets, smallest first
    "challenger fertility concreteslump autos servo breastcancer machine yacht autompg housing forest stock "
    "pendulum energy concrete solar airfoil wine gas sml parkinsons pumadyn32nm elevators bike kin40k protein "
    "tamielectric keggdirected"
).split()


def _folds(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_fold(folder: pathlib.Path, fold: int) -> list[dict]:
    X, y, mask = kronvi.load_uci(folder)
    test = kronvi.fold_indices(mask) == fold  # the study's folds and keys (experiments/uci.py)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(0), sum(map(ord, folder.name))), fold)
    model, _, _ = kronvi.pipeline.fit_direct(key, X[~test], y[~test], kronvi.pipeline.DirectConfig())
    P = np.asarray(kronvi.pipeline.fold_features(model, X[~test]), np.float64)
    Pt = np.asarray(kronvi.pipeline.fold_features(model, X[test]), np.float64)
    offset = float(model.y_offset)
    yt = np.asarray(y[~test], np.float64) - offset
    ytest = np.asarray(y[test], np.float64)
    ev, V = np.linalg.eigh(P.T @ P)
    ev = np.maximum(ev, 0.0)
    cr = V.T @ (P.T @ yt)
    PV = Pt @ V
    sw_gp, s2_gp = float(np.sqrt(model.hyper.signal_variance)), float(model.hyper.noise_variance)
    rules = {"gp": (sw_gp, s2_gp)}
    for name, log_range in [("evidence", 12.0)] + [(f"cap{c:g}", 2 * math.log(c)) for c in CAPS]:
        sw, s2 = kronvi.spectral_evidence_optimum(ev, cr, yt @ yt, len(yt), sw_gp, s2_gp, log_range=log_range)
        rules[name] = (float(sw), float(s2))
    out = []
    for name, (sw, s2) in rules.items():
        mean, var = blr_predictive(ev, cr, PV, sw, s2)
        rmse, nlpd = rmse_nlpd(ytest - (mean + offset), var)
        out.append(
            dict(dataset=folder.name, fold=fold, rule=name, prior_scale=sw, noise_variance=s2,
                 rmse=rmse, nlpd=nlpd, b=int(P.shape[1]), n=int(len(yt)))
        )  # fmt: skip
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="../shared/data/uci")
    p.add_argument("--cases", nargs="+", required=True, help="dataset:folds, e.g. bike:0-9 or all:0,1")
    p.add_argument(
        "--out", required=True, help="JSON lines, appended; finished (dataset, fold) pairs skipped"
    )
    args = p.parse_args(argv)
    root, out = pathlib.Path(args.data_dir), pathlib.Path(args.out)
    done = set()
    if out.exists():
        done = {(r["dataset"], r["fold"]) for r in map(json.loads, out.read_text().splitlines())}
    todo = []
    for case in args.cases:
        name, folds = case.split(":")
        names = ALL if name == "all" else [name]
        todo += [(d, f) for d in names for f in _folds(folds) if (d, f) not in done]
    todo = list(dict.fromkeys(todo))
    out.parent.mkdir(parents=True, exist_ok=True)
    print(
        "# python experiments/investigations/scale_cap/run.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        flush=True,
    )
    start = time.perf_counter()
    for i, (name, fold) in enumerate(todo):
        rows = run_fold(root / name, fold)
        with out.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        summary = "  ".join(f"{r['rule']} {r['rmse']:.4g}/{r['nlpd']:.3f}" for r in rows)
        print(
            f"[{i + 1}/{len(todo)} {time.perf_counter() - start:.0f}s] {name} fold {fold}: {summary}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
