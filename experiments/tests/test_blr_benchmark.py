"""The BLR benchmark (experiments/blr_benchmark.py): its function-space KL and SSGE score estimate against
closed forms, and the command line's records, table and figure on the toy."""

import json

import blr_benchmark
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


@pytest.fixture(autouse=True)
def x64():
    """The benchmark runs in float64 (its ``main`` enables it; importing it changes nothing)."""
    with jax.enable_x64(True):
        yield


def test_function_space_kl_equals_the_weight_space_kl_for_invertible_features(monkeypatch):
    """With as many measurement points as weights and invertible Phi_A, KL(q_A || p_A) = KL(q || p)
    (Burt et al.'s Proposition 3: an injective map keeps the KL)."""
    rng = np.random.default_rng(0)
    b = 5
    q = kronvi.gaussian.ELRG(*(jnp.asarray(rng.normal(size=s)) for s in [(b,), (b,), (b, 2)]))
    monkeypatch.setattr(blr_benchmark, "JITTER", 0.0)
    got = float(blr_benchmark.function_space_kl(q, jnp.asarray(rng.normal(size=(b, b)))))
    assert got == pytest.approx(float(kronvi.gaussian.elrg_kl(q, 1.0)), rel=1e-8)


def test_ssge_recovers_a_gaussian_score():
    rng = np.random.default_rng(1)
    C = np.array([[1.0, 0.6], [0.6, 0.5]])
    x = rng.multivariate_normal(np.zeros(2), C, size=500)
    got = np.asarray(blr_benchmark.ssge_score(jnp.asarray(x)))
    want = -x @ np.linalg.inv(C)
    inner = np.abs(x).max(axis=1) < 1.0  # the estimate is poor in the tails, where samples are few
    err = np.linalg.norm(got[inner] - want[inner]) / np.linalg.norm(want[inner])
    assert err < 0.35


def test_command_line_writes_records_table_and_figure(tmp_path):
    out = tmp_path / "blr.json"
    argv = [
        "--json", str(out), "--datasets", "toy", "--families", "factorized,elrg-2,direct-mf",
        "--objectives", "exact,rand-a", "--toy-steps", "20",
    ]  # fmt: skip
    assert blr_benchmark.main(argv) == 0
    recs = json.loads(out.read_text())
    keys = {"experiment", "dataset", "family", "objective", "kl_to_exact", "kl_pred", "nlpd", "seconds"}
    pairs = [(r["family"], r["objective"]) for r in recs]
    assert pairs == [
        ("exact", "closed-form"), ("factorized", "exact"), ("factorized", "rand-a"), ("elrg-2", "exact"),
        ("direct-mf", "exact"),
    ]  # fmt: skip
    for r in recs:
        assert keys <= set(r) and r["experiment"] == "toy" and np.isfinite(r["nlpd"])
        assert (r["kl_to_exact"] is None) == r["family"].startswith("direct")
    by = dict(zip(pairs, recs, strict=True))
    assert by[("exact", "closed-form")]["kl_pred"] == 0.0
    # the exact ELBO's optimum is the closest factorized Gaussian to the posterior; rank 2 is closer still
    kl = {p: by[p]["kl_to_exact"] for p in pairs[1:4]}
    assert kl[("elrg-2", "exact")] < kl[("factorized", "exact")] < kl[("factorized", "rand-a")]
    table = out.with_suffix(".md").read_text()
    assert "KL(q || exact posterior)" in table and "| factorized | exact |" in table
    assert (tmp_path / "blr_toy.png").stat().st_size > 10_000
    assert blr_benchmark.main([*argv, "--render-only"]) == 0
