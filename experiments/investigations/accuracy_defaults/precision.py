"""The eigenbasis recipe from float32 against float64 statistics (yacht, fold 0, the README recipe's features).

usage: python experiments/investigations/accuracy_defaults/precision.py [--dataset yacht] [--fold 0]

Prints the evidence-optimal noise variance (kronvi.blr_evidence_noise) and the numerical rank of Phi^T Phi
from statistics accumulated in each precision.
"""

import argparse
import functools
import os
import pathlib

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[4] / "shared" / "data" / "uci"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", default="yacht")
    ap.add_argument("--fold", type=int, default=0)
    a = ap.parse_args()
    X, y, mask = kronvi.load_uci(DATA / a.dataset)
    train = ~np.asarray(mask[:, a.fold], bool)
    config = kronvi.pipeline.DirectConfig(basis="features", noise_cv=())
    fold = kronvi.pipeline.prepare_fold(jax.random.key(0), X[train], y[train], config)
    sw, gp_noise = float(jnp.sqrt(fold.hyper.signal_variance)), float(fold.hyper.noise_variance)
    print(f"{a.dataset} fold {a.fold}: n = {int(train.sum())}, b = {fold.stats.Phity.shape[0]}, "
          f"sw^2 = {sw**2:.4g}, GP noise = {gp_noise:.4g}")
    for dtype in (jnp.float32, jnp.float64):
        with jax.enable_x64(dtype == jnp.float64):
            cast = functools.partial(jnp.asarray, dtype=dtype)
            feats = jax.tree.map(cast, fold.features)
            stats = kronvi.regression_stats_from_inputs(
                functools.partial(kronvi.rff_features, feats), cast(fold.X), cast(fold.y)
            )
            s2 = kronvi.blr_evidence_noise(stats, sw, lower=gp_noise * 1e-5, upper=gp_noise * 1e5)
            lam = np.asarray(kronvi.eigenbasis(stats)[1].eigenvalues)
            rank = int(np.sum(lam > lam.max() * lam.size * np.finfo(lam.dtype).eps))
            print(f"  {np.dtype(dtype).name}: evidence-optimal noise {float(s2):.4g}, numerical rank {rank}, "
                  f"largest eigenvalue {lam.max():.4g}")


if __name__ == "__main__":
    main()
