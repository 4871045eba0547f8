"""The compact form of an eigenbasis posterior against the full model and dense float64 references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import kronvi


def eigen_fit(rng, n, b, *, s2=0.05, sw=1.0, scale=None):
    """A fitted eigenbasis posterior on `n` rows of `b` correlated features with decaying scales."""
    scale = np.exp(-np.arange(b) / 3.0) if scale is None else scale
    Phi = rng.normal(size=(n, b)) * scale
    y = Phi @ rng.normal(size=b) + np.sqrt(s2) * rng.normal(size=n)
    rotated, basis = kronvi.stats.eigenbasis(kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y)))
    prec = basis.eigenvalues / s2 + 1.0 / sw**2
    prior_w = kronvi.model.posterior_grid_prior(
        rotated.Phity / s2 / prec, 1.0 / jnp.sqrt(prec), sw, width=6.0
    )
    prior_n = kronvi.model.DiscretePrior(jnp.asarray([[s2]]), jnp.zeros((1, 1)))
    q_w, q_n, _ = kronvi.fitting.fit_regression(rotated, prior_w, prior_n, sweep="diagonal")
    return Phi, basis, prior_w, q_w, q_n, prior_n


def moments64(q_w, prior_w):
    p = np.asarray(q_w.probs, np.float64)
    v = np.asarray(prior_w.values, np.float64)
    m = (p * v).sum(1)
    return m, (p * (v - m[:, None]) ** 2).sum(1)


def full_predictive(basis, prior_w, q_w, s2, Phi):
    """The eigen model's predictive mean and variance, dense in float64."""
    m, s = moments64(q_w, prior_w)
    P = np.asarray(Phi, np.float64) @ np.asarray(basis.vectors, np.float64)
    return P @ m, (P**2) @ s + s2


def test_compact_features_are_the_dense_formula(dtype):
    rng = np.random.default_rng(0)
    b, k = 7, 3
    V = np.linalg.qr(rng.normal(size=(b, b)))[0]
    mean, a = rng.normal(size=b), np.array([0.5, 1.5])
    Phi = rng.normal(size=(5, b))
    basis = kronvi.model.CompactBasis(*(jnp.asarray(x, dtype) for x in (mean, V[:, :k], a)))
    got = kronvi.model.compact_features(basis, jnp.asarray(Phi, dtype))
    # the complement's norm from its own vectors, not from the identity the function uses
    r = np.linalg.norm(Phi @ V[:, k:], axis=1)
    want = np.concatenate([(Phi @ mean)[:, None], Phi @ V[:, :k], r[:, None] * a[None, :]], axis=1)
    assert got.dtype == dtype and got.shape == (5, 1 + k + 2)
    np.testing.assert_allclose(got, want, rtol=tol(dtype, x32=1e-4), atol=tol(dtype, x32=1e-5))
    with pytest.raises(ValueError, match="`Phi` has 6 features but the basis has 7"):
        kronvi.model.compact_features(basis, jnp.zeros((2, 6), dtype))
    with pytest.raises(TypeError, match="must be a CompactBasis"):
        kronvi.model.compact_features(tuple(basis), Phi)


def test_the_complement_norm_survives_float16_vectors_and_inputs_near_the_kept_span():
    # phi almost in the span of V_K: |phi|^2 - |V_K^T phi|^2 cancels; with float16 vectors (orthonormal to
    # ~1e-4) that difference was wrong by ~1e-4 |phi|^2 >> r^2 and tripled a compact model's variance
    rng = np.random.default_rng(1)
    b, k = 400, 300
    V = np.linalg.qr(rng.normal(size=(b, b)))[0]
    Phi = rng.normal(size=(20, k)) @ V[:, :k].T + 1e-2 * rng.normal(size=(20, b - k)) @ V[:, k:].T
    r = np.linalg.norm(Phi @ V[:, k:], axis=1)  # about 0.1 against |phi| about 17: r^2 / |phi|^2 ~ 3e-5
    for vectors_dtype in (jnp.float16, jnp.float32):
        basis = kronvi.model.CompactBasis(
            jnp.zeros(b, jnp.float32), jnp.asarray(V[:, :k], vectors_dtype), jnp.ones(1, jnp.float32)
        )
        got = np.asarray(
            kronvi.model.compact_features(basis, jnp.asarray(Phi, jnp.float32))[:, -1], np.float64
        )
        np.testing.assert_allclose(got, r, rtol=0.05 if vectors_dtype == jnp.float16 else 1e-3)


def brute_force_split(lam, s, n, noise, tol_):
    """The largest feasible band by trying every prefix and suffix of the sorted variances."""
    order = np.argsort(s, kind="stable")
    ss, ls = s[order], lam[order]
    b = len(s)
    null = ls <= ls.max() * b * np.finfo(np.float64).eps
    best = (0, None, None)
    for j in range(1, b + 1):
        top = ss[b - j :]
        if top.max() / top.min() - 1 <= tol_ + 1e-6 and j > best[0]:
            best = (j, order[b - j :], top.max())
        bot, lb = ss[:j], ls[:j]
        if null[:j].any():
            continue
        cum = np.cumsum(lb)  # weighted median: the first value with half of the weight at or below it
        med = bot[min(np.searchsorted(cum, 0.5 * cum[-1]), j - 1)]
        if np.sum(lb * np.abs(bot - med)) / n <= tol_ * noise and j > best[0]:
            best = (j, order[:j], med)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tol_", [0.0, 0.05, 0.3, 3.0])
def test_complement_split_takes_the_largest_feasible_band(seed, tol_):
    rng = np.random.default_rng(seed)
    b, n = 9, 20
    lam = np.sort(rng.exponential(size=b) * 10.0 ** rng.uniform(-3, 2, size=b))
    lam[: seed % 3] = 0.0  # a null space in some draws
    s = 1.0 / (lam / 0.1 + 1.0)
    s[lam == 0] = 1.0
    size, band, s_bar = brute_force_split(lam, s, n, 0.1, tol_)
    keep, got_s_bar = kronvi.model.complement_split(lam, s, n, 0.1, tol=tol_)
    assert np.sum(~keep) == size
    if size:
        assert sorted(np.flatnonzero(~keep)) == sorted(band) and got_s_bar == s_bar


def test_complement_split_errors():
    with pytest.raises(ValueError, match="must be"):
        kronvi.model.complement_split(np.ones(3), np.ones(2), 5, 0.1, tol=0.1)
    with pytest.raises(ValueError, match="variances positive"):
        kronvi.model.complement_split(np.ones(3), np.array([1.0, 0.0, 1.0]), 5, 0.1, tol=0.1)
    with pytest.raises(ValueError, match="`tol` must be >= 0"):
        kronvi.model.complement_split(np.ones(3), np.ones(3), 5, 0.1, tol=-1.0)


@pytest.mark.parametrize("tol_", [0.0, 0.1, 0.5])
def test_few_rows_keep_the_mean_and_bound_the_variance_at_every_input(tol_):
    # n < b: the null space and the directions the data barely move share the prior's variance. The mean
    # is the full model's; the variance is never below it and at most (1 + tol) times it, at training
    # rows and at inputs far from them alike.
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        Phi, basis, prior_w, q_w, q_n, prior_n = eigen_fit(rng, 12, 30)
        cb, prior_c, q_c = kronvi.model.compact_posterior(basis, q_w, prior_w, 12, 0.05, tol=tol_, width=6.0)
        assert cb.vectors.shape[1] <= 12  # at most the directions the rows span
        X_new = np.concatenate([Phi[:4], 3.0 * rng.normal(size=(6, 30))])
        Pc = kronvi.model.compact_features(cb, jnp.asarray(X_new))
        mean, var = kronvi.model.predict_regression(q_c, q_n, prior_c, prior_n, Pc)
        m_full, v_full = full_predictive(basis, prior_w, q_w, 0.05, X_new)
        np.testing.assert_allclose(mean, m_full, rtol=1e-9, atol=1e-9 * np.abs(m_full).max())
        var, rel = np.asarray(var), np.asarray(var) / v_full - 1.0
        assert np.all(rel >= -1e-9) and np.all(rel <= tol_ + 2e-6)
        # the exact difference: sum over the complement of (phi^T v_i)^2 (s_bar - s_i)
        _, s = moments64(q_w, prior_w)
        keep, s_bar = kronvi.model.complement_split(basis.eigenvalues, s, 12, 0.05, tol=tol_)
        P = X_new @ np.asarray(basis.vectors)
        np.testing.assert_allclose(
            var - v_full, (P[:, ~keep] ** 2) @ (s_bar - s[~keep]), atol=1e-9 * v_full.max()
        )


def test_many_rows_bound_the_mean_variance_change_on_the_training_rows():
    # n >> b: the directions the data pin down share one small variance; over the training rows the mean
    # |change| of the predictive variance is within tol * E[sigma^2].
    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        Phi, basis, prior_w, q_w, q_n, prior_n = eigen_fit(rng, 4000, 12, scale=np.ones(12))
        cb, prior_c, q_c = kronvi.model.compact_posterior(basis, q_w, prior_w, 4000, 0.05, tol=0.1, width=6.0)
        assert cb.vectors.shape[1] == 0  # every direction in the band: the mean and one shared variance
        mean, var = kronvi.model.predict_regression(
            q_c, q_n, prior_c, prior_n, kronvi.model.compact_features(cb, Phi)
        )
        m_full, v_full = full_predictive(basis, prior_w, q_w, 0.05, Phi)
        np.testing.assert_allclose(mean, m_full, rtol=1e-9, atol=1e-9 * np.abs(m_full).max())
        assert np.mean(np.abs(np.asarray(var) - v_full)) <= 0.1 * 0.05
        assert not np.allclose(var, v_full, rtol=1e-6)  # the band did change the variance


def test_the_compact_density_matches_the_full_models():
    # With tol = 0 the complement is the null space, whose posterior is the prior: the compact model's
    # J grids stand for it. The log densities agree to the discretization of that complement.
    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        # 15 rows of 24 features: a null space of 9 and 1 + 15 + 8 compact weights, as many as the full
        # model's, so both densities run one compiled kernel
        Phi, basis, prior_w, q_w, q_n, prior_n = eigen_fit(rng, 15, 24, scale=np.ones(24))
        cb, prior_c, q_c = kronvi.model.compact_posterior(basis, q_w, prior_w, 15, 0.05, tol=0.0, width=6.0)
        assert cb.vectors.shape[1] == 15 and prior_c.values.shape == prior_w.values.shape
        X_new = np.concatenate([Phi[:3], rng.normal(size=(5, 24))])
        m_full, v_full = full_predictive(basis, prior_w, q_w, 0.05, X_new)
        y = m_full + np.sqrt(v_full) * np.linspace(-2.5, 2.5, len(m_full))
        rot = kronvi.stats.rotate_features(basis, jnp.asarray(X_new))
        # 256 nodes: every point meets the default rtol (1e-6) in the first pass. From the default 16 the
        # refinement compiled the kernel at 16, 64 and 256 nodes (tests/model/test_density.py tests the
        # refinement); both calls still refine, or raise, if a point misses rtol.
        y = jnp.asarray(y)
        full = kronvi.model.predictive_log_density(q_w, q_n, prior_w, prior_n, rot, y, num_nodes=256)[0]
        Pc = kronvi.model.compact_features(cb, jnp.asarray(X_new))
        got = kronvi.model.predictive_log_density(q_c, q_n, prior_c, prior_n, Pc, y, num_nodes=256)[0]
        np.testing.assert_allclose(got, full, atol=2e-3)


def test_compact_posterior_keeps_the_dtype_and_checks_its_arguments():
    rng = np.random.default_rng(4)
    with jax.enable_x64(True):
        _, basis, prior_w, q_w, _, _ = eigen_fit(rng, 8, 10)
    f32 = [jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), t) for t in (basis, q_w, prior_w)]
    cb, prior_c, q_c = kronvi.model.compact_posterior(*f32, 8, 0.05, tol=0.1, width=6.0)
    assert cb.vectors.dtype == cb.mean.dtype == prior_c.values.dtype == q_c.logits.dtype == jnp.float32
    assert prior_c.values.shape == q_c.logits.shape == (1 + cb.vectors.shape[1] + 8, 15)
    np.testing.assert_array_equal(prior_c.values[0], np.ones(15))  # the mean's weight is fixed at 1
    with pytest.raises(ValueError, match="must agree on b"):
        kronvi.model.compact_posterior(
            f32[0], f32[1], kronvi.model.gaussian_prior(9, 1.0), 8, 0.05, tol=0.1, width=6.0
        )
    with pytest.raises(TypeError, match="must be an Eigenbasis"):
        kronvi.model.compact_posterior(tuple(f32[0]), *f32[1:], 8, 0.05, tol=0.1, width=6.0)
