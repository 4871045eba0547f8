"""kronvi.fit_classifier: the recipe against a by-hand run of its stages, padding invariance, same-key
reproducibility, predict_proba against predict_logistic on hand-built features, bad configs named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi
import kronvi.logistic as kl
from kronvi.logistic import _recipe

SMALL = kl.ClassifierConfig(num_frequencies=6, levels=7, prior_scales=(1.0, 10.0))


def _rings(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1.0, 3.0] + [0.0, 10.0]
    r2 = X[:, 0] ** 2 + ((X[:, 1] - 10.0) / 3.0) ** 2
    return X, r2 > 1.4


def _features(model, X):
    """The features by hand in float64: [cos, sin] / sqrt(D), standardized inputs / sqrt(d), 1."""
    Xs = (X - model.standardizer.mean) / model.standardizer.scale
    Z = Xs @ np.asarray(model.features.frequencies, np.float64)
    D, d = Z.shape[1], X.shape[1]
    return np.hstack([np.cos(Z) / np.sqrt(D), np.sin(Z) / np.sqrt(D), Xs / np.sqrt(d), np.ones((len(X), 1))])


def test_the_stages_by_hand(dtype):
    """Standardizer, median-heuristic lengthscale, frequencies from the key's generator, the scale of the
    largest Laplace evidence, its grids and the CAVI fit, each against a direct computation on the unpadded
    rows: the zero-weight padding changes nothing but rounding."""
    X, y = _rings()
    model, info = kronvi.fit_classifier(jax.random.key(3), X, y, SMALL, dtype=dtype)
    assert info.num_rows == 150 and info.padded_rows == 160
    np.testing.assert_allclose(model.standardizer.mean, X.mean(0), rtol=1e-12)
    np.testing.assert_allclose(model.standardizer.scale, X.std(0), rtol=1e-12)
    Xs = (X - X.mean(0)) / X.std(0)
    d2 = np.sum((Xs[:, None] - Xs[None]) ** 2, -1)[np.triu_indices(150, 1)]
    ls = np.sqrt(np.median(d2[d2 > 0]))  # all 150 rows (below lengthscale_points)
    np.testing.assert_allclose(model.lengthscale, ls, rtol=1e-6)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.key(3))).tolist())
    np.testing.assert_allclose(model.features.frequencies, rng.standard_normal((2, 6)) / ls, rtol=1e-6)

    Phi = jnp.asarray(_features(model, X), dtype)
    np.testing.assert_allclose(
        _recipe._design(model.features, jnp.asarray(Xs, dtype)), Phi, atol=1e-5 if dtype == np.float32 else 1e-12
    )
    grids, init = [], None  # each scale's Newton starts at the MAP of the one before
    for s in SMALL.prior_scales:
        grids.append(kl.laplace_grid_prior(Phi, y, s, levels=7, init=init))
        init = grids[-1][1].mean
    evidence = [float(lap.log_evidence) for _, lap in grids]
    tol = (
        dict(rtol=1e-3, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-7, atol=1e-7)
    )  # Newton in float32
    assert isinstance(info.log_evidence, jax.Array) and info.log_evidence.shape == (len(SMALL.prior_scales),)
    np.testing.assert_allclose(info.log_evidence, evidence, **tol)
    k = int(np.argmax(evidence))
    assert info.prior_scale == SMALL.prior_scales[k] and float(model.prior_scale) == info.prior_scale
    # the weights rotated to the eigenbasis of the Laplace Hessian at the chosen scale's MAP
    s, w = SMALL.prior_scales[k], np.asarray(grids[k][1].mean, np.float64)
    P = np.asarray(Phi, np.float64)
    p = 1.0 / (1.0 + np.exp(-(P @ w)))
    H = P.T @ (P * (p * (1 - p))[:, None]) + np.eye(P.shape[1]) / s**2
    V = np.asarray(model.rotation, np.float64)
    np.testing.assert_allclose(V.T @ V, np.eye(len(V)), atol=1e-5 if dtype == np.float32 else 1e-12)
    D = V.T @ H @ V
    assert np.max(np.abs(D - np.diag(np.diag(D)))) < (1e-3 if dtype == np.float32 else 1e-8) * np.max(np.abs(D))
    np.testing.assert_allclose(model.design(X), P @ V, atol=1e-5 if dtype == np.float32 else 1e-12)
    Pr = jnp.asarray(P @ V, dtype)
    prior = kl.laplace_grid_prior(Pr, y, s, levels=7, init=jnp.asarray(V.T @ w, dtype))[0]
    np.testing.assert_allclose(model.prior_w.values, prior.values, **tol)
    q, fit = kl.fit_logistic(Pr, y, prior, method="cavi", max_iter=SMALL.max_iter, tol=SMALL.tol)
    assert int(fit.num_iter) == int(info.fit.num_iter)
    np.testing.assert_allclose(model.q_w.probs, q.probs, atol=1e-3 if dtype == np.float32 else 1e-6)


@pytest.mark.parametrize("rows", [150, 151, 200])
def test_padding_to_more_rows_changes_nothing(monkeypatch, rows):
    """The same data padded with more zero-weight rows: the same model up to float64 rounding."""
    X, y = _rings()
    with jax.enable_x64(True):
        base = kronvi.fit_classifier(jax.random.key(0), X, y, SMALL, dtype=jnp.float64)
        monkeypatch.setattr(_recipe, "row_bucket", lambda n: rows)
        padded = kronvi.fit_classifier(jax.random.key(0), X, y, SMALL, dtype=jnp.float64)
        assert padded.info.padded_rows == rows and base.info.padded_rows == 160
        # the rotation is the Hessian's eigenvectors, whose rounding grows as its eigenvalues' gaps shrink
        for a, b in zip(jax.tree.leaves(base.model), jax.tree.leaves(padded.model), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(base.model.predict_proba(X), padded.model.predict_proba(X), atol=1e-9)


def test_row_buckets():
    assert [_recipe.row_bucket(n) for n in (1, 128, 129, 161, 256, 257, 33_000)] == [
        128, 128, 160, 192, 256, 320, 40_960
    ]  # fmt: skip
    for n in range(1, 5000, 7):
        size = _recipe.row_bucket(n)
        assert n <= size <= max(128, 1.25 * n)


def test_the_same_key_gives_the_same_model():
    X, y = _rings()
    a = kronvi.fit_classifier(jax.random.key(5), X, y, SMALL).model
    b = kronvi.fit_classifier(jax.random.key(5), X, y, SMALL).model
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(u, v)
    c = kronvi.fit_classifier(jax.random.key(6), X, y, SMALL).model
    assert not np.allclose(a.features.frequencies, c.features.frequencies)
    # a raw uint32 key (jax.random.PRNGKey) is the typed key's data
    raw = kronvi.fit_classifier(jax.random.key_data(jax.random.key(5)), X, y, SMALL).model
    np.testing.assert_array_equal(raw.features.frequencies, a.features.frequencies)


def test_predict_proba_is_predict_logistic_of_the_features(dtype):
    X, y = _rings()
    model = kronvi.fit_classifier(jax.random.key(1), X, y, SMALL, dtype=dtype).model
    Xt = np.random.default_rng(9).normal(size=(40, 2)) * [1.0, 3.0] + [0.0, 10.0]
    Phi = _features(model, Xt) @ np.asarray(model.rotation, np.float64)  # the rotated weights' features
    expected = kl.predict_logistic(model.q_w, model.prior_w, jnp.asarray(Phi, dtype))
    p = model.predict_proba(Xt)
    assert p.shape == (40,) and p.dtype == dtype
    np.testing.assert_allclose(p, expected, atol=2e-5 if dtype == np.float32 else 1e-10)
    np.testing.assert_allclose(kl.predict_proba(model, Xt), p)
    # under jit (traced inputs: predict_logistic's default nodes), in chunks through lax.map
    jitted = jax.jit(kl.predict_proba)(model, jnp.asarray(Xt, dtype))
    np.testing.assert_allclose(jitted, p, atol=1e-4 if dtype == np.float32 else 1e-8)
    assert model.predict_proba(Xt[:0]).shape == (0,)


def test_predict_proba_in_chunks(monkeypatch):
    X, y = _rings()
    model = kronvi.fit_classifier(jax.random.key(1), X, y, SMALL).model
    whole = model.predict_proba(X)
    monkeypatch.setattr(_recipe, "PREDICT_CHUNK", 32)  # 150 rows: four chunks of 32 and one of 22
    np.testing.assert_allclose(model.predict_proba(X), whole, atol=1e-6)


def test_paper_grids_and_bool_labels():
    X, y = _rings()
    config = SMALL._replace(grid="paper")
    model, info = kronvi.fit_classifier(jax.random.key(0), X, y.astype(int), config)
    ref = kronvi.model.gaussian_prior(15, info.prior_scale, levels=7, width=3.0)
    np.testing.assert_allclose(model.prior_w.values, ref.values)
    np.testing.assert_allclose(model.prior_w.log_probs, ref.log_probs)
    assert float(np.mean((np.asarray(model.predict_proba(X)) > 0.5) == y)) > max(np.mean(y), 1 - np.mean(y))


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_frequencies", 0), ("num_frequencies", 2.5), ("levels", 1), ("width", -1.0), ("width", np.inf),
        ("grid", "even"), ("max_iter", 0), ("tol", -1e-3), ("tol", float("nan")), ("prior_scales", ()),
        ("prior_scales", (1.0, -3.0)), ("prior_scales", "big"), ("lengthscale_points", 1),
    ],
)  # fmt: skip
def test_bad_config_fields_are_named(field, value):
    X, y = _rings(20)
    with pytest.raises(ValueError, match=f"`config.{field}`"):
        kronvi.fit_classifier(jax.random.key(0), X, y, kl.ClassifierConfig(**{field: value}))


def test_bad_inputs_are_named():
    X, y = _rings(20)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="`y` must hold labels 0 or 1"):
        kronvi.fit_classifier(key, X, y * 2.0)
    with pytest.raises(ValueError, match=r"`y` must have shape \(20,\)"):
        kronvi.fit_classifier(key, X, y[:5])
    with pytest.raises(ValueError, match="`X` must be 2-D"):
        kronvi.fit_classifier(key, X[:, 0], y)
    with pytest.raises(ValueError, match="`X` holds 1 non-finite"):
        kronvi.fit_classifier(key, np.where(np.arange(40).reshape(20, 2) == 3, np.nan, X), y)
    with pytest.raises(TypeError, match="`key` must be a jax.random key"):
        kronvi.fit_classifier(0, X, y)
    with pytest.raises(ValueError, match="^`X` must hold real numbers"):
        kronvi.fit_classifier(key, X.astype(str), y)
    with pytest.raises(ValueError, match=r"^`X` has 1 row\(s\): a classifier needs at least 2"):
        kronvi.fit_classifier(key, X[:1], y[:1])
    with pytest.raises(ValueError, match="^`y` holds one class only"):
        kronvi.fit_classifier(key, X, np.zeros_like(y))
    with pytest.raises(TypeError, match="`config` must be a ClassifierConfig"):
        kronvi.fit_classifier(key, X, y, {"levels": 5})
    model = kronvi.fit_classifier(key, X, y, SMALL).model
    with pytest.raises(ValueError, match="`X` has 3 columns but the model was fitted on 2"):
        model.predict_proba(np.ones((2, 3)))
    with pytest.raises(ValueError, match="`X` holds values too far from the training inputs"):
        model.predict_proba(X[:2] * 1e300)
    with pytest.raises(ValueError, match=r"^`X` must have shape \(num_points, 2\): 2 columns"):
        jax.jit(kl.predict_proba)(model, jnp.asarray(X[:3, :1]))  # checked while tracing


def test_save_and_load_a_fitted_classifier(tmp_path):
    X, y = _rings()
    model = kronvi.fit_classifier(jax.random.key(2), X, y, SMALL).model
    kronvi.save_model(tmp_path / "clf.npz", model)
    again = kronvi.load_model(tmp_path / "clf.npz")
    assert isinstance(again, kl.FittedClassifier)
    for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(again.predict_proba(X[:9]), model.predict_proba(X[:9]))
    bad = model._replace(features=kronvi.inputs.RandomFourierFeatures(model.features.frequencies[:, :3]))
    with pytest.raises(ValueError, match="`model.prior_w` must be a DiscretePrior of 9 weights"):
        kronvi.save_model(tmp_path / "bad.npz", bad)


def test_a_rows_probability_does_not_depend_on_the_rows_beside_it():
    """Every row takes the quadrature nodes its own margin needs: the same probability alone or in a batch
    (before, the batch's largest margin set everyone's nodes)."""
    X, y = _rings()
    model = kronvi.fit_classifier(jax.random.key(4), X, y, SMALL._replace(prior_scales=(30.0,))).model
    far = np.vstack([X, X[:3] * 3.0])  # large margins beside ordinary rows: 153 rows, a bucket of 256
    whole = np.asarray(model.predict_proba(far))
    log_whole = np.asarray(kl.predict_log_proba(model, far))
    # to the bit (before: features computed at the batch's padded shape rounded differently, 2.4e-6 apart)
    for rows in ([0], [7], [151], [3, 40, 99, 150, 152]):
        np.testing.assert_array_equal(model.predict_proba(far[rows]), whole[rows])
        np.testing.assert_array_equal(kl.predict_log_proba(model, far[rows]), log_whole[rows])


def test_min_rows_pads_to_a_larger_bucket():
    X, y = _rings()
    base = kronvi.fit_classifier(jax.random.key(0), X, y, SMALL)
    more = kronvi.fit_classifier(jax.random.key(0), X, y, SMALL, min_rows=300)
    assert base.info.padded_rows == 160 and more.info.padded_rows == 320 and more.info.num_rows == 150
    np.testing.assert_allclose(more.model.predict_proba(X), base.model.predict_proba(X), atol=1e-4)
    with pytest.raises(ValueError, match="`min_rows` must be an int >= 1"):
        kronvi.fit_classifier(jax.random.key(0), X, y, SMALL, min_rows=0)


def test_the_features_basis_is_the_unrotated_recipe():
    """`basis="features"` fits the weights of the features themselves (no rotation), as the paper's grids do;
    the default rotates them, and predicts what the rotated weights' exact posterior gives."""
    X, y = _rings()
    plain, info = kronvi.fit_classifier(jax.random.key(1), X, y, SMALL._replace(basis="features"))
    paper = kronvi.fit_classifier(jax.random.key(1), X, y, SMALL._replace(grid="paper")).model
    assert plain.rotation is None and paper.rotation is None
    Phi = jnp.asarray(_features(plain, X), jnp.float32)
    np.testing.assert_allclose(plain.predict_proba(X), kl.predict_logistic(plain.q_w, plain.prior_w, Phi), atol=2e-5)
    # the grids' sds: the Hessian's at the MAP (in float64), the ones `laplace_grid_prior` gives
    _, exact = kl.laplace_grid_prior(Phi, y, info.prior_scale, levels=7)
    np.testing.assert_allclose(info.laplace.sd, exact.sd, rtol=1e-3)
    with pytest.raises(ValueError, match=r"config\.basis"):
        kronvi.fit_classifier(jax.random.key(1), X, y, SMALL._replace(basis="diagonal"))


@pytest.mark.parametrize("scale", [1e300, 1e-300])
def test_a_prior_scale_beyond_the_dtype_is_named(scale):
    X, y = _rings()
    with pytest.raises(ValueError, match=r"config\.prior_scales` holds"):
        kronvi.fit_classifier(jax.random.key(0), X, y, SMALL._replace(prior_scales=(1.0, scale)))


def test_rows_whose_horner_sums_may_underflow_take_log_mgf(monkeypatch):
    """Rows of large margins, whose Horner sums for log E cosh Z fall below 2^-90 (float32), get it from
    `log_mgf` instead, and their probabilities are `predict_logistic`'s."""
    X, y = _rings()
    model = kronvi.fit_classifier(jax.random.key(4), X, y, SMALL._replace(prior_scales=(30.0,))).model
    calls = []
    exact = _recipe._blocked_log_cosh
    monkeypatch.setattr(_recipe, "_blocked_log_cosh", lambda *a: calls.append(a[2].shape) or exact(*a))
    far = X[:5] * 3.0
    p = np.asarray(model.predict_proba(far))
    assert calls
    Phi = np.asarray(model.design(far))
    for i in range(5):
        expected = kl.predict_logistic(model.q_w, model.prior_w, jnp.asarray(Phi[i : i + 1]))
        np.testing.assert_allclose(p[i : i + 1], expected, atol=2e-5)


def _concave(u_star, *, bad=(), bad_range=(0.0, 0.0)):
    """An `evaluate` for `_search_scale` over E(u) = -exp(u - u*) + (u - u*) (u = log scale^2): steep on one
    side, flat on the other, maximal at u*; the scales in `bad` and inside `bad_range` give NaN. It records
    the scales asked for."""
    asked = []

    def evaluate(scale, init):
        asked.append((scale, init))
        u = 2 * np.log(scale)
        if any(np.isclose(scale, b) for b in bad) or bad_range[0] < scale < bad_range[1]:
            return scale, float("nan"), float("nan"), np.array([np.nan])
        return scale, -np.exp(u - u_star) + (u - u_star), -np.exp(u - u_star) + 1.0, np.array([u])

    return evaluate, asked


@pytest.mark.parametrize("optimum", [0.05, 0.9, 7.0, 40.0, 300.0])
def test_the_scale_search_finds_the_maximum(optimum):
    """From 3 the search brackets the maximum and stops within 10% of it (no stop on the promised gain), in
    a few evaluations; the scale returned is the best evaluated; every Newton starts at the MAP of the
    nearest scale evaluated."""
    evaluate, asked = _concave(2 * np.log(optimum))
    scales, evidence, k, payload = _recipe._search_scale(evaluate, gain_tol=0.0)
    assert scales == [s for s, _ in asked] and payload == scales[k] and scales[0] == 3.0
    assert evidence[k] == max(evidence) and len(scales) <= 7
    assert abs(np.log(scales[k] / optimum)) <= np.log(1.1) + 1e-12
    assert asked[0][1] is None
    for i, (s, init) in enumerate(asked[1:], 1):
        nearest = min(range(i), key=lambda j: abs(np.log(scales[j] / s)))
        assert init[0] == 2 * np.log(scales[nearest])


def test_the_cubic_maximum_of_a_bracket():
    """`_cubic_maximum` against a dense grid on cubics with a maximum inside the bracket: the point and the
    cubic's value there."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        c = rng.normal(size=4)
        f = np.polynomial.Polynomial(c)
        a, b = np.sort(rng.uniform(-3, 3, 2))
        if not f.deriv()(a) > 0 > f.deriv()(b):
            continue
        u, value = _recipe._cubic_maximum((a, f(a), f.deriv()(a)), (b, f(b), f.deriv()(b)))
        grid = np.linspace(a, b, 100_001)
        assert abs(u - grid[np.argmax(f(grid))]) <= 1e-4 * (b - a) and value == pytest.approx(f(u), rel=1e-9, abs=1e-12)


def test_the_scale_search_stops_at_its_bounds_and_its_budget():
    evaluate, _ = _concave(2 * np.log(1e5))  # beyond the upper bound: the bound, no step within rtol of it
    scales, _, k, _ = _recipe._search_scale(evaluate)
    assert scales[k] == pytest.approx(_recipe.SCALE_BOUNDS[1]) and scales[-1] == pytest.approx(1e3)
    assert all(np.log(1e3 / s) > np.log(1 + _recipe.SCALE_RTOL) for s in scales[:-1])
    evaluate, _ = _concave(2 * np.log(1e-4))
    scales, _, k, _ = _recipe._search_scale(evaluate)
    assert scales[k] == pytest.approx(_recipe.SCALE_BOUNDS[0])
    evaluate, asked = _concave(2 * np.log(40.0))
    scales, _, _, _ = _recipe._search_scale(evaluate, max_fits=2)
    assert len(asked) == 2
    evaluate, _ = _concave(2 * np.log(40.0))  # a tighter tolerance takes more steps, closer
    loose, _, k1, _ = _recipe._search_scale(evaluate, rtol=0.3, gain_tol=0.0)
    tight, _, k2, _ = _recipe._search_scale(evaluate, rtol=1e-3, max_fits=20, gain_tol=0.0)
    evaluate, _ = _concave(2 * np.log(40.0))  # the evidence promised by another fit: a looser stop
    gain, _, _, _ = _recipe._search_scale(evaluate, gain_tol=0.5)
    assert len(tight) >= len(loose) and abs(np.log(tight[k2] / 40.0)) < abs(np.log(loose[k1] / 40.0)) < np.log(1.3)
    assert len(gain) < len(loose)


def test_the_scale_search_keeps_the_best_finite_scale():
    """A scale whose fit is not finite is a wall: the search goes back toward the last finite scale (toward
    smaller scales when none is), never evaluates at or beyond the wall again, and returns the best finite
    scale; a non-finite MAP is no Newton start."""
    wall = 3.0 * np.sqrt(10.0)
    evaluate, asked = _concave(2 * np.log(40.0), bad=(wall,))  # the maximum lies beyond the wall
    scales, evidence, k, _ = _recipe._search_scale(evaluate)
    assert np.isnan(evidence[1]) and all(s < wall for s in scales[2:]) and len(scales) <= _recipe.MAX_SCALE_FITS
    assert scales[k] == max(scales[2:]) and scales[k] > wall / (1 + _recipe.SCALE_RTOL) ** 2
    assert all(init is None or np.all(np.isfinite(init)) for _, init in asked)
    evaluate, _ = _concave(2 * np.log(40.0), bad=(3.0,))  # the start: smaller scales, then up to the wall
    scales, evidence, k, _ = _recipe._search_scale(evaluate)
    assert scales[1] == pytest.approx(3.0 / np.sqrt(10.0)) and all(s < 3.0 for s in scales[1:])
    assert k > 0 and evidence[k] == np.nanmax(evidence)
    evaluate, _ = _concave(2 * np.log(40.0), bad=(*(3.0 / 10 ** (k / 2) for k in range(5)), 0.01))
    scales, evidence, k, _ = _recipe._search_scale(evaluate)  # nothing finite down to the bound: the first
    assert k == 0 and np.all(np.isnan(evidence)) and scales[-1] == pytest.approx(_recipe.SCALE_BOUNDS[0])
    evaluate, _ = _concave(2 * np.log(40.0), bad_range=(31.0, 90.0))  # inside a bracket: the search ends there
    scales, evidence, k, _ = _recipe._search_scale(evaluate, gain_tol=0.0)
    assert scales[3] == pytest.approx(3.0 * 10**1.5) and len(scales) == 5 and np.isnan(evidence[-1])
    assert k == int(np.nanargmax(evidence))


def test_the_default_scale_is_the_laplace_evidence_maximum(dtype):
    """`prior_scales=None` (the default): the chosen scale's Laplace evidence is at least that of a fine grid
    of scales on the same features (to the search's tolerance), its slope there is small, and `info`
    lists every scale evaluated with its evidence."""
    X, y = _rings()
    config = SMALL._replace(prior_scales=None)
    model, info = kronvi.fit_classifier(jax.random.key(3), X, y, config, dtype=dtype)
    assert len(info.scales) == info.log_evidence.shape[0] and info.prior_scale in info.scales
    assert float(model.prior_scale) == info.prior_scale
    assert float(info.log_evidence[info.scales.index(info.prior_scale)]) == float(np.max(info.log_evidence))
    Phi = jnp.asarray(_features(model, X), dtype)
    fine = np.exp(np.linspace(np.log(0.3), np.log(300.0), 61))
    grid = [float(kl.laplace_grid_prior(Phi, y, s, levels=7)[1].log_evidence) for s in fine]
    best = fine[int(np.argmax(grid))]
    assert 0.3 < best < 300.0  # an interior maximum
    assert abs(np.log(info.prior_scale / best)) < np.log(1.25)
    _, lap = kl.laplace_grid_prior(Phi, y, info.prior_scale, levels=7)
    assert float(lap.log_evidence) >= max(grid) - 0.05
    # the grid's choice for explicit candidates is unchanged: info.scales are the candidates
    _, grid_info = kronvi.fit_classifier(jax.random.key(3), X, y, SMALL, dtype=dtype)
    assert grid_info.scales == SMALL.prior_scales


def test_the_median_heuristic_is_numpys_median_to_the_bit():
    """`_median` (one partition) gives `np.median`'s value to the bit for odd and even sizes, with ties;
    `median_lengthscale` is the square root of `np.median` of the nonzero squared distances of its rows,
    with duplicate rows (zero distances, dropped) and without."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 11, 1000, 4951):
        for ties in (False, True):
            a = rng.exponential(size=n)
            a = np.round(a, 1) if ties else a
            assert _recipe._median(a) == np.median(a)
    from scipy.spatial.distance import pdist

    X = rng.normal(size=(120, 3))
    for rows in (X, np.r_[X, X[:7]]):
        d2 = pdist(rows, "sqeuclidean")
        expected = np.sqrt(np.median(d2[d2 > 0]))
        assert _recipe.median_lengthscale(rows, np.random.default_rng(1), 1000) == expected
    # more rows than `max_points`: the same rows the generator draws
    sub = X[np.sort(np.random.default_rng(2).choice(120, 50, replace=False))]
    d2 = pdist(sub, "sqeuclidean")
    assert _recipe.median_lengthscale(X, np.random.default_rng(2), 50) == np.sqrt(np.median(d2))
    assert _recipe.median_lengthscale(np.ones((5, 2)), rng, 1000) == 1.0  # all rows coincide


@pytest.mark.parametrize("basis", ["eigen", "features"])
def test_a_non_finite_map_at_every_scale_is_named(monkeypatch, basis):
    """Where the search's chosen fit has a non-finite MAP (every scale failed), the grids' Hessian is not
    attempted: a `FloatingPointError` names the scales, in either basis."""
    real = _recipe._search_scale

    def failed(evaluate, **kw):
        scales, evidence, k, lap = real(evaluate, **kw)
        return scales, evidence, k, lap._replace(mean=jnp.full_like(lap.mean, jnp.nan))

    monkeypatch.setattr(_recipe, "_search_scale", failed)
    X, y = _rings()
    with pytest.raises(FloatingPointError, match="non-finite MAP"):
        kronvi.fit_classifier(jax.random.key(0), X, y, SMALL._replace(prior_scales=None, basis=basis))


def _enumerated_log_pair(log_q, values, Phi):
    """`[log P(y=0), log P(y=1)]` `(N, 2)` by every configuration, in float64 log space."""
    import itertools

    from scipy.special import logsumexp

    log_q, values, Phi = (np.asarray(a, np.float64) for a in (log_q, values, Phi))
    b, m = values.shape
    idx = np.array(list(itertools.product(range(m), repeat=b)))
    rows = np.arange(b)
    lq, z = log_q[rows, idx].sum(axis=1), Phi @ values[rows, idx].T  # (C,), (N, C)
    return np.stack(
        [logsumexp(lq - np.logaddexp(0, z), axis=1), logsumexp(lq - np.logaddexp(0, -z), axis=1)], axis=1
    )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_log_probabilities_are_exact_in_the_tails(dtype):
    """Rows far on either side: the MGF bracket gives log P to 1e-3 where P is far below the quadrature's
    error (which returns 0 or 1 there); ordinary rows: predict_logistic's probability within its bound."""
    with jax.enable_x64(dtype == jnp.float64):
        rng = np.random.default_rng(3)
        b, m = 5, 4
        values = np.sort(rng.uniform(0.5, 2.0, (b, m)), axis=1)
        log_q = np.log(rng.dirichlet(np.ones(m), size=b))
        sign = np.repeat([-1.0, 1.0, 0.0], 6)[:, None]
        scale = np.concatenate([np.linspace(4.0, 30.0, 6)] * 3)[:, None]
        Phi = np.where(sign == 0, rng.normal(size=(18, b)) * 0.3, sign * scale * rng.uniform(0.5, 1.5, (18, b)))
        exact = _enumerated_log_pair(log_q, values, Phi)
        q = kronvi.model.MeanField(jnp.asarray(log_q, dtype))
        prior = kronvi.model.DiscretePrior(jnp.asarray(values, dtype), jnp.asarray(log_q, dtype))
        P = jnp.asarray(Phi, dtype)
        p, err = kl.predict_logistic(q, prior, P, with_error_bound=True)
        L = _recipe._tail_mgfs(q.log_probs, prior.values, P)
        target = _recipe.target_error(dtype)
        got = np.asarray(_recipe._log_pair(p, L, err, target), np.float64)
        with np.errstate(divide="ignore"):  # as the concrete path runs it: NumPy, float64, the target as bound
            host = _recipe._log_pair(np.asarray(p, np.float64), np.asarray(L, np.float64), target, target, xp=np)
        np.testing.assert_allclose(host[tail := np.min(exact, axis=1) < np.log(1e-20)], exact[tail], rtol=1e-3, atol=1e-12)
        np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=4 * np.finfo(dtype).eps)
        small = np.min(exact, axis=1)
        tail = small < np.log(1e-20)
        assert tail.sum() >= 8 and np.all(np.asarray(p)[tail & (sign[:, 0] < 0)] < 1e-6)
        np.testing.assert_allclose(got[tail], exact[tail], rtol=1e-3, atol=1e-12)  # the small log and the ~0 one
        np.testing.assert_allclose(np.exp(got[~tail, 1]), np.exp(exact[~tail, 1]), atol=3 * float(np.max(err)) + 1e-12)


def test_predict_log_proba_of_far_rows_lies_in_the_exact_bracket():
    """The public path on a fitted model (b = 16) and rows far on both sides, eager and under `jit`: the
    smaller probability inside [E e^Z - E e^2Z, E e^Z] (labels 1; -Z for 0), those MGFs computed here in
    float64 from the model's grids and features; probabilities far below `predict_proba`'s 1e-7."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    y = X[:, 0] + 0.5 * X[:, 1] > 0
    model = kronvi.fit_classifier(jax.random.key(0), X, y, SMALL._replace(prior_scales=(10.0,))).model
    far = np.outer(np.linspace(-3.0, 3.0, 13), [1.0, 0.5, 0.0])
    Phi = np.asarray(model.design(far), np.float64)
    log_q, values = (np.asarray(a, np.float64) for a in (model.q_w.log_probs, model.prior_w.values))
    L = {c: logsumexp(c * Phi[:, :, None] * values[None] + log_q[None], axis=2).sum(axis=1) for c in (1, 2, -1, -2)}
    for got in (np.asarray(kl.predict_log_proba(model, far)), np.asarray(jax.jit(kl.predict_log_proba)(model, far))):
        np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=1e-6)
        label = np.argmin(got, axis=1)  # the less likely label
        top = np.where(label == 1, L[1], L[-1])
        width = np.where(label == 1, L[2], L[-2])
        tight = width < top - 2.0
        assert np.sum(tight & (top < np.log(1e-10))) >= 6
        small = got[np.arange(len(far)), label]
        assert np.all(small[tight] <= top[tight] + 1e-4)
        assert np.all(small[tight] >= top[tight] + np.log1p(-np.exp(width[tight] - top[tight])) - 1e-4)
        assert np.all(label[:5] == 1) and np.all(label[-5:] == 0)


def test_predict_log_proba_under_jit_and_its_bad_inputs():
    X, y = _rings()
    model = kronvi.fit_classifier(jax.random.key(0), X, y, SMALL).model
    rows = np.vstack([X[:20], X[:3] * 2.0])
    eager = np.asarray(kl.predict_log_proba(model, rows))
    np.testing.assert_allclose(jax.jit(kl.predict_log_proba)(model, rows), eager, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(np.exp(eager[:, 1]), model.predict_proba(rows), atol=1e-6)
    assert kl.predict_log_proba(model, X[:0]).shape == (0, 2)
    with pytest.raises(ValueError, match="`X` has 3 columns"):
        kl.predict_log_proba(model, np.ones((2, 3)))
    with pytest.raises(TypeError, match="`model` must be a FittedClassifier"):
        kl.predict_log_proba(model.q_w, X)
