"""experiments/feature_growth.py: a tiny run writes one record per variant with the b it tried, resumes without
refitting, its grown record is `fit_direct(feature_budget=...)`'s fit; the table pairs the variants per fold."""

import json

import feature_growth
import jax
import numpy as np
import pytest
from study_folds import write_sine_folds

from kronvi.pipeline import DirectConfig, fit_direct


def test_smoke_run_resumes_renders_and_matches_the_library(tmp_path):
    X, y, mask = write_sine_folds(tmp_path / "data" / "tiny", n=80, d=2)
    out = tmp_path / "r.jsonl"
    common = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--folds", "1", "--out", str(out)]
    common += ["--num-features", "20", "--budget", "1000", "--gain", "0.01"]
    assert feature_growth.main([*common, "--variants", "default"]) == 0
    assert feature_growth.main([*common, "--resume"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["variant"] for r in recs] == ["default", "grown", "grown-nystrom"]  # default not refitted
    assert recs[0]["b"] == 20 and recs[0]["steps"] == []
    for r in recs[1:]:
        bs = [s["b"] for s in r["steps"]]
        assert bs[0] == 20 and r["b"] in bs and len(bs) >= 2
        assert r["budget"] == 1000 and r["gain"] == 0.01
    for r in recs:
        assert np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"])
        assert r["rmse_std"] == pytest.approx(r["rmse"] / np.std(y[~mask[:, 0].astype(bool)]))
    test = mask[:, 0].astype(bool)
    fit = fit_direct(
        jax.random.fold_in(jax.random.key(0), 0), X[~test], y[~test],
        DirectConfig(num_frequencies=10, feature_budget=1000.0, feature_gain=0.01),
    )  # fmt: skip
    rmse = float(np.sqrt(np.mean((np.asarray(fit.model.predict(X[test]).mean) - y[test]) ** 2)))
    np.testing.assert_allclose(rmse, recs[1]["rmse"], rtol=1e-5)
    assert [s.num_features for s in fit.info.feature_steps] == [s["b"] for s in recs[1]["steps"]]
    table = tmp_path / "r.md"
    assert feature_growth.main(["--out", str(out), "--table", str(table)]) == 0
    text = table.read_text()
    assert "| tiny | 0 | 64 | default |  | 20 |" in text and "| tiny | 0 | 64 | grown | 1000 |" in text
    assert "| tiny | grown (1000 s, gain 0.01) | 1 |" in text  # the per-dataset summary over its one fold


def test_bad_options_are_usage_errors(tmp_path, capsys):
    write_sine_folds(tmp_path / "data" / "tiny", n=30, d=2)
    common = ["--data-dir", str(tmp_path / "data"), "--datasets", "tiny", "--out", str(tmp_path / "r.jsonl")]
    for argv, message in [
        (["--variants", "default,random"], "--variants must be a comma list"),
        (["--budget", "0"], "--budget must be > 0"),
        (["--gain", "-1"], "--gain must be >= 0.0"),
        (["--budget", "inf"], "--budget must be finite"),
    ]:
        with pytest.raises(SystemExit) as e:
            code = feature_growth.main([*common, *argv])
            raise SystemExit(code)
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()
