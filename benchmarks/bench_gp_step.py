"""The default GP step with its rows on the host against its likelihood in XLA: warm seconds, same process.

For each dataset (fold 0 of the shared splits, standardized float64 rows, centred targets, JAX's x64 on), the
default recipe's GP options run `kronvi.inputs.fit_gp_hyperparameters` with `precision="float64"` (the
default: the rows held on the host, the starts in turn, the likelihood in NumPy/LAPACK) and with
`precision="native"` (the same float64 likelihood inside the compiled L-BFGS program, the starts side by
side on the cores from host threads: the default before). Each is called once to compile, then `--repeats`
times, interleaved; the medians and their ratio are printed, with the chosen start's log marginal likelihood
of each (the same optimum to rounding: `experiments/results/gp_host_rows.md`).

    python benchmarks/bench_gp_step.py > benchmarks/results/bench_gp_step_cpu.txt
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine  # noqa: E402

import kronvi  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"


def rows(path):
    X, y, mask = kronvi.load_uci(path)
    train = ~np.asarray(mask)[:, 0].astype(bool)
    X, y = np.asarray(X, np.float64)[train], np.asarray(y, np.float64)[train]
    sd = X.std(0)
    return (X - X.mean(0)) / np.where(sd > 0, sd, 1.0), y - y.mean()


def gp_step(X, y, precision):
    gp = kronvi.DirectConfig().gp
    t = time.perf_counter()
    with jax.enable_x64(True):
        fit = kronvi.inputs.fit_gp_hyperparameters(
            jax.random.key(0), X, y, num_points=kronvi.pipeline.default_gp_points(len(y)) if gp.points is None else gp.points, num_starts=gp.restarts, restarts=gp.restart_rule,
            screen_points=gp.screen_points, degenerate_margin=gp.degenerate_margin, gain_tol=gp.gain_tol,
            precision=precision,
        )  # fmt: skip
        lml = float(fit.info.log_marginal_likelihoods[int(fit.info.chosen)])
    return time.perf_counter() - t, lml


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="yacht,energy,concrete,parkinsons")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=str(DATA))
    args = parser.parse_args()
    print(f"# python benchmarks/bench_gp_step.py --datasets {args.datasets} --repeats {args.repeats}")
    print(f"# {machine()}; OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; {load_average()}")
    print("\n| dataset (rows) | host s (median) | XLA s (median) | host / XLA | LML host | LML XLA |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.datasets.split(","):
        X, y = rows(pathlib.Path(args.data_dir) / name)
        times = {"float64": [], "native": []}
        lmls = {}
        for precision in times:  # compile
            _, lmls[precision] = gp_step(X, y, precision)
        for _ in range(args.repeats):
            for precision in times:
                times[precision].append(gp_step(X, y, precision)[0])
        host, xla = (statistics.median(times[p]) for p in ("float64", "native"))
        print(
            f"| {name} ({X.shape[0]}) | {host:.3f} | {xla:.3f} | {host / xla:.2f} | {lmls['float64']:.3f} | "
            f"{lmls['native']:.3f} |",
            flush=True,
        )
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
