r"""Mixture posteriors and mixture priors beyond mean field (Evans & Nair 2018, section 4).

A :class:`Mixture` is :math:`q(w) = \sum_{k=1}^r \alpha_k \bigotimes_{j=1}^b q^{(k)}_j`, a sum of ``r``
Kronecker-product vectors over the :math:`m^b` grid configurations. Everything *linear* in ``q`` stays
exact and cheap: the expected log-likelihood and the expected log of a factorized prior are
:math:`\alpha`-weighted sums of the mean-field terms, :math:`O(r(bm + b^2))`. The entropy is not linear in
``q``; two ways around it are implemented:

* :func:`mixture_elbo_bound`, the deterministic lower bound of Theorem 3 (tangent of the concave
  :math:`\log` at a Kronecker-product centre :math:`a`), trained with L-BFGS by
  :func:`fit_mixture_bound`;
* :func:`mixture_elbo_estimate`, an unbiased stochastic ELBO (and ELBO-gradient) estimate with exact
  likelihood and prior terms and a score-function (REINFORCE, eq. 13) entropy term, by default with each
  factor's score integrated exactly over its own levels (local expectation gradients), trained with any optax optimizer by :func:`mixture_sgd_init` / :func:`mixture_sgd_step` /
  :func:`fit_mixture_sgd`.

A :class:`MixturePrior` :math:`p(w) = \sum_c \beta_c \bigotimes_j p^{(c)}_j` has no exact expected
log-density; :func:`mixture_prior_bound` is the Jensen lower bound of Theorem 4.

The noise variance keeps a separate mean-field factor :math:`q_\sigma`; since
:math:`E_q\|y - \Phi w\|^2` is linear in ``q``, its exact coordinate-ascent update is available in closed form
for mixtures too (used by :func:`fit_mixture_sgd`).

References:
  Evans & Nair (2018), "Discretely Relaxing Continuous Variables for tractable Variational Inference",
  NeurIPS; section 4 ("Unfactorized variational distributions", "Unfactorized prior distributions",
  "Unbiased stochastic entropy and prior expectation gradients"), Theorems 3 and 4, eq. 13, appendix C.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from .._base.checks import as_float_array, check_finite, check_ndim, is_concrete
from .._base.kron import kron_log_inner_from_logs
from .._base.pytree import validated_pytree
from .._model.families import MeanField, check_family, entropy, grid_moments
from .._model.grids import DiscretePrior, check_noise_prior
from .._model.regression import LOG_2PI, check_phi_new, expected_rss, noise_moments, noise_optimum_logits
from .._solvers.lbfgs import minimize_lbfgs
from .._stats.regression import RegressionStats

NOISE_UPDATES = ("cavi", "gradient")
BOUND_METHODS = ("lbfgs", "optax-lbfgs")


# ----------------------------------------------------------------------------------------------------
# Pytrees
# ----------------------------------------------------------------------------------------------------


@validated_pytree
class Mixture:
    r"""Mixture of mean-field distributions, :math:`q = \sum_k \alpha_k \bigotimes_j q^{(k)}_j`.

    Component ``k``'s factor ``j`` is ``softmax(logits[k, j])``; the mixture weights are
    :math:`\alpha = \mathrm{softmax}(\text{weight\_logits})`.

    Args:
      logits: ``(r, b, m)`` unnormalized log-probabilities, finite: ``r`` components over ``b`` weights
        with ``m`` grid levels each.
      weight_logits: ``(r,)`` unnormalized log mixture weights, finite.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> q = kronvi.Mixture(jnp.zeros((2, 3, 4)), jnp.array([0.0, jnp.log(3.0)]))
      >>> [round(float(a), 3) for a in q.weights], q.marginals.sum(-1).tolist()
      ([0.25, 0.75], [1.0, 1.0, 1.0])
    """

    _fields = ("logits", "weight_logits")

    def __init__(self, logits, weight_logits):
        logits = as_float_array(logits, "logits")
        weight_logits = as_float_array(weight_logits, "weight_logits")
        check_ndim(logits, 3, "logits", "(num_components, num_weights, num_levels)")
        check_ndim(weight_logits, 1, "weight_logits", "(num_components,)")
        if 0 in logits.shape:
            raise ValueError(f"`logits` is empty (shape {tuple(logits.shape)})")
        if weight_logits.shape[0] != logits.shape[0]:
            raise ValueError(
                f"`weight_logits` has {weight_logits.shape[0]} entries but `logits` has "
                f"{logits.shape[0]} components"
            )
        check_finite(logits, "logits")
        check_finite(weight_logits, "weight_logits")
        dtype = jnp.result_type(logits, weight_logits)
        object.__setattr__(self, "logits", logits.astype(dtype))
        object.__setattr__(self, "weight_logits", weight_logits.astype(dtype))

    @property
    def probs(self):
        """Component factors ``(r, b, m)``."""
        return jax.nn.softmax(self.logits, axis=-1)

    @property
    def log_probs(self):
        return jax.nn.log_softmax(self.logits, axis=-1)

    @property
    def weights(self):
        r"""Mixture weights :math:`\alpha`, ``(r,)``."""
        return jax.nn.softmax(self.weight_logits, axis=-1)

    @property
    def log_weights(self):
        return jax.nn.log_softmax(self.weight_logits, axis=-1)

    @property
    def marginals(self):
        r"""Per-weight marginals :math:`\sum_k \alpha_k q^{(k)}_j`, ``(b, m)``."""
        return jnp.exp(self.log_marginals)

    @property
    def log_marginals(self):
        """Log of :attr:`marginals`, computed in log space (finite whenever the logits are)."""
        return jax.nn.logsumexp(self.log_weights[..., :, None, None] + self.log_probs, axis=-3)

    @property
    def num_components(self) -> int:
        return self.logits.shape[-3]

    @classmethod
    def from_mean_field(cls, q_w: MeanField):
        """The one-component mixture equal to a :class:`MeanField` distribution."""
        if not isinstance(q_w, MeanField):
            raise TypeError(f"`q_w` must be a MeanField, got {type(q_w).__name__}")
        return cls(q_w.logits[None], jnp.zeros((1,), q_w.logits.dtype))


@validated_pytree
class MixturePrior:
    r"""Mixture of factorized priors on one grid, :math:`p(w) = \sum_c \beta_c \prod_j p^{(c)}_j(w_j)`.

    Args:
      values: ``(b, m)`` grid values shared by all components, finite.
      log_probs: ``(C, b, m)`` log-probabilities of each component's factors, finite; normalized over the
        last axis.
      log_weights: ``(C,)`` log mixture weights :math:`\log\beta`, finite; normalized.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> grid = jnp.array([[-1.0, 0.0, 1.0]])
      >>> p = kronvi.MixturePrior(grid, jnp.log(jnp.array([[[0.1, 0.8, 0.1]], [[0.3, 0.4, 0.3]]])),
      ...                         jnp.zeros(2))
      >>> p.weights.tolist(), p.num_components
      ([0.5, 0.5], 2)
    """

    _fields = ("values", "log_probs", "log_weights")

    def __init__(self, values, log_probs, log_weights):
        values = as_float_array(values, "values")
        log_probs = as_float_array(log_probs, "log_probs")
        log_weights = as_float_array(log_weights, "log_weights")
        check_ndim(values, 2, "values", "(num_weights, num_levels)")
        check_ndim(log_probs, 3, "log_probs", "(num_components, num_weights, num_levels)")
        check_ndim(log_weights, 1, "log_weights", "(num_components,)")
        if 0 in values.shape or log_probs.shape[0] == 0:
            raise ValueError(
                f"`values` {tuple(values.shape)} / `log_probs` {tuple(log_probs.shape)} are empty"
            )
        if log_probs.shape[1:] != values.shape:
            raise ValueError(
                f"`log_probs` shape {tuple(log_probs.shape)} must be (C, *values.shape) = "
                f"(C, {values.shape[0]}, {values.shape[1]})"
            )
        if log_weights.shape[0] != log_probs.shape[0]:
            raise ValueError(
                f"`log_weights` has {log_weights.shape[0]} entries but `log_probs` has "
                f"{log_probs.shape[0]} components"
            )
        for x, name in ((values, "values"), (log_probs, "log_probs"), (log_weights, "log_weights")):
            check_finite(x, name)
        dtype = jnp.result_type(values, log_probs, log_weights)
        object.__setattr__(self, "values", values.astype(dtype))
        object.__setattr__(self, "log_probs", jax.nn.log_softmax(log_probs.astype(dtype), axis=-1))
        object.__setattr__(self, "log_weights", jax.nn.log_softmax(log_weights.astype(dtype), axis=-1))

    @property
    def weights(self):
        return jnp.exp(self.log_weights)

    @property
    def num_components(self) -> int:
        return self.log_probs.shape[-3]

    @classmethod
    def from_priors(cls, priors, log_weights=None):
        """Stacks :class:`DiscretePrior` components that share one grid (equal weights by default)."""
        priors = list(priors)
        if not priors or not all(isinstance(p, DiscretePrior) for p in priors):
            raise TypeError("`priors` must be a non-empty sequence of DiscretePrior")
        values = priors[0].values
        for c, p in enumerate(priors[1:], 1):
            if p.values.shape != values.shape or not bool(jnp.all(p.values == values)):
                raise ValueError(f"`priors[{c}]` has a different grid from `priors[0]`")
        if log_weights is None:
            log_weights = jnp.zeros((len(priors),), values.dtype)
        return cls(values, jnp.stack([p.log_probs for p in priors]), log_weights)


class MixtureSGDState(NamedTuple):
    """State of :func:`mixture_sgd_step`: the current posterior and the optax state.

    Attributes:
      q: :class:`Mixture` over the weights.
      q_noise: :class:`MeanField` ``(1, m_sigma)`` over the noise variance.
      opt_state: the optimizer's state for the parameters
        ``(q.logits, q.weight_logits, q_noise.logits)``.
    """

    q: Mixture
    q_noise: MeanField
    opt_state: optax.OptState


class MixtureSGDInfo(NamedTuple):
    """Diagnostics of one :func:`mixture_sgd_step` (stacked over steps by :func:`fit_mixture_sgd`).

    Attributes:
      elbo: unbiased estimate of the ELBO at the parameters *before* the step (same draws as the
        gradient).
      elbo_stderr: its Monte Carlo standard error.
      grad_norm: norm of the stochastic gradient of :math:`-\\mathcal{L}/n`.
    """

    elbo: jax.Array
    elbo_stderr: jax.Array
    grad_norm: jax.Array


# ----------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------


def _check_mixture(q, name="q"):
    if not isinstance(q, Mixture):
        raise TypeError(f"`{name}` must be a Mixture, got {type(q).__name__}")


def _check_weight_prior(prior_w, q=None, name="prior_w"):
    if not isinstance(prior_w, DiscretePrior | MixturePrior):
        raise TypeError(f"`{name}` must be a DiscretePrior or MixturePrior, got {type(prior_w).__name__}")
    if q is not None and q.logits.shape[-2:] != prior_w.values.shape[-2:]:
        raise ValueError(
            f"`q.logits` has shape {tuple(q.logits.shape)} but `{name}` grid has shape "
            f"{tuple(prior_w.values.shape)}: they must agree (num_weights, num_levels)"
        )


def _check_args(q, q_noise, prior_w, prior_noise, stats=None):
    _check_mixture(q)
    _check_weight_prior(prior_w, q)
    check_noise_prior(prior_noise)
    check_family(q_noise, prior_noise, "q_noise", "prior_noise")
    if stats is not None:
        if not isinstance(stats, RegressionStats):
            raise TypeError(f"`stats` must be RegressionStats, got {type(stats).__name__}")
        b = prior_w.values.shape[-2]
        if stats.Phity.shape[-1:] != (b,) or stats.PhitPhi.shape[-2:] != (b, b):
            raise ValueError(
                f"`stats` describe {stats.Phity.shape[-1]} features (PhitPhi {tuple(stats.PhitPhi.shape)})"
                f" but the model has {b} weights"
            )
        if is_concrete(stats.n) and bool(np.any(np.asarray(stats.n) <= 0)):
            raise ValueError("`stats.n` must be positive: the statistics describe empty data")


def _check_log_center(log_center, q):
    log_center = jnp.asarray(log_center)
    if not jnp.issubdtype(log_center.dtype, jnp.floating):
        log_center = log_center.astype(q.logits.dtype)
    if log_center.shape != q.logits.shape[-2:]:
        raise ValueError(
            f"`log_center` must have shape {tuple(q.logits.shape[-2:])} (num_weights, num_levels), "
            f"got {tuple(log_center.shape)}"
        )
    check_finite(log_center, "log_center")
    return log_center


def _check_num_samples(num_samples, minimum=1):
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < minimum:
        raise ValueError(f"`num_samples` must be an int >= {minimum}, got {num_samples!r}")
    return num_samples


# ----------------------------------------------------------------------------------------------------
# Exact terms (linear in q)
# ----------------------------------------------------------------------------------------------------


def _expected_rss(q, prior_w, stats):
    r""":math:`E_q\|y - \Phi w\|^2 = \sum_k \alpha_k E_{q^{(k)}}\|y - \Phi w\|^2` (linear in q)."""
    per_component = jax.vmap(lambda logits: expected_rss(MeanField._unchecked(logits), prior_w, stats))
    return jnp.sum(q.weights * per_component(q.logits))


@jax.jit
def _expected_loglik(q, q_noise, prior_w, prior_noise, stats):
    e_inv, e_log, _ = noise_moments(q_noise, prior_noise)
    return -0.5 * stats.n * (LOG_2PI + e_log) - 0.5 * e_inv * _expected_rss(q, prior_w, stats)


def _prior_bound(log_probs, log_weights, prior):
    """Theorem 4 with per-component optimal responsibilities (see :func:`mixture_prior_bound`)."""
    e = jnp.einsum("kjm,cjm->kc", jnp.exp(log_probs), prior.log_probs)  # E_{q^(k)} log p^(c)
    return jnp.sum(jnp.exp(log_weights) * jax.nn.logsumexp(prior.log_weights[None, :] + e, axis=-1))


@jax.jit
def _expected_log_prior_w(q, prior_w):
    """Exact :math:`E_q[\\log p(w)]` for a factorized prior, the Theorem-4 bound for a mixture prior."""
    if isinstance(prior_w, MixturePrior):
        return _prior_bound(q.log_probs, q.log_weights, prior_w)
    return jnp.sum(q.marginals * prior_w.log_probs)


def _noise_terms(q_noise, prior_noise):
    r""":math:`E[\log p(\sigma^2)] + H[q_\sigma]`, exact."""
    return jnp.sum(q_noise.probs * prior_noise.log_probs) + entropy(q_noise)


def _noise_cavi_logits(q, prior_w, prior_noise, stats):
    r"""Exact coordinate-ascent update of :math:`q_\sigma` given the mixture (the ELBO is concave in it)."""
    return noise_optimum_logits(_expected_rss(q, prior_w, stats), prior_noise, stats.n)


def mixture_expected_loglik(q, q_noise, prior_w, prior_noise, stats):
    r"""Exact expected log-likelihood :math:`E_{q(w)q_\sigma}[\log N(y \mid \Phi w, \sigma^2 I)]`, mixture q.

    The expectation is linear in ``q``, so it is the :math:`\alpha`-weighted sum of the mean-field terms:

    .. math::
       -\tfrac n2(\log 2\pi + E[\log\sigma^2]) - \tfrac12 E[\sigma^{-2}] \sum_k \alpha_k
       \big(y^\top y - 2\bar w_k^\top \Phi^\top y + \bar w_k^\top \Phi^\top\Phi \bar w_k
       + \textstyle\sum_j (\Phi^\top\Phi)_{jj} \mathrm{Var}_{q^{(k)}}(w_j)\big),

    :math:`O(r b^2)`.

    Args:
      q: :class:`Mixture`, logits ``(r, b, m)``.
      q_noise: :class:`MeanField` ``(1, m_sigma)`` over the noise variance.
      prior_w: :class:`DiscretePrior` or :class:`MixturePrior` (only its grid ``values (b, m)`` is used).
      prior_noise: :class:`DiscretePrior` ``(1, m_sigma)``.
      stats: :class:`RegressionStats`.

    Returns:
      A scalar.

    References:
      Evans & Nair (2018), Theorem 1 and section 4.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.gaussian_prior(2, 1.0, levels=3), kronvi.noise_prior(0.1)
      >>> q = kronvi.Mixture.from_mean_field(kronvi.MeanField.from_prior(pw))
      >>> qn = kronvi.MeanField.from_prior(pn)
      >>> bool(jnp.isfinite(kronvi.mixture_expected_loglik(q, qn, pw, pn, stats)))
      True
    """
    _check_args(q, q_noise, prior_w, prior_noise, stats)
    return _expected_loglik(q, q_noise, prior_w, prior_noise, stats)


def mixture_prior_bound(q, prior):
    r"""Lower bound on :math:`E_q[\log p(w)]` for a mixture prior (Theorem 4); exact for a factorized one.

    For :math:`p = \sum_c \beta_c \bigotimes_j p^{(c)}_j`, concavity of :math:`\log` (Jensen) gives, for
    every configuration :math:`w` and any responsibilities :math:`\lambda \in \Delta^C`,
    :math:`\log p(w) \ge \sum_c \lambda_c\big(\log\beta_c + \log p^{(c)}(w) - \log\lambda_c\big)`.
    Taking the expectation under each component of ``q`` with its own responsibilities and maximizing over
    them (:math:`\lambda^{(k)}_c \propto \beta_c \exp E_{q^{(k)}}[\log p^{(c)}]`) gives the bound
    implemented here:

    .. math::
       E_q[\log p] \;\ge\; \sum_k \alpha_k \log \sum_c \beta_c
       \exp\Big(\sum_j \langle q^{(k)}_j, \log p^{(c)}_j\rangle\Big),

    each inner term a Kronecker-sum inner product (Prop. 3), :math:`O(rCbm)`. It is at least the
    simpler bound :math:`\sum_c \beta_c E_q[\log p^{(c)}]` (:math:`\lambda = \beta`), and exact when
    :math:`C = 1`.

    Args:
      q: :class:`Mixture` ``(r, b, m)`` or :class:`MeanField` ``(b, m)``.
      prior: :class:`MixturePrior` ``(C, b, m)``, or a :class:`DiscretePrior` ``(b, m)`` (then the exact
        expectation is returned).

    Returns:
      A scalar.

    References:
      Evans & Nair (2018), section 4, "Unfactorized prior distributions", Theorem 4.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> grid = jnp.array([[-1.0, 0.0, 1.0]])
      >>> p = kronvi.MixturePrior(grid, jnp.log(jnp.array([[[0.1, 0.8, 0.1]], [[0.3, 0.4, 0.3]]])),
      ...                         jnp.zeros(2))
      >>> round(float(kronvi.mixture_prior_bound(kronvi.MeanField(jnp.zeros((1, 3))), p)), 4)
      -1.3277
    """
    if isinstance(q, MeanField):
        q = Mixture._unchecked(
            q.logits[..., None, :, :], jnp.zeros(q.logits.shape[:-2] + (1,), q.logits.dtype)
        )
    _check_mixture(q)
    _check_weight_prior(prior, q, "prior")
    return _expected_log_prior_w(q, prior)


# ----------------------------------------------------------------------------------------------------
# Theorem 3: deterministic lower bound
# ----------------------------------------------------------------------------------------------------


def _entropy_bound(log_probs, log_weights, log_center, rescale):
    r"""Theorem 3's entropy bound; every product over the ``b`` weights is taken in log space."""
    marg = jnp.exp(jax.nn.logsumexp(log_weights[:, None, None] + log_probs, axis=0))
    cross = jnp.sum(marg * log_center)  # <q, log a>, a Kronecker-sum inner product
    # log prod_j sum_v q^(k)_jv q^(l)_jv / a_jv for every pair (k, l): (r, r)
    pair = kron_log_inner_from_logs(log_probs[:, None], log_probs[None, :] - log_center)
    log_quad = jax.nn.logsumexp(log_weights[:, None] + log_weights[None, :] + pair)  # log <q, q/a>
    if rescale:
        return -cross - log_quad
    return 1.0 - cross - jnp.exp(log_quad)


@functools.partial(jax.jit, static_argnames=("rescale",))
def _bound(q, log_center, q_noise, prior_w, prior_noise, stats, rescale=True):
    return (
        _expected_loglik(q, q_noise, prior_w, prior_noise, stats)
        + _expected_log_prior_w(q, prior_w)
        + _noise_terms(q_noise, prior_noise)
        + _entropy_bound(q.log_probs, q.log_weights, log_center, rescale)
    )


def mixture_elbo_bound(q, log_center, q_noise, prior_w, prior_noise, stats, *, rescale: bool = True):
    r"""Deterministic lower bound on the ELBO of a mixture posterior (Theorem 3).

    Concavity of the logarithm, :math:`\log x \le \log a + x/a - 1` for :math:`a > 0`, applied to every
    entry of :math:`\log q` gives, for any positive Kronecker-product centre
    :math:`a = \bigotimes_j a_j`,

    .. math::
       H[q] = -\langle q, \log q\rangle \;\ge\; 1 - \langle q, \textstyle\bigoplus_j \log a_j\rangle
       - \langle q, q \circ a^{-1}\rangle,\qquad
       \langle q, q\circ a^{-1}\rangle = \sum_{k,l}\alpha_k\alpha_l \prod_j
       \sum_{v} \frac{q^{(k)}_{jv} q^{(l)}_{jv}}{a_{jv}},

    with equality iff :math:`a = q` (possible only for a one-component mixture). The first inner product
    is a Kronecker sum against ``q`` (Prop. 3); the product over the ``b`` weights is taken in log space
    (appendix C), :math:`O(r^2 bm)`.

    With ``rescale=True`` (default) the bound is evaluated at the best multiple :math:`c\,a` of the
    centre, :math:`c = \langle q, q\circ a^{-1}\rangle`, which has the closed form

    .. math::
       H[q] \;\ge\; -\langle q, \textstyle\bigoplus_j \log a_j\rangle - \log\langle q, q\circ a^{-1}\rangle
       \;\ge\; 1 - \langle q, \textstyle\bigoplus_j \log a_j\rangle - \langle q, q\circ a^{-1}\rangle

    (the same Theorem-3 bound, at centre :math:`c\,a`; the second inequality is :math:`\log x \le x - 1`).
    It stays in log space throughout: for many weights :math:`\langle q, q\circ a^{-1}\rangle` is a
    product of ``b`` factors that overflows unless the centre happens to be well scaled (e.g. ``b = 2000``
    with distinct components gives :math:`e^{1000}`, and the literal form returns :math:`-\infty`). Use
    ``rescale=False`` for the literal statement of the theorem.

    The rest of the ELBO is exact (:func:`mixture_expected_loglik`, the expected log prior, the noise
    terms), or, for a :class:`MixturePrior`, uses the Theorem-4 bound (:func:`mixture_prior_bound`); the
    result is always :math:`\le` the exact ELBO.

    Args:
      q: :class:`Mixture`, logits ``(r, b, m)``.
      log_center: ``(b, m)`` logs of the centre's factors :math:`a_j` (any finite values; ``a`` need
        not be normalized). ``q.log_marginals`` is a good start; for ``r = 1`` it makes the bound exact.
      q_noise: :class:`MeanField` ``(1, m_sigma)``.
      prior_w: :class:`DiscretePrior` ``(b, m)`` or :class:`MixturePrior` ``(C, b, m)``.
      prior_noise: :class:`DiscretePrior` ``(1, m_sigma)``.
      stats: :class:`RegressionStats`.
      rescale: evaluate at the optimally rescaled centre (see above).

    Returns:
      The bound, a scalar.

    References:
      Evans & Nair (2018), section 4, Theorem 3 and appendix C.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.gaussian_prior(2, 1.0, levels=3), kronvi.noise_prior(0.1)
      >>> qw, qn = kronvi.MeanField.from_prior(pw), kronvi.MeanField.from_prior(pn)
      >>> q = kronvi.Mixture.from_mean_field(qw)
      >>> bound = kronvi.mixture_elbo_bound(q, q.log_marginals, qn, pw, pn, stats)
      >>> bool(jnp.allclose(bound, kronvi.regression_elbo(qw, qn, pw, pn, stats)))
      True
    """
    _check_args(q, q_noise, prior_w, prior_noise, stats)
    log_center = _check_log_center(log_center, q)
    return _bound(q, log_center, q_noise, prior_w, prior_noise, stats, rescale=bool(rescale))


# ----------------------------------------------------------------------------------------------------
# Sampling and the stochastic (REINFORCE) estimate
# ----------------------------------------------------------------------------------------------------


def _inverse_cdf(probs, u):
    """Grid index of each uniform ``u (..., b)`` under factor probabilities ``probs (..., b, m)``."""
    cdf = jnp.cumsum(probs, axis=-1)[..., :-1]
    return jnp.sum(cdf <= u[..., None], axis=-1, dtype=jnp.int32)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _sample_indices(key, probs, log_weights, num_samples):
    """Component by categorical draw, then each weight by inverse CDF: ``(S, b)`` int32 grid indices."""
    key_c, key_u = jax.random.split(key)
    comps = jax.random.categorical(key_c, log_weights, shape=(num_samples,))
    u = jax.random.uniform(key_u, (num_samples, probs.shape[-2]), probs.dtype)
    return _inverse_cdf(probs[comps], u)


def _log_prob_at(log_probs, log_weights, idx):
    r""":math:`\log\sum_k \alpha_k \prod_j q^{(k)}_j(x_{sj})` at indices ``idx (S, b)``: ``(S,)``."""
    b = log_probs.shape[-2]
    per_comp = jnp.sum(log_probs[:, jnp.arange(b)[None, :], idx], axis=-1)  # (r, S)
    return jax.nn.logsumexp(log_weights[:, None] + per_comp, axis=0)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _estimate(key, q, q_noise, prior_w, prior_noise, stats, num_samples):
    """Returns ``(surrogate, estimate, stderr)``; see :func:`mixture_elbo_estimate`."""
    sg = lax.stop_gradient
    exact = _expected_loglik(q, q_noise, prior_w, prior_noise, stats) + _noise_terms(q_noise, prior_noise)
    idx = _sample_indices(key, sg(q.probs), sg(q.log_weights), num_samples=num_samples)
    log_q = _log_prob_at(q.log_probs, q.log_weights, idx)  # (S,)
    if isinstance(prior_w, MixturePrior):
        log_p = _log_prob_at(prior_w.log_probs, prior_w.log_weights, idx)
    else:
        exact = exact + _expected_log_prior_w(q, prior_w)
        log_p = jnp.zeros_like(log_q)
    f = sg(log_p - log_q)  # the sampled integrand, E_q[f] = E_q[log p] - E_q[log q] (or the entropy)
    if num_samples > 1:
        baseline = (jnp.sum(f) - f) / (num_samples - 1)  # leave-one-out: independent of x_s
        stderr = jnp.std(f, ddof=1) / jnp.sqrt(num_samples)
    else:
        baseline = jnp.zeros_like(f)
        stderr = jnp.full((), jnp.nan, f.dtype)
    # Value: exact + mean(f) (log_p keeps its pathwise gradient in the prior's parameters).
    # Gradient in q: mean((f - baseline) grad log q), the score-function term; the pathwise term
    # E_q[grad log q] is zero and is dropped.
    sampled = jnp.mean(log_p - sg(log_q)) + jnp.mean((f - baseline) * (log_q - sg(log_q)))
    return exact + sampled, sg(exact) + jnp.mean(f), stderr


def _sample_per_component(key, probs, per_component):
    """``per_component`` draws from each component by inverse CDF: ``(r, S_k, b)`` int32 grid indices."""
    r, b = probs.shape[0], probs.shape[1]
    u = jax.random.uniform(key, (r, per_component, b), probs.dtype)
    return _inverse_cdf(probs[:, None], u)


def _stratified_terms(key, q, prior_w, num_samples):
    r"""Draws ``num_samples // r`` (>= 2) configurations from each component (no gradient through the
    draws) and returns ``(idx, log_q_own, log_q_mix, log_p)``: the grid indices ``(r, S_k, b)``,
    :math:`\log q_k(x_{ks})` and :math:`\log q(x_{ks})`, both ``(r, S_k)``, and :math:`\log p(x_{ks})` for a
    :class:`MixturePrior` (else ``None``)."""
    r, b = q.logits.shape[0], q.logits.shape[1]
    per = max(2, num_samples // r)
    idx = _sample_per_component(key, lax.stop_gradient(q.probs), per)  # (r, S_k, b), x ~ q_k
    cols = jnp.arange(b)
    at = jnp.moveaxis(jnp.sum(q.log_probs[:, cols[None, None, :], idx], axis=-1), 0, -1)  # (k, S_k, l)
    log_q_mix = jax.nn.logsumexp(q.log_weights + at, axis=-1)  # (k, S_k): log q(x)
    log_q_own = at[jnp.arange(r), :, jnp.arange(r)]  # (k, S_k): log q_k(x)
    log_p = None
    if isinstance(prior_w, MixturePrior):
        log_p = _log_prob_at(prior_w.log_probs, prior_w.log_weights, idx.reshape(-1, b)).reshape(r, per)
    return idx, log_q_own, log_q_mix, log_p


def _estimate_stratified_common(q, q_noise, prior_w, prior_noise, stats):
    r"""The exact part of the stratified estimate: expected log-likelihood, noise terms, the component
    entropies :math:`\sum_k \alpha_k H[q_k]` and, for a factorized prior, the expected log prior."""
    exact = _expected_loglik(q, q_noise, prior_w, prior_noise, stats) + _noise_terms(q_noise, prior_noise)
    comp_entropy = jax.vmap(lambda logits: entropy(MeanField._unchecked(logits)))(q.logits)  # (r,)
    exact = exact + jnp.sum(jnp.exp(q.log_weights) * comp_entropy)
    if not isinstance(prior_w, MixturePrior):
        exact = exact + _expected_log_prior_w(q, prior_w)
    return exact


def _loo_baseline(f):
    """Leave-one-out mean over the draws of each component (axis 1): independent of the draw itself."""
    return (jnp.sum(f, axis=1, keepdims=True) - f) / (f.shape[1] - 1)


def _value_and_stderr(exact, weights, f):
    estimate = lax.stop_gradient(exact) + jnp.sum(weights * jnp.mean(f, axis=1))
    stderr = jnp.sqrt(jnp.sum(weights**2 * jnp.var(f, axis=1, ddof=1) / f.shape[1]))
    return estimate, stderr


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _estimate_stratified(key, q, q_noise, prior_w, prior_noise, stats, num_samples):
    r"""Returns ``(surrogate, estimate, stderr)`` with component-stratified draws, exact component
    entropies and a pure score-function gradient; see :func:`mixture_elbo_estimate`."""
    sg = lax.stop_gradient
    exact = _estimate_stratified_common(q, q_noise, prior_w, prior_noise, stats)
    sq = Mixture._unchecked(sg(q.logits), sg(q.weight_logits))
    idx, _, log_q_mix, log_p = _stratified_terms(key, sq, prior_w, num_samples)
    r, b = q.logits.shape[0], q.logits.shape[1]
    # log q_k(x) at component k's own draws, the one quantity that carries a gradient (the score). A gather
    # of its own: slicing it out of the (k, S_k, l) table instead would send the backward pass through the
    # whole r-times-larger gather.
    own = jnp.sum(q.log_probs[jnp.arange(r)[:, None, None], jnp.arange(b)[None, None, :], idx], axis=-1)
    f = sg(own) - log_q_mix  # g = log q_k - log q, E_{q_k}[g] = KL(q_k || q)
    if log_p is not None:
        f = f + sg(log_p)
    weights = jnp.exp(q.log_weights)
    # Value: exact + sum_k a_k mean_s f, which also gives the weight gradient sum_k (grad a_k) E_{q_k}[f].
    # Component gradient: a_k E_{q_k}[(f - baseline) grad log q_k], the score-function identity applied
    # to -sum_x grad q(x) log q(x); log p keeps its pathwise gradient in the prior's parameters.
    sampled = jnp.sum(weights * jnp.mean(f, axis=1)) + jnp.sum(
        sg(weights) * jnp.mean((f - _loo_baseline(f)) * (own - sg(own)), axis=1)
    )
    if log_p is not None:
        sampled = sampled + jnp.sum(sg(weights) * jnp.mean(log_p - sg(log_p), axis=1))
    estimate, stderr = _value_and_stderr(exact, sg(weights), f)
    return exact + sampled, estimate, stderr


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _estimate_stratified_pathwise(key, q, q_noise, prior_w, prior_noise, stats, num_samples):
    r"""As :func:`_estimate_stratified`, with the gradient of the log-ratio taken pathwise as well
    (``estimator="stratified-pathwise"``, kept for comparison)."""
    sg = lax.stop_gradient
    exact = _estimate_stratified_common(q, q_noise, prior_w, prior_noise, stats)
    _, log_q_own, log_q_mix, log_p = _stratified_terms(key, q, prior_w, num_samples)
    g = log_q_own - log_q_mix  # pathwise in q
    if log_p is not None:
        g = g + log_p
    f = sg(g)
    weights = jnp.exp(q.log_weights)
    # Value: exact + sum_k a_k mean_s g. Gradient: pathwise through g (and a_k), plus the score-function
    # term of the draws x ~ q_k: mean_s (f - baseline) grad log q_k(x).
    sampled = jnp.sum(weights * jnp.mean(g + (f - _loo_baseline(f)) * (log_q_own - sg(log_q_own)), axis=1))
    estimate, stderr = _value_and_stderr(exact, sg(weights), f)
    return exact + sampled, estimate, stderr


_LOCAL_BATCH = 2**19  # grid cells per batch of draws in the local scores (~2 MB of float32 at a time)


def _level_scale(log_probs):
    """``(N, E)`` for :func:`_local_table`: the per-site-and-level maximum over components of ``log_probs
    (C, b, m)`` and ``exp(log_probs - N)``, whose maximum over components is 1."""
    N = jnp.max(log_probs, axis=0)
    return N, jnp.exp(log_probs - N)


def _local_table(log_probs, log_weights, x, scale=None):
    r"""For one configuration ``x (b,)``: :math:`\log\sum_c w_c \prod_i p^{(c)}_i(x'_i)` at every single-site
    change :math:`x' = (x_{-j}, l)`, a ``(b, m)`` table (``log_probs (C, b, m)``), *less a per-site
    constant* :math:`M_j = \max_c \rho_{cj}`, where :math:`\rho_{cj}` is the log weight plus the other
    sites' log product. The callers only use differences across levels, and leaving out :math:`M_j`
    (and the other sites' sum, of order ``b`` nats) avoids float32 cancellation between large numbers.

    ``scale=None``: :math:`\mathrm{LSE}_c(\rho_{cj} - M_j + \log p^{(c)}_j(l))`, exact, ``C * b * m``
    exponentials. With ``scale`` from :func:`_level_scale`: :math:`N_{jl} + \log\sum_c e^{\rho_{cj} - M_j}
    E_{cjl}`, ``C * b`` exponentials and a multiply-add (4x faster at C = 5, m = 15). Every factor is at
    most 1 and the sum at least its largest term, so it underflows only where every term is below the
    smallest normal number (about :math:`e^{-87}` in float32) and is floored there. Use it only for the
    posterior's own table (:func:`_local_scores`): there the floor can touch component ``k``'s own term
    only where it is below :math:`e^{-87}`, i.e. where :math:`q^{(k)}_j(l)` is that far below the
    likeliest component's, or at a draw from :math:`q^{(k)}` that another component explains
    :math:`e^{87}` times better (probability below :math:`e^{-87}/\alpha_k`, Markov's inequality), and
    the score :math:`q^{(k)}_j(l)\,(F_{jl} - \bar F_j)` changes by that order. A mixture prior's table has
    no such link to the draws, so it is computed exactly."""
    at = log_probs[:, jnp.arange(x.shape[0]), x]  # (C, b): log p_c,j(x_j)
    rest = (log_weights + jnp.sum(at, axis=-1))[:, None] - at  # (C, b): without site j
    rest = rest - jnp.max(rest, axis=0)
    if scale is None:
        return jax.nn.logsumexp(rest[..., None] + log_probs, axis=0)
    N, E = scale
    s = jnp.einsum("cj,cjl->jl", jnp.exp(rest), E)
    return N + jnp.log(jnp.maximum(s, jnp.finfo(s.dtype).tiny))


def _local_scores(q, prior_w, idx, batch_size):
    r"""Local-expectation (Rao-Blackwellized) score terms: for component ``k``'s draws ``idx[k] (S_k, b)``,
    the mean over draws of :math:`q^{(k)}_j(l)\,(F_{jl} - \sum_{l'} q^{(k)}_j(l')F_{jl'})`, where
    :math:`F_{jl} = f(x_{-j}, l)` and :math:`f = \log q^{(k)} - \log q\ (+ \log p)`: the exact
    expectation over :math:`x_j` of :math:`f(x)\nabla_{\text{logits}_{kj}}\log q^{(k)}_j(x_j)`, given the
    draw's other coordinates. ``F`` enters only through differences across levels, so each site's
    constant (the other sites' log-probabilities) is left out. Returns ``(r, b, m)``; no gradient flows
    through it."""
    r, per, b = idx.shape
    probs = q.probs
    comp = jnp.repeat(jnp.arange(r), per)
    q_scale = _level_scale(q.log_probs)
    mixture_prior = isinstance(prior_w, MixturePrior)

    def one(args):
        k, x = args
        F = q.log_probs[k] - _local_table(q.log_probs, q.log_weights, x, q_scale)  # (b, m)
        if mixture_prior:
            F = F + _local_table(prior_w.log_probs, prior_w.log_weights, x)
        p = probs[k]
        return p * (F - jnp.sum(p * F, axis=-1, keepdims=True))

    terms = lax.map(one, (comp, idx.reshape(r * per, b)), batch_size=batch_size)  # (r * S_k, b, m)
    return jnp.mean(terms.reshape(r, per, b, -1), axis=1)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _estimate_local(key, q, q_noise, prior_w, prior_noise, stats, num_samples):
    r"""As :func:`_estimate_stratified`, with each factor's score term integrated exactly over that
    factor's own level given the draw's other coordinates (``estimator="local"``)."""
    sg = lax.stop_gradient
    exact = _estimate_stratified_common(q, q_noise, prior_w, prior_noise, stats)
    sq = Mixture._unchecked(sg(q.logits), sg(q.weight_logits))
    idx, log_q_own, log_q_mix, log_p = _stratified_terms(key, sq, prior_w, num_samples)
    f = log_q_own - log_q_mix  # no gradient: both come from the stopped q
    if log_p is not None:
        f = f + log_p  # pathwise in the prior's own parameters only
    weights = jnp.exp(q.log_weights)
    b, m = q.logits.shape[1], q.logits.shape[2]
    scores = _local_scores(sq, prior_w, idx, batch_size=max(1, min(idx.shape[1], _LOCAL_BATCH // (b * m))))
    # Value and weight gradient as in "stratified"; component gradient a_k * scores_k, which is already
    # the gradient with respect to the logits (each row sums to zero).
    sampled = jnp.sum(weights * jnp.mean(f, axis=1)) + jnp.sum(
        sg(weights)[:, None, None] * sg(scores) * (q.logits - sg(q.logits))
    )
    estimate, stderr = _value_and_stderr(exact, sg(weights), f)
    return exact + sampled, estimate, stderr


ESTIMATORS = ("stratified", "local", "stratified-pathwise", "score")


def mixture_elbo_estimate(
    key, q, q_noise, prior_w, prior_noise, stats, *, num_samples: int, estimator: str = "local"
):
    r"""Stochastic ELBO surrogate whose gradient is an unbiased estimate of the exact ELBO gradient.

    The expected log-likelihood, the noise terms and (for a factorized prior) the expected log prior are
    exact, with exact gradients. The entropy term uses the score-function identity (eq. 13)

    .. math::
       \nabla_\theta H[q_\theta] = -E_q\big[\log q(x)\,\nabla_\theta \log q(x)\big]
       \approx -\frac1S\sum_{s=1}^S \big(\log q(x_s) - \beta_s\big)\nabla_\theta\log q(x_s),

    with :math:`S` = ``num_samples`` independent draws :math:`x_s \sim q` and the leave-one-out baseline
    :math:`\beta_s = \frac{1}{S-1}\sum_{t\ne s}\log q(x_t)`, which is independent of :math:`x_s` and so
    keeps the estimate unbiased while removing most of its variance. The mixture density is
    :math:`\log q(x) = \mathrm{LSE}_k(\log\alpha_k + \sum_j \log q^{(k)}_j(x_j))`, :math:`O(rSb)`; the
    gradient covers the component logits and the mixture weights. For a :class:`MixturePrior` the
    prior term is sampled the same way (:math:`\log p(x) - \log q(x)` in place of :math:`-\log q(x)`).

    The returned value is itself an unbiased estimate of the ELBO (the exact terms plus the sample mean of
    :math:`\log p - \log q` or :math:`-\log q`): the score-function part is written as
    :math:`(f_s - \beta_s)(\log q(x_s) - \mathrm{stop\_gradient}(\log q(x_s)))`, which is zero in value.

    That is ``estimator="score"``, eq. 13 as written. ``estimator="stratified"`` is the same
    score-function estimator with a Rao-Blackwellized integrand: it draws ``num_samples // r`` (at
    least 2) configurations from *each* component and uses

    .. math::
       H[q] = \sum_k \alpha_k \Big(H[q^{(k)}] - E_{q^{(k)}}\big[\log q(x) - \log q^{(k)}(x)\big]\Big),

    where the component entropies :math:`H[q^{(k)}]` are exact (mean field) and only the log-ratio
    :math:`g = \log q^{(k)} - \log q` is sampled. Its gradient is the pure score-function form: from
    :math:`\nabla H = -\sum_x \nabla q(x)\log q(x)` and :math:`\nabla_{\theta_k} q = \alpha_k q^{(k)}
    \nabla\log q^{(k)}`,

    .. math::
       \nabla_{\theta_k} H = \alpha_k\nabla H[q^{(k)}]
         + \alpha_k E_{q^{(k)}}\big[(g(x) - \beta)\,\nabla_{\theta_k}\log q^{(k)}(x)\big],
       \qquad \nabla_{w} H = \sum_k \nabla_w\alpha_k\,\big(H[q^{(k)}] + E_{q^{(k)}}[g]\big).

    The log-ratio is zero for ``r = 1`` and small while the components overlap, so its variance does not
    grow with the entropy of the factors, and at identical components the gradient is exact (zero
    variance). ``estimator="stratified-pathwise"`` (this library's earlier default) also differentiates
    :math:`g` through :math:`\log q^{(k)}(x) - \log q(x)` at the draws; that term has expectation zero
    (:math:`\sum_k\alpha_k E_{q^{(k)}}[\nabla\log q] = E_q[\nabla \log q] = 0`) and only adds variance:
    about 70 times the total gradient variance at a mean-field start perturbed by 0.03, 1.3 times at
    0.3 (b = 2000, 3000 draws; ``benchmarks/results/bench_mixture.txt``). All estimators are unbiased
    (tested against enumeration); the stratified ones, including ``"local"`` below, give the same value
    on the same draws.

    The default, ``estimator="local"`` (local expectation gradients), Rao-Blackwellizes the score term
    once more: the score of factor :math:`j` depends on :math:`x_j` alone, so given a draw's other
    coordinates its expectation over :math:`x_j` is computed exactly,

    .. math::
       E_{q^{(k)}}\big[g(x)\,\nabla_{\eta_{kj}}\log q^{(k)}_j(x_j)\big]
         = E_{x_{-j}\sim q^{(k)}}\Big[\big(q^{(k)}_j(l)\,(g(x_{-j}, l) - \textstyle\sum_{l'}
           q^{(k)}_j(l')\,g(x_{-j}, l'))\big)_{l}\Big],

    with :math:`\eta_{kj}` the logits and :math:`g(x_{-j}, l)` the log-ratio at the draw with site
    :math:`j` set to level :math:`l`: all :math:`b\,m` single-site changes of a draw come from one
    :math:`(r, b, m)` table, :math:`O(r\,b\,m)` per draw against :math:`O(r\,b)`; no baseline is
    needed (the sum over levels is centred exactly). The other :math:`b-1` factors' noise no longer
    enters factor :math:`j`'s gradient: at b = 2000, m = 15, r = 5, an SGD step with 300 draws takes less
    time than one with 3000 stratified draws and its gradient has a small fraction of their variance
    near a mean field (figures in ``benchmarks/results/bench_mixture.txt``).

    Args:
      key: PRNG key.
      q: :class:`Mixture`, logits ``(r, b, m)``.
      q_noise: :class:`MeanField` ``(1, m_sigma)``.
      prior_w: :class:`DiscretePrior` ``(b, m)`` or :class:`MixturePrior` ``(C, b, m)``.
      prior_noise: :class:`DiscretePrior` ``(1, m_sigma)``.
      stats: :class:`RegressionStats`.
      num_samples: draws ``S`` (>= 2, for the baseline); the paper's "5-Mixture SGD" uses 3000.
      estimator: ``"local"`` (default), ``"stratified"``, ``"stratified-pathwise"`` or ``"score"``
        (eq. 13 as written).

    Returns:
      A scalar: differentiate it with ``jax.grad`` for the unbiased ELBO gradient.

    References:
      Evans & Nair (2018), section 4, "Unbiased stochastic entropy and prior expectation gradients",
      eq. 13. Leave-one-out baseline: Kool, van Hoof & Welling (2019), "Buy 4 REINFORCE samples, get a
      baseline for free!". Local expectation gradients: Titsias & Lazaro-Gredilla (2015), "Local
      expectation gradients for black box variational inference".

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.gaussian_prior(2, 1.0, levels=3), kronvi.noise_prior(0.1)
      >>> q = kronvi.Mixture(jnp.zeros((2, 2, 3)), jnp.zeros(2))
      >>> g = jax.grad(kronvi.mixture_elbo_estimate, argnums=1)(
      ...     jax.random.key(1), q, kronvi.MeanField.from_prior(pn), pw, pn, stats, num_samples=8)
      >>> g.logits.shape
      (2, 2, 3)
    """
    _check_args(q, q_noise, prior_w, prior_noise, stats)
    num_samples = _check_num_samples(num_samples, 2)
    return _estimator(estimator)(key, q, q_noise, prior_w, prior_noise, stats, num_samples=num_samples)[0]


def _estimator(name):
    if name == "stratified":
        return _estimate_stratified
    if name == "local":
        return _estimate_local
    if name == "stratified-pathwise":
        return _estimate_stratified_pathwise
    if name == "score":
        return _estimate
    raise ValueError(f"`estimator` must be one of {ESTIMATORS}, got {name!r}")


def mixture_elbo_unbiased(
    key,
    q,
    q_noise,
    prior_w,
    prior_noise,
    stats,
    *,
    num_samples: int,
    estimator: str = "stratified",
    chunk_size: int | None = None,
):
    r"""Unbiased Monte Carlo estimate of the ELBO of a mixture posterior, with its standard error.

    :math:`\mathcal{L} = E_q[\log p(y\mid w,\sigma^2)] + E[\log p(\sigma^2)] + H[q_\sigma] +
    E_q[\log p(w) - \log q(w)]`: every term exact except the last, estimated by the mean of
    :math:`\log p(x_s) - \log q(x_s)` over ``num_samples`` draws :math:`x_s \sim q` (the exact
    :math:`E_q[\log p]` is used for a factorized prior). Use it to report the objective that
    :func:`fit_mixture_sgd` maximizes, or to compare with :func:`mixture_elbo_bound`.

    Args:
      key, q, q_noise, prior_w, prior_noise, stats: as in :func:`mixture_elbo_estimate`.
      num_samples: draws (>= 2).
      estimator: ``"stratified"`` (default: exact component entropies, sampled log-ratios),
        ``"local"`` and ``"stratified-pathwise"`` (the same value on the same draws; ``"local"`` also
        computes its gradient terms, so costs more) or ``"score"``, as in :func:`mixture_elbo_estimate`.
      chunk_size: draws per chunk (>= 2, dividing ``num_samples``), or ``None`` for one chunk. The
        chunks run one after another with keys ``jax.random.split(key, num_samples // chunk_size)``, so
        memory is that of one chunk; the result is the mean of the chunk estimates and their standard
        errors combined.

    Returns:
      ``(estimate, stderr)``: scalars; ``stderr`` is the sample standard deviation of the sampled term
      over :math:`\sqrt S` (per chunk, then combined).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.gaussian_prior(2, 1.0, levels=3), kronvi.noise_prior(0.1)
      >>> qw, qn = kronvi.MeanField(jnp.zeros((2, 3))), kronvi.MeanField.from_prior(pn)  # uniform q_w
      >>> est, se = kronvi.mixture_elbo_unbiased(jax.random.key(1), kronvi.Mixture.from_mean_field(qw),
      ...                                        qn, pw, pn, stats, num_samples=100)
      >>> bool(jnp.abs(est - kronvi.regression_elbo(qw, qn, pw, pn, stats)) < 1e-3)  # log q is constant
      True
    """
    _check_args(q, q_noise, prior_w, prior_noise, stats)
    num_samples = _check_num_samples(num_samples, 2)
    fn = _estimator(estimator)
    if chunk_size is None:
        _, est, se = fn(key, q, q_noise, prior_w, prior_noise, stats, num_samples=num_samples)
        return lax.stop_gradient(est), se
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 2:
        raise ValueError(f"`chunk_size` must be an int >= 2 or None, got {chunk_size!r}")
    if num_samples % chunk_size:
        raise ValueError(f"`chunk_size` ({chunk_size}) must divide `num_samples` ({num_samples})")

    return _unbiased_in_chunks(
        key, q, q_noise, prior_w, prior_noise, stats, estimator=estimator, num_chunks=num_samples // chunk_size,
        chunk_size=chunk_size,
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames=("estimator", "num_chunks", "chunk_size"))
def _unbiased_in_chunks(key, q, q_noise, prior_w, prior_noise, stats, *, estimator, num_chunks, chunk_size):
    # Compiled once per (estimator, sizes, shapes): a lax.map over a fresh closure outside jit compiles a
    # new executable on every call, and thousands of those (one study) exhaust the JIT's code memory.
    fn = _estimator(estimator)

    def one(k):
        return fn(k, q, q_noise, prior_w, prior_noise, stats, num_samples=chunk_size)[1:]

    est, se = lax.map(one, jax.random.split(key, num_chunks))
    return lax.stop_gradient(jnp.mean(est)), jnp.sqrt(jnp.sum(se**2)) / se.shape[0]


def sample_mixture(key, q, num_samples: int):
    r"""Draws from a mixture: a component :math:`k \sim \alpha`, then each :math:`x_j \sim q^{(k)}_j`.

    Args:
      key: PRNG key.
      q: :class:`Mixture` ``(r, b, m)`` with ``m <= 256``.
      num_samples: number of draws ``S``.

    Returns:
      Grid indices ``(S, b)`` as ``uint8`` (4-bit grids fit; map to values with
      ``jnp.take_along_axis(prior_w.values, idx.T, 1).T``).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> q = kronvi.Mixture(jnp.array([[[9.0, 0.0]], [[0.0, 9.0]]]), jnp.zeros(2))
      >>> x = kronvi.sample_mixture(jax.random.key(0), q, 1000)
      >>> x.shape, x.dtype, bool(0.4 < x.mean() < 0.6)
      ((1000, 1), dtype('uint8'), True)
    """
    _check_mixture(q)
    num_samples = _check_num_samples(num_samples, 1)
    if q.logits.shape[-1] > 256:
        raise ValueError(f"`q` has {q.logits.shape[-1]} grid levels; uint8 indices need <= 256")
    return _sample_indices(key, q.probs, q.log_weights, num_samples=num_samples).astype(jnp.uint8)


def predict_mixture(q, q_noise, prior_w, prior_noise, Phi_new):
    r"""Exact predictive mean and variance of :math:`y^* = \Phi^* w + \varepsilon` under a mixture.

    With component means :math:`\mu_k = \Phi^*\bar w_k` and variances
    :math:`v_k = (\Phi^*)^{\circ 2}\mathrm{Var}_{q^{(k)}}(w)`, the law of total variance gives

    .. math::
       E[y^*] = \sum_k \alpha_k \mu_k,\qquad
       \mathrm{Var}[y^*] = \sum_k \alpha_k\big(v_k + (\mu_k - E[y^*])^2\big) + E_{q_\sigma}[\sigma^2].

    Args:
      q: :class:`Mixture` ``(r, b, m)``.
      q_noise, prior_w, prior_noise: as in :func:`mixture_elbo_bound` (only ``prior_w.values`` is used).
      Phi_new: test features ``(num_points, b)``.

    Returns:
      ``(mean, variance)``, each ``(num_points,)``.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> pw, pn = kronvi.gaussian_prior(1, 1.0, levels=3, width=1.0), kronvi.noise_prior(1.0, levels=1)
      >>> q = kronvi.Mixture(jnp.log(jnp.array([[[1.0, 1e-9, 1e-9]], [[1e-9, 1e-9, 1.0]]])), jnp.zeros(2))
      >>> m, v = kronvi.predict_mixture(q, kronvi.MeanField.from_prior(pn), pw, pn, jnp.ones((1, 1)))
      >>> [round(float(m[0]), 6), round(float(v[0]), 6)]
      [0.0, 2.0]
    """
    _check_args(q, q_noise, prior_w, prior_noise)
    Phi_new = check_phi_new(Phi_new, prior_w)
    return _predict(q, q_noise, prior_w.values, prior_noise, Phi_new)


@jax.jit
def _predict(q, q_noise, values, prior_noise, Phi_new):
    mean_k, var_k = grid_moments(q.probs, values)  # (r, b)
    mu = Phi_new @ mean_k.T  # (N, r)
    v = (Phi_new**2) @ var_k.T
    alpha = q.weights
    mean = mu @ alpha
    _, _, e_s = noise_moments(q_noise, prior_noise)
    return mean, (v + (mu - mean[:, None]) ** 2) @ alpha + e_s


def mixture_from_mean_field(
    key, q_w, num_components: int, *, noise_scale: float = 0.3, smoothing: float = 0.0
):
    r"""A mixture of perturbed copies of a mean-field posterior, to start a mixture fit from.

    Component ``k`` has logits :math:`\log\big((1-\epsilon) q_j + \epsilon/m\big) +
    \text{noise\_scale}\cdot z^{(k)}_j`, :math:`z \sim N(0, I)`, with :math:`\epsilon` = ``smoothing``,
    and the weights are equal. Identical components (``noise_scale=0``) stay identical under any
    deterministic optimizer (the gradients are symmetric), so some noise is needed for the components to
    specialize. Smoothing lets components differ where a mean-field factor is numerically one-hot (logit
    noise alone leaves a point mass a point mass), but it costs likelihood on every weight: with
    ``b = 2000`` weights, ``smoothing=0.01`` starts thousands of nats below the mean-field ELBO, so keep it
    small or zero for large models.

    Args:
      key: PRNG key.
      q_w: :class:`MeanField` ``(b, m)``, e.g. from :func:`kronvi.fit_regression`.
      num_components: ``r >= 1``.
      noise_scale: standard deviation of the logit perturbation, ``>= 0``.
      smoothing: weight :math:`\epsilon \in [0, 1]` of the uniform distribution mixed into each factor.

    Returns:
      A :class:`Mixture` ``(r, b, m)``.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> q = kronvi.mixture_from_mean_field(jax.random.key(0), kronvi.MeanField(jnp.zeros((3, 4))), 5)
      >>> q.logits.shape, [round(float(a), 3) for a in q.weights]
      ((5, 3, 4), [0.2, 0.2, 0.2, 0.2, 0.2])
    """
    if not isinstance(q_w, MeanField):
        raise TypeError(f"`q_w` must be a MeanField, got {type(q_w).__name__}")
    if isinstance(num_components, bool) or not isinstance(num_components, int) or num_components < 1:
        raise ValueError(f"`num_components` must be an int >= 1, got {num_components!r}")
    if not float(noise_scale) >= 0:
        raise ValueError(f"`noise_scale` must be >= 0, got {noise_scale}")
    if not 0.0 <= float(smoothing) <= 1.0:
        raise ValueError(f"`smoothing` must be in [0, 1], got {smoothing}")
    log_q = q_w.log_probs
    m = log_q.shape[-1]
    eps = jnp.asarray(smoothing, log_q.dtype)
    # log((1 - eps) q + eps / m) without underflow: logaddexp of the two log terms.
    base = jnp.logaddexp(jnp.log1p(-eps) + log_q, jnp.log(eps / m)) if smoothing > 0 else log_q
    z = jax.random.normal(key, (num_components,) + base.shape, base.dtype)
    return Mixture(base[None] + noise_scale * z, jnp.zeros((num_components,), base.dtype))


# ----------------------------------------------------------------------------------------------------
# Fitting: L-BFGS on the Theorem-3 bound
# ----------------------------------------------------------------------------------------------------


def _parse_init(init):
    if not isinstance(init, tuple) or len(init) not in (2, 3):
        raise TypeError("`init` must be a tuple (q, q_noise) or (q, log_center, q_noise)")
    if len(init) == 2:
        q, q_noise = init
        _check_mixture(q, "init[0]")
        return q, q.log_marginals, q_noise
    q, log_center, q_noise = init
    _check_mixture(q, "init[0]")
    return q, _check_log_center(log_center, q), q_noise


def fit_mixture_bound(
    stats,
    prior_w,
    prior_noise,
    *,
    init,
    method: str = "lbfgs",
    max_iter: int = 1000,
    tol: float = 1e-6,
    rescale: bool = True,
):
    r"""Fits a mixture posterior by maximizing the Theorem-3 bound over ``q``, the centre and ``q_noise``.

    L-BFGS (the paper's Table 2 recipe) on :math:`-\mathcal{B}/n` over the component logits, the mixture
    weight logits, ``log_center`` and the noise logits, with gradients from ``jax.grad``; the bound is
    :func:`mixture_elbo_bound`, so the final value is a certified lower bound on the ELBO (and on
    :math:`\log p(y)`). Start from a mean-field fit: :func:`mixture_from_mean_field` of
    :func:`kronvi.fit_regression`'s ``q_w``.

    Args:
      stats: :class:`RegressionStats`.
      prior_w: :class:`DiscretePrior` ``(b, m)`` or :class:`MixturePrior`.
      prior_noise: :class:`DiscretePrior` ``(1, m_sigma)``.
      init: ``(q, q_noise)`` (centre initialized at ``q.log_marginals``) or ``(q, log_center, q_noise)``.
      method: ``"lbfgs"`` (``jaxopt.LBFGS``) or ``"optax-lbfgs"`` (``optax.lbfgs``).
      max_iter: L-BFGS iterations.
      tol: stop when the gradient norm of :math:`-\mathcal{B}/n` falls below ``tol``.
      rescale: the form of the bound, see :func:`mixture_elbo_bound` (the default, the closed-form
        optimal scale of the centre, cannot overflow for many weights).

    Returns:
      ``(q, log_center, q_noise, info)``, ``info`` a :class:`kronvi.FitInfo` whose ``elbo`` trace holds
      the bound.

    References:
      Evans & Nair (2018), Theorem 3 and Table 2 ("5-Mixture").

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (30, 2)); stats = kronvi.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.gaussian_prior(2, 1.0, levels=5), kronvi.noise_prior(0.1)
      >>> qw, qn, _ = kronvi.fit_regression(stats, pw, pn)
      >>> q0 = kronvi.mixture_from_mean_field(jax.random.key(1), qw, 2, noise_scale=0.1)
      >>> q, log_c, qn2, info = kronvi.fit_mixture_bound(stats, pw, pn, init=(q0, qn), max_iter=50)
      >>> bool(info.elbo[info.num_iter] >= info.elbo[0])
      True
    """
    if method not in BOUND_METHODS:
        raise ValueError(f"`method` must be one of {BOUND_METHODS}, got {method!r}")
    q, log_center, q_noise = _parse_init(init)
    _check_args(q, q_noise, prior_w, prior_noise, stats)
    if int(max_iter) < 1:
        raise ValueError(f"`max_iter` must be >= 1, got {max_iter}")
    if not float(tol) >= 0:
        raise ValueError(f"`tol` must be >= 0, got {tol}")
    return _fit_bound(
        q, log_center, q_noise, prior_w, prior_noise, stats, max_iter=int(max_iter), tol=float(tol),
        method=method, rescale=bool(rescale),
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames=("max_iter", "tol", "method", "rescale"))
def _fit_bound(q, log_center, q_noise, prior_w, prior_noise, stats, *, max_iter, tol, method, rescale):
    def loss(params):
        lw, wl, lc, ln = params
        qq, qn = Mixture._unchecked(lw, wl), MeanField._unchecked(ln)
        return -_bound(qq, lc, qn, prior_w, prior_noise, stats, rescale=rescale) / stats.n

    params = (q.logits, q.weight_logits, log_center, q_noise.logits)
    (lw, wl, lc, ln), info = minimize_lbfgs(loss, params, stats.n, max_iter=max_iter, tol=tol, backend=method)
    return Mixture._unchecked(lw, wl), lc, MeanField._unchecked(ln), info


# ----------------------------------------------------------------------------------------------------
# Fitting: stochastic gradients (optax), init / step / driver
# ----------------------------------------------------------------------------------------------------


def _check_optimizer(optimizer):
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`optimizer` must be an optax.GradientTransformation, got {type(optimizer).__name__}"
        )


def _check_noise_update(noise_update):
    if noise_update not in NOISE_UPDATES:
        raise ValueError(f"`noise_update` must be one of {NOISE_UPDATES}, got {noise_update!r}")


def mixture_sgd_init(q, q_noise, *, optimizer):
    """Initial :class:`MixtureSGDState` for :func:`mixture_sgd_step`.

    Args:
      q: :class:`Mixture` to start from (e.g. :func:`mixture_from_mean_field`).
      q_noise: :class:`MeanField` ``(1, m_sigma)``.
      optimizer: an ``optax.GradientTransformation`` (it minimizes :math:`-\\mathcal{L}/n`).

    Returns:
      A :class:`MixtureSGDState`.
    """
    _check_mixture(q)
    if not isinstance(q_noise, MeanField):
        raise TypeError(f"`q_noise` must be a MeanField, got {type(q_noise).__name__}")
    _check_optimizer(optimizer)
    return MixtureSGDState(q, q_noise, optimizer.init((q.logits, q.weight_logits, q_noise.logits)))


def mixture_sgd_step(
    key,
    state,
    stats,
    prior_w,
    prior_noise,
    *,
    optimizer,
    num_samples: int,
    noise_update: str = "cavi",
    estimator: str = "local",
):
    r"""One stochastic-gradient step on the ELBO of a mixture posterior (optax/blackjax shape).

    Draws ``num_samples`` configurations, forms the unbiased gradient of :func:`mixture_elbo_estimate`
    with respect to the component logits, the weight logits and the noise logits, and applies
    ``optimizer`` to :math:`-\mathcal{L}/n`. With ``noise_update="cavi"`` (default) the noise factor is
    instead set to its exact coordinate-ascent optimum given the updated mixture,
    :math:`\log q_\sigma(s) = \log p_\sigma(s) - \tfrac n2 \log s - \tfrac{1}{2s}\sum_k\alpha_k
    E_{q^{(k)}}\|y - \Phi w\|^2` (closed form because the expected residual is linear in ``q``);
    ``"gradient"`` moves it with the optimizer like the other parameters.

    Args:
      key: PRNG key for this step's draws.
      state: :class:`MixtureSGDState` from :func:`mixture_sgd_init` or a previous step.
      stats, prior_w, prior_noise: the data and priors, as in :func:`mixture_elbo_estimate`.
      optimizer: the ``optax.GradientTransformation`` given to :func:`mixture_sgd_init`.
      num_samples: draws per step (>= 2); the paper uses 3000.
      noise_update: ``"cavi"`` or ``"gradient"``.
      estimator: ``"local"`` (default), ``"stratified"``, ``"stratified-pathwise"`` or ``"score"``,
        see :func:`mixture_elbo_estimate`.

    Returns:
      ``(state, info)`` with ``info`` a :class:`MixtureSGDInfo`.
    """
    if not isinstance(state, MixtureSGDState):
        raise TypeError(f"`state` must be a MixtureSGDState, got {type(state).__name__}")
    _check_args(state.q, state.q_noise, prior_w, prior_noise, stats)
    _check_optimizer(optimizer)
    _check_noise_update(noise_update)
    num_samples = _check_num_samples(num_samples, 2)
    _estimator(estimator)
    return _sgd_step(
        key, state, stats, prior_w, prior_noise, optimizer=optimizer, num_samples=num_samples,
        noise_update=noise_update, estimator=estimator,
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames=("optimizer", "num_samples", "noise_update", "estimator"))
def _sgd_step(key, state, stats, prior_w, prior_noise, *, optimizer, num_samples, noise_update, estimator):
    params = (state.q.logits, state.q.weight_logits, state.q_noise.logits)
    estimate = _estimator(estimator)

    def loss(params):
        lw, wl, ln = params
        q, qn = Mixture._unchecked(lw, wl), MeanField._unchecked(ln)
        surrogate, est, se = estimate(key, q, qn, prior_w, prior_noise, stats, num_samples=num_samples)
        return -surrogate / stats.n, (est, se)

    (_, (est, se)), grads = jax.value_and_grad(loss, has_aux=True)(params)
    if noise_update == "cavi":
        grads = (grads[0], grads[1], jnp.zeros_like(grads[2]))
    updates, opt_state = optimizer.update(grads, state.opt_state, params)
    lw, wl, ln = optax.apply_updates(params, updates)
    q = Mixture._unchecked(lw, wl)
    if noise_update == "cavi":
        ln = _noise_cavi_logits(q, prior_w, prior_noise, stats)
    info = MixtureSGDInfo(est, se, optax.tree.norm(grads))
    return MixtureSGDState(q, MeanField._unchecked(ln), opt_state), info


def fit_mixture_sgd(
    key,
    stats,
    prior_w,
    prior_noise,
    *,
    init,
    optimizer,
    num_steps: int,
    num_samples: int,
    noise_update: str = "cavi",
    estimator: str = "local",
):
    r"""Fits a mixture posterior by stochastic gradient ascent on the exact ELBO (the paper's "Mixture SGD").

    Runs :func:`mixture_sgd_step` ``num_steps`` times inside ``lax.scan`` (one compile), with a fresh key
    per step. With ``noise_update="cavi"`` the noise factor is first set to its exact optimum given the
    initial mixture. Unlike :func:`fit_mixture_bound` the objective is the ELBO itself (no entropy
    bound), at the price of Monte Carlo noise; :func:`mixture_elbo_unbiased` reports the result.

    Args:
      key: PRNG key.
      stats, prior_w, prior_noise: as in :func:`mixture_elbo_estimate`.
      init: ``(q, q_noise)``: a :class:`Mixture` (e.g. :func:`mixture_from_mean_field` of a mean-field fit)
        and a :class:`MeanField` over the noise.
      optimizer: an ``optax.GradientTransformation``, e.g. ``optax.adam(1e-2)``.
      num_steps: number of steps.
      num_samples: draws per step (>= 2); the paper's "5-Mixture SGD" uses 3000.
      noise_update: ``"cavi"`` (default) or ``"gradient"``, see :func:`mixture_sgd_step`.
      estimator: ``"local"`` (default), ``"stratified"``, ``"stratified-pathwise"`` or ``"score"``,
        see :func:`mixture_elbo_estimate`.

    Returns:
      ``(q, q_noise, info)``; ``info`` is a :class:`MixtureSGDInfo` of ``(num_steps,)`` arrays.

    References:
      Evans & Nair (2018), section 4 and Table 2 ("5-Mixture SGD").

    Example:
      >>> import jax, jax.numpy as jnp, optax, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (30, 2)); stats = kronvi.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.gaussian_prior(2, 1.0, levels=5), kronvi.noise_prior(0.1)
      >>> qw, qn, _ = kronvi.fit_regression(stats, pw, pn)
      >>> q0 = kronvi.mixture_from_mean_field(jax.random.key(1), qw, 2)
      >>> q, qn2, info = kronvi.fit_mixture_sgd(jax.random.key(2), stats, pw, pn, init=(q0, qn),
      ...                                       optimizer=optax.adam(0.05), num_steps=20, num_samples=16)
      >>> info.elbo.shape
      (20,)
    """
    if not (isinstance(init, tuple) and len(init) == 2):
        raise TypeError("`init` must be a tuple (q, q_noise)")
    q, q_noise = init
    _check_args(q, q_noise, prior_w, prior_noise, stats)
    _check_optimizer(optimizer)
    _check_noise_update(noise_update)
    num_samples = _check_num_samples(num_samples, 2)
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}")
    _estimator(estimator)
    return _fit_sgd(
        key, q, q_noise, stats, prior_w, prior_noise, optimizer=optimizer, num_steps=num_steps,
        num_samples=num_samples, noise_update=noise_update, estimator=estimator,
    )  # fmt: skip


@functools.partial(
    jax.jit, static_argnames=("optimizer", "num_steps", "num_samples", "noise_update", "estimator")
)
def _fit_sgd(
    key, q, q_noise, stats, prior_w, prior_noise, *, optimizer, num_steps, num_samples, noise_update,
    estimator,
):  # fmt: skip
    if noise_update == "cavi":
        q_noise = MeanField._unchecked(_noise_cavi_logits(q, prior_w, prior_noise, stats))
    state = MixtureSGDState(q, q_noise, optimizer.init((q.logits, q.weight_logits, q_noise.logits)))

    def body(state, k):
        return _sgd_step(
            k, state, stats, prior_w, prior_noise, optimizer=optimizer, num_samples=num_samples,
            noise_update=noise_update, estimator=estimator,
        )  # fmt: skip

    state, info = lax.scan(body, state, jax.random.split(key, num_steps))
    return state.q, state.q_noise, info
