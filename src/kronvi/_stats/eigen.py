r"""The eigenbasis of $\Phi^\top\Phi$: statistics in which the likelihood factorizes.

With $\Phi^\top\Phi = V\Lambda V^\top$ and rotated weights $u = V^\top w$ (features
$\Phi V$), the statistics become $(n,\ y^\top y,\ V^\top\Phi^\top y,\ \Lambda)$. An isotropic
Gaussian prior is unchanged by the rotation, and the likelihood is a product over coordinates, so the
exact posterior is a product of independent factors and a mean-field family loses nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base.checks import as_float_array, check_finite, check_ndim
from .._base.precision import matmul
from .regression import RegressionStats, check_stats


class Eigenbasis(NamedTuple):
    r"""An orthonormal basis of the feature space: `vectors` `(b, b)` (columns) and `eigenvalues` `(b,)`
    of $\Phi^\top\Phi$ (ascending, clipped at 0)."""

    vectors: jax.Array
    eigenvalues: jax.Array


def eigenbasis(stats):
    r"""Rotates the statistics to the eigenbasis of $\Phi^\top\Phi$.

    Args:
      stats: [`kronvi.RegressionStats`][kronvi.RegressionStats] with `b` features.

    Returns:
      `(rotated, basis)`: [`kronvi.RegressionStats`][kronvi.RegressionStats] with diagonal `PhitPhi` (the statistics of
      the features $\Phi V$), and the [`Eigenbasis`][kronvi.Eigenbasis] (use [`rotate_features`][kronvi.rotate_features] on new
      features).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (100, 3)); y = Phi @ jnp.ones(3)
      >>> rotated, basis = kronvi.eigenbasis(kronvi.regression_stats(Phi, y))
      >>> bool(jnp.allclose(rotated.PhitPhi, jnp.diag(basis.eigenvalues), atol=1e-3))
      True
    """
    check_stats(stats)
    return _eigenbasis(stats)


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


def rotate_features(basis, Phi):
    r"""Features in the eigenbasis, $\Phi V$, `(num_points, b)`.

    Args:
      basis: [`Eigenbasis`][kronvi.Eigenbasis] from [`eigenbasis`][kronvi.eigenbasis].
      Phi: `(num_points, b)` features.
    """
    if not isinstance(basis, Eigenbasis):
        raise TypeError(f"`basis` must be an Eigenbasis, got {type(basis).__name__}")
    Phi = as_float_array(Phi, "Phi")
    check_ndim(Phi, 2, "Phi", "(num_points, num_features)")
    b = basis.vectors.shape[0]
    if Phi.shape[1] != b:
        raise ValueError(f"`Phi` has {Phi.shape[1]} features but the basis has {b}")
    check_finite(Phi, "Phi")
    return matmul(Phi, basis.vectors.astype(Phi.dtype))
