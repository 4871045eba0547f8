"""How loose are the logistic bounds on real data, and does a tighter bound fit better?

For fold 0 of each dataset given, with the features of kronvi.fit_classifier and the best of the prior sds
(1, 3, 10, 30) by the Laplace evidence (experiments/classification.py: recipe_features), fit DIRECT logistic regression once with each
bound (L-BFGS, --max-iter iterations from the Laplace start). At every fitted q report, per training row, each
bound and an unbiased Monte Carlo estimate of the exact expected log-likelihood (kronvi.logistic.
logistic_loglik_estimate, --samples draws, with its standard error), and the test log loss and accuracy.

Usage:
  nice -n 10 python experiments/classification_bound_gap.py --data-dir ../shared/data/classification \
      --datasets breastcancer_wdbc,anes96_vote > experiments/results/classification_bound_gap.txt
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
from classification import metrics, recipe_features

import kronvi
import kronvi.logistic as kl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--datasets", default="breastcancer_wdbc,anes96_vote")
    ap.add_argument("--num-frequencies", type=int, default=50)
    ap.add_argument("--max-iter", type=int, default=40)
    ap.add_argument("--samples", type=int, default=2000)
    args = ap.parse_args(argv)
    for name in args.datasets.split(","):
        X, y, mask = kronvi.load_uci(os.path.join(args.data_dir, name))
        p = recipe_features(X, y, kronvi.inputs.fold_indices(mask), 0, num_frequencies=args.num_frequencies)
        s = p["scale"]
        b = p["Ptr"].shape[1]
        prior = kronvi.model.gaussian_prior(b, s, levels=15)
        Phi, yy = jnp.asarray(p["Ptr"]), jnp.asarray(p["ytr"], jnp.float32)
        n = Phi.shape[0]
        print(f"{name} fold 0: n_train={n}, b={b}, prior sd {s}")
        print(
            "  fitted with | per-row: exact (MC +- se) | tilted gap | jensen gap | theorem2 gap | test logloss | acc"
        )
        for fit_bound in kl.BOUNDS:
            q, info = kl.fit_logistic(Phi, yy, prior, bound=fit_bound, max_iter=args.max_iter)
            est, se = kl.logistic_loglik_estimate(
                jax.random.key(1), Phi, yy, q, prior, num_samples=args.samples
            )
            gaps = [
                float(est - kl.logistic_loglik_bound(Phi, yy, q, prior, bound=bd)) / n for bd in kl.BOUNDS
            ]
            prob = np.asarray(kl.predict_logistic(q, prior, jnp.asarray(p["Pte"])))
            acc, ll, _ = metrics(prob, p["yte"])
            print(
                f"  {fit_bound:>10}  | {float(est) / n:8.4f} +- {float(se) / n:.4f} | "
                + " | ".join(f"{g:9.4f}" for g in gaps)
                + f" | {ll:.4f} | {acc:.4f}"
            )


if __name__ == "__main__":
    main()
