r"""Gaussian mean-field variational inference for Bayesian linear regression: the continuous baselines.

Model: :math:`y = \Phi w + \varepsilon`, :math:`w \sim N(0, \sigma_w^2 I)` (the continuous Gaussian prior
that DIRECT discretizes), :math:`\varepsilon \sim N(0, \sigma^2 I)`; variational family
:math:`q(w) = \prod_j N(\mu_j, s_j^2)`. The noise variance :math:`\sigma^2` is a point estimate: kept fixed,
or learned by maximizing the ELBO (type-II maximum likelihood), optionally inside ``noise_bounds``.

Two ways to fit the same family:

* :func:`fit_gaussian_mf`: from the sufficient statistics with the *exact* ELBO

  .. math::
     \mathcal{L} = -\tfrac n2\log(2\pi\sigma^2) - \frac{1}{2\sigma^2}\Big(\|y - \Phi\mu\|^2
       + \textstyle\sum_j (\Phi^\top\Phi)_{jj} s_j^2\Big) - \mathrm{KL}\big(q \,\|\, N(0, \sigma_w^2 I)\big),

  :math:`\|y-\Phi\mu\|^2 = y^\top y - 2\mu^\top\Phi^\top y + \mu^\top\Phi^\top\Phi\mu`, maximized by exact
  coordinate ascent: for fixed :math:`\sigma^2` the optimal factors are closed form,
  :math:`s_j^2 = 1/((\Phi^\top\Phi)_{jj}/\sigma^2 + 1/\sigma_w^2)` and
  :math:`\mu = (\Phi^\top\Phi + \sigma^2/\sigma_w^2\, I)^{-1}\Phi^\top y` (the exact posterior mean: the
  stationarity condition of the mean-field ELBO in :math:`\mu` is that linear system), and for fixed
  ``q`` the optimal noise is :math:`E_q\|y-\Phi w\|^2/n`. Each update is an exact block maximum, so the ELBO
  never decreases.
* :func:`fit_gaussian_reparam`: the "REPARAM" baseline of Evans & Nair (2018, Table 1), stochastic
  gradients of a minibatch Monte Carlo ELBO with the reparameterization :math:`w = \mu + s\odot\epsilon`
  (closed-form KL), trained by any optax optimizer (init / step / driver, like :mod:`kronvi._mixture`).

References:
  Evans & Nair (2018), section 5 and Table 1 ("REPARAM"); Kingma & Welling (2014) and Blundell et al.
  (2015) for the reparameterization gradient; Bishop (2006), section 10.1.2 for the mean-field
  Gaussian optimum.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from .._base.checks import as_float_array, check_finite, check_ndim, check_positive, check_xy, is_concrete
from .._base.pytree import as_traced_callable
from .._model.regression import LOG_2PI
from .._solvers.lbfgs import FitInfo
from .._stats.regression import RegressionStats


class GaussianMeanField(NamedTuple):
    r"""Diagonal Gaussian :math:`q(w) = \prod_j N(\mu_j, s_j^2)` with :math:`s_j = \exp(\text{log\_std}_j)`.

    Attributes:
      mean: ``(b,)`` :math:`\mu`.
      log_std: ``(b,)`` :math:`\log s`.
    """

    mean: jax.Array
    log_std: jax.Array


class ReparamState(NamedTuple):
    """State of :func:`gaussian_reparam_step`.

    Attributes:
      q: :class:`GaussianMeanField`.
      noise_param: ``()`` unconstrained noise parameter: :math:`\\log\\sigma^2` without ``noise_bounds``,
        else :math:`u` with :math:`\\log\\sigma^2 = \\log lo + (\\log hi - \\log lo)\\,\\mathrm{sigmoid}(u)`;
        read it with :func:`reparam_noise_variance`.
      opt_state: the optimizer's state for ``(q.mean, q.log_std, noise_param)``.
    """

    q: GaussianMeanField
    noise_param: jax.Array
    opt_state: optax.OptState


class ReparamInfo(NamedTuple):
    """Diagnostics of one :func:`gaussian_reparam_step` (stacked over steps by the driver).

    Attributes:
      elbo: the minibatch Monte Carlo ELBO estimate at the parameters before the step (unbiased for the
        full-data ELBO).
      grad_norm: norm of the stochastic gradient of :math:`-\\mathcal{L}/n`.
    """

    elbo: jax.Array
    grad_norm: jax.Array


# ----------------------------------------------------------------------------------------------------
# Validation


def _check_q(q, b=None, name="q"):
    if not isinstance(q, GaussianMeanField):
        raise TypeError(f"`{name}` must be a GaussianMeanField, got {type(q).__name__}")
    mean, log_std = jnp.asarray(q.mean), jnp.asarray(q.log_std)
    check_ndim(mean, 1, f"{name}.mean", "(num_features,)")
    if log_std.shape != mean.shape:
        raise ValueError(
            f"`{name}.log_std` shape {log_std.shape} must equal `{name}.mean` shape {mean.shape}"
        )
    if b is not None and mean.shape[0] != b:
        raise ValueError(f"`{name}` has {mean.shape[0]} weights but the data have {b} features")
    check_finite(mean, f"{name}.mean")
    check_finite(log_std, f"{name}.log_std")


def _check_stats(stats):
    if not isinstance(stats, RegressionStats):
        raise TypeError(f"`stats` must be RegressionStats, got {type(stats).__name__}")
    if is_concrete(stats.n) and not float(jnp.min(stats.n)) > 0:
        raise ValueError("`stats.n` must be positive: the statistics describe empty data")
    return stats.Phity.shape[-1]


def _check_scale(prior_scale, b, dtype):
    scale = as_float_array(prior_scale, "prior_scale").astype(dtype)
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape[0] != b):
        raise ValueError(f"`prior_scale` must be a scalar or shape ({b},), got {scale.shape}")
    check_finite(scale, "prior_scale")
    check_positive(scale, "prior_scale")
    return scale


def _check_noise(noise_variance, dtype, name="noise_variance"):
    s = as_float_array(noise_variance, name).astype(dtype)
    if s.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {s.shape}")
    check_finite(s, name)
    check_positive(s, name)
    return s


def _check_bounds(noise_bounds, dtype):
    if noise_bounds is None:
        return None
    if not (isinstance(noise_bounds, tuple | list) and len(noise_bounds) == 2):
        raise TypeError("`noise_bounds` must be None or a pair (lo, hi)")
    lo = _check_noise(noise_bounds[0], dtype, "noise_bounds[0]")
    hi = _check_noise(noise_bounds[1], dtype, "noise_bounds[1]")
    if is_concrete(lo) and is_concrete(hi) and not float(lo) < float(hi):
        raise ValueError(f"`noise_bounds` must satisfy lo < hi, got ({float(lo)}, {float(hi)})")
    return lo, hi


def _check_optimizer(optimizer):
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`optimizer` must be an optax.GradientTransformation, got {type(optimizer).__name__}"
        )


def _check_pos_int(x, name, minimum=1):
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {x!r}")
    return x


# ----------------------------------------------------------------------------------------------------
# Exact ELBO from the statistics


def _kl(mean, log_std, prior_scale):
    r""":math:`\mathrm{KL}(\prod_j N(\mu_j, s_j^2) \,\|\, N(0, \sigma_w^2 I))`, summed over weights."""
    var_ratio = jnp.exp(2.0 * log_std) / prior_scale**2
    return 0.5 * jnp.sum(var_ratio + mean**2 / prior_scale**2 - 1.0 - jnp.log(var_ratio))


def _expected_rss(mean, log_std, stats):
    r""":math:`E_q\|y - \Phi w\|^2 = \|y - \Phi\mu\|^2 + \sum_j (\Phi^\top\Phi)_{jj} s_j^2`."""
    A = stats.PhitPhi
    return (
        stats.yty
        - 2.0 * jnp.dot(mean, stats.Phity)
        + jnp.dot(mean, A @ mean)
        + jnp.dot(jnp.diagonal(A), jnp.exp(2.0 * log_std))
    )


def _elbo(mean, log_std, noise_variance, stats, prior_scale):
    ell = -0.5 * stats.n * (LOG_2PI + jnp.log(noise_variance))
    ell = ell - 0.5 * _expected_rss(mean, log_std, stats) / noise_variance
    return ell - _kl(mean, log_std, prior_scale)


def gaussian_mf_elbo(q, noise_variance, stats, *, prior_scale):
    r"""Exact ELBO of a diagonal Gaussian posterior for Bayesian linear regression, from the statistics.

    .. math::
       \mathcal{L}(q, \sigma^2) = -\tfrac n2\log(2\pi\sigma^2)
         - \frac{y^\top y - 2\mu^\top\Phi^\top y + \mu^\top\Phi^\top\Phi\mu
         + \sum_j(\Phi^\top\Phi)_{jj}s_j^2}{2\sigma^2}
         - \tfrac12\sum_j\Big(\frac{s_j^2 + \mu_j^2}{\sigma_w^2} - 1 - \log\frac{s_j^2}{\sigma_w^2}\Big),

    :math:`O(b^2)` whatever ``n`` is; a lower bound on :math:`\log p(y \mid \Phi, \sigma^2)`.

    Args:
      q: :class:`GaussianMeanField` with ``(b,)`` fields.
      noise_variance: :math:`\sigma^2`, positive scalar.
      stats: :class:`RegressionStats` of the data (``b`` features).
      prior_scale: :math:`\sigma_w`, positive scalar or ``(b,)``.

    Returns:
      The ELBO, a scalar.

    References:
      Bishop (2006), eqs. 10.3 and 10.95; Evans & Nair (2018), section 5 (the continuous prior that the
      DIRECT grid discretizes).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (50, 3)); y = Phi @ jnp.array([1., 0., -1.])
      >>> stats = kronvi.regression_stats(Phi, y)
      >>> q = kronvi.GaussianMeanField(jnp.zeros(3), jnp.zeros(3))
      >>> bool(jnp.isfinite(kronvi.gaussian_mf_elbo(q, 0.1, stats, prior_scale=1.0)))
      True
    """
    b = _check_stats(stats)
    _check_q(q, b)
    dtype = stats.PhitPhi.dtype
    s = _check_noise(noise_variance, dtype)
    scale = _check_scale(prior_scale, b, dtype)
    return _elbo(q.mean, q.log_std, s, stats, scale)


# ----------------------------------------------------------------------------------------------------
# Exact fit: closed-form coordinate ascent


def fit_gaussian_mf(
    stats,
    *,
    prior_scale,
    noise_variance,
    learn_noise: bool = True,
    noise_bounds=None,
    max_iter: int = 100,
    tol: float = 1e-7,
):
    r"""Fits the diagonal Gaussian posterior by exact coordinate ascent on :func:`gaussian_mf_elbo`.

    One iteration sets the factors to their exact optimum for the current noise variance,

    .. math::
       s_j^2 = \Big(\frac{(\Phi^\top\Phi)_{jj}}{\sigma^2} + \frac{1}{\sigma_w^2}\Big)^{-1},\qquad
       \mu = \Big(\Phi^\top\Phi + \frac{\sigma^2}{\sigma_w^2} I\Big)^{-1}\Phi^\top y

    (one Cholesky factorization; with a per-weight :math:`\sigma_w` the ridge term is diagonal; where the
    working precision cannot factor it, a jitter of :math:`10^{k-7}` times the mean diagonal is added for
    the smallest ``k`` that works, instead of returning NaN), then, when
    ``learn_noise``, the noise variance to its exact optimum :math:`E_q\|y - \Phi w\|^2/n`, clipped into
    ``noise_bounds`` (the constrained maximum: the ELBO is unimodal in :math:`\sigma^2`). Every update is
    a block maximum, so the ELBO trace never decreases. With ``learn_noise=False`` one iteration is exact.

    Args:
      stats: :class:`RegressionStats`.
      prior_scale: :math:`\sigma_w`, positive scalar or ``(b,)``.
      noise_variance: fixed :math:`\sigma^2`, or the starting value when ``learn_noise``.
      learn_noise: learn :math:`\sigma^2` as a point estimate (type-II maximum likelihood on the ELBO).
      noise_bounds: optional ``(lo, hi)`` for the learned noise variance.
      max_iter: maximum iterations.
      tol: stop when an iteration gains less than ``tol * n`` nats.

    Returns:
      ``(q, noise_variance, info)``: a :class:`GaussianMeanField`, the final noise variance and a
      :class:`kronvi.FitInfo` with the ELBO trace.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (200, 3))
      >>> y = Phi @ jnp.array([1., 0., -1.]) + 0.3 * jax.random.normal(jax.random.key(1), (200,))
      >>> q, s2, info = kronvi.fit_gaussian_mf(kronvi.regression_stats(Phi, y), prior_scale=1.0,
      ...                                      noise_variance=1.0)
      >>> [round(float(v), 1) for v in q.mean], bool(0.05 < s2 < 0.15), bool(info.converged)
      ([1.0, 0.0, -1.0], True, True)
    """
    b = _check_stats(stats)
    dtype = stats.PhitPhi.dtype
    scale = _check_scale(prior_scale, b, dtype)
    s0 = _check_noise(noise_variance, dtype)
    bounds = _check_bounds(noise_bounds, dtype)
    max_iter = _check_pos_int(max_iter, "max_iter")
    if not float(tol) >= 0:
        raise ValueError(f"`tol` must be >= 0, got {tol}")
    if bounds is None:
        lo = jnp.asarray(0.0, dtype)
        hi = jnp.asarray(jnp.inf, dtype)
    else:
        lo, hi = bounds
        s0 = jnp.clip(s0, lo, hi)
    return fit_exact(
        stats, scale, s0, lo, hi, learn_noise=bool(learn_noise), max_iter=max_iter, tol=float(tol)
    )


def _jittered_cholesky(M, max_tries=8):
    r"""Cholesky factor of a symmetric matrix that should be positive definite; where the working precision
    cannot factor it (a float32 ridge system with a tiny ridge, e.g. a 45,000-row fold with a small noise
    variance), adds :math:`10^{k-7}\,\overline{\mathrm{diag}(M)}\,I` for the smallest :math:`k \ge 0` that
    works (:math:`k < ` ``max_tries``), a slightly stronger ridge instead of a silent NaN."""
    scale = jnp.mean(jnp.diagonal(M))
    eye = jnp.eye(M.shape[-1], dtype=M.dtype)

    def cond(st):
        k, L = st
        return (k < max_tries) & ~jnp.all(jnp.isfinite(L))

    def body(st):
        k, _ = st
        jitter = scale * 10.0 ** (k.astype(M.dtype) - 7.0)
        return k + 1, jnp.linalg.cholesky(M + jitter * eye)

    _, L = lax.while_loop(cond, body, (jnp.asarray(0), jnp.linalg.cholesky(M)))
    return L


def _optimal_q(stats, scale, noise_variance):
    A = stats.PhitPhi
    b = A.shape[-1]
    prec_prior = jnp.broadcast_to(1.0 / scale**2, (b,))
    log_std = -0.5 * jnp.log(jnp.diagonal(A) / noise_variance + prec_prior)
    # Scaled system (I-regularized in the units of A): (A + s2 / sw^2) mu = Phi^T y.
    L = _jittered_cholesky(A + jnp.diag(noise_variance * prec_prior))
    mean = jax.scipy.linalg.cho_solve((L, True), stats.Phity)
    return mean, log_std


@functools.partial(jax.jit, static_argnames=("learn_noise", "max_iter", "tol"))
def fit_exact(stats, scale, s0, lo, hi, *, learn_noise, max_iter, tol):
    dtype = stats.PhitPhi.dtype
    b = stats.PhitPhi.shape[-1]
    mean0 = jnp.zeros((b,), dtype)
    log_std0 = jnp.broadcast_to(jnp.log(scale), (b,)).astype(dtype)
    e0 = _elbo(mean0, log_std0, s0, stats, scale)
    trace = jnp.full((max_iter + 1,), e0, dtype)

    def cond(st):
        it, _, _, _, _, done = st
        return (it < max_iter) & ~done

    def body(st):
        it, _, _, s, tr, _ = st
        mean, log_std = _optimal_q(stats, scale, s)
        if learn_noise:
            s = jnp.clip(_expected_rss(mean, log_std, stats) / stats.n, lo, hi)
        e = _elbo(mean, log_std, s, stats, scale)
        done = (e - tr[it] < tol * stats.n) if learn_noise else jnp.asarray(True)
        return it + 1, mean, log_std, s, tr.at[it + 1].set(e), done

    init = (jnp.asarray(0), mean0, log_std0, s0, trace, jnp.asarray(False))
    it, mean, log_std, s, tr, done = lax.while_loop(cond, body, init)
    tr = jnp.where(jnp.arange(max_iter + 1) <= it, tr, tr[it])
    return GaussianMeanField(mean, log_std), s, FitInfo(tr, it, done)


def predict_gaussian_mf(q, noise_variance, Phi_new):
    r"""Predictive mean and variance under a diagonal Gaussian posterior (exact, Gaussian).

    :math:`y^* \sim N(\Phi^*\mu,\ (\Phi^*)^{\circ 2} s^2 + \sigma^2)`.

    Args:
      q: :class:`GaussianMeanField`.
      noise_variance: :math:`\sigma^2`.
      Phi_new: test features ``(num_points, b)``.

    Returns:
      ``(mean, variance)``, each ``(num_points,)``; the log predictive density of ``y`` is
      ``-0.5 * (log(2 pi variance) + (y - mean)**2 / variance)``.
    """
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    _check_q(q, Phi_new.shape[1])
    s = _check_noise(noise_variance, Phi_new.dtype)
    return Phi_new @ q.mean, (Phi_new**2) @ jnp.exp(2.0 * q.log_std) + s


# ----------------------------------------------------------------------------------------------------
# REPARAM: minibatch reparameterization gradients


def _noise_from_param(u, bounds):
    if bounds is None:
        return jnp.exp(u)
    lo, hi = jnp.log(bounds[0]), jnp.log(bounds[1])
    return jnp.exp(lo + (hi - lo) * jax.nn.sigmoid(u))


def _noise_to_param(s, bounds):
    if bounds is None:
        return jnp.log(s)
    lo, hi = jnp.log(bounds[0]), jnp.log(bounds[1])
    frac = jnp.clip((jnp.log(s) - lo) / (hi - lo), 1e-3, 1 - 1e-3)
    return jnp.log(frac) - jnp.log1p(-frac)


def reparam_noise_variance(state, *, noise_bounds=None):
    """The noise variance :math:`\\sigma^2` held by a :class:`ReparamState` (same ``noise_bounds`` as the
    fit)."""
    if not isinstance(state, ReparamState):
        raise TypeError(f"`state` must be a ReparamState, got {type(state).__name__}")
    bounds = _check_bounds(noise_bounds, state.noise_param.dtype)
    return _noise_from_param(state.noise_param, bounds)


def gaussian_reparam_init(q, noise_variance, *, optimizer, noise_bounds=None):
    r"""Initial :class:`ReparamState` for :func:`gaussian_reparam_step`.

    Args:
      q: :class:`GaussianMeanField` to start from.
      noise_variance: starting :math:`\sigma^2` (clipped into ``noise_bounds``).
      optimizer: an ``optax.GradientTransformation`` (it minimizes :math:`-\mathcal{L}/n`).
      noise_bounds: optional ``(lo, hi)`` for the noise variance (a sigmoid reparameterization keeps it
        inside).
    """
    _check_q(q)
    _check_optimizer(optimizer)
    dtype = jnp.asarray(q.mean).dtype
    s = _check_noise(noise_variance, dtype)
    bounds = _check_bounds(noise_bounds, dtype)
    u = _noise_to_param(s, bounds)
    return ReparamState(q, u, optimizer.init((q.mean, q.log_std, u)))


def _minibatch_elbo(key, params, Phi_b, y_b, n, scale, bounds, num_samples, learn_noise):
    mean, log_std, u = params
    if not learn_noise:
        u = lax.stop_gradient(u)
    s2 = _noise_from_param(u, bounds)
    eps = jax.random.normal(key, (num_samples, mean.shape[0]), mean.dtype)
    W = mean[None] + jnp.exp(log_std)[None] * eps  # (S, b)
    resid = y_b[:, None] - Phi_b @ W.T  # (B, S)
    B = y_b.shape[0]
    ll = -0.5 * B * (LOG_2PI + jnp.log(s2)) - 0.5 * jnp.mean(jnp.sum(resid**2, axis=0)) / s2
    return (n / B) * ll - _kl(mean, log_std, scale)


def gaussian_reparam_step(
    key,
    state,
    Phi_batch,
    y_batch,
    *,
    num_data,
    prior_scale,
    optimizer,
    num_samples: int = 10,
    learn_noise: bool = True,
    noise_bounds=None,
):
    r"""One reparameterization-gradient step on a minibatch (the REPARAM baseline; optax/blackjax shape).

    The minibatch ELBO estimate

    .. math::
       \hat{\mathcal{L}} = \frac{n}{B}\sum_{i \in \text{batch}} \frac1S\sum_{s=1}^S
       \log N(y_i \mid \phi_i^\top(\mu + s\odot\epsilon_s), \sigma^2) - \mathrm{KL}(q \,\|\, p),
       \qquad \epsilon_s \sim N(0, I),

    is unbiased for :math:`\mathcal{L}` (closed-form KL); ``optimizer`` is applied to the gradient of
    :math:`-\hat{\mathcal{L}}/n` with respect to :math:`(\mu, \log s, \sigma^2\text{'s parameter})`.

    Args:
      key: PRNG key for the :math:`\epsilon` draws.
      state: :class:`ReparamState`.
      Phi_batch: features of the minibatch ``(B, b)``.
      y_batch: targets ``(B,)``.
      num_data: :math:`n`, the full data size (scales the likelihood).
      prior_scale: :math:`\sigma_w`, scalar or ``(b,)``.
      optimizer: the ``optax.GradientTransformation`` given to :func:`gaussian_reparam_init`.
      num_samples: Monte Carlo samples :math:`S` (the paper: 10).
      learn_noise: whether :math:`\sigma^2` moves with the optimizer.
      noise_bounds: the ``noise_bounds`` given to :func:`gaussian_reparam_init`.

    Returns:
      ``(state, info)`` with ``info`` a :class:`ReparamInfo`.
    """
    if not isinstance(state, ReparamState):
        raise TypeError(f"`state` must be a ReparamState, got {type(state).__name__}")
    Phi_batch, y_batch = check_xy(Phi_batch, y_batch, "Phi_batch", "y_batch", "(batch_size, num_features)")
    _check_q(state.q, Phi_batch.shape[1], "state.q")
    _check_optimizer(optimizer)
    dtype = state.q.mean.dtype
    scale = _check_scale(prior_scale, Phi_batch.shape[1], dtype)
    bounds = _check_bounds(noise_bounds, dtype)
    num_samples = _check_pos_int(num_samples, "num_samples")
    return _reparam_step(
        key, state, Phi_batch.astype(dtype), y_batch.astype(dtype), jnp.asarray(num_data, dtype), scale,
        bounds, optimizer=optimizer, num_samples=num_samples, learn_noise=bool(learn_noise),
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames=("optimizer", "num_samples", "learn_noise"))
def _reparam_step(key, state, Phi_b, y_b, n, scale, bounds, *, optimizer, num_samples, learn_noise):
    params = (state.q.mean, state.q.log_std, state.noise_param)

    def loss(p):
        return -_minibatch_elbo(key, p, Phi_b, y_b, n, scale, bounds, num_samples, learn_noise) / n

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = optimizer.update(grads, state.opt_state, params)
    mean, log_std, u = optax.apply_updates(params, updates)
    info = ReparamInfo(-value * n, optax.tree.norm(grads))
    return ReparamState(GaussianMeanField(mean, log_std), u, opt_state), info


def fit_gaussian_reparam(
    key,
    X,
    y,
    *,
    init,
    prior_scale,
    optimizer,
    num_steps: int,
    feature_map=None,
    batch_size: int = 100,
    num_samples: int = 10,
    learn_noise: bool = True,
    noise_bounds=None,
):
    r"""Trains the diagonal Gaussian posterior with minibatch reparameterization gradients (REPARAM).

    Runs :func:`gaussian_reparam_step` ``num_steps`` times inside ``lax.scan`` (one compile). Each step
    draws ``batch_size`` row indices uniformly with replacement and, when ``feature_map`` is given,
    computes the minibatch features from the raw inputs on the fly (so the ``n x b`` feature matrix never
    exists).

    Args:
      key: PRNG key (minibatches and :math:`\epsilon` draws).
      X: inputs ``(n, d)``, or features ``(n, b)`` when ``feature_map`` is ``None``.
      y: targets ``(n,)``.
      init: ``(q, noise_variance)``: a :class:`GaussianMeanField` and the starting :math:`\sigma^2`.
      prior_scale: :math:`\sigma_w`, scalar or ``(b,)``.
      optimizer: an ``optax.GradientTransformation``, e.g. ``optax.adam(1e-2)``.
      num_steps: number of steps (the paper: 1000 for ``n < 3000``, else 10000).
      feature_map: optional pure ``(B, d) -> (B, b)`` map (e.g. ``functools.partial(kronvi.rff_features,
        params)``); its bound arrays are traced, so another fold's map does not recompile.
      batch_size: minibatch size :math:`B` (the paper: 100).
      num_samples: Monte Carlo samples per step (the paper: 10).
      learn_noise: learn :math:`\sigma^2` as a point estimate (else keep ``init``'s value).
      noise_bounds: optional ``(lo, hi)`` for the learned noise variance.

    Returns:
      ``(q, noise_variance, info)``; ``info`` is a :class:`ReparamInfo` of ``(num_steps,)`` arrays.

    References:
      Evans & Nair (2018), Table 1 ("REPARAM"); Blundell et al. (2015), "Weight uncertainty in neural
      networks".

    Example:
      >>> import jax, jax.numpy as jnp, optax, kronvi
      >>> X = jax.random.normal(jax.random.key(0), (500, 2)); y = X @ jnp.array([1.0, -1.0])
      >>> q0 = kronvi.GaussianMeanField(jnp.zeros(2), jnp.full(2, -3.0))
      >>> q, s2, info = kronvi.fit_gaussian_reparam(jax.random.key(1), X, y, init=(q0, 1.0),
      ...     prior_scale=1.0, optimizer=optax.adam(0.05), num_steps=500)
      >>> [round(float(v), 1) for v in q.mean]
      [1.0, -1.0]
    """
    if not (isinstance(init, tuple) and len(init) == 2):
        raise TypeError("`init` must be a tuple (q, noise_variance)")
    q, s0 = init
    X = as_float_array(X, "X")
    y = as_float_array(y, "y")
    check_ndim(X, 2, "X", "(num_points, num_inputs)")
    check_ndim(y, 1, "y", "(num_points,)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"`X` has {X.shape[0]} rows but `y` has {y.shape[0]}")
    if X.shape[0] == 0:
        raise ValueError("`X` is empty")
    check_finite(X, "X")
    check_finite(y, "y")
    _check_q(q, None, "init[0]")
    dtype = jnp.asarray(q.mean).dtype
    b = q.mean.shape[0]
    if feature_map is None:
        if X.shape[1] != b:
            raise ValueError(f"`X` has {X.shape[1]} columns (features) but `init[0]` has {b} weights")
        fmap = jax.tree_util.Partial(_identity)
    else:
        fmap = as_traced_callable(feature_map)
    _check_optimizer(optimizer)
    scale = _check_scale(prior_scale, b, dtype)
    bounds = _check_bounds(noise_bounds, dtype)
    num_steps = _check_pos_int(num_steps, "num_steps")
    batch_size = _check_pos_int(batch_size, "batch_size")
    num_samples = _check_pos_int(num_samples, "num_samples")
    state = gaussian_reparam_init(q, s0, optimizer=optimizer, noise_bounds=noise_bounds)
    state, info = _fit_reparam(
        key, state, fmap, X.astype(dtype), y.astype(dtype), scale, bounds, optimizer=optimizer,
        num_steps=num_steps, batch_size=batch_size, num_samples=num_samples, learn_noise=bool(learn_noise),
    )  # fmt: skip
    return state.q, _noise_from_param(state.noise_param, bounds), info


def _identity(x):
    return x


@functools.partial(
    jax.jit, static_argnames=("optimizer", "num_steps", "batch_size", "num_samples", "learn_noise")
)
def _fit_reparam(
    key, state, fmap, X, y, scale, bounds, *, optimizer, num_steps, batch_size, num_samples, learn_noise
):
    n = X.shape[0]
    n_arr = jnp.asarray(n, X.dtype)

    def body(state, k):
        k_idx, k_eps = jax.random.split(k)
        idx = jax.random.randint(k_idx, (batch_size,), 0, n)
        Phi_b = fmap(X[idx]).astype(X.dtype)
        return _reparam_step(
            k_eps, state, Phi_b, y[idx], n_arr, scale, bounds, optimizer=optimizer,
            num_samples=num_samples, learn_noise=learn_noise,
        )  # fmt: skip

    return lax.scan(body, state, jax.random.split(key, num_steps))
