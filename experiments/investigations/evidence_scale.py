"""Why the default recipe's RMSE doubles on elevators and bike over 10 folds: the evidence-optimal prior scale.

For each ``dataset:fold``, fits ``kronvi.pipeline.fit_direct`` with the default config, then refits exact
Bayesian linear regression on its (centred, rotated) training features with four choices of the prior
scale and the noise variance: the GP's (``sqrt(signal_variance)``, ``noise_variance``), the evidence
optimum the default recipe uses (``kronvi.spectral_evidence_optimum`` from the GP's values), and the two
mixed. Prints test RMSE, NLPD (closed form), the largest test error and the posterior mean's norm, then the
five test rows with the largest errors (their predictive sd and the largest |standardized input|).

Usage: python experiments/investigations/evidence_scale.py --data-dir ../shared/data/uci elevators:5 bike:1
"""

from __future__ import annotations

import argparse
import pathlib

import jax
import numpy as np
from gp_common import blr_predictive, rmse_nlpd  # the script's own folder is on sys.path

import kronvi

jax.config.update("jax_enable_x64", True)


def run(folder: pathlib.Path, fold: int) -> None:
    X, y, mask = kronvi.load_uci(folder)
    test = mask[:, fold].astype(bool)
    model, _, _ = kronvi.pipeline.fit_direct(
        jax.random.key(0), X[~test], y[~test], kronvi.pipeline.DirectConfig()
    )
    P = np.asarray(kronvi.pipeline.fold_features(model, X[~test]), np.float64)
    Pt = np.asarray(kronvi.pipeline.fold_features(model, X[test]), np.float64)
    offset = float(model.y_offset)
    yt = np.asarray(y[~test], np.float64) - offset
    ev, V = np.linalg.eigh(P.T @ P)
    cr = V.T @ (P.T @ yt)
    sw_gp, s2_gp = float(np.sqrt(model.hyper.signal_variance)), float(model.hyper.noise_variance)
    sw_ev, s2_ev = (
        float(v) for v in kronvi.spectral_evidence_optimum(ev, cr, yt @ yt, len(yt), sw_gp, s2_gp)
    )
    print(f"== {folder.name} fold {fold}: n = {len(yt)}, b = {P.shape[1]}, {int(test.sum())} test rows")
    print(
        f"GP: sigma_w {sw_gp:.4g}, noise {s2_gp:.4g}; evidence optimum: sigma_w {sw_ev:.4g}, noise {s2_ev:.4g}"
    )
    mu, sd = X[~test].mean(0), X[~test].std(0) + 1e-12
    zx = np.abs((X[test] - mu) / sd).max(1)
    PV = Pt @ V
    for name, sw, s2 in [
        ("GP scale, GP noise", sw_gp, s2_gp),
        ("evidence optimum", sw_ev, s2_ev),
        ("evidence scale, GP noise", sw_ev, s2_gp),
        ("GP scale, evidence noise", sw_gp, s2_ev),
    ]:
        mean, var = blr_predictive(ev, cr, PV, sw, s2)
        err = np.asarray(y[test], np.float64) - (mean + offset)
        rmse, nlpd = rmse_nlpd(err, var)
        m = cr / (ev + s2 / sw**2)  # the posterior mean in the eigenbasis: the same norm
        worst = np.argsort(-np.abs(err))[:5]
        print(
            f"  {name:25s} RMSE {rmse:.4f}  NLPD {nlpd:.3f}  largest |error| "
            f"{np.abs(err).max():.3f}  |mean w| {np.linalg.norm(m):.3g}  share of squared error in 5 rows "
            f"{np.sort(err**2)[-5:].sum() / np.sum(err**2):.2f}"
        )
        rows = ", ".join(f"{err[i]:+.2f} (sd {np.sqrt(var[i]):.2f}, |x| {zx[i]:.0f})" for i in worst)
        print(f"    worst rows: error (predictive sd, largest |standardized input|): {rows}")
    print(
        f"  test rows' largest |standardized input|: median {np.median(zx):.2f}, max {zx.max():.1f}",
        flush=True,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="../shared/data/uci")
    p.add_argument("cases", nargs="+", help="dataset:fold pairs")
    args = p.parse_args(argv)
    for case in args.cases:
        name, fold = case.split(":")
        run(pathlib.Path(args.data_dir) / name, int(fold))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
