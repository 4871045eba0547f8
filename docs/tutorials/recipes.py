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
# # Three recipes: accurate, compact, sparse
#
# `DirectConfig(recipe=...)` (`kronvi.Eigen`, `Compact` or `Features`) chooses how the weights are discretized:
#
# - `"eigen"` (the default): in the eigenbasis of $\Phi^\top\Phi$, where a mean field loses nothing; the
#   accuracy of exact Bayesian linear regression, at the price of a `b x b` rotation in the model;
# - `"compact"`: the same fit, stored as its exact posterior mean, the `k` directions whose posterior
#   variances differ, and one shared variance for the rest (`kronvi.model.compact_posterior`): a `b x k`
#   matrix instead of `b x b`;
# - `"features"` (the paper's): one 15-level grid with a zero level on the random-feature weights, so
#   posterior samples are sparse 4-bit codes; less accurate.
#
# This page fits the three on one fold of the shipped yacht data, then plots what the study
# `experiments/quantized_inference.py` measured on the 28 shared UCI datasets.

# %%
import json
import os
import pathlib
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import kronvi
from kronvi.pipeline import DirectConfig, fit_prepared, prepare_fold

X, y, test_mask = kronvi.load_demo()
test = test_mask[:, 0].astype(bool)
config = DirectConfig(num_frequencies=500)  # b = 1000 features, a few seconds per recipe
fold = prepare_fold(jax.random.key(0), X[~test], y[~test], config)  # GP, features, statistics, eigenbasis
models = {
    "eigen": fit_prepared(fold, config).model,
    "compact": fit_prepared(fold, config._replace(recipe=kronvi.Compact())).model,
}
features = DirectConfig(recipe=kronvi.Features(), num_frequencies=500)
fold_f = prepare_fold(jax.random.key(0), X[~test], y[~test], features, gp=(fold.hyper, fold.gp_info))
models["features"] = fit_prepared(fold_f, features).model

# %% [markdown]
# Each model predicts the same way, from raw inputs in the targets' units: `model.predict` (the exact
# predictive mean and variance) and `model.log_density`. The file is `kronvi.save_model` of the whole
# model (standardizer, features, basis, priors and posteriors).

# %%
y_test = jnp.asarray(y[test], jnp.float32)
X_1000 = np.resize(X[test], (1000, X.shape[1]))  # the test rows repeated: 1,000 points to time
print(f"{'recipe':9s} {'RMSE':>7s} {'NLPD':>7s} {'sparsity':>8s} {'weights':>7s} {'file kB':>8s} {'ms/1000 pts':>11s}")
for name, model in models.items():
    mean = model.predict(X[test]).mean
    nlpd = -float(jnp.mean(model.log_density(X[test], y_test)))
    rmse = float(jnp.sqrt(jnp.mean((mean - y_test) ** 2)))
    sparsity = float(kronvi.model.expected_sparsity(model.q_w, model.prior_w))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.npz")
        kronvi.save_model(path, model)
        kb = os.path.getsize(path) / 1e3

    def predict(m=model):
        return m.predict(X_1000)

    jax.block_until_ready(predict())
    t0 = time.perf_counter()
    for _ in range(5):
        jax.block_until_ready(predict())
    ms = (time.perf_counter() - t0) / 5 * 1e3
    weights = model.prior_w.values.shape[0]
    print(f"{name:9s} {rmse:7.3f} {nlpd:7.3f} {100 * sparsity:7.0f}% {weights:7d} {kb:8.0f} {ms:11.1f}")
print(f"compact: {models['compact'].basis.vectors.shape[1]} of {fold.stats.Phity.shape[0]} directions kept")

# %% [markdown]
# The compact model predicts with the default's mean exactly and its variance within the bound
# `compact_tol` sets, from a fraction of the bytes. The paper's recipe is the smallest and the sparsest,
# and the least accurate on this fold.
#
# ## On 28 datasets
#
# The study's records (fold 0 of every shared UCI dataset, b = 2000 or 4000) are committed in
# `experiments/results/quantized_inference_recipes.jsonl`; each point below is one dataset and recipe,
# its accuracy relative to exact Bayesian linear regression on the same features against the model file's
# size. "sparse" is the feature basis with a spike-and-slab grid prior (0.9 of the prior mass at zero).

# %%
here = pathlib.Path.cwd().resolve()
root = next(p for p in (here, *here.parents) if (p / "experiments" / "results").is_dir())  # the repository
records = [
    json.loads(line)
    for line in (root / "experiments/results/quantized_inference_recipes.jsonl").read_text().splitlines()
    if line
]
sys.path.insert(0, str(root / "experiments"))
from quantized_inference import recipes_figure  # noqa: E402  (the study's own figure)

recipes_figure(records)
plt.show()

# %% [markdown]
# The dotted lines are the bar the compact recipe is held to (1.02x exact BLR's RMSE, +0.05 nats of NLPD);
# `experiments/results/quantized_inference_recipes.md` has every number and names each dataset that misses.
