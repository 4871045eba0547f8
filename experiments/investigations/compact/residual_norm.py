"""The compact model's complement norm: the residual |phi - V_K V_K^T phi| against the difference
|phi|^2 - |V_K^T phi|^2, with the kept vectors in float32 ("full") and float16 ("half").

For one data set (fold 0) fits the default recipe and its compact forms, then on the test rows prints the
compact predictive variance over the eigen model's (min / median / max) and the test NLPD, for the
library's `compact_features` (the residual) and for the same features with the complement columns
recomputed from the difference (the formula before 2026-11-27). It also prints how far the float16
vectors are from orthonormal.

Usage: python experiments/investigations/compact/residual_norm.py concreteslump
Output (committed): experiments/investigations/compact/results/residual_norm.txt
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi.pipeline import DirectConfig, fit_prepared, fold_features, prepare_fold

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from miss import load_fold  # noqa: E402

DATA = HERE.parents[2].parent / "shared" / "data" / "uci"


def difference_features(basis, Phi):
    """`compact_features` of the random features `Phi`, with the complement's norm from the difference of
    squared norms."""
    P = np.array(kronvi.compact_features(basis, Phi))
    k = basis.vectors.shape[1]
    Phi = np.asarray(Phi)
    rest = np.sum(Phi**2, axis=1) - np.sum(P[:, 1 : 1 + k] ** 2, axis=1)
    r = np.sqrt(np.maximum(rest, 0.0))
    P[:, 1 + k :] = r[:, None] * np.asarray(basis.complement, np.float32)[None, :]
    return jnp.asarray(P)


def scores(model, Phi, y):
    mean, var = kronvi.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    y_c = jnp.asarray(y - float(model.y_offset), Phi.dtype)
    try:
        ld = kronvi.predictive_log_density(
            model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y_c
        )[0]
    except kronvi.DensityToleranceError as e:
        ld = e.log_density
    return np.asarray(var, np.float64), -float(np.mean(np.asarray(ld)))


def main():
    for name in sys.argv[1:]:
        Xtr, ytr, Xte, yte = load_fold(DATA, name, 0)
        config = DirectConfig()
        fold = prepare_fold(jax.random.key(0), Xtr, ytr, config)
        eigen = fit_prepared(fold, config).model
        v_e, nlpd_e = scores(eigen, fold_features(eigen, Xte), yte)
        print(f"== {name} fold 0: eigen NLPD {nlpd_e:.4f}")
        for vectors in ("full", "half"):
            model = fit_prepared(fold, config._replace(basis="compact", compact_vectors=vectors)).model
            Phi = fold_features(model, Xte)
            raw = kronvi.rff_features(
                model.features, kronvi.standardize(model.standardizer, jnp.asarray(Xte, Phi.dtype))
            )
            for label, feats in (("residual", Phi), ("difference", difference_features(model.basis, raw))):
                v, nlpd = scores(model, feats, yte)
                lo, mid, hi = np.percentile(v / v_e, [0, 50, 100])
                print(f"  {vectors:4s} vectors, {label:10s}: variance / eigen's min {lo:.4f} median {mid:.4f} "
                      f"max {hi:.4f}; NLPD {nlpd:.4f}; k = {model.basis.vectors.shape[1]}")  # fmt: skip
            V = np.asarray(model.basis.vectors, np.float64)
            print(
                f"  {vectors:4s} vectors: |V_K^T V_K - I|_2 = {np.linalg.norm(V.T @ V - np.eye(V.shape[1]), 2):.2e}"
            )


if __name__ == "__main__":
    main()
