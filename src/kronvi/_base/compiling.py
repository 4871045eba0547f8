"""Per-program XLA options for some of a fit's programs on concrete data.

A first fit's time is mostly XLA compiling its programs. Some of them run for microseconds to milliseconds
(the GP step's L-BFGS, whose likelihood is a host callback; the evidence's Newton steps over `b`
eigenvalues), so LLVM's expensive passes and XLA's newer CPU fusion emitters cost them far more at compile
time than they save at run time; the exact density's kernel runs faster with the older emitters. JAX accepts
compiler options on a top-level `jit` only, so they go on private twins that run only with concrete data
(`docs/decisions/compilation.md#cheaper-compilation-for-the-small-programs`). Where the default backend is
not the CPU, or this JAX or XLA refuses the options, a twin runs its plain `jax.jit` program.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import jax

# LLVM's cheap passes and the older CPU fusion emitters (the options of `tests/suite_flags.py`)
QUICK_COMPILE = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,
}

# XLA's older CPU fusion emitters alone: the density kernel compiles in less time and runs faster with them
OLDER_EMITTERS = {"xla_cpu_use_fusion_emitters": False}

_JIT_TAKES_OPTIONS = "compiler_options" in inspect.signature(jax.jit).parameters


def _probe(x):
    return x + 1


@functools.cache
def options_apply(options: tuple) -> bool:
    """Whether programs take `options` (sorted `(name, value)` pairs) here: the default backend is the CPU,
    `jax.jit` has `compiler_options`, and XLA compiles a tiny program with them (once per process)."""
    if not _JIT_TAKES_OPTIONS or jax.default_backend() != "cpu":
        return False
    try:
        jax.jit(_probe, compiler_options=dict(options)).lower(1.0).compile()
    except Exception:  # an option this XLA does not know
        return False
    return True


class _Twin:
    """`fun` jitted with and without XLA options (`tuned`, `plain`); a call runs `tuned` where the options
    apply (`options_apply`). Call it with concrete data only: under a trace, JAX refuses the options."""

    def __init__(self, fun, options: dict, jit_kwargs: dict):
        functools.update_wrapper(self, fun)
        self.options = tuple(sorted(options.items()))
        self.plain: Any = jax.jit(fun, **jit_kwargs)
        self.tuned: Any = jax.jit(fun, compiler_options=options, **jit_kwargs) if _JIT_TAKES_OPTIONS else self.plain

    def __call__(self, *args, **kwargs):
        return (self.tuned if options_apply(self.options) else self.plain)(*args, **kwargs)

    def _cache_size(self) -> int:
        """The programs both twins hold (`jax.jit`'s `_cache_size`)."""
        return self.plain._cache_size() + (self.tuned._cache_size() if self.tuned is not self.plain else 0)


def quick_jit(fun=None, **jit_kwargs):
    """`fun` as a `_Twin` with `QUICK_COMPILE`; as a decorator, bare or with `jax.jit`'s keyword arguments
    (`@quick_jit(static_argnums=2)`)."""
    if fun is None:
        return functools.partial(quick_jit, **jit_kwargs)
    return _Twin(fun, QUICK_COMPILE, jit_kwargs)


def lean_jit(fun=None, **jit_kwargs):
    """`fun` as a `_Twin` with `OLDER_EMITTERS`, for programs that carry the data; as `quick_jit`."""
    if fun is None:
        return functools.partial(lean_jit, **jit_kwargs)
    return _Twin(fun, OLDER_EMITTERS, jit_kwargs)
