"""Integer prediction kernel: int8 operands (XLA:CPU's integer GEMM) against operands widened to int32.

On an H100 (jax 0.11.2) XLA's int8 x int8 -> int32 dot returned wrong sums for some shapes (N=20, k=50,
S=8: max error 5222) while the int32 product was exact, so ``kronvi.predict_integer`` keeps int8 operands
on CPU only (``lax.platform_dependent``). This script measures what the int32 kernel would cost on CPU and
checks that the two agree there. Medians of 15 interleaved calls of the blocked kernel (512 rows per
block, as in ``kronvi.quantize``), N = 4096 points.

Run: python experiments/investigations/integer_kernel_check.py
Output: experiments/investigations/results/integer_kernel_check.txt
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

ROWS = 512
DIMS = (((1,), (1,)), ((), ()))


def quantize_rows(Phi, step):
    A = Phi * step
    lo, hi = jnp.min(A, axis=1, initial=0.0), jnp.max(A, axis=1, initial=0.0)
    scale = jnp.where(hi > lo, (hi - lo) / 255, 1.0)
    zp = jnp.clip(jnp.round(-128 - lo / scale), -128, 127)
    q = jnp.clip(jnp.round(A / scale[:, None]) + zp[:, None], -128, 127)
    return q.astype(jnp.int8), scale, zp.astype(jnp.int32)


def kernel(widen):
    def block(Phi, step, deltas):
        q, scale, zp = quantize_rows(Phi, step)
        q = lax.optimization_barrier(q)
        if widen:
            acc = lax.dot_general(q.astype(jnp.int32), deltas.astype(jnp.int32), DIMS)
        else:
            acc = lax.dot_general(q, deltas, DIMS, preferred_element_type=jnp.int32)
        acc = acc - zp[:, None] * jnp.sum(deltas, axis=1, dtype=jnp.int32)[None, :]
        return scale[:, None] * acc.astype(scale.dtype)

    @jax.jit
    def predict(Phi, step, deltas):
        N = Phi.shape[0]

        def body(i, out):
            start = jnp.minimum(i * ROWS, N - ROWS)
            b = lax.dynamic_slice_in_dim(Phi, start, ROWS, 0)
            return lax.dynamic_update_slice_in_dim(out, block(b, step, deltas), start, 0)

        return lax.fori_loop(0, -(-N // ROWS), body, jnp.zeros((N, deltas.shape[0]), Phi.dtype))

    return predict


def main():
    float_gemm = jax.jit(lambda P, W: jnp.matmul(P, W.T, precision=lax.Precision.HIGHEST))
    variants = {"int8 operands": kernel(False), "int32 operands": kernel(True)}
    rng = np.random.default_rng(0)
    N = 4096
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), {os.cpu_count()} cores, N={N}")
    print("milliseconds, medians of 15 interleaved calls\n")
    print(
        "| k kept weights | S samples | float32 Phi @ W.T | int8 operands | int32 operands | int32 / int8 |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for k in (200, 2000):
        for S in (10, 100, 1000):
            Phi = jnp.asarray(rng.normal(size=(N, k)), jnp.float32)
            step = jnp.asarray(rng.uniform(0.1, 1, k), jnp.float32)
            deltas = jnp.asarray(rng.integers(-7, 8, (S, k)), jnp.int8)
            W = deltas.astype(jnp.float32) * step
            fns = {"float": (float_gemm, (Phi, W))}
            fns.update({name: (f, (Phi, step, deltas)) for name, f in variants.items()})
            outs = {name: np.asarray(f(*a)) for name, (f, a) in fns.items()}
            assert np.array_equal(outs["int8 operands"], outs["int32 operands"])
            times = {name: [] for name in fns}
            for _ in range(15):
                for name, (f, a) in fns.items():
                    t0 = time.perf_counter()
                    jax.block_until_ready(f(*a))
                    times[name].append(time.perf_counter() - t0)
            ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            print(
                f"| {k} | {S} | {ms['float']:.2f} | {ms['int8 operands']:.2f} | {ms['int32 operands']:.2f} | "
                f"{ms['int32 operands'] / ms['int8 operands']:.2f} |",
                flush=True,
            )
    print("\nint8 and int32 kernels gave identical predictions on every shape above.")


if __name__ == "__main__":
    main()
