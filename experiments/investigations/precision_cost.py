"""What kronvi's precision policy costs and buys: `regression_stats` and the ELBO gradient at full
precision (the default) and in the opt-in TF32 mode, against plain GEMMs at both precisions.

Accuracy is the max relative error of PhitPhi against float64 (max|G - G64| / max|G64|); times are medians
of `--repeats` calls after compilation, in one process. On CPU every precision computes the same products.

Run: python experiments/investigations/precision_cost.py [--n 20000 --b 2000]
Output (GPU): experiments/investigations/results/precision_cost_gpu.txt
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi


def median_seconds(fn, *args, repeats):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--b", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    Phi64 = rng.normal(size=(args.n, args.b)) / np.sqrt(args.b)
    y64 = rng.normal(size=args.n)
    G64 = Phi64.T @ Phi64
    Phi, y = jnp.asarray(Phi64, jnp.float32), jnp.asarray(y64, jnp.float32)
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), float32, n={args.n}, b={args.b}\n")

    def rel(G):
        return float(np.abs(np.asarray(G, np.float64) - G64).max() / np.abs(G64).max())

    gemm = {
        "HIGHEST": jax.jit(lambda P: jnp.matmul(P.T, P, precision=jax.lax.Precision.HIGHEST)),
        "backend default": jax.jit(lambda P: P.T @ P),
    }
    stats = lambda P, t: kronvi.regression_stats(P, t)  # noqa: E731
    print("| operation | precision | ms | max rel. error of PhitPhi |")
    print("|---|---|---:|---:|")
    t_ref = None
    for name, f in gemm.items():
        t = median_seconds(f, Phi, repeats=args.repeats)
        t_ref = t_ref or t
        print(f"| plain jitted Phi.T @ Phi | {name} | {t * 1e3:.2f} | {rel(f(Phi)):.2e} |")
    for mode in ("default (HIGHEST)", "fast: default_matmul_precision('tensorfloat32')"):
        if mode.startswith("fast"):
            with jax.default_matmul_precision("tensorfloat32"):
                t = median_seconds(stats, Phi, y, repeats=args.repeats)
                G = stats(Phi, y).PhitPhi
        else:
            t = median_seconds(stats, Phi, y, repeats=args.repeats)
            G = stats(Phi, y).PhitPhi
        print(f"| kronvi.regression_stats | {mode} | {t * 1e3:.2f} | {rel(G):.2e} |")
    print(f"\n(ratios against the HIGHEST GEMM: divide by {t_ref * 1e3:.2f} ms)")

    # ELBO + gradient against one full-precision matvec
    s = kronvi.regression_stats(Phi, y)
    pw, pn = kronvi.gaussian_prior(args.b, 1.0), kronvi.noise_prior(0.5)
    logits = jnp.asarray(rng.normal(size=(args.b, 15)), jnp.float32)
    qn = kronvi.MeanField.from_prior(pn)

    def elbo(lw, st):
        return kronvi.regression_elbo(st, kronvi.MeanField(lw), qn, pw, pn)

    grad = jax.jit(jax.value_and_grad(elbo))
    v = jnp.asarray(rng.normal(size=args.b), jnp.float32)
    matvec = jax.jit(lambda A, x: jnp.matmul(A, x, precision=jax.lax.Precision.HIGHEST))
    t_mv = median_seconds(matvec, s.PhitPhi, v, repeats=3 * args.repeats)
    t_g = median_seconds(grad, logits, s, repeats=3 * args.repeats)
    with jax.default_matmul_precision("tensorfloat32"):
        t_gf = median_seconds(grad, logits, s, repeats=3 * args.repeats)
    print(
        f"\nELBO + gradient: {t_g * 1e3:.3f} ms = {t_g / t_mv:.2f} full-precision matvecs ({t_mv * 1e3:.3f} ms);"
    )
    print(f"in fast mode {t_gf * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
