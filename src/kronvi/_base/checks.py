"""Input validation shared by every public function.

Shape and dtype checks are static, so they run under `jit` and `vmap` too. Value checks (NaN/inf,
positivity) need concrete arrays: they run when the caller passes concrete arrays (the usual case: the
public entry points are called eagerly on user data) and are skipped for tracers, where the check would
otherwise force a host sync inside a compiled program.

Value checks never copy the data to the host. Data already in host memory (NumPy arrays, JAX arrays on
a single CPU device, read through a zero-copy view) is checked by NumPy, which needs no compilation;
data on an accelerator (or sharded over devices) by one compiled reduction on its device, of which only
the result (a scalar, or a count on the error path) is fetched, explicitly with `fetch`, so the
checks pass under `jax.transfer_guard_device_to_host("disallow")`.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


def is_concrete(x: Any) -> bool:
    """True when `x` holds values (not a tracer inside `jit`/`vmap`/`grad`)."""
    return not isinstance(x, jax.core.Tracer)


def check_numeric(x: Any, name: str) -> np.dtype:
    """`ValueError` naming `name` unless `x` holds real numbers (bool, integer or float dtype): strings,
    objects and complex numbers are refused before JAX or NumPy sees them. Returns `x`'s dtype."""
    if x is None:
        raise ValueError(f"`{name}` must be an array of numbers, got None")
    dtype = getattr(x, "dtype", None)
    if not isinstance(dtype, np.dtype):
        try:
            dtype = np.asarray(x).dtype
        except (ValueError, TypeError) as e:  # ragged nesting
            raise ValueError(f"`{name}` must be a rectangular array of numbers ({e})") from None
    if dtype.kind not in "biuf":
        raise ValueError(f"`{name}` must hold real numbers, got dtype {dtype}")
    return dtype


def check_fit_dtype(x: Any, name: str) -> None:
    """`TypeError` naming `name` unless `x` is float32 or float64 (the precisions fits run in)."""
    dtype = jnp.dtype(x.dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise TypeError(
            f"`{name}` is {dtype}: fits run in float32 or float64 (cast it with `.astype(jnp.float32)`)"
        )


def as_float_array(x: ArrayLike, name: str) -> jax.Array:
    """Converts `x` to a floating JAX array, keeping float32/float64 and promoting ints and bools;
    `ValueError` naming `name` for strings, objects and complex numbers."""
    check_numeric(x, name)
    # a NumPy array by `device_put`, which compiles nothing (`jnp.asarray` compiles a copy per shape)
    arr = jax.device_put(x) if isinstance(x, np.ndarray) else jnp.asarray(x)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    return arr


def check_ndim(x: Any, ndim: int, name: str, what: str = "") -> None:
    if x.ndim != ndim:
        extra = f" ({what})" if what else ""
        raise ValueError(f"`{name}` must be {ndim}-D{extra}, got shape {tuple(x.shape)}")


def fetch(x):
    """A small validation result (a scalar or a few counts) on the host, copied explicitly
    (`jax.device_get`): allowed under `jax.transfer_guard_device_to_host("disallow")`, which forbids
    only implicit copies such as `np.asarray` or `bool` of a device array."""
    return jax.device_get(x)


def reduce_on_device(fn, *arrays):
    """`fetch(fn(*arrays))` for concrete `arrays`, evaluated now even while the caller traces a `jit`
    (closed-over data is concrete there, but operations on it would be staged into the trace)."""
    with jax.ensure_compile_time_eval():
        return fetch(fn(*arrays))


def host_view(x):
    """`x` as a NumPy array when its data already lives in host memory: a NumPy array, or a JAX array on
    one CPU device (a zero-copy view); `None` for data on an accelerator or sharded over devices."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, jax.Array) and len(x.devices()) == 1 and next(iter(x.devices())).platform == "cpu":
        return np.asarray(x)
    return None


def reduce_concrete(host_fn, device_fn, x):
    """A small reduction of the concrete array `x`, computed where its data live: `host_fn` of its NumPy
    view when it is in host memory (no program to compile for its shape), else
    `reduce_on_device(device_fn, x)` (only the result is fetched)."""
    h = host_view(x)
    return host_fn(h) if h is not None else reduce_on_device(device_fn, x)


def host_arrays(*arrays):
    """NumPy views of `arrays` when every one is concrete and already in host memory (see `host_view`),
    else `None`: the test for running work in the host's BLAS and LAPACK instead of XLA."""
    if jax.default_backend() != "cpu" or not all(is_concrete(a) for a in arrays):
        return None
    views = tuple(host_view(a) for a in arrays)
    return None if any(v is None for v in views) else views


@jax.jit
def _all_finite(x):
    return jnp.all(jnp.isfinite(x))


@jax.jit
def _num_nonfinite(x):
    return jnp.sum(~jnp.isfinite(x))


@jax.jit
def _all_positive(x):
    return jnp.all(x > 0)


def all_finite(x) -> bool:
    """Whether the concrete array `x` holds no NaN or inf, without copying it to the host."""
    return bool(reduce_concrete(lambda h: np.all(np.isfinite(h)), _all_finite, x))


def num_nonfinite(x) -> int:
    """The number of NaN or inf entries of the concrete array `x`, without copying it to the host."""
    return int(reduce_concrete(lambda h: np.sum(~np.isfinite(h)), _num_nonfinite, x))


def _canonical_numpy(x) -> bool:
    """Whether `x` is a NumPy array whose dtype `jnp.asarray` would keep."""
    return isinstance(x, np.ndarray) and jax.dtypes.canonicalize_dtype(x.dtype) == x.dtype


@jax.jit
def _nonfinite_counts(arrays):
    return jnp.stack([jnp.sum(~jnp.isfinite(x)) for x in arrays])


def nonfinite_counts(arrays) -> list[int]:
    """The number of NaN or inf entries of each concrete array, counted where the arrays live (NumPy for
    host data, else one compiled reduction whose counts alone are fetched)."""
    with jax.ensure_compile_time_eval():  # NumPy arrays of a JAX dtype as they are: no copy program
        arrays = [x if _canonical_numpy(x) else jnp.asarray(x) for x in arrays]
    views = [host_view(x) for x in arrays]
    if all(v is not None for v in views):
        return [int(np.sum(~np.isfinite(v))) for v in views]
    return [int(k) for k in reduce_on_device(_nonfinite_counts, arrays)]


def check_finite(x: Any, name: str) -> None:
    """`ValueError` naming `name` when a concrete `x` holds NaN or inf; skipped for tracers."""
    if is_concrete(x) and x.size and not all_finite(x):
        raise ValueError(f"`{name}` contains {num_nonfinite(x)} NaN or infinite value(s)")


def check_finite_arrays(named_arrays: dict[str, Any]) -> None:
    """`check_finite` of every concrete array `{name: array}`, counted in one pass (`nonfinite_counts`);
    the first array holding NaN or inf is named. Tracers are skipped."""
    named = {name: x for name, x in named_arrays.items() if is_concrete(x) and x.size}
    if not named:
        return
    for name, k in zip(named, nonfinite_counts(list(named.values())), strict=True):
        if k:
            raise ValueError(f"`{name}` contains {k} NaN or infinite value(s)")


def as_working_array(x: ArrayLike, name: str, dtype) -> jax.Array:
    """`x` as a JAX array of the floating working `dtype`, refusing what the cast would hide.

    Strings, objects and complex numbers are a `ValueError` naming `name` (a cast would drop the
    imaginary part). For concrete data, NaN or inf in `x` is a `ValueError` counting them, and finite
    values beyond the range of `dtype` (near `1e300` for float32) a `ValueError` naming the dtype, its
    largest value and the largest magnitude in `x`, instead of the infinities the cast makes of them.
    NumPy data is cast by NumPy (no program to compile); tracers are cast without value checks.
    """
    check_numeric(x, name)
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"`dtype` must be a floating dtype, got {dtype}")
    if not is_concrete(x):
        return jnp.asarray(x, dtype)
    src = x if isinstance(x, jax.Array) else np.asarray(x)
    if isinstance(src, np.ndarray):
        with np.errstate(over="ignore", invalid="ignore"):  # beyond the dtype's range: named below
            out = jnp.asarray(src.astype(dtype, copy=False))
    else:
        out = jnp.asarray(src, dtype)
    if out.size and not all_finite(out):
        src_float = jnp.issubdtype(src.dtype, jnp.floating)
        bad_src = num_nonfinite(src) if src_float else 0
        if bad_src:
            raise ValueError(f"`{name}` contains {bad_src} NaN or infinite value(s)")
        largest = float(reduce_concrete(lambda h: np.max(np.abs(h)), lambda a: jnp.max(jnp.abs(a)), src))
        raise ValueError(
            f"`{name}` has {num_nonfinite(out)} finite value(s) beyond the range of {dtype.name} (largest "
            f"magnitude {largest:.4g}; {dtype.name} holds up to {float(jnp.finfo(dtype).max):.4g}): use "
            f"float64 (`dtype=jnp.float64` with `jax_enable_x64`) or rescale `{name}`"
        )
    return out


@contextlib.contextmanager
def errors_name(argument: str, value: Any):
    """Runs the block; a `ValueError` or `FloatingPointError` raised in it (by a helper validating an
    internal argument it was handed, `values`, `center`, `spread`, ...) becomes a `ValueError` that
    names the user's `argument` and its `value` first and keeps the helper's message after it:

    >>> try:
    ...     with errors_name("config.width", 1e300):  # around `gaussian_prior(b, scale, width=config.width)`
    ...         raise ValueError("`values` contains 3 NaN or infinite value(s)")
    ... except ValueError as e:
    ...     print(e)
    `config.width`=1e+300 is out of range for this data: `values` contains 3 NaN or infinite value(s)
    """
    try:
        yield
    except (ValueError, FloatingPointError) as e:
        raise ValueError(f"`{argument}`={value!r} is out of range for this data: {e}") from None


def check_positive(x: Any, name: str) -> None:
    """`ValueError` naming `name` when a concrete `x` has an entry <= 0; skipped for tracers."""
    if not (is_concrete(x) and x.size):
        return
    if not bool(reduce_concrete(lambda h: np.all(h > 0), _all_positive, x)):
        low = reduce_concrete(np.min, jnp.min, x)
        raise ValueError(f"`{name}` must be strictly positive, got min {float(low)}")


def _real_scalar(x: Any) -> float | None:
    """`x` as a float if it is a real Python or NumPy scalar or a concrete 0-d integer or float array (not a
    bool), else `None`."""
    if isinstance(x, bool | np.bool_):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    dtype = getattr(x, "dtype", None)
    if dtype is not None and np.ndim(x) == 0 and np.dtype(dtype).kind in "iuf" and is_concrete(x):
        return float(fetch(x))
    return None


def check_positive_number(x: Any, name: str) -> None:
    """`ValueError` naming `name` unless `x` is a finite real number (Python or NumPy scalar) > 0; bools,
    strings, arrays of one or more dimensions, NaN and infinity are refused (a concrete 0-d array is a scalar)."""
    value = _real_scalar(x)
    if value is None or not 0 < value < math.inf:
        raise ValueError(f"`{name}` must be a finite positive number, got {x!r}")


def check_nonnegative_number(x: Any, name: str) -> None:
    """`ValueError` naming `name` unless `x` is a real number (Python or NumPy scalar) >= 0, infinity
    included; bools, strings, arrays of one or more dimensions and NaN are refused (a concrete 0-d array is a
    scalar)."""
    value = _real_scalar(x)
    if value is None or not value >= 0:
        raise ValueError(f"`{name}` must be a number >= 0, got {x!r}")


def check_nonempty(x: Any, name: str, axis: int = 0) -> None:
    if x.shape[axis] == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(x.shape)})")


def check_int(x, name: str, minimum: int | None = None) -> int:
    """`x` as a Python int; `ValueError` naming `name` for anything else.

    Accepted: Python and NumPy integers and 0-d integer arrays (NumPy or concrete JAX). Refused: bools,
    floats (`2.7`, and `3.0` too, as NumPy's `range`-like arguments do), strings, `None`, tracers, and
    values below `minimum`.
    """
    value = None
    if not isinstance(x, (bool, np.bool_)) and is_concrete(x):
        dtype = getattr(x, "dtype", None)
        if isinstance(x, int) or (dtype is not None and np.ndim(x) == 0 and np.issubdtype(dtype, np.integer)):
            value = operator.index(x)
    if value is None or (minimum is not None and value < minimum):
        at_least = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"`{name}` must be an int{at_least}, got {x!r}")
    return int(value)


def check_input_columns(shape: tuple, d: int, name: str = "X") -> None:
    """`ValueError` naming `name` unless `shape` is `(num_points, d)`: new inputs as the training inputs.
    Static: runs under `jit` and `vmap`."""
    if len(shape) != 2 or shape[1] != d:
        raise ValueError(
            f"`{name}` must have shape (num_points, {d}): {d} columns, as the training inputs; got {tuple(shape)}"
        )


def check_key(key: Any, name: str = "key") -> None:
    """`TypeError` naming `name` unless `key` is a `jax.random` key: typed (`jax.random.key(seed)`) or raw
    (`jax.random.PRNGKey(seed)`, a 1-D uint32 array); `ValueError` for an array of typed keys (one is needed).
    Static: runs under `jit` and `vmap`."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if np.shape(key) != ():
            raise ValueError(f"`{name}` must be a single jax.random key, got shape {np.shape(key)}")
    elif not (dtype == np.uint32 and np.ndim(key) == 1):
        raise TypeError(f"`{name}` must be a jax.random key (jax.random.key(seed)), got {key!r}")


def check_working_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """`dtype` as a NumPy dtype, float32 or float64; `ValueError` naming `name` for any other, and for float64
    without JAX's x64 mode (JAX would silently compute in float32)."""
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise ValueError(f"`{name}` must be float32 or float64, got {dtype!r}") from None
    if dt not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(f"`{name}` must be float32 or float64, got {dt}")
    if dt == jnp.float64 and jax.dtypes.canonicalize_dtype(jnp.float64) != jnp.float64:
        raise ValueError(
            f"`{name}` float64 needs JAX's x64 mode: jax.config.update('jax_enable_x64', True), or call inside "
            "`with jax.enable_x64(True):`"
        )
    return dt


def check_ints(fields: dict[str, tuple[Any, int | None]]) -> None:
    """`check_int(value, name, minimum)` of every `name: (value, minimum)` in `fields`, in order: the
    integer settings of a config checked in one call."""
    for name, (value, minimum) in fields.items():
        check_int(value, name, minimum)


def check_training_rows(X: Any, y: Any, names: tuple[str, str] = ("X", "y")) -> tuple[np.ndarray, np.ndarray]:
    """Concrete training rows as float64 NumPy arrays, checked once: real numbers, `X (n, d)` with
    `n >= 1` and `d >= 1`, `y (n,)`, all finite. Errors name `X` and `y` (or `names`)."""
    nx, ny = names
    check_numeric(X, nx)
    check_numeric(y, ny)
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    check_ndim(X, 2, nx, "num_points, num_inputs")
    check_ndim(y, 1, ny, "num_points,")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"`{nx}` has {X.shape[0]} rows but `{ny}` has {y.shape[0]}")
    check_nonempty(X, nx)
    check_nonempty(X, nx, axis=1)
    check_finite(X, nx)
    check_finite(y, ny)
    return X, y


def check_basis_features(Phi: ArrayLike, b: int, name: str = "Phi", expected: str | None = None) -> jax.Array:
    """`Phi` as a finite float `(num_points, b)` array for a basis (or model) of `b` features; errors name
    `name`, and a wrong width says `expected` (default: "the basis has b")."""
    Phi = as_float_array(Phi, name)
    check_ndim(Phi, 2, name, "(num_points, num_features)")
    if Phi.shape[1] != b:
        raise ValueError(f"`{name}` has {Phi.shape[1]} features but {expected or f'the basis has {b}'}")
    check_finite(Phi, name)
    return Phi


def check_same_dtype(named_arrays: dict):
    """Raises `TypeError` naming the arguments when the arrays `{name: array}` differ in dtype."""
    dtypes = {name: a.dtype for name, a in named_arrays.items()}
    if len(set(dtypes.values())) > 1:
        listing = ", ".join(f"`{name}` {dt}" for name, dt in dtypes.items())
        raise TypeError(
            f"dtypes differ: {listing}; build the priors with `dtype=` the statistics' dtype "
            "(or cast with jax.tree.map(lambda a: a.astype(dtype), ...))"
        )


def check_xy(
    X: ArrayLike, y: ArrayLike, xname: str = "X", yname: str = "y", what: str = "(num_points, num_features)"
) -> tuple[jax.Array, jax.Array]:
    """Float arrays `X (n, d)` and `y (n,)` with matching rows; errors name the arguments."""
    X = as_float_array(X, xname)
    y = as_float_array(y, yname)
    check_ndim(X, 2, xname, what)
    check_ndim(y, 1, yname, f"({what[1:].split(',')[0]},)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"`{xname}` has {X.shape[0]} rows but `{yname}` has {y.shape[0]}")
    return X, y


def check_optimizer(optimizer, name: str = "optimizer"):
    """Checks that `optimizer` is an `optax.GradientTransformation`."""
    import optax

    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"`{name}` must be an optax.GradientTransformation, got {type(optimizer).__name__}")
