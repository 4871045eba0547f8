"""The precision policy (``kronvi._base.precision``): every matrix product of the public entry points is
traced with ``Precision.HIGHEST``, unless the caller has set ``jax.default_matmul_precision``; then the
caller's choice applies (the opt-in TF32 mode) and ``jit`` caches keep the two modes apart.

The checks read the jaxprs, so they run on CPU, where every precision computes the same float32 products.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr

import kronvi
from kronvi._base.precision import matmul_precision

HIGHEST = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
TF32 = (lax.Precision.HIGH, lax.Precision.HIGH)  # what jax.default_matmul_precision("tensorfloat32") records


def _sub_jaxprs(value):
    if isinstance(value, ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, Jaxpr):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _sub_jaxprs(v)


def dot_precisions(closed):
    """The ``precision`` of every floating-point ``dot_general`` in a jaxpr and the jaxprs nested in it
    (jit, scan, while, cond, custom_jvp/vjp bodies); integer products are exact at any precision."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general" and jnp.issubdtype(eqn.invars[0].aval.dtype, jnp.inexact):
                found.append(eqn.params["precision"])
            for value in eqn.params.values():
                for sub in _sub_jaxprs(value):
                    walk(sub)

    walk(closed.jaxpr)
    return found


def _problem(b=6, n=40, m=5):
    rng = np.random.default_rng(0)
    Phi = jnp.asarray(rng.normal(size=(n, b)), jnp.float32)
    y = jnp.asarray(rng.normal(size=n), jnp.float32)
    stats = kronvi.stats.regression_stats(Phi, y)
    pw, pn = kronvi.model.gaussian_prior(b, 1.0, levels=m), kronvi.model.noise_prior(0.5, levels=3)
    qw, qn = kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn)
    return Phi, y, stats, pw, pn, qw, qn


def _entry_points():
    """``name -> (function, args)``: the public entry points that multiply matrices, on tiny inputs."""
    Phi, y, stats, pw, pn, qw, qn = _problem()
    b = Phi.shape[1]
    X = Phi[:, :2]
    rff = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(2), b // 2)
    _, basis = kronvi.stats.eigenbasis(stats)
    codes = kronvi.quantize.sample_codes(jax.random.key(1), qw, 4)
    packed = kronvi.quantize.pack_codes(codes)
    isamp = kronvi.quantize.integer_samples(packed, pw)
    mix = kronvi.mixtures.mixture_from_mean_field(jax.random.key(2), qw, 2)
    mix_pw = kronvi.mixtures.MixturePrior(pw.values, jnp.stack([pw.log_probs, pw.log_probs]), jnp.zeros(2))
    gp = kronvi.inputs.GPHyperparameters(jnp.ones(2), jnp.asarray(1.0), jnp.asarray(0.1))
    gmf = kronvi.gaussian.GaussianMeanField(jnp.zeros(b), jnp.zeros(b))
    elbo = lambda lw: kronvi.model.regression_elbo(stats, kronvi.model.MeanField(lw), qn, pw, pn)  # noqa: E731
    return {
        "regression_stats": (kronvi.stats.regression_stats, (Phi, y)),
        "regression_stats_from_inputs": (
            lambda X_, y_: kronvi.stats.regression_stats_from_inputs(
                functools.partial(kronvi.inputs.rff_features, rff), X_, y_, chunk_size=16
            ),
            (X, y),
        ),
        "kfold_stats": (lambda P, t: kronvi.stats.kfold_stats(P, t, np.arange(Phi.shape[0]) % 3), (Phi, y)),
        "rff_features": (kronvi.inputs.rff_features, (rff, X)),
        "eigenbasis": (kronvi.stats.eigenbasis, (stats,)),
        "rotate_features": (kronvi.stats.rotate_features, (basis, Phi)),
        "regression_elbo": (elbo, (qw.logits,)),
        "grad regression_elbo": (jax.grad(elbo), (qw.logits,)),
        "predict_regression": (kronvi.model.predict_regression, (qw, qn, pw, pn, Phi)),
        "predictive_log_density": (kronvi.model.predictive_log_density, (qw, qn, pw, pn, Phi[:3], y[:3])),
        "fit_regression cavi": (
            lambda s: kronvi.fitting.fit_regression(s, pw, pn, max_iter=2),
            (stats,),
        ),
        "fit_regression lbfgs": (
            lambda s: kronvi.fitting.fit_regression(s, pw, pn, method="optax-lbfgs", max_iter=2),
            (stats,),
        ),
        "gaussian_start": (kronvi.fitting.gaussian_start, (stats, pw, pn)),
        "heldout_sq_error": (kronvi.fitting.heldout_sq_error, (qw, pw, stats)),
        "blr_posterior": (lambda s: kronvi.gaussian.blr_posterior(s, 1.0, 0.5), (stats,)),
        "blr_log_evidence": (lambda s: kronvi.gaussian.blr_log_evidence(s, 1.0, 0.5), (stats,)),
        "predict_blr": (
            lambda s, P: kronvi.gaussian.predict_blr(*kronvi.gaussian.blr_posterior(s, 1.0, 0.5), 0.5, P),
            (stats, Phi),
        ),
        "grad gaussian_mf_elbo": (
            jax.grad(
                lambda m: kronvi.gaussian.gaussian_mf_elbo(stats, gmf._replace(mean=m), 0.5, prior_scale=1.0)
            ),
            (gmf.mean,),
        ),
        "predict_gaussian_mf": (lambda q, P: kronvi.gaussian.predict_gaussian_mf(q, 0.5, P), (gmf, Phi)),
        "grad mixture_elbo_bound": (
            jax.grad(
                lambda lg: kronvi.mixtures.mixture_elbo_bound(
                    stats, mix._replace(logits=lg), qn, mix.log_marginals, mix_pw, pn
                )
            ),
            (mix.logits,),
        ),
        "predict_mixture": (kronvi.mixtures.predict_mixture, (mix, qn, pw, pn, Phi)),
        "predict_from_codes": (lambda P: kronvi.quantize.predict_from_codes(packed, pw, P), (Phi,)),
        "integer_error_bound": (lambda P: kronvi.quantize.integer_error_bound(isamp, P), (Phi,)),
        "grad gp_log_marginal_likelihood": (
            jax.grad(lambda h: kronvi.inputs.gp_log_marginal_likelihood(h, X, y)),
            (gp,),
        ),
    }


ENTRY_POINTS = [
    "regression_stats",
    "regression_stats_from_inputs",
    "kfold_stats",
    "rff_features",
    "eigenbasis",
    "rotate_features",
    "regression_elbo",
    "grad regression_elbo",
    "predict_regression",
    "fit_regression cavi",
    "fit_regression lbfgs",
    "gaussian_start",
    "heldout_sq_error",
    "predict_blr",
    "grad gaussian_mf_elbo",
    "predict_gaussian_mf",
    "grad mixture_elbo_bound",
    "predict_mixture",
    "predict_from_codes",
    "integer_error_bound",
    "grad gp_log_marginal_likelihood",
]


@pytest.fixture(scope="module")
def entry_points():
    with jax.enable_x64(False):
        yield _entry_points()


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_matrix_product_is_full_precision_by_default(entry_points, name):
    fn, args = entry_points[name]
    with jax.enable_x64(False):
        precisions = dot_precisions(jax.make_jaxpr(fn)(*args))
    assert precisions, f"{name}: no matrix product traced (the test would check nothing)"
    bad = [p for p in precisions if p != HIGHEST]
    assert not bad, f"{name}: {len(bad)} of {len(precisions)} dot_general(s) not at HIGHEST: {set(bad)}"


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_fast_mode_is_the_callers_choice(entry_points, name):
    fn, args = entry_points[name]
    with jax.enable_x64(False):
        jax.make_jaxpr(fn)(*args)  # trace (and cache) in the default mode first
        with jax.default_matmul_precision("tensorfloat32"):
            precisions = dot_precisions(jax.make_jaxpr(fn)(*args))
    # kronvi's own products follow the caller; JAX's linear-algebra derivatives (eigh, Cholesky) keep
    # their explicit HIGHEST.
    assert TF32 in precisions, f"{name}: fast mode not applied: {set(precisions)}"
    assert set(precisions) <= {TF32, HIGHEST}


def test_matmul_precision_reads_the_setting_in_effect():
    assert matmul_precision() == lax.Precision.HIGHEST
    with jax.default_matmul_precision("tensorfloat32"):
        assert matmul_precision() is None
        with jax.default_matmul_precision("highest"):
            assert matmul_precision() is None  # the caller's own setting, HIGHEST here
    assert matmul_precision() == lax.Precision.HIGHEST


def test_compiled_functions_do_not_mix_modes():
    """A jitted kronvi function called in both modes compiles once per mode and each call gets its own."""
    Phi, y, *_ = _problem(b=5, n=33)
    jitted = jax.jit(kronvi.stats.regression_stats)
    with jax.enable_x64(False):
        ref = jitted(Phi, y)
        assert jitted._cache_size() == 1
        with jax.default_matmul_precision("tensorfloat32"):
            fast = jitted(Phi, y)
            assert jitted._cache_size() == 2
            assert TF32 in set(dot_precisions(jax.make_jaxpr(jitted)(Phi, y)))
        jitted(Phi, y)
        assert jitted._cache_size() == 2
        assert set(dot_precisions(jax.make_jaxpr(jitted)(Phi, y))) == {HIGHEST}
    if jax.default_backend() == "cpu":  # every precision computes exact float32 products on CPU
        np.testing.assert_array_equal(np.asarray(ref.PhitPhi), np.asarray(fast.PhitPhi))
    else:  # TF32 rounds the inputs to 10-bit mantissas
        np.testing.assert_allclose(np.asarray(ref.PhitPhi), np.asarray(fast.PhitPhi), rtol=1e-2, atol=1e-2)
