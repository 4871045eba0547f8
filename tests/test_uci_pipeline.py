"""The UCI study pipeline (experiments/uci.py) on tiny synthetic data: fold handling, one-pass K-fold
statistics, the exact predictive density against enumeration, and the command-line JSON contract."""

import gzip
import importlib.util
import itertools
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi

_PATH = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "uci.py"


@pytest.fixture(scope="module")
def uci():
    spec = importlib.util.spec_from_file_location("kronvi_uci_study", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _write_dataset(folder, n=60, d=3, K=5, seed=0, constant_column=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if constant_column:
        X[:, -1] = 7.0
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    ids = rng.permutation(n) % K
    mask = np.eye(K, dtype=int)[ids]
    folder.mkdir(parents=True)
    with gzip.open(folder / "data.csv.gz", "wt") as f:
        np.savetxt(f, np.column_stack([X, y]), delimiter=",")
    with gzip.open(folder / "test_mask.csv.gz", "wt") as f:
        np.savetxt(f, mask, delimiter=",", fmt="%d")
    return X, y, mask


def test_folds_partition_the_rows_and_train_is_the_complement(uci, tmp_path):
    X, y, mask = _write_dataset(tmp_path / "toy")
    seen = np.zeros(len(y), int)
    for k in range(mask.shape[1]):
        train, test = uci.fold_masks(mask, k)
        np.testing.assert_array_equal(test, mask[:, k] == 1)
        np.testing.assert_array_equal(train, ~test)
        seen += test
    np.testing.assert_array_equal(seen, 1)  # every row is a test row exactly once


def test_fold_standardizes_with_training_statistics_and_constant_columns_stay_finite(uci, tmp_path):
    X, y, mask = _write_dataset(tmp_path / "toy")
    train, test = uci.fold_masks(mask, 2)
    st = kronvi.fit_standardizer(jnp.asarray(X[train], jnp.float32))
    fold = uci.Fold(X, y, train, test, st, float(np.mean(y[train])))
    assert np.all(np.isfinite(np.asarray(fold.X_train))) and np.all(np.isfinite(np.asarray(fold.X_test)))
    np.testing.assert_allclose(np.asarray(fold.X_train[:, 0]).mean(), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fold.X_train[:, 0]).std(), 1.0, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(fold.X_test[:, -1]), 0.0)  # constant column -> zeros
    np.testing.assert_allclose(float(jnp.mean(fold.y_train)), 0.0, atol=1e-6)
    assert fold.n_train == int(train.sum()) and fold.y_test.shape == (int(test.sum()),)


def test_shared_hyper_one_pass_equals_per_fold_statistics(uci, tmp_path):
    X, y, mask = _write_dataset(tmp_path / "toy", n=80)
    cfg = uci.StudyConfig(num_frequencies=8, gp_points=40)
    shared = uci.SharedHyper(X, y, mask, cfg, jax.random.key(0))
    fmap = lambda Z: kronvi.rff_features(shared.feats, Z)  # noqa: E731
    for k in range(mask.shape[1]):
        train, test = uci.fold_masks(mask, k)
        fold, _, _, stats, _, _, _, cv_stats = shared.fold(X, y, train, test, k)
        assert cv_stats is None  # the noise-grid CV runs only in the per-fold protocol
        direct = kronvi.regression_stats(fmap(fold.X_train), fold.y_train)
        for a, b in zip(stats, direct, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-4)


def test_nlpd_subset_is_deterministic_and_capped(uci):
    a = uci.nlpd_subset(1000, 100, 0, 3)
    np.testing.assert_array_equal(a, uci.nlpd_subset(1000, 100, 0, 3))
    assert len(a) == 100 and len(np.unique(a)) == 100 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, uci.nlpd_subset(1000, 100, 0, 4))
    np.testing.assert_array_equal(uci.nlpd_subset(30, 100, 0, 0), np.arange(30))


def _enumerated_log_density(values, probs, alpha, qs, svals, Phi, y):
    b, m = values.shape
    out = np.zeros(len(y))
    for cfg in itertools.product(range(m), repeat=b):
        w = values[np.arange(b), cfg]
        pq = sum(a * np.prod(p[np.arange(b), cfg]) for a, p in zip(alpha, probs, strict=True))
        f = Phi @ w
        for s, q in zip(svals, qs, strict=True):
            out += pq * q * np.exp(-0.5 * (y - f) ** 2 / s) / np.sqrt(2 * np.pi * s)
    return np.log(out)


@pytest.mark.parametrize("r", [1, 2])
def test_discrete_log_density_matches_enumeration_including_far_tails(uci, dtype, r):
    rng = np.random.default_rng(r)
    b, m, S = 3, 5, 3
    pw = kronvi.gaussian_prior(b, 0.8, levels=m, dtype=dtype)
    pn = kronvi.noise_prior(0.1, levels=S, span=4.0, dtype=dtype)
    q = kronvi.Mixture(
        jnp.asarray(rng.normal(size=(r, b, m)) * 2, dtype), jnp.asarray(rng.normal(size=r), dtype)
    )
    qn = kronvi.MeanField(jnp.asarray(rng.normal(size=(1, S)), dtype))
    Phi = rng.normal(size=(10, b))
    y = np.concatenate([rng.normal(size=8) * 2, [12.0, -15.0]])  # two points far in the tails
    want = _enumerated_log_density(
        np.asarray(pw.values, np.float64), np.asarray(q.probs, np.float64), np.asarray(q.weights, np.float64),
        np.asarray(qn.probs[0], np.float64), np.asarray(pn.values[0], np.float64), Phi, y,
    )  # fmt: skip
    assert want.min() < -100  # the tail points are beyond a non-tilted float32 quadrature's floor
    x64 = np.dtype(dtype) == np.float64
    cfg = uci.StudyConfig(nlpd_tail_tol=1e-12 if x64 else 1e-4)  # float64: quadrature converged to ~1e-12
    got = uci.discrete_log_density(
        q.probs, q.log_weights, qn, pw, pn, jnp.asarray(Phi, dtype), jnp.asarray(y, dtype), cfg=cfg
    )
    rtol = 1e-9 if x64 else 2e-4
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def test_discrete_log_density_matches_the_library_for_a_wide_model(uci):
    b, m = 400, 15
    pw = kronvi.gaussian_prior(b, 0.7, levels=m)
    pn = kronvi.noise_prior(0.05, levels=15)
    q_w = kronvi.MeanField(jax.random.normal(jax.random.key(1), (b, m)) * 3)
    q_n = kronvi.MeanField(jax.random.normal(jax.random.key(3), (1, 15)))
    Phi = jax.random.normal(jax.random.key(1), (20, b)) / jnp.sqrt(b / 2)
    y = Phi @ kronvi.predict_regression(q_w, q_n, pw, pn, jnp.eye(b))[0] + 0.3 * jax.random.normal(
        jax.random.key(2), (20,)
    )
    want, _ = kronvi.predictive_log_density(q_w, q_n, pw, pn, Phi, y, num_nodes=512)
    got = uci.discrete_log_density(q_w.probs[None], jnp.zeros(1), q_n, pw, pn, Phi, y, cfg=uci.StudyConfig())
    np.testing.assert_allclose(got, np.asarray(want), atol=2e-4)


def test_command_line_writes_one_record_per_dataset_and_method(uci, tmp_path):
    _write_dataset(tmp_path / "data" / "big", n=70, seed=1)
    _write_dataset(tmp_path / "data" / "small", n=40, seed=2)
    out = tmp_path / "out.json"
    argv = [
        "--data-dir", str(tmp_path / "data"), "--datasets", "big,small", "--methods", "all", "--json", str(out),
        "--num-features", "16", "--sgd-steps", "3", "--sgd-samples", "8", "--lb-iters", "2",
        "--reparam-steps", "5", "--max-folds", "2",
    ]  # fmt: skip
    assert uci.main(argv) == 0
    recs = json.loads(out.read_text())
    assert [(r["dataset"], r["method"]) for r in recs] == [
        (d, m)
        for d in ("small", "big")
        for m in uci.METHODS  # small datasets first
    ]
    keys = {"dataset", "method", "n", "d", "rmse_mean", "rmse_sd", "nlpd_mean", "nlpd_sd", "sparsity_pct"}
    keys |= {"fit_seconds", "stats_seconds", "init_seconds"}
    for r in recs:
        assert keys <= set(r)
        assert r["d"] == 3 and r["folds"] == 2 and np.isfinite(r["rmse_mean"]) and np.isfinite(r["nlpd_mean"])
    # --resume keeps the records and runs nothing new
    assert uci.main(argv + ["--resume"]) == 0
    assert len(json.loads(out.read_text())) == len(recs)
    # DIRECT's noise grid is chosen per fold by inner CV among the spans 10, 3, 1 (the default).
    for r in recs:
        if r["method"].startswith("direct-"):
            assert set(r["noise_span_counts"]) <= {"1.0", "3.0", "10.0"}
            assert sum(r["noise_span_counts"].values()) == 2 and r["select_seconds"] > 0
            assert all(len(f["cv_log_density"]) == 3 for f in r["per_fold"])
        if r["method"] == "direct-mix5-sgd":  # default local-expectation gradient, 30000 eval draws
            assert r["config"]["sgd_samples"] == 8 and r["config"]["sgd_init_noise"] == 0.03
            for f in r["per_fold"]:
                assert f["estimator"] == "local" and f["eval_samples"] == 30000
                assert f["fallback_to_mf"] == (not f["mix_elbo"] >= f["mf_elbo"])
        if r["method"] == "direct-mix5-lb":  # fitted in float64, tolerance 0, certified-bound fallback
            assert r["config"]["lb_precision"] == "float64" and r["config"]["lb_tol"] == 0.0
            for f in r["per_fold"]:
                assert f["fit_precision"] == "float64"
                assert f["fallback_to_mf"] == (not f["mix_bound"] >= f["mf_elbo"])
    args = uci.parse_args(argv + ["--sgd-estimator", "stratified-pathwise", "--sgd-init-noise", "0.1"])
    assert (args.sgd_estimator, args.sgd_init_noise) == ("stratified-pathwise", 0.1)
    args = uci.parse_args(argv + ["--lb-precision", "float32", "--lb-tol", "1e-6"])
    assert (args.lb_precision, args.lb_tol) == ("float32", 1e-6)
    with pytest.raises(SystemExit):
        uci.parse_args(argv + ["--lb-precision", "float16"])
    with pytest.raises(SystemExit):
        uci.parse_args(argv + ["--sgd-estimator", "pathwise"])
    with pytest.raises(SystemExit, match="per-fold"):
        uci.main(argv + ["--shared-hyper"])
    with pytest.raises(SystemExit, match=">= 1"):
        uci.main(argv + ["--noise-cv", "0.5,10"])


def test_per_fold_inner_statistics_sum_to_the_training_statistics(uci, tmp_path):
    X, y, mask = _write_dataset(tmp_path / "toy", n=80)
    cfg = uci.StudyConfig(num_frequencies=8, gp_points=40, gp_restarts=2)
    train, test = uci.fold_masks(mask, 1)
    fold, _, feats, stats, _, _, _, (cv_train, cv_test) = uci.prepare_fold_per_fold(
        X, y, train, test, cfg, jax.random.key(0)
    )
    assert cv_train.PhitPhi.shape == (cfg.cv_folds, 16, 16)
    direct = kronvi.regression_stats(kronvi.rff_features(feats, fold.X_train), fold.y_train)
    for a, b in zip(stats, direct, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(np.asarray(cv_train.n + cv_test.n), float(fold.n_train))


def test_merge_records_replaces_rerun_pairs_and_keeps_the_rest():
    spec = importlib.util.spec_from_file_location("kronvi_merge_records", _PATH.parent / "merge_records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = [
        {"dataset": "a", "method": "mf", "v": 1},
        {"dataset": "a", "method": "mix", "v": 2},
        {"dataset": "b", "method": "mix", "v": 3},
    ]
    rerun = [{"dataset": "b", "method": "mix", "v": 30}, {"dataset": "c", "method": "mix", "v": 40}]
    assert [r["v"] for r in mod.merge(base, rerun)] == [1, 2, 30, 40]
    with pytest.raises(ValueError, match="twice"):
        mod.merge(base, rerun + rerun[:1])
    # the mixture settings may differ, nothing else
    cfg = {"num_frequencies": 1000, "sgd_samples": 3000}
    base = [dict(r, config=cfg) for r in base]
    ok = [dict(rerun[0], config=dict(cfg, sgd_samples=300, lb_tol=0.0))]
    assert mod.merge(base, ok)[2]["v"] == 30
    with pytest.raises(ValueError, match="configuration"):
        mod.merge(base, [dict(rerun[0], config=dict(cfg, num_frequencies=500))])
