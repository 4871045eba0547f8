r"""The deterministic terms of a mixture's ELBO: exact expectations and the Theorem 3 and 4 lower bounds.

Everything linear in `q` is an $\alpha$-weighted sum of mean-field terms, exact in
$O(r(bm + b^2))$. The entropy is not: `mixture_elbo_bound` bounds it below (Theorem 3). A
`MixturePrior` has no exact expected log-density: `mixture_prior_bound` bounds it below
(Theorem 4).

References:
  Evans & Nair (2018), section 4, Theorems 3 and 4 and appendix C.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base.deprecation import reordered_arguments
from .._base.kron import kron_log_inner_from_logs
from .._base.precision import einsum
from .._model.families import MeanField, entropy
from .._model.grids import DiscretePrior
from .._model.regression import LOG_2PI, expected_rss, noise_moments, noise_optimum_logits
from .._stats.regression import RegressionStats
from ._family import (
    Mixture,
    MixturePrior,
    check_log_center,
    check_mixture,
    check_mixture_args,
    check_weight_prior,
)


def mixture_expected_rss(q, prior_w, stats):
    r"""$E_q\|y - \Phi w\|^2 = \sum_k \alpha_k E_{q^{(k)}}\|y - \Phi w\|^2$ (linear in q)."""
    per_component = jax.vmap(lambda logits: expected_rss(MeanField._unchecked(logits), prior_w, stats))
    return jnp.sum(q.weights * per_component(q.logits))


@jax.jit
def expected_loglik(q, q_noise, prior_w, prior_noise, stats):
    """`mixture_expected_loglik` without validation."""
    e_inv, e_log, _ = noise_moments(q_noise, prior_noise)
    return -0.5 * stats.n * (LOG_2PI + e_log) - 0.5 * e_inv * mixture_expected_rss(q, prior_w, stats)


def prior_bound(log_probs, log_weights, prior):
    """Theorem 4 with per-component optimal responsibilities (see `mixture_prior_bound`)."""
    e = einsum("kjm,cjm->kc", jnp.exp(log_probs), prior.log_probs)  # E_{q^(k)} log p^(c)
    return jnp.sum(jnp.exp(log_weights) * jax.nn.logsumexp(prior.log_weights[None, :] + e, axis=-1))


@jax.jit
def expected_log_prior(q, prior_w):
    """Exact $E_q[\\log p(w)]$ for a factorized prior, the Theorem-4 bound for a mixture prior."""
    if isinstance(prior_w, MixturePrior):
        return prior_bound(q.log_probs, q.log_weights, prior_w)
    return jnp.sum(q.marginals * prior_w.log_probs)


def noise_terms(q_noise, prior_noise):
    r"""$E[\log p(\sigma^2)] + H[q_\sigma]$, exact."""
    return jnp.sum(q_noise.probs * prior_noise.log_probs) + entropy(q_noise)


def noise_cavi_logits(q, prior_w, prior_noise, stats):
    r"""Exact coordinate-ascent update of $q_\sigma$ given the mixture (the ELBO is concave in it)."""
    return noise_optimum_logits(mixture_expected_rss(q, prior_w, stats), prior_noise, stats.n)


@reordered_arguments(("q", "q_noise", "prior_w", "prior_noise", "stats"), lambda a: isinstance(a[0], Mixture))
def mixture_expected_loglik(
    stats: RegressionStats,
    q: Mixture,
    q_noise: MeanField,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
) -> jax.Array:
    r"""Exact expected log-likelihood $E_{q(w)q_\sigma}[\log N(y \mid \Phi w, \sigma^2 I)]$, mixture q.

    The expectation is linear in `q`, so it is the $\alpha$-weighted sum of the mean-field terms:

    $$
    -\tfrac n2(\log 2\pi + E[\log\sigma^2]) - \tfrac12 E[\sigma^{-2}] \sum_k \alpha_k
    \big(y^\top y - 2\bar w_k^\top \Phi^\top y + \bar w_k^\top \Phi^\top\Phi \bar w_k
    + \textstyle\sum_j (\Phi^\top\Phi)_{jj} \mathrm{Var}_{q^{(k)}}(w_j)\big),
    $$

    $O(r b^2)$.

    Args:
      stats: `RegressionStats`.
      q: `Mixture`, logits `(r, b, m)`.
      q_noise: `MeanField` `(1, m_sigma)` over the noise variance.
      prior_w: `DiscretePrior` or `MixturePrior` (only its grid `values (b, m)` is used).
      prior_noise: `DiscretePrior` `(1, m_sigma)`.

    Returns:
      A scalar.

    References:
      Evans & Nair (2018), Theorem 1 and section 4.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.stats.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=3), kronvi.model.noise_prior(0.1)
      >>> q = kronvi.mixtures.Mixture.from_mean_field(kronvi.model.MeanField.from_prior(pw))
      >>> qn = kronvi.model.MeanField.from_prior(pn)
      >>> bool(jnp.isfinite(kronvi.mixtures.mixture_expected_loglik(stats, q, qn, pw, pn)))
      True
    """
    check_mixture_args(q, q_noise, prior_w, prior_noise, stats)
    return expected_loglik(q, q_noise, prior_w, prior_noise, stats)


def mixture_prior_bound(q: Mixture, prior: DiscretePrior | MixturePrior) -> jax.Array:
    r"""Lower bound on $E_q[\log p(w)]$ for a mixture prior (Theorem 4); exact for a factorized one.

    For $p = \sum_c \beta_c \bigotimes_j p^{(c)}_j$, concavity of $\log$ (Jensen) gives, for
    every configuration $w$ and any responsibilities $\lambda \in \Delta^C$,
    $\log p(w) \ge \sum_c \lambda_c\big(\log\beta_c + \log p^{(c)}(w) - \log\lambda_c\big)$.
    Taking the expectation under each component of `q` with its own responsibilities and maximizing over
    them ($\lambda^{(k)}_c \propto \beta_c \exp E_{q^{(k)}}[\log p^{(c)}]$) gives the bound
    implemented here:

    $$
    E_q[\log p] \;\ge\; \sum_k \alpha_k \log \sum_c \beta_c
    \exp\Big(\sum_j \langle q^{(k)}_j, \log p^{(c)}_j\rangle\Big),
    $$

    each inner term a Kronecker-sum inner product (Prop. 3), $O(rCbm)$. It is at least the
    simpler bound $\sum_c \beta_c E_q[\log p^{(c)}]$ ($\lambda = \beta$), and exact when
    $C = 1$.

    Args:
      q: `Mixture` `(r, b, m)` or `MeanField` `(b, m)`.
      prior: `MixturePrior` `(C, b, m)`, or a `DiscretePrior` `(b, m)` (then the exact
        expectation is returned).

    Returns:
      A scalar.

    References:
      Evans & Nair (2018), section 4, "Unfactorized prior distributions", Theorem 4.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> grid = jnp.array([[-1.0, 0.0, 1.0]])
      >>> p = kronvi.mixtures.MixturePrior(grid, jnp.log(jnp.array([[[0.1, 0.8, 0.1]], [[0.3, 0.4, 0.3]]])),
      ...                         jnp.zeros(2))
      >>> round(float(kronvi.mixtures.mixture_prior_bound(kronvi.model.MeanField(jnp.zeros((1, 3))), p)), 4)
      -1.3277
    """
    if isinstance(q, MeanField):
        q = Mixture._unchecked(
            q.logits[..., None, :, :], jnp.zeros(q.logits.shape[:-2] + (1,), q.logits.dtype)
        )
    check_mixture(q)
    check_weight_prior(prior, q, "prior")
    return expected_log_prior(q, prior)


def entropy_bound(log_probs, log_weights, log_center, rescale):
    r"""Theorem 3's entropy bound; every product over the `b` weights is taken in log space."""
    marg = jnp.exp(jax.nn.logsumexp(log_weights[:, None, None] + log_probs, axis=0))
    cross = jnp.sum(marg * log_center)  # <q, log a>, a Kronecker-sum inner product
    # log prod_j sum_v q^(k)_jv q^(l)_jv / a_jv for every pair (k, l): (r, r)
    pair = kron_log_inner_from_logs(log_probs[:, None], log_probs[None, :] - log_center)
    log_quad = jax.nn.logsumexp(log_weights[:, None] + log_weights[None, :] + pair)  # log <q, q/a>
    if rescale:
        return -cross - log_quad
    return 1.0 - cross - jnp.exp(log_quad)


@functools.partial(jax.jit, static_argnames=("rescale",))
def elbo_bound(q, log_center, q_noise, prior_w, prior_noise, stats, rescale=True):
    return (
        expected_loglik(q, q_noise, prior_w, prior_noise, stats)
        + expected_log_prior(q, prior_w)
        + noise_terms(q_noise, prior_noise)
        + entropy_bound(q.log_probs, q.log_weights, log_center, rescale)
    )


@reordered_arguments(
    ("q", "log_center", "q_noise", "prior_w", "prior_noise", "stats"),
    lambda a: isinstance(a[0], Mixture),
)
def mixture_elbo_bound(
    stats: RegressionStats,
    q: Mixture,
    q_noise: MeanField,
    log_center: ArrayLike,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
    *,
    rescale: bool = True,
) -> jax.Array:
    r"""Deterministic lower bound on the ELBO of a mixture posterior (Theorem 3).

    Concavity of the logarithm, $\log x \le \log a + x/a - 1$ for $a > 0$, applied to every
    entry of $\log q$ gives, for any positive Kronecker-product centre
    $a = \bigotimes_j a_j$,

    $$
    H[q] = -\langle q, \log q\rangle \;\ge\; 1 - \langle q, \textstyle\bigoplus_j \log a_j\rangle
    - \langle q, q \circ a^{-1}\rangle,\qquad
    \langle q, q\circ a^{-1}\rangle = \sum_{k,l}\alpha_k\alpha_l \prod_j
    \sum_{v} \frac{q^{(k)}_{jv} q^{(l)}_{jv}}{a_{jv}},
    $$

    with equality iff $a = q$ (possible only for a one-component mixture). The first inner product
    is a Kronecker sum against `q` (Prop. 3); the product over the `b` weights is taken in log space
    (appendix C), $O(r^2 bm)$.

    With `rescale=True` (default) the bound is evaluated at the best multiple $c\,a$ of the
    centre, $c = \langle q, q\circ a^{-1}\rangle$, which has the closed form

    $$
    H[q] \;\ge\; -\langle q, \textstyle\bigoplus_j \log a_j\rangle - \log\langle q, q\circ a^{-1}\rangle
    \;\ge\; 1 - \langle q, \textstyle\bigoplus_j \log a_j\rangle - \langle q, q\circ a^{-1}\rangle
    $$

    (the same Theorem-3 bound, at centre $c\,a$; the second inequality is $\log x \le x - 1$).
    It stays in log space throughout: for many weights $\langle q, q\circ a^{-1}\rangle$ is a
    product of `b` factors that overflows unless the centre happens to be well scaled (e.g. `b = 2000`
    with distinct components gives $e^{1000}$, and the literal form returns $-\infty$). Use
    `rescale=False` for the literal statement of the theorem.

    The rest of the ELBO is exact (`mixture_expected_loglik`, the expected log prior, the noise
    terms), or, for a `MixturePrior`, uses the Theorem-4 bound (`mixture_prior_bound`); the
    result is always $\le$ the exact ELBO.

    Args:
      stats: `RegressionStats`.
      q: `Mixture`, logits `(r, b, m)`.
      q_noise: `MeanField` `(1, m_sigma)`.
      log_center: `(b, m)` logs of the centre's factors $a_j$ (any finite values; `a` need
        not be normalized). `q.log_marginals` is a good start; for `r = 1` it makes the bound exact.
      prior_w: `DiscretePrior` `(b, m)` or `MixturePrior` `(C, b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      rescale: evaluate at the optimally rescaled centre (see above).

    Returns:
      The bound, a scalar.

    References:
      Evans & Nair (2018), section 4, Theorem 3 and appendix C.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.stats.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=3), kronvi.model.noise_prior(0.1)
      >>> qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
      >>> q = kronvi.mixtures.Mixture.from_mean_field(qw)
      >>> bound = kronvi.mixtures.mixture_elbo_bound(stats, q, qn, q.log_marginals, pw, pn)
      >>> bool(jnp.allclose(bound, kronvi.model.regression_elbo(stats, qw, qn, pw, pn)))
      True
    """
    check_mixture_args(q, q_noise, prior_w, prior_noise, stats)
    log_center = check_log_center(log_center, q)
    return elbo_bound(q, log_center, q_noise, prior_w, prior_noise, stats, rescale=bool(rescale))
