r"""Random Fourier and Nyström features for the squared-exponential and Matérn ARD kernels.

The kernel $k(x, x') = s^2 \exp\!\big(-\tfrac12 \sum_d (x_d - x'_d)^2 / \ell_d^2\big)$ is, by
Bochner's theorem, $s^2\,\mathbb{E}_{\omega}[\cos(\omega^\top (x - x'))]$ with
$\omega_d \sim N(0, \ell_d^{-2})$. With $D$ draws stacked in $W \in \mathbb{R}^{d\times D}$
the feature map

$$
\phi(x) = D^{-1/2}\,[\cos(x^\top W),\ \sin(x^\top W)] \in \mathbb{R}^{2D}
$$

gives $\phi(x)^\top\phi(x') = D^{-1}\sum_j \cos(\omega_j^\top (x - x')) \to k(x, x') / s^2$. The signal
variance $s^2$ is *not* in the features: it is the variance of the weight prior, so that
$\Phi w$ with $w \sim N(0, s^2 I)$ has covariance $\approx s^2 k_{\text{unit}}$.

A Matérn kernel of smoothness $\nu$ (`KERNELS`: 3/2, 5/2) has a multivariate Student-t spectral density
with $2\nu$ degrees of freedom: $\omega = z \sqrt{2\nu / u} / \ell$ with $z \sim N(0, I)$ and
$u \sim \chi^2_{2\nu}$, one $u$ per frequency (Rasmussen & Williams 2006, eq. 4.15).

Nyström features (`nystrom_init`, `nystrom_features`, below) approximate the same kernels from landmarks
among the training inputs instead of random frequencies.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.buckets import choice_rows, feature_block, on_row_bucket, pad_rows, to_device
from .._base.checks import as_float_array, check_finite, check_ndim, check_positive, host_arrays
from .._base.precision import matmul


class RandomFourierFeatures(NamedTuple):
    r"""A fixed random Fourier feature map; `b = 2 * D` features.

    Attributes:
      frequencies: `(d, D)` spectral draws $W_{dj} = z_{dj} / \ell_d$ with
        $z_{dj} \sim N(0, 1)$.
      offset: `None` (`rff_init`), or `(2 D,)` subtracted from every row of features: the training
        rows' mean in `kronvi.pipeline`'s eigenbasis recipe, where it plays the part of an intercept
        without a prior (`kronvi.inputs.feature_mean`).
    """

    frequencies: jax.Array
    offset: jax.Array | None = None


SAMPLINGS = ("iid", "orthogonal", "halton")
# The stationary ARD kernels of the features and the GP step: the squared exponential, Matérn 5/2 and 3/2.
KERNELS = ("rbf", "matern52", "matern32")
# The Matérn kernels' smoothness nu (their frequencies' Student-t has 2 nu degrees of freedom)
MATERN_NU = {"matern52": 2.5, "matern32": 1.5}


def rff_init(
    key: jax.Array,
    lengthscales: ArrayLike,
    num_frequencies: int,
    *,
    sampling: str = "iid",
    kernel: str = "rbf",
) -> RandomFourierFeatures:
    r"""Draws the frequencies of a random Fourier feature map for a stationary ARD kernel.

    Every sampling draws standard-normal directions $z_j$ (columns) and scales input `d` by $1/\ell_d$;
    each $z_j$ is marginally $N(0, I)$, so every map is an unbiased estimate of the kernel:

    - `"iid"` (default): independent $z_j$ (Rahimi & Recht).
    - `"orthogonal"`: blocks of `d` directions orthogonal to each other (a random rotation's rows) with
      chi-distributed lengths (Yu et al.): lower variance of the kernel estimate at the same `D`.
    - `"halton"`: a randomly shifted Halton sequence mapped through the normal quantile function
      (quasi-Monte Carlo; Avron et al.): more even coverage of the spectral density.

    Args:
      key: A `jax.random` key.
      lengthscales: `(d,)` positive, finite lengthscales $\ell_d$, one per input column.
      num_frequencies: $D$, the number of frequencies; the map has `2 * D` features.
      sampling: `"iid"`, `"orthogonal"` or `"halton"`.
      kernel: `"rbf"` (squared exponential, default), `"matern52"` or `"matern32"`: each Matérn
        frequency is the direction above times $\sqrt{2\nu / u}$, $u \sim \chi^2_{2\nu}$ drawn from
        `key` (Student-t frequencies; the directions' sampling applies to $z$ only).

    Returns:
      RandomFourierFeatures: Frequencies `(d, D)` in the dtype of `lengthscales`.

    References:
      Rahimi & Recht (2007), "Random features for large-scale kernel machines", Algorithm 1;
      Yu, Suresh, Choromanski, Holtmann-Rice & Kumar (2016), "Orthogonal random features";
      Avron, Sindhwani, Yang & Mahoney (2016), "Quasi-Monte Carlo feature maps for shift-invariant kernels".

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3), 50)
      >>> params.frequencies.shape
      (3, 50)
    """
    lengthscales = as_float_array(lengthscales, "lengthscales")
    check_ndim(lengthscales, 1, "lengthscales", "(num_inputs,)")
    if lengthscales.shape[0] == 0:
        raise ValueError("`lengthscales` is empty (shape (0,))")
    check_finite(lengthscales, "lengthscales")
    check_positive(lengthscales, "lengthscales")
    try:
        D = operator.index(num_frequencies)
    except TypeError:
        raise TypeError(
            f"`num_frequencies` must be an integer, got {type(num_frequencies).__name__}"
        ) from None
    if D < 1:
        raise ValueError(f"`num_frequencies` must be >= 1, got {D}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"`sampling` must be one of {SAMPLINGS}, got {sampling!r}")
    check_kernel(kernel)
    return rff_init_unchecked(key, lengthscales, D, sampling=sampling, kernel=kernel)


def check_kernel(kernel) -> None:
    """A `ValueError` naming `kernel` unless it is one of `KERNELS`."""
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"`kernel` must be one of {KERNELS}, got {kernel!r}")


@functools.partial(jax.jit, static_argnames=("num_frequencies", "sampling", "kernel"))
def rff_init_unchecked(
    key: jax.Array, lengthscales: jax.Array, num_frequencies: int, *, sampling: str, kernel: str = "rbf"
) -> RandomFourierFeatures:
    """`rff_init` of checked arguments (positive finite `(d,)` float `lengthscales`, an int >= 1, a known
    `sampling` and `kernel`), for the library's own callers. The squared exponential's draws are the
    directions of `key` itself (as before the Matérn kernels existed); a Matérn kernel's directions and
    scales come from two keys split from it. One program per shape and rule (a draw is a few eager
    operations otherwise)."""
    D = num_frequencies
    d, dtype = lengthscales.shape[0], lengthscales.dtype
    k_dir, k_len = (key, None) if kernel == "rbf" else tuple(jax.random.split(key))
    if sampling == "iid":
        z = jax.random.normal(k_dir, (d, D), dtype=dtype)
    elif sampling == "orthogonal":
        z = _orthogonal_directions(k_dir, d, D, dtype)
    else:
        z = _halton_directions(k_dir, d, D, dtype)
    if kernel != "rbf":
        nu = MATERN_NU[kernel]
        u = 2.0 * jax.random.gamma(k_len, nu, (D,), dtype=dtype)  # chi^2 with 2 nu dof
        z = z * jnp.sqrt(2.0 * nu / u)
    return RandomFourierFeatures(z / lengthscales[:, None])


def _orthogonal_directions(key, d, D, dtype):
    """`(d, D)`: ceil(D / d) blocks of d orthonormal directions (rows of Q from the QR factorization of a
    Gaussian matrix, signs fixed by R's diagonal: a Haar rotation) times chi_d lengths, truncated to D."""
    blocks = -(-D // d)
    k_q, k_r = jax.random.split(key)
    G = jax.random.normal(k_q, (blocks, d, d), dtype=dtype)
    Q, R = jnp.linalg.qr(G)
    Q = Q * jnp.sign(jnp.diagonal(R, axis1=-2, axis2=-1))[:, None, :]
    lengths = jnp.sqrt(jnp.sum(jax.random.normal(k_r, (blocks, d, d), dtype=dtype) ** 2, axis=-1))
    z = jnp.swapaxes(Q, -1, -2) * lengths[..., None]  # rows: directions
    return z.reshape(blocks * d, d)[:D].T


def _primes(count):
    out, k = [], 2
    while len(out) < count:
        if all(k % p for p in out if p * p <= k):
            out.append(k)
        k += 1
    return out


def _halton_directions(key, d, D, dtype):
    """`(d, D)`: the Halton points 1..D in bases of the first d primes, shifted by one uniform vector modulo 1
    (a randomized QMC rule), through the normal quantile function."""
    import numpy as np

    idx = np.arange(1, D + 1)
    points = np.zeros((d, D))
    for j, base in enumerate(_primes(d)):
        f, i, r = 1.0, idx.copy(), np.zeros(D)
        while np.any(i > 0):
            f /= base
            r += f * (i % base)
            i //= base
        points[j] = r
    u = jnp.mod(jnp.asarray(points, dtype) + jax.random.uniform(key, (d, 1), dtype=dtype), 1.0)
    eps = jnp.finfo(dtype).eps
    return jax.scipy.special.ndtri(jnp.clip(u, eps, 1.0 - eps))


def rff_features(params: RandomFourierFeatures, X: ArrayLike) -> jax.Array:
    r"""Evaluates the random Fourier features $D^{-1/2}[\cos(XW), \sin(XW)]$.

    Pure and jittable; pass `functools.partial(rff_features, params)` as the `feature_map` of
    `kronvi.stats.regression_stats_from_inputs` to build statistics chunk by
    chunk.

    Args:
      params: A `RandomFourierFeatures` with frequencies `(d, D)`.
      X: Inputs `(n, d)`.

    Returns:
      Features `(n, 2 * D)` with $\Phi\Phi^\top \approx K / s^2$, in the promoted dtype of `X`
      and the frequencies.

    References:
      Rahimi & Recht (2007), "Random features for large-scale kernel machines", Sec. 3; Sutherland &
      Schneider (2015), "On the error of random Fourier features" (the `[cos, sin]` form).

    Example:
      >>> import functools, jax, jax.numpy as jnp, kronvi
      >>> params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(2), 8)
      >>> Phi = kronvi.inputs.rff_features(params, jnp.zeros((4, 2)))
      >>> Phi.shape, round(float(Phi[0] @ Phi[0]), 6)  # phi(x).phi(x) = k(x, x) / s2 = 1
      ((4, 16), 1.0)
      >>> fmap = functools.partial(kronvi.inputs.rff_features, params)
      >>> kronvi.stats.regression_stats_from_inputs(fmap, jnp.zeros((4, 2)), jnp.ones(4)).PhitPhi.shape
      (16, 16)
    """
    if not isinstance(params, RandomFourierFeatures):
        raise TypeError(f"`params` must be RandomFourierFeatures, got {type(params).__name__}")
    W = params.frequencies
    check_ndim(W, 2, "params.frequencies", "(num_inputs, num_frequencies)")
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"`X` has {X.shape[1]} columns but `params` was drawn for {W.shape[0]} inputs")
    offset = params.offset
    if offset is not None:
        check_ndim(offset, 1, "params.offset", "(num_features,)")
        if offset.shape[0] != 2 * W.shape[1]:
            raise ValueError(
                f"`params.offset` has {offset.shape[0]} entries but `params` has {2 * W.shape[1]} features"
            )
    return rff_features_unchecked(params, X)


def rff_features_unchecked(params: RandomFourierFeatures, X: jax.Array) -> jax.Array:
    """`rff_features` of checked arguments (`X` a float `(n, d)` array matching `params`), for the
    library's own feature maps."""
    return on_row_bucket(_rff, X.shape[0], (X,), params.frequencies, params.offset)


@jax.jit
def _rff(X, W, offset):
    """`rff_features` after its checks, in one program (as separate operations, each compiled on its first
    call for a shape)."""
    dtype = jnp.result_type(X, W)
    proj = matmul(X.astype(dtype), W.astype(dtype))
    scale = jnp.asarray(1.0 / W.shape[1] ** 0.5, dtype)
    sin, cos = sincos(proj) if dtype == jnp.float64 else (jnp.sin(proj), jnp.cos(proj))
    Phi = jnp.concatenate([cos, sin], axis=-1) * scale
    return Phi if offset is None else Phi - offset.astype(dtype)


def feature_mean(
    params: RandomFourierFeatures | NystromFeatures, X: ArrayLike, *, chunk_size: int = 4096
) -> jax.Array:
    r"""The mean over the rows of `X` of `rff_features(params, X)`, `(2 D,)` (or of `nystrom_features`,
    `(M,)`), `chunk_size` rows at a time (the features of all rows are never held at once).

    `params._replace(offset=feature_mean(params, X))` centres the features on these rows: a linear
    model on them has an intercept (the targets' mean, for centred targets) that its prior does not
    shrink, as scikit-learn's `BayesianRidge` fits one.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> X = jax.random.normal(jax.random.key(0), (10, 2))
      >>> params = kronvi.inputs.rff_init(jax.random.key(1), jnp.ones(2), 4)
      >>> centred = params._replace(offset=kronvi.inputs.feature_mean(params, X))
      >>> bool(jnp.allclose(kronvi.inputs.rff_features(centred, X).mean(axis=0), 0.0, atol=1e-6))
      True
    """
    if not isinstance(params, RandomFourierFeatures | NystromFeatures):
        raise TypeError(f"`params` must be RandomFourierFeatures or NystromFeatures, got {type(params).__name__}")
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    if X.shape[0] < 1:
        raise ValueError("`X` has no rows")
    return feature_mean_unchecked(params, X, chunk_size=chunk_size)


def feature_mean_unchecked(params: RandomFourierFeatures | NystromFeatures, X: jax.Array, *, chunk_size: int) -> jax.Array:
    """`feature_mean` of checked arguments (`X` a float `(n, d)` array with rows), for the library's own
    callers."""
    n = X.shape[0]
    params = params._replace(offset=None)
    views = host_arrays(X)
    if views is None:
        return _feature_mean(params, X, jnp.ones(n, X.dtype), int(min(chunk_size, n)))
    # blocks of `feature_block(n)` rows (one up to 1,024 rows), the last padded with rows of weight 0, their
    # means averaged here: one program per block size, whatever the row count
    size = feature_block(n)

    def block_mean(start):
        part = views[0][start : start + size]
        weights = np.zeros(size, part.dtype)
        weights[: part.shape[0]] = 1
        rows, w = to_device(pad_rows(part, size)), to_device(weights)
        return _feature_mean(params, rows, w, int(min(chunk_size, size))), part.shape[0]

    if n <= size:
        return block_mean(0)[0]
    means = [block_mean(start) for start in range(0, n, size)]
    total = sum(np.asarray(mean, np.float64) * rows for mean, rows in means)
    return to_device((total / n).astype(means[0][0].dtype))


@functools.partial(jax.jit, static_argnums=3)
def _feature_mean(params, X, w, chunk):
    # Full chunks in a scan, the remainder as one more chunk, as the statistics pass
    # (kronvi._stats.regression._chunked_stats_jit); rows of weight `w` = 0 (padding) count for nothing.
    n, d = X.shape
    num_full = n // chunk
    n_full = num_full * chunk
    whiten_mean = False
    if isinstance(params, RandomFourierFeatures):
        dtype = jnp.result_type(X, params.frequencies)
        fmap = lambda x: _rff(x, params.frequencies, None)  # noqa: E731
    else:  # NystromFeatures; in float64 the mean of the kernel rows, whitened once, not every row
        dtype = jnp.result_type(X, params.whiten)
        whiten_mean = dtype == jnp.float64
        fmap = lambda x: (_landmark_kernel if whiten_mean else _nystrom)(x, params)  # noqa: E731
    total = jnp.zeros(jax.eval_shape(fmap, jax.ShapeDtypeStruct((1, d), X.dtype)).shape[1], dtype)

    def chunk_sum(x, ww):
        return matmul(ww.astype(dtype), fmap(x))

    if num_full:
        chunks = X[:n_full].reshape(num_full, chunk, d), w[:n_full].reshape(num_full, chunk)
        total, _ = lax.scan(lambda t, xw: (t + chunk_sum(*xw), None), total, chunks)
    if n_full < n:
        total = total + chunk_sum(X[n_full:], w[n_full:])
    mean = total / jnp.sum(w).astype(dtype)
    # (in float32 the whitening, of norm up to 1000, would amplify the mean's rounding: there every row is
    # whitened, as the features are)
    return matmul(params.whiten.astype(dtype), mean) if whiten_mean else mean


# pi/2 in three parts (as fdlibm's): k * _PIO2[0] is exact for |k| < 2**20, so the reduction of |x| < 1.6e6
# keeps double precision
_PIO2 = (1.5707963267341256e00, 6.0771005065061922e-11, 2.0222662487959506e-21)
_REDUCE_MAX = 1.5e6


@jax.custom_jvp
def sincos(x):
    r"""$(\sin x, \cos x)$ of a float64 array in one pass: Cody-Waite reduction by $\pi/2$, Taylor
    polynomials of degree 17 and 16 on $|r| \le \pi/4$ (truncation below $10^{-17}$), the quadrant's signs.
    One range reduction instead of XLA's two for separate `sin` and `cos`, within 1 ulp of them; arrays
    holding some `|x| > 1.5e6` take XLA's. Derivatives are exact ($\cos$, $-\sin$)."""
    return lax.cond(jnp.any(jnp.abs(x) > _REDUCE_MAX), lambda v: (jnp.sin(v), jnp.cos(v)), _sincos_small, x)


def _sincos_small(x):
    k = jnp.round(x * (2.0 / math.pi))
    r = ((x - k * _PIO2[0]) - k * _PIO2[1]) - k * _PIO2[2]
    z = r * r
    s = 0.0
    for j in range(8, 0, -1):  # sin r = r + r z sum_j (-1)^j z^(j-1) / (2j+1)!
        s = s * z + (-1.0) ** j / math.factorial(2 * j + 1)
    s = r + r * z * s
    c = 0.0
    for j in range(8, 1, -1):  # cos r = 1 - z/2 + z^2 sum_j (-1)^j z^(j-2) / (2j)!
        c = c * z + (-1.0) ** j / math.factorial(2 * j)
    c = 1.0 - 0.5 * z + z * z * c
    q = k.astype(jnp.int32) & 3
    sin = jnp.where(q == 0, s, jnp.where(q == 1, c, jnp.where(q == 2, -s, -c)))
    cos = jnp.where(q == 0, c, jnp.where(q == 1, -s, jnp.where(q == 2, -c, s)))
    return sin, cos


@sincos.defjvp
def _sincos_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    s, c = sincos(x)
    return (s, c), (c * t, -s * t)


# ----------------------------------------------------------------------------------------------------
# Nyström features
#
# Nyström features: a kernel's feature map from landmarks among the training inputs.
#
# With landmarks $Z$ (`M` points placed among the training inputs) and the unit-variance kernel $k$ of
# `KERNELS`, the features $\phi(x) = L^{-1} k(Z, x)$, $L L^\top = K_{ZZ} + \epsilon I$, give
# $\phi(x)^\top\phi(x') = k(x, Z)(K_{ZZ} + \epsilon I)^{-1}k(Z, x')$: the Nyström approximation of $k$, exact
# on the landmarks (up to $\epsilon$). A linear model on them is the subset-of-regressors GP. Unlike random
# Fourier features they are fitted to where the data lie, and they fade to zero away from every landmark, so
# predictions there return to the mean, as a stationary GP's do
# (`docs/decisions/default-recipe.md#nystrom-features`).

NYSTROM_JITTER = 1e-6  # added to the landmarks' unit-variance kernel matrix before its Cholesky factor
# `nystrom_init(placement=...)`: the rows as drawn, or moved to the means of their k-means cells
PLACEMENTS = ("rows", "kmeans")
KMEANS_ITERATIONS = 10  # Lloyd's iterations of `placement="kmeans"` (fewer where the cells stop changing)
KMEANS_MAX_ROWS = 100_000  # `placement="kmeans"` clusters a random subset of this many rows of a larger `X`
# a landmark left with no rows moves to a row farther than this (squared, in lengthscales) from its landmark
KMEANS_RESEED_DISTANCE = 1e-4


class NystromFeatures(NamedTuple):
    r"""A fixed Nyström feature map; `b = M` features (`nystrom_init`).

    Attributes:
      landmarks: `(M, d)` the landmark inputs divided by the lengthscales.
      inv_lengthscales: `(d,)` $1 / \ell$, by which inputs are scaled before the kernel.
      whiten: `(M, M)` the lower-triangular $L^{-1}$, $L L^\top = K_{ZZ} + \epsilon I$.
      offset: `None`, or `(M,)` subtracted from every row of features (`kronvi.inputs.feature_mean`).
      kernel: one of `KERNELS` (static: not an array of the pytree).
    """

    landmarks: jax.Array
    inv_lengthscales: jax.Array
    whiten: jax.Array
    offset: jax.Array | None = None
    kernel: str = "rbf"


jax.tree_util.register_pytree_node(
    NystromFeatures,
    lambda f: ((f.landmarks, f.inv_lengthscales, f.whiten, f.offset), f.kernel),
    lambda kernel, leaves: NystromFeatures(*leaves, kernel=kernel),
)


def nystrom_init(
    key: jax.Array,
    X: ArrayLike,
    lengthscales: ArrayLike,
    num_landmarks: int,
    *,
    kernel: str = "rbf",
    jitter: float = NYSTROM_JITTER,
    placement: str = "rows",
) -> NystromFeatures:
    r"""Draws `num_landmarks` distinct rows of `X` as landmarks (or places them by k-means from such a draw)
    and factors their kernel matrix.

    `num_landmarks` distinct rows are drawn by `key` (`placement="rows"`, default). With `placement="kmeans"`
    each then moves to the mean of the rows nearest to it, in the inputs divided by the lengthscales (the
    kernel's distance), by up to `KMEANS_ITERATIONS` of Lloyd's iterations on the rows (a random
    `KMEANS_MAX_ROWS` of them where there are more, drawn by `key` too); a landmark that no row is nearest to
    moves to the row farthest from its own landmark (or stays, where every row is within
    `KMEANS_RESEED_DISTANCE` of its own). The landmarks then spread over the rows as their density does,
    without the clumps and gaps of a uniform draw (Zhang, Tsang & Kwok 2008); where every row is a landmark
    they stay the rows. Not the pipeline's: over 10 folds it gains on some sets and loses on others
    (`docs/decisions/default-recipe.md#nystrom-landmarks-by-k-means-measured-not-adopted`). The factor is
    computed in float64 on the host whatever the dtype; the result is in the dtype of `lengthscales`.

    Args:
      key: `jax.random` key choosing the rows (`jax.random.choice` without replacement).
      X: `(n, d)` inputs, concrete.
      lengthscales: `(d,)` positive lengthscales of the kernel.
      num_landmarks: `M`, at most `n`.
      kernel: `"rbf"`, `"matern52"` or `"matern32"` (`KERNELS`).
      jitter: $\epsilon$, added to the diagonal of the unit-variance $K_{ZZ}$.
      placement: `"rows"` or `"kmeans"` (`PLACEMENTS`).

    Returns:
      `NystromFeatures` with `b = num_landmarks` features.

    Raises:
      ValueError: naming the argument: `X` not 2-D, empty or not finite; `lengthscales` not `(d,)` or not
        positive; `num_landmarks` not in `[1, n]`; `kernel` or `placement` unknown; `jitter` not positive.

    References:
      Williams & Seeger (2001), "Using the Nyström method to speed up kernel machines";
      Zhang, Tsang & Kwok (2008), "Improved Nyström low-rank approximation and error analysis".

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> X = jax.random.normal(jax.random.key(0), (50, 2))
      >>> params = kronvi.inputs.nystrom_init(jax.random.key(1), X, jnp.ones(2), 20)
      >>> Phi = kronvi.inputs.nystrom_features(params, X)
      >>> Phi.shape, bool(jnp.all(jnp.sum(Phi**2, axis=1) <= 1.0 + 1e-5))  # phi(x).phi(x) <= k(x, x) = 1
      ((50, 20), True)
    """
    check_kernel(kernel)
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ValueError(f"`placement` must be one of {PLACEMENTS}, got {placement!r}")
    if isinstance(X, jax.core.Tracer) or isinstance(lengthscales, jax.core.Tracer):
        raise ValueError("`X` and `lengthscales` must be concrete: the landmarks are placed on the host")
    ls = as_float_array(lengthscales, "lengthscales")
    dtype = ls.dtype
    X = np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"`X` must be 2-D (num_points, num_inputs), got shape {X.shape}")
    n, d = X.shape
    if n == 0:
        raise ValueError("`X` is empty (no rows)")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"`X` holds {int(np.sum(~np.isfinite(X)))} NaN or infinite value(s)")
    check_ndim(ls, 1, "lengthscales", "(num_inputs,)")
    if ls.shape[0] != d:
        raise ValueError(f"`lengthscales` has {ls.shape[0]} entries but `X` has {d} columns")
    check_finite(ls, "lengthscales")
    check_positive(ls, "lengthscales")
    if isinstance(num_landmarks, bool) or not isinstance(num_landmarks, int | np.integer) or not 1 <= num_landmarks <= n:
        raise ValueError(f"`num_landmarks` must be an int in [1, {n}] (the rows of `X`), got {num_landmarks!r}")
    if not (isinstance(jitter, int | float) and not isinstance(jitter, bool) and jitter > 0 and np.isfinite(jitter)):
        raise ValueError(f"`jitter` must be a finite positive number, got {jitter!r}")
    inv = 1.0 / np.asarray(ls, np.float64)
    rows = np.sort(np.asarray(choice_rows(key, n, int(num_landmarks))))
    Z = X[rows] * inv
    if placement == "kmeans" and num_landmarks < n:  # the rows clustered are scaled here only
        pool = X
        if n > KMEANS_MAX_ROWS:
            pool = X[np.sort(np.asarray(choice_rows(jax.random.fold_in(key, 1), n, KMEANS_MAX_ROWS)))]
        Z = kmeans_centres(pool * inv, Z, KMEANS_ITERATIONS)
    # the landmarks as stored (in `dtype`) are the ones factored: where they nearly repeat, the factor of their
    # unrounded values would not whiten the stored ones
    Z = Z.astype(dtype)
    return NystromFeatures(
        to_device(Z), to_device(inv.astype(dtype)),
        to_device(_whitener(Z.astype(np.float64), kernel, jitter).astype(dtype)), None, kernel,
    )  # fmt: skip


def kmeans_centres(X: np.ndarray, centres: np.ndarray, iterations: int, *, chunk: int = 2048) -> np.ndarray:
    r"""Lloyd's iterations from `centres` `(M, d)` over the rows of `X` `(n, d)`: each row joins its nearest
    centre, then each centre moves to the mean of its rows; a centre with no rows moves to one of the rows
    farthest from their centres (farther than `KMEANS_RESEED_DISTANCE`, squared), or stays. Stops early once
    no row changes centre. Returns the `(M, d)` centres in float64.

    The nearest centre of a row `x` maximizes $x^\top c - \lVert c\rVert^2/2$: one product per chunk of
    rows of the rows with a column of ones and the centres with that column appended, and its argmax. The
    iterations run in float32 on the rows less their float64 mean, so that rows far from the origin do not
    cancel the distances' digits."""
    X = np.asarray(X, np.float64)
    mean = X.mean(axis=0)
    C = np.asarray(np.asarray(centres, np.float64) - mean, np.float32)
    X = np.asarray(X - mean, np.float32)
    n, d = X.shape
    M = C.shape[0]
    Xa = np.ones((n, d + 1), np.float32)
    Xa[:, :d] = X
    x2 = np.einsum("ij,ij->i", X, X)
    labels = np.full(n, -1, np.intp)
    best = np.empty(n, np.float32)
    for _ in range(iterations):
        Ca = np.empty((d + 1, M), np.float32)
        Ca[:d] = C.T
        Ca[d] = -0.5 * np.einsum("ij,ij->i", C, C)
        changed = False
        for s in range(0, n, chunk):
            score = Xa[s : s + chunk] @ Ca
            lab = np.argmax(score, axis=1)
            changed = changed or not np.array_equal(lab, labels[s : s + chunk])
            labels[s : s + chunk] = lab
            best[s : s + chunk] = np.take_along_axis(score, lab[:, None], axis=1)[:, 0]
        if not changed:
            break
        counts = np.bincount(labels, minlength=M)
        filled = counts > 0
        sums = np.stack([np.bincount(labels, weights=X[:, j], minlength=M) for j in range(d)], axis=1)
        C[filled] = (sums[filled] / counts[filled, None]).astype(np.float32)
        empty = np.flatnonzero(~filled)
        if empty.size:
            # each row's squared distance to its centre before the move
            far = np.maximum(x2 - 2.0 * best, 0.0)
            order = np.argsort(-far, kind="stable")[: empty.size]
            order = order[far[order] > KMEANS_RESEED_DISTANCE]
            C[empty[: order.size]] = X[order]
    return C.astype(np.float64) + mean


def _whitener(Z: np.ndarray, kernel: str, jitter: float) -> np.ndarray:
    """$L^{-1}$ (float64) for the scaled landmarks `Z`: LAPACK's Cholesky factor and triangular inverse."""
    from scipy.linalg import lapack

    K = _host_kernel(Z, Z, kernel)
    K[np.diag_indices_from(K)] += jitter
    L, info = lapack.dpotrf(K, lower=1, clean=1)
    if info != 0:  # not positive definite after the jitter: duplicated landmarks beyond its reach
        raise ValueError(f"the landmarks' kernel matrix is singular (LAPACK info {info}); raise `jitter`")
    W, info = lapack.dtrtri(L, lower=1)
    return np.tril(W)


def _host_kernel(A: np.ndarray, B: np.ndarray, kernel: str) -> np.ndarray:
    d2 = np.maximum(np.sum(A * A, 1)[:, None] + np.sum(B * B, 1)[None, :] - 2.0 * A @ B.T, 0.0)
    return np.asarray(_unit_kernel(np, d2, kernel))


def _unit_kernel(xp, d2, kernel: str):
    """The unit-variance kernel at squared scaled distances `d2` in the array module `xp`
    (`kronvi._inputs.gp.unit_kernel`'s forms; no gradient is taken through the features' distances)."""
    if kernel == "rbf":
        return xp.exp(-0.5 * d2)
    r = xp.sqrt((2.0 * MATERN_NU[kernel]) * d2)
    poly = 1.0 + r + r * r / 3.0 if kernel == "matern52" else 1.0 + r
    return poly * xp.exp(-r)


def nystrom_features(params: NystromFeatures, X: ArrayLike) -> jax.Array:
    r"""Evaluates the Nyström features $L^{-1}k(Z, x)$ of `nystrom_init` (minus `params.offset`).

    Args:
      params: `NystromFeatures`.
      X: `(n, d)` inputs.

    Returns:
      `(n, M)` features with $\Phi\Phi^\top \approx K / s^2$, in the promoted dtype of `X` and `params`.
    """
    if not isinstance(params, NystromFeatures):
        raise TypeError(f"`params` must be NystromFeatures, got {type(params).__name__}")
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    if X.shape[1] != params.landmarks.shape[1]:
        raise ValueError(f"`X` has {X.shape[1]} columns but `params` was drawn for {params.landmarks.shape[1]} inputs")
    return nystrom_features_unchecked(params, X)


def nystrom_features_unchecked(params: NystromFeatures, X: jax.Array) -> jax.Array:
    """`nystrom_features` of checked arguments, for the library's own feature maps."""
    return on_row_bucket(_nystrom, X.shape[0], (X,), params)


@jax.jit
def _nystrom(X, params):
    dtype = jnp.result_type(X, params.whiten)
    Phi = matmul(_landmark_kernel(X, params), params.whiten.astype(dtype).T)
    return Phi if params.offset is None else Phi - params.offset.astype(dtype)


def nystrom_kernel_unchecked(params: NystromFeatures, X: jax.Array) -> jax.Array:
    """The unit-variance kernel rows $k(Z, x)$ of checked inputs, `(n, M)`: `nystrom_features` before the
    whitening and the offset."""
    return on_row_bucket(_landmark_kernel_jit, X.shape[0], (X,), params)


@jax.jit
def _landmark_kernel_jit(X, params):
    return _landmark_kernel(X, params)


def _landmark_kernel(X, params):
    """The unit-variance kernel between the rows of `X` and the landmarks, `(n, M)`, before the whitening."""
    dtype = jnp.result_type(X, params.whiten)
    A = X.astype(dtype) * params.inv_lengthscales.astype(dtype)
    Z = params.landmarks.astype(dtype)
    d2 = jnp.sum(A * A, 1)[:, None] + jnp.sum(Z * Z, 1)[None, :] - 2.0 * matmul(A, Z.T)
    return _unit_kernel(jnp, jnp.maximum(d2, 0.0), params.kernel)



def feature_map_unchecked(feats, X: jax.Array) -> jax.Array:
    """The features of checked inputs `X` under either map: `RandomFourierFeatures` or `NystromFeatures`."""
    if isinstance(feats, NystromFeatures):
        return nystrom_features_unchecked(feats, X)
    return rff_features_unchecked(feats, X)


def feature_dtype(feats):
    """The dtype of a feature map's arrays."""
    return (feats.whiten if isinstance(feats, NystromFeatures) else feats.frequencies).dtype


def num_features(feats) -> int:
    """`b`: the features of a map (`M` landmarks, or `2 D` for `D` frequencies)."""
    return int(feats.landmarks.shape[0] if isinstance(feats, NystromFeatures) else 2 * feats.frequencies.shape[-1])
