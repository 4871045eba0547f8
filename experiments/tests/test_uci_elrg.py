"""The UCI study's ``elrg-<rank>`` methods (experiments/uci.py) on a tiny synthetic dataset."""

import json

import numpy as np
import pytest
import uci
from study_folds import write_sine_folds


def _argv(data, out, methods):
    return [
        "--data-dir", str(data), "--datasets", "small", "--methods", methods, "--json", str(out),
        "--num-features", "16", "--reparam-steps", "5", "--max-folds", "1",
    ]  # fmt: skip


def test_elrg_methods_run_beside_reparam_with_fit_seconds(tmp_path):
    write_sine_folds(tmp_path / "data" / "small")
    out = tmp_path / "elrg.json"
    assert uci.main(_argv(tmp_path / "data", out, "elrg-2,exact-blr")) == 0
    recs = {r["method"]: r for r in json.loads(out.read_text())}
    assert set(recs) == {"elrg-2", "exact-blr"}
    rec = recs["elrg-2"]
    assert np.isfinite(rec["rmse_mean"]) and np.isfinite(rec["nlpd_mean"]) and rec["fit_seconds"] > 0
    assert rec["stats_seconds"] == 0.0  # fitted from the rows, as REPARAM
    fold = rec["per_fold"][0]
    assert fold["rank"] == 2 and fold["steps"] == 5
    # the noise variance is exact-blr's (the evidence maximizer); its ELBO is below that log evidence
    assert fold["noise_variance"] == pytest.approx(
        recs["exact-blr"]["per_fold"][0]["noise_variance"], rel=1e-6
    )
    assert fold["elbo"] <= recs["exact-blr"]["per_fold"][0]["elbo"] + 1e-3


def test_elrg_method_names_are_checked(capsys):
    assert uci.is_method("elrg-0") and uci.is_method("elrg-12") and not uci.is_method("elrg-x")
    assert not any(m.startswith("elrg") for m in uci.METHODS)  # not part of --methods all
    assert uci.main(["--json", "unused.json", "--methods", "elrg-17", "--num-features", "16"]) == 2
    assert "ranks must be in [1, --num-features (16)]" in capsys.readouterr().err
    assert uci.main(["--json", "unused.json", "--methods", "elrg-two"]) == 2
    assert "unknown method" in capsys.readouterr().err
