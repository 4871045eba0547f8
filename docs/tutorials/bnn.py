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
# # A Bayesian neural network with an exact ELBO
#
# Section 3.2 of the DIRECT paper notes that a network whose hidden units *square* their input keeps the
# exact ELBO tractable: the output is a polynomial in the weights, so under a mean-field posterior over
# discrete weight grids its expected squared error needs only a few moments of each weight, and the data
# enter only through moment statistics computed once. [`kronvi.bnn`][kronvi.bnn] implements it:
#
# - [`quadratic_net`][kronvi.bnn.quadratic_net]`(w, X, layer_sizes)`: the network. `layer_sizes =
#   (d, h_1, ..., h_L, 1)`; `w` is flat, layer by layer, each layer's `(layer_sizes[l+1], layer_sizes[l])`
#   matrix row-major; no biases (append a constant column).
# - [`bnn_stats`][kronvi.bnn.bnn_stats]: the statistics ($n$, $y^\top y$, $\sum_i y_i x_i^{\otimes 2^L}$,
#   $\sum_i x_i^{\otimes 2^{L+1}}$), additive over rows.
# - [`bnn_elbo`][kronvi.bnn.bnn_elbo], [`fit_bnn`][kronvi.bnn.fit_bnn],
#   [`predict_bnn`][kronvi.bnn.predict_bnn]: the exact ELBO, its maximization, exact predictive moments.
#
# A one-dimensional example: $y = (x - 0.5)^2 - 1 + \varepsilon$ is one quadratic unit of $(x, 1)$.

# %%
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import kronvi
from kronvi import bnn

rng = np.random.default_rng(0)
n = 400
x = rng.uniform(-2, 2, size=n)
y = (x - 0.5) ** 2 - 1.0 + 0.3 * rng.normal(size=n)
X = np.column_stack([x, np.ones(n)])  # the constant column gives the biases
layer_sizes = (2, 3, 1)  # 2 inputs, 3 quadratic hidden units, 1 linear output
P = bnn.num_weights(layer_sizes)
print("weights:", P)

# %% [markdown]
# The statistics are computed once. For one hidden layer they are $d^2$ and $d^4$ numbers whatever
# $n$ is; after this line the data are never touched again.

# %%
y_mean = y.mean()
stats = bnn.bnn_stats(jnp.asarray(X, jnp.float32), jnp.asarray(y - y_mean, jnp.float32), layer_sizes)
print("statistics:", stats.yz.shape, stats.zz.shape, "for", layer_sizes)

# %% [markdown]
# Priors as for DIRECT regression: every weight on a 15-level grid (a discretized Gaussian), the noise
# variance on a log-spaced grid. The posterior is a mean field over the $15^{9}$ weight configurations
# and the 15 noise levels. A symmetric start is a stationary point of the ELBO (flipping the sign of a
# hidden unit's weights changes nothing), so the fit starts from random logits (`key`); the ELBO has many
# local optima, so `num_starts=4` fits four random starts at once (`vmap`) and keeps the best.
#
# Coordinate ascent has closed-form updates here: the expected log-likelihood is multilinear in the
# factors, so each factor's optimum is $\log q_p = \log p_p + c_p$, with $c_p$ the exact partial
# derivative. `method="lbfgs"` runs L-BFGS on exact gradients instead.

# %%
prior_w = kronvi.model.gaussian_prior(P, 0.8, levels=15, dtype=jnp.float32)
prior_noise = kronvi.model.noise_prior(jnp.float32(0.1), levels=15, span=30.0)
t0 = time.perf_counter()
q_w, q_noise, info = bnn.fit_bnn(
    stats, prior_w, prior_noise, method="cavi", key=jax.random.key(1), max_iter=30, num_starts=4
)
print(
    f"ELBO {float(info.elbo[0]):.1f} -> {float(info.final_elbo):.1f} in {int(info.num_iter)} sweeps "
    f"({time.perf_counter() - t0:.1f} s with compilation)"
)
print("E[noise variance]:", float(kronvi.model.noise_moments(q_noise, prior_noise)[2]), "(true 0.09)")

# %% [markdown]
# The predictive mean and variance are exact sums over every weight configuration (the variance includes
# $E[\sigma^2]$), here on a grid of inputs that reaches beyond the data:

# %%
x_new = np.linspace(-3.0, 3.0, 121)
mean, var = bnn.predict_bnn(q_w, q_noise, prior_w, prior_noise, jnp.asarray(np.column_stack([x_new, np.ones_like(x_new)]),
                            jnp.float32), layer_sizes)  # fmt: skip
mean, sd = np.asarray(mean) + y_mean, np.sqrt(np.asarray(var))
for xi in (-2.5, 0.5, 2.5):
    i = int(np.argmin(np.abs(x_new - xi)))
    print(f"x = {xi:5.2f}: {mean[i]:6.2f} ± {2 * sd[i]:.2f}   (truth {(xi - 0.5) ** 2 - 1:6.2f})")
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(x, y, "k.", ms=3, alpha=0.4, label="training data")
ax.fill_between(x_new, mean - 2 * sd, mean + 2 * sd, alpha=0.3, label="mean ± 2 sd")
ax.plot(x_new, mean, label="predictive mean")
ax.plot(x_new, (x_new - 0.5) ** 2 - 1, "k--", lw=1, label="truth")
ax.axvspan(2.0, 3.0, color="gray", alpha=0.1)
ax.axvspan(-3.0, -2.0, color="gray", alpha=0.1)
ax.set(xlabel="x", ylabel="y", title="exact predictive band (shaded: outside the data)")
ax.legend(loc="upper center")
fig.tight_layout()

# %% [markdown]
# Deeper networks work the same way (`layer_sizes = (d, h_1, h_2, 1)`): the exact ELBO is then computed by
# expanding the output into monomials of the weights, whose number grows exponentially with depth, as the
# paper's $O(\ell \bar m (b/\ell)^{4\ell})$ says; `benchmarks/bench_bnn.py` measures it, and
# `experiments/bnn_study.py` compares the one-hidden-layer model with DIRECT on random Fourier features and
# a Monte Carlo Gaussian network on UCI data (`docs/decisions/fitting.md#quadratic-activation-bnns`).
