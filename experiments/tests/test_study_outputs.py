"""Every study's outputs follow the library's rule (kronvi.files.check_output_path), checked before any compute:
an existing file needs --overwrite, an input is never an output, two outputs are never one file."""

import blr_benchmark
import bnn_study
import feature_learning
import pytest
import reinforce_vs_direct
from study_folds import write_sine_folds


@pytest.fixture
def data(tmp_path):
    write_sine_folds(tmp_path / "data" / "toy", n=20)
    return tmp_path / "data"


def _refused(capsys, call, message):
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and message in lines[0], lines


def test_studies_refuse_outputs_that_would_lose_data(data, tmp_path, capsys):
    existing = tmp_path / "old.json"
    existing.write_text("[]")
    source = data / "toy" / "data.csv.gz"
    common = ["--data-dir", str(data), "--datasets", "toy"]
    cases = [
        (bnn_study.main, [*common, "--json", str(existing)], "exists: pass --overwrite"),
        (bnn_study.main, [*common, "--json", str(source), "--overwrite"], "is the input data file"),
        (feature_learning.parse_args, [*common, "--md", str(source), "--overwrite"], "is the input data file"),
        (feature_learning.parse_args, [*common, "--json", "x.json", "--md", "x.json"], "is the --json file too"),
        (blr_benchmark.parse_args, ["--json", str(existing), "--datasets", "toy"], "exists: pass --overwrite"),
        (blr_benchmark.parse_args, ["--json", str(tmp_path / "no" / "b.json")], "no such folder"),
        (reinforce_vs_direct.main, ["--out", str(tmp_path / "old")], "exists: pass --overwrite"),  # old.json
    ]
    for main, argv, message in cases:
        _refused(capsys, lambda main=main, argv=argv: main(argv), message)
    assert existing.read_text() == "[]" and source.stat().st_size > 0
