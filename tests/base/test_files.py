"""The one rule for output files: checked before any compute, written atomically, permissions kept."""

import os
import stat

import pytest

import kronvi


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
            kronvi.check_output_path(path, option="--out", **kw)
    assert kronvi.check_output_path(existing, overwrite=True) == str(existing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "old.json"]  # no probe file left


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "out.bin"
    kronvi.write_atomic(path, b"old")

    def fails(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        kronvi.write_atomic(path, fails)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]
    kronvi.write_atomic(path, lambda fh: fh.write(b"new"))
    assert path.read_bytes() == b"new"


def test_write_atomic_keeps_permissions_and_new_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        kronvi.write_atomic(tmp_path / "new.txt", "x")
        existing = tmp_path / "existing.txt"
        existing.write_text("y")
        existing.chmod(0o604)
        kronvi.write_atomic(existing, "z")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640  # 0o666 less the umask, as open()
    assert stat.S_IMODE(existing.stat().st_mode) == 0o604 and existing.read_text() == "z"
