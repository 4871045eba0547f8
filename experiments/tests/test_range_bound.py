"""experiments/range_bound.py: a smoke run on a tiny synthetic dataset under both keys, the rules' bounds and scores
on numbers worked by hand, the table, and one-line option errors."""

import numpy as np
import pytest
import range_bound
from study_folds import write_sine_folds


def test_range_bound_smoke(tmp_path):
    write_sine_folds(tmp_path / "data" / "tiny", n=50, d=2, K=4)
    out, table = tmp_path / "r.jsonl", tmp_path / "r.md"
    base = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "2", "--out", str(out)]
    assert range_bound.main(base) == 0 and range_bound.main([*base, "--key", "zero"]) == 0
    records = range_bound.study_cli.read_jsonl(out)
    assert [(r["key"], r["fold"]) for r in records] == [("uci", 0), ("uci", 1), ("zero", 0), ("zero", 1)]
    for r in records:
        assert set(r["rules"]) == set(range_bound.RULES) and r["range_seconds"] > 0
        assert r["rules"]["plain"]["moved"] == 0 and np.isfinite(r["rules"]["range1"]["rmse"])
        assert r["rules"]["range2"]["moved"] <= r["rules"]["range1.5"]["moved"] <= r["rules"]["range1"]["moved"]
    assert range_bound.main(base) == 0 and len(range_bound.study_cli.read_jsonl(out)) == 4  # resumed
    assert range_bound.main(["--out", str(out), "--table", str(table)]) == 0
    text = table.read_text()
    assert text.count("| tiny | uci |") == len(range_bound.RULES) and text.count("| tiny | zero |") == len(range_bound.RULES)


def test_rules_clip_the_mean_and_keep_the_variance():
    bounds = range_bound.rule_bounds(lam=np.array([4.0, 0.0]), n=1.0, train_max=np.array([1.0, 2.0]))
    assert bounds["rms20"].tolist() == [40.0, 0.0] and bounds["range1.5"].tolist() == [1.5, 3.0]
    assert np.all(np.isinf(bounds["plain"]))
    z, u, var = np.array([[3.0, 0.5], [1.0, -4.0]]), np.array([2.0, 1.0]), np.array([1.0, 1.0])
    y = np.array([6.5, -2.0])  # the plain means: 6.5 and -2.0 (errors 0)
    s = range_bound.score(z, y, u, var, bounds["range1"])  # clipped rows: [1, 0.5] -> 2.5, [1, -2] -> 0
    assert s["moved"] == 2 and s["rmse"] == pytest.approx(np.sqrt((4.0**2 + 2.0**2) / 2))
    assert s["nlpd"] == pytest.approx(np.mean(0.5 * np.log(2 * np.pi) + 0.5 * np.array([16.0, 4.0])))


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        range_bound.main(["--data-dir", str(tmp_path), "--folds", "0", "--out", str(tmp_path / "o.jsonl")])
    assert e.value.code == 2 and "--folds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        range_bound.main(["--data-dir", str(tmp_path), "--key", "one", "--out", str(tmp_path / "o.jsonl")])
    assert e.value.code == 2 and "--key" in capsys.readouterr().err
