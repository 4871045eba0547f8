"""Exact predictive probabilities against enumeration of every configuration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from logistic.reference import predictive

import kronvi
import kronvi.logistic as kl


def problem(dtype, b=3, m=5, n=6, scale=1.0, seed=0):
    k = jax.random.split(jax.random.key(seed), 2)
    prior = kronvi.model.gaussian_prior(b, 1.0, levels=m, dtype=dtype)
    q = kronvi.model.MeanField(2.0 * jax.random.normal(k[0], (b, m), dtype))
    Phi = scale * jax.random.normal(k[1], (n, b), dtype)
    return q, prior, Phi


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_matches_enumeration(dtype, scale):
    q, prior, Phi = problem(dtype, scale=scale)
    p, err = kl.predict_logistic(q, prior, Phi, with_error_bound=True)
    assert p.dtype == dtype and p.shape == (6,)
    exact = predictive(q.probs, prior.values, Phi)
    tol = 2e-6 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(p, exact, atol=tol)
    assert np.all(np.asarray(err) < (1e-7 if dtype == np.float32 else 1e-12))


@pytest.mark.parametrize("scale", [1e3, 1e4, 1e6, 1e30])
def test_large_margins_match_enumeration(dtype, scale):
    """Beyond |Phi w| ~ 1e3 the capped quadrature missed its bound (error 0.006 with bound inf at 1e4)
    and its step underflowed to 0 at 1e6 (all NaN). Those points are now summed over every
    configuration: exact at any margin, up to the large-margin limit, the q-mass of the sign."""
    q, prior, Phi = problem(dtype, scale=scale)
    p, err = kl.predict_logistic(q, prior, Phi, with_error_bound=True)
    np.testing.assert_allclose(
        p, predictive(q.probs, prior.values, Phi), atol=2e-6 if dtype == np.float32 else 1e-11
    )
    assert np.all(np.asarray(err) <= (1e-7 if dtype == np.float32 else 1e-13))


def test_large_margins_with_many_configurations_warn_and_stay_finite():
    """5**7 configurations are too many to sum: the capped quadrature is returned with a warning; it
    approaches the q-mass of the sign (within 2.2e-4 of the enumeration for 4 seeds and margins 1e3 to 1e6)."""
    q, prior, Phi = problem(np.float32, b=7, n=4, scale=1e4, seed=1)
    with pytest.warns(RuntimeWarning, match=r"^predict_logistic: \d of 4 probabilities have error bounds"):
        p, err = kl.predict_logistic(q, prior, Phi, with_error_bound=True)
    assert np.all(np.isfinite(np.asarray(p))) and np.all(np.asarray(err) <= 1.0)
    np.testing.assert_allclose(p, predictive(q.probs, prior.values, Phi), atol=1e-3)


def test_error_bound_holds_with_few_nodes():
    """With deliberately few nodes the stated bound still covers the actual error."""
    with jax.enable_x64(True):
        q, prior, Phi = problem(np.float64, scale=3.0)
        exact = predictive(q.probs, prior.values, Phi)
        for nodes in (2, 4, 8):
            p, err = kl.predict_logistic(q, prior, Phi, num_nodes=nodes, with_error_bound=True)
            assert np.all(np.abs(np.asarray(p) - exact) <= np.asarray(err) + 1e-14)


def test_point_mass_is_sigmoid(dtype):
    q, prior, Phi = problem(dtype)
    onehot = jnp.where(jnp.arange(5)[None, :] == jnp.array([[0], [4], [2]]), 0.0, -60.0).astype(dtype)
    w = prior.values[jnp.arange(3), jnp.array([0, 4, 2])]
    p = kl.predict_logistic(kronvi.model.MeanField(onehot), prior, Phi)
    np.testing.assert_allclose(p, jax.nn.sigmoid(Phi @ w), atol=2e-6)


def test_chunks_jit_and_vmap(dtype):
    q, prior, Phi = problem(dtype, n=7)
    ref = kl.predict_logistic(q, prior, Phi)
    np.testing.assert_allclose(kl.predict_logistic(q, prior, Phi, chunk_size=3), ref, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(kl.predict_logistic)(q, prior, Phi), ref, rtol=1e-6)
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), q)
    out = jax.vmap(kl.predict_logistic, in_axes=(0, None, None))(stacked, prior, Phi)
    np.testing.assert_allclose(out[1], ref, rtol=1e-6)


def test_bad_inputs_are_named():
    q, prior, Phi = problem(np.float32)
    with pytest.raises(ValueError, match="`Phi_new`"):
        kl.predict_logistic(q, prior, Phi[:, :2])
    with pytest.raises(ValueError, match="`num_nodes`"):
        kl.predict_logistic(q, prior, Phi, num_nodes=0)


@pytest.mark.parametrize("even", [True, False])
def test_even_and_uneven_grids_match_enumeration(dtype, even):
    """Even grids (every grid kronvi builds) take Horner's rule over the levels; off-centre posterior-placed
    grids and uneven ones (the general path) match enumeration alike."""
    rng = np.random.default_rng(3)
    centre, spread = rng.normal(size=(3, 1)) * 5.0, rng.uniform(0.2, 1.0, size=(3, 1))
    values = centre + spread * np.linspace(-4.0, 4.0, 5)
    if not even:
        values = values + rng.uniform(-0.1, 0.1, size=values.shape)
    prior = kronvi.model.DiscretePrior(
        jnp.asarray(values, dtype), jnp.asarray(rng.normal(size=(3, 5)), dtype)
    )
    assert kl._predict.is_even_grid(prior.values) == even
    q = kronvi.model.MeanField(jnp.asarray(2.0 * rng.normal(size=(3, 5)), dtype))
    Phi = jnp.asarray(rng.normal(size=(6, 3)) * 0.3, dtype)
    p = kl.predict_logistic(q, prior, Phi)
    np.testing.assert_allclose(
        p, predictive(q.probs, prior.values, Phi), atol=4e-6 if dtype == np.float32 else 1e-11
    )


def _rows(q, prior, Phi):
    """`predict_rows` with each row's own nodes (`row_nodes`), the bound of those nodes, and the nodes."""
    P = kl._predict
    log_cosh = np.asarray(P.mgf_log_cosh(q.log_probs, prior.values, Phi))
    nodes = P.row_nodes(log_cosh, Phi.dtype)
    bound = np.asarray(P._step_and_error(jnp.asarray(log_cosh), jnp.asarray(nodes, Phi.dtype))[1])
    return P.predict_rows(q, prior, np.asarray(Phi), nodes, log_cosh=log_cosh), bound, nodes


@pytest.mark.parametrize("levels", [5, 4, 2])
@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 30.0])
def test_rows_match_enumeration(dtype, levels, scale):
    """`predict_proba`'s path (each row its own nodes, Clenshaw's sums over node items) against every
    configuration, with odd and even numbers of levels, margins up to |Z| ~ 100; each row's bound within
    the target."""
    q, prior, Phi = problem(dtype, m=levels, scale=scale)
    p, bound, nodes = _rows(q, prior, Phi)
    assert p.shape == (6,) and np.all(bound <= kl._predict.target_error(dtype))
    np.testing.assert_allclose(
        p, predictive(q.probs, prior.values, Phi), atol=2e-6 if dtype == np.float32 else 1e-11
    )


def test_rows_on_off_centre_and_single_level_grids(dtype):
    """Grids far from 0 relative to their spacing (the levels' rounding enters through its q-mean), and a
    single level (a point mass: the sigmoid), against every configuration."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=(3, 1)) * 30.0 + rng.uniform(0.2, 1.0, size=(3, 1)) * np.linspace(-4.0, 4.0, 7)
    prior = kronvi.model.DiscretePrior(jnp.asarray(values, dtype), jnp.zeros((3, 7), dtype))
    q = kronvi.model.MeanField(jnp.asarray(2.0 * rng.normal(size=(3, 7)), dtype))
    Phi = jnp.asarray(rng.normal(size=(6, 3)) * 0.1, dtype)
    p = _rows(q, prior, Phi)[0]
    np.testing.assert_allclose(p, predictive(q.probs, prior.values, Phi), atol=4e-6 if dtype == np.float32 else 1e-11)
    point = kronvi.model.DiscretePrior(jnp.asarray(values[:, :1], dtype), jnp.zeros((3, 1), dtype))
    p = _rows(kronvi.model.MeanField(jnp.zeros((3, 1), dtype)), point, Phi)[0]
    np.testing.assert_allclose(p, jax.nn.sigmoid(np.asarray(Phi, np.float64) @ values[:, 0]), atol=2e-6 if dtype == np.float32 else 1e-11)


def test_a_rows_probability_does_not_depend_on_its_batch(monkeypatch):
    """The same bits for a row alone, in a batch, and in a batch cut into several programs (windows)."""
    q, prior, Phi = problem(np.float32, n=12, scale=3.0)
    P = kl._predict
    log_cosh = np.asarray(P.mgf_log_cosh(q.log_probs, prior.values, Phi))
    nodes = P.row_nodes(log_cosh, np.float32)
    whole = P.predict_rows(q, prior, np.asarray(Phi), nodes, log_cosh=log_cosh)
    for i in (0, 5, 11):
        alone = P.predict_rows(q, prior, np.asarray(Phi[i : i + 1]), nodes[i : i + 1], log_cosh=log_cosh[i : i + 1])
        np.testing.assert_array_equal(alone, whole[i : i + 1])
    monkeypatch.setattr(P, "_WINDOW_ROWS", 2)  # six programs of two rows
    np.testing.assert_array_equal(P.predict_rows(q, prior, np.asarray(Phi), nodes, log_cosh=log_cosh), whole)


def test_even_log_cosh_is_log_mgf(dtype):
    """The Horner form of log E cosh Z against `log_mgf`'s (an upper bound up to rounding), and its flag
    where a sum may have lost terms to underflow."""
    P = kl._predict
    for levels, scale in [(5, 1.0), (4, 10.0), (15, 0.3), (5, 30.0)]:
        q, prior, Phi = problem(dtype, m=levels, scale=scale, n=8)
        exact = np.asarray(P.mgf_log_cosh(q.log_probs, prior.values, Phi), np.float64)
        fast, flag = (np.asarray(a) for a in P.even_log_cosh(P.host_coefficients(q, prior), Phi))
        assert not np.any(flag)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(fast, exact, rtol=tol, atol=tol)
        assert np.all(fast >= exact - tol * np.maximum(1.0, np.abs(exact)))
    q, prior, Phi = problem(dtype, scale=1.0)
    small = -80.0 if dtype == np.float32 else -700.0  # the top levels' mass below 2^-90 (2^-900)
    q = kronvi.model.MeanField(q.logits.at[:, -2:].set(small))
    flag = np.asarray(P.even_log_cosh(P.host_coefficients(q, prior), Phi * 1e3)[1])
    assert np.all(flag)


def test_sincos_quarter_reduces_and_matches_numpy(dtype):
    P = kl._predict
    alpha = np.concatenate([np.linspace(-60.0, 60.0, 4001), [0.0, 1e-30, np.pi / 4, 1e3 + 0.1]]).astype(dtype)
    n, s, c = (np.asarray(a, np.float64) for a in P._sincos_quarter(jnp.asarray(alpha)))
    r = np.asarray(alpha, np.float64) - n * np.pi / 2
    assert np.all(np.abs(r) <= np.pi / 4 + 1e-6)
    eps = np.finfo(dtype).eps
    tol = 4 * eps * (1.0 + np.abs(np.asarray(alpha, np.float64)))  # the argument's own rounding
    np.testing.assert_array_less(np.abs(s - np.sin(r)), tol)
    np.testing.assert_array_less(np.abs(c - np.cos(r)), tol)


def test_row_nodes_meet_the_target_and_grow_with_the_margin(dtype):
    P = kl._predict
    log_cosh = np.array([0.0, 0.5, 10.0, 1e3, 1e6, 1e300, np.inf])
    nodes = P.row_nodes(log_cosh, dtype)
    assert nodes.dtype == np.int64 and np.all(np.diff(nodes) >= 0) and nodes[0] >= 1 and nodes[-1] == 2**62
    bound = P._host_bound(log_cosh[:4], nodes[:4])
    assert np.all(bound <= P.target_error(dtype))
    assert np.all(P._host_bound(log_cosh[:4], nodes[:4] - 1) > P.target_error(dtype))  # the fewest
    device = np.asarray(P._step_and_error(jnp.asarray(log_cosh[:4], dtype), jnp.asarray(nodes[:4], dtype))[1])
    np.testing.assert_allclose(device, bound, rtol=1e-3)
