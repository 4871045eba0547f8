"""Coordinate ascent for logistic regression: each sweep against a from-scratch reference, the kept and the
recomputed row terms, the exact fallback for clipped exponents, and the closed-form bound gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from logistic.reference import cavi_sweep as reference_sweep

import kronvi
from kronvi.logistic import _bound, _cavi


def problem(n=25, b=3, m=6, scale=1.0, prior_sd=2.0, seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    Phi = scale * jax.random.normal(k[0], (n, b), jnp.float64)
    y = (jax.random.uniform(k[1], (n,)) < 0.5).astype(jnp.float64)
    prior = kronvi.model.gaussian_prior(b, prior_sd, levels=m, dtype=jnp.float64)
    log_q = jax.nn.log_softmax(jax.random.normal(k[2], (b, m), jnp.float64), axis=-1)
    weights = jnp.ones(n, jnp.float64).at[-3:].set(jnp.array([0.0, 0.5, 2.0]))
    return log_q, prior, Phi, y, weights


@pytest.mark.parametrize("bound", ["tilted", "jensen", "theorem2"])
@pytest.mark.parametrize("keep_table", [True, False])
@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])  # every weight within `_POWER_LIMIT`, some, none
def test_sweep_matches_the_from_scratch_reference(bound, keep_table, scale, monkeypatch):
    if not keep_table:
        monkeypatch.setattr(_cavi, "_TABLE_LIMIT", 0)
    with jax.enable_x64(True):
        log_q, prior, Phi, y, w = problem(scale=scale)
        X = _cavi._signed_columns(Phi, y)
        within = {bool(_cavi._within_powers(X[j], prior.values[j])) for j in range(X.shape[0])}
        assert within == {0.5: {True}, 1.0: {True, False}, 4.0: {False}}[scale]
        lq = log_q
        want = np.asarray(lq)
        for _ in range(2):
            lq = _cavi.cavi_sweep(lq, prior, Phi, y, w, bound)
            want = reference_sweep(want, prior, Phi, y, w, bound)
        np.testing.assert_allclose(np.exp(lq), np.exp(want), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("bound", ["tilted", "jensen"])  # theorem2's e^L overflows at such margins
def test_clipped_exponents_take_the_exact_row_terms(bound):
    """Peaked factors (levels at e^-100 and below) and margins of hundreds of nats: the table of MGF ratios
    clips, and the sweep recomputes the updated row terms instead of reading them from the clipped table."""
    with jax.enable_x64(True):
        _, prior, Phi, y, w = problem(scale=40.0, prior_sd=5.0, seed=1)
        log_q = jax.nn.log_softmax(-25.0 * (jnp.arange(6.0) - jnp.array([[1.0], [4.0], [2.0]])) ** 2, axis=-1)
        X = _cavi._signed_columns(Phi, y)
        c = jnp.asarray(_bound._EXPONENTS[bound])
        state = _cavi._state(log_q, prior.values, X, bound)
        log_r = (
            c[None, :, None, None] * prior.values[:, None, :, None] * X[:, None, None, :]
            - state[2][:, :, None]
        )
        assert float(jnp.max(log_r)) > _cavi._MAX_EXP
        new, kept = _cavi._sweep(log_q, prior, X, w, bound, state)
        for got, want in zip(kept, _cavi._state(new, prior.values, X, bound), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10)
        want = reference_sweep(log_q, prior, Phi, y, w, bound)
        np.testing.assert_allclose(np.exp(new), np.exp(want), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("bound", ["tilted", "jensen", "theorem2"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("mode", ["powers", "each"])
def test_powers_agree_with_the_shifted_exponentials(bound, dtype, mode):
    """Weights within `_POWER_LIMIT` take their exponentials as powers of one (all of them, or each weight
    its own way): the same sweep and the same kept row terms as the shifted exponentials."""
    with jax.enable_x64(True):
        log_q, prior, Phi, y, w = problem(n=60, b=4, m=7, seed=2)
        # |Phi_ij| * 6 (the levels' half range) at most 19.8, or 240 in the last column ("each" only): there
        # powers would overflow float32 (e^240), so a weight on the wrong side of the branch fails
        top = 3.3 if mode == "powers" else 40.0
        Phi = Phi / jnp.max(jnp.abs(Phi), axis=0) * jnp.array([0.5, 1.0, 2.0, top])
        X = _cavi._signed_columns(Phi, y)
        within = [bool(_cavi._within_powers(X[j], prior.values[j])) for j in range(4)]
        assert within == [True, True, True, mode == "powers"]
        args = jax.tree.map(lambda a: a.astype(dtype), (log_q, prior, X, w))

        def sweep(how):
            state = _cavi._state(args[0], args[1].values, args[2], bound, how)
            return state, _cavi._sweep(*args, bound, state, how)

        rtol = 1e-12 if dtype == jnp.float64 else 2e-5
        for g, h in zip(jax.tree.leaves(sweep(mode)), jax.tree.leaves(sweep("shifted")), strict=True):
            np.testing.assert_allclose(g, h, rtol=rtol, atol=rtol)


def test_concrete_fits_choose_per_weight_and_traced_fits_shift():
    """One program per shape: the choice never reads the data's values; traced data or labels shift."""
    with jax.enable_x64(True):
        _, prior, Phi, y, _ = problem()
        assert _cavi.exponentials(prior, Phi, y) == _cavi.exponentials(prior, 1e3 * Phi, y) == "each"
        assert jax.jit(lambda P: jnp.asarray(_cavi.exponentials(prior, P, y) == "shifted"))(Phi)
        assert jax.jit(lambda t: jnp.asarray(_cavi.exponentials(prior, Phi, t) == "shifted"))(y)


def test_powers_of_one_exponential():
    with jax.enable_x64(True):
        a = jnp.linspace(-20.0, 20.0, 41, dtype=jnp.float64)
        for bound in ("tilted", "jensen", "theorem2"):
            cs = _bound.exponent_constants(bound)
            h = _cavi._base(cs)
            for got, c in zip(_cavi._powers(jnp.exp(h * a), cs), cs, strict=True):
                np.testing.assert_allclose(got, jnp.exp(c * a), rtol=1e-13)
    with pytest.raises(ValueError, match="not"):
        _cavi._base((1.0, 0.3))


@pytest.mark.parametrize("bound", ["tilted", "jensen", "theorem2"])
def test_bound_gradients_in_closed_form(bound):
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        K, n = len(_bound._EXPONENTS[bound]), 200
        L = jnp.asarray(3.0 * rng.normal(size=(K, n)))
        sez = jnp.asarray(3.0 * rng.normal(size=n))
        w = jnp.asarray(rng.uniform(size=n))
        total = lambda L_, s_: jnp.sum(w * _bound.bound_from_mgfs(L_.T, s_, bound))  # noqa: E731
        want = jax.grad(total, argnums=(0, 1))(L, sez)
        got = _bound.bound_grads(L, sez, w, bound)
        for g, h in zip(got, want, strict=True):
            np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-15)


def test_fit_trace_is_the_bound_of_each_sweep():
    """The row terms kept current through the sweeps give the ELBO bound that a fresh evaluation gives."""
    import kronvi.logistic as kl

    with jax.enable_x64(True):
        _, prior, Phi, y, _ = problem(n=40)
        for sweeps in (1, 3):
            q, info = kl.fit_logistic(Phi, y, prior, method="cavi", max_iter=sweeps, tol=0.0)
            np.testing.assert_allclose(info.elbo[-1], kl.logistic_elbo_bound(Phi, y, q, prior), rtol=1e-12)
