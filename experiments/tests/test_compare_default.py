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
    before.write_text(json.dumps([paper]))
    more = tmp_path / "more.json"  # the before run's default in a second file of a comma list
    more.write_text(json.dumps([_record("direct-mf", [1.0, 1.0, 4.0], [0.5, 0.5, 0.5], seconds=(0.0, 2.0, 1.0))]))
    before = f"{before},{more}"
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


def test_the_rmse_over_the_training_sd_of_each_fold(tmp_path):
    """`--data-dir`: each run's RMSE over the sd of its fold's training targets (mean, smallest, largest)."""
    import numpy as np
    from study_folds import write_folds

    y = np.array([0.0, 2.0, 0.0, 4.0, 1.0, 1.0])
    mask = np.eye(3, dtype=int)[[0, 0, 1, 1, 2, 2]]  # fold k tests rows 2k and 2k + 1
    write_folds(tmp_path / "data" / "d", np.arange(6.0)[:, None], y, mask)
    sds = [np.std(y[2:]), np.std(np.r_[y[:2], y[4:]]), np.std(y[:4])]
    before, after, out = tmp_path / "before.json", tmp_path / "after.json", tmp_path / "table.md"
    before.write_text(json.dumps([_record("direct-mf", [1.0, 1.0, 1.0], [0.0] * 3)]))
    after.write_text(json.dumps([_record("direct-mf", [0.5, 1.0, 2.0], [0.0] * 3), _record("exact-blr", [1.0] * 3, [0.0] * 3)]))
    compare_default.main(["--before", str(before), "--after", str(after), "--out", str(out), "--before-method",
                          "direct-mf", "--data-dir", str(tmp_path / "data")])  # fmt: skip
    text = out.read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| d | 3 |") and line.count("|") == 5]
    ratios = np.array([0.5, 1.0, 2.0]) / sds
    assert row.split("|")[4].strip() == f"{ratios.mean():.4f} ({ratios.min():.4f} – {ratios.max():.4f})"
    assert f"{np.mean(1 / np.array(sds)):.4f}" in row.split("|")[3]
    assert "--data-dir" in text.splitlines()[0]


def test_two_records_of_one_dataset_or_a_data_dir_without_two_defaults_are_refused(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps([_record("direct-mf", [1.0], [0.0])]))
    with pytest.raises(SystemExit, match="two direct-mf records of d"):
        compare_default.main(["--before", f"{one},{one}", "--after", str(one), "--out", str(tmp_path / "o.md"),
                              "--before-method", "direct-mf"])  # fmt: skip
    with pytest.raises(SystemExit):
        compare_default.main(["--before", str(one), "--after", str(one), "--out", str(tmp_path / "o.md"),
                              "--data-dir", str(tmp_path)])  # fmt: skip


def test_a_later_after_file_replaces_an_earlier_ones_records(tmp_path):
    before, first, later, out = (tmp_path / f for f in ("before.json", "first.json", "later.json", "o.md"))
    before.write_text(json.dumps([_record("direct-mf", [1.0, 1.0], [0.0, 0.0])]))
    first.write_text(json.dumps([_record("direct-mf", [3.0, 3.0], [0.0] * 2), _record("exact-blr", [3.0] * 2, [0.0] * 2)]))
    later.write_text(json.dumps([_record("direct-mf", [2.0, 2.0], [0.0] * 2)]))  # exact-blr stays the first file's
    compare_default.main(["--before", str(before), "--after", f"{first},{later}", "--out", str(out),
                          "--before-method", "direct-mf"])  # fmt: skip
    (row,) = [line for line in out.read_text().splitlines() if line.startswith("| d |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "2 / 0.000" and cells[6].startswith("3 / ")
