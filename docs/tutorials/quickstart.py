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
# # Quickstart: DIRECT regression on yacht
#
# kronvi fits Bayesian linear regression on random Fourier features with a *discrete* prior: every weight
# lives on a grid of 15 values and the noise variance on a grid too. The ELBO of the mean-field posterior
# over those grids is computed exactly from four sufficient statistics, whatever the number of rows.
#
# This page fits one cross-validation fold of the yacht data shipped with kronvi (308 rows, 6 inputs),
# first with the configured pipeline, then stage by stage. It uses 200 random features instead of the
# default 2000 to stay short; most of its run time is JAX compiling each function once.

# %%
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import kronvi

X, y, test_mask = kronvi.load_demo()  # the 10 published folds are the columns of test_mask
test = test_mask[:, 2].astype(bool)  # fold 2 of 10
X_train, y_train, X_test, y_test = X[~test], y[~test], X[test], y[test]
print(X_train.shape, X_test.shape)

# %% [markdown]
# ## The pipeline in one call
#
# [`fit_direct`][kronvi.pipeline.fit_direct] standardizes the inputs, centres the targets, fits GP
# hyperparameters to place the random Fourier features, accumulates the statistics, builds the weight and
# noise grids and fits the mean field by coordinate ascent. The default recipe (`basis="eigen"`)
# discretizes the weights in the eigenbasis of $\Phi^\top\Phi$, where the exact posterior factorizes.

# %%
config = kronvi.DirectConfig(num_frequencies=100)  # b = 200 features (the default is 2000)
t0 = time.perf_counter()
fit = kronvi.fit_direct(jax.random.key(0), X_train, y_train, config)
model = fit.model
print(f"fitted in {time.perf_counter() - t0:.1f} s (compilation included), converged: {bool(fit.info.converged)}")

# %% [markdown]
# [`model.predict`][kronvi.pipeline.FittedDirect.predict] takes raw inputs through the same standardizer, features
# and rotation and returns the exact predictive mean and variance in the targets' units;
# [`model.log_density`][kronvi.pipeline.FittedDirect.log_density] is the exact predictive density of each test
# target (`kronvi.predict` and `kronvi.log_density` are the same as functions).

# %%
pred = model.predict(X_test)
mean, var = pred.mean, pred.variance
rmse = float(jnp.sqrt(jnp.mean((mean - y_test) ** 2)))
log_dens = model.log_density(X_test, y_test)
print(f"test RMSE {rmse:.3f}, NLPD {float(-jnp.mean(log_dens)):.3f}")

# %% [markdown]
# The test rows sorted by their predictive mean, with the band of two predictive standard deviations
# (the noise included) and the observed targets:

# %%
order = np.argsort(np.asarray(mean))
sd = np.sqrt(np.asarray(var))[order]
m_sorted = np.asarray(mean)[order]
inside = np.mean(np.abs(np.asarray(y_test)[order] - m_sorted) <= 2 * sd)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.fill_between(np.arange(len(order)), m_sorted - 2 * sd, m_sorted + 2 * sd, alpha=0.3, label="mean ± 2 sd")
ax.plot(m_sorted, color="C0", label="predictive mean")
ax.plot(np.asarray(y_test)[order], "k.", label="observed")
ax.set(xlabel="test row (sorted by predictive mean)", ylabel="target",
       title=f"yacht, fold 2: {100 * inside:.0f}% of the test targets inside the band")  # fmt: skip
ax.legend(loc="upper left")
fig.tight_layout()

# %% [markdown]
# ## Stage by stage
#
# Every stage is a pure function over small pytrees. Here are the same steps by hand, with the paper's
# simpler grids: the random Fourier features of the GP hyperparameters the pipeline found, and one grid
# of 15 levels on $\pm 3$ prior standard deviations for every weight.

# %%
std = kronvi.inputs.fit_standardizer(X_train)
Xs, Xs_test = kronvi.inputs.standardize(std, X_train), kronvi.inputs.standardize(std, X_test)
y_offset = y_train.mean()
yc = y_train - y_offset  # centre the targets (see "Sharp bits")

hyper = model.hyper  # GP lengthscales, signal and noise variance (kronvi.inputs.fit_gp_hyperparameters)
features = kronvi.inputs.rff_init(jax.random.key(1), hyper.lengthscales, num_frequencies=100)
Phi = kronvi.inputs.rff_features(features, jnp.asarray(Xs, jnp.float32))
stats = kronvi.stats.regression_stats(Phi, jnp.asarray(yc, jnp.float32))  # n, y'y, Phi'y, Phi'Phi
print("statistics:", jax.tree.map(jnp.shape, stats))

# %% [markdown]
# The weight prior is a discretized $N(0, \sigma_w^2)$ ([`gaussian_prior`][kronvi.model.gaussian_prior]); the
# noise prior is uniform on a log-spaced grid around the GP's estimate ([`noise_prior`][kronvi.model.noise_prior]).
# [`fit_regression`][kronvi.fitting.fit_regression] returns the factors and an info record; `init="gaussian"`
# starts coordinate ascent from the exact optimum of the continuous mean-field problem.

# %%
b = Phi.shape[1]
prior_scale = jnp.sqrt(hyper.signal_variance)  # the prior sd of every weight
prior_w = kronvi.model.gaussian_prior(b, prior_scale, levels=15, width=3.0)
prior_noise = kronvi.model.noise_prior(hyper.noise_variance, levels=15, span=10.0)  # the paper's grid
q_w, q_noise, fit_info = kronvi.fitting.fit_regression(stats, prior_w, prior_noise, init="gaussian")
print(f"ELBO {float(fit_info.final_elbo):.1f} after {int(fit_info.num_iter)} sweeps")

Phi_t = kronvi.inputs.rff_features(features, jnp.asarray(Xs_test, jnp.float32))
m, v = kronvi.model.predict_regression(q_w, q_noise, prior_w, prior_noise, Phi_t)
print(f"test RMSE {float(jnp.sqrt(jnp.mean((m + y_offset - y_test) ** 2))):.3f}")
print(f"expected sparsity {100 * float(kronvi.model.expected_sparsity(q_w, prior_w)):.0f}%")

# %% [markdown]
# This recipe is sparse (many weights sit on the zero level, which makes the
# [4-bit samples](quantized.py) cheap) but less accurate than the pipeline's default eigenbasis recipe.
#
# The statistics are additive over rows, so ten folds can be fitted in one compiled call: stack their
# statistics and priors on a leading axis and `jax.vmap(kronvi.fitting.fit_regression)`. The
# [noise grid and levels tutorial](noise_and_levels.py) shows how to choose the grids.
