"""The statistics pass and the eigen step of the default recipe: which way to compute them, per backend.

1. Phi^T Phi for n = 36,000 rows of b = 2,000 random Fourier features (kin40k's size), four ways: XLA's
   float64 dot (the compiled path), the host BLAS in float64 (`F.T @ F` from NumPy: what kronvi does for
   concrete CPU inputs), float32 chunks summed in float64, and float32 GEMMs on a split of the float64
   features (Phi = hi + lo, Phi^T Phi ~ hi^T hi + hi^T lo + lo^T hi). The split removes the rounding of
   the features but not that of the GEMM's float32 sums; a truly error-free scheme (Ozaki's) needs slices
   of about 6 bits for 4096-row sums and some 45 slice products. Time, rate as 2 n b^2 flops
   against the float32 GEMM rate measured here, and accuracy against float64: the relative error of the
   matrix and, on yacht's first fold, the evidence-optimal noise variance the eigenbasis recipe computes from
   it (float32 statistics gave 0.022 where float64 gives 0.0022, `docs/decisions/default-recipe.md#the-eigenbasis`).
2. The eigendecomposition of a 2,000 x 2,000 matrix with one BLAS thread and with the library's default.
3. The eigenbasis of n x 2,000 features for n < b: the dual (`kronvi.stats.eigenbasis_from_inputs`) against the
   primal (`kronvi.stats.eigenbasis` of the statistics).
4. The float64 features themselves: `rff_features` (one sincos pass) against XLA's `cos` and `sin`.

Medians of --repeats runs after a warm-up, in one process. Run: python benchmarks/bench_stats.py
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import kronvi  # noqa: E402
from kronvi import pipeline  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, median_seconds  # noqa: E402


def features(n, b, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    params = kronvi.inputs.rff_init(jax.random.key(seed), jnp.full((d,), 1.5), b // 2)
    return X, rng.normal(size=n), params


def split_product(F, chunk=4096):
    """Phi^T Phi from float32 GEMMs on hi = f32(Phi) and lo = f32(Phi - hi), each chunk summed in float64."""
    A = np.zeros((F.shape[1],) * 2)
    for s in range(0, F.shape[0], chunk):
        f = F[s : s + chunk]
        hi = f.astype(np.float32)
        lo = (f - hi).astype(np.float32)
        A += hi.T @ hi
        cross = hi.T @ lo
        A += cross + cross.T
    return A


def f32_chunks(F, chunk=4096):
    A = np.zeros((F.shape[1],) * 2)
    for s in range(0, F.shape[0], chunk):
        f = F[s : s + chunk].astype(np.float32)
        A += f.T @ f
    return A


def evidence_noise(PhitPhi, Phity, yty, n, sw, s2):
    """The eigenbasis recipe's evidence-optimal noise from these statistics (float64 eigenbasis)."""
    stats = kronvi.stats.RegressionStats(
        jnp.asarray(float(n)), jnp.asarray(yty), jnp.asarray(Phity), jnp.asarray(PhitPhi)
    )
    rotated, basis = kronvi.stats.eigenbasis(stats)
    return float(
        kronvi.gaussian.spectral_evidence_optimum(
            basis.eigenvalues, rotated.Phity, rotated.yty, rotated.n, sw, s2
        )[1]
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=36_000)
    ap.add_argument("--b", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    n, b, r = args.n, args.b, args.repeats
    print(f"{machine()}; {load_average()}")

    # -- 1. statistics
    X, y, params = features(n, b)
    fmap = functools.partial(kronvi.inputs.rff_features, params)
    F = np.asarray(fmap(jnp.asarray(X)))
    ref = F.T @ F
    flops = 2 * n * b * b
    rng = np.random.default_rng(1)
    A32, B32 = (rng.normal(size=(4096, b)).astype(np.float32) for _ in range(2))
    gemm_host = 2 * 4096 * b * b / median_seconds(lambda: A32.T @ B32, repeats=r) / 1e9
    xla32 = jax.jit(lambda a, c: jnp.matmul(a.T, c, precision="highest"))
    a32, b32 = jnp.asarray(A32), jnp.asarray(B32)
    gemm_xla = 2 * 4096 * b * b / median_seconds(lambda: xla32(a32, b32), repeats=r) / 1e9
    gemm = max(gemm_host, gemm_xla)
    print(
        f"\nfloat32 GEMM rate ({4096} x {b} blocks): host BLAS {gemm_host:.0f} GFLOP/s, XLA {gemm_xla:.0f} GFLOP/s\n"
    )
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    xla = jax.jit(
        lambda X, y: kronvi.stats.regression_stats_from_inputs(fmap, X, y).PhitPhi
    )  # traced: XLA's dot
    options = {
        "XLA float64 dot (features and products compiled)": (lambda: xla(Xj, yj), None),
        "host BLAS float64, F.T @ F (kronvi on a CPU; features included)": (
            lambda: kronvi.stats.regression_stats_from_inputs(fmap, Xj, yj).PhitPhi, None),
        "float32 chunks, float64 sums (products only)": (lambda: f32_chunks(F), None),
        "float32 split hi + lo, 3 GEMMs (products only)": (lambda: split_product(F), None),
    }  # fmt: skip
    # yacht fold 0 in each precision: the evidence-optimal noise from these statistics
    Xy, yy, mask = kronvi.load_demo()
    train = ~np.asarray(mask)[:, 0].astype(bool)
    fold = pipeline.prepare_fold(
        jax.random.key(0), Xy[train], yy[train], pipeline.DirectConfig(recipe=pipeline.Features(noise_cv=()))
    )
    feats64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), fold.features)
    Fy = np.asarray(kronvi.inputs.rff_features(feats64, jnp.asarray(fold.X, jnp.float64)))
    ty = np.asarray(fold.y, np.float64)
    sw, s2 = float(np.sqrt(fold.hyper.signal_variance)), float(fold.hyper.noise_variance)
    yacht = {
        "XLA float64 dot (features and products compiled)": Fy.T @ Fy,
        "host BLAS float64, F.T @ F (kronvi on a CPU; features included)": Fy.T @ Fy,
        "float32 chunks, float64 sums (products only)": f32_chunks(Fy),
        "float32 split hi + lo, 3 GEMMs (products only)": split_product(Fy),
    }
    yacht_ref = evidence_noise(Fy.T @ Fy, Fy.T @ ty, ty @ ty, len(ty), sw, s2)
    print(
        f"| Phi^T Phi, n = {n}, b = {b} | seconds | rate (2nb^2) | of the float32 GEMM rate | max rel. error | yacht evidence noise |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, (fn, _) in options.items():
        t = median_seconds(fn, repeats=r)
        err = np.abs(np.asarray(fn()) - ref).max() / np.abs(ref).max()
        noise = evidence_noise(yacht[name], Fy.T @ ty, ty @ ty, len(ty), sw, s2)
        print(
            f"| {name} | {t:.2f} | {flops / t / 1e9:.0f} | {flops / t / 1e9 / gemm:.0%} | {err:.1e} | {noise:.5f} |"
        )
    print(f"\nyacht fold 0, float64 statistics: evidence-optimal noise {yacht_ref:.5f}")

    # -- 2. eigh threads
    from kronvi._base.threads import single_blas_thread

    A = ref / n
    t_default = median_seconds(lambda: np.linalg.eigh(A), repeats=r)
    with single_blas_thread():
        t_one = median_seconds(lambda: np.linalg.eigh(A), repeats=r)
    print(
        f"\neigh of a {b} x {b} float64 matrix: one BLAS thread {t_one:.2f} s, the library's default {t_default:.2f} s"
    )

    # -- 3. dual against primal
    print(
        f"\n| eigenbasis of n x {b} features | dual (Gram matrix) s | primal (eigh of Phi^T Phi) s |\n|---:|---:|---:|"
    )
    for m in (278, 927, 1500):
        Xm, ym = jnp.asarray(X[:m]), jnp.asarray(y[:m])
        t_dual = median_seconds(kronvi.stats.eigenbasis_from_inputs, fmap, Xm, ym, repeats=r)
        t_primal = median_seconds(
            lambda X_, y_: kronvi.stats.eigenbasis(kronvi.stats.regression_stats_from_inputs(fmap, X_, y_)),
            Xm,
            ym,
            repeats=r,
        )
        print(f"| {m} | {t_dual:.3f} | {t_primal:.3f} |")

    # -- 4. features
    both = jax.jit(lambda P: jnp.concatenate([jnp.cos(P), jnp.sin(P)], -1))
    P = jnp.asarray(X) @ params.frequencies
    t_xla = median_seconds(lambda: both(P), repeats=r)
    t_ours = median_seconds(lambda: jax.jit(kronvi.inputs.rff_features)(params, Xj), repeats=r)
    print(f"\nfloat64 features of {n} rows: rff_features (sincos, with the projection) {t_ours:.2f} s, "
          f"XLA cos and sin of the projections {t_xla:.2f} s")  # fmt: skip
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
