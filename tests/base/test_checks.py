"""Value checks run where the data live and never copy it to the host (``kronvi._base.checks``).

On an accelerator ``jax.transfer_guard_device_to_host("disallow")`` rejects every implicit copy; on CPU
there is no copy to guard, so the tests also force the checks' accelerator path and record every device
array that reaches the host (``bool``/``int``/``float``/``tolist``/``jax.device_get`` go through
``ArrayImpl._value``; ``np.asarray``/``np.array`` are wrapped). Only scalars (a few counts) may cross.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.array import ArrayImpl

import kronvi
from kronvi._base import checks

SCALARS = 8  # a validation may fetch a few counts (one per statistic), never the data


@pytest.fixture
def on_accelerator(monkeypatch):
    """Every JAX array takes the checks' accelerator path; returns the sizes of device arrays fetched."""
    monkeypatch.setattr(checks, "host_view", lambda x: x if isinstance(x, np.ndarray) else None)
    fetched = []
    value = ArrayImpl._value
    monkeypatch.setattr(ArrayImpl, "_value", property(lambda a: (fetched.append(a.size), value.fget(a))[1]))
    for name in ("asarray", "array"):
        original = getattr(np, name)

        def wrapped(a, *args, _original=original, **kwargs):
            if isinstance(a, jax.Array):
                fetched.append(a.size)
            return _original(a, *args, **kwargs)

        monkeypatch.setattr(np, name, wrapped)
    return fetched


def _problem(b=6, n=64, m=5):
    rng = np.random.default_rng(0)
    Phi = jax.device_put(jnp.asarray(rng.normal(size=(n, b)), jnp.float32))
    y = jax.device_put(jnp.asarray(rng.normal(size=n), jnp.float32))
    pw, pn = kronvi.model.gaussian_prior(b, 1.0, levels=m), kronvi.model.noise_prior(0.5, levels=3)
    return Phi, y, pw, pn


def test_entry_points_fetch_only_scalars(on_accelerator):
    Phi, y, pw, pn = _problem()
    with jax.transfer_guard_device_to_host("disallow"):
        stats = kronvi.stats.regression_stats(Phi, y, chunk_size=16)
        stats_x = kronvi.stats.regression_stats_from_inputs(lambda x: 2.0 * x, Phi, y)
        qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
        elbo = kronvi.model.regression_elbo(stats, qw, qn, pw, pn)
        qw, qn = kronvi.fitting.gaussian_start(stats, pw, pn)
        mean, var = kronvi.model.predict_regression(qw, qn, pw, pn, Phi)
        rotated, basis = kronvi.stats.eigenbasis(stats)
        Phi_rot = kronvi.stats.rotate_features(basis, Phi)
        sq = kronvi.fitting.heldout_sq_error(qw, pw, stats)
    assert on_accelerator, "no scalar was fetched: the checks did not run"
    assert max(on_accelerator) <= SCALARS, f"fetched arrays of sizes {sorted(set(on_accelerator))}"
    # the results are right (read after the guarded block; the reference is a float64 NumPy product, since
    # a GPU's default-precision float32 matmul is only good to about 1e-3)
    P = np.asarray(Phi, np.float64)
    np.testing.assert_allclose(stats.PhitPhi, P.T @ P, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats_x.PhitPhi, 4.0 * stats.PhitPhi, rtol=1e-5)
    assert np.isfinite(float(elbo)) and np.isfinite(float(sq)) and mean.shape == var.shape == (64,)
    assert Phi_rot.shape == Phi.shape and rotated.PhitPhi.shape == stats.PhitPhi.shape


def test_quantized_prediction_fetches_only_the_codes(on_accelerator):
    Phi, _, pw, pn = _problem()
    packed = kronvi.quantize.pack_codes(
        kronvi.quantize.sample_codes(jax.random.key(0), kronvi.model.MeanField.from_prior(pw), 4)
    )
    isamp = kronvi.quantize.integer_samples(packed, pw)
    on_accelerator.clear()
    with jax.transfer_guard_device_to_host("disallow"):
        kronvi.quantize.predict_from_codes(packed, pw, Phi)
        kronvi.quantize.predict_integer(isamp, Phi)
        kronvi.quantize.integer_error_bound(isamp, Phi)
    # the packed codes are unpacked on the host (explicitly); the features stay on the device
    assert max(on_accelerator) <= max(packed.size, SCALARS), sorted(set(on_accelerator))


@pytest.mark.parametrize("accelerator", [False, True])
def test_errors_name_the_argument_on_both_paths(accelerator, request):
    if accelerator:
        request.getfixturevalue("on_accelerator")
    Phi, y, pw, pn = _problem()
    qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
    with pytest.raises(ValueError, match=r"`Phi` contains 2 NaN or infinite"):
        kronvi.stats.regression_stats(Phi.at[3, 1].set(jnp.nan).at[5, 0].set(jnp.inf), y)
    with pytest.raises(ValueError, match=r"`y` contains 1 NaN or infinite"):
        kronvi.stats.regression_stats(Phi, y.at[0].set(jnp.nan))
    with pytest.raises(ValueError, match=r"`Phi_new` contains 1 NaN or infinite"):
        kronvi.model.predict_regression(qw, qn, pw, pn, Phi.at[2, 2].set(jnp.inf))
    with pytest.raises(ValueError, match=r"`variance` must be strictly positive, got min -1.0"):
        kronvi.model.noise_prior(jnp.asarray(-1.0))
    stats = kronvi.stats.regression_stats(Phi, y)
    with pytest.raises(
        ValueError, match=r"`stats` contains NaN or infinite values: `stats.PhitPhi` \(1 of 36"
    ):
        kronvi.fitting.fit_regression(stats._replace(PhitPhi=stats.PhitPhi.at[0, 1].set(jnp.nan)), pw, pn)
    with pytest.raises(ValueError, match=r"`stats.n` must be positive"):
        kronvi.fitting.fit_regression(stats._replace(n=jnp.zeros_like(stats.n)), pw, pn)


def test_closed_over_data_is_checked_inside_jit(on_accelerator):
    """Inside a caller's ``jit`` closed-over arrays are concrete: the reduction runs now, not in the trace."""
    Phi, y, pw, pn = _problem()
    qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
    bad = Phi.at[1, 1].set(jnp.nan)
    with pytest.raises(ValueError, match=r"`Phi_new` contains 1 NaN"):
        jax.jit(lambda s: kronvi.model.predict_regression(qw, qn, pw, pn, bad)[0] * s)(2.0)
    stats = kronvi.stats.regression_stats(Phi, y)
    mean = jax.jit(lambda m: kronvi.gaussian.gaussian_mf_elbo(stats, m, 0.5, prior_scale=1.0))(
        kronvi.gaussian.GaussianMeanField(jnp.zeros(6), jnp.zeros(6))
    )
    assert np.isfinite(float(mean))
    # traced arguments are not checked (the values are unknown): no error, NaN flows through
    out = jax.jit(lambda P: kronvi.model.predict_regression(qw, qn, pw, pn, P)[0])(bad)
    assert np.isnan(np.asarray(out)[1])


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.array(3), jnp.array(3)])
def test_check_int_accepts_integers_of_every_kind(value):
    assert checks.check_int(value, "k", 1) == 3 and type(checks.check_int(value, "k", 1)) is int


@pytest.mark.parametrize("value", [2.7, 3.0, np.float64(3.0), True, "3", None, np.array([3]), np.array(3.0)])
def test_check_int_refuses_everything_else(value):
    with pytest.raises(ValueError, match=r"^`k` must be an int >= 1, got "):
        checks.check_int(value, "k", 1)


def _fit_calls():
    """Every public fit with an integer option, as a function of a value for that option."""
    from kronvi.bnn import bnn_stats, fit_bnn

    Phi, y, pw, pn = _problem(b=2, n=10)
    stats = kronvi.stats.regression_stats(Phi, y)
    folds = jax.tree.map(lambda a: a[None], stats)
    q0 = kronvi.mixtures.mixture_from_mean_field(jax.random.key(0), kronvi.model.MeanField.from_prior(pw), 2)
    qn0 = kronvi.model.MeanField.from_prior(pn)
    bstats, bpw = bnn_stats(Phi, y, (2, 1, 1)), kronvi.model.gaussian_prior(3, 1.0, levels=3)
    return {
        "fit_regression": lambda v: kronvi.fitting.fit_regression(stats, pw, pn, max_iter=v),
        "fit_regression lbfgs": lambda v: kronvi.fitting.fit_regression(
            stats, pw, pn, method="lbfgs", max_iter=v
        ),
        "fit_regression anneal": lambda v: kronvi.fitting.fit_regression(stats, pw, pn, anneal_sweeps=v),
        "cv_scores": lambda v: kronvi.fitting.cv_scores(folds, folds, pw, pn, max_iter=v),
        "fit_mixture_bound": lambda v: kronvi.mixtures.fit_mixture_bound(
            stats, pw, pn, init=(q0, qn0), max_iter=v
        ),
        "fit_bnn": lambda v: fit_bnn(bstats, bpw, pn, method="cavi", max_iter=v),
        "fit_bnn num_starts": lambda v: fit_bnn(bstats, bpw, pn, num_starts=v),
        "gaussian_start": lambda v: kronvi.fitting.gaussian_start(stats, pw, pn, max_iter=v),
        "fit_gaussian_mf": lambda v: kronvi.gaussian.fit_gaussian_mf(
            stats, prior_scale=1.0, noise_variance=0.5, max_iter=v
        ),
    }


_FITS = ["fit_regression", "fit_regression lbfgs", "fit_regression anneal", "cv_scores", "fit_mixture_bound"]
_FITS += ["gaussian_start", "fit_gaussian_mf"]


@pytest.mark.parametrize("call", ["gaussian_start", "fit_gaussian_mf", "fit_regression"])
def test_numpy_integer_counts_are_accepted_everywhere(call):
    """One integer rule: `gaussian_start(max_iter=np.int64(3))` raised where `fit_regression` took it."""
    _fit_calls()[call](np.int64(3))


@pytest.mark.parametrize("call", _FITS + ["fit_bnn", "fit_bnn num_starts"])
@pytest.mark.parametrize("bad", [2.7, -5])
def test_fits_refuse_non_integral_and_negative_counts(call, bad):
    """`fit_regression(max_iter=2.7)` ran 2 sweeps and `max_iter=-5` raised JAX's broadcast error."""
    with pytest.raises(
        ValueError, match=r"^`(max_iter|anneal_sweeps|num_starts)` must be an int >= \d, got "
    ):
        _fit_calls()[call](bad)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: kronvi.stats.regression_stats(np.full((5, 2), "a"), np.ones(5)),
            "`Phi` must hold real numbers",
        ),
        (
            lambda: kronvi.stats.regression_stats(np.ones((5, 2)), np.array(["x"] * 5)),
            "`y` must hold real numbers",
        ),
        (
            lambda: kronvi.inputs.fit_standardizer(np.ones((3, 2)) * 1j),
            "`X` must hold real numbers, got dtype complex",
        ),
        (
            lambda: kronvi.inputs.fit_standardizer(np.array([[None, 1.0]])),
            "`X` must hold real numbers, got dtype object",
        ),
        (
            lambda: kronvi.inputs.fit_standardizer([[1.0, 2.0], [3.0]]),
            "`X` must be a rectangular array of numbers",
        ),
        (lambda: kronvi.model.gaussian_prior(2, "wide"), "`scale` must hold real numbers"),
    ],
)
def test_non_numeric_arrays_get_a_named_error(call, match):
    """Strings, objects, complex numbers and ragged lists reached `jnp.asarray` ("Error interpreting
    argument to ... as an abstract array") or NumPy."""
    with pytest.raises(ValueError, match=match):
        call()


def test_as_working_array_names_overflow_of_the_working_dtype_and_refuses_complex():
    X = np.ones((10, 3))
    X[:6, 1], X[6:, 2] = 1e300, -2e300
    with pytest.raises(ValueError, match=r"^`X` has 10 finite value\(s\) beyond the range of float32 "
                       r"\(largest magnitude 2e\+300; float32 holds up to 3\.403e\+38\)"):  # fmt: skip
        checks.as_working_array(X, "X", jnp.float32)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"^`X` contains 1 NaN or infinite value\(s\)$"):
        checks.as_working_array(X, "X", jnp.float32)
    with pytest.raises(ValueError, match="^`X` must hold real numbers, got dtype complex128"):
        checks.as_working_array(np.ones((2, 2)) + 1j, "X", jnp.float32)
    with pytest.raises(TypeError, match="floating dtype"):
        checks.as_working_array(np.ones(2), "X", jnp.int32)
    out = checks.as_working_array(np.array([[1, 2]]), "X", jnp.float32)
    assert out.dtype == jnp.float32 and out.tolist() == [[1.0, 2.0]]
    big = np.full((2, 2), 1e30)  # large but inside float32's range: kept
    np.testing.assert_allclose(checks.as_working_array(big, "X", jnp.float32), big, rtol=1e-7)
    with jax.enable_x64(True):
        X[0, 0] = 1.0
        assert checks.as_working_array(X, "X", jnp.float64).dtype == jnp.float64
        with pytest.raises(ValueError, match="beyond the range of float32"):
            checks.as_working_array(jnp.asarray(X), "X", jnp.float32)  # a float64 device array


def test_as_working_array_skips_value_checks_under_jit():
    f = jax.jit(lambda x: checks.as_working_array(x, "X", jnp.float32))
    assert f(jnp.ones(3)).dtype == jnp.float32


def test_errors_name_puts_the_users_argument_first():
    with pytest.raises(
        ValueError, match=r"^`config.width`=1e\+300 is out of range for this data: `scale` contains 1 NaN"
    ):
        with checks.errors_name("config.width", 1e300):
            kronvi.model.gaussian_prior(3, jnp.inf)
    with pytest.raises(ValueError, match=r"^`noise_span`=2 is out of range for this data: boom$"):
        with checks.errors_name("noise_span", 2):
            raise FloatingPointError("boom")
    with pytest.raises(TypeError, match="untouched"):  # other errors pass through as they are
        with checks.errors_name("x", 1):
            raise TypeError("untouched")
    with checks.errors_name("x", 1):
        pass


def test_check_ints_checks_every_field_in_order():
    checks.check_ints({"config.a": (3, 2), "config.b": (np.int64(0), 0), "config.c": (5, None)})
    with pytest.raises(ValueError, match=r"^`config.b` must be an int >= 1, got 0$"):
        checks.check_ints({"config.a": (3, 2), "config.b": (0, 1), "config.c": (2.5, 1)})
    with pytest.raises(ValueError, match=r"^`config.a` must be an int >= 2, got 2.7$"):
        checks.check_ints({"config.a": (2.7, 2)})


def test_check_training_rows_returns_float64_and_names_each_problem():
    X, y = checks.check_training_rows(np.ones((3, 2), np.float32), [1, 2, 3])
    assert X.dtype == y.dtype == np.float64 and X.shape == (3, 2) and y.tolist() == [1.0, 2.0, 3.0]
    bad = [
        ((np.ones((3, 2)), np.array(["a", "b", "c"])), "`y` must hold real numbers"),
        ((np.ones(3), np.ones(3)), r"`X` must be 2-D \(num_points, num_inputs\)"),
        ((np.ones((3, 2)), np.ones((3, 1))), r"`y` must be 1-D"),
        ((np.ones((3, 2)), np.ones(4)), "`X` has 3 rows but `y` has 4"),
        ((np.ones((0, 2)), np.ones(0)), r"`X` is empty \(shape \(0, 2\)\)"),
        ((np.ones((3, 0)), np.ones(3)), r"`X` is empty \(shape \(3, 0\)\)"),
        ((np.array([[1.0, np.nan], [np.inf, 1.0]]), np.ones(2)), r"`X` contains 2 NaN or infinite"),
        ((np.ones((2, 1)), np.array([1.0, np.nan])), r"`y` contains 1 NaN or infinite"),
    ]
    for args, match in bad:
        with pytest.raises(ValueError, match=match):
            checks.check_training_rows(*args)


def test_check_finite_arrays_names_the_first_bad_array_and_skips_tracers():
    checks.check_finite_arrays({"a": jnp.ones(3), "b": np.zeros((2, 2)), "empty": jnp.zeros(0)})
    checks.check_finite_arrays({})
    with pytest.raises(ValueError, match=r"^`b` contains 2 NaN or infinite value\(s\)$"):
        checks.check_finite_arrays(
            {"a": jnp.ones(3), "b": jnp.array([jnp.nan, jnp.inf]), "c": np.array([np.nan])}
        )
    jax.jit(lambda x: checks.check_finite_arrays({"x": x}) or x)(jnp.array([jnp.nan]))  # traced: skipped
