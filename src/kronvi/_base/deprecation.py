"""Old argument names and orders that keep working for one release, with a `DeprecationWarning`."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")

# The release after which the old spellings stop working.
REMOVED_IN = "0.3"


def warn_deprecated(message: str, stacklevel: int = 3) -> None:
    """A `DeprecationWarning` saying `message` and when the old spelling goes."""
    warnings.warn(
        f"{message} (the old form is removed in kronvi {REMOVED_IN})", DeprecationWarning, stacklevel
    )


def renamed_arguments(**renames: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorator: keyword arguments renamed `old=new` still work under their old name, with a
    `DeprecationWarning`; giving both names is a `TypeError`. The signature (`inspect.signature`) shows
    the new names only."""

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both `{old}` and its new name `{new}`")
                    warn_deprecated(f"{fn.__name__}(): `{old}` is now called `{new}`")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper

    return decorate


def reordered_arguments(
    old: tuple[str, ...], is_old: Callable[[tuple[Any, ...]], bool]
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorator: a call in the old positional order `old` (parameter names, in that order) still works
    for one release, with a `DeprecationWarning`. `is_old(args)` tells the orders apart by the types of
    the positional arguments (e.g. a `MeanField` where the statistics now come first); the positional
    arguments of such a call are passed on by name."""

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if len(args) > 1 and is_old(args):
                names = old[: len(args)]
                new = [p for p in inspect.signature(fn).parameters if p in old]
                warn_deprecated(
                    f"{fn.__name__}({', '.join(old)}): the order is now {fn.__name__}({', '.join(new)})"
                )
                kwargs.update(zip(names, args, strict=True))
                by_name: Callable[..., _R] = fn  # every argument by name: no positional ones left
                return by_name(**kwargs)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
