"""The GP precision study (experiments/gp_precision.py): its dense GP predictive against the definition, and a
tiny run of the command line with its resume and table."""

import json

import gp_precision
import numpy as np
from study_folds import write_sine_folds

import kronvi


def test_gp_predictive_is_the_dense_posterior():
    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(12, 2)), rng.normal(size=(5, 2))
    y = np.sin(X[:, 0])
    hyper = kronvi.inputs.GPHyperparameters(np.array([0.7, 2.0]), np.array(1.3), np.array(0.05))

    def k(A, B):
        d2 = (((A[:, None, :] - B[None, :, :]) / np.array([0.7, 2.0])) ** 2).sum(-1)
        return 1.3 * np.exp(-0.5 * d2)

    K = k(X, X) + 0.05 * np.eye(12)
    mean, var = gp_precision.gp_predictive(hyper, X, y, Xt)
    np.testing.assert_allclose(mean, k(Xt, X) @ np.linalg.solve(K, y), rtol=1e-10)
    np.testing.assert_allclose(var, np.diag(k(Xt, Xt) - k(Xt, X) @ np.linalg.solve(K, k(X, Xt))), rtol=1e-8)


def test_a_tiny_run_resumes_and_renders_its_table(tmp_path):
    write_sine_folds(tmp_path / "uci" / "tiny", n=40)
    out = tmp_path / "gp.jsonl"
    args = ["--data-dir", str(tmp_path / "uci"), "--datasets", "all", "--out", str(out)]
    assert gp_precision.main(args) == 0
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["dataset"] == "tiny" and rec["fold"] == 0 and rec["rmse_old"] > 0 and rec["rmse_new"] > 0
    assert rec["dtype_max_rel"] < 1e-6  # float32 and float64 working dtypes: one GP fit
    assert gp_precision.main(args) == 0 and len(out.read_text().splitlines()) == 1  # resumed: nothing to do
    table = tmp_path / "gp.md"
    assert gp_precision.main(["--out", str(out), "--table", str(table)]) == 0
    assert "| tiny | 0 | 32 |" in table.read_text() and "1 folds" in table.read_text()
