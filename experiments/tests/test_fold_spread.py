"""experiments/fold_spread.py: a smoke run on a tiny synthetic dataset (one exact-GP record per fold, a resumed run
adds none, a larger dataset skipped), the spread rule on numbers worked by hand, the table beside uci.py records,
and one-line option errors."""

import json

import fold_spread
import numpy as np
import pytest
from study_folds import write_sine_folds


def test_fold_spread_smoke(tmp_path):
    _, y, mask = write_sine_folds(tmp_path / "data" / "tiny", n=50, d=2, K=4)
    write_sine_folds(tmp_path / "data" / "big", n=80, d=2, K=4)
    out, table, uci = tmp_path / "gp.jsonl", tmp_path / "gp.md", tmp_path / "uci.json"
    args = ["--data-dir", str(tmp_path / "data"), "--max-rows", "60", "--restarts", "0", "--out", str(out)]
    assert fold_spread.main(args) == 0
    records = fold_spread.study_cli.read_jsonl(out)
    assert [(r["dataset"], r["fold"], r["n"]) for r in records] == [("tiny", k, int((mask[:, k] == 0).sum())) for k in range(4)]
    assert all(np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and r["seconds"] > 0 for r in records)
    assert all(r["rmse"] < 0.5 * np.std(y) for r in records)  # the GP learns the sine
    assert fold_spread.main(args) == 0 and len(fold_spread.study_cli.read_jsonl(out)) == 4  # resumed
    per_fold = [{"fold": k, "rmse": v} for k, v in enumerate([1.0, 1.0, 5.0, 2.0])]
    uci.write_text(json.dumps([{"dataset": "tiny", "method": "direct-mf", "per_fold": per_fold}]))
    assert fold_spread.main(["--out", str(out), "--table", str(table), "--uci", str(uci)]) == 0
    row = next(line for line in table.read_text().splitlines() if line.startswith("| tiny |"))
    assert "| 2.25, 3.33, 2 |" in row and row.count("—") == 1  # the default's folds; no paper's recipe
    with pytest.raises(SystemExit) as e:
        fold_spread.main(["--out", str(out), "--table", str(table), "--uci", str(tmp_path / "none.json")])
    assert e.value.code == 2


def test_spread_flags_folds_beyond_twice_the_median():
    assert fold_spread.spread([1.0, 1.0, 5.0, 2.0]) == (pytest.approx(5.0 / 1.5), [2])
    assert fold_spread.spread([2.0, 3.0, 4.0]) == (pytest.approx(4.0 / 3.0), [])


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        fold_spread.main(["--data-dir", str(tmp_path), "--folds", "0", "--out", str(tmp_path / "o.jsonl")])
    assert e.value.code == 2 and "--folds" in capsys.readouterr().err
