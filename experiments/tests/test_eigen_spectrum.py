"""experiments/eigen_spectrum.py: a smoke run on tiny synthetic datasets (fewer and more rows than features), the
stage split and the spectrum's counts on numbers worked by hand, the table, and one-line option errors."""

import eigen_spectrum
import numpy as np
import pytest
from study_folds import write_sine_folds


def test_eigen_spectrum_smoke(tmp_path):
    write_sine_folds(tmp_path / "data" / "tiny", n=50, d=2, K=4)
    out, table = tmp_path / "s.jsonl", tmp_path / "s.md"
    args = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "2", "--out", str(out)]
    assert eigen_spectrum.main(args) == 0
    records = eigen_spectrum.study_cli.read_jsonl(out)
    assert [(r["dataset"], r["fold"]) for r in records] == [("tiny", 0), ("tiny", 1)]
    for r in records:  # 37-38 rows, b = 2000 random Fourier features: the null space is most of the basis
        assert r["feature_map"] == "fourier" and r["b"] == 2000 and r["null"] >= r["b"] - r["n"]
        nonzero = r["b"] - r["null"]
        assert r["prior_dominated"] + r["r>=0.01"] == nonzero  # every nonzero direction counted once
        assert r["r>=0.01"] >= r["r>=0.1"] >= r["r>=1"] >= r["r>=10"]
        assert r["seconds"] > 0 and set(r["stages"]) <= {"gp", "statistics", "eigen", "fit"}
    assert eigen_spectrum.main(args) == 0 and len(eigen_spectrum.study_cli.read_jsonl(out)) == 2  # resumed
    assert eigen_spectrum.main(["--out", str(out), "--table", str(table)]) == 0
    assert table.read_text().count("| tiny |") == 2


def test_stage_seconds_run_from_first_report_to_the_next_stage():
    stamps = [(0.0, "gp"), (0.5, "gp"), (2.0, "statistics"), (3.0, "statistics"), (7.0, "eigen")]
    assert eigen_spectrum.stage_seconds(stamps, 9.0) == {"gp": 2.0, "statistics": 5.0, "eigen": 2.0}


def test_spectrum_counts_by_the_ratio_of_data_to_prior_precision():
    lam = np.array([0.0, 0.0, 1e-4, 0.05, 0.5, 5.0, 50.0])  # s^2 / sigma^2 = 2: r = 0, 0, 2e-4, 0.1, 1, 10, 100
    counts = eigen_spectrum.spectrum_counts(lam, prior_scale=2.0, noise_variance=2.0)
    assert counts == {"null": 2, "prior_dominated": 1, "r>=0.01": 4, "r>=0.1": 4, "r>=1": 3, "r>=10": 2}


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        eigen_spectrum.main(["--data-dir", str(tmp_path), "--folds", "0", "--out", str(tmp_path / "o.jsonl")])
    assert e.value.code == 2 and "--folds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        eigen_spectrum.main(["--data-dir", str(tmp_path), "--datasets", "none", "--out", str(tmp_path / "o.jsonl")])
    assert e.value.code == 2 and "none" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        eigen_spectrum.main(["--out", str(tmp_path / "missing.jsonl"), "--table", str(tmp_path / "t.md")])
    assert e.value.code == 2
