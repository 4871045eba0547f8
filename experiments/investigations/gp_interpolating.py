"""Which choices of the GP step's start the interpolating-noise rule moves: every fold of the shared sets with
`experiments/uci.py`'s keys, the GP step alone as `fit_direct` runs it, each choice among starts (the screening's,
the refinement's and the fallback's) made by both rules, the pinned-only one and the one that also counts a start
with noise at most `_INTERPOLATING` var(y) as pinned (`docs/decisions/gp-step.md#an-interpolating-start-is-weighed-as-a-pinned-one`).

    python experiments/investigations/gp_interpolating.py --data-dir ../shared/data/uci --datasets all \\
        --out experiments/investigations/results/gp_interpolating.txt
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import uci  # noqa: E402

import kronvi  # noqa: E402
import kronvi._inputs.gp as G  # noqa: E402
import kronvi.pipeline as P  # noqa: E402

CALLS: list = []


def _record(old, new, lmls, loo, noise, rows):
    CALLS.append((int(old), int(new), np.asarray(lmls), np.asarray(loo), np.asarray(noise), int(rows)))


def _summary(results, var_y, ls_lo, ls_hi, active, min_noise, margin, num_points):
    """`G._summary`, reporting the choice of both rules."""
    hypers, lmls, _, _, _, loo = results
    degenerate = jax.vmap(lambda h, e: G._is_degenerate(h, e, var_y, ls_lo, ls_hi, active))(hypers, loo)
    pinned = hypers.noise_variance <= 1.5 * min_noise
    interpolating = pinned | (hypers.noise_variance <= G._INTERPOLATING * var_y)
    old = G._choose(lmls, degenerate, pinned, loo, margin)
    new = G._choose(lmls, degenerate, interpolating, loo, margin)
    jax.debug.callback(_record, old, new, lmls, loo, hypers.noise_variance / var_y, num_points)
    return _ORIGINAL(results, var_y, ls_lo, ls_hi, active, min_noise, margin, num_points)


class _Stop(Exception):
    pass


def _gp_only(*args, **kwargs):
    _HYPER(*args, **kwargs)
    raise _Stop


_ORIGINAL, _HYPER = G._summary, P._hyperparameters


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/uci")
    p.add_argument("--datasets", default="all")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    G._summary, P._hyperparameters = _summary, _gp_only
    folders = uci.dataset_folders(pathlib.Path(args.data_dir), args.datasets)
    folders.sort(key=uci.dataset_size)  # smallest first
    cfg = uci.StudyConfig()
    lines = [f"# {' '.join(sys.argv)}", f"# interpolating: noise <= {G._INTERPOLATING} var(y)"]
    for folder in folders:
        name = folder.name
        X, y, mask = kronvi.load_uci(folder)
        moved = []
        for k in range(mask.shape[1]):
            CALLS.clear()
            train, _ = uci.fold_masks(mask, k)
            try:
                P.prepare_fold(jax.random.fold_in(uci.dataset_key(name, 0), k), X[train], y[train], cfg.default)
            except _Stop:
                pass
            for old, new, lmls, loo, noise, rows in CALLS:
                if old != new:
                    moved.append(
                        f"  fold {k}, {rows} rows: start {old} -> {new}; log marginal likelihoods "
                        f"{np.round(lmls, 1).tolist()}, leave-one-out MSE {np.round(loo, 3).tolist()}, "
                        f"noise / var(y) {[f'{v:.2g}' for v in noise]}"
                    )
        lines.append(f"{name}: {'moved' if moved else 'no choice moved'} ({mask.shape[1]} folds)")
        lines.extend(moved)
        print(lines[-1 - len(moved)], flush=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
