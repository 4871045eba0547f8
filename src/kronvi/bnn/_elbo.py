r"""The exact mean-field ELBO of the quadratic network (Evans & Nair 2018, section 3.2, appendix D).

Model: $y_i = f(x_i; w) + \varepsilon_i$, $\varepsilon_i \sim N(0, \sigma^2)$, every weight
on its own grid with a factorized prior, $\sigma^2$ on a grid, and
$q = \prod_p q_p(w_p)\, q_\sigma(\sigma^2)$. As in regression,

$$ \mathcal L = -\tfrac n2 \big(\log 2\pi + E[\log\sigma^2]\big)
   - \tfrac12 E[\sigma^{-2}]\Big(y^\top y - 2\sum_i y_i E[f(x_i)] + \sum_i E[f(x_i)^2]\Big)
   + E_q[\log p] - E_q[\log q]. $$

$f$ is a polynomial in the weights, so $E[f]$ and $E[f^2]$ are sums of monomials
$c\,\prod_p w_p^{k_p}\,x^\alpha$, and under the mean field
$E[\prod_p w_p^{k_p}] = \prod_p \langle q_p, v_p^{k_p}\rangle$: only per-weight moments of order
up to $2^{L+1}$ enter (the paper's factor vectors $g$, all ones except $O(L)$ of them
per term). The data enter through the statistics $\sum_i y_i x_i^{\otimes 2^L}$ and
$\sum_i x_i^{\otimes 2^{L+1}}$ (`BNNStats`).

Two evaluations of the same formula:

* one hidden layer (`layer_sizes = (d, h, 1)`): closed form in the per-weight mean, variance, third
  and fourth central moments, $O(h d^4 + P m)$ whatever `n` is;
* any depth: the monomials of $f$ are expanded once per architecture (in Python, at trace time)
  and every pair of them is contracted with the statistics, $O(T^2 P)$ for `T` monomials,
  exponential in the depth like the paper's $O(\ell \bar m (b/\ell)^{4\ell})$.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._base.checks import check_same_dtype
from .._base.deprecation import reordered_arguments
from .._base.precision import einsum, matmul
from .._model.families import MeanField, check_family, entropy, grid_moments
from .._model.grids import DiscretePrior, check_noise_prior, check_weight_prior
from .._model.regression import LOG_2PI, noise_moments
from ._net import num_weights
from ._stats import BNNStats, check_bnn_stats

# ---------------------------------------------------------------------------------------------------
# Per-weight moments
# ---------------------------------------------------------------------------------------------------


def central_moments(probs, values):
    r"""Mean, variance, third and fourth central moments of every weight, each `(..., P)`."""
    mean, var = grid_moments(probs, values)
    c = values - mean[..., None]
    return mean, var, jnp.sum(probs * c**3, axis=-1), jnp.sum(probs * c**4, axis=-1)


def raw_moments(probs, values, order: int):
    r"""$E[w_p^k]$ for `k = 0..order`, shape `(..., P, order + 1)`."""
    powers = values[..., None] ** jnp.arange(order + 1, dtype=values.dtype)
    return jnp.sum(probs[..., None] * powers, axis=-2)


# ---------------------------------------------------------------------------------------------------
# One hidden layer: closed form
# ---------------------------------------------------------------------------------------------------


def _one_hidden_moments(probs, values, d, h):
    mean, var, k3, m4 = central_moments(probs, values)
    Pw = d * h
    m, s, k3, c4 = (a[:Pw].reshape(h, d) for a in (mean, var, k3, m4 - 3.0 * var**2))
    vb, v2 = mean[Pw:], var[Pw:] + mean[Pw:] ** 2
    return m, s, k3, c4, vb, v2


def one_hidden_fit_terms(probs, values, yz, zz, d, h):
    r"""$(\sum_i y_i E f(x_i), \sum_i E f(x_i)^2)$ for `layer_sizes = (d, h, 1)`.

    With $S_j = E[W_j W_j^\top] = m_j m_j^\top + D_j$, $A = \sum_j \bar v_j S_j$ and
    $Q(X, Y) = \sum_i (x_i^\top X x_i)(x_i^\top Y x_i) = \mathrm{vec}(X)^\top V\, \mathrm{vec}(Y)$:

    $$ \sum_i E f^2 = Q(A, A) + \sum_j \Big[\mathrm{Var}(v_j)\, Q(S_j, S_j) + E[v_j^2]\big(4 Q(m_j m_j^\top, D_j)
       + 2 Q(D_j, D_j) + 4 \textstyle\sum_{a,k} m_{ja} \kappa_{3,jk} V_{akkk} + \sum_k \kappa_{4,jk} V_{kkkk}\big)\Big], $$

    from $E[(W_j\cdot x)^4] = (x^\top S_j x)^2 + 4\mu^2\sigma^2 + 2\sigma^4 + 4\mu\kappa_3 + \kappa_4$
    ($\mu = m_j\cdot x$, $\sigma^2 = \sum_k s_{jk}x_k^2$, $\kappa_3, \kappa_4$ the
    third central moment and fourth cumulant of $W_j\cdot x$).
    """
    m, s, k3, c4, vb, v2 = _one_hidden_moments(probs, values, d, h)
    Pm = yz.reshape(d, d)
    M4 = zz.reshape(d, d, d, d)
    eye = jnp.eye(d, dtype=m.dtype)
    S = m[:, :, None] * m[:, None, :] + s[:, :, None] * eye  # (h, d, d)
    A = einsum("j,jab->ab", vb, S)
    Sy = jnp.sum(A * Pm)
    S_flat = S.reshape(h, d * d)
    QSS = jnp.sum(matmul(S_flat, zz) * S_flat, axis=-1)  # (h,)
    A_flat = A.reshape(-1)
    QAA = jnp.dot(A_flat, matmul(zz, A_flat))
    Mdiag = jnp.einsum("abkk->abk", M4)  # V[a, b, k, k]
    Mdd = jnp.einsum("kkll->kl", M4)  # V[k, k, l, l]
    N3 = jnp.einsum("akkk->ak", M4)  # V[a, k, k, k]
    M4d = jnp.einsum("kkkk->k", M4)
    Q_mD = einsum("ja,jb,abk,jk->j", m, m, Mdiag, s)
    Q_DD = einsum("jk,kl,jl->j", s, Mdd, s)
    mk3 = einsum("ja,ak,jk->j", m, N3, k3)
    k4 = matmul(c4, M4d)
    extra = 4.0 * Q_mD + 2.0 * Q_DD + 4.0 * mk3 + k4
    Sff = QAA + jnp.sum((v2 - vb**2) * QSS + v2 * extra)
    return Sy, Sff


def one_hidden_point_moments(probs, values, X, d, h):
    r"""Exact $E[f(x)]$ and $\mathrm{Var}[f(x)]$ at every row of `X` for `(d, h, 1)`:
    with $g_j = \mu_j^2 + \sigma_j^2 = E[(W_j\cdot x)^2]$ and $E_{4,j} = E[(W_j\cdot x)^4]$,
    $E f = \sum_j \bar v_j g_j$ and $\mathrm{Var} f = \sum_j (E[v_j^2] E_{4,j} - \bar v_j^2 g_j^2)$."""
    m, s, k3, c4, vb, v2 = _one_hidden_moments(probs, values, d, h)
    mu = matmul(X, m.T)
    sig2 = matmul(X**2, s.T)
    kap3 = matmul(X**3, k3.T)
    kap4 = matmul(X**4, c4.T)
    g = mu**2 + sig2
    e4 = g**2 + 4.0 * mu**2 * sig2 + 2.0 * sig2**2 + 4.0 * mu * kap3 + kap4
    return matmul(g, vb), matmul(e4, v2) - matmul(g**2, vb**2)


# ---------------------------------------------------------------------------------------------------
# Any depth: monomial expansion
# ---------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def monomial_expansion(layer_sizes: tuple[int, ...]):
    r"""The network output as a sum of monomials $c_t \prod_p w_p^{e_{tp}}\, x^{\alpha_t}$.

    Returns NumPy arrays `(exponents (T, P) int, x_index (T,) int, coef (T,) float)`; `x_index` is the
    flat row-major index of $\alpha_t$ in $x^{\otimes 2^L}$. Exponential in the depth.
    """
    d = layer_sizes[0]
    L = len(layer_sizes) - 2
    polys = [{((), (a,)): 1} for a in range(d)]
    offset = 0
    for layer, (n_in, n_out) in enumerate(zip(layer_sizes[:-1], layer_sizes[1:], strict=True)):
        new = []
        for k in range(n_out):
            pre: dict = {}
            for j in range(n_in):
                p = offset + k * n_in + j
                for (wm, xm), c in polys[j].items():
                    key = (tuple(sorted(wm + (p,))), xm)
                    pre[key] = pre.get(key, 0) + c
            if layer < L:  # square the pre-activation
                sq: dict = {}
                items = list(pre.items())
                for (wm1, xm1), c1 in items:
                    for (wm2, xm2), c2 in items:
                        key = (tuple(sorted(wm1 + wm2)), tuple(sorted(xm1 + xm2)))
                        sq[key] = sq.get(key, 0) + c1 * c2
                pre = sq
            new.append(pre)
        polys = new
        offset += n_in * n_out
    (f,) = polys
    P = offset
    T = len(f)
    exps = np.zeros((T, P), np.int64)
    xidx = np.zeros(T, np.int64)
    coef = np.zeros(T, np.float64)
    for t, ((wm, xm), c) in enumerate(sorted(f.items())):
        for p in wm:
            exps[t, p] += 1
        xidx[t] = np.ravel_multi_index(xm, (d,) * (2**L))
        coef[t] = c
    return exps, xidx, coef


def general_fit_terms(probs, values, yz, zz, layer_sizes):
    r"""$(\sum_i y_i E f, \sum_i E f^2)$ for any depth by the monomial expansion:
    $\sum_t c_t E[w^{e_t}]\, p_{\alpha_t}$ and
    $\sum_{t,t'} c_t c_{t'} E[w^{e_t + e_{t'}}]\, V_{\alpha_t \alpha_{t'}}$."""
    exps, xidx, coef = monomial_expansion(tuple(layer_sizes))
    L = len(layer_sizes) - 2
    M = raw_moments(probs, values, 2 ** (L + 1))  # (P, K + 1)
    P = M.shape[0]
    rows = jnp.arange(P)
    coef = jnp.asarray(coef, M.dtype)
    E_t = jnp.prod(M[rows, exps], axis=-1)  # (T,)
    Sy = jnp.sum(coef * E_t * yz[xidx])
    zz_t = zz[xidx][:, xidx]  # (T, T)

    def row(args):
        e, z_row = args
        return jnp.sum(coef * jnp.prod(M[rows, e[None, :] + exps], axis=-1) * z_row)

    T = exps.shape[0]
    batch = max(1, min(T, 2**22 // max(1, T * P)))
    per_row = lax.map(row, (jnp.asarray(exps), zz_t), batch_size=batch)
    return Sy, jnp.sum(coef * per_row)


def fit_terms(probs, values, yz, zz, layer_sizes):
    """`(sum_i y_i E f(x_i), sum_i E f(x_i)^2)`: the closed form for one hidden layer, else the expansion."""
    if len(layer_sizes) == 3:
        return one_hidden_fit_terms(probs, values, yz, zz, layer_sizes[0], layer_sizes[1])
    return general_fit_terms(probs, values, yz, zz, layer_sizes)


# ---------------------------------------------------------------------------------------------------
# The ELBO
# ---------------------------------------------------------------------------------------------------


def check_bnn_args(q_w, q_noise, prior_w, prior_noise, layer_sizes):
    """Shapes and types of the posterior and priors against `layer_sizes`."""
    check_weight_prior(prior_w)
    check_noise_prior(prior_noise)
    P = num_weights(layer_sizes)
    if prior_w.values.shape[-2] != P:
        raise ValueError(
            f"`prior_w` has {prior_w.values.shape[-2]} weights but layer_sizes {tuple(layer_sizes)} need {P}"
        )
    check_family(q_w, prior_w, "q_w", "prior_w")
    check_family(q_noise, prior_noise, "q_noise", "prior_noise")


@reordered_arguments(("q_w", "prior_w", "stats"), lambda a: isinstance(a[0], MeanField))
def bnn_expected_rss(stats: BNNStats, q_w: MeanField, prior_w: DiscretePrior) -> jax.Array:
    r"""$E_q \sum_i (y_i - f(x_i; w))^2$ from the statistics, exactly."""
    sizes = check_bnn_stats(stats)
    return expected_rss_from_probs(q_w.probs, prior_w.values, stats, sizes)


def expected_rss_from_probs(probs, values, stats, sizes):
    Sy, Sff = fit_terms(probs, values, stats.yz, stats.zz, sizes)
    return stats.yty - 2.0 * Sy + Sff


def elbo_parts(probs_w, log_probs_w, q_noise, prior_w, prior_noise, stats, sizes):
    e_inv, e_log, _ = noise_moments(q_noise, prior_noise)
    rss = expected_rss_from_probs(probs_w, prior_w.values, stats, sizes)
    ell = -0.5 * stats.n * (LOG_2PI + e_log) - 0.5 * e_inv * rss
    log_prior = jnp.sum(probs_w * prior_w.log_probs) + jnp.sum(q_noise.probs * prior_noise.log_probs)
    neg_log_q = -jnp.sum(probs_w * log_probs_w) + entropy(q_noise)
    return ell + log_prior + neg_log_q


def elbo_from_logits(logits_w, logits_n, prior_w, prior_noise, stats, sizes):
    q_w, q_n = MeanField._unchecked(logits_w), MeanField._unchecked(logits_n)
    return elbo_parts(q_w.probs, q_w.log_probs, q_n, prior_w, prior_noise, stats, sizes)


@reordered_arguments(
    ("q_w", "q_noise", "prior_w", "prior_noise", "stats"), lambda a: isinstance(a[0], MeanField)
)
def bnn_elbo(
    stats: BNNStats, q_w: MeanField, q_noise: MeanField, prior_w: DiscretePrior, prior_noise: DiscretePrior
) -> jax.Array:
    r"""Exact mean-field ELBO of the DIRECT quadratic-activation Bayesian network.

    The sum over every configuration of the `P` weights and the noise variance,
    $\bar m^P m_\sigma$ terms, computed from the statistics without touching the data:

    $$ \mathcal L = -\tfrac n2(\log 2\pi + E[\log\sigma^2]) - \tfrac12 E[\sigma^{-2}]
       \Big(y^\top y - 2\sum_i y_i E f(x_i) + \sum_i E f(x_i)^2\Big) + E_q[\log p] + H[q]. $$

    One hidden layer costs $O(h d^4 + P \bar m)$; deeper networks use the monomial expansion
    (exponential in the depth). Conventions as in `kronvi.model.regression_elbo` (the
    $-\frac n2 \log 2\pi$ constant included).

    Args:
      stats: `BNNStats` from `bnn_stats` (they carry `layer_sizes`).
      q_w: `kronvi.model.MeanField` over the `P` weights in `quadratic_net` order, logits `(P, m)`.
      q_noise: `kronvi.model.MeanField` over the noise variance, logits `(1, m_sigma)`.
      prior_w: `kronvi.model.DiscretePrior` `(P, m)`.
      prior_noise: `kronvi.model.DiscretePrior` `(1, m_sigma)` over positive variances.

    Returns:
      The ELBO, a scalar.

    Raises:
      ValueError: `prior_w` / `q_w` that do not have `P` weights, or bad statistics.

    References:
      Evans & Nair (2018), section 3.2 and appendix D, eqs. 45-50.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> from kronvi.bnn import bnn_elbo, bnn_stats
      >>> X = jax.random.normal(jax.random.key(0), (20, 2)); y = X[:, 0] ** 2
      >>> stats = bnn_stats(X, y, (2, 2, 1))
      >>> pw, pn = kronvi.model.gaussian_prior(6, 1.0, levels=5), kronvi.model.noise_prior(0.1)
      >>> elbo = bnn_elbo(stats, kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn), pw, pn)
      >>> bool(jnp.isfinite(elbo))
      True
    """
    sizes = check_bnn_stats(stats)
    check_bnn_args(q_w, q_noise, prior_w, prior_noise, sizes)
    check_same_dtype(
        {
            "stats": stats.zz,
            "prior_w": prior_w.values,
            "prior_noise": prior_noise.values,
            "q_w": q_w.logits,
            "q_noise": q_noise.logits,
        }
    )
    return elbo_parts(q_w.probs, q_w.log_probs, q_noise, prior_w, prior_noise, stats, sizes)
