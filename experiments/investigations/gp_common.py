"""What the GP investigations (`gp_restarts/`, `gp_warm/`, `gp_budget/`) share: the dataset list and the
closed-form score of a prepared fold by the exact BLR predictive on its features."""

import pathlib

import numpy as np

from kronvi import pipeline as P


def dataset_names(data_dir, datasets):
    """Every dataset folder of `data_dir` (sorted) for `"all"`, else the comma-separated names."""
    if datasets == "all":
        return sorted(p.name for p in pathlib.Path(data_dir).iterdir() if p.is_dir())
    return datasets.split(",")


def exact_blr_score(fold, X_test, y_test):
    """`(rmse, nlpd)` of the exact BLR predictive on the fold's features, prior scale and noise: in the
    fold's eigenbasis the posterior is diagonal (the default recipe matches it)."""
    Phi = np.asarray(P.fold_features(fold, X_test), np.float64)
    lam = np.asarray(fold.basis.eigenvalues, np.float64)
    c = np.asarray(fold.stats.Phity, np.float64)
    v, s2 = float(fold.prior_scale) ** 2, float(fold.noise_variance)
    mu, var = c / (lam + s2 / v), s2 / (lam + s2 / v)
    m, pv = Phi @ mu, (Phi**2) @ var + s2
    yc = np.asarray(y_test, np.float64) - float(fold.y_offset)
    rmse = float(np.sqrt(np.mean((m - yc) ** 2)))
    nlpd = float(np.mean(0.5 * np.log(2 * np.pi * pv) + 0.5 * (yc - m) ** 2 / pv))
    return rmse, nlpd
