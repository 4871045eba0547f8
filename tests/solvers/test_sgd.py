"""The one SGD driver: reaches a quadratic's optimum, its keys, trace, projection and progress reports."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from kronvi._base.progress import progress_scope
from kronvi._solvers.sgd import SGDInfo, run_sgd, sgd_step

TARGET = (jnp.array([1.0, -2.0, 0.5]), jnp.array(3.0))


def quadratic(key, params):
    """A noiseless quadratic with its optimum at `TARGET` (the key is unused)."""
    loss = sum(0.5 * jnp.sum((p - t) ** 2) for p, t in zip(params, TARGET, strict=True))
    return loss, {"elbo": -loss}


class KeyInfo(NamedTuple):
    elbo: jax.Array
    draw: jax.Array
    grad_norm: jax.Array


def keyed(key, params):
    loss, _ = quadratic(key, params)
    return loss, {"elbo": -loss, "draw": jax.random.uniform(key)}


def start(dtype):
    return jnp.zeros(3, dtype), jnp.zeros((), dtype)


@pytest.mark.parametrize("make", [lambda: optax.sgd(0.5), lambda: optax.adam(0.1)], ids=["sgd", "adam"])
def test_minimizes_a_quadratic_to_its_optimum(make, dtype):
    params, _, info = jax.jit(lambda k, p: run_sgd(make(), quadratic, p, k, num_steps=300))(
        jax.random.key(0), start(dtype)
    )
    for p, t in zip(params, TARGET, strict=True):
        assert p.dtype == dtype
        np.testing.assert_allclose(p, t, atol=1e-3)
    assert info.optimizer == "sgd" and int(info.num_iter) == 300 and not bool(info.converged)
    assert info.elbo.shape == (301,) and info.steps.grad_norm.shape == (300,)
    assert float(info.elbo[0]) == pytest.approx(-0.5 * (1 + 4 + 0.25 + 9))
    assert float(info.final_elbo) == float(info.elbo[-1]) and float(info.final_elbo) > -1e-5


def test_step_i_gets_split_key_i_and_the_final_estimate_the_fold_in():
    key, num_steps = jax.random.key(7), 5
    _, _, info = run_sgd(optax.sgd(0.1), keyed, start(jnp.float32), key, num_steps=num_steps, info=KeyInfo)
    want = jax.vmap(jax.random.uniform)(jax.random.split(key, num_steps))
    np.testing.assert_array_equal(info.steps.draw, want)
    assert isinstance(info.steps, KeyInfo)
    # each entry is the estimate at the parameters before its step, the last one at the returned ones
    params = start(jnp.float32)
    for i in range(num_steps):
        assert float(info.elbo[i]) == pytest.approx(float(quadratic(None, params)[1]["elbo"]), rel=1e-6)
        params = jax.tree.map(lambda p, t: p - 0.1 * (p - t), params, TARGET)
    assert float(info.elbo[-1]) == pytest.approx(float(quadratic(None, params)[1]["elbo"]), rel=1e-6)


def test_one_step_is_one_optax_update_then_the_projection():
    opt = optax.adam(0.1)
    p0 = start(jnp.float32)
    loss, grads = jax.value_and_grad(lambda p: quadratic(None, p)[0])(p0)
    updates, want_state = opt.update(grads, opt.init(p0), p0)
    want = optax.apply_updates(p0, updates)
    params, opt_state, info = sgd_step(opt, quadratic, jax.random.key(0), p0, opt.init(p0))
    jax.tree.map(np.testing.assert_array_equal, (params, opt_state), (want, want_state))
    assert isinstance(info, SGDInfo) and float(info.elbo) == -float(loss)
    assert float(info.grad_norm) == pytest.approx(float(optax.tree.norm(grads)))
    projected, _, _ = sgd_step(
        opt, quadratic, jax.random.key(0), p0, opt.init(p0), project=lambda p: (p[0], jnp.zeros_like(p[1]))
    )
    np.testing.assert_array_equal(projected[0], want[0])
    assert float(projected[1]) == 0.0


def test_a_given_optimizer_state_is_continued():
    opt, p0 = optax.adam(0.1), start(jnp.float32)
    first = run_sgd(opt, quadratic, p0, jax.random.key(0), num_steps=4)
    second = run_sgd(opt, quadratic, first.params, jax.random.key(1), num_steps=3, opt_state=first.opt_state)
    whole = run_sgd(opt, quadratic, p0, jax.random.key(0), num_steps=7)  # the key is unused here
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), second.params, whole.params)


def test_progress_reports_every_kth_step_and_the_last_with_the_step_info():
    seen = []
    run = jax.jit(lambda k, p, prog: run_sgd(optax.adam(0.1), quadratic, p, k, num_steps=11, progress=prog))
    with progress_scope(lambda s, t, m: seen.append((s, t, m)), total=11, every=4) as prog:
        _, _, info = run(jax.random.key(0), start(jnp.float32), prog)
    assert [(s, t) for s, t, _ in seen] == [(4, 11), (8, 11), (11, 11)]
    for s, _, m in seen:
        assert set(m) == {"elbo", "grad_norm"}
        assert m["elbo"] == pytest.approx(float(info.steps.elbo[s - 1]), rel=1e-6)
    assert "callback" not in str(jax.make_jaxpr(run)(jax.random.key(0), start(jnp.float32), None))
