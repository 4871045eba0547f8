"""Smoke test of experiments/bnn_study.py on a tiny synthetic dataset (the networks only)."""

import json

import bnn_study
import numpy as np
from study_folds import write_folds


def test_study_runs_and_writes_json_and_table(tmp_path):
    rng = np.random.default_rng(0)
    n, K = 40, 4
    X = rng.normal(size=(n, 2))
    X[:, 1] = 3.0  # a constant column is dropped
    y = X[:, 0] ** 2 + 0.1 * rng.normal(size=n)
    write_folds(tmp_path / "data" / "toy", X, y, np.eye(K, dtype=int)[np.arange(n) % K])
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    argv = ["--data-dir", str(tmp_path / "data"), "--datasets", "toy", "--methods", "direct-bnn,mc-bnn",
            "--folds", "2", "--hidden", "2", "--levels", "5", "--starts", "2", "--cavi-sweeps", "3",
            "--mc-steps", "20", "--mc-predict", "20", "--json", str(out), "--md", str(md)]  # fmt: skip
    records, summary = bnn_study.main(argv)
    assert len(records) == 4 and len(summary) == 2
    data = json.loads(out.read_text())
    assert {r["method"] for r in data["records"]} == {"direct-bnn", "mc-bnn"}
    for r in data["records"]:
        assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"])
        assert r["num_weights"] == 2 * 2 + 2  # (x, constant) -> 2 hidden units -> 1
    assert "| toy | direct-bnn |" in md.read_text()
