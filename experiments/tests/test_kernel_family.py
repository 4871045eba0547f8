"""experiments/kernel_family.py: a tiny run writes one record per kernel, resumes without refitting, and renders
the choice of `kernel="auto"` as the kernel of the largest log evidence, which is what the library fits."""

import json

import jax
import kernel_family
import numpy as np
from study_folds import write_sine_folds

from kronvi.pipeline import DirectConfig, fit_direct


def test_smoke_run_resumes_renders_and_auto_is_the_librarys_choice(tmp_path):
    X, y, mask = write_sine_folds(tmp_path / "data" / "tiny", n=60, d=2)
    out = tmp_path / "r.jsonl"
    common = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--out", str(out)]
    assert kernel_family.main([*common, "--kernels", "rbf"]) == 0
    assert kernel_family.main([*common, "--resume"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kernel"] for r in recs] == ["rbf", "matern52", "matern32"]  # rbf not refitted
    for r in recs:
        assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and np.isfinite(r["log_evidence"])
    runs = kernel_family.complete_folds(recs)[("tiny", 0)]
    chosen = kernel_family.auto_kernel(runs)
    assert runs[chosen]["log_evidence"] == max(r["log_evidence"] for r in recs)
    test = mask[:, 0].astype(bool)
    fit = fit_direct(jax.random.fold_in(jax.random.key(0), 0), X[~test], y[~test], DirectConfig(kernel="auto"))
    assert fit.info.kernel == chosen
    rmse = float(np.sqrt(np.mean((np.asarray(fit.model.predict(X[test]).mean) - y[test]) ** 2)))
    np.testing.assert_allclose(rmse, runs[chosen]["rmse"], rtol=1e-5)
    table = tmp_path / "r.md"
    assert kernel_family.main(["--out", str(out), "--table", str(table)]) == 0
    text = table.read_text()
    assert "| tiny | 0 | 48 |" in text and text.count("| chosen |") == 1
    assert "| tiny | 1 |" in text  # the per-dataset summary over its one fold


def test_bad_datasets_and_an_empty_out_are_one_line_usage_errors(tmp_path, capsys):
    """`study_cli.dataset_names` and `study_cli.write_table`, as every study using them reports: exit 2, one
    line naming the option, nothing written."""
    import pytest

    write_sine_folds(tmp_path / "data" / "tiny", n=30, d=2)
    out = tmp_path / "r.jsonl"
    for argv, message in [
        (["--datasets", ""], "--datasets must name at least one dataset"),
        (["--datasets", "tiny,absent"], "no dataset folder ['absent'] in --data-dir"),
    ]:
        with pytest.raises(SystemExit) as e:
            kernel_family.main(["--data-dir", str(tmp_path / "data"), "--out", str(out), *argv])
        assert e.value.code == 2 and message in capsys.readouterr().err
    out.write_text("\n")
    with pytest.raises(SystemExit) as e:
        kernel_family.main(["--out", str(out), "--table", str(tmp_path / "r.md")])
    assert e.value.code == 2 and "holds no records" in capsys.readouterr().err
    assert not (tmp_path / "r.md").exists()


def test_nystrom_features_per_kernel(tmp_path):
    """`--feature-map nystrom`: each kernel's landmarks (every training row of the tiny set), recorded as such."""
    write_sine_folds(tmp_path / "data" / "tiny", n=60, d=2)
    out = tmp_path / "r.jsonl"
    args = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--out", str(out)]
    assert kernel_family.main([*args, "--kernels", "rbf,matern32", "--feature-map", "nystrom"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kernel"], r["feature_map"], r["b"]) for r in recs] == [("rbf", "nystrom", 48), ("matern32", "nystrom", 48)]
    assert all(np.isfinite(r["rmse"]) for r in recs)
