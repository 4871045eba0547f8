r"""Exact predictive log density of a mean-field DIRECT regression posterior, batched over points.

Model: $Y = F + E$, $F = \sum_j \Phi^*_j w_j$ with independent discrete $w_j$
(levels `values[j, k]`, probabilities `qw[j, k]`), $E \sim N(0, s)$ with $s$ discrete
(levels `svals`, probabilities `qn`). Per point (one at a time in a `lax.map`, or `batch_size` vectorized),
with no Python loop over points:

1. Exponential tilting (an exact identity): $p(y) = M(\tau) e^{-\tau y} p_\tau(y)$, with Newton steps
   on $\tau$ until the tilted mean is within `newton_tol` tilted sds of `y` (points near the mean
   keep $\tau = 0$); each step's tilted moments take one exponential per atom. $\log M_F$ is accumulated as
   $\tau c_j + \mathrm{log1p}(\sum_k \hat q_{jk}\,\mathrm{expm1}(\tau(a_{jk}-c_j)))$, so its rounding
   error scales with the tilt, not with `b`.
2. The trapezoid rule for $p_\tau(y) = \frac1{2\pi}\int \varphi_\tau(t) e^{-ity}dt$ on `K` nodes
   $t_n = nh$, $h = 2\pi/L$. With `target` set, `K` (a multiple of `group`, at most `num_nodes`) and `L`
   are the fewest nodes, and their best step, whose alias and truncation bounds below sum to at most
   `target` times a Gaussian estimate of $p_\tau(y)$; the caller redoes the points that estimate
   misjudged. Without it every point gets `num_nodes` and the step balancing aliasing against truncation.
3. $\varphi_\tau(t_n) = \prod_j (1 + \psi_j(n))$, $\psi_j(n) = \sum_k p_{jk}(\omega_{jk}^n - 1)$,
   $\omega_{jk} = e^{ih d_{jk}}$, $d_{jk} = a_{jk} - m_j$ centred at the tilted factor mean.
   $\omega - 1$ comes from a short Taylor series after range reduction and three angle doublings; the
   powers from the recurrence $z_{n+1} = z_n + \epsilon + z_n\epsilon$ ($z_n = \omega^n - 1$),
   a `lax.while_loop` over groups of nodes with levels-major `(m, b)` arrays, the weights in chunks of
   about `chunk` atoms that each run all their nodes while their arrays stay in cache. The product over
   `j` is a pairwise tree (within the chunks, then across them) in the "minus one" form $\psi_{ab} = \psi_a + \psi_b + \psi_a\psi_b$ (all $|1+\psi| \le 1$,
   so nothing under- or overflows). Cost per point: `K*b*m` complex multiply-adds, no transcendentals.

Error bound (absolute, on the tilted density $Q \approx p_\tau(y)$):

* aliasing (rigorous): Poisson summation gives $\sum_k p_\tau(y + kL)$; for any $\lambda > 0$,
  $p_\tau(x) \le e^{-\lambda x} M_{F_\tau}(\lambda)\sum_s w_s e^{\lambda\tau s+\lambda^2 s/2}/\sqrt{2\pi s}$
  (Chernoff on the Gaussian components), so the aliases $k \ge 1$ sum to at most that bound times
  $r/(1-r)$, $r=e^{-\lambda L}$, and likewise with $-\lambda$ for $k \le -1$.
  $M_{F_\tau}$ is evaluated exactly at $\lambda$ = 3.5 and 7 tilted sds per side (from one exponential
  per atom and side: with $g = e^{\lambda_0 (d - d_{max})} \le 1$, $M_j(2\lambda_0)$ takes $g^2$;
  probabilities that underflowed add at most $(m+1)$ `tiny` to each factor's sum); 48 candidate `L`.
* truncation (rigorous): $|\varphi_F| \le 1$ and $h\sum_{n\ge K} f(nh) \le \int_{(K-1)h}^\infty f$
  for decreasing $f$, giving $\frac1\pi\sum_s w_s\sqrt{\pi/2s}\,\mathrm{erfc}((K-1)h\sqrt{s/2})$.
* rounding (a first-order worst-case model with safety factor `kappa`, assuming elementary functions
  accurate to a few ulp): a per-node term proportional to $t_n$ times the sizes of the atoms and
  levels, plus the tree product's and the quadrature sum's rounding, plus the relative rounding error of
  the prefactor $M(\tau)e^{-\tau y}$.

The relative bound is $\rho_{pre} + \mathrm{abs}/(Q-\mathrm{abs})$ (`inf` if $Q \le \mathrm{abs}$).
Where it exceeds the caller's tolerance, `predictive_log_density` redoes the point with all of 4x the nodes;
on concrete rows one compiled program serves both passes, the nodes and the target being operands
(`_shared_kernel`; docs/decisions/compilation.md#one-density-program-for-every-pass).
Why this kernel: docs/decisions/default-recipe.md#the-exact-predictive-density.
"""

from __future__ import annotations

import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._base.buckets import to_device
from .._base.checks import as_float_array, check_finite, check_ndim, host_arrays
from .._base.compiling import lean_jit
from .families import MeanField
from .grids import DiscretePrior
from .regression import check_phi_new, check_regression_args


def _pad_pow2(x, axis=-1):
    n = x.shape[axis]
    p = 1 << max(0, (n - 1).bit_length())
    if p == n:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, p - n)
    return jnp.pad(x, pad)


def _tree_sum(x):
    """Pairwise sum over the last axis with an explicit tree (error <= ceil(log2 n) u sum|x|)."""
    x = _pad_pow2(x)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def _expm1_i(theta, nterms):
    """(Re, Im) of e^{i theta} - 1 without libm trig: range reduction to [-pi, pi], Taylor series at
    theta/8, three doublings (1 + e)^2 - 1 = e (2 + e). Accurate relative to |e^{i theta} - 1|."""
    dt = theta.dtype
    two_pi = jnp.asarray(2.0 * math.pi, dt)
    x = theta - two_pi * jnp.round(theta / two_pi)
    y = x * jnp.asarray(0.125, dt)
    z = y * y
    # re = sum_{j>=1} (-1)^j y^{2j}/(2j)!   im = sum_{j>=0} (-1)^j y^{2j+1}/(2j+1)!
    re = jnp.zeros_like(z)
    for j in range(nterms, 0, -1):
        re = re * z + jnp.asarray((-1) ** j / math.factorial(2 * j), dt)
    re = re * z
    im = jnp.zeros_like(z)
    for j in range(nterms, -1, -1):
        im = im * z + jnp.asarray((-1) ** j / math.factorial(2 * j + 1), dt)
    im = im * y
    for _ in range(3):
        re, im = 2.0 * re + re * re - im * im, 2.0 * im + 2.0 * re * im
    return re, im


def _cmul(ar, ai, br, bi):
    return ar * br - ai * bi, ar * bi + ai * br


def _node_counts(cap, group):
    """The node counts a point may be given, multiples of `group` up to `cap` (about 16 of them)."""
    top = max(group, cap // group * group)
    ks = {top}
    k = float(top)
    while k > group:
        k /= 1.19
        ks.add(max(group, int(math.ceil(k / group)) * group))
    return tuple(sorted(ks))


def _point(
    phi,
    y,
    *,
    log_qhat,
    qhat,
    values,
    log_qn,
    svals,
    node_cap,
    target_nodes,
    num_nodes,
    target,
    target_mode,
    max_newton,
    newton_tol,
    kappa,
    lam_base,
    num_lams,
    group,
    chunk,
):
    dt = phi.dtype
    fi = jnp.finfo(dt)
    u = fi.eps * 0.5
    m, b = values.shape  # levels-major: reductions over levels vectorize along the weights
    S = svals.shape[0]
    tail_nodes = 64 if dt == jnp.float64 else 32  # nodes per step of the quadrature's sums (the first pass's)
    nterms = 7 if dt == jnp.float64 else 4  # series terms at |y| <= pi/8

    a = phi[None] * values  # (m, b) atoms of phi_j w_j
    c = jnp.sum(qhat * a, 0)  # untilted factor means
    d0 = a - c[None]
    mu0 = _tree_sum(c)
    log_sqrt_2pi_s = 0.5 * jnp.log(2.0 * math.pi * svals)
    support = qhat > 0

    def noise_moments(tau):
        lw = log_qn + 0.5 * tau**2 * svals
        lme = jax.nn.logsumexp(lw)
        w = jnp.exp(lw - lme)
        me = jnp.sum(w * tau * svals)
        ve = jnp.maximum(jnp.sum(w * (svals + (tau * svals) ** 2)) - me**2, 0.0)
        return lme, w, me, ve

    def moments(tau):  # tilted mean and variance of Y, one exponential per atom
        z = tau * d0
        zmax = jnp.max(jnp.where(support, z, -jnp.inf), 0, keepdims=True)
        e = jnp.where(support, qhat * jnp.exp(z - zmax), 0.0)
        p = e / jnp.sum(e, 0, keepdims=True)
        delta = jnp.sum(p * d0, 0)
        var_f = jnp.sum(p * (d0 - delta[None]) ** 2)
        _, _, me, ve = noise_moments(tau)
        return mu0 + _tree_sum(delta) + me, var_f + ve

    zero = jnp.zeros((), dt)
    delta0 = jnp.sum(qhat * d0, 0)
    mean0 = mu0 + _tree_sum(delta0)
    var0 = jnp.sum(qhat * (d0 - delta0[None]) ** 2) + noise_moments(zero)[3]

    def cond(cst):
        it, tau, mean, var = cst
        return (it < max_newton) & (jnp.abs(mean - y) > newton_tol * jnp.sqrt(var))

    def body(cst):
        it, tau, mean, var = cst
        sd = jnp.sqrt(var)
        step = jnp.clip((y - mean) / var, -3.0 / sd, 3.0 / sd)
        mean, var = moments(tau + step)
        return it + 1, tau + step, mean, var

    _, tau, _, _ = lax.while_loop(cond, body, (jnp.asarray(0), zero, mean0, var0))

    def tilted(tau):  # (D, X, p): log E_qhat e^{tau (a - c)}, its rounding scale, tilted probabilities
        z = tau * d0
        em = jnp.expm1(z)
        X = jnp.sum(qhat * em, 0)

        def small(_):  # log1p form: the rounding error of sum_j D_j scales with the tilt, not with b
            D = jnp.log1p(X)
            return D, 2.0 * jnp.sum(qhat * jnp.abs(em), 0), qhat * (1.0 + em) / (1.0 + X)[None]

        def big(_):
            D_small = jnp.log1p(X)
            D_big = jax.nn.logsumexp(log_qhat + z, axis=0)
            ok = jnp.abs(X) < 0.5
            D = jnp.where(ok, D_small, D_big)
            Xb = jnp.where(ok, 2.0 * jnp.sum(qhat * jnp.abs(em), 0), 1.0 + u * jnp.abs(D))
            return D, Xb, jnp.exp(log_qhat + z - D[None])

        return lax.cond(jnp.all(jnp.abs(X) < 0.5), small, big, None)

    def untilted(_):
        return jnp.zeros((b,), dt), jnp.zeros((b,), dt), qhat

    D, Xb, p = lax.cond(tau == 0, untilted, tilted, tau)
    lme, w, me, ve = noise_moments(tau)
    delta = jnp.sum(p * d0, 0)  # tilted mean - c_j
    d = d0 - delta[None]  # atoms centred at the tilted factor means
    v_tot = jnp.sum(p * d**2) + ve
    sd_tot = jnp.sqrt(v_tot)
    mu_F = mu0 + _tree_sum(delta)
    Delta = y - (mu_F + me)  # offset of y from the tilted mean of Y
    Delta_F = y - mu_F
    logw = jnp.log(w)

    # --- step h = 2 pi / L: rigorous alias and truncation bounds evaluated for candidate L, best taken.
    # Alias (k >= 1 side, any lam > 0): e^{-lam Delta_F} M_{F_tau - mu_F}(lam) C(lam) r/(1-r), r = e^{-lam L};
    # log M is independent of L, so a few lam per side serve every candidate L. The lam are lam_base * 2^i
    # / sd, so one exponential per atom and side serves them all: with g = e^{lam_0 (d - d_max)} <= 1,
    # M_j(2^i lam_0) = e^{2^i lam_0 d_max} sum_k p g^(2^i); probabilities below `tiny` that rounded to zero
    # add at most m * tiny to each sum.
    lam_grid = lam_base * (2.0 ** jnp.arange(num_lams, dtype=dt)) / sd_tot

    def log_chernoff(sign):  # log[e^{-sign lam Delta_F} M(sign lam) C(sign lam)] for every lam: (nl,)
        sd_ = sign * d
        top = jnp.max(jnp.where(support, sd_, -jnp.inf), 0)  # (b,)
        g = jnp.where(support, jnp.exp(lam_grid[0] * (sd_ - top[None])), 0.0)
        lmf = []
        for i in range(num_lams):
            s_i = jnp.sum(p * g, 0) + (m + 1) * fi.tiny
            lmf.append(jnp.sum(lam_grid[i] * top + jnp.log(s_i)))
            g = g * g
        lmf = jnp.stack(lmf)
        lc = jax.nn.logsumexp(
            logw
            + sign * lam_grid[:, None] * tau * svals
            + 0.5 * lam_grid[:, None] ** 2 * svals
            - log_sqrt_2pi_s,
            -1,
        )
        return -sign * lam_grid * Delta_F + lmf + lc

    lch_p, lch_m = log_chernoff(1.0), log_chernoff(-1.0)
    zc = jnp.asarray([2.0 * 1.12**i for i in range(48)], dt)  # 2 .. ~400 sds
    Lc = 2.0 * jnp.abs(Delta) + zc * sd_tot

    def log_alias(Lv):  # (nL,) -> (nL,)
        r = lam_grid[None] * Lv[:, None]
        geo = -r - jnp.log(-jnp.expm1(-r))
        return jnp.logaddexp(jnp.min(lch_p[None] + geo, -1), jnp.min(lch_m[None] + geo, -1))

    def log_trunc(T):  # log of (1/pi) sum_s w_s sqrt(pi/(2s)) erfc(T sqrt(s/2))
        e = jax.scipy.special.erfc(T[..., None] * jnp.sqrt(0.5 * svals))
        terms = logw + 0.5 * jnp.log(0.5 * math.pi / svals) + jnp.log(jnp.maximum(e, fi.tiny))
        return jax.nn.logsumexp(terms, axis=-1) - math.log(math.pi)

    la = log_alias(Lc)

    def by_nodes(_):  # every point gets `num_nodes` nodes; the step balances aliasing against truncation
        K = jnp.asarray(num_nodes, jnp.int32)
        return K, jnp.argmin(jnp.logaddexp(la, log_trunc(2.0 * math.pi * (K.astype(dt) - 1) / Lc)))

    def by_target(_):  # the fewest nodes of at most `target_nodes` (and their best step) whose alias +
        # truncation bound is below `target` times a Gaussian estimate of the tilted density at y; the caller
        # redoes the points this estimate misjudged
        ks = jnp.asarray(_node_counts(target_nodes, group), dt)
        q_est = jnp.exp(-0.5 * Delta**2 / v_tot) / jnp.sqrt(2.0 * math.pi * v_tot)
        score = jnp.logaddexp(la[None], log_trunc(2.0 * math.pi * (ks[:, None] - 1) / Lc[None]))  # (nK, nL)
        ok = jnp.min(score, -1) <= jnp.log(target * q_est)
        i_k = jnp.where(jnp.any(ok), jnp.argmax(ok), ks.shape[0] - 1)
        return ks[i_k].astype(jnp.int32), jnp.argmin(score[i_k])

    if target_mode is None:  # the concrete path's shared program: the mode is an operand
        K, i_best = lax.cond(target > 0, by_target, by_nodes, None)
    else:
        K, i_best = by_target(None) if target_mode else by_nodes(None)
    L = Lc[i_best]
    h = 2.0 * math.pi / L

    # --- characteristic function at the nodes: psi_j(n) = sum_k p_jk (omega_jk^n - 1) by the running power
    # z_{n+1} = z_n + eps + z_n eps (z_n = omega^n - 1, eps = omega - 1), levels-major layout (m, b) so the
    # elementwise work vectorizes along j; `group` nodes per loop step, as many steps as the point needs.
    # The product over j is a pairwise tree in the "minus one" form, with a first-order rounding bound.
    er1, ei1 = _expm1_i(h * d, nterms)  # (m, b): omega - 1

    def tree_product(psr, psi):  # (g, b) -> (g,) phi - 1 and rounding terms
        psr, psi = _pad_pow2(psr), _pad_pow2(psi)
        tree = jnp.zeros(psr.shape[:1], dt)
        while psr.shape[-1] > 1:
            half = psr.shape[-1] // 2
            ar, ai, br_, bi_ = psr[:, :half], psi[:, :half], psr[:, half:], psi[:, half:]
            na = jnp.abs(ar) + jnp.abs(ai)
            nb = jnp.abs(br_) + jnp.abs(bi_)
            tree = tree + jnp.sum(na + nb + na * nb, -1)
            pr, pi_ = _cmul(ar, ai, br_, bi_)
            psr, psi = ar + br_ + pr, ai + bi_ + pi_
        return psr[:, 0], psi[:, 0], tree

    # The weights in chunks of a power of two, about `chunk` atoms each (zero padding is a factor of one):
    # each chunk runs all its nodes while its arrays stay in cache; the chunks' products join in the tree's top.
    bc = min(1 << max(0, (chunk // m).bit_length() - 1), 1 << max(0, (b - 1).bit_length()))
    nc = -(-b // bc)

    def chunks(x):  # (m, b) -> (nc, m, bc)
        return jnp.pad(x, ((0, 0), (0, nc * bc - b))).reshape(m, nc, bc).transpose(1, 0, 2)

    def chunk_nodes(xs):
        pc, erc, eic = xs

        def node_group(st):
            it, zr, zi, out = st
            rows_r, rows_i = [], []
            for _ in range(group):
                rows_r.append(jnp.sum(pc * zr, 0))
                rows_i.append(jnp.sum(pc * zi, 0))
                zr, zi = zr + erc + (zr * erc - zi * eic), zi + eic + (zr * eic + zi * erc)
            res = jnp.stack(tree_product(jnp.stack(rows_r), jnp.stack(rows_i)))  # (3, g)
            return it + 1, zr, zi, lax.dynamic_update_slice(out, res, (jnp.asarray(0, jnp.int32), it * group))

        out0 = jnp.zeros((3, -(-node_cap // group) * group), dt)  # room for any K: `node_cap` is static
        return lax.while_loop(
            lambda st: st[0] * group < K,
            node_group,
            (jnp.asarray(0, jnp.int32), jnp.zeros_like(erc), jnp.zeros_like(eic), out0),
        )[3]

    outs = lax.map(chunk_nodes, (chunks(p), chunks(er1), chunks(ei1)))  # (nc, 3, K_pad)
    outs = jnp.pad(outs, ((0, 0), (0, 0), (0, -(-outs.shape[2] // tail_nodes) * tail_nodes - outs.shape[2])))

    # --- the quadrature over the live nodes, `tail_nodes` nodes a step (a point pays for its own nodes only):
    # Q, the sum of its weights (`floor`) and the nodes' rounding terms
    shift = Delta_F - tau * svals  # (S,)
    mad = jnp.sum(p * jnp.abs(d))
    lin = (
        jnp.sum(p * jnp.abs(a))
        + jnp.abs(y)
        + math.ceil(math.log2(max(b, 2))) * jnp.sum(jnp.abs(c + delta))
        + jnp.abs(tau) * jnp.max(svals)
    )

    def tail(i, acc):
        block = lax.dynamic_slice_in_dim(outs, i * tail_nodes, tail_nodes, axis=2)  # (nc, 3, tail_nodes)
        top_r, top_i, top_tree = tree_product(block[:, 0].T, block[:, 1].T)  # the chunks' products joined
        phr, phi_i, tree = 1.0 + top_r, top_i, top_tree + jnp.sum(block[:, 2], 0)  # phi of F_tau - mu_F
        n_idx = (i * tail_nodes + jnp.arange(tail_nodes)).astype(dt)
        t = h * n_idx
        ang = t[None, :] * shift[:, None]  # (S, tail_nodes)
        base = phr[None] * jnp.cos(ang) + phi_i[None] * jnp.sin(ang)  # Re[phi e^{-i t shift}]
        wts = jnp.where(n_idx < K, h, 0.0)
        wts = jnp.where(n_idx == 0, 0.5 * h, wts)
        gauss = jnp.exp(-0.5 * svals[:, None] * t[None] ** 2)  # (S, tail_nodes)
        wg = w[:, None] * gauss * wts[None] / math.pi  # (S, tail_nodes)
        E_n = kappa * u * (
            t * (lin + (m + 1.5 * n_idx + 12.0) * mad) + tree + 8.0 + 0.5 * jnp.max(svals) * t**2
        )
        return acc[0] + jnp.sum(wg * base), acc[1] + jnp.sum(wg), acc[2] + jnp.sum(wg * E_n[None])

    Q, floor, rnd_nodes = lax.fori_loop(0, (K + tail_nodes - 1) // tail_nodes, tail, (zero, zero, zero))

    # --- error bounds (absolute, on Q).
    T = h * (K - 1).astype(dt)
    trunc = jnp.exp(log_trunc(T))
    alias = jnp.exp(la[i_best])
    rnd = rnd_nodes + kappa * u * (K + S + 8).astype(dt) * floor
    abs_err = alias + trunc + rnd

    # prefactor log M(tau) - tau y = sum_j D_j + lme - tau (y - mu0)
    log_pref = _tree_sum(D) + lme - tau * (y - mu0)
    L2 = math.ceil(math.log2(max(b, 2)))
    rho_pre = (
        kappa
        * u
        * (
            (m + 2) * jnp.sum(Xb)
            + (L2 + 2) * jnp.sum(jnp.abs(D))
            + (S + 2) * (1.0 + jnp.abs(lme))
            + jnp.abs(tau) * (jnp.abs(y) + (L2 + m + 2) * jnp.sum(jnp.abs(c)))
            + 2.0 * jnp.abs(log_pref)
            + 8.0
        )
    )
    rel_q = jnp.where(Q > abs_err, abs_err / jnp.maximum(Q - abs_err, fi.tiny), jnp.inf)
    rel = rho_pre + rel_q + rho_pre * rel_q
    safe = jnp.maximum(Q, fi.tiny)
    return log_pref + jnp.log(safe), rel


_KERNEL_STATIC = (
    "num_nodes", "target", "batch_size", "max_newton", "newton_tol", "kappa", "lam_base", "num_lams", "group", "chunk",
)
# `_shared_kernel`'s: the nodes' room and the first pass's count instead of the nodes and the target
_SHARED_STATIC = (
    "node_cap", "target_nodes", *(name for name in _KERNEL_STATIC if name not in ("num_nodes", "target"))
)


@functools.partial(jax.jit, static_argnames=_KERNEL_STATIC)
def log_density_kernel(
    qw,
    qn,
    values,
    svals,
    Phi_new,
    y_new,
    *,
    num_nodes: int,
    target: float | None = None,
    batch_size: int = 1,
    max_newton: int = 200,
    newton_tol: float = 0.5,
    kappa: float = 4.0,
    lam_base: float = 3.5,
    num_lams: int = 2,
    group: int = 4,
    chunk: int = 8192,
):
    """`(log_density, rel_error_bound)`, each `(N,)`, on raw arrays: `qw` `(b, m)` and `qn`
    `(S,)` probabilities, `values` `(b, m)` and `svals` `(S,)` levels. `num_nodes` nodes per point, or
    with `target` the fewest of them whose alias and truncation bound is below `target` times an estimate of
    the point's density. Memory per batch of points is `O(batch_size * (b * m + num_nodes))`."""
    return _shared_kernel(
        qw, qn, values, svals, Phi_new, y_new, np.int32(num_nodes), np.asarray(target or 0.0, Phi_new.dtype),
        None, node_cap=num_nodes, target_nodes=num_nodes, target_mode=target is not None,
        batch_size=batch_size, max_newton=max_newton, newton_tol=newton_tol, kappa=kappa, lam_base=lam_base,
        num_lams=num_lams, group=group, chunk=chunk,
    )  # fmt: skip


# the tuning arguments' defaults, for the concrete path's calls of `_shared_kernel`
_KERNEL_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(log_density_kernel).parameters.items()
    if name in _SHARED_STATIC and param.default is not inspect.Parameter.empty and name != "batch_size"
}


def _shared_kernel(
    qw, qn, values, svals, Phi_new, y_new, num_nodes, target, active, *, node_cap, target_nodes, batch_size,
    max_newton, newton_tol, kappa, lam_base, num_lams, group, chunk, target_mode=None,
):  # fmt: skip
    """`log_density_kernel` with the nodes and the target as operands, so that one program serves the first
    pass and every refinement: with `target` > 0 each point takes the fewest of at most `target_nodes` nodes
    that meet it, else `num_nodes` (traced, at most `node_cap`; `target_mode`, static, fixes the mode). The
    points where `active` (`(N,)`, or `None`: all) is false are padding, computed as zeros."""
    if not 0 < target_nodes <= node_cap:
        raise ValueError(f"`target_nodes` must be in [1, node_cap = {node_cap}], got {target_nodes}")
    dt = Phi_new.dtype
    qw = qw.astype(dt)
    qhat = qw / jnp.sum(qw, -1, keepdims=True)
    qn = qn.astype(dt)
    qn = qn / jnp.sum(qn)
    kw = dict(
        log_qhat=jnp.log(qhat).T,
        qhat=qhat.T,
        values=values.astype(dt).T,
        log_qn=jnp.log(qn),
        svals=svals.astype(dt),
        node_cap=node_cap,
        target_nodes=target_nodes,
        num_nodes=num_nodes,
        target=jnp.asarray(target, dt),
        target_mode=target_mode,
        max_newton=max_newton,
        newton_tol=newton_tol,
        kappa=kappa,
        lam_base=lam_base,
        num_lams=num_lams,
        group=group,
        chunk=chunk,
    )
    zeros = (jnp.zeros((), dt), jnp.zeros((), dt))

    def point(xs):
        phi, y, on = xs
        if on is None:
            return _point(phi, y, **kw)
        return lax.cond(on, lambda: _point(phi, y, **kw), lambda: zeros)

    xs = (Phi_new, y_new.astype(dt), active)
    if batch_size <= 1:  # one point at a time: each point runs only its own Newton steps and nodes
        return lax.map(point, xs)
    bs = max(1, min(batch_size, Phi_new.shape[0]))  # lax.map with batch_size > n scans over zero batches
    return lax.map(point, xs, batch_size=bs)


CHUNK = 256  # the most points per kernel call with concrete inputs (first pass and refinement)
MIN_CALL = 16  # the fewest (the rest padded): few programs serve every number of points


class DensityToleranceError(FloatingPointError):
    """`predictive_log_density` could not meet `rtol` at some points.

    Attributes:
      log_density: `(N,)` the best values found for every point (NumPy).
      rel_error_bound: `(N,)` their relative error bounds; above `rtol` at `failed`.
      failed: indices of the points whose bound exceeds `rtol`.
    """

    def __init__(self, message, log_density, rel_error_bound, failed):
        super().__init__(message)
        self.log_density, self.rel_error_bound, self.failed = log_density, rel_error_bound, failed


TARGET = 0.5  # the first pass's alias + truncation bound, as a fraction of `rtol` times the density estimate


def default_num_nodes(dtype) -> int:
    """The most trapezoid nodes of the first pass: 32 in float32, 64 in float64. With `rtol` set each point
    gets the fewest nodes (a multiple of 4) whose alias and truncation bound is below `rtol / 2` times a
    Gaussian estimate of its density (8 to 12 in float32 and 24 to 28 in float64 where the noise is a sizable
    part of the predictive variance); the points whose bound is not met are redone with more."""
    return 64 if jnp.dtype(dtype) == jnp.float64 else 32


def predictive_log_density(
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    Phi_new: ArrayLike,
    y_new: ArrayLike,
    *,
    rtol: float | str | None = "auto",
    num_nodes: int | None = None,
    max_nodes: int = 1024,
    batch_size: int = 1,
) -> tuple[jax.Array, jax.Array]:
    r"""Exact log predictive density $\log q(y^*)$ of the discrete posterior, without sampling.

    $f = \Phi^* w$ is a sum of `b` independent discrete variables, so its characteristic
    function is $\varphi(t) = \prod_j \sum_k q_{jk} e^{i t \Phi^*_j v_{jk}}$; with Gaussian noise of
    variance $s$ drawn from $q_\sigma$,

    $$
    q(y) = \sum_s q_\sigma(s)\,\frac{1}{2\pi}\int \varphi(t)\, e^{-s t^2/2} e^{-i t y}\,dt .
    $$

    Each point is computed by exponential tilting (an exact identity that moves the point to the mode of
    a reweighted posterior) and the trapezoid rule on at most `num_nodes` nodes whose step is chosen per
    point (with `rtol` set, the fewest nodes whose alias and truncation bound is below `rtol / 2` times a
    Gaussian estimate of the point's density); the returned relative error bound covers aliasing and
    truncation rigorously and rounding by a worst-case first-order model (derivations in the module
    docstring). Cost per point: `K * b * m` complex multiply-adds for its `K` nodes.

    With concrete inputs every returned point meets `rtol`: the points whose bound exceeds it are redone
    with all of 4x the nodes, up to `max_nodes` (a point whose bound did not at least halve has reached the rounding
    floor of its dtype), and float32 points still above it are redone in float64. A point that meets
    `rtol` in neither (so far in a tail, or in so deep a valley of a spiky density, that its density is below
    the quadrature's rounding floor) raises `FloatingPointError`. Inside a `jit` (traced inputs) or with
    `rtol=None` only the first pass runs (with `rtol=None` on all `num_nodes` nodes) and every value comes
    with its bound, which then flags an unreliable one.

    Args:
      q_w: `MeanField` over the weights, logits `(b, m)`.
      q_noise: `MeanField` over the noise variance, logits `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)`, as for
        `regression_elbo`.
      prior_noise: `DiscretePrior` `(1, m_sigma)` over positive variances.
      Phi_new: `(N, b)` test features.
      y_new: `(N,)` test targets (on the scale the model was fit on).
      rtol: relative error bound above which a point is refined; `"auto"`: 1e-2 in float32 (whose
        rounding floor is about 3e-3 at b = 2000) and 1e-6 in float64; `None`: no refinement.
      num_nodes: the most nodes of the first pass (all of them with `rtol=None`); default 32 in float32,
        64 in float64.
      max_nodes: the most nodes refinement goes to.
      batch_size: points vectorized together; 1: one at a time, each running only its own Newton steps
        and nodes.

    Returns:
      `(log_density, rel_error_bound)`, each `(N,)`.

    Raises:
      DensityToleranceError: (a `FloatingPointError`) with `rtol` set, when some points' density could not be
        computed to `rtol`; it carries the best values and bounds of every point.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> prior_w = kronvi.model.gaussian_prior(2, 1.0, levels=3)
      >>> prior_n = kronvi.model.noise_prior(0.5, levels=1)
      >>> q_w, q_n = kronvi.model.MeanField(prior_w.log_probs), kronvi.model.MeanField(prior_n.log_probs)
      >>> ld, err = kronvi.model.predictive_log_density(
      ...     q_w, q_n, prior_w, prior_n, jnp.zeros((1, 2)), jnp.zeros(1))
      >>> round(float(ld[0]), 4), bool(err[0] < 1e-3)  # N(0, 0.5) at 0: -0.5 log(pi)
      (-0.5724, True)
    """
    return _predictive_log_density(
        q_w, q_noise, prior_w, prior_noise, Phi_new, y_new, rtol=rtol, num_nodes=num_nodes,
        max_nodes=max_nodes, batch_size=batch_size, strict=True,
    )  # fmt: skip


@functools.partial(jax.jit, static_argnums=0)
def _join_padded(sizes, outs):
    """The kernel calls' `outs` `(ld, err)`, each cut to its `sizes` points (its padding dropped), joined in
    one program."""
    return [jnp.concatenate([out[i][:n] for n, out in zip(sizes, outs, strict=True)]) for i in (0, 1)]


@jax.jit
def _rows(Phi, y, idx):
    """`(Phi[idx], y[idx])` in one program."""
    return Phi[idx], y[idx]


# the kernel on concrete data, with XLA's older CPU fusion emitters: it compiles in about 3/4 of the time and
# runs faster (`docs/decisions/compilation.md#cheaper-compilation-for-the-small-programs`); the nodes and the
# target are operands: one program serves the first pass and the refinements
# (`docs/decisions/compilation.md#one-density-program-for-every-pass`)
_lean_kernel = lean_jit(_shared_kernel, static_argnames=_SHARED_STATIC)


@jax.jit
def _kernel_arrays(q_w, q_noise, prior_w, prior_noise):
    """`log_density_kernel`'s probabilities and levels, in one program."""
    return q_w.probs, q_noise.probs[0], prior_w.values, prior_noise.values[0]


def _predictive_log_density(
    q_w, q_noise, prior_w, prior_noise, Phi_new, y_new, *, rtol, num_nodes, max_nodes, batch_size, strict
):
    check_regression_args(q_w, q_noise, prior_w, prior_noise)
    Phi_new = check_phi_new(Phi_new, prior_w)
    y_new = as_float_array(y_new, "y_new")
    check_ndim(y_new, 1, "y_new", "(num_points,)")
    if y_new.shape[0] != Phi_new.shape[0]:
        raise ValueError(f"`y_new` has {y_new.shape[0]} points but `Phi_new` has {Phi_new.shape[0]}")
    check_finite(y_new, "y_new")
    if num_nodes is None:
        num_nodes = default_num_nodes(Phi_new.dtype)
    if int(num_nodes) < 2 or int(max_nodes) < 2:
        raise ValueError(f"`num_nodes` and `max_nodes` must be >= 2, got {num_nodes} and {max_nodes}")
    if isinstance(rtol, str):
        if rtol != "auto":
            raise ValueError(f"`rtol` must be a positive number, 'auto' or None, got {rtol!r}")
        rtol = 1e-6 if Phi_new.dtype == jnp.float64 else 1e-2
    if rtol is not None and not rtol > 0:
        raise ValueError(f"`rtol` must be positive or None, got {rtol}")
    arrays = _kernel_arrays(q_w, q_noise, prior_w, prior_noise)

    if int(batch_size) < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}")
    first = None if rtol is None else TARGET * rtol

    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((arrays, Phi_new, y_new)))
    if traced or Phi_new.shape[0] == 0:  # compiler options only at the top level
        return log_density_kernel(
            *arrays, Phi_new, y_new, num_nodes=int(num_nodes), target=first, batch_size=int(batch_size)
        )

    host = host_arrays(Phi_new, y_new)
    # every call of this function's passes on `size` points (padding inactive) with room for every node count
    # it may use: one compiled kernel serves the first pass and the refinements
    node_cap = int(num_nodes) if rtol is None else max(int(num_nodes), int(max_nodes))

    def call_size(points):  # a power of two from `MIN_CALL` (and `batch_size`) up
        return max(1 << (points - 1).bit_length(), MIN_CALL, int(batch_size))

    size = call_size(min(Phi_new.shape[0], CHUNK))
    dtype = np.dtype(Phi_new.dtype)

    def run_in_chunks(idx, K, target=None):
        """The points `idx` in calls of `size` points (the last call padded with inactive repeats), `K`
        nodes each or, with `target`, the fewest of at most `K` that meet it. Returns device arrays (NumPy
        arrays for inputs in host memory: their rows are picked and joined by NumPy, with no program per
        number of points); all calls are dispatched before any result is read."""
        if not K <= node_cap:  # the kernel's arrays have room for `node_cap` nodes
            raise AssertionError(f"{K} nodes in a kernel with room for {node_cap}")
        sizes, outs = [], []
        for s in range(0, idx.size, size):
            part = idx[s : s + size]
            # vectorized batches (`batch_size` > 1) compute their inactive points: as few as a power of two
            call = size if int(batch_size) <= 1 else call_size(part.size)
            padded = np.concatenate([part, np.full(call - part.size, part[-1])])
            active = np.arange(call) < part.size
            sizes.append(part.size)
            rows = (host[0][padded], host[1][padded]) if host is not None else _rows(Phi_new, y_new, padded)
            outs.append(
                _lean_kernel(
                    *arrays, *rows, np.int32(K), np.asarray(target or 0.0, dtype), active, node_cap=node_cap,
                    target_nodes=int(num_nodes), batch_size=int(batch_size), **_KERNEL_DEFAULTS,
                )
            )
        if host is not None:
            outs = jax.device_get(outs)
            return [np.concatenate([o[i][:n] for n, o in zip(sizes, outs, strict=True)]) for i in (0, 1)]
        return _join_padded(tuple(sizes), outs)

    ld, err = run_in_chunks(np.arange(Phi_new.shape[0]), num_nodes, first)
    if rtol is None:
        return (ld, err) if host is None else (to_device(ld), to_device(err))  # one pass
    ld, err = _refine(run_in_chunks, np.array(ld), np.array(err), int(num_nodes), rtol, int(max_nodes))
    bad = np.flatnonzero(~(err <= rtol))
    if bad.size and Phi_new.dtype != jnp.float64:  # below float32's rounding floor: redo them in float64
        with jax.enable_x64(True):
            def to64(a):  # cast by NumPy, then placed: no program to compile
                return to_device(a, np.float64)

            q64 = [kronvi_type(to64(getattr(a, f))) for a, kronvi_type, f in (
                (q_w, type(q_w), "logits"), (q_noise, type(q_noise), "logits"))]  # fmt: skip
            p64 = [type(p)(to64(p.values), to64(p.log_probs)) for p in (prior_w, prior_noise)]
            l2, e2 = _predictive_log_density(
                *q64, *p64, to64(np.asarray(Phi_new)[bad]), to64(np.asarray(y_new)[bad]), rtol=rtol,
                num_nodes=None, max_nodes=max_nodes, batch_size=batch_size, strict=False,
            )  # fmt: skip
        l2 = np.asarray(l2)
        # the value returned in float32 also carries the rounding of the log density to float32
        e2 = np.asarray(e2) + np.expm1(np.finfo(err.dtype).eps * (1.0 + np.abs(l2)))
        better = e2 < err[bad]
        ld[bad[better]], err[bad[better]] = l2[better], e2[better]
        bad = np.flatnonzero(~(err <= rtol))
    if bad.size and strict:
        raise DensityToleranceError(
            f"the predictive density of {bad.size} of {err.size} points could not be computed to `rtol`={rtol} "
            f"(worst relative error bound {np.max(err[bad]):.3g}, first point {bad[0]}, with up to {max_nodes} "
            "nodes in float64): they lie below the quadrature's rounding floor, far in a tail or in a valley of a "
            "spiky density. The error's `log_density` and `rel_error_bound` hold the best values and their "
            "bounds; `rtol=None` returns one pass of every value with its bound.",
            ld, err, bad,
        )  # fmt: skip
    return to_device(ld), to_device(err)


def _refine(run_in_chunks, ld, err, K, rtol, max_nodes):
    """Redoes the points whose bound exceeds `rtol` with all of 4x the nodes, up to `max_nodes`, keeping the
    better result; a point whose bound did not at least halve is at its dtype's rounding floor and is left."""
    todo = np.ones(err.shape, bool)
    while K < max_nodes:
        bad = np.flatnonzero(todo & ~(err <= rtol))
        if bad.size == 0:
            break
        K = min(4 * K, max_nodes)
        l2, e2 = (np.asarray(v) for v in run_in_chunks(bad, K))
        better = e2 < err[bad]
        todo[bad[~(e2 <= 0.5 * err[bad])]] = False  # at the rounding floor: more nodes will not help
        ld[bad[better]], err[bad[better]] = l2[better], e2[better]
    return ld, err
