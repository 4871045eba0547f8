"""The Figure-1 study (experiments/reinforce_vs_direct.py): the closing ratio on a made-up curve, and a
tiny end-to-end run of the command line that writes the JSON, figure and summary."""

import json

import jax
import numpy as np
import pytest
import reinforce_vs_direct as rvd


def test_closing_ratio_uses_the_first_crossings():
    direct = [
        {
            "method": "direct-lbfgs",
            "iterations": [0, 1, 2],
            "elbo": [-10.0, -3.0, -1.0],
            "seconds": [0.001, 0.002],
            "time_elbo": [-3.0, -1.0],
        }
    ]
    elbo = np.array([-10.0, -6.0, -4.0, -2.5, -2.0, -2.2, -2.0, -2.0, -2.0, -2.0])
    reinforce = [
        {"num_samples": 2, "baseline": "none", "lr": 0.1, "elbo_full": elbo, "seconds_per_step": 0.01,
         "final_elbo": -2.0, "best_elbo": -2.0},
        {"num_samples": 1, "baseline": "none", "lr": 0.1, "elbo_full": elbo - 5, "seconds_per_step": 0.001,
         "final_elbo": -7.0, "best_elbo": -7.0},
    ]  # fmt: skip
    r = rvd.closing_ratio(direct, reinforce)
    assert r["reinforce"]["num_samples"] == 2  # the run with the higher final ELBO
    row = r["final_elbo"]
    assert row["reinforce_seconds"] == pytest.approx(0.04) and row["reinforce_iterations"] == 4
    assert row["direct-lbfgs"]["seconds"] == pytest.approx(0.002)
    assert row["direct-lbfgs"]["iterations"] == 2
    assert row["direct-lbfgs"]["ratio"] == pytest.approx(20.0)
    assert [run["num_samples"] for run in r["every_run"]] == [2, 1]
    assert r["every_run"][1]["reinforce_seconds"] == pytest.approx(0.004)  # its own final, -7, at step 4
    assert r["every_run"][1]["direct-lbfgs"]["ratio"] == pytest.approx(4.0)  # DIRECT reaches -7 at 1 ms
    direct[0]["time_elbo"] = [-3.0, -2.5]  # DIRECT never reaches -2: no ratio
    assert rvd.closing_ratio(direct, reinforce)["final_elbo"]["direct-lbfgs"]["ratio"] is None


def test_tiny_run_writes_curves_figure_and_summary(tmp_path):
    out = str(tmp_path / "fig")
    args = ["--out", out, "--n", "40", "--steps", "12", "--samples", "2", "--baselines", "with", "--lrs", "0.1",
            "--max-lbfgs", "1", "--max-cavi", "1", "--repeats", "1"]  # fmt: skip
    x64 = jax.config.jax_enable_x64
    record = rvd.main(args)
    data = json.loads((tmp_path / "fig.json").read_text())
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    assert "REINFORCE" in (tmp_path / "fig.md").read_text()
    assert [d["method"] for d in data["direct"]] == ["direct-lbfgs", "direct-cavi"]
    assert [(c["num_samples"], c["baseline"]) for c in data["reinforce"]] == [(2, "leave-one-out")]
    start = data["settings"]["start_elbo"]
    for c in data["reinforce"]:
        assert c["iterations"][0] == 0 and c["iterations"][-1] == 12
        assert c["elbo"][0] == pytest.approx(start)  # every curve starts at q = prior
        assert len(c["seconds"]) == len(c["elbo"])
    for d in data["direct"]:
        assert d["elbo"][0] == pytest.approx(start, rel=1e-9)
        assert d["final_elbo"] >= start
    assert record["ratio"]["reinforce"]["num_samples"] == 2
    assert jax.config.jax_enable_x64 == x64  # the study's float64 stays inside main
