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
# # 4-bit posterior samples and integer inference
#
# With the paper's recipe every weight lives on one grid of 15 levels with a zero level, so a posterior
# sample is a vector of 4-bit codes, and most of them are the zero level. This page fits that model on
# yacht, stores 64 posterior samples in 4 bits per weight, predicts from them with integer arithmetic, and
# saves and loads the whole model as one file.
#
# The setup is that of the [noise grid tutorial](noise_and_levels.py): 200 random Fourier features placed
# by GP hyperparameters fitted on this fold's training rows.

# %%
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

X, y, test_mask = kronvi.load_demo()
test = test_mask[:, 2].astype(bool)  # fold 2 of 10
std = kronvi.inputs.fit_standardizer(X[~test])
y_offset = float(y[~test].mean())
hyper, _ = kronvi.inputs.fit_gp_hyperparameters(
    jax.random.key(0),
    jnp.asarray(kronvi.inputs.standardize(std, X[~test]), jnp.float32),
    jnp.asarray(y[~test] - y_offset, jnp.float32),
)
prior_scale = float(jnp.sqrt(hyper.signal_variance))  # the prior sd of every weight
features = kronvi.inputs.rff_init(jax.random.key(1), hyper.lengthscales, num_frequencies=100)


def featurize(X_rows):
    return kronvi.inputs.rff_features(features, jnp.asarray(kronvi.inputs.standardize(std, X_rows), jnp.float32))


Phi, Phi_test = featurize(X[~test]), featurize(X[test])
stats = kronvi.stats.regression_stats(Phi, jnp.asarray(y[~test] - y_offset, jnp.float32))
b = Phi.shape[1]
prior_w = kronvi.model.gaussian_prior(b, prior_scale, levels=15, width=3.0)  # one shared grid, zero is level 7
s2 = kronvi.gaussian.blr_evidence_noise(stats, prior_scale, lower=1e-5, upper=10.0)
prior_noise = kronvi.model.noise_prior(s2, levels=15, span=30.0)
q_w, q_noise, info = kronvi.fitting.fit_regression(stats, prior_w, prior_noise, init="gaussian")
print(f"expected sparsity {100 * float(kronvi.model.expected_sparsity(q_w, prior_w)):.0f}% of {b} weights")

# %% [markdown]
# ## Samples as 4-bit codes
#
# [`sample_codes`][kronvi.quantize.sample_codes] draws exact posterior samples as grid indices (`uint8`),
# and [`pack_codes`][kronvi.quantize.pack_codes] packs two per byte, losslessly.

# %%
codes = kronvi.quantize.sample_codes(jax.random.key(2), q_w, 64)  # (64, b) uint8
packed = kronvi.quantize.pack_codes(codes, bits=4)  # (64, b / 2) uint8
print(f"{codes.shape[0]} samples of {b} weights: {packed.nbytes} bytes packed, {4 * codes.size} bytes as float32")
print(f"fraction of sampled weights at zero: {float(jnp.mean(prior_w.values[0, codes] == 0)):.2f}")

# %% [markdown]
# ## Integer-arithmetic prediction
#
# [`predict_from_codes`][kronvi.quantize.predict_from_codes] predicts with every sample in floating point.
# The integer path ([`integer_samples`][kronvi.quantize.integer_samples] once, then
# [`predict_integer`][kronvi.quantize.predict_integer]) drops the weights that are zero in every sample,
# quantizes the test features to int8 and accumulates the products exactly in int32;
# [`integer_error_bound`][kronvi.quantize.integer_error_bound] bounds its error per prediction.

# %%
float_preds = kronvi.quantize.predict_from_codes(packed, prior_w, Phi_test)  # (N, S)
isamples = kronvi.quantize.integer_samples(packed, prior_w)
int_preds = kronvi.quantize.predict_integer(isamples, Phi_test)
bound = kronvi.quantize.integer_error_bound(isamples, Phi_test)
print(f"weights kept for integer inference: {isamples.index.shape[0]} of {b}")
print(f"largest |integer - float| {float(jnp.max(jnp.abs(int_preds - float_preds))):.2e}, "
      f"largest bound {float(jnp.max(bound)):.2e}, bound holds: {bool(jnp.all(jnp.abs(int_preds - float_preds) <= bound + 1e-5))}")

# %% [markdown]
# The mean over samples estimates the exact predictive mean of
# [`predict_regression`][kronvi.model.predict_regression]:

# %%
mean, var = kronvi.model.predict_regression(q_w, q_noise, prior_w, prior_noise, Phi_test)
y_test = y[test]
rmse = lambda m: float(jnp.sqrt(jnp.mean((m + y_offset - y_test) ** 2)))  # noqa: E731
print(f"test RMSE: exact mean {rmse(mean):.3f}, mean of 64 integer samples {rmse(int_preds.mean(axis=1)):.3f}")

# %% [markdown]
# ## One file for the model
#
# A [`DirectModel`][kronvi.quantize.DirectModel] holds the grids, the posterior, the feature map's
# parameters, the target offset and the packed samples; [`save_model`][kronvi.quantize.save_model] writes
# it to one versioned `.npz` file, and [`load_model`][kronvi.quantize.load_model] checks and reads it.

# %%
model = kronvi.DirectModel(
    prior_w=prior_w, prior_noise=prior_noise, q_w=q_w, q_noise=q_noise,
    features=(std, features), y_offset=y_offset, packed_codes=packed, bits=4,
)
path = os.path.join(tempfile.mkdtemp(), "yacht.npz")
kronvi.save_model(path, model)
loaded = kronvi.load_model(path)
print(f"{os.path.getsize(path)} bytes on disk")

std2, features2 = loaded.features
Phi2 = kronvi.inputs.rff_features(features2, jnp.asarray(kronvi.inputs.standardize(std2, X[test]), jnp.float32))
preds = kronvi.quantize.predict_from_codes(loaded.packed_codes, loaded.prior_w, Phi2) + loaded.y_offset
print("same predictions after loading:", bool(np.allclose(preds, float_preds + y_offset)))
