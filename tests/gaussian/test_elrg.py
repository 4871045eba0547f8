"""ELRG (low-rank plus diagonal Gaussian) and the Gaussian KL against dense float64 formulas; the exact fit
against the exact posterior and the mean-field optimum; the local-reparameterization gradient against the
exact one; gradients against finite differences; bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import gaussian_problem, tol
from jax.test_util import check_grads

import kronvi


def _random_elrg(rng, b, rank, dtype, *, constant=False):
    log_diag = rng.normal(scale=0.5) if constant else rng.normal(scale=0.5, size=b)
    return kronvi.gaussian.ELRG(
        jnp.asarray(rng.normal(size=b), dtype),
        jnp.asarray(log_diag, dtype),
        jnp.asarray(rng.normal(scale=0.7, size=(b, rank)), dtype),
    )


def _dense(q):
    """``(mean, cov)`` of an ELRG as float64 NumPy arrays, built without kronvi."""
    d = np.broadcast_to(np.exp(np.asarray(q.log_diag, np.float64)), q.mean.shape)
    V = np.asarray(q.factors, np.float64)
    return np.asarray(q.mean, np.float64), np.diag(d) + V @ V.T


def _dense_kl(m0, S0, m1, S1):
    """KL(N(m0, S0) || N(m1, S1)) by explicit inverse and slogdet, float64."""
    k = len(m0)
    S1inv = np.linalg.inv(S1)
    diff = m1 - m0
    return 0.5 * (
        np.trace(S1inv @ S0) + diff @ S1inv @ diff - k + np.linalg.slogdet(S1)[1] - np.linalg.slogdet(S0)[1]
    )


def _exact_posterior64(Phi, y, sw, s2):
    A = Phi.T @ Phi / s2 + np.eye(Phi.shape[1]) / sw**2
    cov = np.linalg.inv(A)
    return cov @ Phi.T @ y / s2, cov


# ----------------------------------------------------------------------------------------------------
# Formulas


@pytest.mark.parametrize(
    ("rank", "constant", "per_weight"), [(0, False, False), (1, False, True), (3, True, False)]
)
def test_elrg_kl_matches_the_dense_formula(dtype, rank, constant, per_weight):
    rng = np.random.default_rng(rank)
    b = 6
    q = _random_elrg(rng, b, rank, dtype, constant=constant)
    sw = np.linspace(0.5, 2.0, b) if per_weight else 1.7
    got = kronvi.gaussian.elrg_kl(q, jnp.asarray(sw, dtype))
    m, S = _dense(q)
    want = _dense_kl(m, S, np.zeros(b), np.diag(np.broadcast_to(np.asarray(sw, float) ** 2, (b,))))
    assert got.dtype == dtype
    assert float(got) == pytest.approx(want, rel=20 * tol(dtype), abs=20 * tol(dtype))


def test_gaussian_kl_matches_the_dense_formula(dtype):
    rng = np.random.default_rng(1)
    k = 7
    A, B = rng.normal(size=(k, k)), rng.normal(size=(k, k))
    S0, S1 = A @ A.T + 0.5 * np.eye(k), B @ B.T + 0.5 * np.eye(k)
    m0, m1 = rng.normal(size=k), rng.normal(size=k)
    got = kronvi.gaussian.gaussian_kl(*(jnp.asarray(a, dtype) for a in (m0, S0, m1, S1)))
    assert got.dtype == dtype
    assert float(got) == pytest.approx(_dense_kl(m0, S0, m1, S1), rel=100 * tol(dtype))
    same = kronvi.gaussian.gaussian_kl(
        jnp.asarray(m0, dtype), jnp.asarray(S0, dtype), jnp.asarray(m0, dtype), jnp.asarray(S0, dtype)
    )
    assert abs(float(same)) < 1e3 * tol(dtype)


def test_elbo_and_prediction_match_dense_data_and_the_kl_to_the_exact_posterior(dtype):
    stats, Phi, y = gaussian_problem(dtype, n=40, b=5, seed=2)
    rng = np.random.default_rng(2)
    q = _random_elrg(rng, 5, 2, dtype)
    sw, s2 = 1.3, 0.2
    m, S = _dense(q)
    rss = np.sum((y - Phi @ m) ** 2) + np.trace(Phi @ S @ Phi.T)
    want = -0.5 * len(y) * np.log(2 * np.pi * s2) - 0.5 * rss / s2
    want -= _dense_kl(m, S, np.zeros(5), sw**2 * np.eye(5))
    got = kronvi.gaussian.elrg_elbo(stats, q, s2, prior_scale=sw)
    assert got.dtype == dtype
    assert float(got) == pytest.approx(want, rel=50 * tol(dtype))
    # log p(y) - ELBO = KL(q || exact posterior) (float64 only: a difference of large numbers)
    if dtype == np.float64:
        mp, Sp = _exact_posterior64(Phi, y, sw, s2)
        gap = float(kronvi.gaussian.blr_log_evidence(stats, sw, s2) - got)
        assert gap == pytest.approx(_dense_kl(m, S, mp, Sp), rel=1e-8)
    Pn = rng.normal(size=(3, 5))
    mean, var = kronvi.gaussian.predict_elrg(q, s2, jnp.asarray(Pn, dtype))
    np.testing.assert_allclose(mean, Pn @ m, rtol=50 * tol(dtype), atol=50 * tol(dtype))
    np.testing.assert_allclose(var, np.einsum("ij,jk,ik->i", Pn, S, Pn) + s2, rtol=50 * tol(dtype))


def test_blr_posterior_returns_mean_and_cov_of_a_dense_solve(dtype):
    stats, Phi, y = gaussian_problem(dtype, n=30, b=4, seed=3)
    mean, cov = kronvi.gaussian.blr_posterior(stats, 0.8, 0.3)
    A = Phi.T @ Phi / 0.3 + np.eye(4) / 0.64
    np.testing.assert_allclose(
        mean, np.linalg.solve(A, Phi.T @ y / 0.3), rtol=100 * tol(dtype), atol=100 * tol(dtype)
    )
    np.testing.assert_allclose(
        cov, np.linalg.solve(A, np.eye(4)), rtol=100 * tol(dtype), atol=100 * tol(dtype)
    )


def test_gradients_match_finite_differences():
    with jax.enable_x64(True):
        rng = np.random.default_rng(4)
        stats, _, _ = gaussian_problem(np.float64, n=30, b=4, seed=4)
        q = _random_elrg(rng, 4, 2, np.float64)
        Phi_b, y_b = jnp.asarray(rng.normal(size=(5, 4))), jnp.asarray(rng.normal(size=5))

        def objectives(m, ld, V):  # KL, exact ELBO and a minibatch estimate at a fixed key, in one check
            q = kronvi.gaussian.ELRG(m, ld, V)
            kl = kronvi.gaussian.elrg_kl(q, 1.3)
            elbo = kronvi.gaussian.elrg_elbo(stats, q, 0.4, prior_scale=1.3)
            est = kronvi.gaussian.elrg_minibatch_elbo(
                jax.random.key(0), Phi_b, y_b, q, 0.4, num_data=30, prior_scale=1.3
            )
            return jnp.stack([kl, elbo, est])

        check_grads(jax.jit(objectives), (q.mean, q.log_diag, q.factors), order=1, modes=["rev"], eps=1e-5)
        A = rng.normal(size=(3, 3))
        S = jnp.asarray(A @ A.T + np.eye(3))
        check_grads(
            lambda m, C: kronvi.gaussian.gaussian_kl(m, C @ C.T + jnp.eye(3), jnp.zeros(3), S), (jnp.ones(3), jnp.asarray(A)),
            order=1, modes=["rev"], eps=1e-5,
        )  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Fits


def test_exact_fit_full_rank_reaches_the_exact_posterior_and_rank_zero_the_mean_field_optimum():
    with jax.enable_x64(True):
        b, sw, s2 = 6, 1.0, 0.25
        rng = np.random.default_rng(5)
        Phi = rng.normal(size=(40, b)) @ (np.eye(b) + 0.6 * rng.normal(size=(b, b)))  # correlated posterior
        y = Phi @ rng.normal(size=b) + 0.5 * rng.normal(size=40)
        stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
        mp, Sp = kronvi.gaussian.blr_posterior(stats, sw, s2)

        def kl_to_exact(q):
            return float(kronvi.gaussian.gaussian_kl(q.mean, q.covariance(), mp, Sp))

        q_full, info = kronvi.gaussian.fit_elrg(jax.random.key(0), stats, sw, s2, rank=b, max_iter=2000)
        assert q_full.factors.shape == (b, b) and q_full.mean.dtype == jnp.float64
        assert kl_to_exact(q_full) < 1e-3
        steps = np.asarray(info.iterate_elbo)  # each iterate's ELBO (`elbo` holds the best so far)
        assert np.all(np.diff(steps) >= -1e-9 * np.abs(steps[1:]))

        # rank 0 from the prior (no help from the default start) reaches the closed-form mean-field optimum
        q_mf, _, _ = kronvi.gaussian.fit_gaussian_mf(
            stats, prior_scale=sw, noise_variance=s2, learn_noise=False
        )
        kl_mf = float(kronvi.gaussian.gaussian_kl(q_mf.mean, jnp.diag(jnp.exp(2 * q_mf.log_std)), mp, Sp))
        prior = kronvi.gaussian.ELRG(jnp.zeros(b), jnp.zeros(b), jnp.zeros((b, 0)))
        q0, _ = kronvi.gaussian.fit_elrg(jax.random.key(1), stats, sw, s2, rank=0, init=prior, max_iter=2000)
        assert kl_mf > 0.1  # the problem is correlated enough for the families to differ
        assert kl_to_exact(q0) == pytest.approx(kl_mf, abs=1e-6)
        np.testing.assert_allclose(q0.mean, q_mf.mean, atol=1e-5)

        # a constant diagonal, learned (a scalar) or fixed (it stays exactly where it is put); float32 fits
        # (the default) are the docstring example of fit_elrg
        qc, _ = kronvi.gaussian.fit_elrg(jax.random.key(2), stats, sw, s2, rank=2, diagonal="constant")
        qf, _ = kronvi.gaussian.fit_elrg(
            jax.random.key(2), stats, sw, s2, rank=2, diagonal="constant", diag_variance=0.01
        )
        assert qc.log_diag.shape == () and float(qf.log_diag) == float(jnp.log(0.01))
        assert kl_to_exact(q_full) < kl_to_exact(qc) <= kl_to_exact(qf) + 1e-6


def test_local_reparameterization_gradient_is_unbiased():
    """The mean of many minibatch gradients (rows drawn uniformly with replacement, fresh draws) equals
    the exact ELBO's gradient within 5 standard errors in every coordinate; the same test rejects an
    estimate whose likelihood is scaled by 1.1 instead of n / B (a 10% bias)."""
    with jax.enable_x64(True):
        n, b, r, B, K = 30, 4, 2, 6, 4000
        stats, Phi, y = gaussian_problem(np.float64, n=n, b=b, seed=7)
        Phi, y = jnp.asarray(Phi), jnp.asarray(y)
        q = _random_elrg(np.random.default_rng(7), b, r, np.float64)
        s2, sw = 0.3, 1.2
        exact = jax.grad(lambda q: kronvi.gaussian.elrg_elbo(stats, q, s2, prior_scale=sw))(q)
        exact = np.concatenate([np.ravel(a) for a in exact])

        @jax.jit
        def gradients(keys, num_data):
            def one(key):
                k_idx, k_draw = jax.random.split(key)
                idx = jax.random.randint(k_idx, (B,), 0, n)
                g = jax.grad(
                    lambda q: kronvi.gaussian.elrg_minibatch_elbo(
                        k_draw, Phi[idx], y[idx], q, s2, num_data=num_data, prior_scale=sw
                    )
                )(q)
                return jnp.concatenate([jnp.ravel(a) for a in g])

            return jax.vmap(one)(keys)

        def max_z(num_data):
            draws = np.asarray(
                gradients(jax.random.split(jax.random.key(8), K), jnp.asarray(num_data, jnp.float64))
            )
            se = draws.std(axis=0, ddof=1) / np.sqrt(K)
            return np.max(np.abs(draws.mean(axis=0) - exact) / se)

        assert max_z(n) < 5.0
        assert max_z(1.1 * n) > 5.0


def test_local_reparameterization_fit_approaches_the_exact_posterior():
    with jax.enable_x64(True):
        stats, Phi, y = gaussian_problem(np.float64, n=300, b=3, seed=9, noise=0.5)
        mp, Sp = kronvi.gaussian.blr_posterior(stats, 1.0, 0.25)
        q, info = kronvi.gaussian.fit_elrg(
            jax.random.key(0), None, 1.0, 0.25, rank=1, objective="local-reparam", data=(Phi, y),
            optimizer=optax.adam(optax.cosine_decay_schedule(0.05, 800)), num_steps=800, batch_size=50,
            num_samples=4,
        )  # fmt: skip
        assert info.elbo.shape == (801,) and info.steps.grad_norm.shape == (800,) and info.optimizer == "sgd"
        kl = float(kronvi.gaussian.gaussian_kl(q.mean, q.covariance(), mp, Sp))
        prior = kronvi.gaussian.ELRG(jnp.zeros(3), jnp.zeros(3), jnp.zeros((3, 1)))
        assert kl < 0.1 and 100 * kl < float(
            kronvi.gaussian.gaussian_kl(prior.mean, prior.covariance(), mp, Sp)
        )


# ----------------------------------------------------------------------------------------------------
# Bad inputs


def test_bad_inputs_name_the_argument():
    stats, Phi, y = gaussian_problem(np.float32, n=20, b=3)
    ok = dict(mean=jnp.zeros(3), log_diag=jnp.zeros(3), factors=jnp.zeros((3, 1)))
    with pytest.raises(ValueError, match="log_diag"):
        kronvi.gaussian.ELRG(**{**ok, "log_diag": jnp.zeros(2)})
    with pytest.raises(ValueError, match="factors"):
        kronvi.gaussian.ELRG(**{**ok, "factors": jnp.zeros((2, 1))})
    with pytest.raises(ValueError, match="mean"):
        kronvi.gaussian.ELRG(**{**ok, "mean": jnp.array([0.0, jnp.nan, 0.0])})
    q = kronvi.gaussian.ELRG(**ok)
    with pytest.raises(ValueError, match="prior_scale"):
        kronvi.gaussian.elrg_kl(q, -1.0)
    with pytest.raises(TypeError, match="`q` must be an ELRG"):
        kronvi.gaussian.elrg_kl(kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3)), 1.0)
    with pytest.raises(ValueError, match="noise_variance"):
        kronvi.gaussian.elrg_elbo(stats, q, 0.0, prior_scale=1.0)
    with pytest.raises(ValueError, match="features"):
        kronvi.gaussian.predict_elrg(q, 1.0, jnp.zeros((2, 4)))
    key = jax.random.key(0)
    for kwargs, match in [
        (dict(rank=4), "rank"), (dict(rank=-1), "rank"), (dict(rank=1.0), "rank"),
        (dict(rank=1, objective="svi"), "objective"), (dict(rank=1, diagonal="iso"), "diagonal"),
        (dict(rank=1, diag_variance=0.1), "diag_variance"),
        (dict(rank=1, diagonal="constant", diag_variance=-0.1), "diag_variance"),
        (dict(rank=2, init=q), "init"), (dict(rank=1, diagonal="constant", init=q), "init.log_diag"),
        (dict(rank=1, max_iter=0), "max_iter"),
        (dict(rank=1, objective="local-reparam"), "data"),
        (dict(rank=1, objective="local-reparam", data=(Phi, y)), "optimizer"),
        (dict(rank=1, objective="local-reparam", data=(Phi, y), optimizer=optax.adam(0.1)), "num_steps"),
        (dict(rank=1, objective="local-reparam", data=(Phi[:, :2], y), optimizer=optax.adam(0.1), num_steps=2), "features"),
        (dict(rank=1, objective="local-reparam", data=(Phi, y[:5]), optimizer=optax.adam(0.1), num_steps=2), "rows"),
    ]:  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=match):
            kronvi.gaussian.fit_elrg(key, stats, 1.0, 0.1, **kwargs)
    with pytest.raises(ValueError, match="stats"):
        kronvi.gaussian.fit_elrg(key, None, 1.0, 0.1, rank=1)
    with pytest.raises(ValueError, match="q_cov"):
        kronvi.gaussian.gaussian_kl(jnp.zeros(3), jnp.eye(2), jnp.zeros(3), jnp.eye(3))
    with pytest.raises(ValueError, match="p_mean"):
        kronvi.gaussian.gaussian_kl(jnp.zeros(3), jnp.eye(3), jnp.zeros(2), jnp.eye(2))
    with pytest.raises(ValueError, match="p_cov"):
        kronvi.gaussian.gaussian_kl(
            jnp.zeros(2), jnp.eye(2), jnp.zeros(2), jnp.array([[1.0, jnp.inf], [0.0, 1.0]])
        )
