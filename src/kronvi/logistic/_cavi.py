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
two passes of exponentials over the `(n, K, m)` terms of each weight. Why it is the study's fit:
`docs/decisions/classifier.md#coordinate-ascent-from-a-laplace-start-a-warm-newton-start`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .._base.precision import dot, matmul
from .._solvers.info import fit_info
from ._bound import bound_from_mgfs, bound_grads, exponent_values

_MAX_EXP = 60.0  # exponents of a level's MGF ratio are clipped here (the level's new mass is ~0 anyway)
_MIN_LOGIT = -200.0
_TABLE_LIMIT = 1 << 25  # numbers in the (b, K, n) table of per-weight log-MGFs kept between sweeps


def _weight_log_mgf(x, v, log_q, c):
    r"""$\log\sum_k q_k e^{c\, x_i v_k}$, `(K, n)`, for one weight: signed column `x (n,)`, levels
    `v (m,)`, log-probabilities `log_q (m,)`, exponents `c (K,)`. The sum over the `m` levels is
    written out, so that it streams over the rows (XLA's reduction over the middle axis of a
    `(K, m, n)` array does not, once it outgrows the cache)."""
    terms = [c[:, None] * (v[k] * x)[None, :] + log_q[k] for k in range(v.shape[0])]
    top = functools.reduce(jnp.maximum, terms)
    return top + jnp.log(functools.reduce(jnp.add, [jnp.exp(t - top) for t in terms]))


def _signed_columns(Phi, y):
    """`(b, n)`: column `j` is $s_i \\Phi_{ij}$, $s = 2y - 1$ (one contiguous row per weight)."""
    return ((2.0 * y - 1.0)[:, None] * Phi).T


def _keeps_table(X, bound) -> bool:
    return X.shape[0] * X.shape[1] * exponent_values(bound, X.dtype).shape[0] <= _TABLE_LIMIT


def _state(log_q, values, X, bound):
    r"""`(L, sez, table)`: the rows' log-MGFs `(K, n)`, $s_i E_q z_i$ `(n,)` and the per-weight
    log-MGFs `(b, K, n)` (`None` above `_TABLE_LIMIT` numbers)."""
    c = exponent_values(bound, X.dtype)
    terms = (X, values, log_q)
    if _keeps_table(X, bound):
        table = lax.map(lambda t: _weight_log_mgf(*t, c), terms)
        L = jnp.sum(table, axis=0)
    else:
        table = None
        L = lax.fori_loop(
            0,
            X.shape[0],
            lambda j, acc: acc + _weight_log_mgf(X[j], values[j], log_q[j], c),
            jnp.zeros((c.shape[0], X.shape[1]), X.dtype),
        )
    sez = matmul(jnp.sum(jnp.exp(log_q) * values, axis=-1), X)
    return L, sez, table


def _elbo(log_q, prior_w, L, sez, weights, bound):
    q = jnp.exp(log_q)
    return jnp.sum(weights * bound_from_mgfs(L.T, sez, bound)) + jnp.sum(q * (prior_w.log_probs - log_q))


def _sweep(log_q, prior_w, X, weights, bound, state):
    """One sweep of closed-form coordinate updates over every weight; returns the new log-probabilities
    and the state `(L, sez, table)` they leave, kept current one weight at a time."""
    values = prior_w.values
    m = values.shape[-1]
    c = exponent_values(bound, X.dtype)
    tiny = jnp.sqrt(jnp.finfo(X.dtype).tiny)
    # a little below exp(_MAX_EXP): the clipped exponentials may round differently in the last bit
    clip = jnp.exp(jnp.asarray(_MAX_EXP - 0.01, X.dtype))
    L, sez, table = state

    def body(carry, xs):
        L, sez = carry
        x, v, lq, lp, lm_old = xs
        if lm_old is None:
            lm_old = _weight_log_mgf(x, v, lq, c)
        gL, gE = bound_grads(L, sez, weights, bound)  # (K, n), (n,)
        # R_ick = exp(c x_i v_k - log m_ic(q)), one (K, n) block per level k, stored level-major
        log_r = c[None, :, None] * (v[:, None, None] * x[None, None, :]) - lm_old[None]
        r = jnp.exp(jnp.minimum(log_r, _MAX_EXP))
        coef = matmul(r.reshape(m, -1), gL.reshape(-1)) + v * dot(gE, x)
        new = jax.nn.log_softmax(jnp.maximum(jax.nn.log_softmax(lp + coef), _MIN_LOGIT))
        ratio = matmul(jnp.exp(new), r.reshape(m, -1)).reshape(lm_old.shape)  # m_ijc(q') / m_ijc(q), (K, n)
        # a clipped exponent or an underflowing ratio: the new row terms from scratch
        exact = (jnp.max(r) >= clip) | (jnp.min(ratio) < tiny)
        lm_new = lax.cond(exact, lambda: _weight_log_mgf(x, v, new, c), lambda: lm_old + jnp.log(ratio))
        dmean = jnp.sum((jnp.exp(new) - jnp.exp(lq)) * v)
        return (L + lm_new - lm_old, sez + x * dmean), (new, None if table is None else lm_new)

    (L, sez), (log_q, table) = lax.scan(body, (L, sez), (X, values, log_q, prior_w.log_probs, table))
    return log_q, (L, sez, table)


def cavi_sweep(log_q, prior_w, Phi, y, weights, bound):
    """One sweep of closed-form coordinate updates over every weight; returns the new log-probabilities."""
    X = _signed_columns(Phi, y)
    return _sweep(log_q, prior_w, X, weights, bound, _state(log_q, prior_w.values, X, bound))[0]


def fit_cavi(logits, prior_w, Phi, y, weights, *, bound, max_iter, tol):
    """Sweeps until the ELBO bound gains less than `tol * sum(weights)` or `max_iter` sweeps.

    The rows' log-MGFs are computed once, at the start; each sweep keeps them current.
    """
    X = _signed_columns(Phi, y)
    n = jnp.sum(weights)
    elbo = lambda log_q, state: _elbo(log_q, prior_w, state[0], state[1], weights, bound)  # noqa: E731
    log_q = jax.nn.log_softmax(logits, axis=-1)
    state = _state(log_q, prior_w.values, X, bound)
    e0 = elbo(log_q, state)
    trace = jnp.full((max_iter + 1,), e0)

    def cond(st):
        it, *_, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, log_q, state, value, tr, _ = st
        new, new_state = _sweep(log_q, prior_w, X, weights, bound, state)
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
