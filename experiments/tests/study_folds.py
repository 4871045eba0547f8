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
