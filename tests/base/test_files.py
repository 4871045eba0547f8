"""The one rule for output files: checked before any compute, written atomically, permissions kept."""

import errno
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

import kronvi
from kronvi._base import files


def test_check_output_path_names_every_problem_before_anything_is_written(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("1,2\n")
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    cases = [
        (tmp_path / "missing" / "out.json", {}, FileNotFoundError, "no such folder"),
        (
            tmp_path / "missing" / ".." / "out.json",
            {},
            FileNotFoundError,
            "no such folder",
        ),  # as the OS resolves it
        (tmp_path, {}, IsADirectoryError, "is a folder"),
        (data, {"inputs": [data], "overwrite": True}, ValueError, "is the input data file"),
        (existing, {}, ValueError, "exists: pass overwrite=True"),
        ("", {}, ValueError, "needs a file name"),
    ]
    for path, kw, error, message in cases:
        with pytest.raises(error, match=f"^--out .*{message}"):
            kronvi.files.check_output_path(path, option="--out", **kw)
    assert kronvi.files.check_output_path(existing, overwrite=True) == str(existing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "old.json"]  # no probe file left


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "out.bin"
    kronvi.files.write_atomic(path, b"old")

    def fails(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        kronvi.files.write_atomic(path, fails)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]
    kronvi.files.write_atomic(path, lambda fh: fh.write(b"new"))
    assert path.read_bytes() == b"new"


def test_write_atomic_keeps_permissions_and_new_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        kronvi.files.write_atomic(tmp_path / "new.txt", "x")
        existing = tmp_path / "existing.txt"
        existing.write_text("y")
        existing.chmod(0o604)
        kronvi.files.write_atomic(existing, "z")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640  # 0o666 less the umask, as open()
    assert stat.S_IMODE(existing.stat().st_mode) == 0o604 and existing.read_text() == "z"


def test_devices_pipes_sockets_and_links_are_refused_whatever_the_flag(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = tmp_path / "target.txt"
    target.write_text("keep")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "nowhere.txt")
    sock = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    try:
        cases = [("/dev/null", "is a device"), ("/dev/full", "is a device"), (fifo, "is a named pipe"),
                 (sock, "is a socket"), (link, "is a symbolic link"), (dangling, "is a symbolic link")]  # fmt: skip
        for path, message in cases:
            for overwrite in (False, True):
                with pytest.raises(ValueError, match=f"^--out .*{message}"):
                    kronvi.files.check_output_path(path, option="--out", overwrite=overwrite)
            with pytest.raises(ValueError, match=message):
                kronvi.files.write_atomic(path, "x")
    finally:
        server.close()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert link.is_symlink() and target.read_text() == "keep" and dangling.is_symlink()
    assert not (tmp_path / "nowhere.txt").exists()


def test_without_overwrite_of_two_racing_writers_one_wins_and_the_other_is_told(tmp_path):
    path = tmp_path / "out.json"
    first_done = []

    def slow(fh):  # another process creates the file while this one is still writing
        fh.write(b"second")
        kronvi.files.write_atomic(path, "first", overwrite=False)
        first_done.append(True)

    with pytest.raises(FileExistsError):
        kronvi.files.write_atomic(path, slow, overwrite=False)
    assert first_done and path.read_text() == "first" and os.listdir(tmp_path) == ["out.json"]
    with pytest.raises(FileExistsError):
        kronvi.files.write_atomic(path, "third", overwrite=False)
    assert path.read_text() == "first"
    kronvi.files.write_atomic(path, "fourth")
    assert path.read_text() == "fourth"


def test_the_longest_legal_file_name_can_be_written(tmp_path):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    path = tmp_path / ("a" * (limit - 5) + ".json")
    assert kronvi.files.check_output_path(path) == str(path)
    kronvi.files.write_atomic(path, "x")
    kronvi.files.write_atomic(path, "y")
    assert path.read_text() == "y" and os.listdir(tmp_path) == [path.name]


def test_temporaries_left_by_a_killed_writer_are_removed_at_the_next_write(tmp_path):
    script = (
        "import os, sys, kronvi\n"
        "def hang(fh):\n"
        "    fh.write(b'half'); fh.flush(); os._exit(9)\n"
        "kronvi.files.write_atomic(sys.argv[1], hang)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out.json")], env=env, timeout=120)
    assert done.returncode == 9
    (left,) = os.listdir(tmp_path)
    assert left.startswith(".kronvi-") and left.endswith(".tmp")
    fresh = tmp_path / left
    kronvi.files.write_atomic(tmp_path / "other.json", "x")
    assert fresh.exists()  # modified less than a minute ago: kept (its writer might be in another namespace)
    old = time.time() - 3600
    os.utime(fresh, (old, old))
    alive = tmp_path / f".kronvi-{files._HOST}-{os.getpid()}-{'0' * 12}.tmp"  # this process: alive
    alive.write_text("mine")
    os.utime(alive, (old, old))
    host = "000000" if files._HOST != "000000" else "111111"
    other_host = tmp_path / f".kronvi-{host}-{2**22 + 12345}-{'0' * 12}.tmp"  # another host's: kept
    other_host.write_text("theirs")
    os.utime(other_host, (old, old))
    kronvi.files.write_atomic(tmp_path / "other.json", "y")
    assert not fresh.exists() and alive.exists() and other_host.exists()


def test_without_hard_links_the_exclusive_create_falls_back_to_o_excl(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "out.json"
    kronvi.files.write_atomic(path, "first", overwrite=False)
    assert path.read_text() == "first" and os.listdir(tmp_path) == ["out.json"]
    other = tmp_path / "other.json"

    def racing(fh):  # another process creates the name while this one writes
        fh.write(b"mine")
        other.write_text("theirs")

    with pytest.raises(FileExistsError):
        kronvi.files.write_atomic(other, racing, overwrite=False)
    assert other.read_text() == "theirs" and sorted(os.listdir(tmp_path)) == ["other.json", "out.json"]
