"""Cross-validation from statistics: held-out scores against dense references, fold statistics from
inputs against the dense ones, the vmapped CV against a loop, and the pipeline's noise-grid choice."""

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import kronvi
from kronvi.cv import parse_noise_cv
from kronvi.pipeline import DirectConfig, Features, fit_direct, noise_prior_for_span


def _problem(dtype, *, n=300, b=10, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    W = rng.normal(size=(2, b // 2)) / 0.7
    Phi = np.concatenate([np.cos(X @ W), np.sin(X @ W)], 1) / np.sqrt(b // 2)
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + noise * rng.normal(size=n)
    y = y - y.mean()
    return Phi.astype(dtype), y.astype(dtype)


def _random_q(shape, seed, dtype):
    logits = np.random.default_rng(seed).normal(size=shape)
    return kronvi.model.MeanField(jnp.asarray(logits, dtype))


def test_heldout_scores_match_dense_references(dtype):
    Phi, y = _problem(dtype)
    b = Phi.shape[1]
    prior_w = kronvi.model.gaussian_prior(b, 0.8)
    prior_n = kronvi.model.noise_prior(0.05, levels=5, span=4.0)
    q_w, q_n = _random_q((b, 15), 1, dtype), _random_q((1, 5), 2, dtype)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    got = kronvi.fitting.heldout_scores(q_w, q_n, prior_w, prior_n, stats)

    P, t = Phi.astype(np.float64), y.astype(np.float64)
    V, pq = np.asarray(prior_w.values, np.float64), np.asarray(q_w.probs, np.float64)
    mean = (pq * V).sum(-1)
    var = (pq * V**2).sum(-1) - mean**2
    f = P @ mean
    sq = np.sum((t - f) ** 2)
    e_s = float((np.asarray(q_n.probs, np.float64) * np.asarray(prior_n.values, np.float64)).sum())
    pred_var = (P**2) @ var + e_s  # each row's exact predictive variance
    v = pred_var.mean()
    logd = np.sum(-0.5 * np.log(2 * np.pi * v) - 0.5 * (t - f) ** 2 / v)
    np.testing.assert_allclose(float(got.sq_error), sq, rtol=tol(dtype, x32=2e-4))
    np.testing.assert_allclose(float(got.log_density), logd, rtol=tol(dtype, x32=2e-4))
    np.testing.assert_allclose(
        float(kronvi.fitting.heldout_sq_error(q_w, prior_w, stats)), sq, rtol=tol(dtype, x32=2e-4)
    )


def test_log_density_penalizes_overconfidence():
    # Same posterior mean, noise variance 100x too small for the residual: squared error is blind to it.
    Phi, y = _problem(np.float32)
    b = Phi.shape[1]
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    prior_w = kronvi.model.gaussian_prior(b, 0.8)
    q_w, _, _ = kronvi.fitting.fit_regression(stats, prior_w, kronvi.model.noise_prior(0.01, levels=1))
    right = kronvi.model.noise_prior(
        float(kronvi.fitting.heldout_sq_error(q_w, prior_w, stats)) / 300, levels=1
    )
    tiny = kronvi.model.noise_prior(float(right.values[0, 0]) / 100, levels=1)
    q1 = kronvi.model.MeanField(jnp.zeros((1, 1)))
    good = kronvi.fitting.heldout_scores(q_w, q1, prior_w, right, stats)
    bad = kronvi.fitting.heldout_scores(q_w, q1, prior_w, tiny, stats)
    assert float(good.sq_error) == float(bad.sq_error)
    assert float(good.log_density) > float(bad.log_density) + 100


def test_heldout_scores_reject_mismatched_shapes():
    prior_w = kronvi.model.gaussian_prior(4, 1.0)
    q_w = kronvi.model.MeanField.from_prior(prior_w)
    stats = kronvi.stats.regression_stats(jnp.ones((3, 5)), jnp.ones(3))
    with pytest.raises(ValueError, match="features"):
        kronvi.fitting.heldout_sq_error(q_w, prior_w, stats)
    with pytest.raises(ValueError, match="q_w"):
        kronvi.fitting.heldout_sq_error(kronvi.model.MeanField(jnp.zeros((4, 3))), prior_w, stats)
    stats4 = kronvi.stats.regression_stats(jnp.ones((3, 4)), jnp.ones(3))
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), stats4)
    with pytest.raises(ValueError, match="stacked folds"):
        kronvi.fitting.heldout_sq_error(q_w, prior_w, stacked)
    prior_n = kronvi.model.noise_prior(0.1, levels=5)
    with pytest.raises(ValueError, match="q_noise"):
        kronvi.fitting.heldout_scores(
            q_w, kronvi.model.MeanField(jnp.zeros((1, 1))), prior_w, prior_n, stats4
        )


def test_kfold_stats_from_inputs_equals_dense_kfold_stats(dtype):
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(103, 3)), dtype)
    y = jnp.asarray(rng.normal(size=103), dtype)
    feats = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(3, dtype), 6)
    fmap = functools.partial(kronvi.inputs.rff_features, feats)
    folds = rng.permutation(103) % 4
    train, test = kronvi.stats.kfold_stats_from_inputs(fmap, X, y, folds, chunk_size=16)
    train2, test2 = kronvi.stats.kfold_stats(fmap(X), y, folds)
    everything = kronvi.stats.regression_stats(fmap(X), y)
    for a, b in zip(train + test, train2 + test2, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol(dtype, x32=1e-4), atol=tol(dtype, x32=1e-4))
    for a, b in zip(jax.tree.map(lambda t: t.sum(0), test), everything, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol(dtype, x32=1e-4), atol=tol(dtype, x32=1e-4))
    with pytest.raises(ValueError, match="empty"):
        kronvi.stats.kfold_stats_from_inputs(fmap, X, y, np.where(folds == 2, 3, folds))
    with pytest.raises(ValueError, match="folds"):
        kronvi.stats.kfold_stats_from_inputs(fmap, X, y, folds[:-1])


def test_cv_scores_match_a_loop_of_fits_and_dense_errors():
    with jax.enable_x64(True):
        Phi, y = _problem(np.float64)
        b = Phi.shape[1]
        folds = np.arange(len(y)) % 3
        train, test = kronvi.stats.kfold_stats(jnp.asarray(Phi), jnp.asarray(y), folds)
        prior_w = kronvi.model.gaussian_prior(b, 0.8)
        prior_n = kronvi.model.noise_prior(0.01, levels=7, span=10.0)
        got = kronvi.fitting.cv_scores(train, test, prior_w, prior_n, max_iter=20)
        for k in range(3):
            st = kronvi.stats.regression_stats(jnp.asarray(Phi[folds != k]), jnp.asarray(y[folds != k]))
            q_w, q_n, _ = kronvi.fitting.fit_regression(st, prior_w, prior_n, init="gaussian", max_iter=20)
            mean = np.asarray((q_w.probs * prior_w.values).sum(-1))
            err = np.sum((y[folds == k] - Phi[folds == k] @ mean) ** 2)
            np.testing.assert_allclose(float(got.sq_error[k]), err, rtol=1e-8)
            held = kronvi.stats.regression_stats(jnp.asarray(Phi[folds == k]), jnp.asarray(y[folds == k]))
            ref = kronvi.fitting.heldout_scores(q_w, q_n, prior_w, prior_n, held)
            np.testing.assert_allclose(float(got.log_density[k]), float(ref.log_density), rtol=1e-8)
        with pytest.raises(ValueError, match="leading fold axis"):
            kronvi.fitting.cv_scores(jax.tree.map(lambda a: a[0], train), test, prior_w, prior_n)


# The select_prior tests below fit what the command line's noise-grid choice fits (float32, b = 10, 15-level
# grids, 5 folds, 10 CAVI sweeps from the Gaussian start, which converge here: the scores are those of
# unlimited sweeps), so the CLI test at the end reuses their two compiled CV programs.
CLI_CV = dict(max_iter=10)


@pytest.mark.parametrize("criterion", ["sq_error", "log_density"])
def test_select_prior_prefers_the_right_prior_scale(criterion):
    # Candidates differ only in the weight prior's scale: 1e-3 cannot fit the signal, 0.8 can.
    Phi, y = _problem(np.float32, n=400)
    b = Phi.shape[1]
    train, test = kronvi.stats.kfold_stats(jnp.asarray(Phi), jnp.asarray(y), np.arange(400) % 5)
    pn = kronvi.model.noise_prior(0.01, levels=15, span=10.0)
    cands = [(kronvi.model.gaussian_prior(b, 1e-3), pn), (kronvi.model.gaussian_prior(b, 0.8), pn)]
    best, scores = kronvi.fitting.select_prior(train, test, cands, criterion=criterion, **CLI_CV)
    assert best == 1
    assert scores.sq_error.shape == (2,) and scores.log_density.shape == (2,)
    assert float(scores.sq_error[0]) > 2 * float(scores.sq_error[1])
    best_rev, _ = kronvi.fitting.select_prior(train, test, cands[::-1], criterion=criterion, **CLI_CV)
    assert best_rev == 0
    with pytest.raises(ValueError, match="criterion"):
        kronvi.fitting.select_prior(train, test, cands, criterion="elbo")
    with pytest.raises(ValueError, match="at least one"):
        kronvi.fitting.select_prior(train, test, [])


def test_select_prior_log_density_rejects_an_overconfident_fixed_noise():
    # Noise sd 0.5: a noise variance fixed 1000x too small makes the posterior far too confident for its
    # held-out error; the log density must prefer the grid around the truth (different grid shapes).
    Phi, y = _problem(np.float32, n=400, noise=0.5)
    b = Phi.shape[1]
    train, test = kronvi.stats.kfold_stats(jnp.asarray(Phi), jnp.asarray(y), np.arange(400) % 5)
    pw = kronvi.model.gaussian_prior(b, 0.8)
    cands = [(pw, noise_prior_for_span(0.25e-3, 1.0, 15)), (pw, noise_prior_for_span(0.25, 3.0, 15))]
    best, scores = kronvi.fitting.select_prior(train, test, cands, **CLI_CV)
    assert best == 1
    assert float(scores.log_density[1]) > float(scores.log_density[0]) + 1.0


def test_noise_prior_for_span():
    fixed = noise_prior_for_span(0.3, 1.0, 15)
    assert fixed.values.shape == (1, 1)
    np.testing.assert_allclose(fixed.values[0, 0], 0.3, rtol=1e-6)
    grid = noise_prior_for_span(0.3, 3.0, 15)
    np.testing.assert_allclose([grid.values[0, 0], grid.values[0, -1]], [0.1, 0.9], rtol=1e-5)


def test_command_line_and_fit_direct_choose_a_noise_grid_by_cross_validation(tmp_path, capsys):
    """`kronvi fit` reports the grid `fit_direct` chose on the fold's training rows. Both run the CLI's
    default recipe on the same 60 rows, so `fit_direct` reuses every program the CLI compiled."""
    from kronvi import cli

    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 2))
    y = np.cos(2 * X[:, 1]) + 0.1 * rng.normal(size=90)
    path = tmp_path / "toy.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",")
    out = tmp_path / "out.json"
    common = [str(path), "--num-features", "10", "--folds", "3", "--max-folds", "1", "--json", str(out)]
    common += ["--basis", "features", "--force"]
    assert cli.main(["fit", *common]) == 0
    fold = json.loads(out.read_text())["folds"][0]
    assert fold["noise_span"] in (10.0, 3.0, 1.0) and fold["select_seconds"] > 0
    # "none" is the paper's protocol (one grid, no selection): run end to end through fit_direct below.
    assert parse_noise_cv("none") == () and parse_noise_cv("10,3") == (10.0, 3.0)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *common, "--noise-cv", "ten"])
    assert exit_info.value.code == 2 and "noise-cv" in capsys.readouterr().err

    # fit_direct on the CLI's fold 0 (rows split by --seed 0, key fold_in(key(seed), fold)): the CLI's config
    tr = np.random.default_rng(0).permutation(90) % 3 != 0
    recipe = Features(noise_cv=(10.0, 3.0, 1.0), cv_folds=5)
    cfg = DirectConfig(recipe=recipe, num_frequencies=5)
    key = jax.random.fold_in(jax.random.key(0), 0)
    model, timings, info = fit_direct(key, X[tr], y[tr], cfg)
    assert info.noise_span == fold["noise_span"]
    np.testing.assert_allclose(float(info.final_elbo), fold["elbo"], rtol=1e-5)
    assert info.final_elbo == info.fit.final_elbo and info.optimizer == "cavi"
    assert info.cv_scores.sq_error.shape == (3,)
    assert timings.select_seconds > 0
    chosen = noise_prior_for_span(model.hyper.noise_variance, info.noise_span, 15)
    np.testing.assert_allclose(model.prior_noise.values, chosen.values, rtol=1e-6)  # the fit used it
    # The paper's protocol: one grid of `noise_span`, no selection.
    model0, timings0, info0 = fit_direct(key, X[tr], y[tr], cfg._replace(recipe=Features(noise_cv=())))
    assert info0.noise_span == 10.0 and info0.cv_scores is None
    assert model0.prior_noise.values.shape == (1, 15)
    for bad in (dict(noise_cv=(0.5,)), dict(cv_folds=1), dict(cv_folds=2.0)):
        with pytest.raises(ValueError, match="noise_cv|cv_folds"):
            fit_direct(key, X[tr], y[tr], cfg._replace(recipe=dataclasses.replace(recipe, **bad)))


def test_inner_fold_stats_sum_to_all_rows_and_need_enough_rows():
    from kronvi.pipeline import inner_fold_stats

    rng = np.random.default_rng(3)
    X, y = jnp.asarray(rng.normal(size=(23, 2)), jnp.float32), jnp.asarray(rng.normal(size=23), jnp.float32)
    feats = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(2), 4)
    fmap = functools.partial(kronvi.inputs.rff_features, feats)
    stats, (cv_train, cv_test) = inner_fold_stats(jax.random.key(1), fmap, X, y, 5)
    np.testing.assert_array_equal(np.asarray(cv_test.n), [5, 5, 5, 4, 4])
    for a, b in zip(stats, kronvi.stats.regression_stats(fmap(X), y), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="cannot make 5"):
        inner_fold_stats(jax.random.key(1), fmap, X[:4], y[:4], 5)


def test_cv_scores_names_a_bad_init_and_takes_an_array_max_iter():
    rng = np.random.default_rng(7)
    Phi, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    folds = np.arange(40) % 2
    stack = lambda sel: jax.tree.map(  # noqa: E731
        lambda *x: jnp.stack(x),
        *[kronvi.stats.regression_stats(jnp.asarray(Phi[sel(k)]), jnp.asarray(y[sel(k)])) for k in range(2)],
    )
    train, test = stack(lambda k: folds != k), stack(lambda k: folds == k)
    pw, pn = kronvi.model.gaussian_prior(3, 1.0, levels=5), kronvi.model.noise_prior(1.0)
    with pytest.raises(TypeError, match="`init`"):
        kronvi.fitting.cv_scores(train, test, pw, pn, init=("a", "b"))
    a = kronvi.fitting.cv_scores(train, test, pw, pn, max_iter=jnp.asarray(3))
    b = kronvi.fitting.cv_scores(train, test, pw, pn, max_iter=3)
    np.testing.assert_array_equal(a.sq_error, b.sq_error)
