r"""Exact DIRECT inference for Bayesian linear regression with discrete priors.

Model: :math:`y = \Phi w + \varepsilon`, :math:`\varepsilon \sim N(0, \sigma^2 I)`, weights
:math:`w_j` on grids with prior :math:`p(w) = \prod_j p_j(w_j)` and a discrete prior over
:math:`\sigma^2`. With :math:`q(w, \sigma^2) = \prod_j q_j(w_j)\, q_\sigma(\sigma^2)` every term of the
ELBO is an inner product of Kronecker-structured vectors (Evans & Nair 2018, Theorem 1):

.. math::
   \mathcal{L} = -\tfrac{n}{2}\log 2\pi - \tfrac{n}{2}E[\log\sigma^2]
     - \tfrac12 E[\sigma^{-2}]\big(y^\top y - 2\bar w^\top\Phi^\top y + \bar w^\top\Phi^\top\Phi\bar w
     + \textstyle\sum_j (\Phi^\top\Phi)_{jj}\mathrm{Var}_q(w_j)\big)
     + E_q[\log p] - E_q[\log q],

computed in :math:`O(bm + b^2)` from the sufficient statistics, whatever ``n`` is.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from .._base.checks import as_float_array, check_finite, check_ndim, check_same_dtype
from .._base.kron import expected_quadratic, kron_sum_expectation
from .._stats.regression import RegressionStats, check_stats
from .families import MeanField, check_family, grid_moments
from .grids import DiscretePrior, check_noise_prior, check_weight_prior

LOG_2PI = math.log(2.0 * math.pi)


def check_regression_args(q_w, q_noise, prior_w, prior_noise, stats=None):
    """Validation shared by the ELBO, the fit and prediction: shapes and types, and with ``stats`` one
    float dtype for statistics, priors and ``q`` plus finite statistics (:func:`check_stats`)."""
    check_weight_prior(prior_w)
    check_noise_prior(prior_noise)
    check_family(q_w, prior_w, "q_w", "prior_w")
    check_family(q_noise, prior_noise, "q_noise", "prior_noise")
    if stats is not None:
        check_stats(stats)
        check_weight_prior(prior_w, stats.Phity.shape[-1])
        check_same_dtype(
            {
                "stats": stats.PhitPhi,
                "prior_w": prior_w.values,
                "prior_noise": prior_noise.values,
                "q_w": q_w.logits,
                "q_noise": q_noise.logits,
            }
        )


def noise_moments(q_noise: MeanField, prior_noise: DiscretePrior):
    r""":math:`(E[\sigma^{-2}], E[\log\sigma^2], E[\sigma^2])` under ``q_noise``."""
    p = q_noise.probs[..., 0, :]
    s = prior_noise.values[..., 0, :]
    return (
        jnp.sum(p / s, axis=-1),
        jnp.sum(p * jnp.log(s), axis=-1),
        jnp.sum(p * s, axis=-1),
    )


def noise_optimum_logits(expected_rss_value, prior_noise: DiscretePrior, n):
    r"""Exact coordinate-ascent update of the noise factor given :math:`E_q\|y - \Phi w\|^2`:
    :math:`\log q_\sigma(s) = \log p_\sigma(s) - \tfrac n2 \log s - E\|y-\Phi w\|^2 / (2s)` (unnormalized).
    Shared by every family whose expected residual is available (mean-field, mixtures)."""
    s = prior_noise.values
    return prior_noise.log_probs - 0.5 * n * jnp.log(s) - 0.5 * expected_rss_value / s


def expected_rss(q_w: MeanField, prior_w: DiscretePrior, stats: RegressionStats):
    r""":math:`E_q\|y - \Phi w\|^2` from the statistics (one matrix-vector product)."""
    mean, var = grid_moments(q_w.probs, prior_w.values)
    return (
        stats.yty - 2.0 * jnp.sum(mean * stats.Phity, axis=-1) + expected_quadratic(mean, var, stats.PhitPhi)
    )


def elbo_terms(q_w, q_noise, prior_w, prior_noise, stats):
    e_inv, e_log, _ = noise_moments(q_noise, prior_noise)
    ell = -0.5 * stats.n * (LOG_2PI + e_log) - 0.5 * e_inv * expected_rss(q_w, prior_w, stats)
    # E_q[log p] and E_q[log q]: inner products of Kronecker sums with Kronecker products (Prop. 3).
    qw, qn = q_w.probs, q_noise.probs
    log_prior = kron_sum_expectation(prior_w.log_probs, qw) + kron_sum_expectation(prior_noise.log_probs, qn)
    log_q = kron_sum_expectation(q_w.log_probs, qw) + kron_sum_expectation(q_noise.log_probs, qn)
    return ell, log_prior, log_q


def regression_elbo(q_w, q_noise, prior_w, prior_noise, stats):
    r"""Exact mean-field ELBO of DIRECT Bayesian linear regression (Theorem 1).

    The sum over all :math:`m^b m_\sigma` configurations of weights and noise variance, computed in
    :math:`O(bm + b^2)` from the sufficient statistics; a true lower bound on
    :math:`\log p(y \mid \Phi)` (the :math:`-\frac n2 \log 2\pi` constant included).

    Args:
      q_w: :class:`MeanField` over the weights, logits ``(b, m)``.
      q_noise: :class:`MeanField` over the noise variance, logits ``(1, m_sigma)``.
      prior_w: :class:`DiscretePrior` ``(b, m)``.
      prior_noise: :class:`DiscretePrior` ``(1, m_sigma)`` over positive variances.
      stats: :class:`RegressionStats` of the data.

    Returns:
      The ELBO, a scalar.

    References:
      Evans & Nair (2018), Theorem 1 and section 3.1.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (50, 3)); y = Phi @ jnp.array([1., 0., -1.])
      >>> stats = kronvi.regression_stats(Phi, y)
      >>> pw, pn = kronvi.gaussian_prior(3, 1.0, levels=5), kronvi.noise_prior(0.1)
      >>> elbo = kronvi.regression_elbo(kronvi.MeanField.from_prior(pw),
      ...                               kronvi.MeanField.from_prior(pn), pw, pn, stats)
      >>> bool(jnp.isfinite(elbo))
      True
    """
    check_regression_args(q_w, q_noise, prior_w, prior_noise, stats)
    ell, log_prior, log_q = elbo_terms(q_w, q_noise, prior_w, prior_noise, stats)
    return ell + log_prior - log_q


def check_phi_new(Phi_new, prior_w):
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    if Phi_new.shape[1] != prior_w.values.shape[-2]:
        raise ValueError(
            f"`Phi_new` has {Phi_new.shape[1]} features but the model has {prior_w.values.shape[-2]} weights"
        )
    check_finite(Phi_new, "Phi_new")
    return Phi_new


def predict_regression(q_w, q_noise, prior_w, prior_noise, Phi_new):
    r"""Exact predictive mean and variance of :math:`y^* = \Phi^* w + \varepsilon` under q.

    Mean :math:`\Phi^*\bar w` (eq. 9); variance :math:`\sum_j (\Phi^*_j)^2 \mathrm{Var}_q(w_j) +
    E_q[\sigma^2]` (the weights are independent under mean-field q). :math:`O(b)` per point.

    Args:
      q_w, q_noise, prior_w, prior_noise: as in :func:`regression_elbo`.
      Phi_new: test features ``(num_points, b)``.

    Returns:
      ``(mean, variance)``, each ``(num_points,)``.
    """
    check_regression_args(q_w, q_noise, prior_w, prior_noise)
    Phi_new = check_phi_new(Phi_new, prior_w)
    mean, var = grid_moments(q_w.probs, prior_w.values)
    _, _, e_s = noise_moments(q_noise, prior_noise)
    return Phi_new @ mean, (Phi_new**2) @ var + e_s


def expected_sparsity(q_w: MeanField, prior_w: DiscretePrior):
    r"""Expected fraction of zero weights in a posterior sample: the mean over weights of
    :math:`q_j(w_j = 0)`. Weights whose grid has no zero level count as never zero."""
    check_family(q_w, prior_w, "q_w", "prior_w")
    is_zero = prior_w.values == 0
    return jnp.mean(jnp.sum(jnp.where(is_zero, q_w.probs, 0.0), axis=-1), axis=-1)


def predictive_log_density(
    q_w, q_noise, prior_w, prior_noise, Phi_new, y_new, *, num_nodes: int = 256, batch_size: int = 8
):
    r"""Exact log predictive density :math:`\log q(y^*)` of the discrete posterior, without sampling.

    :math:`f = \Phi^* w` is a sum of ``b`` independent discrete variables, so its characteristic
    function is :math:`\varphi(t) = \prod_j \sum_k q_{jk} e^{i t \Phi^*_j v_{jk}}`; with Gaussian noise
    of variance :math:`s` drawn from :math:`q_\sigma`,

    .. math::
       q(y) = \sum_s q_\sigma(s)\,\frac{1}{\pi}\int_0^\infty
              \mathrm{Re}\big[\varphi(t) e^{-i t (y - \mu)}\big] e^{-s t^2/2}\,dt

    (with :math:`\varphi` of the centred :math:`f - \mu`). Points in the tail are handled by exponential
    tilting, an exact identity for any :math:`\tau`: :math:`q(y) = M(\tau) e^{-\tau y} q_\tau(y)` with
    :math:`M` the moment generating function of :math:`f + \varepsilon` and :math:`q_\tau` the density of
    the tilted variables (still independent: :math:`q^\tau_{jk} \propto q_{jk} e^{\tau \Phi^*_j v_{jk}}`,
    noise level :math:`s` reweighted by :math:`e^{\tau^2 s/2}` with mean :math:`\tau s`); Newton steps
    on :math:`\tau` put the tilted mean at :math:`y` (a saddlepoint shift), so the quadrature works near a
    mode. The integral is the trapezoid rule on
    ``num_nodes`` nodes of step :math:`h = 2\pi / L`, :math:`L = 2(|y-\mu| + 12\,\mathrm{sd})`, so the
    aliasing error is a 12-sd tail; the product over ``j`` is taken in log-space. The returned
    ``error_bound`` bounds the truncation error :math:`\sum_s q_\sigma(s)\frac1\pi\int_T^\infty
    e^{-st^2/2}dt` plus the rounding floor of the quadrature sum, relative to the density. A bound that
    is not small flags an unreliable value: raise ``num_nodes`` for truncation; for a point so far in the
    tail that its density is below the rounding floor (many standard deviations out, notably in
    float32), use float64.

    Returns:
      ``(log_density, rel_error_bound)``, each ``(num_points,)``.
    """
    check_regression_args(q_w, q_noise, prior_w, prior_noise)
    Phi_new = check_phi_new(Phi_new, prior_w)
    y_new = as_float_array(y_new, "y_new")
    check_ndim(y_new, 1, "y_new", "(num_points,)")
    if y_new.shape[0] != Phi_new.shape[0]:
        raise ValueError(f"`y_new` has {y_new.shape[0]} points but `Phi_new` has {Phi_new.shape[0]}")
    check_finite(y_new, "y_new")
    return _log_density_impl(
        q_w.probs,
        q_noise.probs[0],
        prior_w.values,
        prior_noise.values[0],
        Phi_new,
        y_new,
        num_nodes,
        batch_size,
    )


@functools.partial(jax.jit, static_argnums=(6, 7))
def _log_density_impl(qw, qn, values, svals, Phi_new, y_new, num_nodes, batch_size):
    log_qw = jnp.log(qw)
    log_qn = jnp.log(qn)
    dtype = Phi_new.dtype
    cdtype = jnp.complex128 if dtype == jnp.float64 else jnp.complex64

    def one(phi, y):
        a = phi[:, None] * values  # (b, m): contribution of each level to f = phi . w

        def tilted(tau):
            # q_jk^tau ~ q_jk e^{tau a_jk}; noise level s gets weight ~ q_s e^{tau^2 s / 2} and mean tau s.
            lt = log_qw + tau * a
            lse = jax.nn.logsumexp(lt, axis=-1)
            log_p = lt - lse[:, None]
            p = jnp.exp(log_p)
            mj = jnp.sum(p * a, axis=-1)
            var_f = jnp.sum(p * (a - mj[:, None]) ** 2)
            lw = log_qn + 0.5 * tau**2 * svals
            lme = jax.nn.logsumexp(lw)
            w = jnp.exp(lw - lme)
            me = jnp.sum(w * tau * svals)
            ve = jnp.maximum(jnp.sum(w * (svals + (tau * svals) ** 2)) - me**2, 0.0)
            return jnp.sum(mj) + me, var_f + ve, var_f, jnp.sum(lse) + lme, log_p, mj, w

        def cond(c):
            it, tau, mean, var = c
            return (it < 50) & (jnp.abs(mean - y) > 0.5 * jnp.sqrt(var))

        def body(c):
            it, tau, mean, var = c
            step = jnp.clip((y - mean) / var, -3.0 / jnp.sqrt(var), 3.0 / jnp.sqrt(var))
            mean, var = tilted(tau + step)[:2]
            return it + 1, tau + step, mean, var

        zero = jnp.zeros((), dtype)
        mean0, var0 = tilted(zero)[:2]
        _, tau, _, _ = lax.while_loop(cond, body, (jnp.asarray(0), zero, mean0, var0))
        mean, _, var_f, log_m, log_p, mj, w = tilted(tau)
        s_max = jnp.max(jnp.where(w > 1e-12, svals, 0.0))
        L = 2.0 * (jnp.abs(y - mean) + 12.0 * jnp.sqrt(var_f + s_max))
        h = 2.0 * jnp.pi / L
        t = h * jnp.arange(num_nodes, dtype=dtype)  # (K,)
        # log phi(t) of the centred tilted f: sum_j logsumexp_k(log p_jk + i t (a_jk - m_j))
        arg = t[:, None, None] * (a - mj[:, None])[None]  # (K, b, m)
        z = log_p[None].astype(cdtype) + 1j * arg.astype(cdtype)
        log_phi = jnp.sum(jax.scipy.special.logsumexp(z, axis=-1), axis=-1)  # (K,)
        f_mean = jnp.sum(mj)
        shift = y - f_mean - tau * svals  # (S,): offset of y from each tilted noise component's mean
        base = jnp.real(jnp.exp(log_phi[None, :] - 1j * (t[None, :] * shift[:, None]).astype(cdtype)))
        wts = jnp.full((num_nodes,), h, dtype).at[0].set(0.5 * h)
        gauss = jnp.exp(-0.5 * svals[:, None] * t[None] ** 2)  # (S, K)
        dens = jnp.sum(w * jnp.sum(base * gauss * wts[None], axis=-1)) / jnp.pi
        T = h * (num_nodes - 0.5)
        tail = (
            jnp.sum(w * jnp.sqrt(0.5 * jnp.pi / svals) * jax.scipy.special.erfc(T * jnp.sqrt(0.5 * svals)))
            / jnp.pi
        )
        # Rounding floor of the quadrature sum: terms of size up to w_k e^{-s t_k^2 / 2} / pi cancel to give
        # the density; a density far below eps times their total is noise.
        rounding = 64.0 * jnp.finfo(dtype).eps * jnp.sum(w * (gauss @ wts)) / jnp.pi
        safe = jnp.maximum(dens, jnp.finfo(dtype).tiny)
        return log_m - tau * y + jnp.log(safe), (tail + rounding) / safe

    # lax.map over points (vmapped in small batches) keeps memory at O(batch * K * b * m).
    return jax.lax.map(lambda a: one(*a), (Phi_new, y_new), batch_size=batch_size)

def elbo_from_logits(logits_w, logits_n, prior_w, prior_noise, stats):
    ell, lp, lq = elbo_terms(
        MeanField._unchecked(logits_w), MeanField._unchecked(logits_n), prior_w, prior_noise, stats
    )
    return ell + lp - lq


def noise_update(logits_w, prior_w, prior_noise, stats):
    rss = expected_rss(MeanField._unchecked(logits_w), prior_w, stats)
    return noise_optimum_logits(rss, prior_noise, stats.n)


def coordinate_optimum(e_inv, mean, g, prior_w, stats):
    """Optimal logits of every weight given all the others (a Jacobi candidate), ``(b, m)``."""
    A_diag = jnp.diagonal(stats.PhitPhi)
    h = stats.Phity - (g - A_diag * mean)
    V = prior_w.values
    return prior_w.log_probs + e_inv * (V * h[:, None] - 0.5 * A_diag[:, None] * V * V)
