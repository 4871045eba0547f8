r"""Matrix-product precision: full float32 accuracy on every backend unless the caller asks otherwise.

XLA's default float32 matmul on GPUs and TPUs rounds its inputs (TF32 tensor cores: a 10-bit mantissa,
relative error about $10^{-3}$ per product), which breaks the accuracy the statistics, the ELBO and
the predictions promise. So every matrix product in kronvi goes through `matmul`, `dot` or
`einsum`, which pass `precision=lax.Precision.HIGHEST` (true float32 products; float64 is always
exact) -- unless the caller has set JAX's own default: the context manager
`jax.default_matmul_precision("tensorfloat32")`, `jax.config.update("jax_default_matmul_precision",
...)` or the `JAX_DEFAULT_MATMUL_PRECISION` environment variable. Then kronvi passes no precision and
the caller's choice applies. That is the opt-in fast mode; kronvi keeps no state of its own. The setting is
read when a function is traced, and `jax.jit` keys its caches on it, so compiled kronvi functions never
mix the two modes.

Example:
  >>> import jax
  >>> from kronvi._base.precision import matmul_precision
  >>> matmul_precision()
  Precision.HIGHEST
  >>> with jax.default_matmul_precision("tensorfloat32"):  # e.g. kronvi.stats.regression_stats(Phi, y) in TF32
  ...     print(matmul_precision())
  None

On CPUs float32 products are exact at every setting, so the policy costs nothing there. Why:
`docs/decisions/precision.md#the-matmul-precision-policy`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def matmul_precision():
    """`lax.Precision.HIGHEST`, or `None` (JAX's configured default) when the caller has set
    `jax_default_matmul_precision`; read at trace time."""
    return lax.Precision.HIGHEST if jax.config.jax_default_matmul_precision is None else None


def matmul(a, b):
    """`a @ b` (`jnp.matmul`) at `matmul_precision`."""
    return jnp.matmul(a, b, precision=matmul_precision())


def dot(a, b):
    """`jnp.dot(a, b)` at `matmul_precision`."""
    return jnp.dot(a, b, precision=matmul_precision())


def einsum(subscripts: str, *operands):
    """`jnp.einsum(subscripts, *operands)` at `matmul_precision`."""
    return jnp.einsum(subscripts, *operands, precision=matmul_precision())
