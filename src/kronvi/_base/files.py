r"""Output files: one rule for every file kronvi writes (`save_model`, `kronvi fit --json`, the studies).

`check_output_path` runs before any compute and raises for everything
that can make the write fail or lose data: the folder is missing (as the operating system resolves the
path, so `out/missing/../x.json` is missing too) or cannot take a new file, the path is a folder, the
path is one of the run's inputs (through links too, whatever the overwrite flag), or the file exists
and the caller has not asked to replace it.

`write_atomic` writes a temporary file in the destination's folder, flushes it
to disk and renames it over the destination (`os.replace`), so a reader sees the old file or the new
one, never half of one, and a failed or interrupted write leaves the old file as it was. A replaced
file keeps its permission bits; a new file gets the mode a plain `open(path, "w")` would give it
(`0o666` less the umask). A symbolic link is written through: its target is replaced, the link stays.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable
from typing import BinaryIO

__all__ = ["check_output_path", "write_atomic"]


def _folder(path: str) -> str:
    """The folder the operating system resolves `path` in: `dirname` without normalizing `..` (which
    `os.path.abspath` does lexically, turning `a/missing/..` into an existing `a`)."""
    return os.path.dirname(path) or "."


def _target(path: str) -> str:
    """The file a write to `path` replaces: the final target of a symbolic link, else `path`."""
    return os.path.realpath(path) if os.path.islink(path) else path


def _temp_name(target: str) -> str:
    return os.path.join(_folder(target), f".{os.path.basename(target)}.{secrets.token_hex(4)}.tmp")


def check_output_path(
    path: str | os.PathLike[str],
    *,
    option: str = "`path`",
    inputs: Iterable = (),
    overwrite: bool = False,
    exists_hint: str = "pass overwrite=True to replace it",
) -> str:
    r"""Checks, before any compute, that `path` can take an output file; returns it as a `str`.

    Args:
      path: The output file (`str` or path-like).
      option: How the caller names `path` in messages (`"--json"`, `` "`path`" ``).
      inputs: Files the run reads: `path` must not be any of them (compared with `os.path.samefile`,
        so links and other spellings are caught), even with `overwrite`.
      overwrite: Whether an existing file may be replaced.
      exists_hint: What the message for an existing file tells the user to do.

    Returns:
      `os.fspath(path)`.

    Raises:
      ValueError: `path` is empty, is one of `inputs`, or exists without `overwrite`.
      FileNotFoundError: The folder of `path` does not exist.
      IsADirectoryError: `path` is a folder.
      PermissionError: The folder cannot take a new file (tried by creating and removing one).

    Example:
      >>> import os, tempfile, kronvi
      >>> folder = tempfile.mkdtemp()
      >>> out = os.path.join(folder, "out.json")
      >>> kronvi.check_output_path(out, option="--json") == out
      True
      >>> try:  # the folder is resolved as the operating system will: `missing` does not exist
      ...     kronvi.check_output_path(os.path.join(folder, "missing", "..", "out.json"), option="--json")
      ... except FileNotFoundError as e:
      ...     print(str(e).endswith("no such folder " + repr(os.path.join(folder, "missing", ".."))))
      True
    """
    path = os.fspath(path)
    if not isinstance(path, str):
        path = os.fsdecode(path)
    if not path:
        raise ValueError(f"{option} needs a file name, got an empty string")
    folder = _folder(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{option} {path!r}: no such folder {folder!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{option} {path!r} is a folder; give a file name")
    if os.path.lexists(path):
        for f in inputs:
            f = os.fspath(f)
            if os.path.exists(f) and os.path.exists(path) and os.path.samefile(path, f):
                other = "" if os.path.abspath(f) == os.path.abspath(path) else f" {f!r}"
                raise ValueError(f"{option} {path!r} is the input data file{other}: refusing to overwrite it")
        if not overwrite:
            raise ValueError(f"{option} {path!r} exists: {exists_hint}")
    target_folder = _folder(_target(path))
    if not os.path.isdir(target_folder):
        raise FileNotFoundError(f"{option} {path!r} links to a missing folder {target_folder!r}")
    probe = _temp_name(_target(path))
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise PermissionError(
            f"{option} {path!r}: cannot write in folder {target_folder!r} ({e.strerror})"
        ) from None
    os.remove(probe)
    return path


def write_atomic(path: str | os.PathLike[str], data: str | bytes | Callable[[BinaryIO], None]) -> None:
    r"""Writes `data` to `path` atomically: a temporary file in the same folder, then `os.replace`.

    Args:
      path: The destination (`str` or path-like). An existing file keeps its permission bits; a new one
        gets `0o666` less the umask. A symbolic link is written through to its target.
      data: Text (written as UTF-8), bytes, or a function that writes to the open binary file.

    Raises:
      OSError: If the folder is missing or the write fails; the destination is then left untouched and
        no temporary file remains.

    Example:
      >>> import pathlib, tempfile, kronvi
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
      >>> kronvi.write_atomic(path, "hello\n")
      >>> path.read_text()
      'hello\n'
    """
    target = _target(os.fspath(path))
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    tmp = _temp_name(target)
    # 0o666 lets the umask decide a new file's mode, as open() does (mkstemp would make it 0o600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise
