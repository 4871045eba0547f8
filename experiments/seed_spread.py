"""How much the default recipe's test RMSE moves with the seed, and which random step moves it.

For each dataset (fold 0 of its published folds) and each variant of the recipe, fits with
``jax.random.key(s)`` for ``s`` in 0..S-1 and reports the test RMSE of every seed, their spread (max / min)
and mean, and the NLPD on at most 500 test rows. With ``--decompose`` it then separates the two random steps
of the default recipe on the same fold: the GP step's (its subsample and restarts, drawn from the key) and the
random frequencies': "gp fixed" reuses seed 0's GP hyperparameters with every seed's features, "features
fixed" draws seed 0's features with every seed's GP hyperparameters (``prepare_fold(gp=...)``).

Usage:
  python experiments/seed_spread.py --data-dir ../shared/data/uci --datasets concrete,energy \\
      --variants default,b4000,halton,orthogonal --decompose > experiments/results/seed_spread.txt
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

import kronvi
from kronvi import pipeline

VARIANTS = {
    "default": {},
    "b4000": dict(num_frequencies=2000),
    "halton": dict(frequency_sampling="halton"),
    "orthogonal": dict(frequency_sampling="orthogonal"),
    "halton_b4000": dict(frequency_sampling="halton", num_frequencies=2000),
}


def rmse(model, X, y) -> float:
    return float(np.sqrt(np.mean((model.predict(X).mean - y) ** 2)))


def fit_with_gp(seed: int, gp, rows, config) -> float:
    """Test RMSE of the fit with `jax.random.key(seed)`'s features and the GP hyperparameters `gp`."""
    Xtr, ytr, Xte, yte = rows
    fold = pipeline.prepare_fold(jax.random.key(seed), Xtr, ytr, config, gp=gp)
    return rmse(pipeline.fit_prepared(fold, config).model, Xte, yte)


def spread_line(label: str, values) -> str:
    v = np.asarray(values)
    return (
        f"{label:<28} RMSE {' '.join(f'{x:.4f}' for x in v)}  spread {v.max() / v.min():.3f}  "
        f"mean {v.mean():.4f}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--datasets", default="concrete,energy")
    ap.add_argument("--variants", default="default,b4000")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--decompose", action="store_true")
    args = ap.parse_args(argv)
    print(f"kronvi {kronvi.__version__}, jax {jax.__version__}, {args.seeds} seeds, fold 0", flush=True)
    for name in args.datasets.split(","):
        X, y, mask = kronvi.load_uci(os.path.join(args.data_dir, name))
        te = mask[:, 0].astype(bool)
        Xtr, ytr, Xte, yte = X[~te], y[~te], X[te], y[te]
        print(f"\n{name}: {len(ytr)} training rows, {len(yte)} test rows", flush=True)
        for variant in args.variants.split(","):
            config = kronvi.DirectConfig(**VARIANTS[variant])
            values, nlpds, t0 = [], [], time.perf_counter()
            for s in range(args.seeds):
                run = kronvi.cv.run_fold(jax.random.key(s), Xtr, ytr, Xte, yte, config, density_rows=500)
                values.append(run.result.rmse)
                nlpds.append(run.result.nlpd)
            secs = (time.perf_counter() - t0) / args.seeds
            print(f"{spread_line(variant, values)}  NLPD {np.mean(nlpds):.3f}  {secs:.1f} s a fit", flush=True)
        if args.decompose:
            config = kronvi.DirectConfig()
            gps = [pipeline.prepare_fold(jax.random.key(s), Xtr, ytr, config) for s in range(args.seeds)]
            gps = [(f.hyper, f.gp_info) for f in gps]

            rows = (Xtr, ytr, Xte, yte)
            gp_fixed = [fit_with_gp(s, gps[0], rows, config) for s in range(args.seeds)]
            features_fixed = [fit_with_gp(0, gps[s], rows, config) for s in range(args.seeds)]
            print(spread_line("default, gp fixed", gp_fixed), flush=True)
            print(spread_line("default, features fixed", features_fixed), flush=True)
            same = all(np.allclose(np.asarray(g[0].lengthscales), np.asarray(gps[0][0].lengthscales)) for g in gps)
            print(f"the GP step's lengthscales are the same for every seed: {same}", flush=True)


if __name__ == "__main__":
    main()
