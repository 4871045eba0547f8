r"""The eigenbasis of $\Phi^\top\Phi$: statistics in which the likelihood factorizes.

With $\Phi^\top\Phi = V\Lambda V^\top$ and rotated weights $u = V^\top w$ (features
$\Phi V$), the statistics become $(n,\ y^\top y,\ V^\top\Phi^\top y,\ \Lambda)$. An isotropic
Gaussian prior is unchanged by the rotation, and the likelihood is a product over coordinates, so the
exact posterior is a product of independent factors and a mean-field family loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from scipy.linalg import solve_triangular

from .._base.buckets import on_row_bucket, to_device
from .._base.checks import check_basis_features, check_finite_arrays, check_xy, host_arrays
from .._base.precision import matmul
from .._base.pytree import as_traced_callable
from .._base.threads import run_single_threaded, single_blas_thread
from .distributed import is_distributed
from .regression import RegressionStats, check_stats, host_features, stats_from_inputs


class Eigenbasis(NamedTuple):
    r"""An orthonormal basis of the feature space: `vectors` `(b, b)` (columns) and `eigenvalues` `(b,)`
    of $\Phi^\top\Phi$ (ascending, clipped at 0)."""

    vectors: jax.Array
    eigenvalues: jax.Array


def eigenbasis(stats: RegressionStats) -> tuple[RegressionStats, Eigenbasis]:
    r"""Rotates the statistics to the eigenbasis of $\Phi^\top\Phi$.

    Args:
      stats: `kronvi.stats.RegressionStats` with `b` features.

    Returns:
      `(rotated, basis)`: `kronvi.stats.RegressionStats` with diagonal `PhitPhi` (the statistics of
      the features $\Phi V$), and the `Eigenbasis` (use `rotate_features` on new
      features).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (100, 3)); y = Phi @ jnp.ones(3)
      >>> rotated, basis = kronvi.stats.eigenbasis(kronvi.stats.regression_stats(Phi, y))
      >>> bool(jnp.allclose(rotated.PhitPhi, jnp.diag(basis.eigenvalues), atol=1e-3))
      True
    """
    check_stats(stats)
    # one BLAS thread: a threaded eigensolver competes with XLA's threads (kronvi._base.threads)
    return run_single_threaded(_eigenbasis, stats)


def null_space(eigenvalues):
    """Mask of the eigenvalues indistinguishable from 0 in the working precision (numpy's rank tolerance
    `max(eigenvalues) * b * eps`)."""
    b = eigenvalues.shape[-1]
    tol = jnp.max(eigenvalues, axis=-1, keepdims=True) * b * jnp.finfo(eigenvalues.dtype).eps
    return eigenvalues <= tol


@jax.jit
def _eigenbasis(stats):
    lam, V = jnp.linalg.eigh(stats.PhitPhi)
    lam = jnp.maximum(lam, 0.0)
    # Along a null direction v of Phi^T Phi, v^T Phi^T y = 0 exactly; what the rotation gives there is
    # rounding, and 1/eigenvalue would amplify it.
    c = jnp.where(null_space(lam), 0.0, matmul(V.T, stats.Phity))
    rotated = RegressionStats(stats.n, stats.yty, c, jnp.diag(lam))
    return rotated, Eigenbasis(V, lam)


def rotate_features(basis: Eigenbasis, Phi: ArrayLike) -> jax.Array:
    r"""Features in the eigenbasis, $\Phi V$, `(num_points, b)`.

    Args:
      basis: `Eigenbasis` from `eigenbasis`.
      Phi: `(num_points, b)` features.
    """
    if not isinstance(basis, Eigenbasis):
        raise TypeError(f"`basis` must be an Eigenbasis, got {type(basis).__name__}")
    Phi = check_basis_features(Phi, basis.vectors.shape[0])
    return on_row_bucket(_rotate, Phi.shape[0], (Phi,), basis.vectors)


@jax.jit
def _rotate(Phi, vectors):
    return matmul(Phi, vectors.astype(Phi.dtype))


def eigenbasis_from_inputs(
    feature_map: Callable[[jax.Array], jax.Array],
    X: ArrayLike,
    y: ArrayLike,
    *,
    chunk_size: int | None = None,
) -> tuple[RegressionStats, Eigenbasis]:
    r"""`eigenbasis` of the statistics of `feature_map(X)`, by the cheaper of two routes.

    With `n` rows and `b` features:

    - `n >= b` (primal): $\Phi^\top\Phi$ accumulated chunk by chunk
      (`regression_stats_from_inputs`), then its eigendecomposition:
      $O(nb^2 + b^3)$.
    - `n < b` (dual): the Gram matrix $\Phi\Phi^\top = U S U^\top$, `n x n`, gives the nonzero
      eigenvalues $S$ of $\Phi^\top\Phi$ and their eigenvectors $V = \Phi^\top U S^{-1/2}$, with
      $V^\top\Phi^\top y = S^{1/2} U^\top y$; the null space of $\Phi$ (eigenvalue 0,
      $V^\top\Phi^\top y = 0$) completes the basis through a QR factorization of $V$:
      $O(n^2 b + n^3 + b^2 n)$ instead of $O(b^3)$.

    Both give the same rotated statistics and the same basis up to the signs of its vectors and the
    choice of basis inside the null space (where every coordinate has eigenvalue 0).
    On a CPU the products and factorizations of concrete inputs run in the host's BLAS and LAPACK (NumPy);
    elsewhere, and inside `jit`, in XLA.

    Args:
      feature_map: a pure function `(c, d) -> (c, b)`, as for
        `regression_stats_from_inputs`.
      X: raw inputs `(n, d)`.
      y: targets `(n,)`.
      chunk_size: rows per chunk of the primal route (`None`: equal chunks of at most 4096).

    Returns:
      `(rotated, basis)` as `eigenbasis`: the statistics of $\Phi V$ (diagonal
      `PhitPhi`) and the `Eigenbasis`, eigenvalues ascending.

    Example:
      >>> import functools, jax, jax.numpy as jnp, kronvi
      >>> X = jax.random.normal(jax.random.key(0), (5, 2)); y = X[:, 0]
      >>> params = kronvi.inputs.rff_init(jax.random.key(1), jnp.ones(2), 4)  # b = 8 > n = 5: the dual
      >>> rotated, basis = kronvi.stats.eigenbasis_from_inputs(functools.partial(kronvi.inputs.rff_features, params), X, y)
      >>> int(jnp.sum(basis.eigenvalues > 1e-6))  # rank n
      5
    """
    X, y = check_xy(X, y, "X", what="(num_points, num_inputs)")
    if not is_distributed(X, y):  # sharded rows are checked through their statistics
        check_finite_arrays({"X": X, "y": y})
    return eigenbasis_for_dtype(feature_map, X, y, chunk_size=chunk_size)


def eigenbasis_for_dtype(feature_map, X, y, *, chunk_size, null_dtype=None):
    """`eigenbasis_from_inputs` of checked float arrays `X (n, d)` and `y (n,)` (finite, as the library's
    callers have them); with `null_dtype` (float32, say, for float64 inputs whose results the
    caller casts to float32), the host's dual route computes its null-space basis in that dtype (it was
    half the route's cost) and returns the basis vectors in it; the other routes ignore it."""
    fm = as_traced_callable(feature_map)
    n = X.shape[0]
    b = jax.eval_shape(fm, jax.ShapeDtypeStruct((1, *X.shape[1:]), X.dtype)).shape[-1]
    if n >= b:
        return eigenbasis(stats_from_inputs(fm, X, y, chunk_size=chunk_size))
    dtype = jnp.result_type(X, y)
    host = host_arrays(X, y)
    if host is not None:  # features padded to a bucket of row counts (`host_features`), the rest in NumPy
        Phi = host_features(fm, host[0].astype(dtype))
        yh = host[1].astype(Phi.dtype)
        c, lam, V = _dual_host(Phi, yh, null_dtype or Phi.dtype)
        dtype = np.dtype(Phi.dtype)  # cast by NumPy, then placed: no program to compile
        c, lam, V = to_device((np.asarray(c, dtype), np.asarray(lam, dtype), np.asarray(V)))
        yty = to_device(np.dot(yh, yh), dtype)
    else:
        Phi = _features(fm, X.astype(dtype))
        c, lam, V = _dual_xla(Phi, y.astype(Phi.dtype))
        yty = jnp.dot(y.astype(Phi.dtype), y.astype(Phi.dtype))
    n = to_device(n, Phi.dtype) if host is not None else jnp.asarray(n, Phi.dtype)
    return _dual_stats(n, yty, c, lam), Eigenbasis(V, lam)


@jax.jit
def _dual_stats(n, yty, c, lam):
    """The rotated statistics of the dual route, in one program."""
    return RegressionStats(n, yty, c, jnp.diag(lam))


@jax.jit
def _features(feature_map, X):
    return feature_map(X)


def _dual_host(Phi, y, null_dtype):
    n, b = Phi.shape
    G = Phi @ Phi.T
    with single_blas_thread():  # LAPACK (kronvi._base.threads); the products above and below are BLAS
        s, U = np.linalg.eigh(0.5 * (G + G.T))
    keep = s > np.max(s) * n * np.finfo(s.dtype).eps  # numerically nonzero (numpy's rank rule)
    s, U = s[keep], U[:, keep]
    Vr = Phi.T @ (U / np.sqrt(s))
    r = s.shape[0]
    V = np.empty((b, b), null_dtype)  # the null space, then the kept eigenvectors (ascending)
    V[:, : b - r] = _complement(Vr.astype(null_dtype))
    V[:, b - r :] = Vr
    lam = np.concatenate([np.zeros(b - r, s.dtype), s])
    c = np.concatenate([np.zeros(b - r, s.dtype), np.sqrt(s) * (U.T @ y)])
    return c, lam, V


def _complement(Vr):
    r"""An orthonormal basis `(b, b - r)` of the complement of the columns of `Vr` `(b, r)`: the last
    `b - r` columns of the Householder $Q$ of `Vr`, from its compact form $Q = I - YTY^\top$
    ($T^{-1}$ = the strict upper triangle of $Y^\top Y$ plus $\mathrm{diag}(1/\tau)$): two matrix
    products, where forming all of $Q$ would cost $O(b^2 r)$ in LAPACK's slower `orgqr`."""
    b, r = Vr.shape
    with single_blas_thread():
        h, tau = np.linalg.qr(Vr, mode="raw")  # reflectors below the diagonal of h.T
        if not np.all(tau != 0):  # a reflector that is the identity: no compact form by this formula
            return np.linalg.qr(Vr, mode="complete")[0][:, r:]
    Y = np.tril(h.T, -1)
    Y[np.arange(r), np.arange(r)] = 1.0
    # T Y[r:]^T by one triangular solve (cheaper than a general inverse of T^{-1})
    with single_blas_thread():
        TY = solve_triangular(np.triu(Y.T @ Y, 1) + np.diag(1.0 / tau), Y[r:].T, lower=False)
    Qc = -(Y @ TY)
    Qc[r:] += np.eye(b - r, dtype=Qc.dtype)
    return Qc


@jax.jit
def _dual_xla(Phi, y):
    n, b = Phi.shape
    G = matmul(Phi, Phi.T)
    s, U = jnp.linalg.eigh(0.5 * (G + G.T))
    keep = s > jnp.max(s) * n * jnp.finfo(s.dtype).eps
    # static shapes: null directions of G get unit-norm garbage columns that the QR replaces
    inv = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, s, 1.0)), 0.0)
    Vr = matmul(Phi.T, U * inv)  # (b, n); columns of dropped directions are 0
    order = jnp.argsort(~keep, stable=True)  # kept directions first, in ascending order
    Vr, s, keep, U = Vr[:, order], s[order], keep[order], U[:, order]
    Q, _ = jnp.linalg.qr(Vr, mode="complete")  # Q[:, :r] spans the kept columns (r = keep.sum())
    r = jnp.sum(keep)
    # basis: the complement Q[:, r:] then the kept eigenvectors (ascending), via a cyclic shift
    idx = jnp.arange(b)
    comp = jnp.take(Q, (idx + r) % b, axis=1)  # Q[:, r:], then Q[:, :r] at the end
    is_comp = idx < b - r
    kept_pos = jnp.clip(idx - (b - r), 0, n - 1)
    V = jnp.where(is_comp[None, :], comp, jnp.take(Vr, kept_pos, axis=1))
    lam = jnp.where(is_comp, 0.0, jnp.take(jnp.where(keep, s, 0.0), kept_pos))
    c = jnp.where(is_comp, 0.0, jnp.take(jnp.sqrt(jnp.where(keep, s, 0.0)) * matmul(U.T, y), kept_pos))
    return c, lam, V
