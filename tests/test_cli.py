"""``kronvi fit``: options and output paths are checked before any compute; errors are one line."""

import argparse
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

import kronvi
from kronvi import cli
from kronvi.cv import FoldResult, FoldRun


@pytest.fixture
def csv_path(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    path = tmp_path / "toy.csv"
    np.savetxt(path, np.column_stack([X, X[:, 0] + 0.1 * rng.normal(size=30)]), delimiter=",")
    return path


@pytest.fixture
def no_compute(monkeypatch):
    """Makes any fit fail the test: the checks under test must come first."""

    def run_fold(*args, **kwargs):
        raise AssertionError("the CLI started computing")

    monkeypatch.setattr(cli, "run_fold", run_fold)


@pytest.fixture
def fake_fold(monkeypatch):
    """A fold that 'fits' instantly, with NaN RMSE and NLPD."""
    fields = {f: 0.0 for f in FoldResult._fields}
    result = FoldResult(**{**fields, "rmse": float("nan"), "nlpd": float("nan"), "num_iter": 3})
    monkeypatch.setattr(cli, "run_fold", lambda *args, **kwargs: FoldRun(None, result))


@pytest.fixture(autouse=True)
def cache_calls(monkeypatch):
    """Records the CLI's calls of `enable_compilation_cache` instead of changing this process's JAX
    configuration (the suite keeps its own cache)."""
    calls = []
    monkeypatch.setattr(cli, "enable_compilation_cache", lambda *a, **k: calls.append((a, k)))
    return calls


def test_fit_enables_the_compilation_cache_unless_told_not_to(csv_path, fake_fold, cache_calls):
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--max-folds", "1"]) == 0
    assert cache_calls == [((), {})]
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--max-folds", "1", "--no-compilation-cache"]) == 0
    assert len(cache_calls) == 1


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "option,message",
    [
        (["--folds", "0"], "--folds must be >= 2, got 0"),
        (["--folds", "1"], "--folds must be >= 2, got 1"),
        (["--max-folds", "0"], "--max-folds must be >= 1, got 0"),
        (["--levels", "0"], "--levels must be >= 2, got 0"),
        (["--levels", "1"], "--levels must be >= 2, got 1"),
        (["--num-features", "3"], "--num-features must be an even number >= 2"),
        (["--noise-recentres", "-1"], "--noise-recentres must be >= 0"),
        (["--seed", "-1"], "--seed must be an integer in [0, 4294967295], got -1"),
        (["--seed", "99999999999999999999"], "--seed must be an integer in [0, 4294967295]"),
        (["--noise-cv", "ten"], "--noise-cv must be 'none' or a comma list"),
        (["--noise-cv", "3", "--basis", "eigen"], "--noise-cv applies to --basis features only"),
        (["--basis", "features", "--kernel", "auto"], "--kernel auto compares by the exact evidence"),
        (["--basis", "features", "--feature-map", "auto"], "--feature-map auto compares by the exact evidence"),
        (["--feature-budget", "0"], "--feature-budget"),
        (["--feature-budget", "10", "--basis", "features"], "--feature-budget grows b by the exact evidence"),
    ],
)
def test_bad_options_are_one_line_usage_errors(csv_path, no_compute, capsys, option, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", str(csv_path), *option])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kronvi fit: error: ") and message in err  # no usage block
    assert "Traceback" not in err


@pytest.mark.parametrize("source", ["shipped", "folder"])
def test_folds_of_a_folder_or_the_shipped_data_are_not_overridden(tmp_path, no_compute, capsys, source):
    # their folds are the columns of their test mask: an explicit --folds there is refused, not ignored
    argv = ["fit", "--folds", "5"] + ([] if source == "shipped" else [str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--folds applies to a CSV file" in err


def test_more_folds_than_rows_is_an_error_before_compute(csv_path, no_compute, capsys):
    assert cli.main(["fit", str(csv_path), "--folds", "31"]) == 2
    assert (
        _last_line(capsys.readouterr().err)
        == f"kronvi: error: --folds 31 is more than the 30 rows of {str(csv_path)!r}"
    )


def test_json_path_is_checked_before_any_compute(csv_path, tmp_path, no_compute, capsys):
    original = csv_path.read_bytes()
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    cases = [
        ([str(csv_path), "--json", str(csv_path)], "is the input data file"),
        ([str(csv_path), "--json", str(csv_path), "--force"], "is the input data file"),
        ([str(csv_path), "--json", str(existing)], "exists: pass --force to overwrite it"),
        ([str(csv_path), "--json", str(tmp_path / "missing" / "out.json")], "no such folder"),
        # `missing/..` is `tmp_path` on paper, but the operating system cannot resolve it
        ([str(csv_path), "--json", str(tmp_path / "missing" / ".." / "out.json")], "no such folder"),
        ([str(csv_path), "--json", str(tmp_path)], "is a folder"),
    ]
    for argv, message in cases:
        assert cli.main(["fit", *argv]) == 2, argv
        last = _last_line(capsys.readouterr().err)
        assert last.startswith("kronvi: error: --json") and message in last, last
    assert csv_path.read_bytes() == original and existing.read_text() == "{}"


def test_json_is_strict_and_written_atomically(csv_path, tmp_path, fake_fold):
    out = tmp_path / "out.json"
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--max-folds", "2", "--json", str(out)]) == 0

    def reject(constant):
        raise ValueError(f"invalid JSON constant {constant}")

    record = json.loads(out.read_text(), parse_constant=reject)
    assert [f["rmse"] for f in record["folds"]] == [None, None]  # NaN becomes null
    assert record["folds"][0]["nlpd"] is None and record["folds"][0]["num_iter"] == 3
    assert record["summary"]["rmse_mean"] is None and record["summary"]["nlpd_sd"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "toy.csv"]  # no temporary left
    out.write_text("{}")
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--max-folds", "1", "--json", str(out)]) == 2
    assert out.read_text() == "{}"
    argv = ["fit", str(csv_path), "--folds", "3", "--max-folds", "1", "--json", str(out), "--force"]
    assert cli.main(argv) == 0
    one = json.loads(out.read_text(), parse_constant=reject)
    assert len(one["folds"]) == 1
    assert one["summary"]["nlpd_mean"] is None and one["summary"]["nlpd_sd"] is None  # not a spread of 0
    assert one["summary"]["num_iter_sd"] == 0.0  # one fold's known value: no spread


def test_user_input_errors_are_one_line_unless_debug(tmp_path, no_compute, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n4,oops,6\n")
    assert cli.main(["fit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"kronvi: error: `source` {str(bad)!r}: non-numeric value 'oops' on line 2"
    for missing in ("missing.csv", "no_folder"):
        assert cli.main(["fit", str(tmp_path / missing)]) == 2
        err = capsys.readouterr().err
        assert err.strip() == f"kronvi: error: `source` {str(tmp_path / missing)!r}: no such file or folder"
    with pytest.raises(ValueError, match="non-numeric value 'oops'"):
        cli.main(["fit", str(bad), "--debug"])


def test_help_documents_force(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    out = capsys.readouterr().out
    assert "--force" in out and "--debug" in out


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_help_of_every_command_states_every_default(capsys):
    parser, _ = cli._parsers()
    commands = [("kronvi", parser), *_subparsers(parser)]
    assert [name for name, _ in commands] == ["kronvi", "fit"]
    for name, command in commands:
        text = command.format_help()
        for action in command._actions:
            if isinstance(
                action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
            ):
                continue
            if action.const is True and action.default is False:  # a flag: off unless given
                continue
            help_text = command._get_formatter()._get_help_string(action) % vars(action)
            assert "default" in help_text, (name, action.dest, help_text)
            assert " ".join(help_text.split()[:3]) in " ".join(text.split()), (name, action.dest)
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 2000)" in out and "(default: eigen)" in out and "(default: cavi)" in out


def test_version_from_main_and_from_python_m_kronvi(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"kronvi {kronvi.__version__}"
    run = subprocess.run(
        [sys.executable, "-m", "kronvi", "--version"], capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == f"kronvi {kronvi.__version__}"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_fold_progress_in_a_log_is_plain_lines_and_never_nan(csv_path, fake_fold, capsys):
    assert cli.main(["fit", str(csv_path), "--folds", "5"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    assert re.findall(r"eta (\S+)", err) == ["?", "0.0s"]  # never `eta nan`
    lines = err.splitlines()
    # instant folds: the first status and the last, nothing between (at most one line per 10 s)
    assert len(lines) == 2 and "0/5 folds" in lines[0] and lines[0].endswith("eta ?"), lines
    assert "5/5 folds" in lines[1] and "fold 4: RMSE" in lines[1]


def test_fold_progress_on_a_terminal_is_redrawn_in_place(csv_path, fake_fold, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(["fit", str(csv_path), "--folds", "3"]) == 0
    err = terminal.getvalue()
    assert err.count("\r") == 4 and err.endswith("\n") and err.count("\n") == 1
    assert "eta ?" in err and "3/3 folds" in err


def test_a_csv_named_without_csv_is_read_as_a_csv(csv_path, tmp_path, fake_fold, capsys):
    for name in ("yacht.data", "toy"):  # any file is a CSV; only a folder is a UCI folder
        other = tmp_path / name
        other.write_bytes(csv_path.read_bytes())
        assert cli.main(["fit", str(other), "--folds", "3", "--max-folds", "1"]) == 0
        assert "n=30, d=2" in capsys.readouterr().out


def test_json_records_the_settings_that_made_it(csv_path, tmp_path, fake_fold):
    out = tmp_path / "out.json"
    argv = [str(csv_path), "--folds", "3", "--max-folds", "2", "--seed", "7", "--levels", "7"]
    argv += ["--num-features", "20", "--basis", "features", "--kernel", "matern52", "--json", str(out)]
    assert cli.main(["fit", *argv]) == 0
    settings = json.loads(out.read_text())["settings"]
    want = {"source": str(csv_path), "basis": "features", "b": 20, "levels": 7, "seed": 7, "folds": 3}
    assert settings["kernel"] == "matern52" and settings["config"]["kernel"] == "matern52"
    assert {k: settings[k] for k in want} == want
    assert settings["folds_run"] == 2 and settings["max_folds"] == 2 and settings["method"] == "cavi"
    assert settings["config"]["num_frequencies"] == 10 and settings["config"]["noise_cv"] == [10.0, 3.0, 1.0]
    assert settings["source_path"] == str(csv_path.resolve()) and settings["kronvi_version"]
    shipped = tmp_path / "shipped.json"
    assert cli.main(["fit", "--max-folds", "1", "--json", str(shipped)]) == 0
    settings = json.loads(shipped.read_text())["settings"]
    assert settings["source"] == "yacht (shipped)" and settings["folds"] == 10 and settings["folds_run"] == 1


def test_json_keeps_an_existing_files_permissions_and_new_files_follow_the_umask(
    csv_path, tmp_path, fake_fold
):
    old = os.umask(0o022)
    try:
        new, existing = tmp_path / "new.json", tmp_path / "existing.json"
        existing.write_text("{}")
        existing.chmod(0o664)
        argv = ["fit", str(csv_path), "--folds", "3", "--max-folds", "1", "--json"]
        assert cli.main([*argv, str(new)]) == 0
        assert cli.main([*argv, str(existing), "--force"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(new.stat().st_mode) == 0o644
    assert stat.S_IMODE(existing.stat().st_mode) == 0o664 and "folds" in json.loads(existing.read_text())


def test_json_is_never_written_through_a_link_nor_into_the_input(csv_path, tmp_path, no_compute, capsys):
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    argv = ["fit", str(csv_path), "--folds", "3", "--max-folds", "1", "--force", "--json"]
    assert cli.main([*argv, str(link)]) == 2
    assert "is a symbolic link" in _last_line(capsys.readouterr().err)
    assert link.is_symlink() and target.read_text() == "{}"  # refused before any compute
    to_input = tmp_path / "to_input.json"
    to_input.symlink_to(csv_path)
    original = csv_path.read_bytes()
    assert cli.main([*argv, str(to_input)]) == 2
    assert "is the input data file" in _last_line(capsys.readouterr().err)
    assert csv_path.read_bytes() == original and to_input.is_symlink()


def test_ctrl_c_is_one_line_and_exit_130(csv_path, monkeypatch, capsys):
    def run_fold(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_fold", run_fold)
    try:
        code = cli.main(["fit", str(csv_path), "--folds", "3"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == 130 and capsys.readouterr().err.strip().endswith("kronvi: interrupted")


def _folds_then(monkeypatch, finished: int, stop):
    """`run_fold` that finishes `finished` folds instantly, then calls `stop()` (raises or signals)."""
    fields = {f: 0.0 for f in FoldResult._fields}
    calls = []

    def run_fold(*args, **kwargs):
        calls.append(1)
        if len(calls) > finished:
            stop()
        return FoldRun(None, FoldResult(**{**fields, "rmse": 0.5 + len(calls), "nlpd": 1.0, "num_iter": 3}))

    monkeypatch.setattr(cli, "run_fold", run_fold)


def _raise_interrupt():
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "stop, code, word",
    [
        (_raise_interrupt, 130, "interrupted"),
        (lambda: os.kill(os.getpid(), signal.SIGTERM), 143, "terminated"),
    ],
)
def test_an_interrupt_keeps_the_finished_folds_in_the_table_and_the_json(
    csv_path, tmp_path, monkeypatch, capsys, stop, code, word
):
    _folds_then(monkeypatch, 2, stop)
    out = tmp_path / "out.json"
    handler = signal.getsignal(signal.SIGTERM)
    assert cli.main(["fit", str(csv_path), "--folds", "5", "--json", str(out)]) == code
    assert signal.getsignal(signal.SIGTERM) is handler  # restored
    captured = capsys.readouterr()
    assert captured.err.strip().endswith(f"kronvi: {word}")
    rows = [ln.split() for ln in captured.out.splitlines() if re.match(r"^\s+\d+\s+\d+\s", ln)]
    assert [r[0] for r in rows] == ["0", "1"] and [float(r[2]) for r in rows] == [1.5, 2.5]
    assert "interrupted after 2 of 5 folds" in captured.out
    record = json.loads(out.read_text())
    assert record["interrupted"] is True and record["settings"]["folds_run"] == 2
    assert [f["rmse"] for f in record["folds"]] == [1.5, 2.5] and record["summary"]["rmse_mean"] == 2.0


def test_an_interrupt_before_any_fold_finishes_writes_nothing(csv_path, tmp_path, monkeypatch, capsys):
    _folds_then(monkeypatch, 0, _raise_interrupt)
    out = tmp_path / "out.json"
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--json", str(out)]) == 130
    assert not out.exists() and os.listdir(tmp_path) == ["toy.csv"]
    assert "fold" not in capsys.readouterr().out.split("\n", 1)[1]  # no table


def test_a_finished_run_records_that_it_was_not_interrupted(csv_path, tmp_path, fake_fold):
    out = tmp_path / "out.json"
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["interrupted"] is False and record["settings"]["folds_run"] == 3


def test_two_runs_racing_for_one_json_never_overwrite_each_other(csv_path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.json"

    def other_run_finishes_first():  # another `kronvi fit --json out.json` started at the same time
        out.write_text('{"other": "run"}')

    calls = []
    fields = {f: 0.0 for f in FoldResult._fields}

    def run_fold(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            other_run_finishes_first()
        return FoldRun(None, FoldResult(**{**fields, "rmse": 1.0, "num_iter": 1}))

    monkeypatch.setattr(cli, "run_fold", run_fold)
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--json", str(out)]) == 2
    assert json.loads(out.read_text()) == {"other": "run"}  # the other run's file is untouched
    mine = tmp_path / f"out.{os.getpid()}.json"
    assert f"created by another run while this one computed: this run's results are in {str(mine)!r}" in (
        _last_line(capsys.readouterr().err)
    )
    assert len(json.loads(mine.read_text())["folds"]) == 3


def test_num_features_beyond_the_memory_is_a_one_line_error_before_compute(
    csv_path, no_compute, monkeypatch, capsys
):
    monkeypatch.setenv("KRONVI_MEMORY_LIMIT", "64M")
    assert cli.main(["fit", str(csv_path), "--folds", "3", "--num-features", "2000"]) == 2
    err = _last_line(capsys.readouterr().err)
    assert re.match(r"kronvi: error: a fit with b = 2000 features on 30 rows needs about [0-9.]+ MiB", err)
    assert "more than the 64.0 MiB KRONVI_MEMORY_LIMIT: lower --num-features" in err
