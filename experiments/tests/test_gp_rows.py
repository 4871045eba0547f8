"""experiments/gp_rows.py: a smoke run on a tiny synthetic dataset (one record per fold and P, the GP step on
min(P, rows) rows, a resumed run adds none), the table rendered from the file, and one-line option errors."""

import gp_rows
import numpy as np
import pytest
from study_folds import write_sine_folds


def test_gp_rows_smoke(tmp_path):
    _, y, mask = write_sine_folds(tmp_path / "data" / "tiny", n=60, d=2)
    out, table = tmp_path / "rows.jsonl", tmp_path / "rows.md"
    args = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--points", "20,1000", "--out", str(out)]
    assert gp_rows.main(args) == 0
    records = gp_rows.study_cli.read_jsonl(out)
    assert [(r["points"], r["gp_rows"], r["n"]) for r in records] == [(20, 20, 48), (1000, 48, 48)]
    assert all(np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and r["seconds"] >= r["gp_seconds"] > 0 for r in records)
    assert records[0]["rmse_over_sd"] == pytest.approx(records[0]["rmse"] / np.std(y[mask[:, 0] == 0]), rel=1e-12)
    assert gp_rows.main(args) == 0 and len(gp_rows.study_cli.read_jsonl(out)) == 2  # resumed: nothing to fit
    assert gp_rows.main(["--out", str(out), "--table", str(table)]) == 0
    assert "| tiny | 0 | 20 | 20 | fourier, 2000 |" in table.read_text()


@pytest.mark.parametrize("points", ["1", "a,b", ""])
def test_bad_points_are_one_line_errors(tmp_path, points, capsys):
    with pytest.raises(SystemExit) as e:
        gp_rows.main(["--data-dir", str(tmp_path), "--points", points, "--out", str(tmp_path / "o.jsonl")])
    assert e.value.code == 2 and "--points" in capsys.readouterr().err
