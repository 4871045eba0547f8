r"""Coordinate ascent for DIRECT logistic regression: closed-form minorize-maximize updates.

Each bound is a function of every row's log-MGFs $L_{ic} = \log\prod_j m_{ijc}(q_j)$,
$m_{ijc}(q_j) = \sum_k q_{jk} e^{c s_i \Phi_{ij} v_{jk}}$, and of $s_i E[z_i]$, all linear
in $q_j$ inside the logarithm. As a function of one factor $q_j$ a row's bound is convex
(`"theorem2"`: $-\prod_l m_{ilc}$ is linear in $q_j$; `"jensen"` and `"tilted"`: minus
the log of a linear function, maximized over tilts), so its tangent at the current $q_j$ is below it
and touches it there. Maximizing tangent + $E_{q_j}[\log p_j] + H[q_j]$ gives the closed form

$$ \log q_j(v_k) = \log p_j(v_k) + \sum_i \frac{\partial B_i}{\partial q_{jk}} + \text{const}, $$

which never decreases the ELBO bound (for `"theorem2"` it is the exact coordinate optimum). A sweep
visits every weight in turn, keeping every row's $L_{ic}$ and $s_i E[z_i]$ current in
$O(n m)$ per weight: $O(nbm)$ per sweep, like one evaluation of the bound.

With $R_{ick} = e^{c s_i\Phi_{ij}v_{jk}} / m_{ijc}(q_j)$ the coefficient is
$\partial B_i / \partial q_{jk} = \sum_c (\partial B_i / \partial L_{ic}) R_{ick}
+ v_{jk}\, s_i\Phi_{ij}\, \partial B_i / \partial(s_iE z_i)$, and the updated row term is
$m_{ijc}(q'_j) = m_{ijc}(q_j) \sum_k R_{ick}\, q'_{jk}$: one table of exponentials per weight serves
both. Every weight's $\log m_{ijc}$ is computed once, before the first sweep, and kept current by each
update (in a `(b, K, n)` table when it is small enough, else recomputed per weight). A sweep costs about
two passes over the `(n, K, m)` terms of each weight. The exponents $c$ are $\pm 1$ and $\pm\tfrac12$, so
for a weight whose $|s_i\Phi_{ij}(v_{jk} - \bar v_j)|$ ($\bar v_j$ the midpoint of its levels) stay within
20, every $e^{c s_i \Phi_{ij} v_{jk}}$ is a power of one exponential per row and level, times a per-row
factor, with no shift (the powers within $e^{\pm 20}$, every $R$ within $e^{\pm 40}$); other weights, and
every weight of a fit whose data or grids are traced, take
shifted, clipped exponentials (`docs/decisions/classifier.md#coordinate-ascents-exponentials-as-powers`).
Why it is the study's fit:
`docs/decisions/classifier.md#coordinate-ascent-from-a-laplace-start-a-warm-newton-start`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .._base.checks import is_concrete
from .._base.precision import dot, matmul
from .._solvers.info import fit_info
from ._bound import bound_from_mgfs, bound_grads, exponent_constants, exponent_values

_MAX_EXP = 60.0  # exponents of a level's MGF ratio are clipped here (the level's new mass is ~0 anyway)
_MIN_LOGIT = -200.0
_TABLE_LIMIT = 1 << 25  # numbers in the (b, K, n) table of per-weight log-MGFs kept between sweeps
# A weight whose |x_i (v_k - centre)| are within this takes its exponentials as powers of one (`_powers`):
# every term e^{c x_i (v_k - centre)} lies within e^{±_POWER_LIMIT}, and every R_ick and MGF ratio (up to
# rounding) within e^{±2 * _POWER_LIMIT}, inside float32's normal range (e^{±87}).
_POWER_LIMIT = 20.0


def _weight_log_mgf(x, v, log_q, c):
    r"""$\log\sum_k q_k e^{c\, x_i v_k}$, `(K, n)`, for one weight: signed column `x (n,)`, levels
    `v (m,)`, log-probabilities `log_q (m,)`, exponents `c (K,)`. The sum over the `m` levels is
    written out, so that it streams over the rows (XLA's reduction over the middle axis of a
    `(K, m, n)` array does not, once it outgrows the cache)."""
    terms = [c[:, None] * (v[k] * x)[None, :] + log_q[k] for k in range(v.shape[0])]
    top = functools.reduce(jnp.maximum, terms)
    return top + jnp.log(functools.reduce(jnp.add, [jnp.exp(t - top) for t in terms]))


def _base(cs):
    """The exponent $h$ whose powers give every $e^{c a}$: each $c / h$ is one of $\\pm 1, \\pm 2$."""
    h = min(abs(c) for c in cs)
    if not all(c / h in (-2.0, -1.0, 1.0, 2.0) for c in cs):
        raise ValueError(f"exponents {cs} are not +-1 or +-2 times their smallest magnitude")
    return h


def _powers(u, cs):
    """`[u ** (c / h) for c in cs]` with `u = e^{h a}` (`_base`): products and one reciprocal, no exp."""
    h = _base(cs)
    inv = 1.0 / u if any(c < 0 for c in cs) else None
    pick = {1.0: lambda: u, 2.0: lambda: u * u, -1.0: lambda: inv, -2.0: lambda: inv * inv}
    return [pick[c / h]() for c in cs]


def _centre(v):
    """The midpoint of a weight's levels: the powers take $e^{h x_i (v_k - \\text{centre})}$."""
    return 0.5 * (jnp.max(v) + jnp.min(v))


def _level_exponentials(x, dv, h):
    """`(m, n)` $e^{h x_i dv_k}$, computed once: the barrier keeps XLA from fusing (and so repeating) the
    exponentials into each power's consumer."""
    return lax.optimization_barrier(jnp.exp(h * (dv[:, None] * x[None, :])))


def _power_log_mgf(x, v, log_q, c, *, cs):
    """`_weight_log_mgf` for a weight within `_POWER_LIMIT`: with $a_i = x_i\\,\\text{centre}$ and one
    exponential $u_{ki} = e^{h x_i (v_k - \\text{centre})}$ per level and row,
    $\\log m_{ic} = c\\, a_i + \\log\\sum_k q_k u_{ki}^{c/h}$ (each term within $e^{\\pm 20}$: no shift)."""
    h, mid = _base(cs), _centre(v)
    u = _level_exponentials(x, v - mid, h)
    q = jnp.exp(log_q)
    sums = jnp.stack([matmul(q, p) for p in _powers(u, cs)])
    return c[:, None] * (mid * x)[None, :] + jnp.log(sums)


def _half_ranges(values):
    return 0.5 * (values.max(axis=-1) - values.min(axis=-1))


def exponentials(prior_w, Phi, y) -> str:
    """How a coordinate-ascent fit computes its exponentials: `"each"` (each weight as powers where it is
    within `_POWER_LIMIT`, else shifted) when the arrays that decide it (`Phi`, `y`, the grids) are
    concrete; `"shifted"` (`_weight_log_mgf`'s shifted, clipped exponentials) when any is traced, since
    under `vmap` a branch per weight runs both sides (a `jit` without `vmap` shifts too: a trace cannot
    tell). Never from the data's values: one compiled program per shape."""
    concrete = all(is_concrete(a) for a in (Phi, y, prior_w.values))
    return "each" if concrete else "shifted"


def _within_powers(x, v):
    """Whether every $|x_i (v_k - \\text{centre})|$ of one weight is within `_POWER_LIMIT` (traced)."""
    return jnp.max(jnp.abs(x)) * _half_ranges(v) <= _POWER_LIMIT


def _log_mgf(x, v, log_q, c, cs, mode):
    """`_weight_log_mgf` (`"shifted"`), `_power_log_mgf` (`"powers"`), or per weight (`"each"`)."""
    power = functools.partial(_power_log_mgf, cs=cs)
    if mode == "each":
        return lax.cond(_within_powers(x, v), power, _weight_log_mgf, x, v, log_q, c)
    return power(x, v, log_q, c) if mode == "powers" else _weight_log_mgf(x, v, log_q, c)


def _signed_columns(Phi, y):
    """`(b, n)`: column `j` is $s_i \\Phi_{ij}$, $s = 2y - 1$ (one contiguous row per weight)."""
    return ((2.0 * y - 1.0)[:, None] * Phi).T


def _keeps_table(X, bound) -> bool:
    return X.shape[0] * X.shape[1] * exponent_values(bound, X.dtype).shape[0] <= _TABLE_LIMIT


def _state(log_q, values, X, bound, mode="shifted"):
    r"""`(L, sez, table)`: the rows' log-MGFs `(K, n)`, $s_i E_q z_i$ `(n,)` and the per-weight
    log-MGFs `(b, K, n)` (`None` above `_TABLE_LIMIT` numbers)."""
    c, cs = exponent_values(bound, X.dtype), exponent_constants(bound)
    terms = (X, values, log_q)
    if _keeps_table(X, bound):
        table = lax.map(lambda t: _log_mgf(*t, c, cs, mode), terms)
        L = jnp.sum(table, axis=0)
    else:
        table = None
        L = lax.fori_loop(
            0,
            X.shape[0],
            lambda j, acc: acc + _log_mgf(X[j], values[j], log_q[j], c, cs, mode),
            jnp.zeros((c.shape[0], X.shape[1]), X.dtype),
        )
    sez = matmul(jnp.sum(jnp.exp(log_q) * values, axis=-1), X)
    return L, sez, table


def _elbo(log_q, prior_w, L, sez, weights, bound):
    q = jnp.exp(log_q)
    return jnp.sum(weights * bound_from_mgfs(L.T, sez, bound)) + jnp.sum(q * (prior_w.log_probs - log_q))


def _update(x, v, lp, lm_old, gL, gE, *, bound, mode):
    r"""One weight's closed-form update: its new log-probabilities `(m,)` and log-MGFs `(K, n)`.

    $R_{ick} = e^{c x_i v_k} / m_{ic}(q)$: as powers (`"powers"`), $u_{ki}^{c/h} e_{ic}$ with
    $u = e^{h x_i (v_k - \text{centre})}$ and $e = e^{c x_i \text{centre}} / m_{ic}(q)$, one `(m, n)` block
    per exponent; shifted and clipped (`"shifted"`), one `(K, n)` block per level, stored level-major."""
    m = v.shape[0]
    c, cs = exponent_values(bound, x.dtype), exponent_constants(bound)
    if mode == "powers":
        mid = _centre(v)
        e = jnp.exp(c[:, None] * (mid * x)[None, :] - lm_old)  # (K, n)
        blocks = [p * e[i] for i, p in enumerate(_powers(_level_exponentials(x, v - mid, _base(cs)), cs))]
        coef = functools.reduce(jnp.add, [matmul(r, g) for r, g in zip(blocks, gL, strict=True)])
        mgf_ratio = lambda pn: jnp.stack([matmul(pn, r) for r in blocks])  # noqa: E731
    else:
        log_r = c[None, :, None] * (v[:, None, None] * x[None, None, :]) - lm_old[None]
        r = jnp.exp(jnp.minimum(log_r, _MAX_EXP)).reshape(m, -1)
        coef = matmul(r, gL.reshape(-1))
        mgf_ratio = lambda pn: matmul(pn, r).reshape(lm_old.shape)  # noqa: E731
    new = jax.nn.log_softmax(jnp.maximum(jax.nn.log_softmax(lp + coef + v * dot(gE, x)), _MIN_LOGIT))
    ratio = mgf_ratio(jnp.exp(new))  # m_ijc(q') / m_ijc(q), (K, n)
    if mode == "powers":  # each ratio is a convex combination of R's of at least e^-40, above `tiny` below
        return new, lm_old + jnp.log(ratio)
    # a clipped exponent (which may round in its last bit) or an underflowing ratio: the row terms from scratch
    clip = jnp.exp(jnp.asarray(_MAX_EXP - 0.01, x.dtype))
    exact = (jnp.max(r) >= clip) | (jnp.min(ratio) < jnp.sqrt(jnp.finfo(x.dtype).tiny))
    return new, lax.cond(exact, lambda: _weight_log_mgf(x, v, new, c), lambda: lm_old + jnp.log(ratio))


def _sweep(log_q, prior_w, X, weights, bound, state, mode="shifted"):
    """One sweep of closed-form coordinate updates over every weight; returns the new log-probabilities
    and the state `(L, sez, table)` they leave, kept current one weight at a time."""
    values = prior_w.values
    c, cs = exponent_values(bound, X.dtype), exponent_constants(bound)
    L, sez, table = state

    def body(carry, xs):
        L, sez = carry
        x, v, lq, lp, lm_old = xs
        if lm_old is None:
            lm_old = _log_mgf(x, v, lq, c, cs, mode)
        gL, gE = bound_grads(L, sez, weights, bound)  # (K, n), (n,)
        args = (x, v, lp, lm_old, gL, gE)
        if mode == "each":
            by = lambda how: functools.partial(_update, bound=bound, mode=how)  # noqa: E731
            new, lm_new = lax.cond(_within_powers(x, v), by("powers"), by("shifted"), *args)
        else:
            new, lm_new = _update(*args, bound=bound, mode=mode)
        dmean = jnp.sum((jnp.exp(new) - jnp.exp(lq)) * v)
        return (L + lm_new - lm_old, sez + x * dmean), (new, None if table is None else lm_new)

    (L, sez), (log_q, table) = lax.scan(body, (L, sez), (X, values, log_q, prior_w.log_probs, table))
    return log_q, (L, sez, table)


def cavi_sweep(log_q, prior_w, Phi, y, weights, bound):
    """One sweep of closed-form coordinate updates over every weight; returns the new log-probabilities."""
    X, mode = _signed_columns(Phi, y), exponentials(prior_w, Phi, y)
    return _sweep(log_q, prior_w, X, weights, bound, _state(log_q, prior_w.values, X, bound, mode), mode)[0]


def fit_cavi(logits, prior_w, Phi, y, weights, *, bound, max_iter, tol, mode="shifted"):
    """Sweeps until the ELBO bound gains less than `tol * sum(weights)` or `max_iter` sweeps.

    The rows' log-MGFs are computed once, at the start; each sweep keeps them current. `mode`: how the
    exponentials are computed, `"shifted"`, or `"powers"` or `"each"` where `exponentials` says so.
    """
    X = _signed_columns(Phi, y)
    n = jnp.sum(weights)
    elbo = lambda log_q, state: _elbo(log_q, prior_w, state[0], state[1], weights, bound)  # noqa: E731
    log_q = jax.nn.log_softmax(logits, axis=-1)
    state = _state(log_q, prior_w.values, X, bound, mode)
    e0 = elbo(log_q, state)
    trace = jnp.full((max_iter + 1,), e0)

    def cond(st):
        it, *_, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, log_q, state, value, tr, _ = st
        new, new_state = _sweep(log_q, prior_w, X, weights, bound, state, mode)
        new_value = elbo(new, new_state)
        better = new_value >= value  # guards against rounding: keep the better of the two
        log_q, state = jax.tree.map(lambda a, b: jnp.where(better, a, b), (new, new_state), (log_q, state))
        done = ~(new_value - value > tol * n)
        value = jnp.maximum(new_value, value)
        return it + 1, log_q, state, value, tr.at[it + 1].set(value), done

    it, log_q, _, _, tr, done = lax.while_loop(
        cond, body, (jnp.asarray(0), log_q, state, e0, trace, jnp.asarray(False))
    )
    tr = jnp.where(jnp.arange(max_iter + 1) <= it, tr, tr[it])
    return log_q, fit_info(tr, it, done, optimizer="cavi")
