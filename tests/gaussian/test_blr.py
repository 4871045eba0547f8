"""Exact Bayesian linear regression against dense float64 formulas straight from the data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol
from scipy.stats import multivariate_normal

import kronvi


def _problem(dtype, n=40, b=5, seed=0):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b))
    y = Phi @ rng.normal(size=b) + 0.5 * rng.normal(size=n)
    return Phi, y, kronvi.stats.regression_stats(jnp.asarray(Phi, dtype), jnp.asarray(y, dtype))


@pytest.mark.parametrize("per_weight_scale", [False, True])
def test_posterior_matches_a_dense_solve(dtype, per_weight_scale):
    Phi, y, stats = _problem(dtype)
    b = Phi.shape[1]
    scale = np.linspace(0.5, 2.0, b) if per_weight_scale else 1.3
    s2 = 0.4
    mean, cov = kronvi.gaussian.blr_posterior(stats, jnp.asarray(scale, dtype), s2)
    A = Phi.T @ Phi / s2 + np.diag(np.broadcast_to(1.0 / np.asarray(scale) ** 2, (b,)))
    cov_ref = np.linalg.inv(A)
    mean_ref = cov_ref @ Phi.T @ y / s2
    assert mean.dtype == dtype and cov.dtype == dtype
    np.testing.assert_allclose(mean, mean_ref, rtol=50 * tol(dtype), atol=50 * tol(dtype))
    np.testing.assert_allclose(cov, cov_ref, rtol=50 * tol(dtype), atol=50 * tol(dtype))


def test_log_evidence_matches_the_dense_marginal_likelihood(dtype):
    Phi, y, stats = _problem(dtype)
    for scale, s2 in [(1.0, 0.25), (0.3, 2.0), (3.0, 0.01)]:
        K = scale**2 * Phi @ Phi.T + s2 * np.eye(len(y))
        ref = multivariate_normal(np.zeros(len(y)), K).logpdf(y)
        got = float(kronvi.gaussian.blr_log_evidence(stats, scale, s2))
        assert abs(got - ref) <= 1e3 * tol(dtype) * max(1.0, abs(ref)), (scale, s2, got, ref)


def test_evidence_noise_maximizes_the_evidence(dtype):
    Phi, y, stats = _problem(dtype, n=200, b=6, seed=1)
    s2 = float(kronvi.gaussian.blr_evidence_noise(stats, 1.0, lower=1e-3, upper=1e2))
    grid = np.exp(np.linspace(np.log(1e-3), np.log(1e2), 2001))
    K0 = Phi @ Phi.T
    ev = [multivariate_normal(np.zeros(len(y)), K0 + s * np.eye(len(y))).logpdf(y) for s in grid[::20]]
    coarse = grid[::20][int(np.argmax(ev))]
    assert abs(np.log(s2) - np.log(coarse)) < 0.12  # within one coarse grid step
    best = multivariate_normal(np.zeros(len(y)), K0 + s2 * np.eye(len(y))).logpdf(y)
    assert best >= max(ev) - 1e-3 * abs(max(ev))


def test_evidence_noise_stays_in_its_bracket():
    _, _, stats = _problem(np.float32, n=200, b=6, seed=1)
    s2 = float(kronvi.gaussian.blr_evidence_noise(stats, 1.0, lower=10.0, upper=20.0))
    assert 10.0 <= s2 <= 10.01  # the optimum (about 0.25) lies below: the bracket's lower end


def test_predictive_matches_dense(dtype):
    Phi, y, stats = _problem(dtype)
    mean, cov = kronvi.gaussian.blr_posterior(stats, 1.0, 0.3)
    Pn = np.random.default_rng(3).normal(size=(6, Phi.shape[1]))
    m, v = kronvi.gaussian.predict_blr(mean, cov, 0.3, jnp.asarray(Pn, dtype))
    np.testing.assert_allclose(m, Pn @ np.asarray(mean, np.float64), rtol=1e-4, atol=1e-5)
    v_ref = np.einsum("ij,jk,ik->i", Pn, np.asarray(cov, np.float64), Pn) + 0.3
    np.testing.assert_allclose(v, v_ref, rtol=1e-4)


def test_bad_inputs_name_the_argument():
    _, _, stats = _problem(np.float32)
    with pytest.raises(ValueError, match="noise_variance"):
        kronvi.gaussian.blr_posterior(stats, 1.0, -1.0)
    with pytest.raises(ValueError, match="prior_scale"):
        kronvi.gaussian.blr_posterior(stats, jnp.ones(3), 1.0)
    with pytest.raises(ValueError, match="lower"):
        kronvi.gaussian.blr_evidence_noise(stats, 1.0, lower=2.0, upper=1.0)
    with pytest.raises(ValueError, match="num_steps"):
        kronvi.gaussian.blr_evidence_noise(stats, 1.0, lower=1.0, upper=2.0, num_steps=0)
    with pytest.raises(TypeError, match="stats"):
        kronvi.gaussian.blr_posterior((1.0, 2.0), 1.0, 1.0)
    mean, cov = kronvi.gaussian.blr_posterior(stats, 1.0, 1.0)
    with pytest.raises(ValueError, match="features"):
        kronvi.gaussian.predict_blr(mean, cov, 1.0, jnp.ones((2, 3)))


@pytest.mark.parametrize("n", [200, 4])  # more rows than features, and fewer (the dual's case)
def test_evidence_optimum_maximizes_the_dense_evidence_over_both_variances(dtype, n):
    Phi, y, stats = _problem(dtype, n=n, b=6, seed=2)
    rotated, basis = kronvi.stats.eigenbasis(stats)
    sw, s2 = kronvi.gaussian.spectral_evidence_optimum(
        basis.eigenvalues, rotated.Phity, rotated.yty, rotated.n, 1.0, 1.0
    )
    assert sw.dtype == s2.dtype == dtype

    def evidence(scale, noise):
        return multivariate_normal(np.zeros(n), scale**2 * Phi @ Phi.T + noise * np.eye(n)).logpdf(y)

    best = evidence(float(sw), float(s2))
    # no point of a log grid around it (a factor 1.5 on each side, inside the search range) is better; with
    # fewer rows than features the data can be interpolated and the noise optimum is the range's lower end
    steps = np.exp(np.linspace(-np.log(1.5), np.log(1.5), 9))
    at_bound = np.isclose(float(s2), np.exp(-12.0), rtol=1e-6)
    if dtype == np.float64:  # in float32 the interpolation residual is below rounding: a flat optimum
        assert at_bound == (n < 6)
    noise_steps = steps[steps >= 1] if at_bound else steps
    grid = max(evidence(float(sw) * a, float(s2) * c) for a in steps for c in noise_steps)
    assert best >= grid - 1e3 * tol(dtype) * abs(best)
    # and it is BayesianRidge's choice (no intercept), in float64
    if dtype == np.float64 and n > 6:
        from sklearn.linear_model import BayesianRidge

        br = BayesianRidge(fit_intercept=False, tol=1e-10, max_iter=3000).fit(Phi, y)
        np.testing.assert_allclose([float(sw), float(s2)], [br.lambda_**-0.5, 1 / br.alpha_], rtol=1e-4)


def test_the_newton_steps_derivatives_are_the_evidences():
    """The closed-form gradient and Hessian of the evidence optimum's Newton steps against `jax.grad` and
    `jax.hessian` of `spectral_log_evidence`, and against finite differences, with null directions."""
    from kronvi.gaussian._blr import _evidence_derivatives

    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for b, n in [(12, 8.0), (12, 60.0)]:
            lam = np.sort(rng.gamma(0.5, 10.0, b))
            lam[:3] = 0.0
            c = np.where(lam > 0, rng.normal(size=b) * np.sqrt(lam), 0.0)
            yty = float(np.sum(c[lam > 0] ** 2 / lam[lam > 0]) + 5.0)

            def f(th, lam=lam, c=c, yty=yty, n=n):
                return kronvi.gaussian.spectral_log_evidence(lam, c, yty, n, jnp.exp(0.5 * th[0]), jnp.exp(th[1]))

            for th in (jnp.array([0.3, -1.0]), jnp.array([-4.0, 2.0]), jnp.array([3.0, -6.0])):
                g, H = _evidence_derivatives(lam, c, yty, n, th)
                np.testing.assert_allclose(g, jax.grad(f)(th), rtol=1e-10, atol=1e-10)
                np.testing.assert_allclose(H, jax.hessian(f)(th), rtol=1e-10, atol=1e-10)
                eps = 1e-5
                fd = [(f(th + eps * e) - f(th - eps * e)) / (2 * eps) for e in jnp.eye(2)]
                np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_evidence_optimum_stays_within_its_range():
    _, _, stats = _problem(np.float32, n=200, b=6, seed=1)
    rotated, basis = kronvi.stats.eigenbasis(stats)
    sw, s2 = kronvi.gaussian.spectral_evidence_optimum(
        basis.eigenvalues, rotated.Phity, rotated.yty, rotated.n, 1.0, 100.0, log_range=1.0
    )
    assert np.isclose(float(s2), 100.0 * np.exp(-1.0), rtol=1e-5)  # the optimum (~0.25) is out of range


def test_the_evidence_and_posterior_differentiate_in_reverse_mode():
    """`jax.grad` through the jittered Cholesky (a while_loop before): the evidence's derivatives in the
    prior sd and the noise variance against central differences, in float64."""
    with jax.enable_x64(True):
        _, _, stats = _problem(jnp.float64)
        f = lambda a, s2: kronvi.gaussian.blr_log_evidence(stats, a, s2)  # noqa: E731
        ga, gs = jax.grad(f, argnums=(0, 1))(1.3, 0.4)
        h = 1e-6
        np.testing.assert_allclose(ga, (f(1.3 + h, 0.4) - f(1.3 - h, 0.4)) / (2 * h), rtol=1e-6)
        np.testing.assert_allclose(gs, (f(1.3, 0.4 + h) - f(1.3, 0.4 - h)) / (2 * h), rtol=1e-6)
        g = jax.grad(lambda a: jnp.sum(kronvi.gaussian.blr_posterior(stats, a, 0.4)[0]))(1.3)
        m = lambda a: float(jnp.sum(kronvi.gaussian.blr_posterior(stats, a, 0.4)[0]))  # noqa: E731
        np.testing.assert_allclose(g, (m(1.3 + h) - m(1.3 - h)) / (2 * h), rtol=1e-5)
