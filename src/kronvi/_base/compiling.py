"""Per-program XLA options for some of a fit's programs on concrete data.

A first fit's time is mostly XLA compiling its programs. Some of them run for microseconds to milliseconds
(the GP step's L-BFGS, whose likelihood is a host callback; the evidence's Newton steps over `b`
eigenvalues), so LLVM's expensive passes and XLA's newer CPU fusion emitters cost them far more at compile
time than they save at run time; the exact density's kernel runs faster with the older emitters. JAX accepts
compiler options on a top-level `jit` only, so they go on private twins that run only with concrete data
(`docs/decisions/compilation.md#cheaper-compilation-for-the-small-programs`).
"""

from __future__ import annotations

import functools

import jax

# LLVM's cheap passes and the older CPU fusion emitters (the options of `tests/suite_flags.py`)
QUICK_COMPILE = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,
}

# XLA's older CPU fusion emitters alone: the density kernel compiles in about 3/4 of the time and runs
# faster with them (`docs/decisions/compilation.md#cheaper-compilation-for-the-small-programs`)
OLDER_EMITTERS = {"xla_cpu_use_fusion_emitters": False}


def lean_jit(fun=None, **jit_kwargs):
    """`jax.jit(fun, **jit_kwargs)` compiled with `OLDER_EMITTERS`, for the programs that carry the data; as a
    decorator, bare or with `jax.jit`'s keyword arguments."""
    if fun is None:
        return functools.partial(lean_jit, **jit_kwargs)
    return jax.jit(fun, compiler_options=OLDER_EMITTERS, **jit_kwargs)


def quick_jit(fun=None, **jit_kwargs):
    """`jax.jit(fun, **jit_kwargs)` compiled with `QUICK_COMPILE`; as a decorator, bare or with `jax.jit`'s
    keyword arguments (`@quick_jit(static_argnums=2)`)."""
    if fun is None:
        return functools.partial(quick_jit, **jit_kwargs)
    return jax.jit(fun, compiler_options=QUICK_COMPILE, **jit_kwargs)
