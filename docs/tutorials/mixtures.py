# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Mixture posteriors
#
# A mean-field posterior cannot represent correlated weights. A mixture of $r$ mean fields,
# $q(w) = \sum_k \alpha_k \prod_j q^{(k)}_j(w_j)$ (section 4 of the paper), can: everything linear in $q$
# stays exact (the expected log-likelihood, the predictive moments), and the entropy, which is not, gets a
# deterministic lower bound (Theorem 3, [`mixture_elbo_bound`][kronvi.mixtures.mixture_elbo_bound]) or
# an unbiased stochastic estimate ([`mixture_elbo_estimate`][kronvi.mixtures.mixture_elbo_estimate]).
#
# Two copies of the same feature make the point: only the sum $w_1 + w_2$ is determined by the data, so the
# posterior spreads along a ridge that a product of independent factors cannot follow. With two weights on
# 15 levels the exact evidence $\log p(y)$ of the discrete model is a sum over $15^2$ weight configurations
# times the noise levels, so every bound can be checked against it.

# %%
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from scipy.special import logsumexp

import kronvi

x = jax.random.normal(jax.random.key(0), (40,))
y = 0.8 * x + 0.3 * jax.random.normal(jax.random.key(1), (40,))
Phi = jnp.stack([x, x], axis=1)  # two identical features
stats = kronvi.stats.regression_stats(Phi, y)
prior_w = kronvi.model.gaussian_prior(2, 1.0, levels=15, width=3.0)
prior_noise = kronvi.model.noise_prior(0.09, levels=5, span=3.0)


def exact_log_evidence():
    """log p(y) by enumerating every weight configuration and noise level (float64 NumPy)."""
    v, lp = np.asarray(prior_w.values, float), np.asarray(prior_w.log_probs, float)
    s2, lps = np.asarray(prior_noise.values[0], float), np.asarray(prior_noise.log_probs[0], float)
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    terms = []
    for i, j in itertools.product(range(15), range(15)):
        r2 = np.sum((ys - (v[0, i] + v[1, j]) * xs) ** 2)
        loglik = -0.5 * len(ys) * np.log(2 * np.pi * s2) - r2 / (2 * s2)
        terms.append(lp[0, i] + lp[1, j] + lps + loglik)
    return logsumexp(np.concatenate(terms))


log_py = exact_log_evidence()
q_w, q_noise, info = kronvi.fitting.fit_regression(stats, prior_w, prior_noise)
print(f"exact log p(y)        {log_py:8.3f}")
print(f"mean-field ELBO       {float(info.final_elbo):8.3f}")

# %% [markdown]
# ## The deterministic bound (Theorem 3)
#
# [`fit_mixture_bound`][kronvi.mixtures.fit_mixture_bound] maximizes the bound with L-BFGS; its final
# value is a certified lower bound on the ELBO, hence on $\log p(y)$. Where it starts matters. From
# perturbed copies of the mean field ([`mixture_from_mean_field`][kronvi.mixtures.mixture_from_mean_field])
# every component stays on the mean field's mode here, and the bound gains nothing:

# %%
q0 = kronvi.mixtures.mixture_from_mean_field(jax.random.key(2), q_w, 5, noise_scale=1.0, smoothing=0.05)
q, q_noise_b, log_center, info_b = kronvi.mixtures.fit_mixture_bound(
    stats, prior_w, prior_noise, init=(q0, q_noise), max_iter=200
)
print(f"5-mixture bound, perturbed start {float(info_b.final_elbo):8.3f}")

# %% [markdown]
# Components started on different configurations along the ridge $w_1 + w_2 \approx 0.86$ (grid levels
# $(i, j)$ with $v_i + v_j \approx 0.86$) stay there, and the bound comes within a fraction of a nat of
# $\log p(y)$:

# %%
levels = [(8, 8), (9, 7), (7, 9), (10, 6), (6, 10)]  # (0.43, 0.43), (0.86, 0), (0, 0.86), ...


def nearly_one_hot(i):
    return jnp.log(0.9 * jax.nn.one_hot(i, 15) + 0.1 / 15)


q0 = kronvi.mixtures.Mixture(jnp.stack([jnp.stack([nearly_one_hot(i), nearly_one_hot(j)]) for i, j in levels]), jnp.zeros(5))
q, q_noise_b, log_center, info_b = kronvi.mixtures.fit_mixture_bound(
    stats, prior_w, prior_noise, init=(q0, q_noise), max_iter=200
)
print(f"5-mixture bound, placed start    {float(info_b.final_elbo):8.3f}")
print("mixture weights", np.asarray(q.weights, float).round(2).tolist())
component_means = jax.nn.softmax(q.logits, axis=-1) @ prior_w.values[0]  # (5, 2): E[w1], E[w2]
print("component means", np.asarray(component_means, float).round(2).tolist())

# %% [markdown]
# ## Stochastic gradients on the ELBO itself
#
# [`fit_mixture_sgd`][kronvi.mixtures.fit_mixture_sgd] runs any optax optimizer on an unbiased gradient
# of the exact ELBO (no entropy bound), inside one compiled `lax.scan`;
# [`mixture_elbo_unbiased`][kronvi.mixtures.mixture_elbo_unbiased] then estimates the ELBO with a
# standard error.

# %%
q_s, q_noise_s, _, info_s = kronvi.mixtures.fit_mixture_sgd(
    jax.random.key(3), stats, prior_w, prior_noise, init=(q0, q_noise),
    optimizer=optax.adam(0.05), num_steps=200, num_samples=32,
)
elbo, se = kronvi.mixtures.mixture_elbo_unbiased(jax.random.key(4), stats, q_s, q_noise_s, prior_w, prior_noise, num_samples=2000)
print(f"5-mixture SGD ELBO    {float(elbo):8.3f} (standard error {float(se):.1e})")

# %% [markdown]
# Both mixtures close part of the gap between the mean field and $\log p(y)$. Predictions of $y$ hardly
# change (they depend on $w_1 + w_2$, which the data pin down), but the posterior of each weight does: the
# mean field is sure of $w_1$, the mixture knows it is not. Its moments are exact
# ([`predict_mixture`][kronvi.mixtures.predict_mixture] for predictions; `q.marginals` per weight):


# %%
def sd_w1(marginals):
    v = prior_w.values[0]
    return float(jnp.sqrt(marginals[0] @ v**2 - (marginals[0] @ v) ** 2))


print(f"posterior sd of w1: mean field {sd_w1(q_w.probs):.3f}, 5-mixture {sd_w1(q.marginals):.3f}")
m, v = kronvi.mixtures.predict_mixture(q, q_noise_b, prior_w, prior_noise, jnp.array([[1.0, 1.0]]))
print(f"prediction at x = 1: mean {float(m[0]):.3f}, sd {float(jnp.sqrt(v[0])):.3f}")

# %% [markdown]
# On UCI data with thousands of weights the gain of a 5-mixture over the mean field is small (see the
# [benchmarks](../benchmarks.md) and the note on mixture estimators): the default recipe's eigenbasis
# already removes the correlations a mixture would model.
