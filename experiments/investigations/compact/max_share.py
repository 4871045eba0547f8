"""The bottom band's shared variance: the lambda-weighted median (the recipe) against the band's maximum.

For each data set (fold 0), fits the default recipe once and compacts it twice: with the recipe's rule and
with the shared value replaced by the band's maximum (`complement_split`'s weighted median monkeypatched
to the largest value, in the bound and in the value). Prints the kept directions k and the test NLPD.
It varies a private rule, so it imports `kronvi._model.compact`.

Usage: python experiments/investigations/compact/max_share.py bike [more data sets]
Output (committed): experiments/investigations/compact/results/max_share.txt
"""

import pathlib
import sys

import jax

import kronvi._model.compact as compact
from kronvi.pipeline import DirectConfig, fit_prepared, fold_features, prepare_fold

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from miss import load_fold, nlpd  # noqa: E402

DATA = HERE.parents[2].parent / "shared" / "data" / "uci"


def main():
    median = compact._weighted_median
    for name in sys.argv[1:]:
        Xtr, ytr, Xte, yte = load_fold(DATA, name, 0)
        config = DirectConfig()
        fold = prepare_fold(jax.random.key(0), Xtr, ytr, config)
        full = fit_prepared(fold, config).model
        out = [f"{name}: n={len(Xtr)} default NLPD {nlpd(full, fold_features(full, Xte), yte):.4f}"]
        try:
            for label, rule in (("median", median), ("max", lambda s, w: s[-1])):
                compact._weighted_median = rule
                small = fit_prepared(fold, config._replace(basis="compact")).model
                k = small.basis.vectors.shape[1]
                out.append(f"{label}: k={k} NLPD {nlpd(small, fold_features(small, Xte), yte):.4f}")
        finally:
            compact._weighted_median = median
        print(" | ".join(out), flush=True)


if __name__ == "__main__":
    main()
