"""laplace_grid_prior: grids centred on the MAP of a dense float64 Newton reference, scaled by its marginal sds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi.logistic as kl


def reference(Phi, y, scale, weights=None, iters=100, mean=0.0):
    """Dense float64 Newton (undamped from 0, with step halving) under the prior N(mean, scale^2): MAP,
    marginal sds, Laplace log evidence."""
    Phi, y = np.asarray(Phi, np.float64), np.asarray(y, np.float64)
    n, b = Phi.shape
    weights = np.ones(n) if weights is None else np.asarray(weights, np.float64)
    prec = np.broadcast_to(1.0 / np.asarray(scale, np.float64) ** 2, (b,))
    mean = np.broadcast_to(np.asarray(mean, np.float64), (b,))
    s = 2 * y - 1

    def f(w):
        return np.sum(weights * np.logaddexp(0.0, -s * (Phi @ w))) + 0.5 * np.sum(prec * (w - mean) ** 2)

    def hess(w):
        p = 1 / (1 + np.exp(-(Phi @ w)))
        return Phi.T @ (Phi * (weights * p * (1 - p))[:, None]) + np.diag(prec)

    w = np.zeros(b)
    for _ in range(iters):
        g = Phi.T @ (weights * (1 / (1 + np.exp(-(Phi @ w))) - y)) + prec * (w - mean)
        d = -np.linalg.solve(hess(w), g)
        t = 1.0
        while f(w + t * d) > f(w) and t > 1e-8:
            t /= 2
        w = w + t * d
    H = hess(w)
    log_ev = -f(w) + 0.5 * np.sum(np.log(prec)) - 0.5 * np.linalg.slogdet(H)[1]
    return w, np.sqrt(np.diag(np.linalg.inv(H))), log_ev


def data(dtype, n=80, b=3, seed=0):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-Phi @ np.array([2.0, -1.0, 0.5])[:b]))).astype(float)
    return jnp.asarray(Phi, dtype), jnp.asarray(y, dtype)


def test_grid_is_centred_on_the_newton_map(dtype):
    Phi, y = data(dtype)
    prior, info = kl.laplace_grid_prior(Phi, y, 2.0, levels=5, width=3.0)
    w, sd, log_ev = reference(Phi, y, 2.0)
    rtol = 1e-4 if dtype == jnp.float32 else 1e-9
    assert prior.values.dtype == dtype and prior.values.shape == (3, 5)
    assert bool(info.converged) and int(info.num_iter) < 50
    np.testing.assert_allclose(info.mean, w, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(info.sd, sd, rtol=rtol)
    np.testing.assert_allclose(info.log_evidence, log_ev, rtol=rtol)
    expected = w[:, None] + sd[:, None] * np.linspace(-3.0, 3.0, 5)[None]
    np.testing.assert_allclose(prior.values, expected, rtol=rtol, atol=rtol)
    lp = -0.5 * expected**2 / 4.0
    lp -= np.log(np.sum(np.exp(lp), -1, keepdims=True))
    np.testing.assert_allclose(prior.log_probs, lp, rtol=rtol, atol=rtol)


def test_per_weight_scale_and_row_weights():
    with jax.enable_x64(True):
        Phi, y = data(jnp.float64, n=40)
        scale = jnp.array([0.5, 1.0, 4.0])
        wts = jnp.asarray(np.arange(40) % 3, jnp.float64)  # 0, 1, 2: dropped, once, twice
        _, info = kl.laplace_grid_prior(Phi, y, scale, weights=wts)
        w, sd, log_ev = reference(Phi, y, scale, weights=wts)
        np.testing.assert_allclose(info.mean, w, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(info.sd, sd, rtol=1e-9)
        np.testing.assert_allclose(info.log_evidence, log_ev, rtol=1e-9)
        keep = np.repeat(np.arange(40), np.arange(40) % 3)  # rows repeated by their weight
        _, dup = kl.laplace_grid_prior(Phi[keep], y[keep], scale)
        np.testing.assert_allclose(info.mean, dup.mean, rtol=1e-9, atol=1e-12)


def test_separable_data_stays_finite_and_jit_vmap_agree():
    Phi, _ = data(jnp.float32, n=60)
    y = (Phi[:, 0] > 0).astype(jnp.float32)  # separable: only the prior bounds the MAP
    prior, info = kl.laplace_grid_prior(Phi, y, 3.0)
    assert bool(info.converged) and np.all(np.isfinite(prior.values))
    w, _, _ = reference(Phi, y, 3.0)
    np.testing.assert_allclose(info.mean, w, rtol=1e-3, atol=1e-3)
    fn = jax.jit(lambda P, yy, ww: kl.laplace_grid_prior(P, yy, 3.0, weights=ww)[0].values)
    np.testing.assert_allclose(fn(Phi, y, jnp.ones(60)), prior.values, rtol=1e-5, atol=1e-5)
    ws = jnp.stack([jnp.ones(60), (jnp.arange(60) < 40).astype(jnp.float32)])
    both = jax.vmap(fn, in_axes=(None, None, 0))(Phi, y, ws)
    part, _ = kl.laplace_grid_prior(Phi[:40], y[:40], 3.0)
    np.testing.assert_allclose(both[1], part.values, rtol=1e-4, atol=1e-4)


def test_newton_from_init_reaches_the_same_map():
    """`init` moves only where Newton starts: from the MAP at a neighbouring scale it takes fewer
    iterations, from a far start as many as it needs, and both end at the reference MAP."""
    with jax.enable_x64(True):
        Phi, y = data(jnp.float64, n=200, b=3)
        w, sd, log_ev = reference(Phi, y, 3.0)
        _, cold = kl.laplace_grid_prior(Phi, y, 3.0)
        _, near = kl.laplace_grid_prior(Phi, y, 2.0)
        for init in (near.mean, jnp.array([8.0, -8.0, 8.0])):
            _, info = kl.laplace_grid_prior(Phi, y, 3.0, init=init)
            assert bool(info.converged)
            np.testing.assert_allclose(info.mean, w, rtol=1e-7, atol=1e-9)  # Newton's own stopping rule
            np.testing.assert_allclose(info.sd, sd, rtol=1e-7)
            np.testing.assert_allclose(info.log_evidence, log_ev, rtol=1e-9)
        _, warm = kl.laplace_grid_prior(Phi, y, 3.0, init=near.mean)
        assert int(warm.num_iter) < int(cold.num_iter)


def test_the_search_and_map_only_modes_of_one_program():
    """`laplace_fit`'s modes share one program with `laplace_grid_prior`'s. `SEARCH` takes the sds, evidence and slope from the Hessian
    of Newton's last iteration: with a loose `tol` (a sizable last step) its sds are those of the iterate
    that iteration started from (`EXACT` stopped one iteration earlier) and its evidence is the reference's
    at its MAP to within that step; with the iterations run out, `EXACT`'s. `MAP_ONLY`: the same MAP, the
    rest NaN."""
    from kronvi.logistic import _laplace as L

    with jax.enable_x64(True):
        Phi, y = data(jnp.float64, n=200, b=3)
        f64 = jnp.float64
        w1, prec, zero = jnp.ones(200, f64), jnp.full(3, 1 / 9.0, f64), jnp.zeros(3, f64)

        def fit(mode, max_iter=50, tol=1e-3):
            return L.laplace_fit(Phi, y, w1, prec, zero, zero, max_iter=max_iter, tol=jnp.asarray(tol, f64), mode=mode)

        programs = L._laplace_fit._cache_size()
        exact, search, only = (fit(m) for m in (L.EXACT, L.SEARCH, L.MAP_ONLY))
        fit(0)  # a Python int: the same program
        kl.laplace_grid_prior(Phi, y, 3.0)  # `mode` left out: EXACT, the same program
        assert L._laplace_fit._cache_size() - programs <= 1
        k = int(exact.num_iter)
        assert bool(search.converged) and k >= 2 and int(search.num_iter) == k
        np.testing.assert_array_equal(search.mean, exact.mean)
        np.testing.assert_array_equal(only.mean, exact.mean)
        assert np.all(np.isnan(only.sd)) and np.isnan(only.log_evidence) and np.isnan(only.log_evidence_slope)
        before = fit(L.EXACT, max_iter=k - 1)  # where the last iteration started, its Hessian
        assert not bool(before.converged)
        np.testing.assert_allclose(search.sd, before.sd, rtol=1e-12)
        assert np.max(np.abs(search.sd / exact.sd - 1)) > 1e-8  # a sizable last step: the modes differ
        _, _, log_ev = reference(Phi, y, 3.0)
        # tol = 1e-3 (1 + |f|) lets the last step move the MAP by about 0.1 posterior sd here: the Hessian's
        # sds move 1%, the evidence 0.02 nats and its slope 1e-3 (exact's: 3e-4 from the reference's MAP)
        assert abs(float(exact.log_evidence) - log_ev) < 1e-3 and abs(float(search.log_evidence) - log_ev) < 0.05
        assert abs(float(search.log_evidence_slope) - float(exact.log_evidence_slope)) < 0.01
        ran_out = [fit(m, max_iter=1) for m in (L.EXACT, L.SEARCH)]
        assert not bool(ran_out[1].converged)
        for field in ("sd", "log_evidence", "log_evidence_slope"):
            np.testing.assert_array_equal(getattr(ran_out[1], field), getattr(ran_out[0], field))


def test_init_in_float32_under_jit_and_a_nan_init_traced():
    """A float64 `init` with float32 features keeps float32; under `jit` (traced, so unchecked) `init` is
    used, and a NaN one falls back to the prior mean instead of ending in a NaN grid."""
    Phi, y = data(jnp.float32, n=200, b=3)
    _, cold = kl.laplace_grid_prior(Phi, y, 3.0)
    _, near = kl.laplace_grid_prior(Phi, y, 2.0)
    prior, warm = kl.laplace_grid_prior(Phi, y, 3.0, init=np.asarray(near.mean, np.float64))
    assert prior.values.dtype == jnp.float32 and warm.mean.dtype == jnp.float32
    # Newton stops once half its squared decrement is below tol (1 + |f|): in float32, weights within about
    # 7e-3 of the MAP here. The warm start stops 1.5e-4 from it as users compile (XLA's defaults), the cold
    # one at 1e-7; the start (prior sd 2) is 1.3e-2 away.
    np.testing.assert_allclose(warm.mean, cold.mean, rtol=1e-3, atol=1e-4)
    assert int(warm.num_iter) < int(cold.num_iter)
    fn = jax.jit(lambda P, yy, w0: kl.laplace_grid_prior(P, yy, 3.0, init=w0)[1])
    traced = fn(Phi, y, near.mean)
    assert int(traced.num_iter) == int(warm.num_iter)
    np.testing.assert_allclose(traced.mean, warm.mean, rtol=1e-5, atol=1e-6)
    bad = fn(Phi, y, jnp.array([jnp.nan, 0.0, 0.0]))
    assert bool(bad.converged) and int(bad.num_iter) == int(cold.num_iter)
    np.testing.assert_allclose(bad.mean, cold.mean, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(init=np.ones(3)), r"^`init` must have shape \(2,\), got \(3,\)$"),
        (dict(init=np.array([0.0, np.nan])), "`init`"),
        (dict(y=np.full(10, 0.5)), "`y`"),
        (dict(y=np.array([np.nan] + [0.0] * 9)), "`y`"),
        (dict(y=np.zeros(9)), "`y`"),
        (dict(y=np.array(["a", "b"] * 5)), "^`y` must hold real numbers, got dtype <U1$"),
        (dict(Phi=[[1.0, 2.0]] * 9 + [[1.0]]), "^`Phi` must be a rectangular array of numbers"),
        (dict(Phi=np.ones(10)), "`Phi`"),
        (dict(Phi=np.full((10, 2), np.inf)), "`Phi`"),
        (dict(prior_scale=-1.0), "`prior_scale`"),
        (dict(prior_scale=np.ones(3)), "`prior_scale`"),
        (dict(weights=-np.ones(10)), "`weights`"),
        (dict(levels=1), "`levels`"),
        (dict(width=0.0), "`width`"),
        (dict(width=np.inf), "`width`"),
        (dict(max_iter=0), "`max_iter`"),
        (dict(tol=-1.0), "`tol`"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    args = dict(Phi=np.ones((10, 2)), y=np.arange(10) % 2, prior_scale=1.0)
    args.update(kwargs)
    Phi, y, scale = args.pop("Phi"), args.pop("y"), args.pop("prior_scale")
    with pytest.raises(ValueError, match=name):
        kl.laplace_grid_prior(Phi, y, scale, **args)


def test_float16_is_refused_before_the_factorization():
    """float16 reached LAPACK: `NotImplementedError: Unsupported dtype float16`."""
    with pytest.raises(TypeError, match="^`Phi` is float16: fits run in float32 or float64"):
        kl.laplace_grid_prior(np.ones((10, 2), np.float16), np.arange(10) % 2, 1.0)


def test_log_evidence_slope_is_the_derivative_of_the_evidence():
    """`log_evidence_slope` against central differences of a dense float64 Laplace evidence with every prior
    variance scaled by e^u, for a per-weight prior with a non-zero mean and row weights (some zero); the
    derivative at a fixed Hessian (MacKay's, without the MAP's move through the curvatures) misses it."""
    from kronvi.logistic._laplace import laplace_fit

    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        Phi = rng.normal(size=(60, 3))
        y = (rng.uniform(size=60) < 1 / (1 + np.exp(-Phi @ np.array([2.0, -1.0, 0.5])))).astype(float)
        weights = (np.arange(60) % 3).astype(float)
        prec, mean = 1 / np.array([0.5, 1.0, 4.0]) ** 2, np.array([0.3, -0.2, 0.1])
        info = laplace_fit(
            *map(jnp.asarray, (Phi, y, weights, prec, mean)), jnp.zeros(3), max_iter=50, tol=1e-14
        )
        h, scale = 1e-4, 1 / np.sqrt(prec)
        up = reference(Phi, y, scale * np.exp(h / 2), weights, mean=mean)[2]  # every variance times e^h
        down = reference(Phi, y, scale * np.exp(-h / 2), weights, mean=mean)[2]
        fd = (up - down) / (2 * h)
        np.testing.assert_allclose(float(info.log_evidence_slope), fd, rtol=1e-6)
        w, sd, _ = reference(Phi, y, scale, weights, mean=mean)
        fixed = 0.5 * (np.sum(prec * (w - mean) ** 2) - 3 + np.sum(prec * sd**2))
        assert abs(fixed - fd) > 1e-2 * abs(fd), (fixed, fd)
