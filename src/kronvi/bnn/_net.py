r"""The quadratic-activation network and its weight layout.

`layer_sizes = (d, h_1, ..., h_L, 1)`. Layer $l$ (`l = 0..L`) has a weight matrix
$W^{(l)}$ of shape `(layer_sizes[l+1], layer_sizes[l])`; the flat weight vector `w` holds
$W^{(0)}, W^{(1)}, \dots, W^{(L)}$ one after the other, each row-major (`W.reshape(-1)`). With
$z^{(0)} = x$:

$$ z^{(l+1)} = \big(W^{(l)} z^{(l)}\big)^{\odot 2} \quad (l < L), \qquad f(x) = W^{(L)} z^{(L)}. $$

There are no biases: a constant input column gives them (and a hidden unit fed by it alone gives the
later layers a constant). Every unit is a polynomial in `x` of degree $2^l$ at layer $l$,
so $f$ is linear in the tensor power $x^{\otimes 2^L}$, which is what makes the exact ELBO
depend on the data only through a few moment tensors (`kronvi.bnn._stats`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax
from jax.typing import ArrayLike

from .._base.checks import as_float_array, check_ndim
from .._base.precision import matmul


def check_layer_sizes(layer_sizes, name: str = "layer_sizes") -> tuple[int, ...]:
    """`layer_sizes` as a tuple of Python ints: at least two, each >= 1, the last equal to 1.

    Raises:
      ValueError: naming `layer_sizes` otherwise.
    """
    try:
        sizes = tuple(layer_sizes)
    except TypeError:
        raise ValueError(
            f"`{name}` must be a sequence of ints (d, h_1, ..., h_L, 1), got {layer_sizes!r}"
        ) from None
    if len(sizes) < 2:
        raise ValueError(f"`{name}` needs at least an input and an output size (d, ..., 1), got {sizes}")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or int(s) < 1:
            raise ValueError(f"`{name}` must hold ints >= 1, got {sizes}")
    sizes = tuple(int(s) for s in sizes)
    if sizes[-1] != 1:
        raise ValueError(f"`{name}` must end with 1 (one output), got {sizes}")
    return sizes


def num_weights(layer_sizes: Sequence[int]) -> int:
    """Number of weights `P` of the network: $\\sum_l$ `layer_sizes[l] * layer_sizes[l+1]`."""
    sizes = check_layer_sizes(layer_sizes)
    return sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))


def weight_offsets(layer_sizes) -> list[tuple[int, int, int]]:
    """`(offset, rows, cols)` of every layer's matrix inside the flat weight vector."""
    sizes = check_layer_sizes(layer_sizes)
    out, offset = [], 0
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        out.append((offset, b, a))
        offset += a * b
    return out


def split_weights(w, layer_sizes):
    """The layer matrices of a flat weight array `(..., P)`: a list of `(..., rows, cols)` arrays."""
    return [w[..., o : o + r * c].reshape(w.shape[:-1] + (r, c)) for o, r, c in weight_offsets(layer_sizes)]


def quadratic_net(w: ArrayLike, X: ArrayLike, layer_sizes: Sequence[int]) -> jax.Array:
    r"""The quadratic-activation network $f(x; w)$ at every row of `X`.

    Hidden layers square their pre-activation, the output layer is linear, there are no biases (append
    a constant column to `X` for them). The weights are flat, layer by layer, each layer's matrix
    `(layer_sizes[l+1], layer_sizes[l])` row-major:

    $$ f(x) = W^{(L)} \big(W^{(L-1)} \cdots (W^{(0)} x)^{\odot 2} \cdots\big)^{\odot 2}. $$

    Args:
      w: weights `(P,)` with `P = sum(layer_sizes[l] * layer_sizes[l+1])`.
      X: inputs `(n, d)`, `d = layer_sizes[0]`.
      layer_sizes: `(d, h_1, ..., h_L, 1)`, Python ints >= 1.

    Returns:
      `(n,)` network outputs.

    Raises:
      ValueError: bad `layer_sizes`, or `w` / `X` whose shapes do not match them.

    Example:
      >>> import jax.numpy as jnp
      >>> from kronvi.bnn import quadratic_net
      >>> # one hidden unit: f(x) = 3 * (1*x0 + 2*x1)^2
      >>> quadratic_net(jnp.array([1.0, 2.0, 3.0]), jnp.array([[1.0, 1.0]]), (2, 1, 1)).tolist()
      [27.0]
    """
    sizes = check_layer_sizes(layer_sizes)
    w = as_float_array(w, "w")
    X = as_float_array(X, "X")
    P = num_weights(sizes)
    if w.shape != (P,):
        raise ValueError(f"`w` must have shape ({P},) for layer_sizes {sizes}, got {tuple(w.shape)}")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    if X.shape[1] != sizes[0]:
        raise ValueError(f"`X` has {X.shape[1]} columns but layer_sizes[0] is {sizes[0]}")
    z = X
    mats = split_weights(w, sizes)
    for W in mats[:-1]:
        z = matmul(z, W.T) ** 2
    return matmul(z, mats[-1].T)[:, 0]
