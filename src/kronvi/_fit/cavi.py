r"""Exact coordinate ascent (CAVI) for mean-field DIRECT regression.

As a function of one factor the ELBO is $-KL(q_j \| q_j^*) + \text{const}$; a sweep sets every weight
to its optimum in turn, then the noise, so the ELBO never decreases.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from .._base.deprecation import reordered_arguments
from .._base.precision import dot
from .._model.families import MeanField, grid_moments
from .._model.grids import DiscretePrior
from .._model.regression import coordinate_optimum, elbo_from_logits, noise_moments, noise_update
from .._solvers.info import fit_info
from .._stats.regression import RegressionStats

ORDERS = ("random", "cyclic", "greedy", "gain")


def _old_order(args):
    return len(args) > 4 and isinstance(args[4], RegressionStats)  # the statistics where they were


_OLD_SWEEP = ("logits_w", "logits_n", "prior_w", "prior_noise", "stats", "order", "temperature")


@reordered_arguments(_OLD_SWEEP[:5], _old_order)
def coordinate_gains(
    stats: RegressionStats,
    logits_w: ArrayLike,
    logits_n: ArrayLike,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
) -> jax.Array:
    r"""ELBO gain of updating each weight alone to its coordinate optimum: $KL(q_j \| q_j^*)$.

    As a function of one factor the ELBO is $-KL(q_j \| q_j^*) + \text{const}$, so this is the
    exact gain of each single-coordinate update; `order="gain"` visits weights by decreasing gain
    (Gauss-Southwell). Cost $O(b^2 + bm)$.
    """
    return _gains(logits_w, logits_n, prior_w, prior_noise, stats)


def _gains(logits_w, logits_n, prior_w, prior_noise, stats):
    e_inv, _, _ = noise_moments(MeanField._unchecked(logits_n), prior_noise)
    probs = jax.nn.softmax(logits_w, -1)
    mean, _ = grid_moments(probs, prior_w.values)
    star = jax.nn.log_softmax(coordinate_optimum(e_inv, mean, dot(stats.PhitPhi, mean), prior_w, stats), -1)
    return jnp.sum(probs * (jax.nn.log_softmax(logits_w, -1) - star), axis=-1)


@reordered_arguments(_OLD_SWEEP, _old_order)
def cavi_sweep(
    stats: RegressionStats,
    logits_w: ArrayLike,
    logits_n: ArrayLike,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    order: ArrayLike,
    temperature: ArrayLike = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """One coordinate-ascent sweep over the weights in `order`, then the noise. Returns new logits."""
    return _sequential_sweep(logits_w, logits_n, prior_w, prior_noise, stats, order, temperature)


def _sequential_sweep(logits_w, logits_n, prior_w, prior_noise, stats, order, temperature=1.0, unroll=1):
    A, c, V, logp = stats.PhitPhi, stats.Phity, prior_w.values, prior_w.log_probs
    e_inv, _, _ = noise_moments(MeanField._unchecked(logits_n), prior_noise)
    mean, _ = grid_moments(jax.nn.softmax(logits_w, -1), V)
    g = dot(A, mean)

    def body(i, carry):
        logits, mean, g = carry
        j = order[i]
        a_jj = A[j, j]
        h = c[j] - (g[j] - a_jj * mean[j])
        v = V[j]
        new = (logp[j] + e_inv * (v * h - 0.5 * a_jj * v * v)) / temperature
        m_new = jnp.sum(jax.nn.softmax(new) * v)
        g = g + A[j] * (m_new - mean[j])
        return logits.at[j].set(new), mean.at[j].set(m_new), g

    logits_w, _, _ = lax.fori_loop(0, order.shape[0], body, (logits_w, mean, g), unroll=unroll)
    logits_n = noise_update(logits_w, prior_w, prior_noise, stats) / temperature
    return logits_w, logits_n


def _block_indices(order, block_size):
    """`order` cut into rows of `block_size`; the last row is padded with the out-of-range index `b`.
    Returns the padded indices, their validity mask and the indices clipped into range (for gathers)."""
    b = order.shape[0]
    num_blocks = -(-b // block_size)
    pad = jnp.full((num_blocks * block_size - b,), b, order.dtype)
    idx = jnp.concatenate([order, pad]).reshape(num_blocks, block_size)
    return idx, idx < b, jnp.minimum(idx, b - 1)


def _sequential_in_block(logits, mean, g, A_SS, c, a, V, logp, ok, e_inv, temperature):
    r"""Exact coordinate updates of one block's weights in turn; `g` holds $(A\bar w)_S$ and is
    kept current with the block's own coupling `A_SS`. Masked (padding) slots are left as they are.
    Unrolled with static indices, which runs faster on a GPU than `lax.fori_loop(..., unroll=True)`
    (`docs/decisions/fitting.md#coordinate-ascent-on-accelerators`)."""
    for i in range(ok.shape[0]):
        h = c[i] - (g[i] - a[i] * mean[i])
        new = (logp[i] + e_inv * (V[i] * h - 0.5 * a[i] * V[i] * V[i])) / temperature
        m_new = jnp.sum(jax.nn.softmax(new) * V[i])
        g = g + A_SS[i] * jnp.where(ok[i], m_new - mean[i], 0.0)
        mean = mean.at[i].set(jnp.where(ok[i], m_new, mean[i]))
        logits = logits.at[i].set(jnp.where(ok[i], new, logits[i]))
    return logits, mean


def jacobi_block_change(logits, mean, g, A_SS, c, a, V, logp, ok, e_inv, temperature=1.0):
    r"""Moves a block $S$ of weights together to their single-coordinate optima $q_j^*$ (the
    others and the noise fixed) and returns `(new_logits, new_means, change, coupling, rounding)`.

    `change` is the exact change of the (tempered) ELBO,
    $T\sum_{j\in S} KL(q_j \| q_j^*) - E[\sigma^{-2}] \sum_{j<k \in S} A_{jk}\Delta\bar w_j\Delta\bar w_k$,
    `coupling` its second term with the sign flipped, and `rounding` a bound on the rounding error of
    the computed gains (machine epsilon times their terms' magnitudes). Arguments are the block's rows: logits
    `(B, m)`, means, $(A\bar w)_S$ `g`, couplings `A_SS` `(B, B)`, $(\Phi^\top y)_S$,
    $A_{jj}$, grid values and log prior `(B, m)`, and a mask `ok` of the slots in use.
    """
    h = c - (g - a * mean)
    new = (logp + e_inv * (V * h[:, None] - 0.5 * a[:, None] * V * V)) / temperature
    m_new = jnp.sum(jax.nn.softmax(new, -1) * V, -1)
    old, star = jax.nn.log_softmax(logits, -1), jax.nn.log_softmax(new, -1)
    p = jnp.where(ok[:, None], jnp.exp(old), 0.0)
    gains = temperature * jnp.sum(p * (old - star))
    rounding = temperature * jnp.finfo(p.dtype).eps * jnp.sum(p * (jnp.abs(old) + jnp.abs(star)))
    d = jnp.where(ok, m_new - mean, 0.0)
    coupling = 0.5 * e_inv * (dot(d, dot(A_SS, d)) - jnp.sum(a * d * d))
    return new, m_new, gains - coupling, coupling, rounding


def damped_jacobi_step(logits, mean, g, A_SS, c, a, V, logp, ok, e_inv, temperature=1.0):
    r"""Moves a block $S$ of weights together towards their single-coordinate optima, damped so that the
    ELBO cannot fall. Returns `(new_logits, new_means, t)`; arguments as for `jacobi_block_change`.

    Each factor moves to the mixture $(1-t)\,q_j + t\,q_j^*$. As a function of $q_j$ alone the (tempered)
    ELBO is $-T\,KL(q_j \| q_j^*)$ plus a constant, which is concave in $q_j$, so this part gains at least
    $t$ times the full gains $G$; the means move by $t\Delta\bar w_j$, so the coupling term is $t^2 C$. The
    ELBO therefore changes by at least $tG - t^2C$: the full move ($t = 1$) when $C \le G/2$ (or $C$ is within
    the gains' rounding error), else $t = G/(2C)$ clipped to $[0, 1]$, which gains at least $G^2/(4C) > 0$
    when $G > 0$ ($t = 0$ when rounding makes $G \le 0$). A block moves whenever it can gain (up to underflow
    of $G/(2C)$), so the fixed points are those of the sequential sweep.
    """
    new, m_star, change, coupling, rounding = jacobi_block_change(
        logits, mean, g, A_SS, c, a, V, logp, ok, e_inv, temperature
    )
    gains = change + coupling
    tiny = jnp.finfo(gains.dtype).tiny
    full = coupling <= jnp.maximum(0.5 * gains, rounding)
    t = jnp.where(full, 1.0, jnp.clip(gains / (2.0 * jnp.maximum(coupling, tiny)), 0.0, 1.0))
    old, star = jax.nn.log_softmax(logits, -1), jax.nn.log_softmax(new, -1)
    mixed = jnp.logaddexp(jnp.log1p(-t) + old, jnp.log(t) + star)  # t = 1: star; t = 0: old
    new_logits = jnp.where(ok[:, None], mixed, logits)
    new_mean = jnp.where(ok, mean + t * (m_star - mean), mean)
    return new_logits, new_mean, t


def _num_slots(b, block_size):
    """Rows of `coupling_blocks`' output: room for up to four times the fewest blocks."""
    return min(b, 4 * -(-b // block_size))


def coupling_blocks(PhitPhi, block_size, *, threshold=0.5):
    r"""Groups the weights into blocks of at most `block_size` weakly coupled weights, for the block-Jacobi
    sweep. Returns `(blocks, num_blocks)`: `blocks` is `(K, block_size)` weight indices padded with `b`, the
    `num_blocks` used rows first.

    With normalized couplings $C_{jk} = |A_{jk}| / \sqrt{A_{jj}A_{kk}}$, weights are visited in index order
    and each joins the first open block where its sum of $C$ to the members already there is at most
    `threshold`, else (every open block too coupled) the open block where that sum is least. Were every
    row sum of a block's $C$ at most 1/2, its correlation matrix would be within 1/2 of the identity
    (Gershgorin) and a Jacobi move would keep most of its gains; the rule bounds only the joining weight's
    sum, so a weight coupled weakly to many later ones (a "hub") can end up with a larger one. It is a
    heuristic for few, large blocks: the damped step keeps the ELBO monotone whatever the blocks are.
    $O(b^2)$ work in $b$ loop steps, once per fit; there are
    $K = \min(b, 4\lceil b / \text{block\_size}\rceil)$ slots.
    """
    b = PhitPhi.shape[0]
    num_slots = _num_slots(b, block_size)
    d = jnp.sqrt(jnp.maximum(jnp.diagonal(PhitPhi), 0.0))
    C = jnp.abs(PhitPhi) / jnp.maximum(d[:, None] * d[None, :], jnp.finfo(PhitPhi.dtype).tiny)
    C = jnp.where(jnp.eye(b, dtype=bool), 0.0, C)

    def body(j, carry):
        load, size, slot = carry  # load[k, i]: sum of C[i, members of k]
        open_ = size < block_size
        fits = open_ & (load[:, j] <= threshold)
        k = jnp.where(fits.any(), jnp.argmax(fits), jnp.argmin(jnp.where(open_, load[:, j], jnp.inf)))
        k = k.astype(jnp.int32)
        return load.at[k].add(C[j]), size.at[k].add(1), slot.at[j].set(k)

    init = (jnp.zeros((num_slots, b), C.dtype), jnp.zeros(num_slots, jnp.int32), jnp.zeros(b, jnp.int32))
    _, size, slot = lax.fori_loop(0, b, body, init)
    by_slot = jnp.argsort(slot, stable=True)  # weights grouped by slot, in index order within a slot
    start = jnp.cumsum(size) - size
    within = jnp.arange(b) - start[slot[by_slot]]
    blocks = (
        jnp.full((num_slots, block_size), b, jnp.int32)
        .at[slot[by_slot], within]
        .set(by_slot.astype(jnp.int32))
    )
    used_first = jnp.argsort(size == 0, stable=True)
    return blocks[used_first], jnp.sum(size > 0, dtype=jnp.int32)


def blocked_sweep(
    logits_w,
    logits_n,
    prior_w,
    prior_noise,
    stats,
    order,
    temperature=1.0,
    *,
    block_size,
    jacobi,
    blocks=None,
):
    r"""A coordinate-ascent sweep in blocks of weights, then the noise.

    Blocks are `block_size` consecutive weights of `order`, or the rows of `blocks` (the pair
    `(rows, num_blocks)` that `coupling_blocks` returns), visited in the order of their first weight in
    `order`. Each block gathers its rows of $A = \Phi^\top\Phi$ once and $A\bar w$ is brought up to date
    after the block with one product $A_{S\cdot}^\top \Delta\bar w_S$, so a sweep runs one loop step per
    block instead of one per weight.

    `jacobi=False`: the block's weights are updated in turn, exactly as `cavi_sweep`
    does (the same updates, rounded differently). `jacobi=True`: the block moves together, damped
    (`damped_jacobi_step`). Either way the ELBO never decreases (beyond rounding), and a fixed point is a
    point where every factor is at its coordinate optimum, as for `cavi_sweep`.
    """
    A, c, V, logp = stats.PhitPhi, stats.Phity, prior_w.values, prior_w.log_probs
    b = A.shape[0]
    a_diag = jnp.diagonal(A)
    e_inv, _, _ = noise_moments(MeanField._unchecked(logits_n), prior_noise)
    mean, _ = grid_moments(jax.nn.softmax(logits_w, -1), V)
    g = dot(A, mean)
    if blocks is None:
        idx, valid, idx_in = _block_indices(order, block_size)
        num_steps = idx.shape[0]
    else:
        blocks, num_blocks = blocks
        rank = jnp.zeros(b, jnp.int32).at[order].set(jnp.arange(b, dtype=jnp.int32))
        first = jnp.min(jnp.where(blocks < b, rank[jnp.minimum(blocks, b - 1)], b), axis=1)
        idx = blocks[jnp.argsort(first)]
        valid, idx_in, num_steps = idx < b, jnp.minimum(idx, b - 1), num_blocks

    def body(k, carry):
        logits, mean, g = carry
        S, ok, Si = idx[k], valid[k], idx_in[k]
        A_S = A[Si]
        A_SS = A_S[:, Si]
        args = (logits[Si], mean[Si], g[Si], A_SS, c[Si], a_diag[Si], V[Si], logp[Si], ok, e_inv, temperature)
        if jacobi:
            l_new, m_new, _ = damped_jacobi_step(*args)
        else:
            l_new, m_new = _sequential_in_block(*args)
        g = g + dot(m_new - args[1], A_S)
        return logits.at[S].set(l_new, mode="drop"), mean.at[S].set(m_new, mode="drop"), g

    logits_w, _, _ = lax.fori_loop(0, num_steps, body, (logits_w, mean, g))
    logits_n = noise_update(logits_w, prior_w, prior_noise, stats) / temperature
    return logits_w, logits_n


SWEEPS = ("auto", "sequential", "blocked", "jacobi", "diagonal")
BLOCK_SIZES = {"blocked": 16, "jacobi": 64}


@reordered_arguments(_OLD_SWEEP, _old_order)
def diagonal_sweep(
    stats: RegressionStats,
    logits_w: ArrayLike,
    logits_n: ArrayLike,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    order: ArrayLike,
    temperature: ArrayLike = 1.0,
) -> tuple[jax.Array, jax.Array]:
    r"""One coordinate-ascent sweep when $\Phi^\top\Phi$ is diagonal (statistics in an eigenbasis,
    `kronvi.stats.eigenbasis`): given the noise the weights do not interact, so every weight's
    coordinate optimum $\log q_j(v) = \log p_j(v) + E[\sigma^{-2}](v c_j - \tfrac12 A_{jj} v^2)$ is
    computed at once, in $O(bm)$, and equals what a sequential sweep in any `order` gives; then the
    noise. The off-diagonal entries of `stats.PhitPhi` are not read: on other statistics this is not a
    coordinate-ascent step."""
    return _diagonal_sweep(logits_w, logits_n, prior_w, prior_noise, stats, order, temperature)


def _diagonal_sweep(logits_w, logits_n, prior_w, prior_noise, stats, order, temperature=1.0):
    del order
    e_inv, _, _ = noise_moments(MeanField._unchecked(logits_n), prior_noise)
    a, V = jnp.diagonal(stats.PhitPhi), prior_w.values
    logits_w = (
        prior_w.log_probs + e_inv * (V * stats.Phity[:, None] - 0.5 * a[:, None] * V * V)
    ) / temperature
    logits_n = noise_update(logits_w, prior_w, prior_noise, stats) / temperature
    return logits_w, logits_n


def sweep_function(sweep: str, PhitPhi):
    """The sweep `fit_cavi` runs on statistics with this `PhitPhi`, with the signature
    `(logits_w, logits_n, prior_w, prior_noise, stats, order, temperature)`; `"jacobi"` groups the
    weights by coupling here, once.

    `"auto"`: `cavi_sweep` when compiled for a CPU, the damped block-Jacobi sweep for an
    accelerator, where each loop step costs kernel launches
    (`docs/decisions/fitting.md#coordinate-ascent-on-accelerators`); the blocks are only built for the accelerator.
    """
    b = PhitPhi.shape[0]
    if sweep == "sequential":
        return _sequential_sweep
    if sweep == "diagonal":
        return _diagonal_sweep
    if sweep == "blocked":
        return functools.partial(blocked_sweep, block_size=min(BLOCK_SIZES[sweep], b), jacobi=False)
    B = min(BLOCK_SIZES["jacobi"], b)
    if sweep == "jacobi":
        blocks = coupling_blocks(PhitPhi, B)
        return functools.partial(blocked_sweep, block_size=B, jacobi=True, blocks=blocks)

    def no_blocks(A):  # what the CPU branch carries: same shapes, never used
        return jnp.full((_num_slots(b, B), B), b, jnp.int32), jnp.asarray(0, jnp.int32)

    blocks = lax.platform_dependent(PhitPhi, cpu=no_blocks, default=lambda A: coupling_blocks(A, B))
    jacobi = functools.partial(blocked_sweep, block_size=B, jacobi=True, blocks=blocks)
    return lambda *args: lax.platform_dependent(*args, cpu=_sequential_sweep, default=jacobi)


@functools.partial(
    jax.jit,
    static_argnames=("max_iter", "tol", "order", "anneal_sweeps", "anneal_start", "sweep"),
)
def fit_cavi(
    logits_w,
    logits_n,
    prior_w,
    prior_noise,
    stats,
    key,
    *,
    max_iter,
    tol,
    order,
    anneal_sweeps,
    anneal_start,
    sweep="auto",
):
    b = logits_w.shape[0]
    sweep_fn = sweep_function(sweep, stats.PhitPhi)
    dtype = logits_w.dtype
    elbo0 = elbo_from_logits(logits_w, logits_n, prior_w, prior_noise, stats)
    trace = jnp.full((max_iter + 1,), elbo0, dtype)
    greedy = jnp.argsort(-jnp.abs(stats.Phity) / jnp.sqrt(jnp.diagonal(stats.PhitPhi) + 1e-30))

    def cond(st):
        it, _, _, tr, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, lw, ln, tr, _ = st
        if sweep == "diagonal":  # the order does not matter
            perm = jnp.arange(b)
        elif order == "random":
            perm = jax.random.permutation(jax.random.fold_in(key, it), b)
        elif order == "gain":
            perm = jnp.argsort(-_gains(lw, ln, prior_w, prior_noise, stats))
        elif order == "greedy":
            perm = greedy
        else:
            perm = jnp.arange(b)
        if anneal_sweeps > 0:
            frac = jnp.minimum(it.astype(dtype) / anneal_sweeps, 1.0)
            temperature = jnp.asarray(anneal_start, dtype) ** (1.0 - frac)
        else:
            temperature = jnp.asarray(1.0, dtype)
        lw, ln = sweep_fn(lw, ln, prior_w, prior_noise, stats, perm, temperature)
        e = elbo_from_logits(lw, ln, prior_w, prior_noise, stats)
        gain = e - tr[it]
        done = (it + 1 > anneal_sweeps) & (gain < tol * stats.n)
        return it + 1, lw, ln, tr.at[it + 1].set(e), done

    it, lw, ln, tr, done = lax.while_loop(
        cond, body, (jnp.asarray(0), logits_w, logits_n, trace, jnp.asarray(False))
    )
    tr = jnp.where(jnp.arange(max_iter + 1) <= it, tr, tr[it])
    return MeanField._unchecked(lw), MeanField._unchecked(ln), fit_info(tr, it, done, optimizer="cavi")
