"""Per-program XLA options (`kronvi._base.compiling`): the installed XLA accepts them, they change how a
program is compiled and not what it computes, and they stay off nested programs (JAX allows compiler
options on top-level `jit` only)."""

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi._base import compiling
from kronvi._base.compiling import lean_jit, quick_jit
from kronvi._model import density


def _program(x, w):
    return jnp.sum(jnp.cos(x @ w) ** 2, axis=1) + jnp.log1p(jnp.abs(x[:, 0]))


def test_quick_and_lean_programs_compile_and_compute_what_jit_does():
    """On the CPU this XLA takes both option sets (a later XLA that drops one fails here); the twins run
    their tuned program, which computes what `jax.jit` does."""
    if jax.default_backend() == "cpu":
        assert compiling.options_apply(tuple(sorted(compiling.QUICK_COMPILE.items())))
        assert compiling.options_apply(tuple(sorted(compiling.OLDER_EMITTERS.items())))
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
    if jax.default_backend() == "cpu":  # the concrete call ran the tuned twin
        assert density._lean_kernel.tuned._cache_size() >= 1


def test_a_twin_runs_its_plain_program_where_the_options_do_not_apply(monkeypatch):
    """Another backend, an older JAX or an XLA that refuses an option: `options_apply` is False and the twin
    runs `jax.jit`'s program."""

    def program(x, w):  # a function of its own: jax.jit shares its cache among wrappers of one function
        return _program(x, w)

    twin = quick_jit(program)
    x, w = np.ones((4, 5), np.float32), np.ones((5, 3), np.float32)
    monkeypatch.setattr(compiling, "options_apply", lambda options: False)
    np.testing.assert_allclose(twin(x, w), jax.jit(_program)(x, w))
    assert twin.tuned._cache_size() == 0 and twin._cache_size() == 1
