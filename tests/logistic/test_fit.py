"""fit_logistic: improves the bound, recovers a separating direction, jit, vmap over folds, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import kronvi
import kronvi.logistic as kl


def data(dtype, n=60, b=3, seed=0):
    k = jax.random.split(jax.random.key(seed), 2)
    Phi = jax.random.normal(k[0], (n, b), dtype)
    w = jnp.array([2.0, -1.5, 0.0], dtype)[:b]
    y = (jax.random.uniform(k[1], (n,)) < jax.nn.sigmoid(Phi @ w)).astype(dtype)
    return Phi, y, kronvi.model.gaussian_prior(b, 2.0, levels=7, dtype=dtype)


def test_lbfgs_improves_the_bound_and_predicts(dtype):
    Phi, y, prior = data(dtype)
    q, info = kl.fit_logistic(Phi, y, prior, max_iter=30)
    assert q.logits.dtype == dtype
    start = kl.logistic_elbo_bound(Phi, y, kronvi.model.MeanField.from_prior(prior), prior)
    end = kl.logistic_elbo_bound(Phi, y, q, prior)
    assert float(end) > float(start)
    np.testing.assert_allclose(info.final_elbo, end, rtol=1e-4)
    # every iterate's bound (not only the best so far, which cannot fall) rose: the line searches held
    iterates = np.asarray(info.iterate_elbo, np.float64)
    assert np.all(np.diff(iterates) >= -1e-6 * np.abs(iterates[1:]))
    np.testing.assert_array_equal(info.elbo, np.maximum.accumulate(info.iterate_elbo))
    p = kl.predict_logistic(q, prior, Phi)
    assert float(jnp.mean((p > 0.5) == (y == 1))) > 0.75
    mean = jnp.sum(q.probs * prior.values, -1)
    assert float(mean[0]) > 0.5 and float(mean[1]) < -0.3


def test_float32_lbfgs_fit_with_x64_switched_on():
    """With `jax_enable_x64` on, the float32 fit crashed on the bound's `scan` carry type."""
    Phi, y, prior = data(np.float32)
    with jax.enable_x64(True):
        q, info = kl.fit_logistic(Phi, y, prior, max_iter=5, init="prior")
        assert q.logits.dtype == jnp.float32 and info.elbo.dtype == jnp.float32
        assert float(info.final_elbo) > float(info.elbo[0])


def test_huge_features_and_zero_weights_give_no_nan():
    """Features at 1e30 overflowed the Laplace start's sum of squares (0 * inf: NaN logits), and all-zero
    `weights` divided by a zero row count; both returned NaN without a word."""
    Phi, y, prior = data(np.float32)
    q, info = kl.fit_logistic(Phi * 1e30, y, prior, max_iter=30)
    assert np.all(np.isfinite(np.asarray(q.logits))) and np.isfinite(float(info.final_elbo))
    with pytest.raises(ValueError, match="^`weights` are all zero: at least one row must count"):
        kl.fit_logistic(Phi, y, prior, weights=jnp.zeros(60))


def test_a_fit_ending_in_nan_raises(monkeypatch):
    from kronvi.logistic import _fit

    Phi, y, prior = data(np.float32)
    nan_fit = lambda logits, *a, **k: (kronvi.model.MeanField._unchecked(logits * jnp.nan), None)  # noqa: E731
    monkeypatch.setattr(_fit, "_fit_lbfgs", nan_fit)
    with pytest.raises(
        FloatingPointError, match=r"^fit_logistic ended with non-finite logits; `Phi` reaches"
    ):
        kl.fit_logistic(Phi, y, prior, init="prior")


def test_sgd_improves_the_bound(dtype):
    Phi, y, prior = data(dtype)
    q, info = kl.fit_logistic(
        Phi, y, prior, method="sgd", key=jax.random.key(0), batch_size=20, num_steps=60, init="prior",
        optimizer=optax.adam(0.1),
    )  # fmt: skip
    start = kl.logistic_elbo_bound(Phi, y, kronvi.model.MeanField.from_prior(prior), prior)
    assert float(kl.logistic_elbo_bound(Phi, y, q, prior)) > float(start)
    assert info.elbo.shape == (61,)


def test_vmap_over_padded_folds_jit():
    """Two folds of different junk in zero-weight padding rows: one vmapped, jitted fit gives each fold
    the same posterior, equal to the unbatched fit (up to line-search rounding)."""
    Phi, y, prior = data(np.float32, n=40)
    junk = jax.random.normal(jax.random.key(5), (2, 4, 3)) * 5.0
    P2 = jnp.concatenate([jnp.stack([Phi, Phi]), junk], axis=1)
    y2 = jnp.concatenate([jnp.stack([y, y]), jnp.array([[1.0] * 4, [0.0] * 4])], axis=1)
    w = jnp.concatenate([jnp.ones(40), jnp.zeros(4)])
    fit = lambda P, yy: kl.fit_logistic(P, yy, prior, max_iter=8, weights=w, init="prior")  # noqa: E731
    qv, info = jax.jit(jax.vmap(fit))(P2, y2)
    assert qv.logits.shape == (2, 3, 7) and info.num_iter.shape == (2,)
    np.testing.assert_allclose(qv.probs[0], qv.probs[1], atol=1e-5)
    q, _ = fit(P2[0], y2[0])
    np.testing.assert_allclose(qv.probs[0], q.probs, atol=1e-3)


def test_bad_arguments_are_named():
    Phi, y, prior = data(np.float32)
    with pytest.raises(ValueError, match="`method`"):
        kl.fit_logistic(Phi, y, prior, method="newton")
    with pytest.raises(ValueError, match="`key`"):
        kl.fit_logistic(Phi, y, prior, method="sgd")
    with pytest.raises(ValueError, match="`weights`"):
        kl.fit_logistic(Phi, y, prior, weights=-jnp.ones(60))
    with pytest.raises(ValueError, match="`init`"):
        kl.fit_logistic(Phi, y, prior, init="gaussian")
    with pytest.raises(ValueError, match="`y`"):
        kl.fit_logistic(Phi, y[:-1], prior)
    with pytest.raises(ValueError, match="^`y` must hold real numbers, got dtype <U1$"):
        kl.fit_logistic(Phi, np.array(["a", "b"] * 30), prior)
    with pytest.raises(ValueError, match="^`Phi` must hold real numbers, got dtype <U3$"):
        kl.fit_logistic(np.full((60, 3), "1.0"), y, prior)


@pytest.mark.parametrize("bound", ["tilted", "jensen", "theorem2"])
def test_cavi_is_monotone_and_reaches_a_stationary_point(bound):
    with jax.enable_x64(True):
        Phi, y, prior = data(np.float64, n=30)
        q, info = kl.fit_logistic(Phi, y, prior, method="cavi", bound=bound, init="prior", max_iter=40)
        tr = np.asarray(info.elbo)
        assert np.all(np.diff(tr) >= -1e-9) and tr[-1] > tr[0]
        np.testing.assert_allclose(tr[-1], kl.logistic_elbo_bound(Phi, y, q, prior, bound=bound), rtol=1e-10)
        # a fixed point of the minorize-maximize map is stationary: the gradient over the logits vanishes
        g = jax.grad(
            lambda lg: kl.logistic_elbo_bound(Phi, y, kronvi.model.MeanField(lg), prior, bound=bound)
        )(q.logits)
        assert float(jnp.max(jnp.abs(g))) < 1e-3


def test_newton_start_matches_the_lbfgs_start(monkeypatch):
    """The Laplace start's MAP by damped Newton (up to `NEWTON_MAX_FEATURES` weights) is the MAP that
    L-BFGS finds, and coordinate ascent from either start ends at the same optimum."""
    from kronvi.logistic import _fit

    with jax.enable_x64(True):
        Phi, y, prior = data(np.float64, n=80)
        w = jnp.ones(80)
        newton = _fit.laplace_start_logits(prior, Phi, y, w)
        monkeypatch.setattr(_fit, "NEWTON_MAX_FEATURES", 0)
        lbfgs = _fit.laplace_start_logits(prior, Phi, y, w)
        np.testing.assert_allclose(jax.nn.softmax(newton), jax.nn.softmax(lbfgs), atol=1e-6)
        fits = [
            kl.fit_logistic(
                Phi, y, prior, method="cavi", init=kronvi.model.MeanField(s), max_iter=60, tol=0.0
            )
            for s in (newton, lbfgs)
        ]
        np.testing.assert_allclose(fits[0][1].elbo[-1], fits[1][1].elbo[-1], rtol=1e-9)
        np.testing.assert_allclose(fits[0][0].probs, fits[1][0].probs, atol=1e-5)


def test_the_start_map_begins_at_the_better_of_the_prior_mean_and_the_grid_centres():
    """On grids placed by `laplace_grid_prior` the search starts at their centres (lower objective than
    the prior mean) and needs fewer Newton iterations; on grids whose centres are worse it starts at
    the prior mean. Either way the MAP is the one found from the prior mean. The prior's moments on the
    host (NumPy) are the ones `grid_moments` gives on the device."""
    from kronvi.logistic import _fit, _laplace

    with jax.enable_x64(True):
        Phi, y, _ = data(np.float64, n=200)
        w = jnp.ones(200)
        placed, _ = kl.laplace_grid_prior(Phi, y, 2.0, levels=9)
        # nearly all the prior mass on each grid's lowest level: its centre lies far out in the prior's tail
        edge = jnp.where(jnp.arange(9) == 0, 0.0, -30.0) * jnp.ones((3, 1))
        shifted = kronvi.model.DiscretePrior(placed.values, jax.nn.log_softmax(edge, axis=-1))
        tol = jnp.asarray(1e-12)
        for prior, at_centre in ((placed, True), (shifted, False)):
            mu, prec, centre = _fit._prior_moments(prior)
            if jax.default_backend() == "cpu":  # concrete grids in host memory: no program compiled
                assert isinstance(mu, np.ndarray)
            on_device = _fit._prior_moments_on_device(prior.values, prior.log_probs)
            for ours, ref in zip((mu, prec, centre), on_device, strict=True):
                np.testing.assert_allclose(ours, ref, rtol=1e-13)
            mean, var = kronvi.model.grid_moments(prior.probs, prior.values)
            np.testing.assert_allclose(mu, mean, rtol=1e-13)
            np.testing.assert_allclose(prec, 1 / var, rtol=1e-13)
            np.testing.assert_array_equal(centre, 0.5 * (prior.values.min(-1) + prior.values.max(-1)))
            w0 = _laplace.better_start(Phi, y, w, prec, mu, centre)
            np.testing.assert_array_equal(w0, centre if at_centre else mu)
            ours, from_mu = (
                _laplace.laplace_fit(Phi, y, w, prec, mu, start, max_iter=50, tol=tol)
                for start in (centre, mu)
            )
            np.testing.assert_allclose(ours.mean, from_mu.mean, rtol=1e-7, atol=1e-9)
            ours_map = _fit.laplace_start_map(prior, Phi, y, w)
            np.testing.assert_allclose(ours_map, from_mu.mean, rtol=1e-7, atol=1e-9)
            if at_centre:
                assert int(ours.num_iter) < int(from_mu.num_iter)


def test_both_start_routes_search_from_the_better_start(monkeypatch):
    """Newton (up to `NEWTON_MAX_FEATURES` weights) and L-BFGS (above) both begin where `better_start`
    says: on posterior-placed grids, their centres; on grids whose centres are worse, and from a
    non-finite start, the prior mean."""
    from kronvi.logistic import _fit, _laplace

    Phi, y, _ = data(np.float32, n=200)
    w = jnp.ones(200)
    placed, _ = kl.laplace_grid_prior(Phi, y, 2.0, levels=9)
    edge = jnp.where(jnp.arange(9) == 0, 0.0, -30.0) * jnp.ones((3, 1))  # centres far out in the tail
    shifted = kronvi.model.DiscretePrior(placed.values, jax.nn.log_softmax(edge, axis=-1))
    mu, prec, centre = _fit._prior_moments(placed)
    np.testing.assert_array_equal(_laplace.better_start(Phi, y, w, prec, mu, centre), centre)
    bad = np.array(centre)
    bad[0] = np.nan
    np.testing.assert_array_equal(_laplace.better_start(Phi, y, w, prec, mu, bad), mu)
    expected = [(placed, centre), (shifted, _fit._prior_moments(shifted)[0])]
    assert not np.allclose(expected[0][1], expected[1][1])
    # Newton with no iterations returns where it starts
    monkeypatch.setattr(_fit, "NEWTON_MAX_ITER", 0)
    for prior, start in expected:
        np.testing.assert_array_equal(_fit.laplace_start_map(prior, Phi, y, w), start)
    # the L-BFGS route: its optimizer replaced by one that returns where it was asked to start
    monkeypatch.setattr(_fit, "NEWTON_MAX_FEATURES", 0)
    monkeypatch.setattr(_fit, "minimize_lbfgs", lambda loss, x0, **k: (x0, None))
    jax.clear_caches()  # `_lbfgs_map` traces again, with the replacement
    try:
        for prior, start in expected:
            np.testing.assert_array_equal(_fit.laplace_start_map(prior, Phi, y, w), start)
    finally:
        jax.clear_caches()


@pytest.mark.parametrize("kind", ["point mass", "huge scale"])
def test_the_start_takes_priors_whose_moments_are_extreme(kind):
    """A prior with all its mass on one level (variance 0, precision inf) or a scale whose squares overflow
    float32: the start's moments come out inf or 0 as on the device, without NumPy's warnings (errors
    under the suite's filter), and the fit still returns finite probabilities."""
    Phi, y, _ = data(np.float32, n=200)
    if kind == "point mass":
        base = kronvi.model.gaussian_prior(3, 1.0, levels=5)
        log_probs = jnp.where(jnp.arange(5) == 2, 0.0, -200.0) * jnp.ones((3, 1))
        prior = kronvi.model.DiscretePrior(base.values, log_probs)
    else:
        prior = kronvi.model.gaussian_prior(3, 1e19, levels=5)
    from kronvi.logistic import _fit

    _, prec, _ = _fit._prior_moments(prior)
    assert np.all(np.isinf(prec) if kind == "point mass" else np.asarray(prec) == 0)
    q, _ = kl.fit_logistic(Phi, y, prior, method="cavi", max_iter=3)
    assert np.all(np.isfinite(np.asarray(q.probs)))


@pytest.mark.parametrize("method", ["lbfgs", "cavi"])
def test_vmap_over_padded_folds_with_the_laplace_start(method):
    """The default start under `vmap` over folds with zero-weight padding: each fold as fitted alone."""
    Phi, y, prior = data(np.float32, n=40)
    junk = jax.random.normal(jax.random.key(5), (2, 4, 3)) * 5.0
    P2 = jnp.concatenate([jnp.stack([Phi, Phi[::-1]]), junk], axis=1)
    y2 = jnp.concatenate([jnp.stack([y, y[::-1]]), jnp.array([[1.0] * 4, [0.0] * 4])], axis=1)
    w = jnp.concatenate([jnp.ones(40), jnp.zeros(4)])
    fit = lambda P, yy: kl.fit_logistic(P, yy, prior, method=method, max_iter=5, weights=w)  # noqa: E731
    qv, _ = jax.jit(jax.vmap(fit))(P2, y2)
    for k in range(2):
        q, _ = kl.fit_logistic(P2[k, :40], y2[k, :40], prior, method=method, max_iter=5)
        np.testing.assert_allclose(qv.probs[k], q.probs, atol=2e-3)
