"""Input validation shared by every public function.

Shape and dtype checks are static, so they run under ``jit`` and ``vmap`` too. Value checks (NaN/inf,
positivity) need concrete arrays: they run when the caller passes concrete arrays (the usual case: the
public entry points are called eagerly on user data) and are skipped for tracers, where the check would
otherwise force a host sync inside a compiled program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(x) -> bool:
    """True when ``x`` holds values (not a tracer inside ``jit``/``vmap``/``grad``)."""
    return not isinstance(x, jax.core.Tracer)


def as_float_array(x, name: str):
    """Converts ``x`` to a floating JAX array, keeping float32/float64 and promoting ints."""
    if x is None:
        raise ValueError(f"`{name}` must be an array, got None")
    arr = jnp.asarray(x)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    return arr


def check_ndim(x, ndim: int, name: str, what: str = ""):
    if x.ndim != ndim:
        extra = f" ({what})" if what else ""
        raise ValueError(f"`{name}` must be {ndim}-D{extra}, got shape {tuple(x.shape)}")


def check_finite(x, name: str):
    if is_concrete(x) and x.size and not bool(np.all(np.isfinite(np.asarray(x)))):
        bad = int(np.sum(~np.isfinite(np.asarray(x))))
        raise ValueError(f"`{name}` contains {bad} NaN or infinite value(s)")


def check_positive(x, name: str):
    if is_concrete(x) and x.size and not bool(np.all(np.asarray(x) > 0)):
        raise ValueError(f"`{name}` must be strictly positive, got min {float(np.min(np.asarray(x)))}")


def check_nonempty(x, name: str, axis: int = 0):
    if x.shape[axis] == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(x.shape)})")


def check_int(x, name: str, minimum: int | None = None) -> int:
    """``x`` as a Python int; ``ValueError`` for bools, floats (``2.7`` or ``3.0``) and values below
    ``minimum``."""
    is_int = isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
    if not is_int or (minimum is not None and x < minimum):
        at_least = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"`{name}` must be an int{at_least}, got {x!r}")
    return int(x)


def check_same_dtype(named_arrays: dict):
    """Raises ``TypeError`` naming the arguments when the arrays ``{name: array}`` differ in dtype."""
    dtypes = {name: a.dtype for name, a in named_arrays.items()}
    if len(set(dtypes.values())) > 1:
        listing = ", ".join(f"`{name}` {dt}" for name, dt in dtypes.items())
        raise TypeError(
            f"dtypes differ: {listing}; build the priors with `dtype=` the statistics' dtype "
            "(or cast with jax.tree.map(lambda a: a.astype(dtype), ...))"
        )


def check_xy(X, y, xname: str = "X", yname: str = "y", what: str = "(num_points, num_features)"):
    """Float arrays ``X (n, d)`` and ``y (n,)`` with matching rows; errors name the arguments."""
    X = as_float_array(X, xname)
    y = as_float_array(y, yname)
    check_ndim(X, 2, xname, what)
    check_ndim(y, 1, yname, f"({what[1:].split(',')[0]},)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"`{xname}` has {X.shape[0]} rows but `{yname}` has {y.shape[0]}")
    return X, y


def check_optimizer(optimizer, name: str = "optimizer"):
    """Checks that ``optimizer`` is an ``optax.GradientTransformation``."""
    import optax

    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"`{name}` must be an optax.GradientTransformation, got {type(optimizer).__name__}")
