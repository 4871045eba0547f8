"""The before/after table of the default recipe (experiments/compare_default.py): two versions of the default
recipe against each other and exact-blr, from hand-made records of `experiments/uci.py`'s form."""

import json

import compare_default
import pytest


def _record(method, rmses, nlpds, *, seconds=(0.0, 0.0, 0.0)):
    init, eigen, fit = seconds
    return dict(
        dataset="d", method=method, settings={"default": {}, "study": {"nlpd_points": None}}, per_fold=[
            dict(fold=k, rmse=r, nlpd=q, init_seconds=init + k, eigen_stats_seconds=eigen, fit_seconds=fit)
            for k, (r, q) in enumerate(zip(rmses, nlpds, strict=True))
        ],
    )  # fmt: skip


def test_two_defaults_are_compared_fold_by_fold_with_their_spread_and_seconds(tmp_path):
    before, after, out = tmp_path / "before.json", tmp_path / "after.json", tmp_path / "table.md"
    paper = dict(_record("direct-mf", [9.0, 9.0, 9.0], [9.0, 9.0, 9.0]), settings={})  # the paper's, by its old name
    before.write_text(json.dumps([_record("direct-mf", [1.0, 1.0, 4.0], [0.5, 0.5, 0.5], seconds=(0.0, 2.0, 1.0)), paper]))
    after.write_text(json.dumps([
        _record("direct-mf", [0.9, 1.0, 1.1, 7.0], [0.4, 0.4, 0.4, 0.4], seconds=(1.0, 10.0, 0.5)),
        _record("exact-blr", [0.9, 1.0, 1.1, 7.0], [0.45, 0.45, 0.45, 0.45]),
    ]))  # fmt: skip
    compare_default.main(
        ["--before", str(before), "--after", str(after), "--out", str(out), "--before-method", "direct-mf"]
    )
    rows = [line for line in out.read_text().splitlines() if line.startswith("| d |")]
    assert len(rows) == 1
    assert "NLPD over every test row" in out.read_text()
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "3"  # the folds both runs have (the after run's fold 3 is not compared)
    assert cells[2] == "2 / 0.500" and cells[3] == "1 / 0.400"
    assert float(cells[4]) == pytest.approx(0.5) and float(cells[5]) == pytest.approx(-0.1)
    assert float(cells[7]) == pytest.approx(1.0) and float(cells[8]) == pytest.approx(-0.05)
    assert cells[9] == "4.00 → 1.10"  # largest over median fold: 4 / 1 before, 1.1 / 1.0 after
    assert cells[10] == "4.0 / 5.0 → 12.5 / 13.5"  # GP + features + fit: 3, 4, 5 s before; 11.5, 12.5, 13.5 after
    assert "on **1 of 1** datasets" in out.read_text()
