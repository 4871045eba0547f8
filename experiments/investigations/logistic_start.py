"""Where direct-logistic's Newton iterations go, and what the two warm starts save (issue 26, item 9).

For fold 0 of each classification dataset (the study's own features and padding) this prints:
- the Laplace Newton iterations at the study's four prior scales, each from w = 0 (before) and each from the
  MAP at the scale before (`laplace_grid_prior(init=...)`, after);
- the iterations of `fit_logistic`'s start MAP (the prior N(mu, tau2) of the chosen grid) from mu (before)
  and from the grids' centres (after: `_map_setup` picks whichever has the lower objective);
- how far each float32 start MAP ends from the float64 MAP of the same objective (max |w - w64|);
- warm seconds (medians of 5) of the four Laplace fits and of the start MAP, before and after.

The "before" runs call the internal `laplace_fit` with the old starts, so both sides share one compiled
program and one process.

Usage: python experiments/investigations/logistic_start.py --data-dir ../shared/data/classification \
    > experiments/investigations/results/logistic_start.txt
"""

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import classification as study  # noqa: E402

import kronvi.logistic as kl  # noqa: E402
from kronvi.logistic import _fit, _laplace  # noqa: E402

SCALES = (1.0, 3.0, 10.0, 30.0)


def median_seconds(fn, repeats=5):
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def laplace_all(Phi, y, w, continued):
    out, init = [], None
    for s in SCALES:
        out.append(kl.laplace_grid_prior(Phi, y, s, levels=15, width=4.0, weights=w, init=init))
        init = out[-1][1].mean if continued else None
    return out


def start_map(prior, Phi, y, w, from_centre):
    mu, tau2, w0 = _fit._map_setup(prior, Phi, y, w)
    tol = jnp.asarray(100.0 * jnp.finfo(Phi.dtype).eps, Phi.dtype)
    start = w0 if from_centre else mu
    return _laplace.laplace_fit(Phi, y, w, 1.0 / tau2, mu, start, max_iter=_laplace.NEWTON_MAX_ITER, tol=tol)


def row(data_dir, name):
    """The table row of fold 0 of ``name``."""
    X, y, folds, _ = study.load_dataset(data_dir, name, 10)
    p = study.prepare(X, y, folds, 0, 0, 50)
    Phi, yy = jnp.asarray(p["Ptr"], jnp.float32), jnp.asarray(p["ytr"], jnp.float32)
    w = jnp.ones(Phi.shape[0], jnp.float32)
    cold, warm = laplace_all(Phi, yy, w, False), laplace_all(Phi, yy, w, True)
    k = int(np.argmax([float(info.log_evidence) for _, info in warm]))
    prior = warm[k][0]
    before, after = start_map(prior, Phi, yy, w, False), start_map(prior, Phi, yy, w, True)
    with jax.enable_x64(True):
        mu, tau2, _ = _fit._map_setup(prior, Phi, yy, w)
        as64 = [jnp.asarray(np.asarray(a), jnp.float64) for a in (Phi, yy, w, 1.0 / tau2, mu)]
        tol = jnp.asarray(1e-13, jnp.float64)
        ref = _laplace.laplace_fit(*as64, as64[4], max_iter=_laplace.NEWTON_MAX_ITER, tol=tol).mean
        gaps = [float(jnp.max(jnp.abs(jnp.asarray(r.mean, jnp.float64) - ref))) for r in (before, after)]
    t_lap = [median_seconds(lambda c=c: laplace_all(Phi, yy, w, c)[-1][0].values) for c in (False, True)]
    t_map = [median_seconds(lambda c=c: start_map(prior, Phi, yy, w, c).mean) for c in (False, True)]
    return (
        f"| {name} | {Phi.shape[0]}, {Phi.shape[1]} "
        f"| {[int(i.num_iter) for _, i in cold]} / {[int(i.num_iter) for _, i in warm]} "
        f"| {int(before.num_iter)} / {int(after.num_iter)} | {gaps[0]:.1e} / {gaps[1]:.1e} "
        f"| {t_lap[0]:.3f} / {t_lap[1]:.3f} | {t_map[0]:.3f} / {t_map[1]:.3f} |"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument(
        "--datasets", default="anes96_vote,breastcancer_wdbc,digits_parity,fair_affairs,kin40k_median"
    )
    args = ap.parse_args()
    print(f"# {' '.join(sys.argv)}  (jax {jax.__version__}, {os.cpu_count()} cores)")
    print(
        "| dataset | n, b | Newton its, 4 scales: from 0 / continued | start MAP its: from mu / centre "
        "| start MAP's max abs distance to the float64 MAP: from mu / centre "
        "| Laplace x4 s: before / after | start MAP s: before / after |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.datasets.split(","):
        print(row(args.data_dir, name), flush=True)


if __name__ == "__main__":
    main()
