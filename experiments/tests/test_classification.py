"""The classification study and its renderer on a tiny synthetic dataset: record fields, metrics, files."""

import json

import classification
import numpy as np
import render_classification
from study_folds import write_folds

FIELDS = {
    "dataset", "method", "n", "d", "accuracy_mean", "accuracy_sd", "logloss_mean", "logloss_sd", "ece_mean",
    "fit_seconds", "sparsity_pct",
}  # fmt: skip


def _write(folder, n=40, d=2, K=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, -1] = 3.0  # a constant column
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(float)
    mask = np.eye(K, dtype=int)[np.arange(n) % K]
    write_folds(folder, X, y, mask)


def test_metrics_by_hand():
    p = np.array([0.9, 0.2, 0.6, 0.05])
    y = np.array([1.0, 0.0, 0.0, 0.0])
    acc, ll, ece = classification.metrics(p, y)
    assert acc == 0.75
    np.testing.assert_allclose(ll, -np.mean(np.log([0.9, 0.8, 0.4, 0.95])))
    # bins: 0.05 -> 0, 0.2 -> 2, 0.6 -> 6, 0.9 -> 9; each alone: |y - p| averaged
    np.testing.assert_allclose(ece, np.mean([0.1, 0.2, 0.6, 0.05]))


def test_study_writes_records_and_renders(tmp_path):
    _write(tmp_path / "data" / "tiny")
    out = tmp_path / "res.json"
    classification.main(
        [
            "--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--methods", "all", "--json", str(out),
            "--folds", "2", "--num-frequencies", "3", "--max-iter", "3", "--vi-steps", "3",
            "--prior-scales", "1,3",
        ]
    )  # fmt: skip
    recs = json.loads(out.read_text())
    assert [r["method"] for r in recs] == list(classification.METHODS[:4])
    for r in recs:
        assert set(r) == FIELDS
        assert 0 <= r["accuracy_mean"] <= 1 and r["logloss_mean"] > 0 and 0 <= r["ece_mean"] <= 1
    assert (tmp_path / "res_reliability.json").exists()
    render_classification.main([str(out)])
    assert "direct-logistic" in (tmp_path / "res.md").read_text()
    assert (tmp_path / "res_reliability.png").exists()
