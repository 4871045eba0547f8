"""Why a compact model misses: its predictive variance against the default's, on training and test rows.

For one data set and fold, fits the default recipe and `basis="compact"` from the same prepared fold and
prints, on (at most 4,000 of) the training rows and on the test rows: the kept directions, which band of
the spectrum the complement is (from the shared variance), the mean and largest relative change of the
predictive variance, the mean |change| in noise variances (the quantity the many-rows band bounds by
`compact_tol` over the training rows), and the NLPD of both models.

Usage: python experiments/investigations/compact/miss.py --datasets bike,kin40k [--data-dir ../shared/data/uci]
Output (committed): experiments/investigations/compact/results/miss.txt
"""

import argparse
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi.pipeline import DirectConfig, fit_prepared, fold_features, prepare_fold


def load_fold(root, name, fold):
    data = np.loadtxt(root / name / "data.csv.gz", delimiter=",")
    mask = np.loadtxt(root / name / "test_mask.csv.gz", delimiter=",").astype(bool)[:, fold]
    return data[~mask, :-1], data[~mask, -1], data[mask, :-1], data[mask, -1]


def moments(model, X):
    Phi = fold_features(model, X)
    mean, var = kronvi.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    return Phi, np.asarray(mean, np.float64), np.asarray(var, np.float64)


def nlpd(model, Phi, y):
    y_c = jnp.asarray(y - float(model.y_offset), Phi.dtype)
    try:
        ld = kronvi.predictive_log_density(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y_c)[0]
    except kronvi.DensityToleranceError as e:
        ld = e.log_density
    return -float(np.mean(np.asarray(ld)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="bike")
    ap.add_argument("--fold", type=int, default=0)
    args = ap.parse_args()
    for name in args.datasets.split(","):
        Xtr, ytr, Xte, yte = load_fold(pathlib.Path(args.data_dir), name, args.fold)
        config = DirectConfig()
        fold = prepare_fold(jax.random.key(0), Xtr, ytr, config)
        full = fit_prepared(fold, config).model
        small = fit_prepared(fold, config._replace(basis="compact")).model
        noise = float(kronvi.noise_moments(full.q_noise, full.prior_noise)[2])
        rows = np.random.default_rng(0).permutation(len(Xtr))[:4000]
        k = small.basis.vectors.shape[1]
        print(f"== {name} fold {args.fold}: n = {len(Xtr)}, b = {fold.stats.Phity.shape[0]}, k = {k}, "
              f"E[noise variance] = {noise:.4g}")  # fmt: skip
        for label, X, y in (("train", Xtr[rows], ytr[rows]), ("test", Xte, yte)):
            Phi_f, m_f, v_f = moments(full, X)
            Phi_c, m_c, v_c = moments(small, X)
            rel = v_c / v_f - 1
            print(
                f"  {label:5s} rows {len(X):5d}: variance change mean {np.mean(rel):+.4f}, "
                f"min {rel.min():+.4f}, max {rel.max():+.4f}; mean |change| / noise "
                f"{np.mean(np.abs(v_c - v_f)) / noise:.4f}; epistemic part of the default's variance "
                f"{np.mean((v_f - noise) / v_f):.4f}; max |mean change| {np.max(np.abs(m_c - m_f)):.2e}; "
                f"NLPD default {nlpd(full, Phi_f, y):.4f}, compact {nlpd(small, Phi_c, y):.4f}"
            )


if __name__ == "__main__":
    main()
