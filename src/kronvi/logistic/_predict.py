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

On an even grid (every grid kronvi builds) each factor is evaluated in the centred form of
`_even_grid_cf`: with $v_{jk} = v_{jc} + (k - c)\delta_j + \epsilon_{jk}$, the factor is
$e^{itx\bar v_j}\sum_k q_{jk}\omega^{k-c}$, $\omega = e^{itx\delta_j}$, $\bar v_j = v_{jc} + \sum_k
q_{jk}\epsilon_{jk}$: the levels' rounding $\epsilon$ (at most 4 machine epsilons of the largest level,
`is_even_grid`) enters through its $q$-mean, which moves $Z$ by at most
$\sum_j |x_j| \max_k|\epsilon_{jk} - \bar\epsilon_j|$, a rounding of the levels themselves. The sums
over levels run by Clenshaw's recurrence (Reinsch's form), the factors are multiplied as complex
numbers, and `predict_rows` gives every row its own node count (`row_nodes`) in items of `_ITEM_NODES`
nodes (`docs/decisions/classifier.md#fast-exact-predict_proba`).
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.buckets import pad_rows
from .._base.checks import check_int, fetch, is_concrete, reduce_on_device
from .._model.families import MeanField, check_family
from .._model.grids import DiscretePrior
from ._bound import check_design, log_mgf

# At most this many configurations m**b are summed per point by the exact fallback; quadrature nodes cap.
_ENUMERATION_LIMIT = 1 << 14
MAX_NODES = 4096
_NODE_BLOCK = 8  # nodes per iteration of `_predict_rows`' loop (grids that are not even)
_ROW_BLOCK = 64  # rows of `_predict_rows`' one program
_ITEM_NODES = 4  # nodes per item of `_item_sums` (even grids)
_TILE_ITEMS = 128  # items per iteration of `_item_sums`' loop
_WINDOW_ITEMS = 4096  # items of `_item_sums`' one program
_WINDOW_ROWS = 1024  # rows of `_item_sums`' one program
_WEIGHT_LANES = 8  # `_item_sums` pads the weights to a multiple of this


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


def row_nodes(log_cosh, dtype) -> np.ndarray:
    r"""Per row, the fewest nodes whose bound (`_step_and_error`, from the row's own
    $\log E\cosh Z$, `(n,)` NumPy) is at most `target_error(dtype)`: from
    $N \ge E (E + a) / (2\pi^2)$ with $E = \log(1.15 / \text{target})$ (the balanced bound is about
    $1.14 e^{-E}$), then one node more (or fewer) for each row above (or still within) it (`int64`, at most $2^{62}$)."""
    target = target_error(dtype)
    lc = np.minimum(np.maximum(np.asarray(log_cosh, np.float64), 0.0), 1e300)
    E = math.log(1.15 / target)
    need = np.ceil(E * (E + lc + math.log(2.0)) / (2.0 * math.pi**2))
    nodes = np.clip(need, 1.0, 2.0**62).astype(np.int64)
    for _ in range(8):
        above = _host_bound(lc, nodes) > target
        if not np.any(above):
            break
        nodes = nodes + above
    for _ in range(8):  # and one fewer for each row whose bound allows it
        fewer = (nodes > 1) & (nodes <= 2**62) & (_host_bound(lc, nodes - 1) <= target)
        if not np.any(fewer):
            break
        nodes = nodes - fewer
    return np.minimum(nodes, 2**62)


def _host_bound(log_cosh, nodes):
    """`_step_and_error`'s bound in float64 NumPy."""
    h = _host_step(log_cosh, nodes)
    with np.errstate(over="ignore"):
        alias = np.exp(log_cosh - 2.0 * math.pi / h) / -np.expm1(-2.0 * math.pi / h)
        trunc = (2.0 / math.pi) * np.exp(-math.pi * nodes * h) / -np.expm1(-math.pi * nodes * h)
    return np.minimum(alias + trunc, 1.0)


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


def _chunk_probs(log_q, q, values, Phi, num_nodes, coefs=None):
    r, b = Phi.shape
    one = jnp.ones((r, 1), Phi.dtype)
    L = log_mgf(log_q, values, Phi, jnp.concatenate([one, -one], axis=1))  # log E e^{±Z}
    log_cosh = jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0)
    h, err = _step_and_error(log_cosh, num_nodes)
    t = (jnp.arange(num_nodes, dtype=Phi.dtype) + 0.5)[None, :] * h[:, None]  # (r, N)
    if coefs is not None:  # an even grid: `_even_grid_cf`
        phase = jnp.matmul(Phi, coefs.base, precision=lax.Precision.HIGHEST)
        integrand = _even_grid_cf(coefs, Phi, t, phase)[1] / jnp.sinh(math.pi * t)
    else:
        integrand = _general_im_cf(q, values, Phi, t) / jnp.sinh(math.pi * t)
    p = 0.5 + h * jnp.sum(integrand, axis=-1)
    return jnp.clip(p, 0.0, 1.0), err


def _general_im_cf(q, values, Phi, t):
    r"""$\operatorname{Im}\varphi_Z(t)$ `(r, N)` on any grid: each factor summed over its levels, the
    factors multiplied through their moduli and phases."""
    theta = t[:, :, None, None] * (Phi[:, None, :, None] * values[None, None])  # (r, N, b, m)
    re = jnp.sum(q * jnp.cos(theta), axis=-1)
    im = jnp.sum(q * jnp.sin(theta), axis=-1)
    log_abs = jnp.sum(0.5 * jnp.log(re * re + im * im), axis=-1)  # (r, N)
    arg = jnp.sum(jnp.arctan2(im, re), axis=-1)
    return jnp.exp(log_abs) * jnp.sin(arg)


def predict_rows(q_w: MeanField, prior_w: DiscretePrior, Phi, nodes, *, log_cosh=None) -> np.ndarray:
    r"""`predict_logistic`'s quadrature with `nodes[i]` nodes for row `i` of `Phi` `(n, b)` (`nodes` an
    `(n,)` int array), as a float64 NumPy array; `log_cosh` `(n,)`: each row's $\log E_q\cosh Z$ when the
    caller has it. Even grids (every grid kronvi builds) take `_item_sums`: the rows' nodes in blocks of
    `_ITEM_NODES`, each block an item computed alone, in windows of at most `_WINDOW_ITEMS` items through
    one compiled program whatever the number of rows and their node counts; a row's probability is the
    sum of its own items' sums, in the same order, so it does not depend on the rows predicted with it,
    to the last bit. Other grids take `_predict_rows`, blocks of `_ROW_BLOCK` rows. Concrete inputs."""
    Phi = np.asarray(jax.device_get(Phi))
    nodes = np.asarray(nodes, np.int64)
    n = Phi.shape[0]
    if n == 0:
        return np.zeros(0)
    if not is_even_grid(prior_w.values):
        return _uneven_rows(q_w, prior_w, Phi, nodes)
    dtype = Phi.dtype
    if log_cosh is None:
        log_cosh = mgf_log_cosh(q_w.log_probs, prior_w.values, jnp.asarray(Phi))
    log_cosh = np.asarray(jax.device_get(log_cosh), np.float64)
    h = _host_step(log_cosh, nodes).astype(dtype)
    coefs = host_coefficients(q_w, prior_w, lanes=_WEIGHT_LANES)
    b = Phi.shape[1]
    Phi = np.concatenate([Phi, np.zeros((n, coefs.delta.size - b), dtype)], axis=1)  # the weights added
    phase = (Phi.astype(np.float64) @ coefs.base.astype(np.float64)).astype(dtype)
    items = -(-nodes // _ITEM_NODES)  # (n,)
    item_row = np.repeat(np.arange(n), items)
    first = np.cumsum(items) - items  # each row's first item
    k0 = ((np.arange(item_row.size) - first[item_row]) * _ITEM_NODES).astype(np.int32)
    count = np.minimum(nodes[item_row] - k0, _ITEM_NODES).astype(np.int32)
    cum = np.concatenate([[0], np.cumsum(items)])
    width = max(_WINDOW_ITEMS, 1 << int(items.max() - 1).bit_length())  # a row beyond the cap: a wider program
    width = -(-width // _TILE_ITEMS) * _TILE_ITEMS
    windows, start = [], 0
    while start < n:  # windows of whole rows: at most _WINDOW_ROWS rows and `width` items
        stop = min(start + _WINDOW_ROWS, int(np.searchsorted(cum, cum[start] + width, "right")) - 1)
        stop = max(stop, start + 1)
        lo, hi = cum[start], cum[stop]
        out = _item_sums(  # NumPy arguments: jit's own transfer, no eager device_put per array
            coefs,
            pad_rows(Phi[start:stop], _WINDOW_ROWS),
            pad_rows(h[start:stop], _WINDOW_ROWS, 1),
            pad_rows(phase[start:stop], _WINDOW_ROWS),
            _padded(item_row[lo:hi] - start, width),
            _padded(k0[lo:hi], width),
            _padded(count[lo:hi], width),
            np.int32(hi - lo),
        )  # dispatched without waiting: the windows may run side by side
        windows.append((out, hi - lo))
        start = stop
    sums = np.concatenate([np.asarray(o, np.float64)[:k] for o, k in jax.device_get(windows)])
    # each row's items added in their order (bincount adds sequentially): the row's own numbers only
    total = np.bincount(item_row, weights=sums, minlength=n)
    return np.clip(0.5 + h.astype(np.float64) * total, 0.0, 1.0)


def _padded(a, size):
    return pad_rows(a.astype(np.int32), size)


def _host_step(log_cosh, nodes):
    """`_step_and_error`'s step in float64 NumPy."""
    a = np.maximum(log_cosh, 0.0) + math.log(2.0)
    return 4.0 * math.pi / (a + np.hypot(a, np.sqrt(8.0 * math.pi**2 * nodes)))


def _uneven_rows(q_w, prior_w, Phi, nodes):
    """`predict_rows` for grids that are not even: blocks of `_ROW_BLOCK` rows, the general factors."""
    nodes = nodes.astype(np.int32)
    n = Phi.shape[0]
    out = np.empty(n)
    for start in range(0, n, _ROW_BLOCK):
        P, N = Phi[start : start + _ROW_BLOCK], nodes[start : start + _ROW_BLOCK]
        rows = P.shape[0]
        if rows < _ROW_BLOCK:
            P = np.concatenate([P, np.zeros((_ROW_BLOCK - rows, P.shape[1]), P.dtype)])
            N = np.concatenate([N, np.full(_ROW_BLOCK - rows, N.min(), np.int32)])
        p = _predict_rows(q_w.log_probs, prior_w.values, jnp.asarray(P), jnp.asarray(N))
        out[start : start + rows] = np.asarray(p)[:rows]
    return out


class EvenCoefficients(NamedTuple):
    r"""An even grid in the centred form of `_even_grid_cf` and `even_log_cosh`: level $k$ of weight $j$
    is $v_{jc} + (k - c)\delta_j + \epsilon_{jk}$, $\epsilon$ the levels' rounding, $c = (m - 1)/2$ (a
    level of probability 0 is added on top when $m$ is even).

    Attributes:
      delta: `(b,)` the spacing $\delta_j$.
      base: `(b,)` $v_{jc} + \sum_k q_{jk}\epsilon_{jk}$, the centre with the rounding's $q$-mean.
      even: `(b, c + 1)` $q_{jc}$, then $q_{j,c+k} + q_{j,c-k}$.
      odd: `(b, c + 1)` 0, then $q_{j,c+k} - q_{j,c-k}$.
      centre: `(b,)` $v_{jc}$.
      scaled: `(b, 2c + 1)` $q_{jk} / \max_k q_{jk}$.
      log_scale: `(b,)` $\log\max_k q_{jk}$.
      slack: `(b,)` $\max_k |\epsilon_{jk}|$.
    """

    delta: jax.Array | np.ndarray
    base: jax.Array | np.ndarray
    even: jax.Array | np.ndarray
    odd: jax.Array | np.ndarray
    centre: jax.Array | np.ndarray
    scaled: jax.Array | np.ndarray
    log_scale: jax.Array | np.ndarray
    slack: jax.Array | np.ndarray


def _even_coefficients(log_q, values, xp=jnp) -> EvenCoefficients:
    """`EvenCoefficients` of the grid `values` and log-probabilities `log_q` `(b, m)`, with `xp` `jnp`
    (traced or on the device) or `np` (concrete host arrays: `host_coefficients`)."""
    m = values.shape[-1]
    if m == 1:  # levels of probability 0 either side
        values = xp.concatenate([values - 1.0, values, values + 1.0], axis=1)
        log_q = xp.pad(log_q, ((0, 0), (1, 1)), constant_values=-np.inf)
        m = 3
    delta = (values[:, -1] - values[:, 0]) / (m - 1)
    if m % 2 == 0:  # a level of probability 0 on top: the centre is a level
        values = xp.concatenate([values, values[:, -1:] + delta[:, None]], axis=1)
        log_q = xp.pad(log_q, ((0, 0), (0, 1)), constant_values=-np.inf)
        m += 1
    q = xp.exp(log_q)
    c = (m - 1) // 2
    line = values[:, c : c + 1] + (xp.arange(m) - c) * delta[:, None]
    base = values[:, c] + xp.sum(q * (values - line), axis=1)
    zero = xp.zeros_like(q[:, c])
    even = xp.stack([q[:, c]] + [q[:, c + k] + q[:, c - k] for k in range(1, c + 1)], axis=1)
    odd = xp.stack([zero] + [q[:, c + k] - q[:, c - k] for k in range(1, c + 1)], axis=1)
    top = xp.max(log_q, axis=1)
    slack = xp.max(xp.abs(values - line), axis=1)
    return EvenCoefficients(delta, base, even, odd, values[:, c], xp.exp(log_q - top[:, None]), top, slack)


def host_coefficients(q_w: MeanField, prior_w: DiscretePrior, *, lanes: int = 1) -> EvenCoefficients:
    """`EvenCoefficients` of a concrete even grid, computed in float64 NumPy and returned in the grid's
    dtype, with weights added up to a multiple of `lanes`: each a point mass at 0 (a factor exactly 1
    for features 0)."""
    log_q, values = (np.asarray(a, np.float64) for a in jax.device_get((q_w.log_probs, prior_w.values)))
    coefs = _even_coefficients(log_q, values, xp=np)
    extra = -values.shape[0] % lanes
    if extra:
        fill = {f: np.zeros((extra, *a.shape[1:])) for f, a in coefs._asdict().items()}
        fill["delta"][:] = 1.0
        fill["even"][:, 0] = 1.0
        coefs = EvenCoefficients(*(np.concatenate([a, fill[f]]) for f, a in coefs._asdict().items()))
    return EvenCoefficients(*(a.astype(prior_w.values.dtype) for a in coefs))


def even_log_cosh(coefs: EvenCoefficients, Phi):
    r"""Each row's $\log E_q\cosh Z$ `(r,)` for rows `Phi (r, b)` on an even grid, and `(r,)` whether
    a row must take `log_mgf` instead. Per weight, with $u = x\delta$, $a = |u|$, $\rho = e^{-a}$:
    $E e^{\pm x w} = e^{\pm x v_c + c a} \sum_k q_k \rho^{\cdot}$, two Horner sums in $\rho \le 1$
    (the levels in either order), one exponential per weight instead of $2m$; the rounding of the levels
    adds at most $|x|\max_k|\epsilon_k|$ (added: an upper bound, as the error bound needs). A sum below
    $2^{-90}$ (float32) or $2^{-900}$ (float64) may have lost terms to underflow (below the smallest
    normal number, $2^{-126}$ or $2^{-1022}$): its row is flagged."""
    x = Phi
    u = x * coefs.delta  # (r, b)
    a = jnp.abs(u)
    rho = jnp.exp(-a)
    q = coefs.scaled
    m = q.shape[1]
    c = (m - 1) // 2
    up, down = q[:, 0], q[:, m - 1]
    for k in range(1, m):  # up = sum_k q_k rho^(m-1-k), down = sum_k q_k rho^k
        up = up * rho + q[:, k]
        down = down * rho + q[:, m - 1 - k]
    tiny = 2.0**-900 if x.dtype == jnp.float64 else 2.0**-90
    flag = jnp.any((up < tiny) | (down < tiny), axis=1)
    common = c * a + coefs.log_scale + jnp.abs(x) * coefs.slack
    lu, ld = jnp.log(up), jnp.log(down)
    pos = u >= 0
    plus = jnp.sum(x * coefs.centre + common + jnp.where(pos, lu, ld), axis=1)
    minus = jnp.sum(-x * coefs.centre + common + jnp.where(pos, ld, lu), axis=1)
    return jnp.logaddexp(plus, minus) - math.log(2.0), flag


def _split_half_pi(dtype):
    r"""$\pi/2$ as three numbers of `dtype`, the first two short enough that $n$ times them is exact for
    $n < 2^{12}$ (float32) or $2^{26}$ (float64) (Cody and Waite's reduction)."""
    bits = 26 if jnp.dtype(dtype) == jnp.float64 else 12
    rest, parts = math.pi / 2, []
    for _ in range(2):
        e = math.frexp(rest)[1]
        part = math.ldexp(round(math.ldexp(rest, bits - e)), e - bits)
        parts.append(part)
        rest -= part
    return [np.asarray(p, dtype) for p in (*parts, rest)]


def _sincos_quarter(alpha):
    r"""`(n, sin r, cos r)` with $\alpha = r + n\pi/2$, $|r| \le \pi/4$ ($n$ a float): Cody and Waite's
    reduction, then the Taylor polynomials to $r^9$ and $r^{10}$ (float32) or $r^{17}$ and $r^{18}$
    (float64), whose truncation errors ($3\cdot 10^{-9}$, $10^{-19}$ at $\pi/4$) are below the
    dtype's rounding."""
    p1, p2, p3 = _split_half_pi(alpha.dtype)
    n = jnp.round(alpha * (2.0 / math.pi))
    r = ((alpha - n * p1) - n * p2) - n * p3
    r2 = r * r
    K = 9 if alpha.dtype == jnp.float64 else 5  # sin r / r and cos r to r^(2K - 2) and r^(2K)
    s = (-1) ** (K - 1) / math.factorial(2 * K - 1)
    for k in range(K - 2, -1, -1):
        s = s * r2 + (-1) ** k / math.factorial(2 * k + 1)
    c = (-1) ** K / math.factorial(2 * K)
    for k in range(K - 1, -1, -1):
        c = c * r2 + (-1) ** k / math.factorial(2 * k)
    return n, s * r, c


def _even_grid_cf(coefs: EvenCoefficients, Phi, t, phase):
    r"""`(Re, Im)` of $\varphi_Z(t)$, `(r, N)` each, for rows `Phi (r, b)` at `t (r, N)`, `phase (r,)`
    $= \Phi\cdot$`coefs.base`. Each weight's factor is $e^{itx v_{c}}$ times
    $\sum_{k=-c}^{c} q_{c+k}\omega^k$, $\omega = e^{i\theta}$, $\theta = t x \delta$: with
    $\theta = \theta' + n\pi$, $|\theta'| \le \pi/2$, $\omega^k = (-1)^{nk} e^{ik\theta'}$, and the
    cosine and sine sums run by Clenshaw's recurrence in Reinsch's form
    ($\lambda = -4\sin^2(\theta'/2)$, accurate as $\theta' \to 0$), three operations per level and
    two trigonometric evaluations (of the half angle, reduced to $[-\pi/4, \pi/4]$) per weight; the
    factors multiplied as complex numbers; the centres' phases enter once per row."""
    c = coefs.even.shape[1] - 1
    alpha = t[:, :, None] * (0.5 * Phi * coefs.delta)[:, None, :]  # (r, N, b): half of theta
    n, sr, cr = _sincos_quarter(alpha)
    lam = -4.0 * sr * sr
    sin_theta = 2.0 * sr * cr
    sign = 1.0 - 2.0 * jnp.abs(n - 2.0 * jnp.round(0.5 * n))  # (-1)^n

    def clenshaw(coef):  # (D_0, U_1) of sum_k coef_k sign^k cos/sin(k theta')
        signed = lambda k: coef[:, k] if k % 2 == 0 else coef[:, k] * sign  # noqa: E731
        U = D = jnp.broadcast_to(signed(c), alpha.shape)
        for k in range(c - 1, -1, -1):
            D = D + lam * U + signed(k)
            U = U + D
        return D, U - D

    D, U1 = clenshaw(coefs.even)
    re = D - 0.5 * lam * U1
    im = sin_theta * clenshaw(coefs.odd)[1]
    z = jnp.prod(lax.complex(re, im), axis=-1)  # (r, N)
    ph = t * phase[:, None]
    cos, sin = jnp.cos(ph), jnp.sin(ph)
    return z.real * cos - z.imag * sin, z.real * sin + z.imag * cos


@jax.jit
def _item_sums(coefs, Phi, h, phase, item_row, k0, count, num_items):
    r"""Each item's sum of the integrand over its nodes `k0 .. k0 + count - 1` (at most `_ITEM_NODES`) of
    its row `item_row` of `Phi (R, b)` (step `h`, `phase` $\Phi\cdot$`base`), `(W,)`, the first
    `num_items` computed, `_TILE_ITEMS` at a time; an item's result depends on its own inputs only."""
    width = item_row.shape[0]
    nodes = jnp.arange(_ITEM_NODES)

    def body(i, out):
        tile = lambda a: lax.dynamic_slice_in_dim(a, i * _TILE_ITEMS, _TILE_ITEMS)  # noqa: E731
        rows, first, cnt = tile(item_row), tile(k0), tile(count)
        t = (first[:, None] + nodes[None, :]).astype(Phi.dtype) + 0.5
        t = t * h[rows][:, None]  # (T, B)
        im = _even_grid_cf(coefs, Phi[rows], t, phase[rows])[1]
        f = jnp.where(nodes[None, :] < cnt[:, None], im / jnp.sinh(math.pi * t), 0.0)
        # the nodes added one by one (elementwise): the same order for every item
        total = functools.reduce(jnp.add, [f[:, j] for j in range(_ITEM_NODES)])
        return lax.dynamic_update_slice_in_dim(out, total, i * _TILE_ITEMS, 0)

    tiles = (num_items + _TILE_ITEMS - 1) // _TILE_ITEMS
    return lax.fori_loop(0, tiles, body, jnp.zeros((width,), Phi.dtype))


@jax.jit
def mgf_log_cosh(log_q, values, Phi):
    r"""Each row's $\log E_q\cosh Z$ `(r,)` (`log_mgf` of $\pm 1$)."""
    one = jnp.ones((Phi.shape[0], 1), Phi.dtype)
    L = log_mgf(log_q, values, Phi, jnp.concatenate([one, -one], axis=1))
    return jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0)


@jax.jit
def _predict_rows(log_q, values, Phi, nodes):
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
        f = _general_im_cf(q, values, Phi, t) / jnp.sinh(math.pi * t)
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
    num = -(-n // chunk)
    pad = num * chunk - n
    if pad:
        Phi = jnp.concatenate([Phi, jnp.zeros((pad, b), Phi.dtype)])
    q = jnp.exp(log_q)
    coefs = _even_coefficients(log_q, values) if even else None
    p, err = lax.map(lambda P: _chunk_probs(log_q, q, values, P, num_nodes, coefs), Phi.reshape(num, chunk, b))
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
    # even grids (every grid kronvi builds): `_even_grid_cf`, checked on concrete grids only
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
