r"""Dense linear algebra shared by the exact Gaussian solvers."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def jittered_cholesky(M, max_tries: int = 8):
    r"""Lower Cholesky factor of a symmetric matrix that should be positive definite, never NaN by default.

    Where the working precision cannot factor `M` (e.g. a float32 ridge system with a tiny ridge), adds
    $10^{k-7}\,\overline{\mathrm{diag}(M)}\,I$ for the smallest $k \ge 0$ that works
    ($k <$ `max_tries`): a slightly stronger ridge instead of a silent NaN. Traceable (a
    `lax.while_loop`); why: `docs/decisions/fitting.md#mixtures`.

    Args:
      M: `(b, b)` symmetric matrix.
      max_tries: jitter levels to try after the plain factorization.

    Returns:
      `(b, b)` lower-triangular `L` with `L @ L.T` equal to `M` plus the jitter used (NaN only if
      every try failed).

    Example:
      >>> import jax.numpy as jnp
      >>> from kronvi._solvers.linalg import jittered_cholesky
      >>> jittered_cholesky(jnp.array([[4.0, 2.0], [2.0, 2.0]])).tolist()
      [[2.0, 0.0], [1.0, 1.0]]
    """
    scale = jnp.mean(jnp.diagonal(M))
    eye = jnp.eye(M.shape[-1], dtype=M.dtype)

    def cond(st):
        k, L = st
        return (k < max_tries) & ~jnp.all(jnp.isfinite(L))

    def body(st):
        k, _ = st
        jitter = scale * 10.0 ** (k.astype(M.dtype) - 7.0)
        return k + 1, jnp.linalg.cholesky(M + jitter * eye)

    _, L = lax.while_loop(cond, body, (jnp.asarray(0), jnp.linalg.cholesky(M)))
    return L
