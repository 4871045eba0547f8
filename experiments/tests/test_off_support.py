"""The off-support study (experiments/off_support.py): its rules against dense exact BLR, and a tiny run of the
command line with its cache and table."""

import json

import jax.numpy as jnp
import numpy as np
import off_support
from study_folds import write_sine_folds

import kronvi


def _problem(seed=0, n=40, b=6, N=7):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b)) * np.linspace(1.0, 0.05, b)  # weakly determined directions
    y = Phi @ rng.normal(size=b) + 0.1 * rng.normal(size=n)
    Phi_test = 3.0 * rng.normal(size=(N, b))  # far rows
    lam, V = np.linalg.eigh(Phi.T @ Phi)
    return Phi, y, Phi_test, lam, V.T @ Phi.T @ y, Phi_test @ V


def _dense(Phi, y, Phi_test, prior_var, s2):
    """Exact BLR by the dense formulas: prior N(0, diag(prior_var)) in the features' own coordinates."""
    A = Phi.T @ Phi / s2 + np.diag(1.0 / prior_var)
    cov = np.linalg.inv(A)
    mean = cov @ Phi.T @ y / s2
    return Phi_test @ mean, s2 + np.einsum("ij,jk,ik->i", Phi_test, cov, Phi_test)


def test_scalar_rules_match_dense_blr():
    Phi, y, Phi_test, lam, c, z = _problem()
    b = Phi.shape[1]
    rules = off_support.rules_of_fold(
        lam, c, Phi.shape[0], z, 0.7, 0.05, 7.0, 0.01, {cap: 0.02 + cap / 100 for cap in off_support.CAPS}
    )
    m, v = _dense(Phi, y, Phi_test, np.full(b, 7.0**2), 0.01)
    np.testing.assert_allclose(rules["evidence"][0], m, rtol=1e-8)
    np.testing.assert_allclose(rules["evidence"][1], v, rtol=1e-8)
    m, v = _dense(Phi, y, Phi_test, np.full(b, 0.7**2), 0.05)
    np.testing.assert_allclose(rules["gp"][0], m, rtol=1e-8)
    np.testing.assert_allclose(rules["gp"][1], v, rtol=1e-8)
    # kronvi's own exact BLR on the same features agrees
    mean_w, cov = kronvi.gaussian.blr_posterior(kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y)), 0.7, 0.05)
    km, kv = kronvi.gaussian.predict_blr(mean_w, cov, 0.05, jnp.asarray(Phi_test))
    np.testing.assert_allclose(rules["gp"][0], km, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(rules["gp"][1], kv, rtol=1e-3)
    # the evidence's 7.0 is above every cap (8 x 0.7 = 5.6): each cap takes c x 0.7 and its own noise
    for cap in off_support.CAPS:
        sw = min(7.0, cap * 0.7)
        s2 = 0.01 if sw == 7.0 else 0.02 + cap / 100
        m, v = _dense(Phi, y, Phi_test, np.full(b, sw**2), s2)
        np.testing.assert_allclose(rules[f"cap{cap:g}"][0], m, rtol=1e-8)
        assert rules[f"cap{cap:g}"][2:] == (sw, s2)


def test_split_and_clip_against_their_definitions():
    Phi, y, Phi_test, lam, c, z = _problem(1)
    n, b = Phi.shape
    sw_gp, s2_gp, sw_ev, s2_ev = 0.7, 0.05, 7.0, 0.01
    rules = off_support.rules_of_fold(
        lam, c, n, z, sw_gp, s2_gp, sw_ev, s2_ev, dict.fromkeys(off_support.CAPS, 0.02)
    )
    # split: a prior variance per eigen-direction = dense BLR on the rotated features with that diagonal prior
    _, V = np.linalg.eigh(Phi.T @ Phi)
    var = np.where(lam >= s2_gp / sw_gp**2, sw_ev**2, sw_gp**2)
    m, v = _dense(Phi @ V, y, Phi_test @ V, var, s2_ev)
    np.testing.assert_allclose(rules["split"][0], m, rtol=1e-8)
    np.testing.assert_allclose(rules["split"][1], v, rtol=1e-8)
    # clip: the evidence's posterior on the clipped rotated test features, plus the smaller prior variance (the
    # GP's here) of what the clip removed; the far rows are clipped, so the rule differs from the evidence's
    bound = 10.0 * np.sqrt(lam / n)
    zc = np.clip(z, -bound, bound)
    assert np.any(zc != z)
    m, v = _dense(Phi @ V, y, zc, np.full(b, sw_ev**2), s2_ev)
    np.testing.assert_allclose(rules["clip10"][0], m, rtol=1e-8)
    np.testing.assert_allclose(rules["clip10-mean"][1], v, rtol=1e-8)
    np.testing.assert_allclose(rules["clip10"][1], v + sw_gp**2 * np.sum(z**2 - zc**2, axis=1), rtol=1e-8)
    # shift: the evidence's variance around the clipped mean
    np.testing.assert_allclose(rules["shift10"][0], m, rtol=1e-8)
    np.testing.assert_array_equal(rules["shift10"][1], rules["evidence"][1])
    # an evidence scale below the GP's prices the removed energy at its own prior variance
    low = off_support.rules_of_fold(
        lam, c, n, z, sw_gp, s2_gp, 0.3, s2_ev, dict.fromkeys(off_support.CAPS, 0.02)
    )
    m, v = _dense(Phi @ V, y, zc, np.full(b, 0.3**2), s2_ev)
    np.testing.assert_allclose(low["clip10"][1], v + 0.3**2 * np.sum(z**2 - zc**2, axis=1), rtol=1e-8)
    # blend: weights in [0, 1]; a mixture's variance is at least the smaller of its components'
    m1, m0 = rules["evidence"][0], rules["gp"][0]
    rho = (rules["blend"][0] - m0) / (m1 - m0)
    assert np.all((rho > -1e-9) & (rho < 1 + 1e-9))
    assert np.all(rules["blend"][1] >= np.minimum(rules["evidence"][1], rules["gp"][1]) - 1e-12)


def test_blowups_spare_folds_the_paper_recipe_shares():
    rmse = {0: 1.0, 1: 1.1, 2: 5.0, 3: 0.9, 4: 3.0}
    assert off_support.blowups(rmse, {}) == [2, 4]
    assert off_support.blowups(rmse, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 9.0}) == [2]
    assert off_support.blowups(rmse, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.6}) == [2]
    assert off_support.blowups(rmse, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.4}) == [2, 4]


def test_command_line_tiny_run(tmp_path):
    data = tmp_path / "uci"
    write_sine_folds(data / "sine", n=60, K=3)
    out, table, cache = tmp_path / "o.jsonl", tmp_path / "t.md", tmp_path / "cache"
    argv = ["--data-dir", str(data), "--datasets", "sine", "--max-folds", "3", "--num-frequencies", "8",
            "--out", str(out), "--cache", str(cache), "--table", str(table), "--uci-json", str(tmp_path / "none")]  # fmt: skip
    assert off_support.main(argv) == 0
    records = [json.loads(s) for s in out.read_text().splitlines()]
    assert {(r["fold"], r["rule"]) for r in records} == {(f, r) for f in range(3) for r in off_support.RULES}
    assert all(np.isfinite(r["rmse"]) and np.isfinite(r["nlpd"]) and r["b"] == 16 for r in records)
    assert len(list(cache.glob("sine-*.npz"))) == 3
    text = table.read_text()
    assert "| sine | 3 |" in text and "| clip10 |" in text
    # from the cache, the same figures
    out.unlink()
    assert off_support.main(argv) == 0
    again = [json.loads(s) for s in out.read_text().splitlines()]
    assert [(r["rmse"], r["nlpd"]) for r in again] == [(r["rmse"], r["nlpd"]) for r in records]


def test_the_table_of_uci_records(tmp_path):
    """`--from-uci` reads uci.py's records (direct-mf: the library's default; exact-blr: the evidence) and marks
    the blown-up fold of the evidence only."""
    rec = dict(dataset="toy", n=50)
    folds = [0.1, 0.1, 0.1, 0.5, 0.1]
    runs = [
        dict(rec, method="exact-blr", per_fold=[dict(fold=k, rmse=r, nlpd=-1.0) for k, r in enumerate(folds)]),
        dict(rec, method="direct-mf", per_fold=[dict(fold=k, rmse=0.1, nlpd=-1.0) for k in range(5)]),
        dict(rec, method="reparam-mf", per_fold=[dict(fold=0, rmse=9.0, nlpd=9.0)]),  # not read
    ]
    (tmp_path / "u.json").write_text(json.dumps(runs))
    records = off_support.uci_records([tmp_path / "u.json"])
    assert {r["rule"] for r in records} == {"evidence", "library-default"} and len(records) == 10
    off_support.main(["--from-uci", str(tmp_path / "u.json"), "--table", str(tmp_path / "t.md"), "--uci-json", ""])
    row = next(line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| toy |"))
    assert row.split("|")[5].strip() == "0.18 / -1.000 !3" and row.split("|")[6].strip() == "0.1 / -1.000"
