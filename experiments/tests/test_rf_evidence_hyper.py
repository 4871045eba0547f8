"""experiments/rf_evidence_hyper.py: its evidence is the dense Gaussian log density of the centred targets,
its gradient matches finite differences, and a tiny run writes its records, resumes and renders."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import rf_evidence_hyper
import scipy.stats
from study_folds import write_sine_folds

from kronvi.feature_learning import rff_lengthscale_map


def _problem(m=30, d=2, b=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=m)
    params = (np.log(np.array([0.7, 1.9])), np.log(1.3), np.log(0.05))
    return X, y, params, b


def test_evidence_is_the_dense_gaussian_density():
    X, y, params, b = _problem()
    with jax.enable_x64(True):
        fmap = rff_lengthscale_map(jax.random.key(3), X.shape[1], b // 2, dtype=jnp.float64)
        got = float(
            rf_evidence_hyper.neg_log_evidence(
                jax.tree.map(jnp.asarray, params), fmap, jnp.asarray(X), jnp.asarray(y)
            )
        )
        Phi = np.asarray(fmap(jnp.asarray(params[0]), jnp.asarray(X)))
    Phi = Phi - Phi.mean(0)
    yc = y - y.mean()
    v, s2 = np.exp(params[1]), np.exp(params[2])
    cov = v * Phi @ Phi.T + s2 * np.eye(len(y))
    ref = -scipy.stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(yc) / len(y)
    np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_evidence_gradient_matches_finite_differences():
    X, y, params, b = _problem()
    with jax.enable_x64(True):
        fmap = rff_lengthscale_map(jax.random.key(3), X.shape[1], b // 2, dtype=jnp.float64)
        Xj, yj = jnp.asarray(X), jnp.asarray(y)

        def f(x):
            return float(rf_evidence_hyper.neg_log_evidence((jnp.asarray(x[:2]), x[2], x[3]), fmap, Xj, yj))

        x0 = np.concatenate([params[0], [params[1], params[2]]])
        _, grad = rf_evidence_hyper._value_and_grad(
            (jnp.asarray(x0[:2]), jnp.asarray(x0[2]), jnp.asarray(x0[3])), fmap, Xj, yj
        )
        g = np.concatenate([np.asarray(grad[0]), [float(grad[1]), float(grad[2])]])
        h = 1e-6
        fd = np.array([(f(x0 + h * e) - f(x0 - h * e)) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)


def test_smoke_run_resumes_and_renders(tmp_path):
    write_sine_folds(tmp_path / "data" / "tiny", n=60, d=2)
    out = tmp_path / "r.jsonl"
    common = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "0", "--b-opt", "8",
              "--max-iter", "3", "--out", str(out)]  # fmt: skip
    assert rf_evidence_hyper.main([*common, "--rows", "30"]) == 0
    assert rf_evidence_hyper.main([*common, "--rows", "30,40", "--resume"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["variant"] for r in recs] == ["default", "rfev m=30 b_opt=8", "rfev m=40 b_opt=8"]
    for r in recs:
        assert np.isfinite(r["srmse"]) and np.isfinite(r["nlpd"]) and len(r["lengthscales"]) == 2
    assert recs[1]["evidence_end"] >= recs[1]["evidence_start"]
    table = tmp_path / "r.md"
    assert rf_evidence_hyper.main(["--out", str(out), "--table", str(table)]) == 0
    assert "| tiny | rfev m=30 b_opt=8 | 1 |" in table.read_text()
