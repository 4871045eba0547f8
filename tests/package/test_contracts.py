"""Public functions survive jit (without retracing), vmap over stacked folds and grad, keeping dtype."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


def _fold(seed, dtype, b=5, n=30):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b))
    y = Phi @ rng.normal(size=b) + 0.3 * rng.normal(size=n)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi, dtype), jnp.asarray(y, dtype))
    pw = kronvi.model.gaussian_prior(b, 1.0 + seed, levels=7, dtype=dtype)
    pn = kronvi.model.noise_prior(0.1 * (1 + seed), levels=5, dtype=dtype)
    q = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, 7)), dtype))
    qn = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(1, 5)), dtype))
    return stats, pw, pn, q, qn, jnp.asarray(rng.normal(size=(4, b)), dtype)


def _stack(*trees):
    return jax.tree.map(lambda *x: jnp.stack(x), *trees)


FUNCTIONS = {
    "elbo": lambda st, pw, pn, q, qn, P: kronvi.model.regression_elbo(st, q, qn, pw, pn),
    "predict": lambda st, pw, pn, q, qn, P: kronvi.model.predict_regression(q, qn, pw, pn, P),
    "sparsity": lambda st, pw, pn, q, qn, P: kronvi.model.expected_sparsity(q, pw),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_jit_without_retracing_and_dtype(dtype, name):
    fn = FUNCTIONS[name]
    traces = []

    @jax.jit
    def f(*args):
        traces.append(1)
        return fn(*args)

    out0 = f(*_fold(0, dtype))
    out1 = f(*_fold(1, dtype))
    assert len(traces) == 1
    for leaf in jax.tree.leaves((out0, out1)):
        assert leaf.dtype == jnp.dtype(dtype)
    eager = fn(*_fold(1, dtype))
    for a, b in zip(jax.tree.leaves(out1), jax.tree.leaves(eager), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vmap_over_stacked_folds(name):
    fn = FUNCTIONS[name]
    folds = [_fold(k, np.float32) for k in range(3)]
    batched = jax.vmap(fn)(*_stack(*folds))
    for k in range(3):
        for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(fn(*folds[k])), strict=True):
            np.testing.assert_allclose(a[k], b, rtol=1e-5, atol=1e-5)


def test_grad_of_prediction_and_elbo_through_the_prior_scale():
    # Gradients flow into grid values (e.g. to tune the prior scale), not only the logits.
    st, pw, pn, q, qn, P = _fold(0, np.float32)

    def loss(scale):
        pw2 = pw._replace(values=pw.values * scale)
        mean, var = kronvi.model.predict_regression(q, qn, pw2, pn, P)
        return kronvi.model.regression_elbo(st, q, qn, pw2, pn) + jnp.sum(mean) + jnp.sum(var)

    g = jax.grad(loss)(jnp.float32(1.0))
    eps = 1e-2
    fd = (loss(jnp.float32(1 + eps)) - loss(jnp.float32(1 - eps))) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=2e-2)
