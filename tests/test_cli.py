"""``kronvi fit``: options and output paths are checked before any compute; errors are one line."""

import json

import numpy as np
import pytest

from kronvi import cli
from kronvi.pipeline import FoldResult


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
    monkeypatch.setattr(cli, "run_fold", lambda *args, **kwargs: (result, None))


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
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--noise-cv", "ten"], "--noise-cv must be 'none' or a comma list"),
        (["--noise-cv", "3", "--basis", "eigen"], "--noise-cv applies to --basis features only"),
    ],
)
def test_bad_options_are_one_line_usage_errors(csv_path, no_compute, capsys, option, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", str(csv_path), *option])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert _last_line(err).startswith("kronvi fit: error: ") and message in _last_line(err)
    assert "Traceback" not in err


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
    assert len(json.loads(out.read_text(), parse_constant=reject)["folds"]) == 1


def test_user_input_errors_are_one_line_unless_debug(tmp_path, no_compute, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n4,oops,6\n")
    assert cli.main(["fit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"kronvi: error: `path` {str(bad)!r}: non-numeric value 'oops' on line 2"
    assert cli.main(["fit", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert (
        _last_line(err).startswith("kronvi: error: `path`")
        and "no such file" in err
        and "Traceback" not in err
    )
    assert cli.main(["fit", str(tmp_path / "no_folder")]) == 2
    assert "no such folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match="non-numeric value 'oops'"):
        cli.main(["fit", str(bad), "--debug"])


def test_help_documents_force(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    out = capsys.readouterr().out
    assert "--force" in out and "--debug" in out
