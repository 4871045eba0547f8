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
# # Many rows, many devices
#
# Everything DIRECT needs from the data is four sufficient statistics,
# $(n,\ y^\top y,\ \Phi^\top y,\ \Phi^\top\Phi)$: $b \times b$ numbers whatever the number of rows $n$.
# The statistics are sums over rows, so they can be accumulated one block at a time, on many devices, or
# on many machines, and merged; the fit that follows never sees a row.
#
# ## Rows that do not fit in memory
#
# [`regression_stats_from_chunks`][kronvi.stats.regression_stats_from_chunks] takes any iterator of `(X, y)`
# blocks, for example slices of a memory-mapped `.npy` file, featurizes each block with `feature_map`,
# and merges the blocks' statistics while carrying their rounding error, so the result matches one pass
# over all rows to the dtype's accuracy.

# %%
import functools
import os
import subprocess
import sys
import tempfile
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

# a synthetic data set of 100,000 rows and 4 inputs, written to disk
rng = np.random.default_rng(0)
X = rng.normal(size=(100_000, 4)).astype(np.float32)
y = (np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=len(X))).astype(np.float32)
path = os.path.join(tempfile.mkdtemp(), "rows.npy")
np.save(path, np.column_stack([X, y]))


def blocks(path, rows=25_000):
    data = np.load(path, mmap_mode="r")  # nothing is read yet
    for start in range(0, data.shape[0], rows):
        block = np.asarray(data[start : start + rows])  # only these rows in memory
        yield block[:, :-1], block[:, -1]


features = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(4), num_frequencies=100)  # b = 200
feature_map = functools.partial(kronvi.inputs.rff_features, features)
stats = kronvi.stats.regression_stats_from_chunks(blocks(path), feature_map=feature_map)
print(f"n = {int(stats.n)}, PhitPhi {stats.PhitPhi.shape}")

# %% [markdown]
# The same statistics in one pass over all rows in memory, for comparison:

# %%
one_pass = kronvi.stats.regression_stats_from_inputs(feature_map, jnp.asarray(X), jnp.asarray(y))
rel = float(jnp.max(jnp.abs(stats.PhitPhi - one_pass.PhitPhi)) / jnp.max(jnp.abs(one_pass.PhitPhi)))
print(f"largest difference in PhitPhi, relative to its largest entry: {rel:.1e}")

# %% [markdown]
# Statistics of disjoint row sets add ([`merge_stats`][kronvi.stats.merge_stats]) and subtract
# ([`subtract_stats`][kronvi.stats.subtract_stats]), which is how K-fold cross-validation gets every fold's
# training statistics from one pass ([`kfold_stats`][kronvi.stats.kfold_stats]). The fit takes the
# $b \times b$ statistics only:

# %%
prior_w = kronvi.model.gaussian_prior(200, 1.0, levels=15, width=3.0)
prior_noise = kronvi.model.noise_prior(0.01, levels=15, span=10.0)
q_w, q_noise, info = kronvi.fitting.fit_regression(stats, prior_w, prior_noise, init="gaussian")
_, _, e_noise = kronvi.model.noise_moments(q_noise, prior_noise)
print(f"ELBO {float(info.final_elbo):.1f}; posterior mean noise variance {float(e_noise):.3f}")
true_noise = 0.01  # the noise added to y above: sd 0.1
if float(e_noise) > 1.5 * true_noise:
    print(f"the data's noise variance is {true_noise}: the other {float(e_noise) - true_noise:.3f} is signal "
          f"that {stats.PhitPhi.shape[0]} random features miss")  # fmt: skip
else:
    print(f"close to the data's noise variance, {true_noise}: the features capture the signal")

# %% [markdown]
# ## Many devices
#
# [`regression_stats`][kronvi.stats.regression_stats] and
# [`regression_stats_from_inputs`][kronvi.stats.regression_stats_from_inputs] also accept a global `jax.Array`
# whose rows are sharded over devices (any `NamedSharding` of the rows). Each device sums its own rows
# with the compensated kernel, and an exact all-reduce adds the shards, so the statistics are rounded once
# whatever the device count, and every device gets the same, replicated result. Rows that do not split
# evenly are padded and left out with `mask=`.
#
# On a CPU, JAX shows several devices only if `XLA_FLAGS=--xla_force_host_platform_device_count=4` is set
# before JAX starts. This page's JAX has already started, so the example runs in a fresh Python process;
# on a machine with several GPUs the same code runs as is.

# %%
script = textwrap.dedent(
    """
    import functools, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"  # before JAX starts
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import kronvi

    rng = np.random.default_rng(0)
    X = rng.normal(size=(10_001, 4)).astype(np.float32)  # not a multiple of 4 devices
    y = (np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=len(X))).astype(np.float32)
    feature_map = functools.partial(kronvi.inputs.rff_features, kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(4), 100))

    # pad to a multiple of the device count and mask the padding
    rows = -(-len(X) // jax.device_count()) * jax.device_count()
    pad = rows - len(X)
    Xp, yp = np.pad(X, ((0, pad), (0, 0))), np.pad(y, (0, pad))
    keep = np.arange(rows) < len(X)

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("rows",)), P("rows"))
    Xs, ys, ms = (jax.device_put(a, sharding) for a in (Xp, yp, keep))
    stats = kronvi.stats.regression_stats_from_inputs(feature_map, Xs, ys, mask=ms)
    single = kronvi.stats.regression_stats_from_inputs(feature_map, jnp.asarray(X), jnp.asarray(y))
    print("devices:", jax.device_count(), "| rows per device:", Xs.addressable_shards[0].data.shape[0])
    print("n =", int(stats.n), "| replicated on", len(stats.PhitPhi.sharding.device_set), "devices")
    err = jnp.max(jnp.abs(stats.PhitPhi - single.PhitPhi)) / jnp.max(jnp.abs(single.PhitPhi))
    print(f"largest difference from one device, relative: {float(err):.1e}")
    """
)
env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
print(out.stdout)

# %% [markdown]
# ## Many machines
#
# With `jax.distributed.initialize` each process holds its own rows, and
# `jax.make_array_from_process_local_data` assembles them into one global array sharded over every device
# of every process; the same call returns the same statistics on every process. One copy of this runs per
# process (a sketch, not executed here: the [GPUs and many machines](../gpus.md) page has a complete
# script that runs as one or more processes and pads unequal row counts):
#
# ```python
# jax.distributed.initialize(coordinator_address="host0:12357", num_processes=N, process_id=i)
# sharding = NamedSharding(Mesh(np.array(jax.devices()), ("rows",)), P("rows"))
# X, y, mask = (jax.make_array_from_process_local_data(sharding, a) for a in (X_local, y_local, keep_local))
# stats = kronvi.stats.regression_stats_from_inputs(feature_map, X, y, mask=mask)  # the same on every process
# q_w, q_n, info = kronvi.fitting.fit_regression(stats, prior_w, prior_n)             # fit anywhere: b x b input
# ```
#
# Blocks from `regression_stats_from_chunks` may themselves be global arrays, which combines the two: every
# process streams its own rows of each block.
