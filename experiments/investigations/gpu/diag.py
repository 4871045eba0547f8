"""GPU diagnostics for issue 14: integer dot products and float32 matmul precision per backend.

Prints, for the default backend, the max error of several ways of computing an exact int8 x int8 -> int32
dot product, and of float32 Phi^T Phi at each matmul precision, against numpy references.
Run: python experiments/investigations/gpu/diag.py
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)
print("jax", jax.__version__, jax.devices())
rng = np.random.default_rng(0)
for N, k, S in [(20, 50, 8), (512, 2000, 64), (37, 300, 5)]:
    q = rng.integers(-128, 128, (N, k)).astype(np.int8)
    d = rng.integers(-7, 8, (S, k)).astype(np.int8)
    ref = q.astype(np.int64) @ d.astype(np.int64).T
    variants = {
        "int8 dot_general pref int32": lambda a, b: lax.dot_general(
            a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32),
        "int32 dot_general": lambda a, b: lax.dot_general(
            a.astype(jnp.int32), b.astype(jnp.int32), (((1,), (1,)), ((), ()))),
        "int8->int32 matmul": lambda a, b: a.astype(jnp.int32) @ b.astype(jnp.int32).T,
        "float32 highest": lambda a, b: jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32).T,
                                                   precision="highest"),
        "float64": lambda a, b: a.astype(jnp.float64) @ b.astype(jnp.float64).T,
    }
    for name, fn in variants.items():
        out = np.asarray(jax.jit(fn)(jnp.asarray(q), jnp.asarray(d)))
        print(f"N={N} k={k} S={S} {name:32s} max|err| = {np.abs(out.astype(np.int64) - ref).max()}")

# Pieces of the affine quantization.
A = rng.normal(size=(64, 300)).astype(np.float32)
lo = jnp.min(jnp.asarray(A), axis=1, initial=0.0)
print("min initial ok:", np.allclose(np.asarray(lo), np.minimum(A.min(1), 0)))
x = jnp.asarray(rng.normal(size=(200, 300)).astype(np.float32) * 3)
print("round/clip int8 roundtrip max err:",
      float(jnp.max(jnp.abs(jnp.clip(jnp.round(x * 40), -128, 127).astype(jnp.int8).astype(jnp.float32)
                            - np.clip(np.round(np.asarray(x) * 40), -128, 127)))))

Phi = rng.normal(size=(20000, 2000)).astype(np.float32)
G64 = Phi.astype(np.float64).T @ Phi.astype(np.float64)
P = jnp.asarray(Phi)
for prec in ["default", "high", "highest"]:
    G = np.asarray(jax.jit(lambda a, p=prec: jnp.matmul(a.T, a, precision=p))(P))
    print(f"Phi^T Phi float32 precision={prec:8s} max rel err {np.abs(G - G64).max() / np.abs(G64).max():.2e}")
with jax.default_matmul_precision("highest"):
    G = np.asarray(jax.jit(lambda a: a.T @ a)(P))
print(f"under jax.default_matmul_precision('highest'): {np.abs(G - G64).max() / np.abs(G64).max():.2e}")
print("config value now:", jax.config.jax_default_matmul_precision)
