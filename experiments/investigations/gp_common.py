"""What the GP and prior-scale investigations (`gp_restarts/`, `gp_warm/`, `gp_budget/`, `scale_cap/`,
`evidence_scale.py`) share: the dataset list and the closed-form exact BLR predictive on a fold's features."""

import pathlib

import numpy as np

from kronvi import pipeline as P


def dataset_names(data_dir, datasets):
    """Every dataset folder of `data_dir` (sorted) for `"all"`, else the comma-separated names."""
    if datasets == "all":
        return sorted(p.name for p in pathlib.Path(data_dir).iterdir() if p.is_dir())
    return datasets.split(",")


def blr_predictive(eigenvalues, rotated_Phity, rotated_test, prior_scale, noise_variance):
    """Exact BLR's predictive mean and variance (noise included) in the eigenbasis of ΦᵀΦ, where the
    posterior is diagonal: `eigenvalues` of ΦᵀΦ, `rotated_Phity` = Vᵀ Φᵀy, `rotated_test` = Φ_test V."""
    d = eigenvalues + noise_variance / prior_scale**2
    return rotated_test @ (rotated_Phity / d), noise_variance + rotated_test**2 @ (noise_variance / d)


def rmse_nlpd(err, var):
    """Test RMSE and mean Gaussian negative log predictive density of errors `err` with variances `var`."""
    return float(np.sqrt(np.mean(err**2))), float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * err**2 / var))


def exact_blr_score(fold, X_test, y_test):
    """`(rmse, nlpd)` of the exact BLR predictive on the fold's features, prior scale and noise: the
    fold's features are already in its eigenbasis (the default recipe matches this posterior)."""
    Phi = np.asarray(P.fold_features(fold, X_test), np.float64)
    lam = np.asarray(fold.basis.eigenvalues, np.float64)
    c = np.asarray(fold.stats.Phity, np.float64)
    m, pv = blr_predictive(lam, c, Phi, float(fold.prior_scale), float(fold.noise_variance))
    yc = np.asarray(y_test, np.float64) - float(fold.y_offset)
    return rmse_nlpd(yc - m, pv)
