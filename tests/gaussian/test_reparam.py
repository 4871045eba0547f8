"""REPARAM against the exact optimum; init / step / driver; one compile per optimizer configuration."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import count_compiles, gaussian_problem

import kronvi


def test_reparam_converges_near_the_exact_optimum():
    stats, Phi, y = gaussian_problem(np.float32, n=400, b=3, noise=0.5, seed=4)
    q_ex, s2_ex, _ = kronvi.gaussian.fit_gaussian_mf(stats, prior_scale=1.0, noise_variance=1.0)
    e_ex = float(kronvi.gaussian.gaussian_mf_elbo(stats, q_ex, s2_ex, prior_scale=1.0))
    q0 = kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.full(3, -2.0))
    opt = optax.adam(optax.exponential_decay(0.03, 3000, 0.05))
    q, s2, info = kronvi.gaussian.fit_gaussian_reparam(
        jax.random.key(0), Phi, y, init=(q0, 1.0), prior_scale=1.0, optimizer=opt, num_steps=3000,
        batch_size=100, num_samples=10,
    )  # fmt: skip
    assert info.elbo.shape == (3001,) and info.steps.elbo.shape == (3000,) and info.optimizer == "sgd"
    np.testing.assert_allclose(np.asarray(q.mean), np.asarray(q_ex.mean), atol=0.03)
    np.testing.assert_allclose(np.asarray(q.log_std), np.asarray(q_ex.log_std), atol=0.25)
    assert float(s2) == pytest.approx(float(s2_ex), rel=0.15)
    e = float(kronvi.gaussian.gaussian_mf_elbo(stats, q, s2, prior_scale=1.0))
    assert e_ex - 2.0 < e <= e_ex + 1e-3


def test_reparam_with_feature_map_equals_precomputed_features():
    X = jax.random.normal(jax.random.key(0), (300, 2))
    params = kronvi.inputs.rff_init(jax.random.key(1), jnp.ones(2), 8)
    Phi = kronvi.inputs.rff_features(params, X)
    y = jnp.sin(X[:, 0])
    q0 = kronvi.gaussian.GaussianMeanField(jnp.zeros(16), jnp.full(16, -2.0))
    kw = dict(init=(q0, 0.5), prior_scale=1.0, optimizer=optax.adam(0.01), num_steps=50)
    a = kronvi.gaussian.fit_gaussian_reparam(jax.random.key(2), Phi, y, **kw)
    b = kronvi.gaussian.fit_gaussian_reparam(
        jax.random.key(2), X, y, feature_map=jax.tree_util.Partial(kronvi.inputs.rff_features, params), **kw
    )
    np.testing.assert_allclose(np.asarray(a[0].mean), np.asarray(b[0].mean), atol=1e-5)


def test_reparam_step_and_bounded_noise():
    stats, Phi, y = gaussian_problem(np.float32, n=100, b=3)
    q0 = kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3))
    opt = optax.adam(0.1)
    state = kronvi.gaussian.gaussian_reparam_init(q0, 1.0, optimizer=opt, noise_bounds=(0.5, 2.0))
    assert float(kronvi.gaussian.reparam_noise_variance(state, noise_bounds=(0.5, 2.0))) == pytest.approx(
        1.0, rel=1e-4
    )
    for i in range(200):
        state, info = kronvi.gaussian.gaussian_reparam_step(
            jax.random.key(i), Phi[:50], y[:50], state, num_data=100, prior_scale=1.0, optimizer=opt,
            noise_bounds=(0.5, 2.0),
        )  # fmt: skip
    s2 = float(kronvi.gaussian.reparam_noise_variance(state, noise_bounds=(0.5, 2.0)))
    assert 0.5 <= s2 <= 2.0 and s2 < 0.6  # the data want ~0.09: pushed to the lower bound
    assert np.isfinite(float(info.elbo))


def test_fresh_equal_optimizers_share_one_compile():
    """A second fresh ``optax.adam(1e-2)`` (a new closure, equal configuration) reuses the compiled driver
    and step; another learning rate compiles its own."""
    _, Phi, y = gaussian_problem(np.float32, n=50, b=3)
    Phi, y = jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32)
    q0 = kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3))

    def fit(optimizer):
        return kronvi.gaussian.fit_gaussian_reparam(
            jax.random.key(0), Phi, y, init=(q0, 1.0), prior_scale=1.0, optimizer=optimizer, num_steps=3,
            batch_size=10,
        )  # fmt: skip

    def step(optimizer):
        state = kronvi.gaussian.gaussian_reparam_init(q0, 1.0, optimizer=optimizer)
        return kronvi.gaussian.gaussian_reparam_step(
            jax.random.key(1), Phi[:10], y[:10], state, num_data=50, prior_scale=1.0, optimizer=optimizer
        )

    first_fit, first_step = fit(optax.adam(1e-2)), step(optax.adam(1e-2))
    with count_compiles() as compiles:
        again_fit, again_step = fit(optax.adam(1e-2)), step(optax.adam(1e-2))
    assert len(compiles) == 0
    np.testing.assert_array_equal(again_fit[0].mean, first_fit[0].mean)
    np.testing.assert_array_equal(again_step[0].q.mean, first_step[0].q.mean)
    with count_compiles() as compiles:
        fit(optax.adam(2e-2))
    assert len(compiles) >= 1
