r"""Dense linear algebra shared by the exact Gaussian solvers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def jittered_cholesky(M, max_tries: int = 8):
    r"""Lower Cholesky factor of a symmetric matrix that should be positive definite, never NaN by default.

    Where the working precision cannot factor `M` (e.g. a float32 ridge system with a tiny ridge), adds
    $10^{k-7}\,\overline{\mathrm{diag}(M)}\,I$ for the smallest $k \ge 0$ that works
    ($k <$ `max_tries`): a slightly stronger ridge instead of a silent NaN. Traceable (a
    `lax.while_loop`) and differentiable in forward and reverse mode (the jitter's dependence on the mean
    diagonal included); one matrix (`vmap` over a batch); why: `docs/decisions/fitting.md#mixtures`.

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
    return _factor_and_jitter(M, max_tries)[0]


def _factor_and_jitter(M, max_tries):
    """`(L, c)`: `jittered_cholesky`'s factor and the jitter's multiple of the mean diagonal (0: none)."""
    if M.ndim != 2:
        raise ValueError(f"`M` must be one (b, b) matrix (vmap over a batch), got shape {M.shape}")
    scale = jnp.mean(jnp.diagonal(M))
    eye = jnp.eye(M.shape[-1], dtype=M.dtype)

    def cond(st):
        k, L = st
        return (k < max_tries) & ~jnp.all(jnp.isfinite(L))

    def body(st):
        k, _ = st
        jitter = scale * 10.0 ** (k.astype(M.dtype) - 7.0)
        return k + 1, jnp.linalg.cholesky(M + jitter * eye)

    k, L = lax.while_loop(cond, body, (jnp.asarray(0), jnp.linalg.cholesky(M)))
    return L, jnp.where(k > 0, 10.0 ** (k.astype(M.dtype) - 8.0), 0.0)


@jittered_cholesky.defjvp
def _jittered_cholesky_jvp(max_tries, primals, tangents):
    r"""$\dot L = L\,\Phi(L^{-1}\dot A L^{-\top})$ with $A = M + c\,\overline{\mathrm{diag}(M)}\,I$ the matrix
    factored ($c$ the jitter's multiple, 0 without one): $\dot A$ the symmetric part of $\dot M$ plus
    $c\,\overline{\mathrm{diag}(\dot M)}\,I$, $\Phi$ the lower triangle with half its diagonal (the Cholesky
    factor's derivative). Linear in $\dot M$: reverse mode transposes it (a `while_loop` has none)."""
    (M,), (dM,) = primals, tangents
    L, c = _factor_and_jitter(M, max_tries)
    dA = 0.5 * (dM + dM.T) + c * jnp.mean(jnp.diagonal(dM)) * jnp.eye(M.shape[-1], dtype=M.dtype)
    X = jax.scipy.linalg.solve_triangular(L, dA, lower=True)  # L^-1 dA
    X = jax.scipy.linalg.solve_triangular(L, X.T, lower=True).T
    phi = jnp.tril(X) - 0.5 * jnp.diag(jnp.diagonal(X))
    return L, L @ phi


def mirror_lower(R: np.ndarray, block: int = 64) -> np.ndarray:
    """The NumPy square matrix `R` made symmetric from its lower triangle, in place: its strict upper
    triangle is overwritten by the strict lower one's transpose (pass `R.T` to mirror the upper
    triangle). Returns `R`.

    The copies go by square blocks of `block` rows, not as `np.tril(R) + np.tril(R, -1).T` (three passes
    over memory; `docs/decisions/gp-step.md#the-host-likelihoods-inverse`); the values are copied, so the
    result equals that expression to the bit (but for the sign of a zero: the sum turned -0.0 into 0.0).

    Example:
      >>> import numpy as np
      >>> from kronvi._solvers.linalg import mirror_lower
      >>> mirror_lower(np.array([[1.0, 9.0], [2.0, 3.0]])).tolist()
      [[1.0, 2.0], [2.0, 3.0]]
    """
    if np.ndim(R) != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"`R` must be a square matrix, got shape {np.shape(R)}")
    if not (isinstance(block, int) and block >= 1):
        raise ValueError(f"`block` must be a positive integer, got {block!r}")
    n = R.shape[0]
    for j in range(0, n, block):
        k = min(j + block, n)
        R[j:k, k:] = R[k:, j:k].T  # right of the diagonal block, from the block column below it
        diag = R[j:k, j:k]
        upper = np.triu_indices(k - j, 1)
        diag[upper] = diag.T[upper]
    return R
