"""Smoke test of experiments/feature_learning.py on a tiny synthetic dataset: every method runs, the JSON
and the markdown table are written, and the learned-lengthscale model is the pipeline's at its lengthscales."""

import json

import feature_learning
import numpy as np
from study_folds import write_sine_folds


def test_feature_learning_smoke(tmp_path):
    write_sine_folds(tmp_path / "data" / "tiny", d=2)
    out_json, out_md = tmp_path / "fl.json", tmp_path / "fl.md"
    feature_learning.main([
        "--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--num-frequencies", "4",
        "--rounds", "1", "--mlp-rounds", "1", "--mlp-sizes", "4", "--param-iter", "2", "--inner-sweeps", "0",
        "--gp-restarts", "1",
        "--json", str(out_json), "--md", str(out_md),
    ])  # fmt: skip
    data = json.loads(out_json.read_text())
    (fold,) = data["records"]["tiny"]
    assert set(fold) == set(feature_learning.METHODS)
    for method in feature_learning.METHODS:
        assert np.isfinite(fold[method]["rmse"]) and np.isfinite(fold[method]["nlpd"])
    assert len(fold["rff-elbo"]["learn_trace"]) == 2
    assert len(fold["rff-elbo"]["lengthscales"]) == 2
    table = out_md.read_text()
    assert "| tiny | rff-gp |" in table and "| tiny | mlp-elbo |" in table
