"""GP hyperparameter initialization on UCI folds: is any fold degenerate (signal explained as noise)?

For every fold of yacht and concrete: standardize X on the training rows, centre y on the training mean,
run ``kronvi.fit_gp_hyperparameters`` (defaults: 1000-point subsample, 4 restarts, 200 L-BFGS iterations)
and report noise variance / var(y), the per-start log marginal likelihoods, the degeneracy flags, and the
test RMSE of the exact GP posterior mean on the training rows (n <= 1000 here) against std(y_test).

Usage: python experiments/investigations/gp_init_check.py [--float32] [--data ../shared/data/uci]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time

# JAX's CPU Cholesky calls OpenBLAS's LAPACK, whose default thread count oversubscribes a shared 2-core
# machine: a 277 x 277 Cholesky took 135 ms with the default threads and 0.6 ms with one.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--float32", action="store_true", help="run in float32 (default float64)")
parser.add_argument("--data", default=str(pathlib.Path(__file__).resolve().parents[3] / "shared/data/uci"))
parser.add_argument("--datasets", nargs="+", default=["yacht", "concrete"])
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402


def gp_mean(hyper, X, y, Xt):
    def k(A, B):
        A, B = A / hyper.lengthscales, B / hyper.lengthscales
        d2 = jnp.sum(A**2, 1)[:, None] + jnp.sum(B**2, 1)[None, :] - 2 * A @ B.T
        return hyper.signal_variance * jnp.exp(-0.5 * jnp.maximum(d2, 0))

    K = k(X, X) + hyper.noise_variance * jnp.eye(X.shape[0], dtype=X.dtype)
    return k(Xt, X) @ jnp.linalg.solve(K, y)


def main():
    dtype = jnp.float32 if args.float32 else jnp.float64
    print(
        f"# fit_gp_hyperparameters defaults, {jnp.dtype(dtype).name}, jax {jax.__version__}, "
        f"{platform.processor() or platform.machine()}, {jax.devices()[0].platform}"
    )
    for name in args.datasets:
        X_all, y_all, mask = kronvi.load_uci(pathlib.Path(args.data) / name)
        folds = kronvi.fold_indices(mask)
        print(f"\n## {name}: n={X_all.shape[0]}, d={X_all.shape[1]}, std(y)={y_all.std():.4g}")
        print(
            "fold  n_train  noise/var(y)  signal/var(y)  min_ls  max_ls  chosen  degenerate  "
            "degenerate_starts  lml_per_start  iters  rmse/std(y_test)  seconds"
        )
        n_degenerate = 0
        ratios, rel_rmse = [], []
        for k in range(mask.shape[1]):
            tr, te = folds != k, folds == k
            st = kronvi.fit_standardizer(jnp.asarray(X_all[tr], dtype))
            X, Xt = (
                kronvi.standardize(st, jnp.asarray(X_all[tr], dtype)),
                kronvi.standardize(st, jnp.asarray(X_all[te], dtype)),
            )
            y_mean = y_all[tr].mean()
            y, yt = jnp.asarray(y_all[tr] - y_mean, dtype), y_all[te] - y_mean
            t0 = time.perf_counter()
            hyper, info = kronvi.fit_gp_hyperparameters(jax.random.key(k), X, y)
            jax.block_until_ready(hyper)
            secs = time.perf_counter() - t0
            vy = float(jnp.var(y))
            pred = np.asarray(gp_mean(hyper, X, y, Xt), np.float64)
            rr = float(np.sqrt(np.mean((pred - yt) ** 2)) / yt.std())
            ratio = float(hyper.noise_variance) / vy
            ratios.append(ratio)
            rel_rmse.append(rr)
            n_degenerate += bool(info.degenerate)
            lmls = " ".join(f"{v:.1f}" for v in np.asarray(info.log_marginal_likelihoods))
            flags = "".join("D" if f else "." for f in np.asarray(info.degenerate_starts))
            print(
                f"{k:4d}  {int(tr.sum()):7d}  {ratio:12.4g}  {float(hyper.signal_variance) / vy:13.4g}  "
                f"{float(jnp.min(hyper.lengthscales)):6.3g}  {float(jnp.max(hyper.lengthscales)):6.3g}  "
                f"{int(info.chosen):6d}  {bool(info.degenerate)!s:>10}  {flags:>17}  [{lmls}]  "
                f"{np.asarray(info.num_iterations).tolist()}  {rr:16.3f}  {secs:7.1f}"
            )
        print(
            f"summary {name}: degenerate folds {n_degenerate}/{mask.shape[1]}; noise/var(y) "
            f"median {np.median(ratios):.4g} (min {min(ratios):.4g}, max {max(ratios):.4g}); "
            f"test rmse/std(y) mean {np.mean(rel_rmse):.3f}"
        )


if __name__ == "__main__":
    main()
