"""The classification study and its renderer on a tiny synthetic dataset: record fields, metrics, files."""

import json
import pathlib
import stat

import classification
import numpy as np
import pytest
import render_classification
import study_cli
from study_folds import write_folds

FIELDS = {
    "dataset", "method", "n", "d", "accuracy_mean", "accuracy_sd", "logloss_mean", "logloss_sd", "ece_mean",
    "fit_seconds", "fit_seconds_median", "fit_seconds_folds", "sparsity_pct", "predict_seconds", "fold_seconds",
    "compilation_cache",
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
        direct = r["method"].startswith("direct-")
        assert set(r) == FIELDS | ({"prior_scales", "prior_sd_folds"} if direct else set())
        if direct:
            assert r["prior_scales"] == [1.0, 3.0] and all(s in (1.0, 3.0) for s in r["prior_sd_folds"])
        assert 0 <= r["accuracy_mean"] <= 1 and r["logloss_mean"] > 0 and 0 <= r["ece_mean"] <= 1
        assert len(r["fit_seconds_folds"]) == 2 and r["compilation_cache"] == "off"  # the tests' fixture
        np.testing.assert_allclose(r["fit_seconds_median"], np.median(r["fit_seconds_folds"]), atol=1e-4)
    assert (tmp_path / "res_reliability.json").exists()
    render_classification.main([str(out)])
    text = (tmp_path / "res.md").read_text()
    assert "direct-logistic" in text
    speed = text.split("## Fit time against sklearn-logistic")[1]
    assert "| tiny |" in speed  # the speed table has the dataset's row
    assert (tmp_path / "res_reliability.png").exists()


# --- bad options, bad data and outputs that would be lost: one line, exit 2, before any compute


def _argv(data, out, *extra, datasets="tiny"):
    return [
        "--data-dir", str(data), "--datasets", datasets, "--methods", "direct-logistic", "--json", str(out),
        "--folds", "2", "--num-frequencies", "3", "--max-iter", "3", "--prior-scales", "1", *extra,
    ]  # fmt: skip


@pytest.fixture
def data(tmp_path):
    _write(tmp_path / "data" / "tiny")
    return tmp_path / "data"


@pytest.fixture
def no_compute(monkeypatch):
    def run_dataset(*args, **kwargs):
        raise AssertionError("the study started computing")

    monkeypatch.setattr(classification, "run_dataset", run_dataset, raising=False)


def _fake_records(monkeypatch, interrupt_at=None):
    """``run_dataset`` appends one record per method at once; raises KeyboardInterrupt on ``interrupt_at``."""

    def run_dataset(name, dataset, methods, args, records, rel):
        if name == interrupt_at:
            raise KeyboardInterrupt
        records.extend(dict(dataset=name, method=m) for m in methods)
        rel.setdefault(name, {}).update({m: {} for m in methods})

    monkeypatch.setattr(classification, "run_dataset", run_dataset, raising=False)


def _one_error_line(err, message):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("classification.py: error: ") and message in lines[0], err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--folds", "0"], "--folds must be >= 1, got 0"),
        (["--num-frequencies", "0"], "--num-frequencies must be >= 1, got 0"),
        (["--prior-scales", "-1"], "--prior-scales must hold positive finite numbers, got -1.0"),
        (["--prior-scales", "1,x"], "--prior-scales must be a comma list of numbers"),
        (["--prior-scales", "nan"], "--prior-scales must hold positive finite numbers, got nan"),
        (["--max-iter", "0"], "--max-iter must be >= 1, got 0"),
        (["--tol", "-1"], "--tol must be >= 0, got -1.0"),
        (["--vi-steps", "0"], "--vi-steps must be >= 1, got 0"),
        (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
        (["--data-dir", "/nonexistent/classification"], "--data-dir '/nonexistent/classification': no such folder"),
        (["--datasets", "missing"], "no dataset folder"),
        (["--methods", "nope"], "unknown method 'nope'"),
    ],
)
def test_bad_options_are_one_line_errors_before_any_compute(data, tmp_path, no_compute, capsys, extra, message):
    out = tmp_path / "out.json"
    assert classification.main(_argv(data, out, *extra)) == 2
    captured = capsys.readouterr()
    _one_error_line(captured.err, message)
    assert "wrote" not in captured.out and not out.exists()


@pytest.mark.parametrize("labels", [(0.0, 2.0), (-1.0, 1.0), (0.0, 0.5)])
def test_labels_other_than_0_and_1_are_a_one_line_error(tmp_path, no_compute, capsys, labels):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = np.where(X[:, 0] > 0, labels[1], labels[0])
    write_folds(tmp_path / "data" / "tiny", X, y, np.eye(2, dtype=int)[np.arange(20) % 2])
    assert classification.main(_argv(tmp_path / "data", tmp_path / "out.json")) == 2
    _one_error_line(capsys.readouterr().err, "labels must be 0 or 1")


def test_json_never_overwrites_an_input_or_another_runs_records(data, tmp_path, no_compute, capsys):
    inputs = {p: p.read_bytes() for p in (data / "tiny").iterdir()}
    for extra in ([], ["--overwrite"], ["--append"]):
        assert classification.main(_argv(data, data / "tiny" / "data.csv.gz", *extra)) == 2
        _one_error_line(capsys.readouterr().err, "is the input data file")
    assert {p: p.read_bytes() for p in (data / "tiny").iterdir()} == inputs
    previous = tmp_path / "res.json"
    previous.write_text(json.dumps([dict(dataset="other", method="direct-logistic")]))
    assert classification.main(_argv(data, previous)) == 2  # neither --append nor --overwrite
    _one_error_line(capsys.readouterr().err, "exists: pass --append")
    assert json.loads(previous.read_text()) == [dict(dataset="other", method="direct-logistic")]
    assert classification.main(_argv(data, tmp_path / "missing" / ".." / "x.json")) == 2
    _one_error_line(capsys.readouterr().err, "no such folder")


def test_append_keeps_other_datasets_and_overwrite_keeps_permissions(data, tmp_path, monkeypatch):
    _fake_records(monkeypatch)
    out = tmp_path / "res.json"
    out.write_text(json.dumps([dict(dataset="other", method="direct-logistic")]))
    out.chmod(0o640)
    assert classification.main(_argv(data, out, "--append")) == 0
    assert [r["dataset"] for r in json.loads(out.read_text())] == ["other", "tiny"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert classification.main(_argv(data, out, "--overwrite")) == 0
    assert [r["dataset"] for r in json.loads(out.read_text())] == ["tiny"]
    out.write_text("[1, 2]")
    assert classification.main(_argv(data, out, "--append")) == 2


def test_ctrl_c_keeps_the_finished_datasets_and_exits_130(data, tmp_path, monkeypatch):
    _write(data / "tiny2", seed=1)
    _fake_records(monkeypatch, interrupt_at="tiny2")
    out = tmp_path / "res.json"
    try:
        code = classification.main(_argv(data, out, datasets="tiny,tiny2"))
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == study_cli.EXIT_INTERRUPTED
    assert [r["dataset"] for r in json.loads(out.read_text())] == ["tiny"]


def test_the_studies_state_the_compilation_cache(tmp_path):
    """``--no-compilation-cache`` is "off"; otherwise an empty cache folder is "cold" and, once a program has
    been written to it, "cached" (in a child process: turning the cache on is process-wide)."""
    import argparse
    import os
    import subprocess
    import sys
    import textwrap

    parser = argparse.ArgumentParser()
    study_cli.add_cache_option(parser)
    assert parser.parse_args(["--no-compilation-cache"]).no_compilation_cache
    code = textwrap.dedent(f"""
        import argparse, sys
        sys.path.insert(0, {str(pathlib.Path(classification.__file__).parent)!r})
        import jax, jax.numpy as jnp, study_cli
        off = study_cli.compilation_cache(argparse.Namespace(no_compilation_cache=True))
        first = study_cli.compilation_cache(argparse.Namespace(no_compilation_cache=False))
        jax.jit(lambda x: jnp.sin(x) * 3.0)(jnp.ones(3)).block_until_ready()
        print(off, first, study_cli.compilation_cache(argparse.Namespace(no_compilation_cache=False)))
    """)
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["off", "cold", "cached"]


def test_the_default_prior_sd_is_searched_and_recorded(tmp_path, data):
    out = tmp_path / "search.json"
    argv = _argv(data, out)
    argv[argv.index("--prior-scales") : argv.index("--prior-scales") + 2] = []  # the default: search
    classification.main(argv)
    (rec,) = json.loads(out.read_text())
    assert rec["prior_scales"] == "search" and len(rec["prior_sd_folds"]) == 2
    assert all(0.01 <= s <= 1000 for s in rec["prior_sd_folds"])


def test_the_one_off_laplace_studies_run(data, capsys):
    """classification_grid_check.py and classification_bound_gap.py on the recipe's features (a smoke test:
    one line per dataset, the bounds' rows)."""
    import classification_bound_gap
    import classification_grid_check

    classification_grid_check.main(["--data-dir", str(data), "--prior-scales", "1,3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("tiny | 20 | ")
    classification_bound_gap.main(
        ["--data-dir", str(data), "--datasets", "tiny", "--num-frequencies", "3", "--max-iter", "2", "--samples", "20"]
    )
    text = capsys.readouterr().out
    assert "tiny fold 0: n_train=20" in text and text.count("|") > 10
