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


def test_lml64_is_the_gaussian_log_density():
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(15, 3)), rng.normal(size=15)
    hyper = kronvi.inputs.GPHyperparameters(np.array([0.5, 1.0, 3.0]), np.array(2.0), np.array(0.1))
    d2 = (((X[:, None, :] - X[None, :, :]) / np.array([0.5, 1.0, 3.0])) ** 2).sum(-1)
    K = 2.0 * np.exp(-0.5 * d2) + 0.1 * np.eye(15)
    np.testing.assert_allclose(
        gp_precision.lml64(hyper, X, y), multivariate_normal(cov=K).logpdf(y), rtol=1e-12
    )


def test_gp_step_rows_are_the_float64_standardized_rows():
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.normal(3.0, 5.0, 50), np.full(50, 7.0), rng.uniform(0, 1e-3, 50)])
    y = rng.normal(10.0, 2.0, 50)
    Xs, yc = gp_precision.gp_step_rows(X, y)
    np.testing.assert_allclose(Xs.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(Xs.std(0), [1, 0, 1], atol=1e-12)  # a constant column keeps scale 1
    np.testing.assert_allclose(yc, y - y.mean(), rtol=1e-15)
    std = kronvi.inputs.fit_standardizer(X)  # the library's rule, in float32
    np.testing.assert_allclose(Xs, np.asarray(kronvi.inputs.standardize(std, X)), atol=1e-5)


def test_a_tiny_lml_run_resumes_and_renders_its_table(tmp_path):
    write_sine_folds(tmp_path / "uci" / "tiny", n=40)
    out = tmp_path / "lml.jsonl"
    args = ["--lml", "--data-dir", str(tmp_path / "uci"), "--datasets", "tiny", "--out", str(out)]
    assert gp_precision.main(args) == 0
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["gp_rows"] == rec["n"] == 32 and rec["same_rows"] and not rec["screened"]
    assert [s["start"] for s in rec["starts_new"]] == [0, 1, 2, 3]  # no screening: every start on all rows
    chosen = rec["starts_new"][rec["start_new"]]
    assert abs(chosen["lml64"] - rec["lml_new"]) < 1e-3 and abs(chosen["lml_fit"] - rec["lml_new"]) < 1e-3
    assert rec["lml_change"] == rec["lml_new"] - rec["lml_old"] and rec["evaluator_gap"] < 1e-6
    assert all(s["converged"] for s in rec["starts_ref"])  # the reference runs to the gradient-norm test
    assert gp_precision.main(args) == 0 and len(out.read_text().splitlines()) == 1  # resumed: nothing to do
    table = tmp_path / "lml.md"
    assert gp_precision.main(["--lml", "--out", str(out), "--table", str(table), "--rmse-from", "none"]) == 0
    text = table.read_text()
    assert "| tiny | 32 | – |" in text and "1 datasets" in text


def test_a_tiny_proposal_run_renders_beside_the_lml_and_main_records(tmp_path):
    write_sine_folds(tmp_path / "uci" / "tiny", n=40)
    common = ["--data-dir", str(tmp_path / "uci"), "--datasets", "tiny"]
    main, lml, prop = (tmp_path / f"{name}.jsonl" for name in ("main", "lml", "prop"))
    assert gp_precision.main([*common, "--out", str(main)]) == 0
    assert gp_precision.main(["--lml", *common, "--out", str(lml)]) == 0
    proposal = ["--lml", "--proposal", '{"gain_tol": 0.0}']
    assert gp_precision.main([*proposal, *common, "--out", str(prop)]) == 0
    (rec,) = [json.loads(line) for line in prop.read_text().splitlines()]
    assert rec["proposal"] == {"gain_tol": 0.0} and rec["rmse_prop"] > 0 and "lml_old" not in rec
    assert all(s["converged"] for s in rec["starts_prop"])  # gain_tol=0: the gradient-norm test stops them
    (ref,) = [json.loads(line) for line in lml.read_text().splitlines()]
    assert (
        abs(rec["lml_prop"] - ref["lml_ref"]) < 1e-3
    )  # converged from the same starts: the reference's optimum
    table = tmp_path / "prop.md"
    args = ["--out", str(prop), "--table", str(table), "--lml-from", str(lml), "--rmse-from", str(main)]
    assert gp_precision.main([*proposal, *args]) == 0
    text = table.read_text()
    assert "| tiny | " in text and "1 datasets" in text and '`GPOptions(**{"gain_tol": 0.0})`' in text
