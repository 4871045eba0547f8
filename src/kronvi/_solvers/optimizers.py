r"""One compile per optax optimizer *configuration* for the stochastic-gradient drivers.

An `optax.GradientTransformation` is a NamedTuple of closures. Two calls of `optax.adam(1e-2)`
return different closures, which hash and compare by identity, so a driver that takes the optimizer as
a static `jit` argument (or builds a fresh `jax.jit` per call) traces and compiles again for every
new optimizer object. `cache_by_optimizer` instead builds the driver once per configuration, closing
over the optimizer (blackjax's `as_top_level_api`), and keeps the jitted function under
`optimizer_key`: the code of every function in the optimizer and the values it closes over.
"""

from __future__ import annotations

import collections
import functools
import types
from typing import Any

import jax
import numpy as np

_MAX_ARRAY_SIZE = 4096  # closed-over arrays up to this size are keyed by value, larger ones by identity


class _Identity:
    """Key part that compares by identity and keeps its object alive (so its `id` is never reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Identity) and other.obj is self.obj


def optimizer_key(optimizer):
    """A hashable structural key: equal for two optimizers built by the same calls with equal arguments.

    Functions are keyed by their code, globals and defaults and (recursively) by the contents of their
    closure cells; tuples (NamedTuples keep their type), lists, dicts and `functools.partial` by their
    contents; scalars, strings and small concrete arrays by value; anything else by identity.

    Example:
      >>> import optax
      >>> from kronvi._solvers.optimizers import optimizer_key
      >>> optimizer_key(optax.adam(1e-2)) == optimizer_key(optax.adam(1e-2))
      True
      >>> optimizer_key(optax.adam(1e-2)) == optimizer_key(optax.adam(2e-2))
      False
    """
    return _key(optimizer, {})


def _key(obj, memo):
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes | type):
        return (type(obj), obj)
    if id(obj) in memo:  # shared or cyclic references: by position of first visit
        return ("ref", memo[id(obj)])
    memo[id(obj)] = len(memo)
    if isinstance(obj, types.FunctionType):
        cells = tuple(_cell_key(c, memo) for c in obj.__closure__ or ())
        return (
            "function", obj.__code__, _Identity(obj.__globals__), _key(obj.__defaults__, memo),
            _key(obj.__kwdefaults__, memo), cells,
        )  # fmt: skip
    if isinstance(obj, types.MethodType):
        return ("method", _key(obj.__func__, memo), _key(obj.__self__, memo))
    if isinstance(obj, functools.partial):
        return (type(obj), _key(obj.func, memo), _key(obj.args, memo), _key(obj.keywords, memo))
    if isinstance(obj, tuple | list):
        return (type(obj), tuple(_key(x, memo) for x in obj))
    if isinstance(obj, dict):
        return (type(obj), tuple((_key(k, memo), _key(v, memo)) for k, v in obj.items()))
    if isinstance(obj, np.ndarray | np.generic) or (
        isinstance(obj, jax.Array) and not isinstance(obj, jax.core.Tracer)
    ):
        arr = np.asarray(obj)
        if arr.size <= _MAX_ARRAY_SIZE:
            return ("array", type(obj), arr.dtype.str, arr.shape, arr.tobytes())
    return _Identity(obj)


def _cell_key(cell, memo):
    try:
        contents = cell.cell_contents
    except ValueError:  # an empty cell (a name assigned after the closure was made)
        return ("empty",)
    return _key(contents, memo)


def cache_by_optimizer(build, maxsize: int = 8):
    """Wraps `build(optimizer) -> function` so that equal optimizer configurations share one result.

    `build` should return a jitted function closing over the optimizer; the wrapper returns the one
    built for the first optimizer with the same `optimizer_key` (the `maxsize` most recently used
    configurations are kept), so its compiled programs serve every equal optimizer.

    Example:
      >>> import jax, optax
      >>> from kronvi._solvers.optimizers import cache_by_optimizer
      >>> step = cache_by_optimizer(lambda opt: jax.jit(lambda g, s: opt.update(g, s)))
      >>> step(optax.sgd(0.1)) is step(optax.sgd(0.1))
      True
    """
    cache: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    @functools.wraps(build)
    def get(optimizer):
        key = optimizer_key(optimizer)
        fn = cache.pop(key, None)
        if fn is None:
            fn = build(optimizer)
        cache[key] = fn
        while len(cache) > maxsize:
            cache.popitem(last=False)
        return fn

    get.cache = cache  # type: ignore[attr-defined]  # a function attribute, as functools.lru_cache's
    return get
