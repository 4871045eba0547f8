r"""Quantized, sparse inference from DIRECT posteriors (Evans & Nair 2018, section 3.1).

A sample from a discrete posterior is a vector of grid indices ("codes") $c \in \{0..m-1\}^b$, the
weights being $w_j = v_{j, c_j}$. With `m = 15` levels a code fits in 4 bits, so a sample of
`b` weights takes `ceil(b / 2)` bytes instead of `4 b` in float32; and where the posterior puts
its mass on the zero level, most codes are "zero". This module

* draws codes exactly from a variational family (`sample_codes`),
* packs them losslessly `8 // bits` per byte (`pack_codes` / `unpack_codes`),
* predicts $\Phi^* w^{(s)}$ for every stored sample, either exactly in floating point or with
  integer arithmetic (`predict_from_codes`, `integer_samples`, `predict_integer`)
  with a stated error bound (`integer_error_bound`).

Integer path. On an evenly spaced grid $v_{jk} = \beta_j + \delta_j (k - z_j)$, with
$z_j$ the level nearest zero and $\beta_j = v_{j z_j}$ (set to 0 when that level *is* zero, up
to rounding), a prediction splits into a float term computed once per point and an integer dot product:

$$
\Phi^*_i \cdot w^{(s)} = \sum_j \Phi^*_{ij}\beta_j + \sum_j A_{ij}\, d_{sj},
\qquad A_{ij} = \Phi^*_{ij}\delta_j,\quad d_{sj} = c_{sj} - z_j \in \mathbb{Z}.
$$

Each row of $A$ is quantized to int8 with an affine map (Jacob et al. 2018),
$A_{ij} \approx s_i (q_{ij} - o_i)$, and $\sum_j (q_{ij} - o_i) d_{sj}
= \sum_j q_{ij} d_{sj} - o_i \sum_j d_{sj}$ is accumulated exactly in int32. Weights whose code is the
zero level have $d_{sj} = 0$ and contribute nothing; weights at the zero level in *every* stored
sample are dropped (`prune=True`), and the rest is a dense integer GEMM: int8 operands on CPU, operands
widened to int32 on other backends, where XLA's int8 product is not exact for every shape
(`docs/decisions/precision.md#the-integer-kernel`).

References:
  Evans & Nair (2018), "Discretely Relaxing Continuous Variables for tractable Variational Inference",
  NeurIPS, section 3.1 ("Efficient inference"). Jacob et al. (2018), "Quantization and Training of Neural
  Networks for Efficient Integer-Arithmetic-Only Inference", CVPR, sections 2.1-2.3.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import (
    as_float_array,
    check_basis_features,
    check_finite,
    check_int,
    check_ndim,
    fetch,
    is_concrete,
)
from .._base.precision import matmul
from .._model.families import MeanField
from .._model.grids import DiscretePrior
from ..mixtures._family import Mixture
from ..mixtures._sampling import sample_mixture

BITS = (1, 2, 4, 8)

# A grid is "evenly spaced" when every level lies within _AFFINE_RTOL * max|v_j| of the affine fit; the
# deviation is carried into the error bound, so the tolerance only rejects grids that are not affine.
_AFFINE_RTOL = 1e-5
_INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------


@functools.singledispatch
def _sample(q, key, num_samples: int):
    """Draws `(num_samples, b)` int codes from the family `q`; register a new family with
    `_sample.register(Family)`."""
    raise TypeError(
        f"`q` must be a variational family over grid levels (MeanField or Mixture), got {type(q).__name__}"
    )


@_sample.register(MeanField)
def _sample_mean_field(q, key, num_samples: int):
    return _categorical(key, q.logits, num_samples)


@functools.partial(jax.jit, static_argnums=2)
def _categorical(key, logits, num_samples):
    # Inverse CDF, one uniform per weight and sample: code = #{k < m-1 : u >= F_k} ~ softmax(logits[j]).
    cdf = jnp.cumsum(jax.nn.softmax(logits, axis=-1), axis=-1)[..., :-1]  # (b, m - 1)
    u = jax.random.uniform(key, (num_samples, logits.shape[-2]), logits.dtype)
    return jnp.sum(u[..., None] >= cdf, axis=-1, dtype=jnp.int32)


@_sample.register(Mixture)
def _sample_mixture(q, key, num_samples: int):
    return sample_mixture(key, q, num_samples)


def sample_codes(key: jax.Array, q: MeanField | Mixture, num_samples: int) -> jax.Array:
    r"""Draws posterior samples as grid indices ("codes"), exactly from `q`.

    For a mean-field `q` every weight is drawn independently,
    $c_{sj} \sim \mathrm{Categorical}(q_j)$; for a mixture
    $q = \sum_k \alpha_k \bigotimes_j q^{(k)}_j$ a component $k \sim \alpha$ is drawn per sample,
    then $c_{sj} \sim q^{(k)}_j$. Each code is the inverse CDF of one uniform,
    $c = \#\{k < m - 1 : u \ge F_{jk}\}$, exact up to the rounding of the CDF $F_j$ in the
    working dtype. The weights of sample `s` are `prior_w.values[j, codes[s, j]]`.

    Args:
      key: A `jax.random` key.
      q: A `kronvi.model.MeanField` with logits `(b, m)` (or a `kronvi.mixtures.Mixture` with logits
          `(r, b, m)`), `m <= 256`.
      num_samples: `S >= 1`, the number of samples (a Python int).

    Returns:
      jax.Array: `(S, b)` codes, `uint8`.

    References:
      Evans & Nair (2018), section 3.1.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> q = kronvi.model.MeanField(jnp.log(jnp.array([[0.9, 0.1], [0.5, 0.5]])))
      >>> codes = kronvi.quantize.sample_codes(jax.random.key(0), q, 4000)
      >>> codes.shape, codes.dtype, [round(float(f), 1) for f in codes.mean(0)]
      ((4000, 2), dtype('uint8'), [0.1, 0.5])
    """
    num_samples = check_int(num_samples, "num_samples", 1)
    if _sample.dispatch(type(q)) is _sample.dispatch(object):
        _sample(q, key, num_samples)  # raises the TypeError naming the type
    m = q.logits.shape[-1]
    if m > 256:
        raise ValueError(f"`q` has {m} grid levels; uint8 codes need m <= 256")
    return _sample(q, key, num_samples).astype(jnp.uint8)


# ----------------------------------------------------------------------------------------------------
# Packing
# ----------------------------------------------------------------------------------------------------


def check_bits(bits) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or int(bits) not in BITS:
        raise ValueError(f"`bits` must be one of {BITS}, got {bits!r}")
    return int(bits)


def packed_width(num_weights: int, bits: int) -> int:
    """Bytes per packed sample: `ceil(num_weights * bits / 8)`."""
    return -(-int(num_weights) * int(bits) // 8)


def pack_codes(codes: ArrayLike, *, bits: int = 4) -> jax.Array:
    r"""Packs integer codes losslessly into bytes, `8 // bits` codes per byte.

    Code `j` of a row goes to byte `j // (8 // bits)` at bit offset `bits * (j % (8 // bits))`
    (little-endian within the byte: at 4 bits, the first code is the low nibble). The last byte of a row
    is padded with zero bits.

    Args:
      codes: `(..., b)` integer array with `0 <= codes < 2**bits` (e.g. `(S, b)` from
          `sample_codes`).
      bits: Bits per code, one of 1, 2, 4, 8 (4 holds the 15-level grids of `kronvi.model.gaussian_prior`).

    Returns:
      jax.Array: `(..., ceil(b * bits / 8))` `uint8`.

    Raises:
      ValueError: If a code does not fit in `bits` bits (checked when `codes` is concrete).

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> kronvi.quantize.pack_codes(jnp.array([[1, 2, 15]]), bits=4).tolist()  # 0x21, 0x0f
      [[33, 15]]
      >>> kronvi.quantize.unpack_codes(kronvi.quantize.pack_codes(jnp.array([[1, 2, 15]])), 3).tolist()
      [[1, 2, 15]]
    """
    bits = check_bits(bits)
    codes = _host_or_traced(codes)
    if not jnp.issubdtype(codes.dtype, jnp.integer):
        raise TypeError(f"`codes` must be an integer array, got dtype {codes.dtype}")
    if codes.ndim < 1 or codes.shape[-1] == 0:
        raise ValueError(
            f"`codes` must have shape (..., num_weights) with num_weights >= 1, got {codes.shape}"
        )
    if not is_concrete(codes):
        return _pack_jit(codes, bits)
    if codes.size:
        lo, hi = int(codes.min()), int(codes.max())
        if lo < 0 or hi >= 2**bits:
            raise ValueError(
                f"`codes` must lie in [0, {2**bits - 1}] to fit in {bits} bits, got range [{lo}, {hi}]"
            )
    return jnp.asarray(_pack(codes, bits, np))


def _host_or_traced(x: Any) -> jax.Array | np.ndarray:
    """Concrete inputs go to NumPy (bit twiddling there needs no compilation), copied explicitly: codes
    are small (`b / 2` bytes per sample at 4 bits); tracers stay."""
    return x if not is_concrete(x) else np.asarray(fetch(x))


def _pack(codes, bits, xp):
    per = 8 // bits
    b = codes.shape[-1]
    width = packed_width(b, bits)
    c = codes.astype(xp.uint8)
    pad = width * per - b
    if pad:
        c = xp.concatenate([c, xp.zeros(c.shape[:-1] + (pad,), xp.uint8)], axis=-1)
    c = c.reshape(c.shape[:-1] + (width, per))
    shifts = (xp.arange(per, dtype=xp.uint8) * bits).astype(xp.uint8)
    # The fields are disjoint, so their sum is their bitwise OR.
    return xp.sum(xp.left_shift(c, shifts), axis=-1, dtype=xp.uint8)


_pack_jit = jax.jit(functools.partial(_pack, xp=jnp), static_argnums=1)


def unpack_codes(packed: ArrayLike, num_weights: int, *, bits: int = 4) -> jax.Array:
    r"""Inverse of `pack_codes`.

    Args:
      packed: `(..., ceil(num_weights * bits / 8))` `uint8`.
      num_weights: `b`, the number of codes per row.
      bits: Bits per code, one of 1, 2, 4, 8 (as given to `pack_codes`).

    Returns:
      jax.Array: `(..., b)` `uint8` codes.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> kronvi.quantize.unpack_codes(jnp.array([[0b11100100]], jnp.uint8), 4, bits=2).tolist()
      [[0, 1, 2, 3]]
    """
    bits = check_bits(bits)
    num_weights = check_int(num_weights, "num_weights", 1)
    packed = _check_packed(packed)
    width = packed_width(num_weights, bits)
    if packed.shape[-1] != width:
        raise ValueError(
            f"`packed` has {packed.shape[-1]} bytes per row but {num_weights} codes of {bits} bits need "
            f"{width}"
        )
    if not is_concrete(packed):
        return _unpack_jit(packed, num_weights, bits)
    return jnp.asarray(_unpack(packed, num_weights, bits, np))


def _check_packed(packed: ArrayLike, ndim: int | None = None) -> jax.Array | np.ndarray:
    packed = _host_or_traced(packed)
    if packed.dtype != jnp.uint8:
        raise TypeError(f"`packed` must be a uint8 array (from pack_codes), got dtype {packed.dtype}")
    if ndim is not None:
        check_ndim(packed, ndim, "packed", "(num_samples, num_bytes)")
    elif packed.ndim < 1:
        raise ValueError(f"`packed` must have shape (..., num_bytes), got {packed.shape}")
    return packed


def _unpack(packed, num_weights, bits, xp):
    per = 8 // bits
    shifts = (xp.arange(per, dtype=xp.uint8) * bits).astype(xp.uint8)
    mask = xp.uint8(2**bits - 1)
    c = xp.right_shift(packed[..., None], shifts) & mask
    return c.reshape(packed.shape[:-1] + (-1,))[..., :num_weights]


_unpack_jit = jax.jit(functools.partial(_unpack, xp=jnp), static_argnums=(1, 2))


def _resolve_bits(packed, num_weights: int, num_levels: int, bits):
    """`bits` if given, else the unique width in BITS that holds `num_levels` and matches `packed`."""
    if bits is not None:
        bits = check_bits(bits)
        if 2**bits < num_levels:
            raise ValueError(f"`bits`={bits} cannot hold the {num_levels} grid levels of `prior_w`")
        return bits
    width = packed.shape[-1]
    fits = [bb for bb in BITS if 2**bb >= num_levels and packed_width(num_weights, bb) == width]
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise ValueError(
            f"`packed` has {width} bytes per sample, which matches no bit width in {BITS} for "
            f"{num_weights} weights with {num_levels} levels: wrong `prior_w` or corrupted codes?"
        )
    raise ValueError(
        f"`packed` width {width} is ambiguous for {num_weights} weights: pass `bits` (one of {fits})"
    )


def _codes_for(packed, prior_w, bits):
    """Validated `(S, b)` codes of `packed` on the grid of `prior_w`."""
    if not isinstance(prior_w, DiscretePrior):
        raise TypeError(f"`prior_w` must be a DiscretePrior, got {type(prior_w).__name__}")
    if prior_w.values.ndim != 2:
        raise ValueError(f"`prior_w` must have shape (num_weights, num_levels), got {prior_w.values.shape}")
    b, m = prior_w.values.shape
    packed = _check_packed(packed, 2)
    bits = _resolve_bits(packed, b, m, bits)
    if not is_concrete(packed):
        return unpack_codes(packed, b, bits=bits)
    codes = _unpack(packed, b, bits, np)  # NumPy: the eager path compiles nothing here
    if codes.size and int(codes.max()) >= m:
        raise ValueError(
            f"`packed` holds code {int(codes.max())} but `prior_w` has only {m} levels: "
            "codes from a different model?"
        )
    return codes


def _check_features(Phi_new, num_weights: int):
    return check_basis_features(Phi_new, num_weights, "Phi_new", f"the model has {num_weights} weights")


# ----------------------------------------------------------------------------------------------------
# Prediction: float
# ----------------------------------------------------------------------------------------------------


def predict_from_codes(
    packed: ArrayLike,
    prior_w: DiscretePrior,
    Phi_new: ArrayLike,
    *,
    integer: bool = False,
    bits: int | None = None,
) -> jax.Array:
    r"""Predictions $f_{is} = \Phi^*_i \cdot w^{(s)}$ for every stored sample.

    The float path gathers $w^{(s)}_j = v_{j, c_{sj}}$ and multiplies exactly (to floating-point
    rounding). The integer path (`integer=True`) is `predict_integer` on
    `integer_samples`: int8 features, int32 accumulation, within `integer_error_bound` of the
    float result. It requires evenly spaced grids.

    Args:
      packed: `(S, ceil(b * bits / 8))` `uint8` packed codes (`pack_codes`).
      prior_w: The `kronvi.model.DiscretePrior` `(b, m)` whose grid the codes index.
      Phi_new: `(N, b)` test features.
      integer: Use the integer path.
      bits: Bits per code; by default inferred from the width of `packed` (an error when ambiguous).

    Returns:
      jax.Array: `(N, S)` predictions (no noise, no `y` offset). Their mean over samples estimates the
          predictive mean of `kronvi.model.predict_regression` with standard error
          $\sqrt{\mathrm{Var}_q(\Phi^*_i w)/S}$.

    References:
      Evans & Nair (2018), section 3.1; Jacob et al. (2018), eq. 7.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> prior = kronvi.model.gaussian_prior(3, 1.0, levels=5, width=2.0)   # levels -2, -1, 0, 1, 2
      >>> packed = kronvi.quantize.pack_codes(jnp.array([[4, 2, 0], [2, 2, 2]]))
      >>> Phi = jnp.array([[1.0, 5.0, 0.5]])
      >>> kronvi.quantize.predict_from_codes(packed, prior, Phi).tolist()        # 1*2 + 5*0 + 0.5*(-2), 0
      [[1.0, 0.0]]
      >>> kronvi.quantize.predict_from_codes(packed, prior, Phi, integer=True).round(2).tolist()
      [[1.0, 0.0]]
    """
    if integer:
        return predict_integer(integer_samples(packed, prior_w, bits=bits), Phi_new)
    codes = _codes_for(packed, prior_w, bits)
    Phi_new = _check_features(Phi_new, prior_w.values.shape[0])
    return _predict_float(codes, prior_w.values, Phi_new)


@jax.jit
def _predict_float(codes, values, Phi_new):
    dtype = jnp.result_type(values, Phi_new)
    W = values[jnp.arange(values.shape[0])[None, :], codes.astype(jnp.int32)]  # (S, b)
    return matmul(Phi_new.astype(dtype), W.T.astype(dtype))


# ----------------------------------------------------------------------------------------------------
# Prediction: integer
# ----------------------------------------------------------------------------------------------------


class IntegerSamples(NamedTuple):
    r"""Posterior samples prepared for integer prediction on an evenly spaced grid.

    Weight `j` of sample `s` is $w_{sj} = \beta_j + \delta_j d_{sj} + r_{sj}$ with
    $|r_{sj}| \le$ `residual[j]`; weights not in `index` have $d_{sj} = 0$ in every sample.

    Attributes:
      deltas: `(S, k)` signed integer code offsets $d = c - z$ (int8, or int16 for `m > 128`) of the
          `k` kept weights.
      index: `(k,)` int32 positions of the kept weights among the `b` features.
      step: `(k,)` grid steps $\delta_j$ of the kept weights.
      base_index: `(k_0,)` int32 positions of the weights whose zero level is not zero (usually none).
      base: `(k_0,)` their zero-level values $\beta_j$.
      residual: `(b,)` largest deviation $\max_k |v_{jk} - \beta_j - \delta_j (k - z_j)|$ of each grid
          from its affine form (rounding-level for `kronvi.model.gaussian_prior`).
    """

    deltas: jax.Array
    index: jax.Array  # type: ignore[assignment]  # a field named `index` shadows tuple.index
    step: jax.Array
    base_index: jax.Array
    base: jax.Array
    residual: jax.Array


def _affine_grid(prior_w: DiscretePrior):
    r"""Affine form $v_{jk} \approx \beta_j + \delta_j (k - z_j)$ of an evenly spaced grid.

    $z_j = \arg\min_k |v_{jk}|$ is the zero level, $\delta_j = (v_{j,m-1} - v_{j0}) / (m-1)$
    and $\beta_j = v_{j z_j}$, replaced by 0 when $|v_{j z_j}| \le 10^{-5}\max_k |v_{jk}|$.

    Args:
      prior_w: A concrete `kronvi.model.DiscretePrior` `(b, m)`.

    Returns:
      tuple of numpy.ndarray: `(zero, step, base, residual)`: `(b,)` int zero levels, `(b,)` steps
          and `(b,)` bases in the dtype of the grid, `(b,)` float64 largest affine deviations.

    Raises:
      ValueError: If a grid deviates from its affine form by more than $10^{-5}\max_k |v_{jk}|$.
    """
    if not isinstance(prior_w, DiscretePrior):
        raise TypeError(f"`prior_w` must be a DiscretePrior, got {type(prior_w).__name__}")
    if not is_concrete(prior_w.values):
        raise TypeError("`prior_w` must hold concrete values (call outside jit) for the integer path")
    if prior_w.values.ndim != 2:
        raise ValueError(f"`prior_w` must have shape (num_weights, num_levels), got {prior_w.values.shape}")
    dtype = np.dtype(prior_w.values.dtype)
    v = np.asarray(fetch(prior_w.values), np.float64)
    b, m = v.shape
    k = np.arange(m)
    zero = np.argmin(np.abs(v), axis=1)
    vmax = np.max(np.abs(v), axis=1)
    step = ((v[:, -1] - v[:, 0]) / (m - 1) if m > 1 else np.zeros(b)).astype(dtype)
    base = v[np.arange(b), zero]
    base = np.where(np.abs(base) <= _AFFINE_RTOL * vmax, 0.0, base).astype(dtype)
    fit = base.astype(np.float64)[:, None] + step.astype(np.float64)[:, None] * (k[None, :] - zero[:, None])
    residual = np.max(np.abs(v - fit), axis=1)
    bad = residual > _AFFINE_RTOL * vmax
    if np.any(bad):
        j = int(np.argmax(residual / np.maximum(vmax, np.finfo(np.float64).tiny)))
        raise ValueError(
            f"`prior_w` grid of weight {j} is not evenly spaced (a level is {residual[j]:.3g} from the "
            f"affine fit, {int(bad.sum())} weight(s) affected): the integer path needs "
            "values[j, k] = offset_j + step_j * k; use integer=False"
        )
    return zero, step, base, residual


def integer_samples(
    packed: ArrayLike, prior_w: DiscretePrior, *, bits: int | None = None, prune: bool = True
) -> IntegerSamples:
    r"""Prepares packed codes for integer prediction (once per model; eager, not jittable).

    Splits each grid into its affine form (`_affine_grid`), turns codes into signed offsets from the
    zero level $d_{sj} = c_{sj} - z_j$, and with `prune=True` drops the weights whose code is the
    zero level in every sample (they contribute exactly nothing). Pruning changes speed, not results.

    Args:
      packed: `(S, ceil(b * bits / 8))` `uint8` packed codes.
      prior_w: The `kronvi.model.DiscretePrior` `(b, m)` of the codes, with evenly spaced grids.
      bits: Bits per code; inferred from `packed` by default.
      prune: Drop the weights that are zero in every sample.

    Returns:
      IntegerSamples

    Raises:
      ValueError: If a grid is not evenly spaced, or if the int32 accumulator could overflow
          ($255\,\max|d|\,k \ge 2^{31}$).

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> prior = kronvi.model.gaussian_prior(4, 1.0, levels=5, width=2.0)
      >>> isamp = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(jnp.array([[2, 3, 2, 0], [2, 1, 2, 2]])), prior)
      >>> isamp.index.tolist(), isamp.deltas.tolist()
      ([1, 3], [[1, -2], [-1, 0]])
    """
    zero, step, base, residual = _affine_grid(prior_w)
    codes = np.asarray(_codes_for(packed, prior_w, bits))
    m = prior_w.values.shape[1]
    ddtype = np.int8 if m - 1 <= 127 else np.int16
    deltas = codes.astype(np.int32) - zero[None, :].astype(np.int32)
    keep = np.any(deltas != 0, axis=0) if prune else np.ones(deltas.shape[1], bool)
    index = np.flatnonzero(keep).astype(np.int32)
    dmax = int(np.max(np.abs(deltas))) if deltas.size else 0
    if 255 * dmax * max(len(index), 1) > _INT32_MAX:
        raise ValueError(
            f"integer accumulation could overflow int32 ({len(index)} weights, code offsets up to {dmax}); "
            "use fewer weights, fewer levels or integer=False"
        )
    base_index = np.flatnonzero(base != 0).astype(np.int32)
    return IntegerSamples(
        deltas=jnp.asarray(deltas[:, index].astype(ddtype)),
        index=jnp.asarray(index),
        step=jnp.asarray(step[index]),
        base_index=jnp.asarray(base_index),
        base=jnp.asarray(base[base_index]),
        residual=jnp.asarray(np.nextafter(residual.astype(step.dtype), np.inf)),  # rounded up
    )


def _check_integer_samples(isamples):
    if not isinstance(isamples, IntegerSamples):
        raise TypeError(
            f"`isamples` must be IntegerSamples (from integer_samples), got {type(isamples).__name__}"
        )
    if not jnp.issubdtype(isamples.deltas.dtype, jnp.signedinteger) or isamples.deltas.dtype.itemsize > 2:
        raise TypeError(f"`isamples.deltas` must be int8 or int16, got {isamples.deltas.dtype}")
    if isamples.deltas.ndim != 2 or isamples.deltas.shape[1] != isamples.index.shape[0]:
        raise ValueError(
            f"`isamples.deltas` {isamples.deltas.shape} must be (num_samples, len(index)="
            f"{isamples.index.shape[0]})"
        )
    return isamples.residual.shape[0]


def predict_integer(isamples: IntegerSamples, Phi_new: ArrayLike) -> jax.Array:
    r"""Integer-arithmetic predictions $\hat f_{is} \approx \Phi^*_i \cdot w^{(s)}$.

    Row `i` of $A = \Phi^*_{:,\text{index}}\,\mathrm{diag}(\delta)$ (restricted to the weights that
    are nonzero in some sample) is quantized with the affine int8 map of Jacob et al. (2018):
    $\ell_i = \min(0, \min_j A_{ij})$, $u_i = \max(0, \max_j A_{ij})$,
    $s_i = (u_i - \ell_i)/255$, zero point $o_i = \mathrm{round}(-128 - \ell_i/s_i)$,
    $q_{ij} = \mathrm{clip}(\mathrm{round}(A_{ij}/s_i) + o_i, -128, 127)$. Then

    $$
    \hat f_{is} = \sum_j \Phi^*_{ij}\beta_j
      + s_i\Big(\sum_j q_{ij} d_{sj} - o_i \sum_j d_{sj}\Big),
    $$

    with both integer sums accumulated exactly in int32. See `integer_error_bound` for the error.

    The work is an elementwise pass over $\Phi^*$ (quantization) plus an integer GEMM over the
    `k` kept weights (int8 operands on CPU, int32 elsewhere; exact either way), done in blocks of 512
    points so that each block's int8 copy stays in cache. Pruned weights cost nothing if the caller
    computes only the kept features (`Phi_new[:, isamples.index]`, e.g. random Fourier features for
    those frequencies only); given all `b` features, their columns are gathered first. The stages are
    compiled separately: on CPU, letting XLA fuse the column gather or the quantization into the GEMM
    (e.g. by wrapping this function in `jax.jit`) gives the same result but can be several times
    slower.

    Args:
      isamples: `IntegerSamples` from `integer_samples`.
      Phi_new: `(N, b)` test features, or `(N, k)` features of the kept weights only
          (`Phi_new[:, isamples.index]`; not allowed when some grid's zero level is nonzero).

    Returns:
      jax.Array: `(N, S)` predictions in the promoted dtype of `Phi_new` and the grid.

    References:
      Jacob et al. (2018), sections 2.1-2.3 (affine quantization, int32 accumulation, zero-point terms).

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> prior = kronvi.model.gaussian_prior(3, 1.0, levels=5, width=2.0)
      >>> isamp = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(jnp.array([[4, 2, 0]])), prior)
      >>> Phi = jnp.array([[1.0, 5.0, 0.5]])
      >>> kronvi.quantize.predict_integer(isamp, Phi).round(2).tolist()
      [[1.0]]
      >>> kronvi.quantize.predict_integer(isamp, Phi[:, isamp.index]).round(2).tolist()  # kept features only
      [[1.0]]
    """
    kept, full = _kept_features(isamples, Phi_new)
    out = _predict_kept(kept, isamples.step, isamples.deltas)
    if isamples.base.shape[0]:
        if full is None:
            raise ValueError(
                "`Phi_new` must have all b features: some grids have a nonzero zero level, whose "
                "contribution needs the features of every weight"
            )
        out = out + _offset(full, isamples.base_index, isamples.base)[:, None]
    return out


def _kept_features(isamples, Phi_new):
    """`(features of the kept weights (N, k), all features (N, b) or None)`, validated."""
    b = _check_integer_samples(isamples)
    k = isamples.index.shape[0]
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    if Phi_new.shape[1] not in (b, k):
        raise ValueError(
            f"`Phi_new` has {Phi_new.shape[1]} features but the model has {b} weights ({k} kept)"
        )
    check_finite(Phi_new, "Phi_new")
    if Phi_new.shape[1] != b:
        return Phi_new, None
    return (Phi_new if k == b else _take_columns(Phi_new, isamples.index)), Phi_new


_take_columns = jax.jit(lambda Phi, index: jnp.take(Phi, index, axis=1))


@jax.jit
def _offset(Phi_new, base_index, base):
    dtype = jnp.result_type(Phi_new, base)
    return matmul(jnp.take(Phi_new.astype(dtype), base_index, axis=1), base.astype(dtype))


def _quantize_rows(Phi_kept, step, deltas):
    """Affine int8 quantization of the rows of `A = Phi_kept * step` (columns never used -> 0)."""
    dtype = jnp.result_type(Phi_kept, step)
    A = Phi_kept.astype(dtype) * step.astype(dtype)
    active = jnp.any(deltas != 0, axis=0)
    A = jnp.where(active[None, :], A, 0)
    lo = jnp.min(A, axis=1, initial=0.0)
    hi = jnp.max(A, axis=1, initial=0.0)
    scale = (hi - lo) / 255
    scale = jnp.where(scale > 0, scale, jnp.ones_like(scale))
    zp = jnp.clip(jnp.round(-128 - lo / scale), -128, 127)
    q = jnp.clip(jnp.round(A / scale[:, None]) + zp[:, None], -128, 127)
    return q.astype(jnp.int8), scale, zp.astype(jnp.int32)


# Rows per block of the integer kernel: the block's features, int8 copy and accumulator stay in cache.
_ROW_BLOCK = 512


@jax.jit
def _predict_kept(Phi_kept, step, deltas):
    N = Phi_kept.shape[0]
    if N <= _ROW_BLOCK:
        return _predict_block(Phi_kept, step, deltas)
    dtype = jnp.result_type(Phi_kept, step)

    def body(i, out):
        # Rows are independent, so the last block may overlap the one before it (no padding copy).
        start = jnp.minimum(i * _ROW_BLOCK, N - _ROW_BLOCK)
        block = lax.dynamic_slice_in_dim(Phi_kept, start, _ROW_BLOCK, 0)
        return lax.dynamic_update_slice_in_dim(out, _predict_block(block, step, deltas), start, 0)

    out = jnp.zeros((N, deltas.shape[0]), dtype)
    return lax.fori_loop(0, -(-N // _ROW_BLOCK), body, out)


def _int_products_narrow(q, deltas):
    """`q @ deltas.T` `(N, S)` int32 from int8 (or int16) operands: XLA:CPU's fast integer GEMM."""
    return lax.dot_general(
        q.astype(deltas.dtype), deltas, (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32
    )


def _int_products_int32(q, deltas):
    """`q @ deltas.T` `(N, S)` with both operands widened to int32 first. Exact on every backend: on
    CUDA, XLA's int8 x int8 -> int32 product can return wrong sums for some shapes
    (`docs/decisions/precision.md#the-integer-kernel`)."""
    return lax.dot_general(q.astype(jnp.int32), deltas.astype(jnp.int32), (((1,), (1,)), ((), ())))


def _predict_block(Phi_kept, step, deltas):
    q, scale, zp = _quantize_rows(Phi_kept, step, deltas)
    # Materialize q: fused into the GEMM as a producer, XLA:CPU recomputes the quantization per tile.
    q = lax.optimization_barrier(q)
    acc = lax.platform_dependent(q, deltas, cpu=_int_products_narrow, default=_int_products_int32)  # exact
    acc = acc - zp[:, None] * jnp.sum(deltas, axis=1, dtype=jnp.int32)[None, :]
    return scale[:, None] * acc.astype(scale.dtype)


def integer_error_bound(isamples: IntegerSamples, Phi_new: ArrayLike) -> jax.Array:
    r"""Bound on $|\hat f_{is} - \Phi^*_i \cdot w^{(s)}|$ for `predict_integer`.

    The int32 sums are exact, so the error comes from the int8 quantization of $A_{ij}$ and from
    the grid's deviation from its affine form. The zero point is the rounded real zero and the clipped
    range is $[\ell_i + s_i\epsilon_i, u_i + s_i\epsilon_i]$ with $|\epsilon_i| \le 1/2$, so
    every element satisfies $|s_i(q_{ij} - o_i) - A_{ij}| \le s_i/2$ (clipped ones included), and

    $$
    |\hat f_{is} - \Phi^*_i \cdot w^{(s)}| \le \frac{s_i}{2}\sum_j |d_{sj}|
      + \sum_j |\Phi^*_{ij}|\, \rho_j,
    $$

    with $\rho_j$ = `residual[j]`. Since $s_i \le \max_j |A_{ij}| / 127.5$, the quantization
    term is at most $\max_j |\Phi^*_{ij}\delta_j| \sum_j |d_{sj}| / 255$. The bound is in exact
    arithmetic: the float parts ($A$, $A/s_i$, the rescaling) add rounding of order
    $\varepsilon \sum_j |\Phi^*_{ij}|(|w_{sj}| + |\delta_j d_{sj}|)$, with $\varepsilon$ the
    machine epsilon of the working dtype.

    Args:
      isamples: `IntegerSamples`.
      Phi_new: `(N, b)` test features (all of them: the second term involves every weight).

    Returns:
      jax.Array: `(N, S)` error bounds.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> prior = kronvi.model.gaussian_prior(50, 1.0)
      >>> codes = jax.random.randint(jax.random.key(0), (8, 50), 0, 15)
      >>> isamp = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(codes), prior)
      >>> Phi = jax.random.normal(jax.random.key(1), (20, 50))
      >>> exact = kronvi.quantize.predict_from_codes(kronvi.quantize.pack_codes(codes), prior, Phi)
      >>> err = jnp.abs(kronvi.quantize.predict_integer(isamp, Phi) - exact)
      >>> bool(jnp.all(err <= kronvi.quantize.integer_error_bound(isamp, Phi) + 1e-4))
      True
    """
    b = _check_integer_samples(isamples)
    Phi_new = _check_features(Phi_new, b)
    kept, _ = _kept_features(isamples, Phi_new)
    return _error_bound(kept, Phi_new, isamples.step, isamples.deltas, isamples.residual)


@jax.jit
def _error_bound(Phi_kept, Phi_new, step, deltas, residual):
    _, scale, _ = _quantize_rows(Phi_kept, step, deltas)
    l1 = jnp.sum(jnp.abs(deltas.astype(jnp.int32)), axis=1).astype(scale.dtype)  # (S,)
    affine = matmul(jnp.abs(Phi_new.astype(scale.dtype)), residual.astype(scale.dtype))  # (N,)
    return 0.5 * scale[:, None] * l1[None, :] + affine[:, None]
