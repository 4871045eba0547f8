"""The hostile-input study: its committed table lists every case, every case not waiting on another module
is ok there, and the quick cases are ok now."""

import pathlib
import re

import hostile_inputs
import pytest

TABLE = pathlib.Path(__file__).resolve().parents[1] / "results" / "hostile_inputs.md"


def _rows():
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[2] in ("ok", "NOT OK"):
            rows[cells[1]] = (cells[2], cells[3])
    return rows


def test_the_committed_table_lists_every_case_and_only_pending_ones_fail():
    rows = _rows()
    texts = [text.replace("|", "/") for _, text, _, _ in hostile_inputs.CASES]
    assert sorted(rows) == sorted(texts)
    for (_, text, _, pending), key in zip(hostile_inputs.CASES, texts, strict=True):
        verdict, recorded = rows[key]
        assert recorded == pending, text
        assert verdict == "ok" or pending, f"{text}: {verdict} in {TABLE.name}"
    assert re.search(r"Command: `python experiments/hostile_inputs.py --out experiments/results/hostile_inputs.md", TABLE.read_text())


QUICK = [(g, t, fn, p) for g, t, fn, p in hostile_inputs.CASES if fn.fast and not p]


@pytest.mark.parametrize("group, text, fn, pending", QUICK, ids=[t[:60] for _, t, _, _ in QUICK])
def test_the_quick_cases_are_ok_now(tmp_path, group, text, fn, pending):
    ok, what = fn(tmp_path)
    assert ok, what


def test_a_case_that_goes_wrong_is_reported_not_ok_with_what_happened():
    def broken(tmp):
        raise RuntimeError("boom")

    def silent(tmp):
        return hostile_inputs.raises(lambda: None, ValueError, "x")

    rows = hostile_inputs.run_cases([("g", "broken", broken, ""), ("g", "silent", silent, "")], log=lambda s: None)
    assert [r[2] for r in rows] == ["NOT OK", "NOT OK"]
    assert "case crashed: RuntimeError: boom" in rows[0][4] and rows[1][4] == "no error"
    table = hostile_inputs.table(rows, "cmd")
    assert "0 ok, 2 not ok" in table and "| g | broken | NOT OK |" in table
