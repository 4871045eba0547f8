r"""Exact predictive probabilities of DIRECT logistic regression from the characteristic function.

Under a mean-field q, $Z = \Phi^* w$ is a sum of independent discrete variables with the exact
characteristic function $\varphi_Z(t) = \prod_j \sum_k q_{jk} e^{i t \Phi^*_j v_{jk}}$ ($O(bm)$
per $t$). With $L$ a standard logistic variable independent of $Z$,
$E[\sigma(Z)] = P(L < Z) = P(Z - L > 0)$, and the Gil-Pelaez inversion with
$\varphi_L(t) = \pi t / \sinh(\pi t)$ gives

$$ E_q[\sigma(Z)] = \tfrac12 + \int_0^\infty \frac{\operatorname{Im}\varphi_Z(t)}{\sinh(\pi t)}\, dt, $$

an integrand that is finite at 0 and decays like $e^{-\pi t}$. It is computed with the midpoint
rule $t_k = (k + \tfrac12) h$, $k < N$. Two rigorous error terms (derivation in
`docs/decisions/classifier.md#exact-prediction`): aliasing, at most
$E[\cosh Z]\, e^{-2\pi/h} / (1 - e^{-2\pi/h})$ with $E\cosh Z$ exact from the MGF, and
truncation, at most $\tfrac{2}{\pi} e^{-\pi N h} / (1 - e^{-\pi N h})$. The step $h$ is chosen
per point to balance the two.

The nodes a point needs grow with its margin ($N \propto \log E\cosh Z \approx \max|Z|$), so
beyond $|Z| \approx 10^3$ the 4096 nodes of the cap no longer meet the bound. Such points are
recomputed without quadrature, exactly, as the sum over all $m^b$ configurations, when there are at most
$2^{14}$ of them: at any margin, including the large-margin limit (the $q$-mass of the sign of $Z$).
With more configurations the capped quadrature is returned with its bound and a warning; its step then
resolves $Z$ relative to its range, so it approaches the $q$-mass of the sign as the margins grow
(`docs/decisions/classifier.md#exact-prediction`), but its bound cannot show it.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.checks import check_int, fetch, is_concrete, reduce_on_device
from .._model.families import MeanField, check_family
from .._model.grids import DiscretePrior
from ._bound import check_design, log_mgf

# At most this many configurations m**b are summed per point by the exact fallback; quadrature nodes cap.
_ENUMERATION_LIMIT = 1 << 14
MAX_NODES = 4096
_NODE_BLOCK = 8  # nodes per iteration of `predict_rows`' loop
_ROW_BLOCK = 64  # rows of `predict_rows`' one program


def target_error(dtype) -> float:
    """The error the default nodes aim at: 1e-7 (float32), 1e-13 (float64)."""
    return 1e-13 if jnp.dtype(dtype) == jnp.float64 else 1e-7


def default_num_nodes(dtype) -> int:
    """Quadrature nodes inside a trace: 32 in float32, 64 in float64 (errors below 1e-8 and 1e-11 for
    $\\log E\\cosh Z \\lesssim 10$)."""
    return 64 if jnp.dtype(dtype) == jnp.float64 else 32


@jax.jit
def _max_log_cosh(log_q, values, Phi):
    one = jnp.ones((Phi.shape[0], 1), Phi.dtype)
    L = lax.map(
        lambda P: log_mgf(log_q, values, P[None], jnp.concatenate([one[:1], -one[:1]], axis=1))[0],
        Phi,
    )
    return jnp.max(jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0))


def nodes_for(max_log_cosh: float, dtype, cap: int = MAX_NODES, *, half_steps: bool = False) -> int:
    r"""Nodes for a total error below 1e-7 (float32) or 1e-13 (float64) at every point: with the balanced
    step the error is about $e^{-E}$ once $N \ge E (E + a) / (2\pi^2)$,
    $a = \log(2 E\cosh Z)$; rounded up to a power of 2 in `[16, cap]` (with `half_steps`, to a power of 2
    or three quarters of one: 24, 48, 96, ...)."""
    E = (13.0 if jnp.dtype(dtype) == jnp.float64 else 7.0) * math.log(10.0) + 2.0
    a = min(max(float(max_log_cosh), 0.0), 1e300) + math.log(2.0)
    need = E * (E + a) / (2.0 * math.pi**2)
    nodes = 2 ** math.ceil(math.log2(max(need, 1.0)))
    if half_steps and nodes >= 32 and 3 * nodes // 4 >= need:
        nodes = 3 * nodes // 4
    return int(min(cap, max(16, nodes)))


def _step_and_error(log_cosh, num_nodes):
    """Per-point step `h` balancing aliasing and truncation, and the resulting error bound (at most 1,
    the most two probabilities can differ by)."""
    a = jnp.maximum(log_cosh, 0.0) + math.log(2.0)  # log(2 E cosh Z) >= log 2
    N = num_nodes
    # the positive root of pi N h^2 + a h - 2 pi, without the cancellation of (-a + sqrt(...)) for large a
    root = math.sqrt(8.0 * math.pi**2 * N) if isinstance(N, int) else jnp.sqrt(8.0 * math.pi**2 * N)
    h = 4.0 * math.pi / (a + jnp.hypot(a, root))
    alias = jnp.exp(log_cosh - 2.0 * math.pi / h) / -jnp.expm1(-2.0 * math.pi / h)
    trunc = (2.0 / math.pi) * jnp.exp(-math.pi * N * h) / -jnp.expm1(-math.pi * N * h)
    return h, jnp.minimum(alias + trunc, 1.0)


def _chunk_probs(log_q, q, values, Phi, num_nodes, even=False):
    r, b = Phi.shape
    one = jnp.ones((r, 1), Phi.dtype)
    L = log_mgf(log_q, values, Phi, jnp.concatenate([one, -one], axis=1))  # log E e^{±Z}
    log_cosh = jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0)
    h, err = _step_and_error(log_cosh, num_nodes)
    t = (jnp.arange(num_nodes, dtype=Phi.dtype) + 0.5)[None, :] * h[:, None]  # (r, N)
    if even:
        log_abs, arg = _even_grid_log_cf(q, values, Phi, t)
    else:
        theta = t[:, :, None, None] * (Phi[:, None, :, None] * values[None, None])  # (r, N, b, m)
        re = jnp.sum(q * jnp.cos(theta), axis=-1)
        im = jnp.sum(q * jnp.sin(theta), axis=-1)
        log_abs = jnp.sum(0.5 * jnp.log(re * re + im * im), axis=-1)  # (r, N)
        arg = jnp.sum(jnp.arctan2(im, re), axis=-1)
    integrand = jnp.exp(log_abs) * jnp.sin(arg) / jnp.sinh(math.pi * t)
    p = 0.5 + h * jnp.sum(integrand, axis=-1)
    return jnp.clip(p, 0.0, 1.0), err


def _even_grid_log_cf(q, values, Phi, t):
    r"""`(log|phi_Z(t)|, arg phi_Z(t))`, `(r, N)` each, when every grid is even up to rounding,
    $v_{jk} = v_{j0} + k\delta_j + \epsilon_{jk}$ ($\epsilon$ the rounding of the levels):
    $\sum_k q_{jk} e^{i t x_j v_{jk}} = e^{i t x_j v_{j0}}\big(\sum_k q_{jk}\omega^k
    + i t x_j \sum_k q_{jk}\epsilon_{jk}\omega^k\big) + O((t x_j \epsilon)^2)$ with
    $\omega = e^{i t x_j \delta_j}$, both sums in one Horner pass in real arithmetic: four trigonometric
    evaluations per weight instead of two per level, then the phase and modulus of each factor as in
    the general case."""
    m = values.shape[-1]
    delta = (values[:, -1] - values[:, 0]) / (m - 1)
    resid = values - (values[:, :1] + jnp.arange(m, dtype=values.dtype) * delta[:, None])  # rounding
    qr = q * resid
    x = t[:, :, None] * Phi[:, None, :]  # (r, N, b)
    c, s = jnp.cos(x * delta), jnp.sin(x * delta)  # omega
    # one Horner pass with the coefficients q_k + i x q_k eps_k: (re + i im) omega + q_k + i x qr_k
    re, im = jnp.broadcast_to(q[:, m - 1], x.shape), x * qr[:, m - 1]
    for k in range(m - 2, -1, -1):
        re, im = re * c - im * s + q[:, k], re * s + im * c + x * qr[:, k]
    c0, s0 = jnp.cos(x * values[:, 0]), jnp.sin(x * values[:, 0])  # the base phase, as the levels' phases
    re, im = re * c0 - im * s0, re * s0 + im * c0
    return jnp.sum(0.5 * jnp.log(re * re + im * im), axis=-1), jnp.sum(jnp.arctan2(im, re), axis=-1)


def predict_rows(q_w: MeanField, prior_w: DiscretePrior, Phi, nodes) -> np.ndarray:
    """`predict_logistic`'s quadrature with `nodes[i]` nodes for row `i` of `Phi` `(n, b)` (`nodes` an
    `(n,)` int array), as a float64 NumPy array. The rows go through one compiled program of
    `_ROW_BLOCK` rows, whatever their number and node counts (the node counts are data: the loop over
    nodes runs to the block's largest and each row stops at its own), so a row's result does not depend on
    the rows predicted with it, to the last bit. Concrete inputs."""
    even = is_even_grid(prior_w.values)
    Phi = np.asarray(Phi)
    nodes = np.asarray(nodes, np.int32)
    n = Phi.shape[0]
    out = np.empty(n)
    for start in range(0, n, _ROW_BLOCK):
        P, N = Phi[start : start + _ROW_BLOCK], nodes[start : start + _ROW_BLOCK]
        rows = P.shape[0]
        if rows < _ROW_BLOCK:
            P = np.concatenate([P, np.zeros((_ROW_BLOCK - rows, P.shape[1]), P.dtype)])
            N = np.concatenate([N, np.full(_ROW_BLOCK - rows, N.min(), np.int32)])
        p = _predict_rows(q_w.log_probs, prior_w.values, jnp.asarray(P), jnp.asarray(N), even)
        out[start : start + rows] = np.asarray(p)[:rows]
    return out


@functools.partial(jax.jit, static_argnums=(4,))
def _predict_rows(log_q, values, Phi, nodes, even):
    r, _ = Phi.shape
    q = jnp.exp(log_q)
    one = jnp.ones((r, 1), Phi.dtype)
    L = log_mgf(log_q, values, Phi, jnp.concatenate([one, -one], axis=1))
    log_cosh = jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0)
    h, _ = _step_and_error(log_cosh, nodes.astype(Phi.dtype))

    block = jnp.arange(_NODE_BLOCK)

    def body(kb, acc):  # nodes kb * 8 ... kb * 8 + 7 of every row, each row's beyond its count masked
        k = kb * _NODE_BLOCK + block
        t = (k.astype(Phi.dtype) + 0.5)[None, :] * h[:, None]  # (r, 8)
        if even:
            log_abs, arg = _even_grid_log_cf(q, values, Phi, t)
        else:
            theta = t[:, :, None, None] * (Phi[:, None, :, None] * values[None, None])
            re = jnp.sum(q * jnp.cos(theta), axis=-1)
            im = jnp.sum(q * jnp.sin(theta), axis=-1)
            log_abs = jnp.sum(0.5 * jnp.log(re * re + im * im), axis=-1)
            arg = jnp.sum(jnp.arctan2(im, re), axis=-1)
        f = jnp.exp(log_abs) * jnp.sin(arg) / jnp.sinh(math.pi * t)
        return acc + jnp.where(k[None, :] < nodes[:, None], f, 0.0)

    blocks = (jnp.max(nodes) + _NODE_BLOCK - 1) // _NODE_BLOCK
    acc = lax.fori_loop(0, blocks, body, jnp.zeros((r, _NODE_BLOCK), Phi.dtype))
    # the columns added one by one (elementwise): the same order for every row count, unlike a reduction
    total = functools.reduce(jnp.add, [acc[:, i] for i in range(_NODE_BLOCK)])
    return jnp.clip(0.5 + h * total, 0.0, 1.0)


def is_even_grid(values) -> bool:
    """Whether every row of the concrete grid `values` `(b, m)` is evenly spaced up to rounding (levels
    within 4 machine epsilons of the row's largest magnitude of `v_0 + k (v_{m-1} - v_0) / (m - 1)`)."""
    v = np.asarray(jax.device_get(values), np.float64)
    m = v.shape[-1]
    if m < 3:
        return True
    line = v[:, :1] + np.arange(m) * ((v[:, -1:] - v[:, :1]) / (m - 1))
    scale = np.max(np.abs(v), axis=-1, keepdims=True)
    return bool(np.all(np.abs(v - line) <= 4 * np.finfo(values.dtype).eps * scale))


def _predict(log_q, values, Phi, num_nodes, chunk, even=False):
    n, b = Phi.shape
    m = values.shape[-1]
    num = -(-n // chunk)
    pad = num * chunk - n
    if pad:
        Phi = jnp.concatenate([Phi, jnp.zeros((pad, b), Phi.dtype)])
    q = jnp.exp(log_q)
    p, err = lax.map(lambda P: _chunk_probs(log_q, q, values, P, num_nodes, even), Phi.reshape(num, chunk, b))
    del m
    return p.reshape(-1)[:n], err.reshape(-1)[:n]


def predict_logistic(
    q_w: MeanField,
    prior_w: DiscretePrior,
    Phi_new: ArrayLike,
    *,
    num_nodes: int | None = None,
    chunk_size: int | None = None,
    with_error_bound: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    r"""Exact predictive probabilities $P(y^* = 1 \mid x^*) = E_q[\sigma(\Phi^* w)]$ of DIRECT
    logistic regression, from the exact distribution of $\Phi^* w$ (no sampling).

    $E_q[\sigma(Z)] = \tfrac12 + \int_0^\infty \operatorname{Im}\varphi_Z(t) / \sinh(\pi t)\,dt$ with
    the exact characteristic function $\varphi_Z$ of $Z = \Phi^* w$ (a product over weights),
    by a midpoint rule whose error is bounded rigorously per point (module docstring).
    $O(N b m)$ per point.

    Args:
      q_w: `kronvi.model.MeanField` `(b, m)`.
      prior_w: `kronvi.model.DiscretePrior` `(b, m)`.
      Phi_new: `(N, b)` test features, in the dtype of `prior_w`.
      num_nodes: quadrature nodes. Default: for concrete inputs, enough for an error below 1e-7
        (float32) or 1e-13 (float64) at every point (`nodes_for`, from the exact
        $\max_i \log E\cosh Z_i$, at most 4096), points with larger margins recomputed as the module
        docstring says; inside a trace 32 (float32) or 64 (float64), no recomputation.
      chunk_size: points per chunk (default: about 2**20 numbers per chunk).
      with_error_bound: also return the `(N,)` bound on each probability's error, floating-point
        rounding apart (0 for a probability summed over every configuration).

    Returns:
      `(N,)` probabilities; with `with_error_bound`, `(probs, error_bound)`.

    References:
      Gil-Pelaez (1951), "Note on the inversion theorem"; Evans & Nair (2018), section 4.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi, kronvi.logistic as kl
      >>> prior = kronvi.model.gaussian_prior(1, 1.0, levels=3)   # levels -3, 0, 3
      >>> q = kronvi.model.MeanField(jnp.log(jnp.array([[0.2, 0.3, 0.5]])))
      >>> p = kl.predict_logistic(q, prior, jnp.array([[1.0]]))
      >>> exact = 0.2 * jax.nn.sigmoid(-3.0) + 0.3 * 0.5 + 0.5 * jax.nn.sigmoid(3.0)
      >>> round(float(p[0]), 5) == round(float(exact), 5)
      True
    """
    Phi_new = check_design(Phi_new, prior_w, "Phi_new")
    check_family(q_w, prior_w, "q_w", "prior_w")
    n, b = Phi_new.shape
    m = prior_w.values.shape[-1]
    if n == 0:
        empty = jnp.zeros((0,), Phi_new.dtype)
        return (empty, empty) if with_error_bound else empty
    refine = num_nodes is None and all(is_concrete(a) for a in (q_w.logits, prior_w.values, Phi_new))
    if num_nodes is None:
        if refine:
            log_q = jax.nn.log_softmax(q_w.logits, axis=-1)
            max_log_cosh = fetch(_max_log_cosh(log_q, prior_w.values, Phi_new))
            if m**b <= _ENUMERATION_LIMIT and nodes_for(max_log_cosh, Phi_new.dtype, cap=2**62) > MAX_NODES:
                # the capped quadrature would miss its bound: sum over the configurations straight away
                p, err = _enumerate(q_w.log_probs, prior_w.values, Phi_new, max(1, min(n, (1 << 20) // m**b)))
                return (p, err) if with_error_bound else p
            num_nodes = nodes_for(max_log_cosh, Phi_new.dtype)
        else:
            num_nodes = default_num_nodes(Phi_new.dtype)
    num_nodes = check_int(num_nodes, "num_nodes", 1)
    # even grids (every grid kronvi builds): Horner's rule over the levels, checked on concrete grids only
    even = is_concrete(prior_w.values) and is_even_grid(prior_w.values)
    if chunk_size is None:
        chunk_size = max(1, min(n, (1 << 20) // (num_nodes * b * (1 if even else m))))
    chunk_size = min(check_int(chunk_size, "chunk_size", 1), n)
    p, err = _predict_jit(q_w.log_probs, prior_w.values, Phi_new, num_nodes, chunk_size, even)
    if refine:  # the default nodes aim at target_error: recompute the points they miss
        target = target_error(Phi_new.dtype)
        if int(reduce_on_device(_count_above, err, target)):
            p, err = _refine(q_w.log_probs, prior_w.values, Phi_new, p, err, target, num_nodes)
    return (p, err) if with_error_bound else p


_predict_jit = jax.jit(_predict, static_argnums=(3, 4, 5))


def _chunked_rows(fn, Phi, chunk):
    """`fn` over row chunks of `Phi` (`lax.map`), the results `(n,)` each."""
    n, b = Phi.shape
    num = -(-n // chunk)
    pad = num * chunk - n
    if pad:
        Phi = jnp.concatenate([Phi, jnp.zeros((pad, b), Phi.dtype)])
    out = lax.map(fn, Phi.reshape(num, chunk, b))
    return jax.tree.map(lambda a: a.reshape(-1)[:n], out)


@functools.partial(jax.jit, static_argnums=(3,))
def _enumerate(log_q, values, Phi, chunk):
    r"""Exact $E\sigma(Z)$ as the sum over all `m**b` configurations (error bound 0: rounding only)."""
    b, m = values.shape
    idx = np.array(list(itertools.product(range(m), repeat=b)), np.int32).reshape(-1, b)  # (C, b)
    rows = np.arange(b)
    W = values[rows, idx]  # (C, b)
    weight = jnp.exp(jnp.sum(log_q[rows, idx], axis=-1))  # (C,)

    def chunk_probs(P):
        Z = jnp.einsum("rb,cb->rc", P, W, precision=lax.Precision.HIGHEST)
        return jnp.clip(jax.nn.sigmoid(Z) @ weight, 0.0, 1.0)

    p = _chunked_rows(chunk_probs, Phi, chunk)
    return p, jnp.zeros_like(p)


@jax.jit
def _count_above(err, target):
    return jnp.sum(err > target)


def _refine(log_q, values, Phi, p, err, target, num_nodes):
    """Recomputes the points whose quadrature bound exceeds `target` as the sum over every configuration
    when there are few (module docstring); warns about points still above."""
    n, b = Phi.shape
    m = values.shape[-1]
    if m**b <= _ENUMERATION_LIMIT:
        p2, err2 = _enumerate(log_q, values, Phi, max(1, min(n, (1 << 20) // m**b)))
        above = err > target
        p, err = jnp.where(above, p2, p), jnp.where(above, err2, err)
    left = int(reduce_on_device(_count_above, err, target))
    if left:
        worst = float(reduce_on_device(jnp.max, err))
        warnings.warn(
            f"predict_logistic: {left} of {n} probabilities have error bounds above {target:g} (up to "
            f"{worst:.3g}): their margins |Phi_new w| are too large for {num_nodes} quadrature nodes and "
            f"the {m}**{b} configurations too many to sum; `with_error_bound=True` returns the bounds",
            RuntimeWarning,
            stacklevel=3,
        )
    return p, err
