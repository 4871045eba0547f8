"""The GP likelihood of rows held on the host (`kronvi._inputs.gp_host`): its values and gradients against
dense references, the handle's life, and programs that compile once for every row count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.special
from helpers import count_compiles

import kronvi
from kronvi._inputs import gp as _gp
from kronvi._inputs import gp_host
from kronvi._inputs.features import KERNELS


def _rows(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.05 * rng.normal(size=n)
    return X, y - y.mean()


def _dense_K(theta, X, kernel="rbf"):
    r"""The kernel matrix with the noise, from the general forms: the squared exponential, and Matern-nu's
    Bessel-function form $2^{1-\nu}/\Gamma(\nu)\,(\sqrt{2\nu} r)^\nu K_\nu(\sqrt{2\nu} r)$ (1 at r = 0)."""
    d = X.shape[1]
    p = np.exp(theta)
    A = X / p[:d]
    r = np.sqrt(((A[:, None, :] - A[None, :, :]) ** 2).sum(-1))
    if kernel == "rbf":
        k = np.exp(-0.5 * r**2)
    else:
        nu = {"matern52": 2.5, "matern32": 1.5}[kernel]
        z = np.where(r > 0, np.sqrt(2 * nu) * r, 1.0)
        k = np.where(r > 0, 2 ** (1 - nu) / scipy.special.gamma(nu) * z**nu * scipy.special.kv(nu, z), 1.0)
    return p[d] * k + p[d + 1] * np.eye(len(X))


def _dense_lml(theta, X, y, kernel="rbf"):
    K = _dense_K(theta, X, kernel)
    c = scipy.linalg.cho_factor(K, lower=True)
    return (
        -0.5 * y @ scipy.linalg.cho_solve(c, y)
        - np.log(np.diag(c[0])).sum()
        - 0.5 * len(y) * np.log(2 * np.pi)
    )


def _brute_loo(theta, X, y, kernel="rbf"):
    """Leave-one-out squared errors by refitting the GP posterior mean without each row in turn."""
    K = _dense_K(theta, X, kernel)
    errors = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        k_i = K[i, keep]  # the noise is on the diagonal only
        mean = k_i @ np.linalg.solve(K[np.ix_(keep, keep)], y[keep])
        errors.append((y[i] - mean) ** 2)
    return float(np.mean(errors))


THETA = np.log(np.array([0.7, 1.3, 4.0, 0.9, 0.02]))


@pytest.mark.parametrize("kernel", KERNELS)
def test_host_likelihood_and_loo_against_dense_references(kernel):
    """Each kernel's host likelihood, gradient and leave-one-out error against the dense Bessel-function
    forms and central differences, with two equal rows (distance 0, where a Matern kernel's square root
    has no derivative); and the same likelihood and gradient in XLA (`gp_log_marginal_likelihood`)."""
    X, y = _rows()
    X[7] = X[3]
    value, grad = gp_host.host_lml(THETA, X, y, with_grad=True, kernel=kernel)
    np.testing.assert_allclose(value, _dense_lml(THETA, X, y, kernel), rtol=1e-12)
    fd = [
        (_dense_lml(THETA + h, X, y, kernel) - _dense_lml(THETA - h, X, y, kernel)) / (2 * 1e-6)
        for h in 1e-6 * np.eye(len(THETA))
    ]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        gp_host.host_loo_mse(THETA, X, y, kernel), _brute_loo(THETA, X, y, kernel), rtol=1e-9
    )

    def xla(theta):
        hyper = kronvi.inputs.GPHyperparameters(jnp.exp(theta[:3]), jnp.exp(theta[3]), jnp.exp(theta[4]))
        return kronvi.inputs.gp_log_marginal_likelihood(hyper, X, y, kernel=kernel)

    with jax.enable_x64(True):
        xla_value, xla_grad = jax.value_and_grad(xla)(jnp.asarray(THETA))
    np.testing.assert_allclose(xla_value, value, rtol=1e-12)
    np.testing.assert_allclose(xla_grad, grad, rtol=1e-9, atol=1e-9)
    # a failed factorization (a NaN parameter) is NaN, never a number
    bad = THETA.copy()
    bad[0] = np.nan
    assert np.isnan(gp_host.host_loo_mse(bad, X, y))
    assert np.isnan(gp_host.host_lml(bad, X, y, with_grad=True)[0])


def test_handle_carries_float64_through_a_program_and_its_gradient():
    """Under `jit` the likelihood of rows held by handle equals the host's in float64 (the parameters cross
    to the host as bits, whatever the callback thread's x64 setting), and so does its gradient; the handle
    is gone after the block."""
    X, y = _rows()
    theta = THETA + 1e-9  # not a float32 number: rounding on the way would show
    with jax.enable_x64(True), gp_host.HostRows(X, y) as rows:
        handle = jnp.asarray(rows.handle, jnp.int32)
        value, grad = jax.jit(jax.value_and_grad(gp_host.handle_lml))(jnp.asarray(theta), handle)
        loo = jax.jit(gp_host.handle_loo_mse)(jnp.asarray(theta), handle)
        assert value.dtype == jnp.float64 and grad.dtype == jnp.float64
    ref_value, ref_grad = gp_host.host_lml(theta, X, y, with_grad=True)
    assert float(value) == float(ref_value)
    np.testing.assert_array_equal(np.asarray(grad), ref_grad)
    assert float(loo) == gp_host.host_loo_mse(theta, X, y)
    assert rows.handle not in gp_host._ROWS
    bits = gp_host._host_bits(np.array([1 / 3, -1e-300, np.inf]))
    np.testing.assert_array_equal(gp_host._host_float64(bits), [1 / 3, -1e-300, np.inf])


def test_host_rows_reach_the_xla_float64_optimum():
    """The default (`precision="float64"`: rows on the host) and the likelihood in XLA (`"native"` on float64
    inputs) run the same L-BFGS on the same float64 likelihood: the same hyperparameters to rounding, with
    every start and with the screened ones, and with a Matern kernel."""
    X, y = _rows(n=120)
    for kw in (dict(num_starts=3), dict(restarts="screened", screen_points=50), dict(num_starts=2, kernel="matern32")):
        with jax.enable_x64(True):
            host, xla = (
                kronvi.inputs.fit_gp_hyperparameters(
                    jax.random.key(0), X, y, precision=p, parallel_restarts=False, **kw
                )
                for p in ("float64", "native")
            )
        np.testing.assert_allclose(
            host.info.log_marginal_likelihoods, xla.info.log_marginal_likelihoods, rtol=1e-9
        )
        for a, b in zip(jax.tree.leaves(host.hyper), jax.tree.leaves(xla.hyper), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        assert int(host.info.chosen) == int(xla.info.chosen)
        assert int(host.info.num_points) == 120


@pytest.mark.parametrize("restarts", ["all", "screened"])
def test_a_new_row_count_compiles_no_gp_program(restarts):
    """Rows held on the host: the GP fit's programs see no row count, so fits at 60, 47, 73 and 90 rows
    (four row buckets of the XLA likelihood) compile nothing after the first; nor does one at 28, below the
    screening's 30 rows (every start on every row: the refinement's fewer starts share the program of the
    summary of all of them)."""
    X, y = _rows(n=90, d=2, seed=1)
    kw = dict(num_starts=3, restarts=restarts, screen_points=30, max_iter=30)
    jax.clear_caches()  # what an earlier test compiled: the first fit below compiles (or loads) it
    with count_compiles() as first:
        kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), X[:60], y[:60], **kw)
    assert len(first) > 0
    for n in (47, 73, 90, 28):
        with count_compiles() as again:
            fit = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), X[:n], y[:n], **kw)
        assert len(again) == 0, (n, len(again))
        assert int(fit.info.num_points) == n
    assert _gp._held_start._cache_size() >= 1


def test_a_subsample_at_a_new_row_count_compiles_nothing(monkeypatch):
    """Above `num_points` rows the GP fits a subsample: the rows `jax.random.choice` draws, found from the bits
    of a power of two of rows, so 70, 81 and 95 rows after 64 compile nothing, and each fit is the one of
    `jax.random.choice`'s rows."""
    X, y = _rows(n=95, d=2, seed=3)
    kw = dict(num_starts=2, num_points=40, max_iter=20)
    kronvi.inputs.fit_gp_hyperparameters(jax.random.key(5), X[:64], y[:64], **kw)
    fits = {}
    for n in (70, 81, 95):
        with count_compiles() as again:
            fits[n] = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(5), X[:n], y[:n], **kw)
        assert len(again) == 0, (n, len(again))
    monkeypatch.setattr(
        _gp, "choice_rows", lambda key, n, m: np.asarray(jax.random.choice(key, n, (m,), replace=False))
    )
    for n, fit in fits.items():
        want = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(5), X[:n], y[:n], **kw)
        np.testing.assert_array_equal(fit.info.log_marginal_likelihoods, want.info.log_marginal_likelihoods)


def test_host_scales_equal_the_xla_bounds():
    """The box and reference scales computed by NumPy for rows held on the host equal `_bounds` of the same
    rows in XLA (float64), with an inactive (constant) input among them."""
    X, y = _rows(n=50, d=4, seed=2)
    X[:, 2] = 3.0  # constant: not active, left out of the reference scale
    min_noise = 1e-6 * np.var(y)
    with jax.enable_x64(True):  # as the GP step calls it: its device arrays stay float64
        lo, hi, var_y, ls_lo, ls_hi, active = gp_host.host_scales(
            X, y, min_noise, _gp._LENGTHSCALE_BOUNDS, _gp._SIGNAL_BOUNDS, _gp._NOISE_UPPER
        )
        assert lo.dtype == jnp.float64
        w = jnp.ones(50)
        bounds, ref_lo, ref_hi, ref_active = _gp._bounds(
            jnp.asarray(X), jnp.asarray(y), w, jnp.asarray(min_noise)
        )
        np.testing.assert_allclose(lo, bounds.lo, rtol=1e-13)
        np.testing.assert_allclose(hi, bounds.hi, rtol=1e-13)
        np.testing.assert_allclose([ls_lo, ls_hi], [ref_lo, ref_hi], rtol=1e-13)
        np.testing.assert_allclose(var_y, _gp._weighted_moments(jnp.asarray(y), w)[1], rtol=1e-13)
    np.testing.assert_array_equal(active, ref_active)
    assert not bool(active[2]) and bool(active[0])
