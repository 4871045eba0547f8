"""Why the paper's grids miss: on fold 0 of each dataset, the paper's grid against the Laplace posterior.

With the study's features and prior sd s (chosen by the Laplace evidence, as in classification.py), prints the
paper grid's spacing (6 s / 14) and edge (3 s), the Laplace MAP's size, how many weights lie beyond the edge,
and the Laplace marginal sds (kronvi.logistic.laplace_grid_prior on the full training fold).

Usage (from experiments/):
  nice -n 10 python classification_grid_check.py --data-dir ../../shared/data/classification \
      > results/classification_grid_check.txt
"""

from __future__ import annotations

import argparse
import os

import jax.numpy as jnp
import numpy as np
from classification import laplace_log_evidence, prepare

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
        p = prepare(X, y, kronvi.inputs.fold_indices(mask), 0, 0, 50)
        sub = np.random.default_rng(0).permutation(len(p["ytr"]))[:5000]
        s = scales[int(np.argmax([laplace_log_evidence(p["Ptr"][sub], p["ytr"][sub], s) for s in scales]))]
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
