"""JAX's persistent compilation cache, switched on for kronvi's programs on request.

A fresh process compiles every program it runs; JAX can keep the compiled programs on disk and read them back
in the next process. kronvi never changes JAX's configuration on import: `enable_compilation_cache` is
the one call that does, and the `kronvi fit` command makes it unless `--no-compilation-cache`. What the cache
trusts and when it misses: `docs/sharp_bits.md`, "First calls compile".
"""

from __future__ import annotations

import getpass
import os
import pathlib
import socket

import jax
from jax.experimental.compilation_cache import compilation_cache


def default_cache_dir() -> pathlib.Path:
    """`$JAX_COMPILATION_CACHE_DIR` if set, else `<cache home>/kronvi/jax/<user>-<host>`, the cache home being
    `$XDG_CACHE_HOME` or `~/.cache`: one folder per user and machine (compiled CPU code is specific to the
    machine's instruction set)."""
    env = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container, say)
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    host = socket.gethostname() or "host"
    return pathlib.Path(home) / "kronvi" / "jax" / f"{_safe(user)}-{_safe(host)}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def enable_compilation_cache(
    path: str | os.PathLike | None = None,
    *,
    min_compile_time_secs: float = 0.0,
    min_entry_size_bytes: int = 0,
) -> pathlib.Path:
    """Turns on JAX's persistent compilation cache in `path`, so that a later process reads kronvi's compiled
    programs from disk instead of compiling them again. Returns the cache folder.

    This changes JAX's process-wide configuration (`jax_compilation_cache_dir` and the two thresholds), for
    every JAX program of the process, kronvi's or not; importing kronvi never does. It may be called after
    programs have compiled (they are not written; later ones are). JAX's default thresholds (1 s of
    compilation) would leave out most of kronvi's programs, which compile in 0.01-1 s each; the defaults here
    cache every program. Programs that call back into Python (the float32 GP likelihood's gradient from 400
    rows on a CPU) are never cached by JAX and compile in every process.

    The cache is trusted: whoever can write to its folder can make this process run their code. The folder is
    created readable and writable by its owner only; do not point it at a folder others can write.

    Args:
      path: the cache folder; `None`: `$JAX_COMPILATION_CACHE_DIR` if set, else
        `$XDG_CACHE_HOME/kronvi/jax/<user>-<host>` (`~/.cache` without `XDG_CACHE_HOME`).
      min_compile_time_secs: programs that compiled faster than this are not written (`>= 0`).
      min_entry_size_bytes: programs smaller than this are not written (`>= 0`).

    Returns:
      The cache folder, as an absolute `pathlib.Path`.

    Raises:
      ValueError: `min_compile_time_secs` or `min_entry_size_bytes` is negative or not a number.

    Example:
      >>> import tempfile, kronvi
      >>> folder = kronvi.enable_compilation_cache(tempfile.mkdtemp())  # doctest: +SKIP
    """
    try:
        min_time = float(min_compile_time_secs)
    except (TypeError, ValueError):
        min_time = float("nan")
    if not min_time >= 0:
        raise ValueError(f"`min_compile_time_secs` must be a number >= 0, got {min_compile_time_secs!r}")
    if isinstance(min_entry_size_bytes, bool) or not isinstance(min_entry_size_bytes, int):
        raise ValueError(f"`min_entry_size_bytes` must be an integer >= 0, got {min_entry_size_bytes!r}")
    if min_entry_size_bytes < 0:
        raise ValueError(f"`min_entry_size_bytes` must be an integer >= 0, got {min_entry_size_bytes!r}")
    folder = (default_cache_dir() if path is None else pathlib.Path(path).expanduser()).absolute()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # JAX decides once per process, at its first compilation, whether the cache is used: decide again
    compilation_cache.reset_cache()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_time)
    # -1 in JAX means "no minimum, and no override by the file system's optimal size"
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes) or -1)
    return folder
