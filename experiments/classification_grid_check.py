"""Why the paper's grids miss: on fold 0 of each dataset, the paper's grid against the Laplace posterior.

With the features of kronvi.fit_classifier and its prior sd s (the best of --prior-scales by the Laplace
evidence; classification.recipe_features), prints the paper grid's spacing (6 s / 14) and edge (3 s), the
Laplace MAP's size, how many weights lie beyond the edge, and the Laplace marginal sds
(kronvi.logistic.laplace_grid_prior on the full training fold).

Usage (from experiments/):
  nice -n 10 python classification_grid_check.py --data-dir ../../shared/data/classification \
      > results/classification_grid_check.txt
"""

from __future__ import annotations

import argparse
import os

import jax.numpy as jnp
import numpy as np
from classification import recipe_features

import kronvi
import kronvi.logistic as kl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--prior-scales", default="1,3,10,30")
    args = ap.parse_args(argv)
    scales = [float(s) for s in args.prior_scales.split(",")]
    print("dataset | n_train | b | s | paper spacing | paper edge | |MAP| median / max | beyond edge | "
          "Laplace sd min / median / max | spacing / min sd | spacing / median sd | Newton iterations")  # fmt: skip
    for name in sorted(os.listdir(args.data_dir)):
        if not os.path.isdir(os.path.join(args.data_dir, name)):
            continue
        X, y, mask = kronvi.load_uci(os.path.join(args.data_dir, name))
        p = recipe_features(X, y, kronvi.inputs.fold_indices(mask), 0, prior_scales=tuple(scales))
        s = p["scale"]
        _, info = kl.laplace_grid_prior(jnp.asarray(p["Ptr"]), jnp.asarray(p["ytr"], jnp.float32), s)
        w, sd = np.abs(np.asarray(info.mean)), np.asarray(info.sd)
        spacing = 6 * s / 14
        print(
            f"{name} | {len(p['ytr'])} | {len(w)} | {s:g} | {spacing:.2f} | {3 * s:.0f} | "
            f"{np.median(w):.2f} / {w.max():.2f} | {int(np.sum(w > 3 * s))} | "
            f"{sd.min():.3f} / {np.median(sd):.3f} / {sd.max():.3f} | {spacing / sd.min():.1f} | "
            f"{spacing / np.median(sd):.1f} | {int(info.num_iter)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
