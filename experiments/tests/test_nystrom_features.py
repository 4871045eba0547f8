"""experiments/nystrom_features.py: a tiny run writes one record per feature map, resumes without refitting,
and its Nyström record is `fit_direct(feature_map="nystrom")`'s fit; the table pairs the maps per fold."""

import json

import jax
import numpy as np
import nystrom_features
import pytest
from study_folds import write_sine_folds

from kronvi.pipeline import DirectConfig, fit_direct


def test_smoke_run_resumes_renders_and_matches_the_library(tmp_path):
    X, y, mask = write_sine_folds(tmp_path / "data" / "tiny", n=80, d=2)
    out = tmp_path / "r.jsonl"
    common = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--out", str(out)]
    common += ["--num-features", "40"]
    assert nystrom_features.main([*common, "--maps", "fourier"]) == 0
    assert nystrom_features.main([*common, "--resume"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["feature_map"] for r in recs] == ["fourier", "nystrom"]  # fourier not refitted
    assert [r["b"] for r in recs] == [40, 40]
    for r in recs:
        assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and np.isfinite(r["log_evidence"])
        assert r["rmse_std"] == pytest.approx(r["rmse"] / np.std(y[~mask[:, 0].astype(bool)]))
    test = mask[:, 0].astype(bool)
    fit = fit_direct(
        jax.random.fold_in(jax.random.key(0), 0), X[~test], y[~test],
        DirectConfig(feature_map="nystrom", num_frequencies=20),
    )  # fmt: skip
    rmse = float(np.sqrt(np.mean((np.asarray(fit.model.predict(X[test]).mean) - y[test]) ** 2)))
    np.testing.assert_allclose(rmse, recs[1]["rmse"], rtol=1e-5)
    table = tmp_path / "r.md"
    assert nystrom_features.main(["--out", str(out), "--table", str(table)]) == 0
    text = table.read_text()
    assert "| tiny | 0 | 64 | 40 | fourier |" in text and "| tiny | 0 | 64 | 40 | nystrom |" in text
    assert "| tiny | 40 | 1 |" in text  # the per-dataset summary over its one fold


def test_bad_maps_and_features_are_usage_errors(tmp_path, capsys):
    write_sine_folds(tmp_path / "data" / "tiny", n=30, d=2)
    common = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--out", str(tmp_path / "r.jsonl")]
    for argv, message in [
        (["--maps", "fourier,random"], "--maps must be a comma list"),
        (["--num-features", "41"], "--num-features must be an even number"),
        (["--folds", "0"], "--folds must be >= 1"),
    ]:
        with pytest.raises(SystemExit) as e:
            nystrom_features.main([*common, *argv])
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()
