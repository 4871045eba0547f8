"""Speed of the core primitives against the dense operation each one is built on.

1. ELBO and ELBO+gradient (w.r.t. all logits) for b = 2000, m = 15 against one full-precision
   matrix-vector product with Phi^T Phi alone (target: ELBO+gradient within 2x of that product).
2. `regression_stats` (chunked, compensated) against the plain jitted full-precision `Phi.T @ Phi`
   (target: within 1.5x).
3. One CAVI sweep (b coordinate updates + the noise update) and the Gauss-Southwell gains, for reference.

"Full precision" is `precision=HIGHEST`, what kronvi uses by default (docs/decisions/precision.md#the-matmul-precision-policy);
on GPUs the backend default (TF32) and kronvi's opt-in fast mode are timed too. Medians of `--repeats` runs
after compilation, and their ratios, all measured in the same process.
Run: python benchmarks/bench_core.py
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import median_seconds  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=2000)
    ap.add_argument("--levels", type=int, default=15)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    b, m, n = args.b, args.levels, args.n
    rng = np.random.default_rng(0)
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), float32, b={b}, m={m}, n={n}")

    Phi = jnp.asarray(rng.normal(size=(n, b)) / np.sqrt(b), jnp.float32)
    y = jnp.asarray(rng.normal(size=n), jnp.float32)

    # --- 2. statistics vs the plain matmul
    hi = jax.lax.Precision.HIGHEST
    plain = jax.jit(lambda P: jnp.matmul(P.T, P, precision=hi))
    plain_default = jax.jit(lambda P: P.T @ P)  # the backend's default precision (TF32 on GPUs)
    plain_all = jax.jit(
        lambda P, t: (
            jnp.dot(t, t, precision=hi),
            jnp.matmul(P.T, t, precision=hi),
            jnp.matmul(P.T, P, precision=hi),
        )
    )
    t_mm = median_seconds(plain, Phi, repeats=max(3, args.repeats // 5))
    t_mm_default = median_seconds(plain_default, Phi, repeats=max(3, args.repeats // 5))
    t_mm_all = median_seconds(plain_all, Phi, y, repeats=max(3, args.repeats // 5))
    rows = []
    for chunk in (None, 1024, 8192, n):
        t = median_seconds(
            lambda P, t_, c=chunk: kronvi.stats.regression_stats(P, t_, chunk_size=c),
            Phi,
            y,
            repeats=max(3, args.repeats // 5),
        )
        rows.append((chunk, t))
    with jax.default_matmul_precision("tensorfloat32"):  # kronvi's opt-in fast mode (a no-op on CPU)
        t_fast = median_seconds(
            lambda P, t_: kronvi.stats.regression_stats(P, t_), Phi, y, repeats=max(3, args.repeats // 5)
        )
    print("\n## Sufficient statistics")
    print(
        f"plain jitted Phi.T @ Phi at full precision: {t_mm * 1e3:.1f} ms; with Phi.T @ y and y.y: "
        f"{t_mm_all * 1e3:.1f} ms; at the backend's default precision: {t_mm_default * 1e3:.1f} ms"
    )
    print("| chunk_size | seconds | ratio to full-precision Phi.T @ Phi |")
    print("|---:|---:|---:|")
    for chunk, t in rows:
        label = f"None (auto: {-(-args.n // -(-args.n // 4096))})" if chunk is None else str(chunk)
        print(f"| {label} | {t:.4f} | {t / t_mm:.2f} |")
    print(
        f"| None, fast mode (`jax.default_matmul_precision('tensorfloat32')`) | {t_fast:.4f} | "
        f"{t_fast / t_mm:.2f} (vs default-precision GEMM {t_fast / t_mm_default:.2f}) |"
    )

    # --- 1. ELBO and its gradient vs one matvec
    stats = kronvi.stats.regression_stats(Phi, y)
    pw = kronvi.model.gaussian_prior(b, 1.0, levels=m)
    pn = kronvi.model.noise_prior(0.5)
    logits = jnp.asarray(rng.normal(size=(b, m)), jnp.float32)
    ln = pn.log_probs

    def elbo(lw, ln, stats):
        return kronvi.model.regression_elbo(
            stats, kronvi.model.MeanField._unchecked(lw), kronvi.model.MeanField._unchecked(ln), pw, pn
        )

    v = jnp.asarray(rng.normal(size=b), jnp.float32)
    matvec = jax.jit(lambda A, v: jnp.matmul(A, v, precision=hi))
    f_val = jax.jit(elbo)
    f_grad = jax.jit(jax.value_and_grad(elbo, argnums=(0, 1)))
    t_mv = median_seconds(matvec, stats.PhitPhi, v, repeats=args.repeats)
    t_val = median_seconds(f_val, logits, ln, stats, repeats=args.repeats)
    t_grad = median_seconds(f_grad, logits, ln, stats, repeats=args.repeats)
    print(f"\n## ELBO (b={b}, m={m})")
    print("| operation | milliseconds | ratio to one matvec |")
    print("|---|---:|---:|")
    print(f"| Phi^T Phi @ v alone (full precision) | {t_mv * 1e3:.3f} | 1.00 |")
    print(f"| ELBO | {t_val * 1e3:.3f} | {t_val / t_mv:.2f} |")
    print(f"| ELBO + gradient | {t_grad * 1e3:.3f} | {t_grad / t_mv:.2f} |")

    # --- 3. one CAVI sweep
    sweep = jax.jit(lambda lw, ln, st: kronvi.fitting.cavi_sweep(st, lw, ln, pw, pn, jnp.arange(b)))
    t_sweep = median_seconds(sweep, logits, ln, stats, repeats=max(3, args.repeats // 3))
    gains = jax.jit(lambda lw, ln, st: kronvi.fitting.coordinate_gains(st, lw, ln, pw, pn))
    t_gain = median_seconds(gains, logits, ln, stats, repeats=args.repeats)
    print("\n## Coordinate ascent")
    print(f"one CAVI sweep over b={b} weights + noise: {t_sweep * 1e3:.2f} ms ({t_sweep / t_mv:.1f} matvecs)")
    print(f"Gauss-Southwell gains for the 'gain' order: {t_gain * 1e3:.3f} ms ({t_gain / t_mv:.2f} matvecs)")


if __name__ == "__main__":
    main()
