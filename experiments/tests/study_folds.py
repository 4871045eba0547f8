"""Writes a tiny dataset in the shared data layout (`data.csv.gz`, `test_mask.csv.gz`) for the studies' tests."""

import gzip

import numpy as np


def write_folds(folder, X, y, mask):
    """`X` (n, d) and `y` (n,) as `folder/data.csv.gz` (y last), `mask` (n, K) 0/1 as `folder/test_mask.csv.gz`."""
    folder.mkdir(parents=True)
    with gzip.open(folder / "data.csv.gz", "wt") as f:
        np.savetxt(f, np.column_stack([X, y]), delimiter=",")
    with gzip.open(folder / "test_mask.csv.gz", "wt") as f:
        np.savetxt(f, mask, delimiter=",", fmt="%d")


def write_sine_folds(folder, n=40, d=3, K=5, seed=0, constant_column=False):
    """A synthetic dataset (y = sin(2 x_0) + noise, `K` random folds) written with `write_folds`; the last
    input is made constant (7.0) when `constant_column`. Returns `(X, y, mask)`."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if constant_column:
        X[:, -1] = 7.0
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    mask = np.eye(K, dtype=int)[rng.permutation(n) % K]
    write_folds(folder, X, y, mask)
    return X, y, mask
