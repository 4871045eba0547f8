"""Rows per second of `regression_stats` on row-sharded global arrays over 1, 2 and 4 devices.

On a CPU the devices are XLA host devices (``--xla_force_host_platform_device_count``, set here before jax
starts) sharing the machine's cores; one host device already runs its matmuls on every core, so more host
devices cannot beat the core count and show the cost of sharding rather than a speed-up. On a machine with
accelerators the script uses the devices it finds (one GPU: only the 1-device row). Each row shards ``Phi``
and ``y`` over the first k devices (``NamedSharding(mesh, P("rows"))``) and times the public call, which
returns statistics replicated on every device; the largest relative difference from the 1-device
statistics is printed as a check. Medians of ``--repeats`` runs after one compiling call.

Run: python benchmarks/bench_sharded.py            (n = 200,000 rows, b = 500 features, float32)
     python benchmarks/bench_sharded.py --platform cpu   (the host CPU of a GPU machine)
"""

from __future__ import annotations

import argparse
import os
import sys


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--b", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--platform", choices=["cpu", "gpu", "tpu"], help="JAX_PLATFORMS for this run")
    return ap.parse_args()


def main():
    args = parse()
    if args.platform:
        os.environ["JAX_PLATFORMS"] = {"gpu": "cuda"}.get(args.platform, args.platform)
    flag = f"--xla_force_host_platform_device_count={max(args.devices)}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()

    import jax  # after XLA_FLAGS: the host device count is fixed when jax starts
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _timing  # imports jax: after XLA_FLAGS too

    import kronvi

    devices = jax.devices()
    platform = devices[0].platform
    counts = [k for k in args.devices if k <= len(devices)]
    n, b = args.n, args.b
    print(
        f"jax {jax.__version__}, {len(devices)} {platform} device(s) "
        f"({devices[0].device_kind}), {os.cpu_count()} CPU cores, float32, n={n}, b={b}, "
        f"median of {args.repeats}"
    )
    if platform == "cpu":
        print(
            f"note: the devices are XLA host devices sharing {os.cpu_count()} cores; one device already "
            f"multithreads its matmul, so k devices cannot scale beyond {os.cpu_count()} cores"
            + (" (on this 2-core machine: not beyond 2)" if os.cpu_count() == 2 else "")
        )
    if hasattr(os, "getloadavg"):
        print(
            f"load average at start: {os.getloadavg()[0]:.1f} (other jobs share the cores: figures are noisy)"
        )
    skipped = sorted(set(args.devices) - set(counts))
    if skipped:
        print(f"note: only {len(devices)} device(s) here; skipped k = {skipped}")

    rng = np.random.default_rng(0)
    Phi = (rng.normal(size=(n, b)) / np.sqrt(b)).astype(np.float32)
    y = rng.normal(size=n).astype(np.float32)

    def median_seconds(fn):
        return _timing.median_seconds(fn, repeats=args.repeats)

    one = jax.device_put(Phi, devices[0])
    gemm = jax.jit(lambda A: A.T @ A)
    t_gemm = median_seconds(lambda one=one: gemm(one))
    del one
    print(f"\nplain jitted Phi.T @ Phi on 1 device: {t_gemm:.3f} s ({n / t_gemm:,.0f} rows/s)\n")
    print("| devices | seconds | rows per second | speed-up vs 1 | max rel. diff vs 1 device |")
    print("|---:|---:|---:|---:|---:|")
    base = reference = None
    for k in counts:
        mesh = Mesh(np.array(devices[:k]), ("rows",))
        rows = NamedSharding(mesh, P("rows"))
        Ps, ys = jax.device_put(Phi, rows), jax.device_put(y, rows)
        t = median_seconds(lambda Ps=Ps, ys=ys: kronvi.stats.regression_stats(Ps, ys))
        stats = kronvi.stats.regression_stats(Ps, ys)
        A = np.asarray(stats.PhitPhi, np.float64)
        if reference is None:
            base, reference = t, A
        diff = np.max(np.abs(A - reference)) / np.max(np.abs(reference))
        print(f"| {k} | {t:.3f} | {n / t:,.0f} | {base / t:.2f} | {diff:.1e} |")
        del Ps, ys, stats
    sys.stdout.flush()


if __name__ == "__main__":
    main()
