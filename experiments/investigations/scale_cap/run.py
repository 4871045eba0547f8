"""Bounding the evidence-optimal prior scale relative to the GP's: test RMSE and NLPD per rule.

The default recipe takes the prior scale and noise variance that maximize the exact evidence of Bayesian
linear regression on its features (``kronvi.spectral_evidence_optimum``, started at the GP's values). On
elevators and bike that scale is 15-20x the GP's and a few far test rows ruin the RMSE
(``docs/notes/2026-11-28-evidence-outliers.md``). This compares, on the headline study's own preparation
of each fold (``experiments/uci.py``'s ``fold_setup`` and ``Setup.eigen``: its keys, GP fit, features and
centring), exact BLR (``kronvi.blr_posterior``, in float64) with the prior scale and noise chosen by:

- ``gp``: the GP's ``sqrt(signal_variance)`` and ``noise_variance``;
- ``evidence``: the evidence optimum the default recipe uses (each variance within e^12 of the GP's), which
  is the study's ``exact-blr`` record;
- ``cap<c>``: the evidence optimum with each variance within a factor c^2 of the GP's (``log_range =
  2 log c``), so the prior scale is at most c times the GP's.

Exact BLR stands in for the DIRECT fit: on these features the two agree to 1.02x RMSE and 0.05 nats on all
28 datasets (``experiments/results/uci_table.md``). One JSON line per dataset, fold and rule.

Usage: python experiments/investigations/scale_cap/run.py --data-dir ../shared/data/uci \
    --cases elevators:0-9 bike:0-9 all:0 --out experiments/investigations/scale_cap/results/scale_cap.jsonl
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[i]) for i in (1, 2)]
import uci  # noqa: E402
from gp_common import rmse_nlpd  # noqa: E402

CAPS = (2.0, 4.0, 8.0)


def _folds(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_fold(data_dir: pathlib.Path, name: str, fold: int) -> list[dict]:
    # the headline study's own preparation of this fold (experiments/uci.py: keys, GP fit, features, float32
    # with the eigenbasis in float64); its "evidence" rule is the study's exact-blr record
    setup = uci.fold_setup(name, fold, uci.StudyConfig(), data_dir=data_dir)
    prepared, Phi_test = setup.eigen()
    with jax.enable_x64(True):
        f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
        stats, Phi_test, y_test = jax.tree.map(f64, (prepared.stats, Phi_test, setup.y_test))
        ev = f64(prepared.basis.eigenvalues)
        sw_gp, s2_gp = float(jnp.sqrt(prepared.hyper.signal_variance)), float(prepared.hyper.noise_variance)
        rules = {
            "gp": (sw_gp, s2_gp),
            "evidence": (float(prepared.prior_scale), float(prepared.noise_variance)),
        }
        for c in CAPS:  # each variance within a factor c^2 of the GP's
            sw, s2 = kronvi.spectral_evidence_optimum(
                ev, stats.Phity, stats.yty, stats.n, sw_gp, s2_gp, log_range=2 * math.log(c)
            )
            rules[f"cap{c:g}"] = (float(sw), float(s2))
        out = []
        for rule, (sw, s2) in rules.items():
            mean_w, cov = kronvi.blr_posterior(stats, sw, s2)
            mean, var = kronvi.predict_blr(mean_w, cov, s2, Phi_test)
            rmse, nlpd = rmse_nlpd(np.asarray(y_test - mean), np.asarray(var))
            out.append(
                dict(dataset=name, fold=fold, rule=rule, prior_scale=sw, noise_variance=s2,
                     rmse=rmse, nlpd=nlpd, b=int(Phi_test.shape[1]), n=int(stats.n))
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
        names = [p.name for p in uci.list_datasets(root, "all")] if name == "all" else [name]  # small first
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
        rows = run_fold(root, name, fold)
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
