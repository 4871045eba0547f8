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
# # Choosing the noise grid and the levels
#
# A DIRECT model has two discrete priors: the weights' grids and the noise variance's grid. Their
# support is fixed before fitting, so a grid that is too narrow confines the posterior, and a grid that is
# too coarse quantizes it. This page shows how to place both and how to check the choice, on the yacht
# data with 200 random Fourier features, placed by GP hyperparameters that
# [`fit_gp_hyperparameters`][kronvi.inputs.fit_gp_hyperparameters] fits on this fold's training rows (as the
# pipeline of the [quickstart](quickstart.py) does; there `model.hyper` holds them).

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import kronvi

X, y, test_mask = kronvi.load_demo()
test = test_mask[:, 2].astype(bool)  # fold 2 of 10
std = kronvi.inputs.fit_standardizer(X[~test])
y_offset = y[~test].mean()
hyper, _ = kronvi.inputs.fit_gp_hyperparameters(
    jax.random.key(0),
    jnp.asarray(kronvi.inputs.standardize(std, X[~test]), jnp.float32),
    jnp.asarray(y[~test] - y_offset, jnp.float32),
)
prior_scale = float(jnp.sqrt(hyper.signal_variance))  # the prior sd of every weight
print("GP lengthscales", np.array2string(np.asarray(hyper.lengthscales), precision=2), f"prior sd {prior_scale:.2f}")
features = kronvi.inputs.rff_init(jax.random.key(1), hyper.lengthscales, num_frequencies=100)


def featurize(rows):
    return kronvi.inputs.rff_features(features, jnp.asarray(kronvi.inputs.standardize(std, X[rows]), jnp.float32))


Phi, Phi_test = featurize(~test), featurize(test)
yc, yc_test = jnp.asarray(y[~test] - y_offset, jnp.float32), jnp.asarray(y[test] - y_offset, jnp.float32)
stats = kronvi.stats.regression_stats(Phi, yc)
b = Phi.shape[1]


def scores(q_w, q_noise, prior_w, prior_noise):
    """Test RMSE and the test NLPD of the moment-matched Gaussian predictive."""
    m, v = kronvi.model.predict_regression(q_w, q_noise, prior_w, prior_noise, Phi_test)
    nlpd = 0.5 * jnp.mean(jnp.log(2 * jnp.pi * v) + (yc_test - m) ** 2 / v)
    return float(jnp.sqrt(jnp.mean((m - yc_test) ** 2))), float(nlpd)


# %% [markdown]
# ## Where to centre the noise grid
#
# With a Gaussian prior on the weights the evidence $\log p(y \mid \sigma^2)$ of exact Bayesian linear
# regression is cheap to maximize from the statistics
# ([`blr_evidence_noise`][kronvi.gaussian.blr_evidence_noise]): one eigendecomposition, then $O(b)$ per
# evaluation. Its maximizer is a good centre for the noise grid; the paper centres it on the GP estimate
# instead (what `DirectConfig(recipe=kronvi.Features())` does).

# %%
s2 = kronvi.gaussian.blr_evidence_noise(stats, prior_scale, lower=1e-5, upper=10.0)
print(f"evidence-optimal noise variance {float(s2):.4f} (target variance {float(jnp.var(yc)):.3f})")

# %% [markdown]
# ## How wide: look at the noise posterior
#
# [`noise_prior`][kronvi.model.noise_prior] puts `levels` log-spaced values on
# $[\sigma^2/\text{span}, \sigma^2 \cdot \text{span}]$. After the fit, `q_noise.probs` is the posterior
# over that grid. If its mass piles up on an end level, the grid confines the noise: widen or recentre it.
# The ELBO ranks the grids too, but it is not a reliable judge of the noise grid: on yacht, following it
# to ever larger noise cost sparsity and test accuracy (`docs/decisions/default-recipe.md#the-noise-grid`).

# %%
prior_w = kronvi.model.gaussian_prior(b, prior_scale, levels=15, width=3.0)
fig, ax = plt.subplots(figsize=(7, 3))
for span in [1.2, 3.0, 30.0]:
    prior_noise = kronvi.model.noise_prior(s2, levels=15, span=span)
    q_w, q_noise, info = kronvi.fitting.fit_regression(stats, prior_w, prior_noise, init="gaussian")
    p = np.asarray(q_noise.probs[0])
    rmse, nlpd = scores(q_w, q_noise, prior_w, prior_noise)
    print(
        f"span {span:6.1f}: ELBO {float(info.final_elbo):8.1f}  mass on the end levels {p[0] + p[-1]:.2f}  "
        f"mode at level {p.argmax():2d}/14  test RMSE {rmse:.3f}  NLPD {nlpd:.3f}"
    )
    ax.plot(np.asarray(prior_noise.values[0]), p, "o-", label=f"span {span}")
ax.axvline(float(s2), color="gray", ls=":", label="evidence optimum")
ax.set(xscale="log", xlabel="noise variance (grid levels)", ylabel="posterior probability",
       title="the noise posterior on each grid")  # fmt: skip
ax.legend()
fig.tight_layout()

# %% [markdown]
# ## Or let cross-validation choose
#
# The statistics of K folds come from one pass over the rows ([`kfold_stats`][kronvi.stats.kfold_stats]), and
# [`select_prior`][kronvi.fitting.select_prior] fits every fold of every candidate (vmapped over the folds) and
# scores it on the held-out statistics. This is the paper's protocol for the noise grid
# (`kronvi.Features(noise_cv=...)`).

# %%
folds = np.arange(Phi.shape[0]) % 5
cv_train, cv_test = kronvi.stats.kfold_stats(Phi, yc, folds)
spans = [1.2, 3.0, 30.0]
candidates = [(prior_w, kronvi.model.noise_prior(s2, levels=15, span=s)) for s in spans]
best, cv = kronvi.fitting.select_prior(cv_train, cv_test, candidates, max_iter=10)
print("mean held-out log density per span:", np.asarray(cv.log_density, float).round(3).tolist())
print("chosen span:", spans[best])

# %% [markdown]
# ## How many levels
#
# The weights' grid trades accuracy for size: 15 levels (4-bit codes, with a zero level) is the paper's
# choice. On a grid of $\pm 3$ prior standard deviations, few levels cannot express weights that the data
# determine much more tightly than the prior does, and the noise absorbs what the weights miss.

# %%
prior_noise = kronvi.model.noise_prior(s2, levels=15, span=3.0)
for levels in [3, 15]:
    pw = kronvi.model.gaussian_prior(b, prior_scale, levels=levels, width=3.0)
    q_w, q_noise, info = kronvi.fitting.fit_regression(stats, pw, prior_noise, init="gaussian")
    rmse, nlpd = scores(q_w, q_noise, pw, prior_noise)
    sparsity = 100 * float(kronvi.model.expected_sparsity(q_w, pw))
    print(f"{levels:2d} levels: ELBO {float(info.final_elbo):8.1f}  test RMSE {rmse:.3f}  sparsity {sparsity:3.0f}%")

# %% [markdown]
# ## Grids placed on the posterior (the default recipe)
#
# In the eigenbasis of $\Phi^\top\Phi$ the exact posterior of Bayesian linear regression is a product
# of independent Gaussians $N(\mu_j, \tau_j^2)$, so a mean field loses nothing there, and each weight's
# grid can span its own posterior, $\mu_j \pm 6\tau_j$
# ([`posterior_grid_prior`][kronvi.model.posterior_grid_prior]). Then the discrete posterior predicts like
# exact Bayesian linear regression ([`blr_posterior`][kronvi.gaussian.blr_posterior]); what remains is
# quantization, and 15 levels make it negligible. The pipeline computes the eigenbasis in float64 (see
# "Sharp bits"); so does this cell.

# %%
with jax.enable_x64(True):
    f64 = lambda a: jnp.asarray(a, jnp.float64)  # noqa: E731
    stats64 = kronvi.stats.regression_stats(f64(Phi), f64(yc))
    rotated, basis = kronvi.stats.eigenbasis(stats64)
    s2_64 = kronvi.gaussian.blr_evidence_noise(stats64, prior_scale, lower=1e-5, upper=10.0)
    precision = basis.eigenvalues / s2_64 + 1.0 / prior_scale**2
    center, spread = rotated.Phity / s2_64 / precision, 1.0 / jnp.sqrt(precision)
    pw = kronvi.model.posterior_grid_prior(center, spread, prior_scale, levels=15, width=6.0)
    pn = kronvi.model.noise_prior(s2_64, levels=15, span=3.0)
    q_w, q_noise, info = kronvi.fitting.fit_regression(rotated, pw, pn, init="gaussian")
    m, v = kronvi.model.predict_regression(q_w, q_noise, pw, pn, kronvi.stats.rotate_features(basis, f64(Phi_test)))
    mu, cov = kronvi.gaussian.blr_posterior(stats64, prior_scale, s2_64)
    m_exact, v_exact = kronvi.gaussian.predict_blr(mu, cov, s2_64, f64(Phi_test))
    rmse = lambda m: float(jnp.sqrt(jnp.mean((m - yc_test) ** 2)))  # noqa: E731
    print(f"DIRECT, eigenbasis grids: test RMSE {rmse(m):.4f}")
    print(f"exact Bayesian linear regression: test RMSE {rmse(m_exact):.4f}")
    print(f"largest difference of the predictive means {float(jnp.max(jnp.abs(m - m_exact))):.2e}")

# %% [markdown]
# The cost of this accuracy: every weight has its own grid (two floats to store), the features need the
# $b \times b$ rotation, and no weight is exactly zero. For sparse 4-bit weights on one shared grid, see
# the [quantized tutorial](quantized.py).
