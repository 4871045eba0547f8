"""Exact Gaussian mean field: the ELBO against dense / Monte Carlo float64 references, gradients against
finite differences, the closed-form fit against the exact posterior."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import dense_gaussian_elbo, gaussian_problem, tol
from jax.test_util import check_grads

import kronvi


def test_exact_elbo_matches_dense_reference(dtype):
    stats, Phi, y = gaussian_problem(dtype)
    rng = np.random.default_rng(1)
    mean, std = rng.normal(size=4), rng.uniform(0.1, 1.0, size=4)
    q = kronvi.gaussian.GaussianMeanField(jnp.asarray(mean, dtype), jnp.asarray(np.log(std), dtype))
    got = kronvi.gaussian.gaussian_mf_elbo(stats, q, 0.4, prior_scale=0.7)
    assert got.dtype == jnp.dtype(dtype)
    want = dense_gaussian_elbo(Phi, y, mean, std, 0.4, 0.7)
    np.testing.assert_allclose(float(got), want, rtol=tol(dtype, x32=1e-5, x64=1e-11))


def test_exact_elbo_matches_monte_carlo():
    # E_q[log N(y | Phi w, s2) + log N(w | 0, sw^2) - log q(w)] by sampling w ~ q, float64.
    with jax.enable_x64(True):
        stats, Phi, y = gaussian_problem(np.float64, n=30, b=3)
        rng = np.random.default_rng(2)
        mean, std = rng.normal(size=3), rng.uniform(0.2, 0.8, size=3)
        s2, sw = 0.5, 1.3
        W = mean + std * rng.normal(size=(200_000, 3))
        log_lik = -0.5 * len(y) * np.log(2 * np.pi * s2) - 0.5 * np.sum((y - W @ Phi.T) ** 2, 1) / s2
        log_p = np.sum(-0.5 * np.log(2 * np.pi * sw**2) - 0.5 * W**2 / sw**2, 1)
        log_q = np.sum(-0.5 * np.log(2 * np.pi * std**2) - 0.5 * ((W - mean) / std) ** 2, 1)
        f = log_lik + log_p - log_q
        mc, se = f.mean(), f.std() / np.sqrt(len(f))
        q = kronvi.gaussian.GaussianMeanField(jnp.asarray(mean), jnp.asarray(np.log(std)))
        got = float(kronvi.gaussian.gaussian_mf_elbo(stats, q, s2, prior_scale=sw))
        assert abs(got - mc) < 5 * se, (got, mc, se)


def test_elbo_gradient_matches_finite_differences():
    with jax.enable_x64(True):
        stats, _, _ = gaussian_problem(np.float64, b=3)
        rng = np.random.default_rng(3)
        mean, log_std = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=3) * 0.3)
        scale = jnp.asarray([0.5, 1.0, 2.0])

        def f(mean, log_std, log_s2):
            q = kronvi.gaussian.GaussianMeanField(mean, log_std)
            return kronvi.gaussian.gaussian_mf_elbo(stats, q, jnp.exp(log_s2), prior_scale=scale)

        check_grads(jax.jit(f), (mean, log_std, jnp.asarray(-0.5)), order=2, modes=["rev"], eps=1e-4)


def test_closed_form_fit_fixed_noise_is_the_stationary_point_and_the_posterior_mean(dtype):
    stats, Phi, y = gaussian_problem(dtype)
    q, s2, info = kronvi.gaussian.fit_gaussian_mf(
        stats, prior_scale=0.8, noise_variance=0.2, learn_noise=False
    )
    assert float(s2) == pytest.approx(0.2)
    assert int(info.num_iter) == 1 and bool(info.converged)
    # Mean equals the exact Gaussian posterior mean (float64 reference).
    A = Phi.T @ Phi
    mu = np.linalg.solve(A + 0.2 / 0.8**2 * np.eye(4), Phi.T @ y)
    np.testing.assert_allclose(np.asarray(q.mean), mu, rtol=tol(dtype, x32=1e-4, x64=1e-9))
    np.testing.assert_allclose(
        np.exp(2 * np.asarray(q.log_std)), 1 / (np.diag(A) / 0.2 + 1 / 0.8**2), rtol=tol(dtype, x32=1e-5)
    )
    if np.dtype(dtype) == np.float64:
        g = jax.grad(
            lambda m, ls: kronvi.gaussian.gaussian_mf_elbo(
                stats, kronvi.gaussian.GaussianMeanField(m, ls), 0.2, prior_scale=0.8
            ),
            argnums=(0, 1),
        )(q.mean, q.log_std)
        assert max(float(jnp.max(jnp.abs(x))) for x in g) < 1e-8


def test_closed_form_fit_learned_noise_is_monotone_and_stationary(dtype):
    stats, _, _ = gaussian_problem(dtype, n=200, noise=0.5)
    q, s2, info = kronvi.gaussian.fit_gaussian_mf(stats, prior_scale=1.0, noise_variance=5.0)
    trace = np.asarray(info.elbo, np.float64)
    assert np.all(np.diff(trace) >= -tol(dtype, x32=1e-5, x64=1e-11) * abs(trace[-1]))
    assert bool(info.converged)
    assert 0.15 < float(s2) < 0.4  # true noise variance 0.25
    with jax.enable_x64(True):
        stats64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), stats)
        qq = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), q)
        dlog = jax.grad(lambda t: kronvi.gaussian.gaussian_mf_elbo(stats64, qq, jnp.exp(t), prior_scale=1.0))(
            jnp.log(jnp.asarray(float(s2), jnp.float64))
        )
        assert abs(float(dlog)) < 1e-2 * float(stats.n) * tol(dtype, x32=1.0, x64=1e-4)


def test_noise_bounds_clip_the_learned_noise():
    stats, _, _ = gaussian_problem(np.float32, n=200, noise=0.5)
    _, s2, _ = kronvi.gaussian.fit_gaussian_mf(
        stats, prior_scale=1.0, noise_variance=1.0, noise_bounds=(0.5, 2.0)
    )
    assert float(s2) == pytest.approx(0.5)


def test_contracts_jit_vmap_dtype():
    stats, _, _ = gaussian_problem(np.float32)
    folds = jax.tree.map(lambda a: jnp.stack([a, 2 * a]), stats)
    q = kronvi.gaussian.GaussianMeanField(jnp.zeros(4), jnp.zeros(4))
    e = jax.vmap(lambda s: kronvi.gaussian.gaussian_mf_elbo(s, q, 0.5, prior_scale=1.0))(folds)
    assert e.shape == (2,) and e.dtype == jnp.float32
    e0 = jax.jit(lambda s: kronvi.gaussian.gaussian_mf_elbo(s, q, 0.5, prior_scale=1.0))(stats)
    np.testing.assert_allclose(float(e0), float(e[0]), rtol=1e-6)
    m, v = kronvi.gaussian.predict_gaussian_mf(q, 0.5, jnp.ones((3, 4)))
    assert m.shape == v.shape == (3,) and float(v[0]) == pytest.approx(4.5)


def test_bad_inputs():
    stats, _, _ = gaussian_problem(np.float32)
    q = kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3))
    with pytest.raises(ValueError, match="weights"):
        kronvi.gaussian.gaussian_mf_elbo(stats, q, 0.5, prior_scale=1.0)
    q = kronvi.gaussian.GaussianMeanField(jnp.zeros(4), jnp.zeros(4))
    with pytest.raises(ValueError, match="positive"):
        kronvi.gaussian.gaussian_mf_elbo(stats, q, -0.5, prior_scale=1.0)
    with pytest.raises(ValueError, match="lo < hi"):
        kronvi.gaussian.fit_gaussian_mf(stats, prior_scale=1.0, noise_variance=1.0, noise_bounds=(2.0, 1.0))
    with pytest.raises(TypeError, match="GradientTransformation"):
        kronvi.gaussian.gaussian_reparam_init(q, 1.0, optimizer="adam")


def test_ill_conditioned_float32_ridge_system_gets_a_jitter_not_nan():
    # Nearly collinear features, many rows, a tiny noise variance: float32 cannot factor A + s2/sw^2 I
    # (seen on a 44,000-row keggdirected fold). The fit must stay finite and close to float64.
    rng = np.random.default_rng(0)
    n, b = 50000, 60
    base = rng.normal(size=(n, 3))
    Phi = base @ rng.normal(size=(3, b)) + 1e-4 * rng.normal(size=(n, b))
    y = Phi[:, 0] + 1e-3 * rng.normal(size=n)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32))
    M = stats.PhitPhi + 1e-9 * jnp.eye(b)
    assert not bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(M))))  # the plain factorization fails
    q, _, _ = kronvi.gaussian.fit_gaussian_mf(stats, prior_scale=1.0, noise_variance=1e-9, learn_noise=False)
    assert bool(jnp.all(jnp.isfinite(q.mean)))
    fitted = np.asarray(Phi @ np.asarray(q.mean, np.float64))
    assert np.sqrt(np.mean((fitted - y) ** 2)) < 0.05 * np.std(y)
    # The start built on it is finite too.
    qw, qn = kronvi.fitting.gaussian_start(
        stats, kronvi.model.gaussian_prior(b, 1.0), kronvi.model.noise_prior(1e-8, levels=5)
    )
    assert bool(jnp.all(jnp.isfinite(qw.logits))) and bool(jnp.all(jnp.isfinite(qn.logits)))
