import json
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.stats
from helpers import run_python, subprocess_env, tol
from jax.test_util import check_grads

import kronvi
from kronvi._inputs import gp as _gp


def _dense_kernel(X1, X2, lengthscales, signal_variance):
    A = np.asarray(X1, np.float64) / np.asarray(lengthscales, np.float64)
    B = np.asarray(X2, np.float64) / np.asarray(lengthscales, np.float64)
    return float(signal_variance) * np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def _reference_lml(hyper, X, y):
    """Dense float64 log N(y | 0, K + noise I) with scipy's Cholesky."""
    y = np.asarray(y, np.float64)
    K = _dense_kernel(X, X, hyper.lengthscales, hyper.signal_variance)
    K += float(hyper.noise_variance) * np.eye(len(y))
    c, low = scipy.linalg.cho_factor(K, lower=True)
    alpha = scipy.linalg.cho_solve((c, low), y)
    return -0.5 * y @ alpha - np.log(np.diag(c)).sum() - 0.5 * len(y) * np.log(2 * np.pi)


def _gp_mean(hyper, X, y, Xt):
    K = _dense_kernel(X, X, hyper.lengthscales, hyper.signal_variance)
    K += float(hyper.noise_variance) * np.eye(len(y))
    return _dense_kernel(Xt, X, hyper.lengthscales, hyper.signal_variance) @ np.linalg.solve(K, y)


def _hyper(dtype, d=3):
    return kronvi.inputs.GPHyperparameters(
        jnp.asarray(np.linspace(0.5, 2.0, d), dtype), jnp.asarray(1.7, dtype), jnp.asarray(0.3, dtype)
    )


def _data(seed=0, n=30, d=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=n)


# ---------------------------------------------------------------------------------------------------
# Log marginal likelihood


def test_lml_matches_dense_reference(dtype):
    X, y = _data()
    hyper = _hyper(dtype)
    got = kronvi.inputs.gp_log_marginal_likelihood(hyper, jnp.asarray(X, dtype), jnp.asarray(y, dtype))
    assert got.dtype == jnp.dtype(dtype)
    ref = _reference_lml(hyper, X, y)
    np.testing.assert_allclose(float(got), ref, rtol=tol(dtype, x32=1e-4, x64=1e-10))
    # an independent reference: scipy's multivariate normal density
    cov = _dense_kernel(X, X, hyper.lengthscales, hyper.signal_variance)
    cov += float(hyper.noise_variance) * np.eye(len(y))
    np.testing.assert_allclose(
        ref, scipy.stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(y), rtol=1e-10
    )


def test_lml_gradient_matches_finite_differences(monkeypatch):
    with jax.enable_x64(True):
        X, y = _data(n=12)
        X, y = jnp.asarray(X), jnp.asarray(y)

        @jax.jit
        def f(log_params, y):
            h = kronvi.inputs.GPHyperparameters(
                jnp.exp(log_params[:3]), jnp.exp(log_params[3]), jnp.exp(log_params[4])
            )
            return _gp._lml(h, X, y)

        check_grads(
            f, (jnp.array([-0.3, 0.1, 0.5, 0.2, -1.0]), y), order=1, modes=["rev"], atol=1e-6, rtol=1e-6
        )

        # the closed-form VJP agrees with differentiating through the Cholesky factorization
        @jax.jit
        def through_cholesky(log_params):
            h = kronvi.inputs.GPHyperparameters(
                jnp.exp(log_params[:3]), jnp.exp(log_params[3]), jnp.exp(log_params[4])
            )
            L = _gp._cholesky(h, X)
            alpha = jax.scipy.linalg.cho_solve((L, True), y)
            return -0.5 * y @ alpha - jnp.sum(jnp.log(jnp.diag(L)))

        p = jnp.array([0.2, -0.4, 0.0, 0.5, -2.0])
        g64 = jax.grad(lambda p: f(p, y))(p)
        np.testing.assert_allclose(g64, jax.grad(through_cholesky)(p), rtol=1e-9, atol=1e-12)
    # in float32 on a CPU the VJP's inverse comes from XLA's triangular solves below
    # _HOST_INVERSE_MIN_ROWS rows and from LAPACK's potri in the host above: the same gradient either way
    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)

    def f32(log_params):
        h = kronvi.inputs.GPHyperparameters(
            jnp.exp(log_params[:3]), jnp.exp(log_params[3]), jnp.exp(log_params[4])
        )
        return _gp._lml(h, X32, y32)

    g32 = jax.jit(jax.grad(f32))(jnp.asarray(p, jnp.float32))
    np.testing.assert_allclose(g32, np.asarray(g64), rtol=2e-4, atol=2e-4)
    monkeypatch.setattr(_gp, "_HOST_INVERSE_MIN_ROWS", 1)
    jax.clear_caches()  # the VJP traced above (XLA's inverse) would be reused for the same shapes
    g32_host = jax.jit(jax.grad(f32))(jnp.asarray(p, jnp.float32))
    monkeypatch.undo()
    jax.clear_caches()  # and the host route's trace must not serve later tests of these shapes
    np.testing.assert_allclose(g32_host, np.asarray(g64), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_potri_inverts_k_from_its_c_ordered_cholesky_factor(dtype):
    """`_potri` hands LAPACK the C-ordered lower factor as the Fortran-ordered upper one: its lower
    triangle must be K^{-1}'s (against NumPy's dense inverse in float64); a failed factorization
    (NaN on the diagonal) gives NaN everywhere."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(40, 40))
    K = A @ A.T / 40 + np.eye(40)
    L = np.ascontiguousarray(np.linalg.cholesky(K).astype(dtype))
    L64 = L.astype(np.float64)
    ref = np.linalg.inv(L64 @ L64.T)
    out = _gp._potri(L)
    assert out.dtype == dtype and out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.tril(out), np.tril(ref), rtol=tol(dtype, x32=1e-4, x64=1e-10), atol=1e-6)
    bad = L.copy()
    bad[3, 3] = np.nan
    assert np.all(np.isnan(_gp._potri(bad)))


def test_float64_host_likelihood_matches_the_dense_reference_and_its_gradient():
    """`_host_lml` (NumPy and LAPACK in float64) against the dense scipy reference (value) and against
    `_lml`'s closed-form VJP in XLA float64 (gradient; that VJP is checked against finite differences
    above). `_lml64` carries it through `jax.grad` and `vmap` from float32 inputs, its values exact to
    float32's rounding."""
    X, y = _data(n=30)
    theta = np.array([-0.3, 0.1, 0.5, 0.2, np.log(1e-3)])  # small noise: float32's own rounding is large
    p = np.exp(theta)
    hyper = kronvi.inputs.GPHyperparameters(p[:3], p[3], p[4])
    value, grad = _gp._host_lml(theta, X, y, with_grad=True)
    np.testing.assert_allclose(value, _reference_lml(hyper, X, y), rtol=1e-12)
    with jax.enable_x64(True):

        def f(t):
            e = jnp.exp(t)
            return _gp._lml(
                kronvi.inputs.GPHyperparameters(e[:3], e[3], e[4]), jnp.asarray(X), jnp.asarray(y)
            )

        np.testing.assert_allclose(grad, jax.grad(f)(jnp.asarray(theta)), rtol=1e-8, atol=1e-9)
    only_value, nan = _gp._host_lml(theta, X, y, with_grad=False)
    assert only_value == value and np.all(np.isnan(nan))
    for bad_theta in ([0.0, 0.0, 0.0, 0.0, np.nan], [5.0, 5.0, 5.0, 5.0, np.log(1e-30)]):  # NaN; not PD
        bad, bad_grad = _gp._host_lml(np.array(bad_theta), X, y, with_grad=True)
        assert np.isnan(bad) and np.all(np.isnan(bad_grad))  # the fit sees NaN

    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    ts = jnp.asarray(np.stack([theta, theta + 0.1]), jnp.float32)

    def exact(t):
        return _gp._host_lml(
            np.asarray(t, np.float64), np.asarray(X32, np.float64), np.asarray(y32, np.float64), True
        )

    value_and_grad = jax.value_and_grad(lambda t: _gp._lml64(t, X32, y32))
    v32, g32 = jax.jit(value_and_grad)(ts[0])
    assert v32.dtype == g32.dtype == jnp.float32
    np.testing.assert_allclose(v32, exact(ts[0])[0], rtol=1e-7)
    np.testing.assert_allclose(g32, exact(ts[0])[1], rtol=1e-6, atol=1e-6)
    vs, gs = jax.jit(jax.vmap(value_and_grad))(ts)  # the path of parallel_restarts=True
    for i in range(2):
        np.testing.assert_allclose(vs[i], exact(ts[i])[0], rtol=1e-7)
        np.testing.assert_allclose(gs[i], exact(ts[i])[1], rtol=1e-6, atol=1e-6)


def test_float64_likelihood_reaches_the_float64_optimum_from_float32_inputs():
    """With float32 inputs and a small noise, every start of precision="float64" ends at one optimum
    whose reported likelihood is its float64 value; "native" (float32 in XLA) reports values off by
    its rounding (0.15 nats here, so the first assertion fails for it). Both are scored by the float64
    reference. Float64 inputs: "native" computes the likelihood in XLA, "float64" on the host
    (`gp_host`), both in float64: the same optimum to rounding."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (120, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.01 * rng.standard_normal(120)
    y = y - y.mean()
    Xj, yj = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    fits = {
        prec: kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), Xj, yj, num_starts=3, precision=prec)
        for prec in ("float64", "native")
    }
    scored = {}
    for prec, (_, info) in fits.items():
        starts = jax.tree.map(lambda a: np.asarray(a, np.float64), info.starts)
        ref = [
            _reference_lml(kronvi.inputs.GPHyperparameters(*(a[i] for a in starts)), X, y) for i in range(3)
        ]
        scored[prec] = np.asarray(ref)
        if prec != "native":
            np.testing.assert_allclose(info.log_marginal_likelihoods, ref, atol=2e-3)
    assert np.ptp(scored["float64"]) < 0.05  # every start at the same optimum
    assert scored["float64"].max() >= scored["native"].max() - 1e-3
    with pytest.raises(ValueError, match="precision"):
        kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), Xj, yj, precision="float128")
    with jax.enable_x64(True):
        X64, y64 = jnp.asarray(X), jnp.asarray(y)
        a, b = (
            kronvi.inputs.fit_gp_hyperparameters(
                jax.random.key(0), X64, y64, num_starts=1, max_iter=5, precision=p
            )
            for p in ("native", "float64")
        )
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(u, v, rtol=1e-9)


def test_lml_jit_and_vmap():
    X, y = (jnp.asarray(a, jnp.float32) for a in _data())
    hypers = kronvi.inputs.GPHyperparameters(
        jnp.asarray([[0.5, 1.0, 2.0], [1.0, 1.0, 1.0]], jnp.float32),
        jnp.asarray([1.0, 2.0], jnp.float32),
        jnp.asarray([0.1, 0.5], jnp.float32),
    )
    batched = jax.jit(jax.vmap(kronvi.inputs.gp_log_marginal_likelihood, in_axes=(0, None, None)))(
        hypers, X, y
    )
    for i in range(2):
        single = kronvi.inputs.gp_log_marginal_likelihood(jax.tree.map(lambda a, i=i: a[i], hypers), X, y)
        np.testing.assert_allclose(batched[i], single, rtol=1e-5)


def test_lml_validation():
    X, y = _data()
    h = _hyper(np.float32)
    with pytest.raises(ValueError, match="lengthscales` must have shape \\(3,\\)"):
        kronvi.inputs.gp_log_marginal_likelihood(h._replace(lengthscales=jnp.ones(2)), X, y)
    with pytest.raises(ValueError, match="noise_variance` must be strictly positive"):
        kronvi.inputs.gp_log_marginal_likelihood(h._replace(noise_variance=jnp.asarray(-1.0)), X, y)
    with pytest.raises(ValueError, match="signal_variance` must be a scalar"):
        kronvi.inputs.gp_log_marginal_likelihood(h._replace(signal_variance=jnp.ones(2)), X, y)
    with pytest.raises(ValueError, match="`X` has 30 rows but `y` has 29"):
        kronvi.inputs.gp_log_marginal_likelihood(h, X, y[:-1])
    with pytest.raises(TypeError, match="GPHyperparameters"):
        kronvi.inputs.gp_log_marginal_likelihood(tuple(h), X, y)


# ---------------------------------------------------------------------------------------------------
# Fitting


def _sine_problem(n=50, n_test=200, seed=0):
    """y = sin(4 x_0) + 0.1 noise with an irrelevant second input: a short-lengthscale signal whose
    marginal likelihood also has a degenerate 'all noise' optimum at long lengthscales."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.7, 1.7, size=(n + n_test, 2))
    y = np.sin(4 * x[:, 0]) + 0.1 * rng.normal(size=n + n_test)
    X = (x - x[:n].mean(0)) / x[:n].std(0)
    y = y - y[:n].mean()
    return X[:n], y[:n], X[n:], y[n:]


def test_multistart_recovers_from_degenerate_optimum(dtype):
    X, y, Xt, yt = _sine_problem()
    vy = y.var()
    Xj, yj = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
    # A naive single start from a bad initialization (long lengthscales, everything noise). It is
    # repeated 4 times only so that both fits share one compilation; the copies are identical.
    bad = kronvi.inputs.GPHyperparameters(
        jnp.full((4, 2), 100.0, dtype), jnp.full((4,), 0.01 * vy, dtype), jnp.full((4,), 0.99 * vy, dtype)
    )
    naive, naive_info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), Xj, yj, init=bad)
    assert float(naive.noise_variance) >= 0.9 * vy  # the prototype's failure: noise = var(y)
    assert bool(naive_info.degenerate) and bool(np.all(naive_info.degenerate_starts))
    naive_rmse = np.sqrt(np.mean((_gp_mean(naive, X, y, Xt) - yt) ** 2))
    assert naive_rmse >= 0.95 * yt.std()  # test RMSE = std of y

    hyper, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), Xj, yj)
    assert hyper.lengthscales.dtype == jnp.dtype(dtype)
    assert info.log_marginal_likelihoods.shape == (4,) and info.degenerate_starts.shape == (4,)
    assert not bool(info.degenerate)
    assert not bool(info.degenerate_starts[info.chosen])
    lmls = np.asarray(info.log_marginal_likelihoods)
    # the first start within 0.5 nats of the best (near-ties are decided by start order, not rounding)
    assert int(info.chosen) == np.flatnonzero(lmls >= lmls.max() - 0.5)[0]
    assert lmls.max() > float(naive_info.log_marginal_likelihoods[0]) + 10.0
    assert float(hyper.noise_variance) < 0.05 * vy
    # the relevant input gets a short lengthscale, the irrelevant one a long one
    assert float(hyper.lengthscales[0]) < 1.0 < float(hyper.lengthscales[1])
    rmse = np.sqrt(np.mean((_gp_mean(hyper, X, y, Xt) - yt) ** 2))
    assert rmse < 0.3 * yt.std()
    np.testing.assert_array_less(np.asarray(info.loo_mse)[int(info.chosen)], 0.1 * vy)


def test_parallel_restarts_match_sequential():
    X, y, _, _ = _sine_problem()
    with jax.enable_x64(False):
        key = jax.random.key(0)
        h_map, i_map = kronvi.inputs.fit_gp_hyperparameters(key, X, y, parallel_restarts=False)
        h_vmap, i_vmap = kronvi.inputs.fit_gp_hyperparameters(key, X, y, parallel_restarts=True)
    # Batched and sequential linear algebra round differently, so a stalled float32 start may stop
    # elsewhere; the chosen optimum agrees.
    lml_map, lml_vmap = (
        np.asarray(i_map.log_marginal_likelihoods),
        np.asarray(i_vmap.log_marginal_likelihoods),
    )
    np.testing.assert_allclose(lml_vmap.max(), lml_map.max(), rtol=1e-3)
    np.testing.assert_allclose(h_vmap.noise_variance, h_map.noise_variance, rtol=2e-2)
    np.testing.assert_allclose(h_vmap.lengthscales[0], h_map.lengthscales[0], rtol=2e-2)
    assert not bool(i_vmap.degenerate) and not bool(i_map.degenerate)


_SIDE_BY_SIDE = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np, kronvi
    from kronvi._inputs import gp as _gp
    X, y = (np.asarray(a) for a in json.loads(sys.argv[1]))  # _sine_problem()'s training rows
    real, calls, out = _gp._run_starts, [], {}
    _gp._run_starts = lambda *a, **k: calls.append(k["pool"]) or real(*a, **k)
    for restarts in ("all", "screened"):
        kw = dict(parallel_restarts=False, restarts=restarts, screen_points=40, precision="native")
        with jax.enable_x64(False):
            _gp._start_workers = lambda num: min(num, 2)  # whatever this machine has
            threaded = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(3), X, y, **kw)
            pools, calls[:] = calls[:], []
            _gp._start_workers = lambda num: 1  # the lax.map program
            mapped = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(3), X, y, **kw)
            mapped_pools, calls[:] = calls[:], []
        out[restarts] = dict(
            pools=bool(pools) and all(p is not None and p._max_workers == 2 for p in pools),
            one_program=bool(mapped_pools) and all(p is None for p in mapped_pools),
            screened=threaded.info.screened is not None,
            equal=[np.array_equal(np.asarray(a), np.asarray(b))
                   for a, b in zip(jax.tree.leaves(threaded), jax.tree.leaves(mapped), strict=True)],
        )
    print(json.dumps(out))
    """
)


def test_starts_side_by_side_equal_one_program():
    """On a CPU the starts run as separate programs from host threads; each computes what `lax.map`'s
    body does, so the results are the same to the bit as with one worker. A subprocess compiles both with
    XLA's default code generation, as a user's process does: the suite's faster-compiling flags
    (tests/suite_flags.py) round the two programs differently."""
    X, y, _, _ = _sine_problem()
    stdout = run_python(
        "-c", _SIDE_BY_SIDE, json.dumps([X.tolist(), y.tolist()]), env=subprocess_env(default_codegen=True)
    )
    out = json.loads(stdout.strip().splitlines()[-1])
    for restarts, got in out.items():
        assert got["pools"] and got["one_program"], restarts
        assert got["screened"] == (restarts == "screened")
        assert got["equal"] and all(got["equal"]), (restarts, got["equal"])


def test_starts_side_by_side_under_enable_x64(monkeypatch):
    """The workers run what the calling thread compiled: its `jax.enable_x64` context holds for them."""
    X, y, _, _ = _sine_problem()
    calls = []
    real = _gp._run_starts
    monkeypatch.setattr(_gp, "_run_starts", lambda *a, **k: calls.append(k["pool"]) or real(*a, **k))
    monkeypatch.setattr(_gp, "_start_workers", lambda num: 2)
    with jax.enable_x64(True):
        X64, y64 = jnp.asarray(X, jnp.float64), jnp.asarray(y, jnp.float64)
        fit = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), X64, y64, parallel_restarts=False, precision="native")
    assert calls and all(p is not None for p in calls)
    assert fit.hyper.noise_variance.dtype == jnp.float64 and not bool(fit.info.degenerate)


def test_programs_with_host_callbacks_run_one_at_a_time(monkeypatch):
    """A host callback takes its operands through XLA's CPU thread pool from a thread of that pool: two at
    once can hold every pool thread and wait forever (kin40k, 2 cores). Starts whose programs call back run
    one at a time; here every start inverts K with `potri` in the host, and a spy counts callers."""
    import threading
    import time

    X, y = _sine_rows()
    X, y = X[:37], y[:37]  # a shape no other test compiles: the spy below is traced in
    active, most, lock = [0], [0], threading.Lock()
    real = _gp._potri

    def spy(L):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(1e-3)
        try:
            return real(L)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(_gp, "_potri", spy)
    monkeypatch.setattr(_gp, "_HOST_INVERSE_MIN_ROWS", 10)
    monkeypatch.setattr(_gp, "_start_workers", lambda num: 2)
    with jax.enable_x64(False):
        fit = kronvi.inputs.fit_gp_hyperparameters(
            jax.random.key(0), X, y, min_noise_variance=1e-3, precision="native"
        )
    assert most[0] == 1 and fit.info.num_iterations.shape == (4,)


def test_select_prefers_comparable_nondegenerate_start():
    lmls = jnp.array([-10.0, -11.0, -30.0, -10.5])
    # best (0) degenerate; 3 is non-degenerate and within the 2-nat margin
    assert int(_gp._select(lmls, jnp.array([True, True, False, False]), 2.0)) == 3
    # best degenerate but the best non-degenerate start is 20 nats worse: keep the best
    assert int(_gp._select(lmls, jnp.array([True, True, False, True]), 2.0)) == 0
    # best not degenerate: it wins
    assert int(_gp._select(lmls, jnp.array([False, False, True, True]), 2.0)) == 0
    # failed starts (-inf) never win
    assert int(_gp._select(jnp.array([-jnp.inf, -5.0]), jnp.array([False, True]), 2.0)) == 1


def _sine_rows():
    """90 rows of y = sin(x_0) + 0.05 noise (centred), with an irrelevant second input."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(90, 2))
    y = np.sin(X[:, 0]) + 0.05 * rng.normal(size=90)
    return X, y - y.mean()


def _trapped_first_start(vy):
    """Four float32 starts: an 'all noise' one (lengthscales 100, 99% noise) first, then the default 3."""
    default = _gp._default_starts(3, 2, jnp.asarray(vy, jnp.float32), jnp.float32)
    return jax.tree.map(
        lambda bad, d: jnp.concatenate([jnp.asarray(bad, jnp.float32)[None], d]),
        kronvi.inputs.GPHyperparameters(jnp.full((2,), 100.0), 0.01 * vy, 0.99 * vy),
        default,
    )


def test_subsample_is_deterministic_and_bounded():
    # float32, 50 rows of 2 inputs and 4 starts: the same compiled program as the float32 case above.
    with jax.enable_x64(False):
        X, y = _sine_rows()
        kw = dict(num_points=50, min_noise_variance=1e-3)
        h1, i1 = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, **kw)
        h2, i2 = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, **kw)
        h3, _ = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(8), X, y, **kw)
        assert int(i1.num_points) == 50
        for a, b in zip(h1, h2, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert float(h1.noise_variance) != float(h3.noise_variance)  # another subsample
        # bounds hold by construction
        assert float(jnp.min(i1.starts.noise_variance)) >= 1e-3 * (1 - 1e-5)
        assert float(jnp.max(i1.starts.lengthscales)) <= 1e3 * 1.1
        assert i1.num_iterations.shape == (4,) and i1.grad_norms.shape == (4,)
        assert not bool(i1.degenerate)


def test_gain_tol_ends_starts_after_two_small_gains():
    """`gain_tol`: a start ends when two iterations in a row each gain less than `gain_tol` nats. With an
    enormous one every start ends after exactly two iterations (unless it converged first); with 0 the
    starts run on and end at least as high as with the default of 0.1 nats, and no more than a few
    tenths of a nat above it."""
    with jax.enable_x64(False):
        X, y = _sine_rows()
        kw = dict(num_points=50, min_noise_variance=1e-3, num_starts=2)
        _, huge = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, gain_tol=1e9, **kw)
        _, default = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, **kw)
        _, none = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, gain_tol=0.0, **kw)
    np.testing.assert_array_equal(np.asarray(huge.num_iterations), 2)
    assert np.all(np.asarray(none.num_iterations) >= np.asarray(default.num_iterations))
    assert np.sum(none.num_iterations) > 4
    best_none, best_default = (
        float(jnp.max(none.log_marginal_likelihoods)),
        float(jnp.max(default.log_marginal_likelihoods)),
    )
    assert best_default <= best_none + 1e-3 and best_default > best_none - 0.5


def test_fit_validation():
    X, y = _data(n=10, d=2)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="`y` is constant"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, np.zeros(10))
    with pytest.raises(ValueError, match="num_points"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, num_points=1)
    with pytest.raises(ValueError, match="num_starts"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, num_starts=0)
    with pytest.raises(ValueError, match="max_iter"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, max_iter=0)
    with pytest.raises(ValueError, match=r"^`gain_tol` must be a number >= 0, got -0.1$"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, gain_tol=-0.1)
    for bad in (True, "0.1", np.nan, np.ones(1)):
        with pytest.raises(ValueError, match="^`gain_tol` must be a number >= 0"):
            kronvi.inputs.fit_gp_hyperparameters(key, X, y, gain_tol=bad)
    with pytest.raises(ValueError, match="`X` has 10 rows but `y` has 9"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y[:9])
    with pytest.raises(ValueError, match="NaN"):
        kronvi.inputs.fit_gp_hyperparameters(key, np.where(X > 1, np.nan, X), y)
    with pytest.raises(ValueError, match="min_noise_variance"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, min_noise_variance=-1.0)
    bad = kronvi.inputs.GPHyperparameters(jnp.ones((2, 3)), jnp.ones(2), jnp.ones(2))
    with pytest.raises(ValueError, match="init.lengthscales` must have shape \\(num_starts, 2\\)"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, init=bad)
    bad = kronvi.inputs.GPHyperparameters(jnp.ones((2, 2)), jnp.ones(3), jnp.ones(2))
    with pytest.raises(ValueError, match="init.signal_variance` must have shape \\(2,\\)"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, init=bad)
    bad = kronvi.inputs.GPHyperparameters(jnp.ones((2, 2)), jnp.ones(2), -jnp.ones(2))
    with pytest.raises(ValueError, match="init.noise_variance` must be strictly positive"):
        kronvi.inputs.fit_gp_hyperparameters(key, X, y, init=bad)


def test_choose_keeps_a_pinned_start_that_predicts_best():
    # parkinsons (key 0) fold 0: the first start ends with its noise pinned but the best leave-one-out error,
    # the second unpinned with a worse one: the first is kept
    lmls = jnp.array([-337.8, -1129.5, -jnp.inf, -jnp.inf])
    degenerate = jnp.array([False, False, True, True])  # the last two failed
    pinned = jnp.array([True, False, False, False])
    loo = jnp.array([0.010, 0.050, jnp.inf, jnp.inf])
    assert int(_gp._choose(lmls, degenerate, pinned, loo, 2.0)) == 0
    # an unpinned start that predicts at least as well is preferred to the pinned one (wine's case)
    assert int(_gp._choose(lmls, degenerate, pinned, loo.at[1].set(0.008), 2.0)) == 1


def test_an_interpolating_start_is_weighed_as_a_pinned_one():
    # wine (key 0) fold 2 on 1,000 rows: a start interpolates (noise 1.5e-5 var(y), above the 1e-6 bound), 271
    # nats more likely and worse by leave-one-out than one with noise 0.15 var(y); that one is chosen
    def summary(noise0):
        hypers = kronvi.inputs.GPHyperparameters(
            jnp.array([[0.7, 2.3], [1.2, 13.0]]), jnp.array([1.0, 1.8]), jnp.array([noise0, 0.15])
        )
        results = (hypers, jnp.array([-501.8, -730.4]), jnp.array([17, 12]), jnp.array([False, False]),
                   jnp.array([0.02, 0.001]), jnp.array([0.355, 0.230]))  # fmt: skip
        active = jnp.array([True, True])
        return _gp._summary(results, 1.0, 0.01, 1000.0, active, 1e-6, 2.0, jnp.asarray(1000))[1]

    info = summary(1.5e-5)
    assert int(info.chosen) == 1 and not np.any(np.asarray(info.noise_at_bound))
    assert int(summary(2e-4).chosen) == 0  # noise above 1e-4 var(y): the likelihood decides


def test_screened_starts_refine_the_one_chosen_on_fewer_rows():
    with jax.enable_x64(False):
        X, y = _sine_rows()
        kw = dict(num_points=50, min_noise_variance=1e-3, restarts="screened", screen_points=20)
        hyper, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, **kw)
    screened = info.screened
    assert int(screened.num_points) == 20 and screened.num_iterations.shape == (4,)
    assert int(screened.chosen) == 0  # the screening chose the first start: only it runs on the 50 rows
    assert int(info.num_points) == 50 and info.num_iterations.shape == (1,)
    chosen = jax.tree.map(lambda a: a[screened.chosen], screened.starts)
    assert float(hyper.noise_variance) != float(chosen.noise_variance)  # it moved on the 50 rows
    assert not bool(info.degenerate) and float(hyper.lengthscales[0]) < float(hyper.lengthscales[1])
    with pytest.raises(ValueError, match="restarts"):
        kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, restarts="some")
    with pytest.raises(ValueError, match="screen_points"):
        kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, restarts="screened", screen_points=1)
    with pytest.raises(ValueError, match="screen_points"):
        kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, restarts="screened", screen_points=2.5)


def test_screened_refines_the_winner_and_runs_the_first_start_from_cold():
    # start 0 is degenerate ('all noise'): the screening picks start 1, and on all rows the winner (refined
    # from its screened optimum) and start 0 (from cold) both run; the rule keeps the non-degenerate one.
    X, y = _sine_rows()
    vy = float(y.var())
    with jax.enable_x64(False):
        init = _trapped_first_start(vy)
        kw = dict(init=init, num_points=50, min_noise_variance=1e-3, restarts="screened", screen_points=20)
        hyper, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), X, y, **kw)
    assert int(info.screened.chosen) != 0 and info.num_iterations.shape == (2,)
    # start 0 (second in the refinement) stayed in its trap, the refined winner did not
    assert bool(info.degenerate_starts[1]) and not bool(info.degenerate_starts[0])
    assert int(info.chosen) == 0 and not bool(info.degenerate)
    assert float(hyper.noise_variance) < 0.05 * vy


def test_screened_falls_back_to_every_start_when_the_refined_one_is_degenerate():
    # On 3 rows every start looks degenerate and the 'all noise' start 0 is chosen; refined on the 50 rows it
    # stays degenerate, so every start runs on the 50 rows and the fit escapes the trap.
    X, y, _, _ = _sine_problem()
    vy = float(y.var())
    with jax.enable_x64(False):
        init = _trapped_first_start(vy)
        hyper, info = kronvi.inputs.fit_gp_hyperparameters(
            jax.random.key(0), X, y, init=init, restarts="screened", screen_points=3
        )
    assert bool(np.all(info.screened.degenerate_starts)) and int(info.screened.chosen) == 0
    assert info.num_iterations.shape == (4,)  # the fallback ran every start on all rows
    assert not bool(info.degenerate) and float(hyper.noise_variance) < 0.05 * vy


@pytest.mark.parametrize("precision", ["native", "float64"])
def test_screened_falls_back_when_the_refined_winner_fails(precision, monkeypatch):
    # parkinsons fold 0: the winner's float32 Cholesky failed on all rows and the first start ended pinned at
    # the noise bound; every start then runs on all rows. Simulated by failing the refinement's winner, in
    # XLA ("native": `_run_starts`) and on rows held on the host ("float64": `_run_held`).
    X, y = _sine_rows()
    runner = "_run_starts" if precision == "native" else "_run_held"
    original, calls = getattr(_gp, runner), []

    def run_starts(rows, starts, **kw):
        get = original(rows, starts, **kw)
        calls.append((int(rows.m) if precision == "float64" else rows[0].shape[0], starts.noise_variance.shape[0]))
        if len(calls) == 1:  # the first start on all rows, the refinement of the screened winner, fails
            return lambda: get()[:1] + (get()[1].at[0].set(-jnp.inf),) + get()[2:]
        return get

    monkeypatch.setattr(_gp, runner, run_starts)
    with jax.enable_x64(False):
        kw = dict(num_points=50, min_noise_variance=1e-3, restarts="screened", screen_points=20)
        _, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(7), X, y, precision=precision, **kw)
    assert int(info.screened.chosen) == 0  # so the refinement is the first start's, from cold
    # the first start from cold on all rows (beside the screening), the screening, then the fallback: the
    # other starts on all rows, beside the first one's result
    assert calls == [(50, 1), (20, 4), (50, 3)] and info.num_iterations.shape == (4,)
    assert info.log_marginal_likelihoods[0] == -jnp.inf and int(info.chosen) != 0


# ---------------------------------------------------------------------------------------------------
# One answer whatever the working dtype and the device count


def _three_inputs(n=150, seed=5):
    """y = sin(2 x_0) + 0.5 x_1 + 0.05 noise (centred) with an irrelevant third input: its lengthscale has a
    flat likelihood, where rounding moves a start's stopping point the most."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=n)
    return X, y - y.mean()


def _gp_moments(hyper, X, y, Xt):
    """Exact GP predictive mean and variance of f at `Xt` (float64, dense)."""
    K = _dense_kernel(X, X, hyper.lengthscales, hyper.signal_variance) + float(hyper.noise_variance) * np.eye(
        len(y)
    )
    Ks = _dense_kernel(Xt, X, hyper.lengthscales, hyper.signal_variance)
    L = np.linalg.cholesky(K)
    V = scipy.linalg.solve_triangular(L, Ks.T, lower=True)
    return Ks @ scipy.linalg.cho_solve((L, True), y), float(hyper.signal_variance) - (V**2).sum(0)


def _assert_same_predictions(h1, h2, X, y):
    """The two hyperparameters' GP predictions agree: mean within 1e-3 sd of y, variance within 1%."""
    Xt = np.random.default_rng(11).normal(size=(200, X.shape[1]))
    m1, v1 = _gp_moments(h1, X, y, Xt)
    m2, v2 = _gp_moments(h2, X, y, Xt)
    assert np.max(np.abs(m1 - m2)) <= 1e-3 * np.std(y), np.max(np.abs(m1 - m2)) / np.std(y)
    assert np.max(np.abs(v1 - v2) / v1) <= 0.01, np.max(np.abs(v1 - v2) / v1)


@pytest.mark.parametrize("restarts", ["all", "screened"])
def test_one_gp_fit_whatever_the_working_dtype(restarts):
    """Float64 NumPy rows (what the pipeline passes) give one fit with JAX's x64 off (a float32 working
    dtype: the whole fit runs in float64, returned in float32) and on. float32 rows are fitted as their
    float64 values. With `precision="native"` the float32 fit stops elsewhere on the flat lengthscale of
    the irrelevant input (its GP mean 1e-2 sd away here) and this fails."""
    X, y = _three_inputs()
    kw = dict(num_points=120, restarts=restarts, screen_points=60)  # a subsample, and a screening
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    with jax.enable_x64(False):
        h32, i32 = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(2), X, y, **kw)
        g32, _ = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(2), X32, y32, **kw)
    with jax.enable_x64(True):
        h64, i64 = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(2), X, y, **kw)
        g64, _ = kronvi.inputs.fit_gp_hyperparameters(
            jax.random.key(2), X32.astype(np.float64), y32.astype(np.float64), **kw
        )
        assert h64.lengthscales.dtype == jnp.float64
    assert (
        h32.lengthscales.dtype == g32.lengthscales.dtype == i32.log_marginal_likelihoods.dtype == jnp.float32
    )
    assert i32.chosen.dtype == i32.num_iterations.dtype == jnp.int32 and int(i32.chosen) == int(i64.chosen)
    np.testing.assert_array_equal(i32.num_iterations, i64.num_iterations)
    for a, b, c, e in zip(h32, h64, g32, g64, strict=True):
        np.testing.assert_allclose(a, np.asarray(b, np.float32), rtol=1e-6)  # float32's rounding of one fit
        np.testing.assert_allclose(c, np.asarray(e, np.float32), rtol=1e-6)
    _assert_same_predictions(h32, h64, X, y)


def test_the_pipeline_fits_one_gp_whatever_the_working_dtype():
    """`prepare_fold` hands the GP step the float64 standardized rows: a float32 and a float64 working
    dtype get the same hyperparameters (to float32's rounding)."""
    X, y = _three_inputs(n=60)
    y = 3.0 * y + 10.0  # raw targets: offset and scale are the pipeline's
    with jax.enable_x64(False):
        h32 = kronvi.pipeline.prepare_fold(jax.random.key(4), X, y, dtype=jnp.float32).hyper
    with jax.enable_x64(True):
        h64 = kronvi.pipeline.prepare_fold(jax.random.key(4), X, y, dtype=jnp.float64).hyper
    assert h32.lengthscales.dtype == jnp.float32 and h64.lengthscales.dtype == jnp.float64
    for a, b in zip(h32, h64, strict=True):
        np.testing.assert_allclose(a, np.asarray(b, np.float32), rtol=1e-6)


_DEVICES = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np, kronvi
    X, y = (np.asarray(a, np.float64) for a in json.loads(sys.argv[1]))
    with jax.enable_x64(False):
        hyper, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(2), X, y, restarts="screened", precision=sys.argv[2])
    print(json.dumps([jax.device_count(), [np.asarray(a, np.float64).tolist() for a in hyper]]))
    """
)


def _yacht_rows():
    """The shipped yacht data's fold-0 training rows, standardized and centred in float64."""
    import pathlib

    X, y, mask = kronvi.load_uci(pathlib.Path(kronvi.__file__).parent / "data" / "yacht")
    X, y = X[mask[:, 0] == 0], y[mask[:, 0] == 0]
    return (X - X.mean(0)) / X.std(0), y - y.mean()


def test_gp_fit_is_the_same_on_one_and_four_host_devices():
    """`--xla_force_host_platform_device_count=4` (as a user may run `kronvi fit`) does not move the GP's
    optimum: nothing in the GP step is sharded, and its float64 arithmetic does not feel the other
    rounding of XLA's CPU kernels with four devices. With `precision="native"` this fails: on these rows
    float32's likelihood gradient differs by 4e-4 between the two, and the starts stop elsewhere
    (lengthscales 3.10 and 3.05). This process (one device) against a child with four, both with the
    suite's XLA flags."""
    X, y = _yacht_rows()
    env = subprocess_env("--xla_force_host_platform_device_count=4")
    out = run_python("-c", _DEVICES, json.dumps([X.tolist(), y.tolist()]), "float64", env=env)
    devices, leaves = json.loads(out.strip().splitlines()[-1])
    assert devices == 4 and jax.device_count() == 1
    four = kronvi.inputs.GPHyperparameters(*(np.asarray(a) for a in leaves))
    with jax.enable_x64(False):
        one, _ = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(2), X, y, restarts="screened")
    for a, b in zip(one, four, strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=1e-6)
    _assert_same_predictions(one, four, X, y)


def test_a_matern_kernel_on_every_path_of_the_gp_step():
    """`kernel="matern32"` reaches every likelihood of the GP step: the float64 host likelihood called from a
    float32 program (`_lml64`, under `jit` and `vmap`) equals the host's own value and gradient, and a fit inside
    `jit` (traced rows: that path), the default fit (rows on the host) and the float64 fit in XLA (`"native"`)
    reach the same likelihood (the traced fit from float32 rows within its 0.1-nat stopping rule), which is not
    the squared exponential's."""
    X, y = _data(n=40)
    theta = np.array([-0.3, 0.1, 0.5, 0.2, np.log(1e-2)])
    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    value_and_grad = jax.value_and_grad(lambda t: _gp._lml64(t, X32, y32, None, "matern32"))
    ts = jnp.asarray(np.stack([theta, theta - 0.2]), jnp.float32)
    vs, gs = jax.jit(jax.vmap(value_and_grad))(ts)
    for i in range(2):
        ref = _gp._host_lml(
            np.asarray(ts[i], np.float64), np.asarray(X32, np.float64), np.asarray(y32, np.float64), True,
            kernel="matern32",
        )  # fmt: skip
        np.testing.assert_allclose(vs[i], ref[0], rtol=1e-7)
        np.testing.assert_allclose(gs[i], ref[1], rtol=1e-6, atol=1e-6)
    kw = dict(num_starts=2, parallel_restarts=False)
    key = jax.random.key(0)
    with jax.enable_x64(True):
        host = kronvi.inputs.fit_gp_hyperparameters(key, X, y, kernel="matern32", **kw)
        xla = kronvi.inputs.fit_gp_hyperparameters(key, X, y, kernel="matern32", precision="native", **kw)
        rbf = kronvi.inputs.fit_gp_hyperparameters(key, X, y, **kw)
    traced = jax.jit(lambda X, y: kronvi.inputs.fit_gp_hyperparameters(key, X, y, kernel="matern32", **kw))(
        X32, y32
    )

    def chosen(fit):
        return float(np.asarray(fit.info.log_marginal_likelihoods)[int(fit.info.chosen)])

    best = chosen(host)
    np.testing.assert_allclose(chosen(xla), best, rtol=1e-9)
    np.testing.assert_allclose(chosen(traced), best, atol=0.1)  # float32 rows; starts end on gains < 0.1 nats
    assert abs(chosen(rbf) - best) > 0.1
