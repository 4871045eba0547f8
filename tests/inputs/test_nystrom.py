"""Nyström features: the dense kernel algebra, the landmarks, and the pipeline's fits and doors with them."""

import functools
import json

import numpy as np
import pytest
from helpers import run_python, subprocess_env


def _dense_kernel(A, B, kernel):
    """Unit-variance kernel of scaled inputs, densely in float64, from distances (not squared distances)."""
    r = np.sqrt(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))
    if kernel == "rbf":
        return np.exp(-0.5 * r**2)
    if kernel == "matern52":
        s = np.sqrt(5.0) * r
        return (1 + s + s**2 / 3) * np.exp(-s)
    s = np.sqrt(3.0) * r
    return (1 + s) * np.exp(-s)


@pytest.mark.parametrize("kernel,placement", [("rbf", "kmeans"), ("matern52", "rows"), ("matern32", "kmeans")])
def test_features_give_the_nystrom_kernel_and_are_exact_on_the_landmarks(kernel, placement):
    import jax
    import jax.numpy as jnp

    import kronvi

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    ls = np.array([0.7, 1.5, 3.0])
    with jax.enable_x64(True):
        params = kronvi.inputs.nystrom_init(
            jax.random.key(1), X, jnp.asarray(ls), 25, kernel=kernel, placement=placement
        )
        Phi = np.asarray(kronvi.inputs.nystrom_features(params, jnp.asarray(X)))
        Z = np.asarray(params.landmarks)  # divided by the lengthscales
        Phi_z = np.asarray(kronvi.inputs.nystrom_features(params, jnp.asarray(Z * ls)))
    is_row = [bool(np.any(np.all(np.isclose(X / ls, z), axis=1))) for z in Z]
    assert all(is_row) if placement == "rows" else not all(is_row)  # k-means moved some landmarks off the rows
    assert len(np.unique(Z, axis=0)) == 25
    K_xz = _dense_kernel(X / ls, Z, kernel)
    K_zz = _dense_kernel(Z, Z, kernel) + kronvi._inputs.features.NYSTROM_JITTER * np.eye(25)
    np.testing.assert_allclose(Phi @ Phi.T, K_xz @ np.linalg.solve(K_zz, K_xz.T), atol=1e-9)
    # on the landmarks the approximation is the kernel itself (up to the jitter)
    np.testing.assert_allclose(Phi_z @ Phi_z.T, K_zz - 1e-6 * np.eye(25), atol=1e-5)
    # elsewhere it is below the kernel: phi(x).phi(x) <= k(x, x) = 1
    assert np.all(np.sum(Phi**2, axis=1) <= 1 + 1e-9)
    # and a different kernel gives different features: the test can fail
    other = "rbf" if kernel != "rbf" else "matern32"
    assert np.max(np.abs(K_xz - _dense_kernel(X / ls, Z, other))) > 0.05


def _lloyd(X, C, iterations):
    """Lloyd's iterations by dense distances in float64 (no centre may lose every row)."""
    C = np.array(C, np.float64)
    for _ in range(iterations):
        labels = np.argmin(((X[:, None, :] - C[None, :, :]) ** 2).sum(-1), axis=1)
        assert np.all(np.bincount(labels, minlength=len(C)) > 0)
        C = np.stack([X[labels == j].mean(axis=0) for j in range(len(C))])
    return C


def test_kmeans_centres_are_lloyds_iterations():
    from kronvi._inputs.features import kmeans_centres

    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(size=(150, 2)) * 0.3 + c for c in ([0, 0], [3, 0], [0, 3])])
    start = X[rng.choice(len(X), 12, replace=False)]
    for iterations in (1, 3):
        C = kmeans_centres(X, start, iterations, chunk=64)  # several chunks
        np.testing.assert_allclose(C, _lloyd(X, start, iterations), atol=1e-5)
        assert not np.allclose(C, start, atol=1e-2)  # the centres moved: the test can fail
    # a converged result is a fixed point
    done = kmeans_centres(X, start, 200)
    np.testing.assert_allclose(kmeans_centres(X, done, 5), done, atol=1e-6)
    np.testing.assert_allclose(done, _lloyd(X, start, 200), atol=1e-5)
    # rows far from the origin (in lengthscales) give the same centres, shifted: the float32 distances of
    # the uncentred rows would lose their digits there
    shift = np.array([3e3, -2e3])
    np.testing.assert_allclose(kmeans_centres(X + shift, start + shift, 3) - shift, _lloyd(X, start, 3), atol=1e-4)
    # one input
    x = np.arange(7.0)[:, None]
    np.testing.assert_allclose(kmeans_centres(x, x[[0, 1]], 10), [[1.0], [4.5]])


def test_kmeans_centres_move_an_empty_centre_to_a_far_row():
    from kronvi._inputs.features import kmeans_centres

    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [5.2, 0.0], [9.0, 0.0]])
    # two equal centres: the second gets no row; the row farthest from its centre (9, 0) takes it
    C = kmeans_centres(X, X[[0, 0, 2]], 1)
    np.testing.assert_allclose(C, [[0.05, 0.0], [9.0, 0.0], [6.4, 0.0]], atol=1e-6)
    C = kmeans_centres(X, X[[0, 0, 2]], 10)
    np.testing.assert_allclose(C, [[0.05, 0.0], [9.0, 0.0], [5.1, 0.0]], atol=1e-6)
    # with no row far from its centre an empty centre stays where it is
    Y = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    np.testing.assert_allclose(kmeans_centres(Y, Y[[0, 1, 2]], 3), Y[[0, 1, 2]], atol=1e-6)


def test_kmeans_landmarks_approximate_the_kernel_better_than_drawn_rows(monkeypatch):
    """On clustered rows of unequal spread, the k-means landmarks leave a smaller Nyström error
    (sum of k(x, x) - phi(x).phi(x)) than the rows they started from, for the same key."""
    import jax
    import jax.numpy as jnp

    import kronvi

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(1500, 2)) * 0.2, rng.normal(size=(500, 2)) * 2.0 + 6])
    errors = {}
    for placement in ("rows", "kmeans"):
        params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(2), 150, placement=placement)
        Phi = np.asarray(kronvi.inputs.nystrom_features(params, X), np.float64)
        errors[placement] = float(np.sum(1.0 - np.sum(Phi**2, axis=1)))
    assert errors["kmeans"] < 0.8 * errors["rows"], errors
    # a cap on the rows clustered: a random subset of a larger X, drawn by the key
    from kronvi._inputs import features

    seen = []
    lloyd = features.kmeans_centres
    monkeypatch.setattr(features, "KMEANS_MAX_ROWS", 600)
    monkeypatch.setattr(features, "kmeans_centres", lambda X, *a: seen.append(X.shape) or lloyd(X, *a))
    params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(2), 150, placement="kmeans")
    assert seen == [(600, 2)]
    Phi = np.asarray(kronvi.inputs.nystrom_features(params, X), np.float64)
    assert len(np.unique(np.asarray(params.landmarks), axis=0)) == 150
    assert float(np.sum(1.0 - np.sum(Phi**2, axis=1))) < errors["rows"]


def test_landmarks_are_drawn_by_the_key_and_every_row_when_as_many():
    import jax
    import jax.numpy as jnp

    import kronvi

    X = np.random.default_rng(0).normal(size=(40, 2))
    a, b, c = (kronvi.inputs.nystrom_init(jax.random.key(k), X, jnp.ones(2), 10) for k in (0, 0, 1))
    assert np.array_equal(np.asarray(a.landmarks), np.asarray(b.landmarks))
    assert not np.array_equal(np.asarray(a.landmarks), np.asarray(c.landmarks))
    full = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(2), 40)
    np.testing.assert_allclose(np.sort(np.asarray(full.landmarks), axis=0), np.sort(X, axis=0).astype(np.float32))
    # jit and vmap see a pytree of arrays (the kernel is static)
    f = jax.jit(kronvi.inputs.nystrom_features)
    np.testing.assert_allclose(f(a, X), kronvi.inputs.nystrom_features(a, X), rtol=1e-6, atol=1e-6)
    stacked = jax.vmap(lambda x: kronvi.inputs.nystrom_features(a, x[None])[0])(jnp.asarray(X, jnp.float32))
    np.testing.assert_allclose(stacked, f(a, X), rtol=1e-5, atol=1e-6)


def test_feature_mean_of_nystrom_features():
    import jax
    import jax.numpy as jnp

    import kronvi

    X = np.random.default_rng(0).normal(size=(3000, 2))
    params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(2), 30)
    mean = kronvi.inputs.feature_mean(params, jnp.asarray(X, jnp.float32), chunk_size=256)
    ref = np.asarray(kronvi.inputs.nystrom_features(params, X)).mean(axis=0)
    np.testing.assert_allclose(mean, ref, rtol=1e-4, atol=1e-6)
    centred = params._replace(offset=mean)
    assert np.max(np.abs(np.asarray(kronvi.inputs.nystrom_features(centred, X)).mean(axis=0))) < 1e-5
    # in float64 the kernel rows' mean is whitened once (not every row): the same mean to rounding
    with jax.enable_x64(True):
        p64 = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(2), 30, jitter=1e-10, placement="rows")
        assert float(np.linalg.norm(np.asarray(p64.whiten), 2)) > 300  # close landmarks: the test can fail
        mean64 = kronvi.inputs.feature_mean(p64, jnp.asarray(X), chunk_size=256)
        assert mean64.dtype == jnp.float64
        ref64 = np.asarray(kronvi.inputs.nystrom_features(p64, jnp.asarray(X))).mean(axis=0)
    np.testing.assert_allclose(np.asarray(mean64), ref64, rtol=1e-9, atol=1e-9)


def test_nystrom_init_errors_name_the_argument():
    import jax
    import jax.numpy as jnp

    import kronvi

    X = np.zeros((5, 2)) + np.arange(5)[:, None]
    init = functools.partial(kronvi.inputs.nystrom_init, jax.random.key(0))
    with pytest.raises(ValueError, match="num_landmarks"):
        init(X, jnp.ones(2), 6)
    with pytest.raises(ValueError, match="kernel"):
        init(X, jnp.ones(2), 3, kernel="laplace")
    with pytest.raises(ValueError, match="placement"):
        init(X, jnp.ones(2), 3, placement="grid")
    with pytest.raises(ValueError, match="lengthscales"):
        init(X, jnp.ones(3), 3)
    with pytest.raises(ValueError, match="lengthscales"):
        init(X, -jnp.ones(2), 3)
    with pytest.raises(ValueError, match="`X`"):
        init(np.full((5, 2), np.nan), jnp.ones(2), 3)
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(lambda x: init(x, jnp.ones(2), 3).landmarks)(jnp.asarray(X))
    with pytest.raises(ValueError, match="`X` has 3 columns"):
        kronvi.inputs.nystrom_features(init(X, jnp.ones(2), 3), np.zeros((2, 3)))


def _fit(X, y, **config):
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    with jax.enable_x64(True):
        one = functools.partial(jnp.asarray, dtype=jnp.float64)
        gp = (kronvi.inputs.GPHyperparameters(one([0.5, 1.0]), one(1.0), one(0.01)), None)  # no GP fit
        cfg = pipeline.DirectConfig(num_frequencies=20, feature_map="nystrom", **config)
        fold = pipeline.prepare_fold(jax.random.key(0), X, y, cfg, dtype=jnp.float64, gp=gp)
        return fold, pipeline.fit_prepared(fold, cfg).model


def test_the_eigen_recipe_on_nystrom_features_is_bayesian_linear_regression_on_them():
    """The fit's predictive mean is exact BLR with an intercept on the dense Nyström features (40 landmarks
    among the 120 rows), at the fold's prior scale and noise, in float64; and it returns to the training
    targets' mean far from every row, where random Fourier features do not."""
    import jax

    import kronvi
    from kronvi import pipeline

    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 2))
    y = 3.0 + np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=150)
    n = 120
    fold, model = _fit(X[:n], y[:n])
    assert isinstance(model.features, kronvi.inputs.NystromFeatures) and model.prior_w.values.shape[0] == 40
    with jax.enable_x64(True):
        mean = np.asarray(pipeline.predict(model, X[n:]).mean)
        far = np.asarray(pipeline.predict(model, X[n:] + 30.0).mean)
        s2 = float(kronvi.model.noise_moments(model.q_noise, model.prior_noise)[2]) * float(model.y_scale) ** 2
    Xs = (X - np.asarray(model.standardizer.mean)) / np.asarray(model.standardizer.scale)
    inv = np.asarray(model.features.inv_lengthscales)
    Z = np.asarray(model.features.landmarks) / inv
    K_zz = _dense_kernel(Z * inv, Z * inv, "rbf") + 1e-6 * np.eye(len(Z))
    L = np.linalg.cholesky(K_zz)
    F, Ft = (np.linalg.solve(L, _dense_kernel(A * inv, Z * inv, "rbf").T).T for A in (Xs[:n], Xs[n:]))
    sw2 = (float(fold.prior_scale) * float(model.y_scale)) ** 2
    Fc, yc = F - F.mean(axis=0), y[:n] - y[:n].mean()
    w = np.linalg.solve(Fc.T @ Fc / s2 + np.eye(F.shape[1]) / sw2, Fc.T @ yc / s2)
    ref = y[:n].mean() + (Ft - F.mean(axis=0)) @ w
    err = np.max(np.abs(mean - ref))
    assert err < 0.02 * y.std()  # 15 levels a weight, not a Gaussian: close, not equal
    assert err < 0.2 * np.max(np.abs(ref - ref.mean()))  # the test can fail
    # far from the rows the features vanish: the prediction is the mean of the features' intercept
    assert np.ptp(far) < 1e-6 * y.std()
    np.testing.assert_allclose(far, y[:n].mean() - F.mean(axis=0) @ w, atol=0.02 * y.std())
    assert np.max(np.abs(far - y[:n].mean())) < 0.5 * y.std()


def test_nystrom_models_through_every_door(tmp_path):
    """The same seed gives the same Nyström model from `fit_direct`, `DirectRegressor` and `kronvi fit --save`;
    it saves and loads whole; the options that cannot draw landmarks say so."""
    import jax

    import kronvi
    from kronvi import pipeline
    from kronvi.sklearn import DirectRegressor

    X, y, mask = kronvi.load_demo()
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    test = np.asarray(mask)[:, 0].astype(bool)
    config = pipeline.DirectConfig(num_frequencies=60, feature_map="nystrom")
    model = pipeline.fit_direct(jax.random.key(3), X[~test], y[~test], config).model
    mean = np.asarray(pipeline.predict(model, X[test]).mean)
    est = DirectRegressor(n_frequencies=60, feature_map="nystrom", random_state=3).fit(X[~test], y[~test])
    np.testing.assert_allclose(est.predict(X[test]), mean, rtol=1e-5, atol=1e-5 * y.std())
    path = tmp_path / "m.npz"
    kronvi.save_model(path, model)
    loaded = kronvi.load_model(path)
    assert isinstance(loaded.features, kronvi.inputs.NystromFeatures)
    np.testing.assert_array_equal(np.asarray(pipeline.predict(loaded, X[test]).mean), mean)
    bad = model._replace(features=model.features._replace(whiten=model.features.whiten.at[0, 0].set(np.nan)))
    with pytest.raises(ValueError, match="model.features.whiten"):
        kronvi.save_model(tmp_path / "bad.npz", bad)
    with pytest.raises(ValueError, match="model.features.inv_lengthscales"):
        kronvi.save_model(tmp_path / "bad.npz", model._replace(features=model.features._replace(inv_lengthscales=np.ones(2))))
    assert not (tmp_path / "bad.npz").exists()
    with pytest.raises(ValueError, match="feature_map"):
        pipeline.stream_init(jax.random.key(0), X, y, config)
    with pytest.raises(ValueError, match="feature_map"):
        DirectRegressor(feature_map="nystrom").partial_fit(X, y)
    with pytest.raises(ValueError, match="config.feature_map"):
        pipeline.fit_direct(jax.random.key(0), X, y, pipeline.DirectConfig(feature_map="random"))
    assert pipeline.DirectConfig(feature_map="nystrom").as_flat_dict()["feature_map"] == "nystrom"
    assert "feature_map" not in pipeline.DirectConfig().as_flat_dict()


def test_num_fit_features_is_the_b_a_fit_starts_from():
    """`num_fit_features`: the default b and map by rows, an explicit b, Nyström landmarks at most one per row,
    the larger map's b for "auto", the feature budget's first b; the CLI and `check_fit_memory` size from it."""
    from kronvi import pipeline

    n = pipeline.num_fit_features
    assert [n(r) for r in (3_999, 4_000, 19_999, 20_000, 99_999, 100_000)] == [2000] * 3 + [6000, 6000, 4000]
    assert n(30_000, pipeline.DirectConfig(feature_map="fourier")) == 4000
    assert n(30_000, pipeline.DirectConfig(feature_map="auto")) == 6000
    assert n(500, pipeline.DirectConfig(num_frequencies=300)) == 600  # random Fourier features: any b
    assert n(500, pipeline.DirectConfig(num_frequencies=300, feature_map="nystrom")) == 500  # every row a landmark
    assert n(500, pipeline.DirectConfig(num_frequencies=300, feature_map="auto")) == 600
    assert n(50_000, pipeline.DirectConfig(feature_budget=30.0)) == 2 * pipeline.GROWTH_START_FREQUENCIES
    assert n(50_000, pipeline.DirectConfig(feature_budget=30.0, num_frequencies=800)) == 1600


def test_the_default_map_is_nystrom_between_its_row_counts(monkeypatch):
    """`feature_map=None` (the default) fits Nyström features from `NYSTROM_MIN_ROWS` rows up to
    `NYSTROM_MAX_ROWS` with the eigen and compact recipes, and random Fourier features below and above, with
    the paper's recipe, for traced rows and for a stream; an explicit map is kept (the thresholds made small)."""
    import jax

    import kronvi
    from kronvi import pipeline
    from kronvi.sklearn import DirectRegressor

    seen = []  # the memory check sizes the b the fit will take ("auto" fits both maps)
    monkeypatch.setattr(pipeline, "check_memory", lambda nbytes, *, what, argument: seen.append(what))
    for fmap in (None, "fourier", "auto", "nystrom"):
        pipeline.check_fit_memory(30_000, pipeline.DirectConfig(feature_map=fmap))
    pipeline.check_fit_memory(30_000, pipeline.DirectConfig(recipe=kronvi.Features()))
    pipeline.check_fit_memory(150_000, pipeline.DirectConfig())
    pipeline.check_fit_memory(10_000, pipeline.DirectConfig())
    assert [w.split(" features")[0] for w in seen] == ["a fit with b = " + b for b in ("6000", "4000", "6000", "6000", "4000", "4000", "2000")]
    assert [pipeline.default_feature_map(n) for n in (3_999, 4_000, 99_999, 100_000)] == ["fourier", "nystrom", "nystrom", "fourier"]
    monkeypatch.setattr(pipeline, "NYSTROM_MIN_ROWS", 60)
    monkeypatch.setattr(pipeline, "LARGE_DATA_ROWS", 100)
    monkeypatch.setattr(pipeline, "NYSTROM_MAX_ROWS", 120)
    assert [pipeline.default_feature_map(n) for n in (59, 60, 119, 120)] == ["fourier", "nystrom", "nystrom", "fourier"]
    assert pipeline.default_feature_map(60, "features") == "fourier"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=150)
    gp = pipeline.GPOptions(points=40)

    def fitted(n, **kw):
        return pipeline.fit_direct(jax.random.key(1), X[:n], y[:n], pipeline.DirectConfig(gp=gp, **kw))

    inside = fitted(80)
    assert inside.info.feature_map == "nystrom"
    assert inside.model.features.landmarks.shape[0] == 80  # b = 2000 capped at every row a landmark
    assert fitted(80, recipe=kronvi.Compact()).info.feature_map == "nystrom"
    assert fitted(80, feature_map="fourier").info.feature_map == "fourier"
    assert fitted(80, recipe=kronvi.Features(noise_cv=())).info.feature_map == "fourier"  # the paper's recipe
    for n in (50, 130):
        below_or_above = fitted(n)
        assert below_or_above.info.feature_map == "fourier"
        assert below_or_above.model.features.frequencies.shape[-1] == (1000 if n < 100 else 2000)
    # the same model as the explicit map from the same key, and through the estimator
    explicit = fitted(80, feature_map="nystrom").model
    np.testing.assert_array_equal(np.asarray(inside.model.q_w.logits), np.asarray(explicit.q_w.logits))
    est = DirectRegressor(gp_points=40, random_state=1).fit(X[:80], y[:80])
    assert isinstance(est.model_.features, kronvi.inputs.NystromFeatures)
    np.testing.assert_allclose(est.predict(X[80:]), np.asarray(pipeline.predict(inside.model, X[80:]).mean), rtol=1e-5)
    # traced rows and streams cannot draw landmarks on the host: random Fourier features
    hyper = (kronvi.inputs.GPHyperparameters(np.ones(2), np.asarray(1.0), np.asarray(0.1)), None)
    traced = jax.eval_shape(
        lambda a, b: pipeline.prepare_fold(jax.random.key(1), a, b, pipeline.DirectConfig(gp=gp), gp=hyper).features,
        X[:80], y[:80],
    )  # fmt: skip
    assert isinstance(traced, kronvi.inputs.RandomFourierFeatures)
    state = pipeline.stream_init(jax.random.key(1), X[:80], y[:80], pipeline.DirectConfig(gp=gp))
    assert isinstance(state.features, kronvi.inputs.RandomFourierFeatures)
    assert isinstance(DirectRegressor(gp_points=40).partial_fit(X[:80], y[:80]).model_.features, kronvi.inputs.RandomFourierFeatures)


def test_the_command_line_fits_and_saves_nystrom_features(tmp_path):
    import kronvi

    X, y, mask = kronvi.load_demo()
    csv = tmp_path / "d.csv"
    np.savetxt(csv, np.column_stack([X, y]), delimiter=",", header=",".join(["a"] * X.shape[1] + ["y"]), comments="")
    out, model = tmp_path / "fit.json", tmp_path / "m.npz"
    run_python(
        "-m", "kronvi", "fit", str(csv), "--feature-map", "nystrom", "--num-features", "100", "--max-folds", "1",
        "--json", str(out), "--save", str(model), env=subprocess_env(),
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["settings"]["feature_map"] == "nystrom"
    assert [fold["feature_map"] for fold in record["folds"]] == ["nystrom"]
    assert isinstance(kronvi.load_model(model).features, kronvi.inputs.NystromFeatures)


def test_the_auto_map_fits_the_features_of_the_larger_evidence():
    import jax

    from kronvi import pipeline

    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, size=(400, 2))
    y = np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1]) + 0.05 * rng.normal(size=400)
    base = pipeline.DirectConfig(num_frequencies=60, gp=pipeline.GPOptions(restarts=1))
    folds = {m: pipeline.prepare_fold(jax.random.key(0), X, y, base._replace(feature_map=m)) for m in ("fourier", "nystrom")}
    evidence = {m: float(f.log_evidence) for m, f in folds.items()}
    assert abs(evidence["fourier"] - evidence["nystrom"]) > 1.0  # a real choice: the test can fail
    best = max(evidence, key=evidence.get)
    auto = pipeline.fit_direct(jax.random.key(0), X, y, base._replace(feature_map="auto"))
    assert auto.info.feature_map == best
    chosen = pipeline.fit_direct(jax.random.key(0), X, y, base._replace(feature_map=best))
    np.testing.assert_array_equal(
        np.asarray(auto.model.predict(X[:20]).mean), np.asarray(chosen.model.predict(X[:20]).mean)
    )
    with pytest.raises(ValueError, match="feature_map='auto'"):
        pipeline.fit_direct(jax.random.key(0), X, y, pipeline.DirectConfig(recipe=pipeline.Features(), feature_map="auto"))


def test_a_float32_model_computes_nystrom_features_in_float64():
    """Repeated rows make the landmarks' kernel matrix singular but for the jitter, and its whitening as large as
    the jitter's -1/2 power (1000): features computed in float32 lose their leading digits to cancellation.
    `fold_features`, `predict` and `log_density` compute them (and their rotation) in float64."""
    import jax
    import jax.numpy as jnp

    from kronvi import pipeline

    rng = np.random.default_rng(3)
    X = np.repeat(rng.uniform(-2, 2, size=(150, 2)), 4, axis=0)
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.01 * rng.normal(size=600)
    config = pipeline.DirectConfig(num_frequencies=150, feature_map="nystrom")
    model = pipeline.fit_direct(jax.random.key(0), X, y, config).model
    f = model.features
    assert np.linalg.norm(np.asarray(f.whiten, np.float64), 2) > 300  # ill-conditioned: the case at hand
    # the stored (float32) landmarks are the ones whitened: L^-1 (K_ZZ + jitter) L^-T = I to float32 rounding
    W, Z = np.asarray(f.whiten, np.float64), np.asarray(f.landmarks, np.float64)
    K_zz = np.exp(-0.5 * ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)) + 1e-6 * np.eye(len(Z))
    assert np.max(np.abs(W @ K_zz @ W.T - np.eye(len(Z)))) < 1e-3
    Xt = rng.uniform(-2, 2, size=(50, 2))
    # the standardized rows in the model's dtype, as the training rows' statistics saw them
    Xs = ((Xt - np.asarray(model.standardizer.mean)) / np.asarray(model.standardizer.scale)).astype(np.float32)
    A, Z = Xs.astype(np.float64) * np.asarray(f.inv_lengthscales, np.float64), np.asarray(f.landmarks, np.float64)
    K = np.exp(-0.5 * ((A[:, None, :] - Z[None, :, :]) ** 2).sum(-1))
    ref = (K @ np.asarray(f.whiten, np.float64).T - np.asarray(f.offset, np.float64)) @ np.asarray(
        model.basis.vectors, np.float64
    )
    assert np.asarray(pipeline.fold_features(model, Xt)).dtype == np.float32
    got = np.asarray(pipeline.fold_features(model, Xt), np.float64)
    naive = np.asarray(jax.jit(pipeline.fold_features)(model, jnp.asarray(Xt, jnp.float32)), np.float64)
    err, naive_err = np.max(np.abs(got - ref)), np.max(np.abs(naive - ref))
    assert err < 1e-6 * np.max(np.abs(ref)) + 1e-7
    assert naive_err > 100 * err  # traced (float32) features lose digits: the test can fail
    mean = np.asarray(pipeline.predict(model, Xt).mean)
    np.testing.assert_allclose(mean, np.sin(2 * Xt[:, 0]) + Xt[:, 1] ** 2, atol=0.1)
    assert np.all(np.isfinite(pipeline.log_density(model, Xt, np.sin(2 * Xt[:, 0]) + Xt[:, 1] ** 2)))


def test_the_stored_float32_landmarks_are_the_ones_whitened():
    """Near-repeated landmarks (rows 1e-6 apart, a short lengthscale) leave the whitening as large as the
    jitter allows; rounding the landmarks to float32 after factoring their float64 values would break
    $L^{-1}(K_{ZZ} + \\epsilon I)L^{-\\top} = I$ for the stored ones. `nystrom_init` factors the stored ones."""
    import jax
    import jax.numpy as jnp

    import kronvi

    rng = np.random.default_rng(4)
    base = rng.uniform(28, 32, size=(60, 2))  # far from 0: float32 rounds the scaled inputs by ~6e-5
    X = np.repeat(base, 4, axis=0) + 1e-6 * rng.normal(size=(240, 2))
    params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.asarray([0.05, 0.05], jnp.float32), 200)
    W, Z = np.asarray(params.whiten, np.float64), np.asarray(params.landmarks, np.float64)
    assert np.linalg.norm(W, 2) > 300  # ill-conditioned: the case at hand
    K_zz = np.exp(-0.5 * ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)) + 1e-6 * np.eye(len(Z))
    assert np.max(np.abs(W @ K_zz @ W.T - np.eye(len(Z)))) < 1e-3


def test_the_host_whitened_statistics_are_those_of_the_features():
    """The statistics pass of float64 Nyström features whitens the kernel rows by a triangular product in the
    host BLAS: the same statistics as the features' own pass, to rounding; a wrong whitening is seen."""
    import functools

    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi._inputs.features import nystrom_kernel_unchecked
    from kronvi._stats.regression import host_whitened_stats

    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(700, 3)), rng.normal(size=700)
    with jax.enable_x64(True):
        params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(3, jnp.float64), 50)
        params = params._replace(offset=kronvi.inputs.feature_mean(params, jnp.asarray(X)))
        ref = kronvi.stats.regression_stats_from_inputs(
            functools.partial(kronvi.inputs.nystrom_features, params), jnp.asarray(X), jnp.asarray(y), chunk_size=256
        )
        kernel = functools.partial(nystrom_kernel_unchecked, params._replace(offset=None))
        got = host_whitened_stats(kernel, params.whiten, params.offset, X, y, chunk_size=256)
        wrong = host_whitened_stats(kernel, params.whiten.T, params.offset, X, y, chunk_size=None)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-9)
    assert np.max(np.abs(np.asarray(wrong.PhitPhi) - np.asarray(ref.PhitPhi))) > 1.0


def test_the_pipeline_takes_the_host_whitening_for_triangular_float64_maps_only(monkeypatch):
    """A float64 Nyström preparation computes its statistics by `host_whitened_stats` (the fit still equals
    dense Bayesian linear regression: the test above); a map whose whitening is not lower triangular (built
    by hand) keeps the features' own pass."""
    import jax
    import jax.numpy as jnp

    import kronvi
    from kronvi import pipeline

    calls = []
    real = pipeline.host_whitened_stats
    monkeypatch.setattr(pipeline, "host_whitened_stats", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=150)
    _fit(X, y)
    assert calls  # the host path ran
    with jax.enable_x64(True):
        params = kronvi.inputs.nystrom_init(jax.random.key(0), X, jnp.ones(2, jnp.float64), 20)
        Xd, yd = jnp.asarray(X), jnp.asarray(y)
        assert pipeline._whitened_stats_of(params, Xd, yd) is not None
        full = params._replace(whiten=params.whiten + params.whiten.T)  # not triangular
        assert pipeline._whitened_stats_of(full, Xd, yd) is None
        assert pipeline._whitened_stats_of(jax.tree.map(lambda a: a.astype(jnp.float32), params), Xd, yd) is None
