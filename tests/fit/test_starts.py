"""gaussian_start against a dense float64 reference, and its purpose: a better optimum at large n."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import kronvi


def _problem(dtype, *, n=400, b=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    W = rng.normal(size=(2, b // 2)) / 0.7
    Phi = np.concatenate([np.cos(X @ W), np.sin(X @ W)], 1) / np.sqrt(b // 2)
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    y = y - y.mean()
    return Phi.astype(dtype), y.astype(dtype)


def test_gaussian_start_matches_dense_reference(dtype):
    Phi, y = _problem(dtype)
    n, b = Phi.shape
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    prior_w = kronvi.model.gaussian_prior(b, 1.5)
    prior_n = kronvi.model.noise_prior(0.02, levels=9, span=10.0)
    q_w, q_n = kronvi.fitting.gaussian_start(stats, prior_w, prior_n, max_iter=4)

    # Dense float64 reference: exact coordinate ascent for the diagonal Gaussian posterior, noise clipped
    # into the grid's range, then the discrete factors and the noise factor.
    P, t = Phi.astype(np.float64), y.astype(np.float64)
    V = np.asarray(prior_w.values, np.float64)
    logp = np.asarray(prior_w.log_probs, np.float64)
    p = np.exp(logp)
    v = (p * V**2).sum(-1) - (p * V).sum(-1) ** 2  # prior variance of each weight
    A, c = P.T @ P, P.T @ t
    S = np.asarray(prior_n.values, np.float64)[0]
    s2 = float(np.sum(np.exp(np.asarray(prior_n.log_probs, np.float64)[0]) * S))
    for _ in range(4):
        mu = np.linalg.solve(A + np.diag(s2 / v), c)
        var = 1.0 / (np.diag(A) / s2 + 1.0 / v)
        rss = np.sum((t - P @ mu) ** 2) + np.sum(np.diag(A) * var)
        s2 = float(np.clip(rss / n, S.min(), S.max()))
    h = c - (A @ mu - np.diag(A) * mu)
    ref_w = logp + (V * h[:, None] - 0.5 * np.diag(A)[:, None] * V**2) / s2
    ref_w = (
        ref_w
        - np.log(np.exp(ref_w - ref_w.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - ref_w.max(-1, keepdims=True)
    )
    # Probabilities, not logits: float32's solve is ill-conditioned for levels with mass ~1e-9.
    np.testing.assert_allclose(q_w.probs, np.exp(ref_w), atol=tol(dtype, x32=1e-2, x64=1e-8))
    # The noise factor is the exact coordinate optimum given q_w.
    qw = np.exp(ref_w)
    m1 = (qw * V).sum(-1)
    vw = (qw * (V - m1[:, None]) ** 2).sum(-1)
    e_rss = t @ t - 2 * m1 @ c + m1 @ A @ m1 + np.diag(A) @ vw
    ref_n = np.asarray(prior_n.log_probs, np.float64)[0] - 0.5 * n * np.log(S) - 0.5 * e_rss / S
    ref_n = ref_n - np.max(ref_n)
    ref_n = ref_n - np.log(np.sum(np.exp(ref_n)))
    np.testing.assert_allclose(q_n.probs[0], np.exp(ref_n), atol=tol(dtype, x32=1e-2, x64=1e-8))


def test_gaussian_start_factor_is_restricted_gaussian_for_a_gaussian_prior():
    # For a discretized Gaussian prior, q_j(v) is N(mu_j, s_j^2) restricted to the grid, with (mu, s) the
    # continuous mean-field optimum at the same noise variance.
    with jax.enable_x64(True):
        Phi, y = _problem(np.float64, n=300, b=8, seed=1)
        stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
        prior_w = kronvi.model.gaussian_prior(8, 1.0, levels=201, width=8.0)  # fine grid: variance ~ 1
        prior_n = kronvi.model.noise_prior(0.05, levels=1)
        q_w, _ = kronvi.fitting.gaussian_start(stats, prior_w, prior_n)
        p = jnp.exp(prior_w.log_probs[0])
        sd = float(jnp.sqrt(jnp.sum(p * prior_w.values[0] ** 2)))
        gq, _, _ = kronvi.gaussian.fit_gaussian_mf(
            stats, prior_scale=sd, noise_variance=0.05, learn_noise=False
        )
        V = np.asarray(prior_w.values)
        ref = -0.5 * ((V - np.asarray(gq.mean)[:, None]) / np.exp(np.asarray(gq.log_std))[:, None]) ** 2
        ref = (
            ref
            - np.log(np.sum(np.exp(ref - ref.max(-1, keepdims=True)), -1, keepdims=True))
            - ref.max(-1, keepdims=True)
        )
        np.testing.assert_allclose(np.exp(q_w.log_probs), np.exp(ref), atol=1e-9)


def test_fit_from_gaussian_start_and_best_of_starts():
    # init="gaussian" is the same as passing gaussian_start's result, and the pipeline keeps the start with
    # the highest final ELBO (neither start wins everywhere: experiments/results/rmse_gap.md).
    from kronvi.pipeline import DirectConfig, Eigen, Features, fit_best_start

    Phi, y = _problem(np.float32, n=3000, b=40, seed=2)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    prior_w = kronvi.model.gaussian_prior(40, 1.0)
    prior_n = kronvi.model.noise_prior(0.01, levels=15, span=10.0)
    fits = {s: kronvi.fitting.fit_regression(stats, prior_w, prior_n, init=s) for s in ("prior", "gaussian")}
    manual = kronvi.fitting.fit_regression(
        stats, prior_w, prior_n, init=kronvi.fitting.gaussian_start(stats, prior_w, prior_n)
    )
    np.testing.assert_array_equal(manual[0].logits, fits["gaussian"][0].logits)
    final = {s: float(f.info.final_elbo) for s, f in fits.items()}
    assert final["prior"] != final["gaussian"]
    best = fit_best_start(stats, prior_w, prior_n, DirectConfig(recipe=Features()), key=jax.random.key(0))
    assert float(best.info.final_elbo) == max(final.values())
    with pytest.raises(ValueError, match="starts"):
        fit_best_start(stats, prior_w, prior_n, DirectConfig(recipe=Eigen(starts=())), key=jax.random.key(0))
    with pytest.raises(TypeError, match="init"):
        kronvi.fitting.fit_regression(stats, prior_w, prior_n, init="gauss")


def test_gaussian_start_checks_its_arguments():
    stats = kronvi.stats.regression_stats(jnp.ones((5, 3)), jnp.arange(5.0))
    with pytest.raises(ValueError, match="prior_w"):
        kronvi.fitting.gaussian_start(
            stats, kronvi.model.gaussian_prior(4, 1.0), kronvi.model.noise_prior(1.0, levels=3)
        )
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_iter"):
            kronvi.fitting.gaussian_start(
                stats,
                kronvi.model.gaussian_prior(3, 1.0),
                kronvi.model.noise_prior(1.0, levels=3),
                max_iter=bad,
            )


def test_best_start_skips_a_non_finite_fit_loudly(monkeypatch):
    import kronvi.pipeline as pipeline

    Phi, y = _problem(np.float32, n=200, b=8, seed=4)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    prior_w, prior_n = kronvi.model.gaussian_prior(8, 1.0), kronvi.model.noise_prior(0.01, levels=5)
    real = pipeline.fit_regression

    def broken(*args, init=None, **kw):
        fit = real(*args, init=init, **kw)
        if init == "gaussian":
            nan = jnp.full_like(fit.info.elbo, jnp.nan)
            fit = fit._replace(info=fit.info._replace(elbo=nan, final_elbo=nan[0]))
        return fit

    monkeypatch.setattr(pipeline, "fit_regression", broken)
    cfg = pipeline.DirectConfig(recipe=pipeline.Features())
    with pytest.warns(UserWarning, match="'gaussian'"):
        best = pipeline.fit_best_start(stats, prior_w, prior_n, cfg, key=jax.random.key(0))
    assert np.isfinite(float(best.info.final_elbo))
    with pytest.warns(UserWarning), pytest.raises(FloatingPointError, match="every start"):
        pipeline.fit_best_start(
            stats,
            prior_w,
            prior_n,
            cfg._replace(recipe=pipeline.Features(starts=("gaussian",))),
            key=jax.random.key(0),
        )
