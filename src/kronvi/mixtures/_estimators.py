r"""Unbiased stochastic ELBO estimates for a mixture posterior: four entropy estimators on one interface.

Every estimator `(key, q, q_noise, prior_w, prior_noise, stats, num_samples) -> (surrogate, estimate,
stderr)` keeps the expected log-likelihood, the noise terms and (for a factorized prior) the expected log
prior exact, and samples only the entropy (and a mixture prior's) term; `jax.grad` of `surrogate` is an
unbiased ELBO gradient, `estimate` an unbiased ELBO value. See `mixture_elbo_estimate`.

References:
  Evans & Nair (2018), section 4, "Unbiased stochastic entropy and prior expectation gradients", eq. 13.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .._base.checks import check_int
from .._base.deprecation import reordered_arguments
from .._model.families import MeanField, entropy
from .._model.grids import DiscretePrior
from .._stats.regression import RegressionStats
from ._bounds import expected_log_prior, expected_loglik, noise_terms
from ._family import Mixture, MixturePrior, check_mixture_args
from ._local import LOCAL_BATCH, local_scores
from ._sampling import log_prob_at, sample_indices, sample_per_component


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _estimate_score(key, q, q_noise, prior_w, prior_noise, stats, num_samples):
    """Returns `(surrogate, estimate, stderr)`; see `mixture_elbo_estimate`."""
    sg = lax.stop_gradient
    exact = expected_loglik(q, q_noise, prior_w, prior_noise, stats) + noise_terms(q_noise, prior_noise)
    idx = sample_indices(key, sg(q.probs), sg(q.log_weights), num_samples=num_samples)
    log_q = log_prob_at(q.log_probs, q.log_weights, idx)  # (S,)
    if isinstance(prior_w, MixturePrior):
        log_p = log_prob_at(prior_w.log_probs, prior_w.log_weights, idx)
    else:
        exact = exact + expected_log_prior(q, prior_w)
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


def _stratified_terms(key, q, prior_w, num_samples):
    r"""Draws `num_samples // r` (>= 2) configurations from each component (no gradient through the
    draws) and returns `(idx, log_q_own, log_q_mix, log_p)`: the grid indices `(r, S_k, b)`,
    $\log q_k(x_{ks})$ and $\log q(x_{ks})$, both `(r, S_k)`, and $\log p(x_{ks})$ for a
    `MixturePrior` (else `None`)."""
    r, b = q.logits.shape[0], q.logits.shape[1]
    per = max(2, num_samples // r)
    idx = sample_per_component(key, lax.stop_gradient(q.probs), per)  # (r, S_k, b), x ~ q_k
    cols = jnp.arange(b)
    at = jnp.moveaxis(jnp.sum(q.log_probs[:, cols[None, None, :], idx], axis=-1), 0, -1)  # (k, S_k, l)
    log_q_mix = jax.nn.logsumexp(q.log_weights + at, axis=-1)  # (k, S_k): log q(x)
    log_q_own = at[jnp.arange(r), :, jnp.arange(r)]  # (k, S_k): log q_k(x)
    log_p = None
    if isinstance(prior_w, MixturePrior):
        log_p = log_prob_at(prior_w.log_probs, prior_w.log_weights, idx.reshape(-1, b)).reshape(r, per)
    return idx, log_q_own, log_q_mix, log_p


def _estimate_stratified_common(q, q_noise, prior_w, prior_noise, stats):
    r"""The exact part of the stratified estimate: expected log-likelihood, noise terms, the component
    entropies $\sum_k \alpha_k H[q_k]$ and, for a factorized prior, the expected log prior."""
    exact = expected_loglik(q, q_noise, prior_w, prior_noise, stats) + noise_terms(q_noise, prior_noise)
    comp_entropy = jax.vmap(lambda logits: entropy(MeanField._unchecked(logits)))(q.logits)  # (r,)
    exact = exact + jnp.sum(jnp.exp(q.log_weights) * comp_entropy)
    if not isinstance(prior_w, MixturePrior):
        exact = exact + expected_log_prior(q, prior_w)
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
    r"""Returns `(surrogate, estimate, stderr)` with component-stratified draws, exact component
    entropies and a pure score-function gradient; see `mixture_elbo_estimate`."""
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
    r"""As `_estimate_stratified`, with the gradient of the log-ratio taken pathwise as well
    (`estimator="stratified-pathwise"`, kept for comparison)."""
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


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _estimate_local(key, q, q_noise, prior_w, prior_noise, stats, num_samples):
    r"""As `_estimate_stratified`, with each factor's score term integrated exactly over that
    factor's own level given the draw's other coordinates (`estimator="local"`)."""
    sg = lax.stop_gradient
    exact = _estimate_stratified_common(q, q_noise, prior_w, prior_noise, stats)
    sq = Mixture._unchecked(sg(q.logits), sg(q.weight_logits))
    idx, log_q_own, log_q_mix, log_p = _stratified_terms(key, sq, prior_w, num_samples)
    f = log_q_own - log_q_mix  # no gradient: both come from the stopped q
    if log_p is not None:
        f = f + log_p  # pathwise in the prior's own parameters only
    weights = jnp.exp(q.log_weights)
    b, m = q.logits.shape[1], q.logits.shape[2]
    scores = local_scores(sq, prior_w, idx, batch_size=max(1, min(idx.shape[1], LOCAL_BATCH // (b * m))))
    # Value and weight gradient as in "stratified"; component gradient a_k * scores_k, which is already
    # the gradient with respect to the logits (each row sums to zero).
    sampled = jnp.sum(weights * jnp.mean(f, axis=1)) + jnp.sum(
        sg(weights)[:, None, None] * sg(scores) * (q.logits - sg(q.logits))
    )
    estimate, stderr = _value_and_stderr(exact, sg(weights), f)
    return exact + sampled, estimate, stderr


ESTIMATORS = ("stratified", "local", "stratified-pathwise", "score")


_OLD_ORDER = ("key", "q", "q_noise", "prior_w", "prior_noise", "stats")


def _old_order(args):
    return isinstance(args[1], Mixture)


@reordered_arguments(_OLD_ORDER, _old_order)
def mixture_elbo_estimate(
    key: jax.Array,
    stats: RegressionStats,
    q: Mixture,
    q_noise: MeanField,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
    *,
    num_samples: int,
    estimator: str = "local",
) -> jax.Array:
    r"""Stochastic ELBO surrogate whose gradient is an unbiased estimate of the exact ELBO gradient.

    The expected log-likelihood, the noise terms and (for a factorized prior) the expected log prior are
    exact, with exact gradients. The entropy term uses the score-function identity (eq. 13)

    $$
    \nabla_\theta H[q_\theta] = -E_q\big[\log q(x)\,\nabla_\theta \log q(x)\big]
    \approx -\frac1S\sum_{s=1}^S \big(\log q(x_s) - \beta_s\big)\nabla_\theta\log q(x_s),
    $$

    with $S$ = `num_samples` independent draws $x_s \sim q$ and the leave-one-out baseline
    $\beta_s = \frac{1}{S-1}\sum_{t\ne s}\log q(x_t)$, which is independent of $x_s$ and so
    keeps the estimate unbiased while removing most of its variance. The mixture density is
    $\log q(x) = \mathrm{LSE}_k(\log\alpha_k + \sum_j \log q^{(k)}_j(x_j))$, $O(rSb)$; the
    gradient covers the component logits and the mixture weights. For a `MixturePrior` the
    prior term is sampled the same way ($\log p(x) - \log q(x)$ in place of $-\log q(x)$).

    The returned value is itself an unbiased estimate of the ELBO (the exact terms plus the sample mean of
    $\log p - \log q$ or $-\log q$): the score-function part is written as
    $(f_s - \beta_s)(\log q(x_s) - \mathrm{stop\_gradient}(\log q(x_s)))$, which is zero in value.

    That is `estimator="score"`, eq. 13 as written. `estimator="stratified"` is the same
    score-function estimator with a Rao-Blackwellized integrand: it draws `num_samples // r` (at
    least 2) configurations from *each* component and uses

    $$
    H[q] = \sum_k \alpha_k \Big(H[q^{(k)}] - E_{q^{(k)}}\big[\log q(x) - \log q^{(k)}(x)\big]\Big),
    $$

    where the component entropies $H[q^{(k)}]$ are exact (mean field) and only the log-ratio
    $g = \log q^{(k)} - \log q$ is sampled. Its gradient is the pure score-function form: from
    $\nabla H = -\sum_x \nabla q(x)\log q(x)$ and $\nabla_{\theta_k} q = \alpha_k q^{(k)}
    \nabla\log q^{(k)}$,

    $$
    \nabla_{\theta_k} H = \alpha_k\nabla H[q^{(k)}]
      + \alpha_k E_{q^{(k)}}\big[(g(x) - \beta)\,\nabla_{\theta_k}\log q^{(k)}(x)\big],
    \qquad \nabla_{w} H = \sum_k \nabla_w\alpha_k\,\big(H[q^{(k)}] + E_{q^{(k)}}[g]\big).
    $$

    The log-ratio is zero for `r = 1` and small while the components overlap, so its variance does not
    grow with the entropy of the factors, and at identical components the gradient is exact (zero
    variance). `estimator="stratified-pathwise"` also differentiates
    $g$ through $\log q^{(k)}(x) - \log q(x)$ at the draws; that term has expectation zero
    ($\sum_k\alpha_k E_{q^{(k)}}[\nabla\log q] = E_q[\nabla \log q] = 0$) and only adds variance.
    All estimators are unbiased; the stratified ones, including `"local"` below, give the same value on
    the same draws.

    The default, `estimator="local"` (local expectation gradients), Rao-Blackwellizes the score term
    once more: the score of factor $j$ depends on $x_j$ alone, so given a draw's other
    coordinates its expectation over $x_j$ is computed exactly,

    $$
    E_{q^{(k)}}\big[g(x)\,\nabla_{\eta_{kj}}\log q^{(k)}_j(x_j)\big]
      = E_{x_{-j}\sim q^{(k)}}\Big[\big(q^{(k)}_j(l)\,(g(x_{-j}, l) - \textstyle\sum_{l'}
        q^{(k)}_j(l')\,g(x_{-j}, l'))\big)_{l}\Big],
    $$

    with $\eta_{kj}$ the logits and $g(x_{-j}, l)$ the log-ratio at the draw with site
    $j$ set to level $l$: all $b\,m$ single-site changes of a draw come from one
    $(r, b, m)$ table, $O(r\,b\,m)$ per draw against $O(r\,b)$; no baseline is
    needed (the sum over levels is centred exactly). The other $b-1$ factors' noise no longer
    enters factor $j$'s gradient. Why it is the default: `docs/decisions/fitting.md#mixtures`.

    Args:
      key: PRNG key.
      stats: `RegressionStats`.
      q: `Mixture`, logits `(r, b, m)`.
      q_noise: `MeanField` `(1, m_sigma)`.
      prior_w: `DiscretePrior` `(b, m)` or `MixturePrior` `(C, b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      num_samples: draws `S` (>= 2, for the baseline); the paper's "5-Mixture SGD" uses 3000.
      estimator: `"local"` (default), `"stratified"`, `"stratified-pathwise"` or `"score"`
        (eq. 13 as written).

    Returns:
      A scalar: differentiate it with `jax.grad` for the unbiased ELBO gradient.

    References:
      Evans & Nair (2018), section 4, "Unbiased stochastic entropy and prior expectation gradients",
      eq. 13. Leave-one-out baseline: Kool, van Hoof & Welling (2019), "Buy 4 REINFORCE samples, get a
      baseline for free!". Local expectation gradients: Titsias & Lazaro-Gredilla (2015), "Local
      expectation gradients for black box variational inference".

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.stats.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=3), kronvi.model.noise_prior(0.1)
      >>> q = kronvi.mixtures.Mixture(jnp.zeros((2, 2, 3)), jnp.zeros(2))
      >>> g = jax.grad(kronvi.mixtures.mixture_elbo_estimate, argnums=2)(
      ...     jax.random.key(1), stats, q, kronvi.model.MeanField.from_prior(pn), pw, pn, num_samples=8)
      >>> g.logits.shape
      (2, 2, 3)
    """
    check_mixture_args(q, q_noise, prior_w, prior_noise, stats)
    num_samples = check_int(num_samples, "num_samples", 2)
    return estimator_fn(estimator)(key, q, q_noise, prior_w, prior_noise, stats, num_samples=num_samples)[0]


def estimator_fn(name):
    """The estimator called `name` (one of `ESTIMATORS`), else a `ValueError`."""
    if name == "stratified":
        return _estimate_stratified
    if name == "local":
        return _estimate_local
    if name == "stratified-pathwise":
        return _estimate_stratified_pathwise
    if name == "score":
        return _estimate_score
    raise ValueError(f"`estimator` must be one of {ESTIMATORS}, got {name!r}")


@reordered_arguments(_OLD_ORDER, _old_order)
def mixture_elbo_unbiased(
    key: jax.Array,
    stats: RegressionStats,
    q: Mixture,
    q_noise: MeanField,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
    *,
    num_samples: int,
    estimator: str = "stratified",
    chunk_size: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    r"""Unbiased Monte Carlo estimate of the ELBO of a mixture posterior, with its standard error.

    $\mathcal{L} = E_q[\log p(y\mid w,\sigma^2)] + E[\log p(\sigma^2)] + H[q_\sigma] +
    E_q[\log p(w) - \log q(w)]$: every term exact except the last, estimated by the mean of
    $\log p(x_s) - \log q(x_s)$ over `num_samples` draws $x_s \sim q$ (the exact
    $E_q[\log p]$ is used for a factorized prior). Use it to report the objective that
    `fit_mixture_sgd` maximizes, or to compare with `mixture_elbo_bound`.

    Args:
      key, stats, q, q_noise, prior_w, prior_noise: as in `mixture_elbo_estimate`.
      num_samples: draws (>= 2).
      estimator: `"stratified"` (default: exact component entropies, sampled log-ratios),
        `"local"` and `"stratified-pathwise"` (the same value on the same draws; `"local"` also
        computes its gradient terms, so costs more) or `"score"`, as in `mixture_elbo_estimate`.
      chunk_size: draws per chunk (>= 2, dividing `num_samples`), or `None` for one chunk. The
        chunks run one after another with keys `jax.random.split(key, num_samples // chunk_size)`, so
        memory is that of one chunk; the result is the mean of the chunk estimates and their standard
        errors combined.

    Returns:
      `(estimate, stderr)`: scalars; `stderr` is the sample standard deviation of the sampled term
      over $\sqrt S$ (per chunk, then combined).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (20, 2)); stats = kronvi.stats.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=3), kronvi.model.noise_prior(0.1)
      >>> qw, qn = kronvi.model.MeanField(jnp.zeros((2, 3))), kronvi.model.MeanField.from_prior(pn)  # uniform q_w
      >>> est, se = kronvi.mixtures.mixture_elbo_unbiased(jax.random.key(1), stats, kronvi.mixtures.Mixture.from_mean_field(qw),
      ...                                        qn, pw, pn, num_samples=100)
      >>> bool(jnp.abs(est - kronvi.model.regression_elbo(stats, qw, qn, pw, pn)) < 1e-3)  # log q is constant
      True
    """
    check_mixture_args(q, q_noise, prior_w, prior_noise, stats)
    num_samples = check_int(num_samples, "num_samples", 2)
    fn = estimator_fn(estimator)
    if chunk_size is None:
        _, est, se = fn(key, q, q_noise, prior_w, prior_noise, stats, num_samples=num_samples)
        return lax.stop_gradient(est), se
    chunk_size = check_int(chunk_size, "chunk_size", 2)
    if num_samples % chunk_size:
        raise ValueError(f"`chunk_size` ({chunk_size}) must divide `num_samples` ({num_samples})")

    return _unbiased_in_chunks(
        key, q, q_noise, prior_w, prior_noise, stats, estimator=estimator, num_chunks=num_samples // chunk_size,
        chunk_size=chunk_size,
    )  # fmt: skip


@functools.partial(jax.jit, static_argnames=("estimator", "num_chunks", "chunk_size"))
def _unbiased_in_chunks(key, q, q_noise, prior_w, prior_noise, stats, *, estimator, num_chunks, chunk_size):
    # Compiled once per (estimator, sizes, shapes): a lax.map over a fresh closure outside jit would compile
    # a new executable on every call (docs/decisions/fitting.md#mixtures).
    fn = estimator_fn(estimator)

    def one(k):
        return fn(k, q, q_noise, prior_w, prior_noise, stats, num_samples=chunk_size)[1:]

    est, se = lax.map(one, jax.random.split(key, num_chunks))
    return lax.stop_gradient(jnp.mean(est)), jnp.sqrt(jnp.sum(se**2)) / se.shape[0]
