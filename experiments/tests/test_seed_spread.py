"""The seed-spread study's exact GP (experiments/seed_spread.py): the b -> infinity limit of the default's
centred random features, against Bayesian linear regression on many explicit centred features."""

import types

import numpy as np
import seed_spread

import kronvi


def _fold(rng, X, y):
    """A stand-in for `PreparedFold`: what `exact_gp_means` reads."""
    hyper = kronvi.inputs.GPHyperparameters(np.array([0.7, 1.3]), np.array(1.6), np.array(0.05))
    standardizer = types.SimpleNamespace(mean=X.mean(0), scale=X.std(0))
    return types.SimpleNamespace(standardizer=standardizer, hyper=hyper, y_offset=y.mean(), y_scale=2.0)


def test_exact_gp_is_the_limit_of_centred_random_features():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 2)) * [3.0, 0.5] + [10.0, -1.0]
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=25) + 5.0
    X_test = rng.normal(size=(6, 2)) * [3.0, 0.5] + [10.0, -1.0]
    fold = _fold(rng, X, y)
    means = seed_spread.exact_gp_means(fold, X, y, X_test)

    # BLR on D random Fourier frequencies of the same kernel, centred on the training rows, prior N(0, s2 I)
    ell, s2, n2 = (np.asarray(a, np.float64) for a in fold.hyper)
    D = 400_000
    W = rng.normal(size=(2, D)) / ell[:, None]

    def features(A):
        Z = (A - fold.standardizer.mean) / fold.standardizer.scale @ W
        return np.concatenate([np.cos(Z), np.sin(Z)], axis=1) / np.sqrt(D)

    Phi = features(X)
    offset = Phi.mean(0)
    Phi, Phi_test = Phi - offset, features(X_test) - offset
    ys = (y - fold.y_offset) / fold.y_scale
    # the weights' posterior mean in the dual form: s2 Phi^T (s2 Phi Phi^T + n2 I)^-1 y
    alpha = np.linalg.solve(s2 * Phi @ Phi.T + n2 * np.eye(len(y)), ys)
    reference = fold.y_offset + fold.y_scale * (s2 * Phi_test @ (Phi.T @ alpha))
    np.testing.assert_allclose(means["exact-gp"], reference, atol=0.03 * np.std(y))


def test_exact_gp_ev_maximizes_the_evidence():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2))
    y = np.cos(2 * X[:, 0]) + 0.3 * rng.normal(size=30)
    fold = _fold(rng, X, y)
    X_test = rng.normal(size=(5, 2))
    out = seed_spread.exact_gp_means(fold, X, y, X_test)

    # the centred kernel and its log evidence by the dense formulas
    ell = np.asarray(fold.hyper.lengthscales)
    Z = (X - fold.standardizer.mean) / fold.standardizer.scale / ell
    Zt = (X_test - fold.standardizer.mean) / fold.standardizer.scale / ell
    K = np.exp(-0.5 * ((Z[:, None] - Z[None]) ** 2).sum(-1))
    Ks = np.exp(-0.5 * ((Zt[:, None] - Z[None]) ** 2).sum(-1))
    m, mt = K.mean(1), Ks.mean(1)
    Kc = K - m[:, None] - m[None] + m.mean()
    Ksc = Ks - mt[:, None] - m[None] + m.mean()
    ys = (y - fold.y_offset) / fold.y_scale

    def log_evidence(s2, n2):
        C = s2 * Kc + n2 * np.eye(len(y))
        return -0.5 * ys @ np.linalg.solve(C, ys) - 0.5 * np.linalg.slogdet(C)[1]

    s2, n2 = out["evidence_optimum"]
    best = log_evidence(s2, n2)
    for a, b in [(1.2, 1), (1 / 1.2, 1), (1, 1.2), (1, 1 / 1.2)]:
        assert log_evidence(a * s2, b * n2) < best
    assert log_evidence(float(fold.hyper.signal_variance), float(fold.hyper.noise_variance)) < best
    mean = fold.y_offset + fold.y_scale * (s2 * Ksc @ np.linalg.solve(s2 * Kc + n2 * np.eye(len(y)), ys))
    np.testing.assert_allclose(out["exact-gp-ev"], mean, rtol=1e-8, atol=1e-10)
