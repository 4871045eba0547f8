r"""Output files: one rule for every file kronvi writes (`save_model`, `kronvi fit --json`, the studies).

`check_output_path` runs before any compute and raises for everything
that can make the write fail or lose data: the folder is missing (as the operating system resolves the
path, so `out/missing/../x.json` is missing too) or cannot take a new file, the path is a folder, the
path is one of the run's inputs (through links too, whatever the overwrite flag), the path is a symbolic
link, a device, a named pipe or a socket (whoever runs it, root included: only regular files are
replaced), or the file exists and the caller has not asked to replace it.

`write_atomic` writes a temporary file in the destination's folder, flushes it
to disk and renames it over the destination (`os.replace`), so a reader sees the old file or the new
one, never half of one, and a failed or interrupted write leaves the old file as it was. A replaced
file keeps its permission bits; a new file gets the mode a plain `open(path, "w")` would give it
(`0o666` less the umask). Without `overwrite` the new file is linked into place only if no file of that
name exists at that moment (`os.link`), so of two runs racing for one name, one wins and the other gets
`FileExistsError`. A symbolic link at the destination is refused, never written through.

Temporary names are short and fixed in length (`.kronvi-<host>-<pid>-<random>.tmp`, under 50
characters), so any legal file name can be written. A temporary left by a killed process (its host is
this one, its process is gone, it belongs to this user and it has not changed for a minute) is removed
the next time kronvi writes in that folder.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterable
from typing import BinaryIO

__all__ = ["check_output_path", "write_atomic"]

_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]
_TEMP = re.compile(r"\.kronvi-([0-9a-f]{6})-([0-9]+)-[0-9a-f]{12}\.tmp")
_STALE_SECONDS = 60.0  # a temporary untouched this long, whose process is gone, is left over


def _folder(path: str) -> str:
    """The folder the operating system resolves `path` in: `dirname` without normalizing `..` (which
    `os.path.abspath` does lexically, turning `a/missing/..` into an existing `a`)."""
    return os.path.dirname(path) or "."


def _temp_name(folder: str) -> str:
    """A fresh temporary name in `folder`, at most 47 characters whatever the destination's name."""
    return os.path.join(folder, f".kronvi-{_HOST}-{os.getpid()}-{secrets.token_hex(6)}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process: alive; an absurd pid: keep it
        return True
    return True


def remove_stale_temporaries(folder: str) -> list[str]:
    """Removes the temporaries that a killed kronvi process left in `folder` and returns their paths.

    A file is removed only when all of these hold: its name is a kronvi temporary written on this host,
    the process that wrote it no longer exists, it is a regular file owned by this user, and it has not
    been modified for a minute. Anything else (another host's, a live process's, a file of another name)
    is left alone; errors (a folder that cannot be listed, a file removed meanwhile) are ignored.
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        m = _TEMP.fullmatch(entry.name)
        if m is None or m.group(1) != _HOST or _alive(int(m.group(2))):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and now - st.st_mtime > _STALE_SECONDS:
                os.remove(entry.path)
                removed.append(entry.path)
        except OSError:
            continue
    return removed


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; `None` for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_special(path: str, option: str) -> None:
    """`ValueError` when `path` exists and is a symbolic link, a device, a named pipe or a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    kind = _kind(st.st_mode)
    if kind == "a folder":
        raise IsADirectoryError(f"{option} {path!r} is a folder; give a file name")
    if kind == "a symbolic link":
        raise ValueError(
            f"{option} {path!r} is a symbolic link (to {os.readlink(path)!r}): kronvi never writes through "
            "a link; give the file's own path or remove the link"
        )
    if kind is not None:
        raise ValueError(f"{option} {path!r} is {kind}: kronvi writes only regular files; give a file name")


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
      overwrite: Whether an existing regular file may be replaced.
      exists_hint: What the message for an existing file tells the user to do.

    Returns:
      `os.fspath(path)`.

    Raises:
      ValueError: `path` is empty, is one of `inputs`, is a symbolic link, a device, a named pipe or a
        socket (whatever `overwrite` says), or exists without `overwrite`.
      FileNotFoundError: The folder of `path` does not exist.
      IsADirectoryError: `path` is a folder.
      PermissionError: The folder cannot take a new file (tried by creating and removing one).

    Example:
      >>> import os, tempfile, kronvi
      >>> folder = tempfile.mkdtemp()
      >>> out = os.path.join(folder, "out.json")
      >>> kronvi.files.check_output_path(out, option="--json") == out
      True
      >>> try:  # the folder is resolved as the operating system will: `missing` does not exist
      ...     kronvi.files.check_output_path(os.path.join(folder, "missing", "..", "out.json"), option="--json")
      ... except FileNotFoundError as e:
      ...     print(str(e).endswith("no such folder " + repr(os.path.join(folder, "missing", ".."))))
      True
      >>> try:  # a device is never replaced, even with overwrite=True
      ...     kronvi.files.check_output_path("/dev/null", overwrite=True)
      ... except ValueError as e:
      ...     print(e)
      `path` '/dev/null' is a device: kronvi writes only regular files; give a file name
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
        _refuse_special(path, option)
        if not overwrite:
            raise ValueError(f"{option} {path!r} exists: {exists_hint}")
    remove_stale_temporaries(folder)
    probe = _temp_name(folder)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise PermissionError(
            f"{option} {path!r}: cannot write in folder {folder!r} ({e.strerror})"
        ) from None
    os.remove(probe)
    return path


# errno values for which a folder's file system cannot make hard links
_NO_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def _link_new(tmp: str, path: str) -> None:
    """Puts `tmp` at `path` only if no file is there (`FileExistsError` otherwise), atomically where the
    file system has hard links; elsewhere by creating `path` exclusively, then renaming over it."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "another process created the file meanwhile", path) from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "another process created the file meanwhile", path) from None
        os.replace(tmp, path)
        return
    os.remove(tmp)


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes | Callable[[BinaryIO], None], *, overwrite: bool = True
) -> None:
    r"""Writes `data` to `path` atomically: a temporary file in the same folder, then `os.replace`.

    Args:
      path: The destination (`str` or path-like): a new name or an existing regular file. An existing
        file keeps its permission bits; a new one gets `0o666` less the umask. A symbolic link, a
        device, a named pipe or a socket at `path` is refused (never written through nor replaced).
      data: Text (written as UTF-8), bytes, or a function that writes to the open binary file.
      overwrite: Whether an existing file may be replaced. `False`: the file is created only if no
        file of that name exists when it is put in place, checked atomically (`os.link`), so two
        processes racing for one name cannot both succeed.

    Raises:
      FileExistsError: `overwrite` is `False` and `path` exists (also when another process created it
        while `data` was being written); nothing is changed.
      ValueError: `path` is a symbolic link, a device, a named pipe or a socket.
      OSError: If the folder is missing or the write fails; the destination is then left untouched and
        no temporary file remains.

    Example:
      >>> import pathlib, tempfile, kronvi
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
      >>> kronvi.files.write_atomic(path, "hello\n", overwrite=False)
      >>> path.read_text()
      'hello\n'
      >>> try:
      ...     kronvi.files.write_atomic(path, "again\n", overwrite=False)
      ... except FileExistsError:
      ...     print(path.read_text().strip())
      hello
    """
    path = os.fspath(path)
    if not isinstance(path, str):
        path = os.fsdecode(path)
    _refuse_special(path, "`path`")
    if not overwrite and os.path.lexists(path):
        raise FileExistsError(errno.EEXIST, "file exists", path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    folder = _folder(path)
    remove_stale_temporaries(folder)
    tmp = _temp_name(folder)
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
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise
