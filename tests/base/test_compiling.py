"""Per-program XLA options (`kronvi._base.compiling`): the installed XLA accepts them, they change how a
program is compiled and not what it computes, and they stay off nested programs (JAX allows compiler
options on top-level `jit` only)."""

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi._base.compiling import lean_jit, quick_jit


def _program(x, w):
    return jnp.sum(jnp.cos(x @ w) ** 2, axis=1) + jnp.log1p(jnp.abs(x[:, 0]))


def test_quick_and_lean_programs_compile_and_compute_what_jit_does():
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(64, 5)).astype(np.float32), rng.normal(size=(5, 7)).astype(np.float32)
    plain = jax.jit(_program)(x, w)
    for decorate in (quick_jit, lean_jit, quick_jit(static_argnums=()), lean_jit(static_argnums=())):
        np.testing.assert_allclose(decorate(_program)(x, w), plain, rtol=1e-6)
    with jax.enable_x64(True):
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        np.testing.assert_allclose(quick_jit(_program)(x64, w64), jax.jit(_program)(x64, w64), rtol=1e-13)


def test_the_density_inside_jit_takes_the_plain_kernel():
    """The exact density on concrete rows runs the kernel compiled with the older emitters; inside a `jit`
    (traced rows) the plain one, nested in the caller's program: both give the same values to rounding."""
    rng = np.random.default_rng(1)
    b, m = 6, 5
    values = jnp.asarray(np.sort(rng.normal(size=(b, m)), axis=1), jnp.float32)
    prior_w = kronvi.model.DiscretePrior(values, jnp.zeros((b, m), jnp.float32))
    q_w = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, m)), jnp.float32))
    svals = jnp.asarray([[0.2, 0.5, 1.0]], jnp.float32)
    prior_n = kronvi.model.DiscretePrior(svals, jnp.zeros((1, 3), jnp.float32))
    q_n = kronvi.model.MeanField(jnp.zeros((1, 3), jnp.float32))
    Phi = jnp.asarray(rng.normal(size=(9, b)), jnp.float32)
    y = jnp.asarray(rng.normal(size=9), jnp.float32)
    concrete, _ = kronvi.model.predictive_log_density(q_w, q_n, prior_w, prior_n, Phi, y, rtol=None)
    traced, _ = jax.jit(
        lambda P, t: kronvi.model.predictive_log_density(q_w, q_n, prior_w, prior_n, P, t, rtol=None)
    )(Phi, y)
    np.testing.assert_allclose(traced, concrete, rtol=1e-5, atol=1e-5)
