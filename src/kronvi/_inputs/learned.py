r"""Feature maps with trainable parameters: `feature_fn(params, X) -> Phi`, pure and differentiable.

Two examples of the one convention that `feature_elbo` and
`fit_features` accept:

- random Fourier features whose lengthscales are the parameters
  (`rff_lengthscale_map`): the spectral draws stay fixed,
  only $\log \ell$ moves;
- a multilayer perceptron written as a plain pytree of arrays
  (`mlp_init`, `mlp_features`).

The parameters are any pytree of float arrays. An Equinox or Flax model works the same way: split it
into its arrays and the rest (`params, static = eqx.partition(model, eqx.is_array)`) and pass
`feature_fn = lambda p, X: jax.vmap(eqx.combine(p, static))(X)`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._base.checks import as_float_array, check_ndim
from .._base.precision import matmul
from .features import RandomFourierFeatures, rff_features, rff_init


def rff_lengthscale_features(
    unit: RandomFourierFeatures, log_lengthscales: ArrayLike, X: ArrayLike
) -> jax.Array:
    r"""Random Fourier features with lengthscales $\ell = e^{\theta}$ as differentiable parameters.

    With unit-lengthscale draws $z_{dj} \sim N(0, 1)$ (`unit.frequencies`), the frequencies are
    $W_{dj} = z_{dj} / \ell_d$ and the features those of
    `rff_features`:
    $\phi(x) = D^{-1/2}[\cos(x^\top W), \sin(x^\top W)]$. The draws are held fixed, so the
    parameters are the $d$ log-lengthscales only (learning every frequency instead overfits: the
    sparse-spectrum GP of Lázaro-Gredilla et al., 2010).

    Args:
      unit: `RandomFourierFeatures` drawn with unit lengthscales,
        frequencies `(d, D)`.
      log_lengthscales: `(d,)` $\theta = \log \ell$.
      X: inputs `(n, d)`.

    Returns:
      Features `(n, 2 * D)`.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> unit = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(2), 4)
      >>> X = jnp.ones((3, 2))
      >>> Phi = rff_lengthscale_features(unit, jnp.log(jnp.array([0.5, 2.0])), X)
      >>> ref = kronvi.inputs.rff_features(kronvi.inputs.rff_init(jax.random.key(0), jnp.array([0.5, 2.0]), 4), X)
      >>> bool(jnp.allclose(Phi, ref))
      True
    """
    if not isinstance(unit, RandomFourierFeatures):
        raise TypeError(f"`unit` must be RandomFourierFeatures, got {type(unit).__name__}")
    theta = as_float_array(log_lengthscales, "log_lengthscales")
    check_ndim(theta, 1, "log_lengthscales", "(num_inputs,)")
    if theta.shape[0] != unit.frequencies.shape[0]:
        raise ValueError(
            f"`log_lengthscales` has {theta.shape[0]} entries but `unit` was drawn for "
            f"{unit.frequencies.shape[0]} inputs"
        )
    return rff_features(RandomFourierFeatures(unit.frequencies * jnp.exp(-theta)[:, None]), X)


def rff_lengthscale_map(
    key: jax.Array, num_inputs: int, num_frequencies: int, *, dtype: DTypeLike = jnp.float32
) -> jax.tree_util.Partial:
    r"""`feature_fn(log_lengthscales, X)`: random Fourier features whose lengthscales are the parameters.

    The draws are those of `rff_init(key, lengthscales, num_frequencies)`, so at
    `log_lengthscales = log(lengthscales)` the features equal
    `rff_features(rff_init(key, lengthscales, num_frequencies), X)` exactly (up to rounding of
    $z / \ell$ against $z\,e^{-\log\ell}$): learning starts from the very features the default
    recipe builds from the same key.

    Args:
      key: a `jax.random` key.
      num_inputs: $d$, the number of input columns.
      num_frequencies: $D$; the map has `2 * D` features.
      dtype: dtype of the draws.

    Returns:
      A `jax.tree_util.Partial` of
      `rff_lengthscale_features` with the unit
      draws bound; it is a pytree, so passing it to a jitted function traces the draws instead of
      baking them in (one compile serves every fold).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> fmap = rff_lengthscale_map(jax.random.key(0), 3, 8)
      >>> fmap(jnp.zeros(3), jnp.ones((5, 3))).shape
      (5, 16)
    """
    d = operator.index(num_inputs)
    if d < 1:
        raise ValueError(f"`num_inputs` must be >= 1, got {d}")
    unit = rff_init(key, jnp.ones(d, dtype), num_frequencies)
    return jax.tree_util.Partial(rff_lengthscale_features, unit)


def mlp_init(
    key: jax.Array, sizes: Sequence[int], *, dtype: DTypeLike = jnp.float32
) -> list[tuple[jax.Array, jax.Array]]:
    r"""Parameters of a tanh multilayer perceptron as a plain pytree: a list of `(W, c)` per layer.

    Layer $l$ maps width $s_{l}$ to $s_{l+1}$; $W$ is drawn $N(0, 1/s_l)$ (LeCun), $c$ is zero.

    Args:
      key: a `jax.random` key.
      sizes: widths `(d, h_1, ..., h_L, b)`: `d` inputs, hidden widths, `b` features (at least two
        entries).
      dtype: dtype of the parameters.

    Returns:
      `[(W_1, c_1), ..., (W_L, c_L)]` with `W_l` of shape `(s_{l-1}, s_l)` and `c_l` of shape `(s_l,)`.

    Example:
      >>> import jax
      >>> params = mlp_init(jax.random.key(0), (3, 16, 8))
      >>> [(W.shape, c.shape) for W, c in params]
      [((3, 16), (16,)), ((16, 8), (8,))]
    """
    sizes = tuple(operator.index(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"`sizes` must hold at least two positive widths, got {sizes}")
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (a, b), dtype) / jnp.sqrt(jnp.asarray(a, dtype)), jnp.zeros((b,), dtype))
        for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def mlp_features(params: Sequence[tuple[jax.Array, jax.Array]], X: ArrayLike) -> jax.Array:
    r"""Features of a tanh multilayer perceptron: $h_0 = x$, $h_l = \tanh(h_{l-1} W_l + c_l)$,
    $\phi(x) = b^{-1/2} h_L$.

    The $b^{-1/2}$ scaling makes $\phi(x)^\top\phi(x) \le 1$, as for random Fourier features, so a
    weight prior of standard deviation $\sigma_w$ gives functions of variance at most $\sigma_w^2$.

    Args:
      params: `[(W_1, c_1), ..., (W_L, c_L)]` as from `mlp_init`.
      X: inputs `(n, d)`.

    Returns:
      Features `(n, b)`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> params = mlp_init(jax.random.key(0), (2, 4, 3))
      >>> mlp_features(params, jnp.zeros((5, 2))).shape
      (5, 3)
    """
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    if not params:
        raise ValueError("`params` is empty: give at least one layer (see mlp_init)")
    h = X
    for i, layer in enumerate(params):
        W, c = layer
        if W.ndim != 2 or W.shape[0] != h.shape[1] or c.shape != (W.shape[1],):
            raise ValueError(
                f"`params[{i}]` has W {tuple(W.shape)} and c {tuple(c.shape)}, expected "
                f"({h.shape[1]}, k) and (k,)"
            )
        h = jnp.tanh(matmul(h, W) + c)
    return h / jnp.sqrt(jnp.asarray(h.shape[1], h.dtype))
