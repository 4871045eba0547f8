r"""The GP likelihood of rows held on the host, for programs whose shapes do not depend on the rows.

XLA compiles a program per input shape. A GP fit whose likelihood is computed inside its L-BFGS program
compiles that program (the largest of a default fit) for every row count, and padding to a few row buckets
still leaves a new bucket, a new compilation. Here the rows stay in host memory under an integer handle
(`HostRows`, registered for the duration of a fit), and the compiled L-BFGS program sees only the handle and
the $d + 2$ log-parameters: its likelihood and leave-one-out error are host callbacks that compute in
float64 with NumPy and LAPACK (`host_lml`). One program per input width then serves every row count
(`docs/decisions/gp-step.md#the-gp-programs-see-no-rows`).
"""

from __future__ import annotations

import functools
import itertools
import math
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._base.buckets import to_device
from .._solvers.linalg import mirror_lower
from .features import MATERN_NU

_ROWS: dict[int, tuple[np.ndarray, np.ndarray, str]] = {}  # the rows of the fits in progress, by handle
_ROWS_LOCK = threading.Lock()
_HANDLES = itertools.count(1)


class HostRows:
    """A context manager that holds float64 rows `(X, y)` and the name of their kernel (`KERNELS`) on the
    host under an integer `handle` while a program uses them (`with HostRows(X, y) as rows: ...
    rows.handle ...`); the rows are dropped on exit."""

    def __init__(self, X, y, kernel: str = "rbf"):
        self.X = np.ascontiguousarray(X, np.float64)
        self.y = np.ascontiguousarray(y, np.float64)
        self.kernel = kernel
        self.handle = next(_HANDLES)

    def __enter__(self):
        with _ROWS_LOCK:
            _ROWS[self.handle] = (self.X, self.y, self.kernel)
        return self

    def __exit__(self, *exc):
        with _ROWS_LOCK:
            _ROWS.pop(self.handle, None)
        return False


def _rows(handle) -> tuple[np.ndarray, np.ndarray, str]:
    with _ROWS_LOCK:
        return _ROWS[int(handle)]


def _factor(theta, X, kernel="rbf"):
    r"""`(A, Kf, Kg, L)` at the log-parameters `theta`: the centred inputs over the lengthscales, the kernel
    without the noise, $-2\,\partial K_f / \partial d^2$ ($d^2$ the squared scaled distance; `Kf` itself
    for the squared exponential) and the lower Cholesky factor of the kernel with the noise (`None` when it
    fails)."""
    from scipy.linalg import lapack

    n, d = X.shape
    p = np.exp(theta)
    ell, s2, noise = p[:d], p[d], p[d + 1]
    A = (X - X.mean(axis=0)) / ell  # centred: the kernel is the same, the expansion below cancels less
    half_sq = 0.5 * np.einsum("ij,ij->i", A, A)
    Kf = A @ A.T  # -d2 / 2 = a_i.a_j - |a_i|^2 / 2 - |a_j|^2 / 2, in place
    Kf -= half_sq[:, None]
    Kf -= half_sq[None, :]
    np.minimum(Kf, 0.0, out=Kf)
    if kernel == "rbf":
        np.exp(Kf, out=Kf)
        Kf *= s2
        Kg = Kf
    else:  # Matern: r = sqrt(2 nu d2); 5/2: (1 + r + r^2/3) e^-r, 3/2: (1 + r) e^-r
        r = np.sqrt(-4.0 * MATERN_NU[kernel] * Kf, out=Kf)  # Kf holds -d2 / 2
        e = np.exp(-r)
        if kernel == "matern52":
            Kg = (5.0 / 3.0 * s2) * (1.0 + r) * e
            Kf = s2 * (1.0 + r + r * r / 3.0) * e
        else:
            Kg = (3.0 * s2) * e
            Kf = s2 * (1.0 + r) * e
    C = np.array(Kf, order="F")  # Fortran order: LAPACK factors it in place
    C.flat[:: n + 1] += noise
    L, info = lapack.dpotrf(C, lower=1, clean=0, overwrite_a=1)  # reads and writes the lower triangle
    return A, Kf, Kg, (L if info == 0 else None)


def _inverse(L):
    """$K^{-1}$ (both triangles) from the lower Cholesky factor `L` of $K$ (LAPACK's `potri`), in `L`'s
    memory."""
    from scipy.linalg import lapack

    R, _ = lapack.dpotri(L, lower=1, overwrite_c=1)  # K^{-1} in the lower triangle
    return mirror_lower(R).T  # symmetric: the row-major view of the same values, like the kernel's arrays


def host_lml(theta, X, y, with_grad, w=None, kernel="rbf"):
    r"""`(value, gradient)` of the log marginal likelihood in $\theta = (\log\ell_1, \dots, \log\ell_d,
    \log s^2, \log\sigma^2)$, computed in float64 with NumPy and LAPACK whatever the dtype of `X`, and
    returned in that dtype (the gradient is NaN when `with_grad` is false or the factorization fails).
    With row weights `w`, of the rows of weight 1 only (the rest is padding). `kernel`: one of `KERNELS`.

    With $W = \tfrac12(\alpha\alpha^\top - K^{-1})$, $K_f$ the kernel without the noise and $K_g =
    -2\,\partial K_f/\partial d^2$ ($d^2_{ij} = |a_i - a_j|^2$, $a = x / \ell$; $K_g = K_f$ for the squared
    exponential, $3 s^2 e^{-r}$ for Matérn 3/2, $\tfrac53 s^2 (1 + r) e^{-r}$ for Matérn 5/2):
    $\partial/\partial\log s^2 = \sum_{ij} (W \circ K_f)_{ij}$, $\partial/\partial\log\sigma^2 = \sigma^2
    \operatorname{tr} W$ and, with $G = W \circ K_g$, $\partial/\partial\log\ell_k = \sum_{ij} G_{ij}(a_{ik} -
    a_{jk})^2 = 2\sum_i a_{ik}^2 (G1)_i - 2\sum_i a_{ik}(Ga)_{ik}$ ($G$ is symmetric): one product of
    $G$ with the $n \times d$ inputs instead of $d$ matrices of squared differences.
    """
    from scipy.linalg import lapack

    dtype = np.asarray(X).dtype
    if w is not None:
        keep = np.asarray(w) > 0
        X, y = np.asarray(X)[keep], np.asarray(y)[keep]
    theta, X, y = (np.asarray(a, np.float64) for a in (theta, X, y))
    n, d = X.shape
    grad = np.full(d + 2, np.nan)
    A, Kf, Kg, L = _factor(theta, X, kernel)
    if L is None:
        return np.asarray(np.nan, dtype), grad.astype(dtype)
    alpha, _ = lapack.dpotrs(L, y, lower=1)
    value = -0.5 * (y @ alpha) - np.sum(np.log(np.diagonal(L))) - 0.5 * n * math.log(2 * math.pi)
    if with_grad and np.isfinite(value):
        W = _inverse(L)
        np.subtract(np.outer(alpha, alpha), W, out=W)
        W *= 0.5
        trace = np.trace(W)
        signal = None if Kg is Kf else np.einsum("ij,ij->", W, Kf)
        W *= Kg  # G
        r = W.sum(axis=1)
        grad[:d] = 2.0 * ((A * A).T @ r) - 2.0 * np.einsum("ij,ij->j", A, W @ A)
        grad[d], grad[d + 1] = (r.sum() if signal is None else signal), np.exp(theta[d + 1]) * trace
    return np.asarray(value, dtype), grad.astype(dtype)


def host_loo_mse(theta, X, y, kernel="rbf"):
    r"""Leave-one-out mean squared error of the GP posterior mean at `theta`, $\operatorname{mean}_i
    (\alpha_i / [K_y^{-1}]_{ii})^2$ (Rasmussen & Williams 2006, eq. 5.12), in float64 (NaN when the
    factorization fails)."""
    from scipy.linalg import lapack

    theta, X, y = (np.asarray(a, np.float64) for a in (theta, X, y))
    *_, L = _factor(theta, X, kernel)
    if L is None:
        return np.float64(np.nan)
    alpha, _ = lapack.dpotrs(L, y, lower=1)
    K_inv, _ = lapack.dpotri(L, lower=1, overwrite_c=1)  # the diagonal is all it needs: no mirroring
    return np.float64(np.mean((alpha / np.diagonal(K_inv)) ** 2))


# A callback runs on one of XLA's threads, where `jax.enable_x64` (thread-local) may be off: JAX would hand it
# float64 operands rounded to float32 and refuse its float64 results. Float64 crosses as pairs of uint32.
def _bits(a):
    """Float64 `a` (traced) as `uint32` pairs (a trailing axis of 2)."""
    return lax.bitcast_convert_type(a, jnp.uint32)


def _unbits(b):
    """`_bits`'s inverse (traced)."""
    return lax.bitcast_convert_type(b, jnp.float64)


def _host_float64(b) -> np.ndarray:
    """`_bits` of a float64 array, read on the host."""
    return np.array(b, np.uint32, order="C").view(np.float64)[..., 0]


def _host_bits(a) -> np.ndarray:
    """A float64 array as `_bits` would give it, on the host."""
    return np.array(a, np.float64, order="C")[..., None].view(np.uint32)  # (np.ascontiguousarray: >= 1-d)


def _by_handle(theta_bits, handle, *, with_grad):
    X, y, kernel = _rows(handle)
    value, grad = host_lml(_host_float64(theta_bits), X, y, with_grad, kernel=kernel)
    return _host_bits(value), _host_bits(grad)


def _call(theta, handle, with_grad):
    theta = theta.astype(jnp.float64)
    bits = _bits(theta)
    out = jax.ShapeDtypeStruct((2,), jnp.uint32), jax.ShapeDtypeStruct(bits.shape, jnp.uint32)
    host = functools.partial(_by_handle, with_grad=with_grad)
    value, grad = jax.pure_callback(host, out, bits, handle, vmap_method="sequential")
    return _unbits(value), _unbits(grad)


@jax.custom_vjp
def handle_lml(theta, handle):
    """The log marginal likelihood at the float64 log-parameters `theta` (traced, under `jax.enable_x64`) of
    the rows registered under `handle` (`HostRows`; `host_lml`); differentiable in `theta`."""
    return _call(theta, handle, with_grad=False)[0]


def _handle_lml_fwd(theta, handle):
    value, grad = _call(theta, handle, with_grad=True)
    return value, grad


def _handle_lml_bwd(grad, g):
    return g * grad, None


handle_lml.defvjp(_handle_lml_fwd, _handle_lml_bwd)


def handle_loo_mse(theta, handle):
    """`host_loo_mse` of the rows registered under `handle` (float64 `theta`, traced)."""

    def host(theta_bits, handle):
        X, y, kernel = _rows(handle)
        return _host_bits(host_loo_mse(_host_float64(theta_bits), X, y, kernel))

    out = jax.ShapeDtypeStruct((2,), jnp.uint32)
    return _unbits(
        jax.pure_callback(host, out, _bits(theta.astype(jnp.float64)), handle, vmap_method="sequential")
    )


def host_scales(X, y, min_noise, lengthscale_bounds, signal_bounds, noise_upper):
    """`(lo, hi, var_y, ls_lo, ls_hi, active)`: the box of the packed log-parameters and the reference scales
    of the degeneracy test, from float64 rows `(X, y)` (NumPy: nothing to compile per row count)."""
    var_y = np.var(y)
    mean_x, std = X.mean(axis=0), X.std(axis=0)
    active = std > 100 * np.finfo(np.float64).eps * np.maximum(np.abs(mean_x), 1.0)
    ref = np.median(std[active]) if np.any(active) else 1.0
    ls_lo, ls_hi = lengthscale_bounds[0] * ref, lengthscale_bounds[1] * ref
    d = X.shape[1]
    lo = np.r_[np.full(d, np.log(ls_lo)), np.log(signal_bounds[0] * var_y), np.log(min_noise)]
    hi = np.r_[
        np.full(d, np.log(ls_hi)),
        np.log(signal_bounds[1] * var_y),
        np.log(max(noise_upper * var_y, 10 * min_noise)),
    ]
    return tuple(to_device(a) for a in (lo, hi, var_y, ls_lo, ls_hi, active))
