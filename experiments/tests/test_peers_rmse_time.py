"""experiments/peers_rmse_time.py: its NLPD formula against scipy's normal density, and a smoke run on a tiny
synthetic dataset (kronvi, BayesianRidge and, with GPJax installed, the SVGP): every record is appended, a
resumed run adds none (given a new budget, it fits that one only), and the table and the figure are rendered
from the file; and the SVGP's final q(u) step against the exact GP it must equal when every training row is an
inducing input."""

import importlib.util
import json
import sys

import numpy as np
import peers_rmse_time
import pytest
from scipy.stats import norm
from study_folds import write_sine_folds


def test_gaussian_nlpd_matches_scipy():
    rng = np.random.default_rng(0)
    y, mean, var = rng.normal(size=50), rng.normal(size=50), rng.uniform(0.1, 3.0, size=50)
    expected = -np.mean(norm.logpdf(y, loc=mean, scale=np.sqrt(var)))
    assert np.isclose(peers_rmse_time.gaussian_nlpd(y, mean, var), expected, rtol=1e-12)


def test_kronvi_budgets_fits_only_the_missing_ones():
    assert peers_rmse_time.kronvi_budgets(2000, [1000, 2000, 8000], set(), True) == [2000, 1000, 8000]
    assert peers_rmse_time.kronvi_budgets(2000, [1000, 8000, 1000], {1000}, False) == [8000]
    assert peers_rmse_time.kronvi_budgets(4000, [4000], set(), False) == []


def test_common_folds_leave_the_exact_gp_out():
    recs = [dict(dataset="a", fold=f, method=m, rmse=1.0 + f, nlpd=0.0, fit=1.0) for f in range(3)
            for m in ("kronvi b=8", "SVGP")] + [dict(dataset="a", fold=0, method="exact GP", rmse=0.5, nlpd=0.0, fit=2.0)]  # fmt: skip
    assert peers_rmse_time.common_folds(recs) == {"a": [0, 1, 2]}
    assert peers_rmse_time.summary(recs)["a"]["exact GP"] == ([0], 0.5, 0.0, 2.0)
    assert peers_rmse_time.summary(recs)["a"]["SVGP"] == ([0, 1, 2], 2.0, 0.0, 1.0)
    only = [r for r in recs if r["method"] == "exact GP"]
    assert peers_rmse_time.common_folds(only) == {"a": [0]}


def test_peers_rmse_time_smoke(tmp_path):
    write_sine_folds(tmp_path / "data" / "tiny", n=60, d=2)
    out = tmp_path / "peers.jsonl"
    has_gpjax = importlib.util.find_spec("gpjax") is not None
    methods = "kronvi,kronvi-default,bayesian-ridge" + (",svgp" if has_gpjax else "")
    args = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--methods", methods,
            "--sizes", "8", "--svgp-max-steps", "500", "--out", str(out), "--resume"]  # fmt: skip
    assert peers_rmse_time.main(args) == 0
    records = peers_rmse_time.read_records(out)
    expected = {"kronvi b=2000", "kronvi b=8", "kronvi default", "BayesianRidge"} | ({"SVGP"} if has_gpjax else set())
    assert {r["method"] for r in records} == expected
    assert all(np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and r["fit"] > 0 for r in records)
    if has_gpjax:
        (svgp,) = [r for r in records if r["method"] == "SVGP"]
        assert svgp["steps"] == 500 and len(svgp["trace"]) == 2
        # the final natural step lands on the optimal q(u): the full-batch ELBO cannot fall
        assert svgp["full_elbo_after"] >= svgp["full_elbo_before"] - 1e-6
    assert peers_rmse_time.main(args) == 0  # resumed: nothing left to run
    assert len(peers_rmse_time.read_records(out)) == len(records)
    lines = out.read_text().count("\n")
    more = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--methods", "kronvi",
            "--sizes", "4,8", "--out", str(out), "--resume"]  # fmt: skip
    assert peers_rmse_time.main(more) == 0  # a new budget: that one only, the default not refitted
    new = [json.loads(line) for line in out.read_text().splitlines()[lines:]]
    assert [r["method"] for r in new] == ["kronvi b=4"] and not new[0]["default"]
    assert new[0]["fit"] >= new[0]["gp_seconds"]  # the first budget fitted carries the GP step's seconds
    table, png = tmp_path / "peers.md", tmp_path / "peers.png"
    assert peers_rmse_time.main(["--out", str(out), "--table", str(table), "--plot", str(png)]) == 0
    (default,) = [r for r in records if r["method"] == "kronvi default"]
    assert (default["feature_map"], default["b"], default["gp_points"]) == ("fourier", 2000, 48)
    text = table.read_text()
    assert "| tiny | 0 | kronvi b=2000 |" in text and png.stat().st_size > 1000
    assert "| tiny | 0 | kronvi default (fourier, b = 2000, GP on 48 rows) |" in text
    assert {r["gp_points"] for r in records if r["method"].startswith("kronvi")} == {48}


def test_svgp_optimal_q_matches_the_exact_gp():
    """With every training row an inducing input, the SVGP's optimal q(u) (`_optimal_q`, the full-batch natural
    step) predicts as the exact GP with the same kernel and noise: the reference for the SVGP rows' moments."""
    pytest.importorskip("gpjax", reason="the SVGP rows need the optional `peers` extra (GPJax)")
    import gpjax as gpx
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(peers_rmse_time.BENCHMARKS))
    import bench_vs_peers

    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(30, 2)), rng.normal(size=(7, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=30)
    with jax.enable_x64(True):
        kernel = gpx.kernels.RBF(lengthscale=jnp.asarray([0.7, 1.3]), variance=jnp.asarray(1.5))
        prior = gpx.gps.Prior(mean_function=gpx.mean_functions.Zero(), kernel=kernel, jitter=1e-10)
        posterior = prior * gpx.likelihoods.Gaussian(obs_stddev=jnp.asarray(0.2))
        q = gpx.variational_families.WhitenedVariationalGaussian(model=posterior, inducing_inputs=jnp.asarray(X))

        def loss(model, batch):
            return -gpx.objectives.elbo(model, batch)

        q, before, after = bench_vs_peers._optimal_q(q, X, y, loss)
        svgp = q.condition(None)(jnp.asarray(Xt), covariance="diagonal")
        exact = posterior.condition(gpx.Dataset(X=jnp.asarray(X), y=jnp.asarray(y)[:, None]))(
            jnp.asarray(Xt), covariance="diagonal"
        )
        assert after <= before
        np.testing.assert_allclose(np.asarray(svgp.mean), np.asarray(exact.mean), atol=1e-6)
        np.testing.assert_allclose(np.asarray(svgp.variance), np.asarray(exact.variance), atol=1e-6)


def test_the_peers_are_compared_with_the_librarys_default_where_it_ran():
    """`against_default` pairs each peer with the `kronvi default` record of the fold where there is one, else with
    the Fourier budget marked default."""
    def rec(fold, method, rmse, **kw):
        return dict(dataset="a", fold=fold, method=method, rmse=rmse, nlpd=0.0, fit=1.0, **kw)

    records = [rec(0, "kronvi b=4", 2.0, default=True), rec(0, "kronvi default", 1.0), rec(0, "SVGP", 4.0),
               rec(1, "kronvi b=4", 3.0, default=True), rec(1, "SVGP", 4.0)]  # fmt: skip
    ((d, peer, pairs),) = peers_rmse_time.against_default(records)
    assert (d, peer) == ("a", "SVGP")
    assert [(a["method"], a["rmse"]) for a, _ in pairs] == [("kronvi default", 1.0), ("kronvi b=4", 3.0)]
    ((_, _, fourier),) = peers_rmse_time.against_default(records, library=False)
    assert [a["rmse"] for a, _ in fourier] == [2.0, 3.0]
