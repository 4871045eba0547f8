"""The UCI study (experiments/uci.py) and its renderer on tiny synthetic data: fold handling, the mixture's
predictive density against enumeration, the command-line JSON contract, and what an existing JSON accepts
(records carry their settings; mismatches are refused or rerun; writes are atomic)."""

import gzip
import itertools
import json
import pathlib
import shlex
import stat
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import render_uci
import study_cli
import uci
from study_folds import write_sine_folds

import kronvi

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1]


def _write_dataset(folder, n=60, **kw):
    return write_sine_folds(folder, n=n, constant_column=True, **kw)


def _argv(data, out, *extra, methods="direct-mf", datasets="small"):
    return [
        "--data-dir", str(data), "--datasets", datasets, "--methods", methods, "--json", str(out),
        "--num-features", "16", "--sgd-steps", "3", "--sgd-samples", "8", "--lb-iters", "2",
        "--reparam-steps", "5", "--max-folds", "1", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """One run of every method on one fold of a tiny dataset: ``(data dir, argv, records)``."""
    root = tmp_path_factory.mktemp("study")
    _write_dataset(root / "data" / "small", n=40, seed=2)
    out = root / "all.json"
    argv = _argv(root / "data", out, methods="all")
    assert uci.main(argv) == 0
    return root / "data", argv, json.loads(out.read_text())


def test_folds_partition_the_rows_and_train_is_the_complement(tmp_path):
    X, y, mask = _write_dataset(tmp_path / "toy")
    seen = np.zeros(len(y), int)
    for k in range(mask.shape[1]):
        train, test = uci.fold_masks(mask, k)
        np.testing.assert_array_equal(test, mask[:, k] == 1)
        np.testing.assert_array_equal(train, ~test)
        seen += test
    np.testing.assert_array_equal(seen, 1)  # every row is a test row exactly once


def test_nlpd_subset_is_deterministic_capped_or_all():
    a = uci.nlpd_subset(1000, 100, 0, 3)
    np.testing.assert_array_equal(a, uci.nlpd_subset(1000, 100, 0, 3))
    assert len(a) == 100 and len(np.unique(a)) == 100 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, uci.nlpd_subset(1000, 100, 0, 4))
    np.testing.assert_array_equal(uci.nlpd_subset(30, 100, 0, 0), np.arange(30))
    np.testing.assert_array_equal(uci.nlpd_subset(1000, None, 0, 0), np.arange(1000))
    assert uci.parse_args(["--json", "x", "--nlpd-points", "all"]).nlpd_points is None
    assert uci.parse_args(["--json", "x"]).nlpd_points is None  # every test row by default
    assert uci.parse_args(["--json", "x", "--nlpd-points", "100"]).nlpd_points == 100
    with pytest.raises(SystemExit):
        uci.parse_args(["--json", "x", "--nlpd-points", "0"])


def test_datasets_are_listed_small_to_large(tmp_path):
    _write_dataset(tmp_path / "b_big", n=70)
    _write_dataset(tmp_path / "a_small", n=40)
    assert [p.name for p in uci.list_datasets(tmp_path, "all")] == ["a_small", "b_big"]
    assert [p.name for p in uci.list_datasets(tmp_path, "b_big,a_small")] == ["a_small", "b_big"]
    with pytest.raises(study_cli.UsageError, match="no dataset folder"):
        uci.list_datasets(tmp_path, "missing")


def test_study_fold_setup_standardizes_with_training_rows_and_sums_inner_statistics(study):
    data, argv, _ = study
    X, y, mask = kronvi.load_uci(data / "small")
    cfg = uci.config_from_args(uci.parse_args(argv))  # the study's compiled shapes
    setup = uci.fold_setup("small", 1, cfg, data_dir=data)
    fold = setup.fold
    train, test = uci.fold_masks(mask, 1)
    np.testing.assert_allclose(np.asarray(fold.X[:, 0]).mean(), 0.0, atol=1e-5)
    np.testing.assert_allclose(float(jnp.mean(fold.y)), 0.0, atol=1e-6)
    assert setup.Phi_test.shape == (int(test.sum()), 16) and np.all(np.isfinite(np.asarray(setup.Phi_test)))
    np.testing.assert_allclose(np.asarray(setup.y_test), y[test] - y[train].mean(), atol=1e-5)
    cv_train, cv_test = fold.cv_stats
    assert cv_train.PhitPhi.shape == (cfg.direct.cv_folds, 16, 16)
    direct = kronvi.stats.regression_stats(kronvi.inputs.rff_features(fold.features, fold.X), fold.y)
    for a, b in zip(fold.stats, direct, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(np.asarray(cv_train.n + cv_test.n), float(train.sum()))


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
def test_discrete_log_density_matches_enumeration(r):
    rng = np.random.default_rng(r)
    b, m, S = 3, 5, 3
    pw = kronvi.model.gaussian_prior(b, 0.8, levels=m)
    pn = kronvi.model.noise_prior(0.1, levels=S, span=4.0)
    q = kronvi.mixtures.Mixture(jnp.asarray(rng.normal(size=(r, b, m)) * 2), jnp.asarray(rng.normal(size=r)))
    if r == 1:
        q = kronvi.model.MeanField(q.logits[0])
    qn = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(1, S))))
    Phi = rng.normal(size=(10, b))
    y = rng.normal(size=10) * 2
    probs = np.asarray(q.probs, np.float64).reshape(-1, b, m)
    alpha = [1.0] if r == 1 else np.asarray(q.weights, np.float64)
    want = _enumerated_log_density(
        np.asarray(pw.values, np.float64), probs, alpha, np.asarray(qn.probs[0], np.float64),
        np.asarray(pn.values[0], np.float64), Phi, y,
    )  # fmt: skip
    got, err = uci.discrete_log_density(
        q, qn, pw, pn, jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32)
    )
    # within the density's own relative error bound (the study's tol 1e-2), and that bound is met
    assert np.isfinite(err) and 0 <= err <= 1e-2
    assert np.max(np.abs(got - want)) <= 1.5 * err + 1e-5


def test_command_line_writes_one_record_per_dataset_and_method_with_its_settings(study):
    _, argv, recs = study
    assert [(r["dataset"], r["method"]) for r in recs] == [("small", m) for m in uci.METHODS]
    keys = {"dataset", "method", "n", "d", "rmse_mean", "rmse_sd", "nlpd_mean", "nlpd_sd", "sparsity_pct"}
    keys |= {"fit_seconds", "stats_seconds", "init_seconds", "settings"}
    want = uci.study_settings(uci.config_from_args(uci.parse_args(argv)), seed=0, max_folds=1)
    for r in recs:
        assert keys <= set(r)
        assert r["settings"] == want
        assert r["d"] == 3 and r["folds"] == 1 and np.isfinite(r["rmse_mean"]) and np.isfinite(r["nlpd_mean"])
    assert want["direct"]["num_frequencies"] == 8 and want["max_folds"] == 1
    assert want["study"]["sgd_samples"] == 8 and want["study"]["nlpd_points"] is None
    for r in recs:
        if r["method"] in ("direct-mf", "exact-blr"):  # the default recipe: eigenbasis, evidence noise
            assert r["settings"]["default"]["basis"] == "eigen"
            assert r["sparsity_pct"] == 0.0
            assert all(f["eigen_stats_seconds"] > 0 for f in r["per_fold"])
            if r["method"] == "direct-mf":
                assert all(0 <= f["nlpd_max_rel_error"] < 1e-2 for f in r["per_fold"])
            continue
        if r["method"].startswith("direct-"):  # noise grid chosen per fold among the spans 10, 3, 1
            assert set(r["noise_span_counts"]) <= {"1.0", "3.0", "10.0"}
            assert all(len(f["cv_log_density"]) == 3 for f in r["per_fold"])
            assert all(0 <= f["nlpd_max_rel_error"] < 1e-2 for f in r["per_fold"])
        if r["method"] == "direct-mix5-sgd":  # default local-expectation gradient, 30000 eval draws
            for f in r["per_fold"]:
                assert f["estimator"] == "local" and f["eval_samples"] == 30000
                assert f["fallback_to_mf"] == (not f["mix_elbo"] >= f["mf_elbo"])
        if r["method"] == "direct-mix5-lb":  # fitted in float64, tolerance 0, certified-bound fallback
            assert (
                r["settings"]["study"]["lb_precision"] == "float64"
                and r["settings"]["study"]["lb_tol"] == 0.0
            )
            for f in r["per_fold"]:
                assert f["fit_precision"] == "float64"
                assert f["fallback_to_mf"] == (not f["mix_bound"] >= f["mf_elbo"])


def test_command_line_options_parse_and_bad_values_exit(capsys):
    argv = ["--json", "x"]
    args = uci.parse_args(argv + ["--sgd-estimator", "stratified-pathwise", "--sgd-init-noise", "0.1"])
    assert (args.sgd_estimator, args.sgd_init_noise) == ("stratified-pathwise", 0.1)
    args = uci.parse_args(argv + ["--lb-precision", "float32", "--lb-tol", "1e-6"])
    assert (args.lb_precision, args.lb_tol) == ("float32", 1e-6)
    for bad in (["--lb-precision", "float16"], ["--sgd-estimator", "pathwise"], ["--resume", "--overwrite"]):
        with pytest.raises(SystemExit):
            uci.parse_args(argv + bad)
    assert uci.main(argv + ["--noise-cv", "0.5,10"]) == 2
    assert ">= 1" in capsys.readouterr().err
    assert uci.main(argv + ["--rerun-mismatched"]) == 2
    assert "needs --resume" in capsys.readouterr().err


# --- an existing JSON: refused, resumed with the same settings, rerun or overwritten


@pytest.fixture
def existing(study, tmp_path):
    """A JSON of one direct-mf record of 'small' made with the fixture's settings: ``(data, path, text)``."""
    data, _, recs = study
    path = tmp_path / "out.json"
    path.write_text(json.dumps([r for r in recs if (r["dataset"], r["method"]) == ("small", "direct-mf")]))
    return data, path, path.read_text()


def test_an_existing_json_without_resume_or_overwrite_is_refused_and_left_alone(existing, capsys):
    data, path, text = existing
    assert uci.main(_argv(data, path)) == uci.EXIT_REFUSED == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--resume" in err and "--overwrite" in err
    assert path.read_text() == text


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--num-features", "12"], "direct.num_frequencies: 8 -> 6"),
        (["--max-folds", "2"], "max_folds: 1 -> 2"),
    ],
)
def test_resume_refuses_records_made_with_other_settings_naming_them(existing, capsys, extra, named):
    data, path, text = existing
    assert uci.main(_argv(data, path, "--resume", *extra)) == 2
    err = capsys.readouterr().err
    assert "small/direct-mf" in err and named in err
    assert path.read_text() == text


def test_resume_refuses_records_that_predate_settings(existing, capsys):
    data, path, _ = existing
    old = json.loads(path.read_text())
    for r in old:
        r["config"] = r.pop("settings")["study"]  # the shape of the records made before settings
    path.write_text(json.dumps(old))
    assert uci.main(_argv(data, path, "--resume")) == 2
    assert "no settings" in capsys.readouterr().err


def test_resume_with_the_same_settings_keeps_the_records_and_runs_only_missing_pairs(existing):
    data, path, text = existing
    assert uci.main(_argv(data, path, "--resume")) == 0  # nothing to run
    assert path.read_text() == text
    assert uci.main(_argv(data, path, "--resume", methods="direct-mf,gauss-mf-exact")) == 0
    recs = json.loads(path.read_text())
    assert [r["method"] for r in recs] == ["direct-mf", "gauss-mf-exact"]
    assert recs[0] == json.loads(text)[0]


def test_rerun_mismatched_replaces_only_the_pairs_this_run_covers(existing, capsys):
    data, path, text = existing
    stale = json.loads(text)[0]
    other = dict(stale, dataset="big")
    path.write_text(json.dumps([stale, other]))
    argv = _argv(data, path, "--resume", "--rerun-mismatched", "--seed", "1")
    assert uci.main(argv) == 2  # big/direct-mf is not in this run: refused, not dropped
    assert "big/direct-mf" in capsys.readouterr().err
    path.write_text(json.dumps([stale]))
    assert uci.main(argv) == 0
    (rec,) = json.loads(path.read_text())
    assert rec["settings"]["seed"] == 1 and rec["rmse_mean"] != stale["rmse_mean"]


def test_overwrite_replaces_the_json(existing):
    data, path, _ = existing
    assert uci.main(_argv(data, path, "--overwrite", methods="gauss-mf-exact")) == 0
    assert [r["method"] for r in json.loads(path.read_text())] == ["gauss-mf-exact"]


def test_resume_runs_on_other_datasets_sharing_one_json_keep_each_others_records(tmp_path, monkeypatch):
    data = tmp_path / "data"
    for name in ("small", "other"):
        _write_dataset(data / name, n=40)
    out = tmp_path / "out.json"

    def fake(folder, methods, cfg, *, settings, **kwargs):
        if folder.name == "small":  # meanwhile, a run over 'other' started together writes its record
            uci.write_merged(out, [dict(dataset="other", method="direct-mf", settings=settings)])
        return [dict(dataset=folder.name, method=m, settings=settings) for m in methods]

    monkeypatch.setattr(uci, "run_dataset", fake)
    assert uci.main(_argv(data, out, "--resume", datasets="small")) == 0
    pairs = [(r["dataset"], r["method"]) for r in json.loads(out.read_text())]
    assert pairs == [("small", "direct-mf"), ("other", "direct-mf")]
    out.write_text("[oops")  # someone broke the file meanwhile: this run's records go beside it
    with pytest.raises(uci.RefusedError, match=r"out\.[0-9]+\.json"):
        uci.write_merged(out, [dict(dataset="small", method="direct-mf")])
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("out.") and p.name != "out.json"]
    assert json.loads(aside.read_text()) == [dict(dataset="small", method="direct-mf")]
    assert out.read_text() == "[oops"


def test_writes_are_atomic(tmp_path):
    path = tmp_path / "out.json"
    uci.write_json(path, [{"a": 1}])
    with pytest.raises(TypeError):
        uci.write_json(path, [{"a": object()}])  # fails halfway through serializing
    assert json.loads(path.read_text()) == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left behind


# --- the renderer reads what the study writes, and the committed records made before settings


def test_render_reads_the_study_json(study, tmp_path):
    data, argv, recs = study
    path = tmp_path / "uci.json"
    path.write_text(json.dumps(recs))
    out = tmp_path / "table.md"
    argv = ["--json", str(path), "--out", str(out), "--plot", "", "--mixture-out", str(tmp_path / "mix.md")]
    assert render_uci.main(argv) == 0
    text = out.read_text()
    assert "predate" not in text and "different settings" not in text
    assert "| small |" in text


def test_render_takes_a_comma_list_whose_later_records_replace_earlier_ones(study, tmp_path):
    _, _, recs = study
    first, later, out = tmp_path / "first.json", tmp_path / "later.json", tmp_path / "table.md"
    first.write_text(json.dumps(recs))
    changed = [dict(r, rmse_mean=123.456) for r in recs if r["method"] == "direct-mf"][:1]
    later.write_text(json.dumps(changed))
    argv = ["--json", f"{first},{later}", "--out", str(out), "--plot", "", "--mixture-out", ""]
    assert render_uci.main(argv) == 0
    alone = tmp_path / "alone.md"
    assert render_uci.main(["--json", str(first), "--out", str(alone), "--plot", "", "--mixture-out", ""]) == 0
    text = out.read_text()
    assert "123.5" in text and "123.5" not in alone.read_text()
    assert text.count("| small |") == alone.read_text().count("| small |")  # replaced, not added


def test_the_log_records_the_command_and_the_table_quotes_it(tmp_path):
    data = tmp_path / "data"
    _write_dataset(data / "small", n=40, seed=2)
    out, log = tmp_path / "o.json", tmp_path / "run.log"
    argv = _argv(data, out, "--log", str(log), methods="gauss-mf-exact")
    assert uci.main(argv) == 0
    command = "python experiments/uci.py " + shlex.join(argv)
    assert f"# command: {command}" in log.read_text().splitlines()
    with log.open("a") as f:  # a second part killed before its end: not quoted
        f.write("# started later\n# command: python experiments/uci.py --killed\n")
    table = tmp_path / "table.md"
    render = ["--json", str(out), "--log", str(log), "--out", str(table), "--plot", "", "--mixture-out", ""]
    assert render_uci.main(render) == 0
    text = table.read_text()
    assert f"`run.log` was written by: `{command}`." in text and "--killed" not in text


def test_render_marks_records_made_before_settings(study, tmp_path):
    _, _, recs = study
    old = [{k: v for k, v in r.items() if k != "settings"} if i < 2 else r for i, r in enumerate(recs)]
    path, out = tmp_path / "old.json", tmp_path / "table.md"
    path.write_text(json.dumps(old))
    argv = ["--json", str(path), "--out", str(out), "--plot", "", "--mixture-out", ""]
    assert render_uci.main(argv) == 0
    assert f"2 of {len(recs)} records predate per-record settings" in out.read_text()


def test_the_committed_headline_study_is_one_run_of_every_method_on_every_dataset():
    recs = json.loads((EXPERIMENTS / "results" / "uci.json").read_text())
    assert render_uci.provenance(recs) == []  # every record has settings, all the same
    pairs = {(r["dataset"], r["method"]) for r in recs}
    datasets, methods = {d for d, _ in pairs}, {m for _, m in pairs}
    assert len(datasets) == 28 and len(pairs) == len(recs) == len(datasets) * len(methods)


# --- bad options, bad data and outputs that would be lost: one line, exit 2, before any compute


@pytest.fixture
def no_compute(monkeypatch):
    def run_dataset(*args, **kwargs):
        raise AssertionError("the study started computing")

    monkeypatch.setattr(uci, "run_dataset", run_dataset)


def _fake_records(monkeypatch, interrupt_at=None):
    """``run_dataset`` returns one record per method at once; raises KeyboardInterrupt on dataset
    ``interrupt_at``."""
    calls = []

    def run_dataset(folder, methods, cfg, *, settings, **kwargs):
        calls.append(folder.name)
        if folder.name == interrupt_at:
            raise KeyboardInterrupt
        return [dict(dataset=folder.name, method=m, settings=settings) for m in methods]

    monkeypatch.setattr(uci, "run_dataset", run_dataset)
    return calls


def _one_error_line(err, message):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uci.py: error: ") and message in lines[0], err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-folds", "0"], "--max-folds must be >= 1, got 0"),
        (["--noise-span", "0.5"], "--noise-span must be a finite number > 1, got 0.5"),
        (["--noise-span", "nan"], "--noise-span must be a finite number > 1, got nan"),
        (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
        (["--seed", "99999999999999999999"], "--seed must be in [0, 4294967295]"),
        (["--num-features", "0"], "--num-features must be >= 2, got 0"),
        (["--num-features", "15"], "--num-features must be an even number"),
        (["--sgd-steps", "0"], "--sgd-steps must be >= 1, got 0"),
        (["--sgd-samples", "0"], "--sgd-samples must be >= 1, got 0"),
        (["--reparam-steps", "0"], "--reparam-steps must be >= 1, got 0"),
        (["--lb-tol", "nan"], "--lb-tol must be finite, got nan"),
        (["--direct-starts", "prior,bogus"], "--direct-starts must be a comma list of prior, gaussian"),
        (["--data-dir", "/nonexistent/uci"], "--data-dir '/nonexistent/uci': no such folder"),
        (["--datasets", "small,missing"], "no dataset folder"),
        (["--methods", "elrg-0"], "ranks must be in [1, --num-features (16)]"),
    ],
)
def test_bad_options_are_one_line_errors_before_any_compute(study, tmp_path, no_compute, capsys, extra, message):
    data, _, _ = study
    out = tmp_path / "out.json"
    assert uci.main(_argv(data, out, *extra)) == 2
    _one_error_line(capsys.readouterr().err, message)
    assert not out.exists()


def test_every_bad_option_gets_its_own_line(study, tmp_path, no_compute, capsys):
    data, _, _ = study
    assert uci.main(_argv(data, tmp_path / "o.json", "--max-folds", "0", "--sgd-steps", "0", "--seed", "-2")) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 3
    with pytest.raises(SystemExit) as exit_info:  # argparse's own errors: one line too, no usage block
        uci.main(_argv(data, tmp_path / "o.json", "--lb-precision", "float16"))
    assert exit_info.value.code == 2
    _one_error_line(capsys.readouterr().err, "argument --lb-precision: invalid choice")


def test_output_that_would_destroy_an_input_or_be_lost_is_refused_first(study, tmp_path, no_compute, capsys):
    data, _, _ = study
    inputs = {p: p.read_bytes() for p in (data / "small").iterdir()}
    cases = [
        (["--overwrite"], data / "small" / "data.csv.gz", "is the input data file"),
        (["--resume"], data / "small" / "test_mask.csv.gz", "is the input data file"),
        ([], tmp_path / "missing" / "out.json", "no such folder"),
        ([], tmp_path / "missing" / ".." / "out.json", "no such folder"),
        (["--log", str(tmp_path / "same.json")], tmp_path / "same.json", "--log"),
        (["--log", str(data / "small" / "data.csv.gz")], tmp_path / "o.json", "is the input data file"),
    ]
    for extra, out, message in cases:
        assert uci.main(_argv(data, out, *extra)) == 2, extra
        _one_error_line(capsys.readouterr().err, message)
    assert {p: p.read_bytes() for p in (data / "small").iterdir()} == inputs
    assert not (tmp_path / "same.json").exists() and not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("text", ['[{"dataset": "small", "meth', '{"dataset": "small"}', "[1, 2]"])
def test_resume_of_a_truncated_or_foreign_json_is_a_one_line_error(study, tmp_path, no_compute, capsys, text):
    data, _, _ = study
    out = tmp_path / "out.json"
    out.write_text(text)
    assert uci.main(_argv(data, out, "--resume")) == 2
    _one_error_line(capsys.readouterr().err, "is not a JSON list of study records")
    assert out.read_text() == text


def test_bad_data_is_a_one_line_error_before_any_compute(study, tmp_path, no_compute, capsys):
    data, _, _ = study
    bad = tmp_path / "data" / "bad"
    write_sine_folds(bad, n=20)
    with gzip.open(bad / "data.csv.gz", "at") as f:
        f.write("1,2,oops,4\n")
    argv = _argv(tmp_path / "data", tmp_path / "o.json", datasets="bad")
    assert uci.main(argv) == 2
    _one_error_line(capsys.readouterr().err, "non-numeric value 'oops'")


def test_overwrite_keeps_the_files_permissions(study, tmp_path, monkeypatch):
    data, _, _ = study
    _fake_records(monkeypatch)
    out = tmp_path / "out.json"
    out.write_text("[]")
    out.chmod(0o640)
    assert uci.main(_argv(data, out, "--overwrite")) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [r["method"] for r in json.loads(out.read_text())] == ["direct-mf"]


def test_ctrl_c_keeps_the_finished_datasets_and_exits_130(study, tmp_path, monkeypatch, capsys):
    data, _, _ = study
    for name in ("a", "b"):
        write_sine_folds(tmp_path / "data" / name, n=20 if name == "a" else 30)
    calls = _fake_records(monkeypatch, interrupt_at="b")
    out = tmp_path / "out.json"
    try:
        code = uci.main(_argv(tmp_path / "data", out, datasets="a,b"))
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == study_cli.EXIT_INTERRUPTED == 130
    assert calls == ["a", "b"]
    assert [r["dataset"] for r in json.loads(out.read_text())] == ["a"]
    assert "interrupted" in capsys.readouterr().out


def test_the_program_exits_130_on_ctrl_c_without_a_traceback():
    code = "import study_cli\ndef main():\n    raise KeyboardInterrupt\nstudy_cli.run(main)\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=EXPERIMENTS, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130 and "Traceback" not in done.stderr and "interrupted" in done.stderr


# --- --merge: the records of parallel runs over disjoint datasets, in one JSON


def _records_file(path, records):
    path.write_text(json.dumps(records))
    return str(path)


def test_merge_joins_parallel_runs_and_refuses_overlaps_or_other_settings(study, tmp_path, capsys):
    _, _, recs = study
    small = [r for r in recs if r["dataset"] == "small"]
    other = [dict(r, dataset="other") for r in small]
    a = _records_file(tmp_path / "a.json", small)
    b = _records_file(tmp_path / "b.json", other)
    out = tmp_path / "out.json"
    assert uci.main(["--merge", f"{a},{b}", "--json", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged == small + other
    # an existing output is kept without --overwrite
    assert uci.main(["--merge", f"{a},{b}", "--json", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert uci.main(["--merge", f"{a},{b}", "--json", str(out), "--overwrite"]) == 0
    # the same (dataset, method) twice, other settings, no settings: one error line each, nothing written
    changed = [dict(r, dataset="third", settings=dict(r["settings"], seed=99)) for r in small[:1]]
    bare = [{k: v for k, v in r.items() if k != "settings"} | {"dataset": "fourth"} for r in small[:1]]
    c = _records_file(tmp_path / "c.json", small[:1] + changed + bare)
    fresh = tmp_path / "fresh.json"
    assert uci.main(["--merge", f"{a},{c}", "--json", str(fresh)]) == 2
    err = capsys.readouterr().err
    assert f"small/{small[0]['method']} is also in {a}" in err
    assert "third" in err and "seed: 99 -> 0" in err and "fourth" in err and "carries no settings" in err
    assert not fresh.exists()
    assert uci.main(["--merge", a, "--json", str(fresh)]) == 2
    assert "two or more" in capsys.readouterr().err
