"""Bad input gets a clear error that names the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


def _ok(b=3):
    rng = np.random.default_rng(0)
    Phi = jnp.asarray(rng.normal(size=(10, b)), jnp.float32)
    y = jnp.asarray(rng.normal(size=10), jnp.float32)
    pw = kronvi.model.gaussian_prior(b, 1.0, levels=5)
    pn = kronvi.model.noise_prior(0.5, levels=3)
    return Phi, y, pw, pn, kronvi.stats.regression_stats(Phi, y)


@pytest.mark.parametrize(
    "Phi,y,match",
    [
        (np.ones((5, 2)), np.ones(4), "`Phi` has 5 rows but `y` has 4"),
        (np.ones(5), np.ones(5), "`Phi` must be 2-D"),
        (np.ones((5, 2)), np.ones((5, 2)), "`y` must be 1-D"),
        (np.ones((0, 2)), np.ones(0), "`Phi` is empty"),
        (np.ones((5, 0)), np.ones(5), "`Phi` has no columns"),
        (np.array([[1.0, np.nan]] * 3), np.ones(3), "`Phi` contains 3 NaN or infinite"),
        (np.ones((3, 2)), np.array([1.0, np.inf, 0.0]), "`y` contains 1 NaN or infinite"),
    ],
)
def test_regression_stats_rejects_bad_data(Phi, y, match):
    with pytest.raises(ValueError, match=match):
        kronvi.stats.regression_stats(Phi, y)


def test_chunk_size_and_folds_are_validated():
    Phi, y, *_ = _ok()
    with pytest.raises(ValueError, match="chunk_size"):
        kronvi.stats.regression_stats(Phi, y, chunk_size=0)
    with pytest.raises(ValueError, match="`folds` leaves fold"):
        kronvi.stats.kfold_stats(Phi, y, np.array([0, 0, 0, 2, 2, 2, 0, 0, 2, 2]))
    with pytest.raises(ValueError, match="`folds` must have shape"):
        kronvi.stats.kfold_stats(Phi, y, np.zeros(3, int))


def test_priors_are_validated():
    with pytest.raises(ValueError, match="`log_probs` shape"):
        kronvi.model.DiscretePrior(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="`values` must be 2-D"):
        kronvi.model.DiscretePrior(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="`log_probs` contains"):
        kronvi.model.DiscretePrior(np.zeros((1, 2)), np.array([[0.0, -np.inf]]))
    with pytest.raises(ValueError, match="`scale` must be strictly positive"):
        kronvi.model.gaussian_prior(3, 0.0)
    with pytest.raises(ValueError, match="`scale` must be a scalar or shape"):
        kronvi.model.gaussian_prior(3, np.ones(2))
    with pytest.raises(ValueError, match="`levels`"):
        kronvi.model.gaussian_prior(3, 1.0, levels=1)
    with pytest.raises(ValueError, match="`variance` must be strictly positive"):
        kronvi.model.noise_prior(-1.0)
    with pytest.raises(ValueError, match="`variance` contains"):
        kronvi.model.noise_prior(np.nan)
    with pytest.raises(ValueError, match="`span`"):
        kronvi.model.noise_prior(1.0, span=1.0)


def test_noise_prior_must_be_positive_and_one_row():
    Phi, y, pw, pn, stats = _ok()
    q = kronvi.model.MeanField.from_prior(pw)
    bad = kronvi.model.DiscretePrior(np.array([[-1.0, 1.0]]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="noise variances"):
        kronvi.model.regression_elbo(stats, q, kronvi.model.MeanField(np.zeros((1, 2))), pw, bad)
    two_rows = kronvi.model.DiscretePrior(np.ones((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"`prior_noise` must have shape \(1, m_sigma\)"):
        kronvi.fitting.fit_regression(stats, pw, two_rows)


def test_mismatched_grids_and_logits():
    Phi, y, pw, pn, stats = _ok()
    qn = kronvi.model.MeanField.from_prior(pn)
    with pytest.raises(ValueError, match="`q_w.logits` has shape"):
        kronvi.model.regression_elbo(stats, kronvi.model.MeanField(np.zeros((3, 4))), qn, pw, pn)
    with pytest.raises(ValueError, match="`q_noise.logits` has shape"):
        kronvi.model.regression_elbo(
            stats, kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField(np.zeros((1, 7))), pw, pn
        )
    with pytest.raises(ValueError, match="`prior_w` has 4 weights but the data have 3 features"):
        kronvi.fitting.fit_regression(stats, kronvi.model.gaussian_prior(4, 1.0, levels=5), pn)
    with pytest.raises(ValueError, match="`logits` must be 2-D"):
        kronvi.model.MeanField(np.zeros(3))
    with pytest.raises(ValueError, match="`logits` contains"):
        kronvi.model.MeanField(np.array([[0.0, np.nan]]))
    with pytest.raises(TypeError, match="`q_w` must be a MeanField"):
        kronvi.model.regression_elbo(stats, pw, qn, pw, pn)


def test_prediction_inputs_are_validated():
    Phi, y, pw, pn, stats = _ok()
    q, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
    with pytest.raises(ValueError, match="`Phi_new` has 2 features but the model has 3 weights"):
        kronvi.model.predict_regression(q, qn, pw, pn, np.ones((4, 2)))
    with pytest.raises(ValueError, match="`Phi_new` contains"):
        kronvi.model.predict_regression(q, qn, pw, pn, np.full((4, 3), np.inf))
    with pytest.raises(ValueError, match="`y_new` has 3 points but `Phi_new` has 4"):
        kronvi.model.predictive_log_density(q, qn, pw, pn, np.ones((4, 3)), np.ones(3))


def test_empty_statistics_are_rejected():
    Phi, y, pw, pn, stats = _ok()
    empty = kronvi.stats.subtract_stats(stats, stats)
    q, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
    with pytest.raises(ValueError, match="`stats.n` must be positive"):
        kronvi.model.regression_elbo(empty, q, qn, pw, pn)


def test_statistics_with_nan_are_rejected_by_every_regression_fit():
    Phi, y, pw, pn, stats = _ok()
    bad = stats._replace(PhitPhi=stats.PhitPhi.at[0, 0].set(jnp.nan))
    for fit in (
        lambda: kronvi.fitting.fit_regression(bad, pw, pn, init="gaussian"),
        lambda: kronvi.gaussian.fit_gaussian_mf(bad, prior_scale=1.0, noise_variance=0.5),  # returned NaN
        lambda: kronvi.gaussian.fit_elrg(jax.random.key(0), bad, 1.0, 0.5, rank=1, max_iter=2),
    ):
        with pytest.raises(ValueError, match="`stats` contains NaN or infinite values"):
            fit()


@pytest.mark.parametrize("init", ["prior", "gaussian"])
def test_float32_fit_with_x64_on(init):
    with jax.enable_x64(True):
        Phi, y = np.random.default_rng(0).normal(size=(30, 3)), np.ones(30)
        stats = kronvi.stats.regression_stats(jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32))
        pw = kronvi.model.gaussian_prior(3, 1.0, dtype=jnp.float32)
        pn = kronvi.model.noise_prior(0.5, dtype=jnp.float32)
        q_w, q_n, info = kronvi.fitting.fit_regression(stats, pw, pn, init=init)
        assert q_w.logits.dtype == q_n.logits.dtype == jnp.float32
        assert np.isfinite(float(info.final_elbo))


def test_mixed_dtypes_and_float16_are_rejected_by_fits():
    with jax.enable_x64(True):
        Phi, y = np.random.default_rng(0).normal(size=(30, 3)), np.ones(30)
        s32 = kronvi.stats.regression_stats(jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32))
        pw64, pn64 = kronvi.model.gaussian_prior(3, 1.0), kronvi.model.noise_prior(0.5)
        pw32 = kronvi.model.gaussian_prior(3, 1.0, dtype=jnp.float32)
        with pytest.raises(TypeError, match="dtypes differ: `stats` float32, `prior_w` float64"):
            kronvi.fitting.fit_regression(s32, pw64, pn64)
        with pytest.raises(TypeError, match="`prior_w` float32, `prior_noise` float64"):
            kronvi.fitting.fit_regression(s32, pw32, pn64, init="gaussian")
        with pytest.raises(TypeError, match="`prior_noise` float64"):
            kronvi.fitting.gaussian_start(s32, pw32, pn64)
    s32 = kronvi.stats.regression_stats(jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32))
    s16 = jax.tree.map(lambda a: a.astype(jnp.float16), s32)  # regression_stats itself refuses float16
    pw16 = kronvi.model.gaussian_prior(3, 1.0, dtype=jnp.float16)
    pn16 = kronvi.model.noise_prior(0.5, dtype=jnp.float16)
    for init in ("prior", "gaussian"):
        with pytest.raises(TypeError, match="`stats` are float16: fits run in float32 or float64"):
            kronvi.fitting.fit_regression(s16, pw16, pn16, init=init)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("levels", 0, "`config.levels` must be an int >= 2"),
        ("levels", 2.7, "`config.levels` must be an int >= 2, got 2.7"),
        ("noise_levels", 0, "`config.noise_levels`"),
        ("num_frequencies", 0, "`config.num_frequencies`"),
        ("method", "newton", "`config.method` must be one of"),
        ("recipe.starts", ("prior", "bogus"), "`config.starts`"),
        ("recipe.noise_span", 0.5, "`config.noise_span` must be >= 1"),
        ("recipe.width", -1.0, "`config.width` must be positive"),
        ("max_iter", 0, "`config.max_iter`"),
        ("gp.precision", "float32", "`config.gp_precision` must be 'native' or 'float64'"),
        ("gp.gain_tol", -0.1, r"^`config.gp_gain_tol` must be a number >= 0, got -0.1$"),
        ("gp.gain_tol", float("nan"), "`config.gp_gain_tol`"),
        ("gp.gain_tol", "0.1", "`config.gp_gain_tol`"),
        ("gp.gain_tol", True, "`config.gp_gain_tol`"),
    ],
)
def test_pipeline_config_is_checked_before_any_compute(monkeypatch, field, value, match):
    from kronvi import pipeline

    def gp(*args, **kwargs):
        raise AssertionError("the pipeline started computing")

    monkeypatch.setattr(pipeline, "fit_gp_hyperparameters", gp)
    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.ones(20)
    if field.startswith("recipe."):
        config = pipeline.DirectConfig(recipe=pipeline.Eigen(**{field[7:]: value}))
    elif field.startswith("gp."):
        config = pipeline.DirectConfig(gp=pipeline.GPOptions(**{field[3:]: value}))
    else:
        config = pipeline.DirectConfig(**{field: value})
    with pytest.raises(ValueError, match=match):
        pipeline.fit_direct(jax.random.key(0), X, y, config)


@pytest.mark.parametrize("precision, gain_tol", [("native", 0.1), ("float64", 0.0)])
def test_pipeline_passes_its_gp_settings_to_the_gp_fit(monkeypatch, precision, gain_tol):
    from kronvi import pipeline

    class Stop(Exception):
        pass

    seen = {}

    def gp(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(pipeline, "fit_gp_hyperparameters", gp)
    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.arange(20.0)
    with pytest.raises(Stop):
        config = pipeline.DirectConfig(gp=pipeline.GPOptions(precision=precision, gain_tol=gain_tol))
        pipeline.prepare_fold(jax.random.key(0), X, y, config)
    assert seen["precision"] == precision and seen["gain_tol"] == gain_tol


def test_the_second_probes_inputs_are_named():
    """Inputs a new-user probe found taken silently or failing deep inside JAX."""
    Phi, y, pw, pn, stats = _ok()
    with pytest.raises(ValueError, match=r"^`chunk_size` must be an int >= 1, got 2.5"):
        kronvi.stats.regression_stats(Phi, y, chunk_size=2.5)
    for mask in (np.full(10, 0.5), jnp.full(10, 0.5)):
        with pytest.raises(ValueError, match="^`mask` must hold booleans or 0/1"):
            kronvi.stats.regression_stats(Phi, y, mask=mask)
    with pytest.raises(ValueError, match=r"^`chunk_size` must be an int >= 1, got 2.5"):
        kronvi.stats.kfold_stats_from_inputs(lambda X: X, Phi, y, np.arange(10) % 2, chunk_size=2.5)
    with pytest.raises(ValueError, match=r"^`feature_map` must map"):
        kronvi.stats.kfold_stats_from_inputs(lambda X: X[:, 0], Phi, y, np.arange(10) % 2)
    with pytest.raises(ValueError, match=r"^`feature_map` must map \(c, d\) inputs to \(c, b\) features: \(10, 3\) gave \(1, 3\)"):
        kronvi.stats.regression_stats_from_inputs(lambda X: X[:1], Phi, y)
    with pytest.raises(ValueError, match=r"^`feature_map` must map .* gave \(10,\)"):
        kronvi.stats.regression_stats_from_inputs(lambda X: X[:, 0], Phi, y)
    small = kronvi.stats.regression_stats(Phi[:4], y[:4])
    with pytest.raises(ValueError, match=r"^`b` has more rows \(10.0\) than `a` \(4.0\)"):
        kronvi.stats.subtract_stats(small, stats)
    # an empty block (a file's last) is skipped; a bad block is named by its index
    blocks = kronvi.stats.regression_stats_from_chunks([(Phi[:6], y[:6]), (Phi[6:], y[6:]), (Phi[:0], y[:0])])
    np.testing.assert_allclose(blocks.PhitPhi, stats.PhitPhi, rtol=1e-5)
    with pytest.raises(ValueError, match=r"^`Phi` contains 1 NaN.*\(block 1 of `chunks`\)"):
        kronvi.stats.regression_stats_from_chunks([(Phi, y), (Phi.at[0, 0].set(np.nan), y)])
    with pytest.raises(ValueError, match=r"^`chunks` yielded no rows \(1 empty block"):
        kronvi.stats.regression_stats_from_chunks([(Phi[:0], y[:0])])
    with pytest.raises(ValueError, match="^`q_cov` must be symmetric"):
        kronvi.gaussian.gaussian_kl(np.zeros(2), np.array([[1.0, 5.0], [0.0, 1.0]]), np.zeros(2), np.eye(2))
    mix = kronvi.mixtures.Mixture(jnp.zeros((1, 2, 3)), jnp.zeros(1))
    with pytest.raises(TypeError, match=r"^`key` must be a jax.random key"):
        kronvi.mixtures.sample_mixture(0, mix, 3)


def test_bnn_starts_are_named():
    from kronvi import bnn

    X = jax.random.normal(jax.random.key(0), (20, 2))
    st = bnn.bnn_stats(X, X[:, 0] ** 2, (2, 2, 1))
    pw, pn = kronvi.model.gaussian_prior(6, 1.0, levels=5), kronvi.model.noise_prior(0.1)
    for value in (float("nan"), -1.0, 0.0):
        with pytest.raises(ValueError, match="^`init_scale` must be a finite positive number"):
            bnn.fit_bnn(st, pw, pn, init_scale=value)
    with pytest.raises(ValueError, match="^`tol` must be a number >= 0"):
        bnn.fit_bnn(st, pw, pn, tol=-1.0)
    with pytest.raises(TypeError, match="^`key` must be a jax.random key"):
        bnn.fit_bnn(st, pw, pn, key=0)
    # a concrete 0-d array is a scalar (the check refused jnp.float32(3.0) at first); a 1-d one is not
    assert np.isfinite(float(bnn.fit_bnn(st, pw, pn, init_scale=jnp.float32(3.0), max_iter=2).info.final_elbo))
    with pytest.raises(ValueError, match="^`init_scale` must be a finite positive number"):
        bnn.fit_bnn(st, pw, pn, init_scale=jnp.array([3.0]))
