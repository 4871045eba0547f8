"""A tiny helper for pytree classes whose constructor validates its input.

`jax.tree_util` rebuilds nodes from leaves that may be tracers, `None` or sentinel objects; those
must not go through validation, so `validated_pytree` registers an unflatten that bypasses
`__init__`.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import jax

_T = TypeVar("_T")


def validated_pytree(cls: type[_T]) -> type[_T]:
    """Registers `cls` (with `_fields`) as a pytree whose unflatten skips `__init__`.

    Also adds `cls._unchecked(*leaves)`: construction without validation, for traced code.
    """

    def flatten(obj):
        return tuple(getattr(obj, f) for f in cls._fields), None

    def unflatten(_, leaves):
        obj = object.__new__(cls)
        for f, leaf in zip(cls._fields, leaves, strict=True):
            object.__setattr__(obj, f, leaf)
        return obj

    def setattr_(self, name, value):
        raise AttributeError(f"{cls.__name__} is immutable")

    def repr_(self):
        parts = []
        for f in cls._fields:
            v = getattr(self, f)
            parts.append(f"{f}={type(v).__name__}{getattr(v, 'shape', '')}")
        return f"{cls.__name__}({', '.join(parts)})"

    def iter_(self):
        return iter(tuple(getattr(self, f) for f in cls._fields))

    def replace(self, **kwargs):
        obj = object.__new__(cls)
        for f in cls._fields:
            object.__setattr__(obj, f, kwargs.pop(f, getattr(self, f)))
        if kwargs:
            raise TypeError(f"unknown field(s) {sorted(kwargs)} for {cls.__name__}")
        return obj

    patched: Any = cls  # the methods are added to the class itself
    patched._unchecked = classmethod(lambda c, *leaves: unflatten(None, leaves))
    patched.__setattr__ = setattr_
    patched.__repr__ = repr_
    patched.__iter__ = iter_
    patched._replace = replace
    jax.tree_util.register_pytree_node(cls, flatten, unflatten)
    return cls


def as_traced_callable(fn):
    """A pytree callable whose array arguments are traced, so one compile serves every fold."""
    if isinstance(fn, jax.tree_util.Partial):
        return fn
    if isinstance(fn, functools.partial):
        return jax.tree_util.Partial(fn.func, *fn.args, **fn.keywords)
    if not callable(fn):
        raise TypeError(f"`feature_map` must be callable, got {type(fn).__name__}")
    return jax.tree_util.Partial(fn)
