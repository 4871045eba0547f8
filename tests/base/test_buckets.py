"""Row buckets: a new number of rows reuses the programs of its bucket, and the padding changes nothing.

Every row-dependent step of the default recipe (standardizing, the GP likelihood, the feature mean, the
statistics pass, the dual eigenbasis, the predictions and the exact density) is compared with the same
computation on the unpadded rows (`row_bucket` replaced by the identity), and a second fit at another row
count of the same bucket compiles nothing."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import count_compiles, tol

import kronvi
from kronvi import pipeline
from kronvi._base import buckets
from kronvi._base.buckets import choice_rows, on_row_bucket, pad_rows, row_bucket


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_buckets_hold_the_rows_with_bounded_padding_and_few_sizes(steps):
    sizes = set()
    for n in range(1, 5000):
        size = row_bucket(n, steps=steps)
        assert n <= size
        assert size <= max(8, n * (1 + 1 / steps)), n
        sizes.add(size)
    assert len(sizes) <= 4 + steps * 10  # 1, 2, 4, 8, then `steps` per doubling up to 8192
    assert row_bucket(927, steps=4) == row_bucket(900, steps=4) == 1024


def test_pad_rows_and_row_programs():
    a = np.arange(6.0).reshape(3, 2)
    padded = pad_rows(a, 5)
    np.testing.assert_array_equal(padded[:3], a)
    np.testing.assert_array_equal(padded[3:], 0)
    assert pad_rows(a, 3) is a
    program = jax.jit(lambda x, s: (x * s, x.sum(axis=1)))
    out = on_row_bucket(program, 3, (jnp.asarray(a),), 2.0)
    np.testing.assert_array_equal(out[0], a * 2)
    np.testing.assert_array_equal(out[1], a.sum(axis=1))


def _unpadded(monkeypatch):
    """Every bucket of `n` rows is `n` rows: the computations below run on the real rows only."""
    for module in ("kronvi._base.buckets", "kronvi._inputs.gp", "kronvi._inputs.data"):
        monkeypatch.setattr(f"{module}.row_bucket", lambda n, **_: int(n))
    for module in ("kronvi._inputs.features", "kronvi._stats.regression"):
        monkeypatch.setattr(f"{module}.feature_block", lambda n: int(n))
    monkeypatch.setattr("kronvi._stats.regression.feature_rows", lambda n, cap=None: int(n))
    jax.clear_caches()


def _data(n, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 3.0, 0.5])[:d] + 2.0
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y - y.mean()


def _steps(X, y, dtype):
    """The row-dependent steps of the default recipe, on concrete host arrays of `dtype`."""
    X, y = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
    std = kronvi.inputs.fit_standardizer(X)
    Xs = kronvi.inputs.standardize(std, X)
    hyper, info = kronvi.inputs.fit_gp_hyperparameters(
        jax.random.key(0),
        Xs,
        y,
        num_points=40,
        num_starts=2,
        restarts="screened",
        screen_points=12,
        max_iter=30,
    )
    feats = kronvi.inputs.rff_init(
        jax.random.key(1), jnp.ones(X.shape[1], dtype), 16
    )  # b = 32 < n: the dual basis
    feats = feats._replace(offset=kronvi.inputs.feature_mean(feats, Xs))
    fmap = functools.partial(kronvi.inputs.rff_features, feats)
    stats = kronvi.stats.regression_stats_from_inputs(fmap, Xs, y, chunk_size=8)  # the last chunk padded
    rotated, basis = kronvi.stats.eigenbasis_from_inputs(fmap, Xs, y)
    Phi = kronvi.stats.rotate_features(basis, fmap(Xs))
    prior_w, prior_n = kronvi.model.gaussian_prior(32, 1.0, levels=5), kronvi.model.noise_prior(0.1, levels=3)
    q_w, q_n = kronvi.model.MeanField(prior_w.log_probs), kronvi.model.MeanField(prior_n.log_probs)
    mean, var = kronvi.model.predict_regression(q_w, q_n, prior_w, prior_n, Phi)
    ld, _ = kronvi.model.predictive_log_density(q_w, q_n, prior_w, prior_n, Phi, y, rtol=None)
    return dict(
        mean_x=std.mean, scale=std.scale, Xs=Xs, lengthscales=hyper.lengthscales, noise=hyper.noise_variance,
        lml=info.log_marginal_likelihoods, loo=info.loo_mse, num_points=info.num_points, offset=feats.offset,
        PhitPhi=stats.PhitPhi, Phity=stats.Phity, n=stats.n, eigenvalues=basis.eigenvalues, c=rotated.Phity,
        yty=rotated.yty, pred_mean=mean, pred_var=var, log_density=ld,
    )  # fmt: skip


def test_padding_changes_nothing_but_rounding(dtype, monkeypatch):
    X, y = _data(21)  # buckets of 24 (steps=2) and 24 rows (the GP's steps=4); chunks of 8: 5 rows left
    padded = _steps(X, y, dtype)
    _unpadded(monkeypatch)
    plain = _steps(X, y, dtype)
    monkeypatch.undo()
    jax.clear_caches()
    rtol = tol(dtype, x32=2e-4, x64=1e-9)
    # in float32 the GP's optimizer ends where rounding stops it: its likelihood agrees, its optimum to 2e-2
    optimum = tol(dtype, x32=2e-2, x64=1e-9)
    for name, value in plain.items():
        r = optimum if name in ("lengthscales", "noise", "loo") else rtol
        np.testing.assert_allclose(padded[name], value, rtol=r, atol=r, err_msg=name)
    assert int(padded["num_points"]) == 21


def test_a_new_row_count_within_a_fifth_compiles_nothing():
    """The default recipe (small b) fitted at 45 rows and evaluated on 16 others, then at 44, 37 and 54 rows
    (within 20%; the GP step holds its rows on the host, the features run on at least 1,024 rows): the
    later fits and predictions compile no program."""
    X, y = _data(80)
    config = pipeline.DirectConfig(num_frequencies=16, gp=pipeline.GPOptions(restarts=2, screen_points=20))

    def fit_and_predict(n):
        model = pipeline.fit_direct(jax.random.key(0), X[:n], y[:n], config).model
        test = slice(60, 76)
        Phi = pipeline.fold_features(model, X[test])
        kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
        kronvi.model.predictive_log_density(
            model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, y[test].astype(Phi.dtype)
        )

    with count_compiles() as first:
        fit_and_predict(45)
    assert len(first) > 10
    for n in (44, 37, 54):
        with count_compiles() as again:
            fit_and_predict(n)
        assert len(again) == 0, (n, len(again))


def _kronvi_function_names():
    """The names of the functions defined in kronvi's modules that are not also jax.numpy or lax names."""
    import importlib
    import pkgutil

    names = set()
    for info in pkgutil.walk_packages(kronvi.__path__, "kronvi."):
        if not info.name.endswith("__main__"):  # the command line runs on import
            for value in vars(importlib.import_module(info.name)).values():
                if callable(value) and (getattr(value, "__module__", None) or "").startswith("kronvi"):
                    names.add(getattr(value, "__name__", ""))
    return names - set(dir(jnp)) - set(dir(jax.lax))


def test_fits_and_predictions_run_no_eager_operation():
    """Every program that a default fit, its prediction and its test density, a compact fit and a default
    classifier's fit and `predict_proba` compile (all JAX's in-memory caches cleared first) is one of
    kronvi's own jitted functions: no single eager operation (`multiply`, `convert_element_type`, a NumPy
    array copied by `jnp.asarray`, a key split unpacked) compiles on the way
    (`docs/decisions/compilation.md#first-calls`)."""
    import logging
    import re

    X, y = _data(80)
    config = pipeline.DirectConfig(num_frequencies=16, gp=pipeline.GPOptions(restarts=2, screen_points=20))
    key = jax.random.key(0)  # (a key is made by eager operations: the user's, before the fit)
    compiled = []

    class Programs(logging.Handler):
        def emit(self, record):
            found = re.search(r"Finished XLA compilation of jit\((\S+)\)", record.getMessage())
            if found:
                compiled.append(found.group(1))

    handler, logger = Programs(level=logging.DEBUG), logging.getLogger("jax")
    jax.clear_caches()
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            for recipe in (pipeline.Eigen(), pipeline.Compact()):
                model = pipeline.fit_direct(key, X[:60], y[:60], config._replace(recipe=recipe)).model
                jax.block_until_ready(kronvi.predict(model, X[60:]))
                jax.block_until_ready(kronvi.log_density(model, X[60:], y[60:]))
            classifier = kronvi.fit_classifier(key, X[:60], (y[:60] > 0).astype(int)).model
            jax.block_until_ready(classifier.predict_proba(X[60:]))
    finally:
        logger.removeHandler(handler)
    assert len(compiled) > 10, compiled  # the log was read
    assert sorted(set(compiled) - _kronvi_function_names()) == []

def test_row_counts_above_1024_compile_nothing():
    """Above 1,024 rows the GP fits a subsample (`choice_rows`: no program per row count) and the features run
    in blocks of 1,024 rows: fits at 1,030 and 1,300 rows after one at 1,000 compile no program, and the
    blocks give the features' mean and statistics of all rows at once."""
    X, y = _data(1300)
    config = pipeline.DirectConfig(
        num_frequencies=16, gp=pipeline.GPOptions(points=60, restarts=2, screen_points=20)
    )
    pipeline.fit_direct(jax.random.key(0), X[:1000], y[:1000], config)
    for n in (1030, 1300):
        with count_compiles() as again:
            model = pipeline.fit_direct(jax.random.key(0), X[:n], y[:n], config).model
        assert len(again) == 0, (n, len(again))
    with jax.enable_x64(True):
        feats = model.features
        Xs = np.asarray(kronvi.inputs.standardize(model.standardizer, X), np.float64)
        feats64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), feats._replace(offset=None))
        F = np.asarray(kronvi.inputs.rff_features(feats64, Xs))
        np.testing.assert_allclose(
            kronvi.inputs.feature_mean(feats64, Xs), F.mean(axis=0), rtol=1e-12, atol=1e-14
        )
        stats = kronvi.stats.regression_stats_from_inputs(
            functools.partial(kronvi.inputs.rff_features, feats64),
            Xs,
            np.asarray(y, np.float64),
            chunk_size=4096,
        )
        np.testing.assert_allclose(stats.PhitPhi, F.T @ F, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("n", [3, 999, 1000, 1001, 1625, 1626, 2049, 9000])
def test_choice_rows_are_jax_random_choice(n):
    """The rows and their order equal `jax.random.choice` without replacement, in one round of sorting (up to
    1,625 rows) and in two, for typed and raw keys."""
    for key in (jax.random.key(n), jax.random.PRNGKey(n + 1)):
        m = min(n, 1000)
        np.testing.assert_array_equal(choice_rows(key, n, m), jax.random.choice(key, n, (m,), replace=False))


def test_choice_rows_ties_and_traced_keys_take_jax_random_choice(monkeypatch):
    """Where two rows' bits tie, XLA's unstable sort orders them: `choice_rows` returns `jax.random.choice`'s
    draw (forced here by a hash whose bits all tie), as it does for a traced key."""
    key = jax.random.key(3)
    want = np.asarray(jax.random.choice(key, 50, (20,), replace=False))
    monkeypatch.setattr(buckets, "_threefry2x32", lambda k, x1, x2: (np.zeros_like(x1), np.zeros_like(x2)))
    np.testing.assert_array_equal(choice_rows(key, 50, 20), want)
    monkeypatch.undo()
    got = jax.jit(lambda k: jnp.sum(choice_rows(k, 50, 20)))(key)
    assert int(got) == int(want.sum())


def test_threefry_is_jax_random_bits():
    """The hash's splits and bits are `jax.random.split` and `jax.random.bits` of the same key."""
    key = jax.random.key(11)
    words = buckets._threefry_key(key)
    a, b = buckets._threefry2x32(words, np.zeros(2, np.uint32), np.arange(2, dtype=np.uint32))
    np.testing.assert_array_equal(np.stack([a, b], axis=1), jax.random.key_data(jax.random.split(key)))
    bits = np.bitwise_xor(
        *buckets._threefry2x32(words, np.zeros(9, np.uint32), np.arange(9, dtype=np.uint32))
    )
    np.testing.assert_array_equal(bits, jax.random.bits(key, (9,), jnp.uint32))


def test_choice_rows_compile_nothing_for_a_new_row_count():
    key = jax.random.key(1)
    choice_rows(key, 1100, 1000)
    with count_compiles() as again:
        for n in (1030, 1250, 2048):
            choice_rows(key, n, 1000)
    assert len(again) == 0
