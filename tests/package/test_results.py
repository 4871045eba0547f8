"""Every fit returns a named result whose `info` has the common fields; the results stay pytrees under
`jit` and `vmap`, with the `optimizer` name static."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import kronvi
from kronvi.bnn import bnn_stats, fit_bnn
from kronvi.logistic import fit_logistic

COMMON = ("elbo", "final_elbo", "num_iter", "converged", "optimizer")


def _data(seed, n=24, b=3):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b))
    y = Phi @ rng.normal(size=b) + 0.3 * rng.normal(size=n)
    return jnp.asarray(Phi), jnp.asarray(y)


def _stats(Phi, y):
    return kronvi.stats.regression_stats(Phi, y)


def _priors(b=3):
    return kronvi.model.gaussian_prior(b, 1.0, levels=5), kronvi.model.noise_prior(0.1, levels=5)


def _mixture_start(dtype):
    pn = _priors()[1]
    return kronvi.mixtures.Mixture(
        jnp.zeros((2, 3, 5), dtype), jnp.zeros(2, dtype)
    ), kronvi.model.MeanField.from_prior(pn)


# name: (fit(Phi, y) -> result, result type, optimizer, its max_iter / num_steps: the trace has one more entry)
FITS = {
    "fit_regression cavi": (
        lambda Phi, y: kronvi.fitting.fit_regression(_stats(Phi, y), *_priors(), max_iter=30),
        kronvi.fitting.RegressionFit,
        "cavi",
        30,
    ),
    "fit_regression lbfgs": (
        lambda Phi, y: kronvi.fitting.fit_regression(_stats(Phi, y), *_priors(), method="lbfgs", max_iter=30),
        kronvi.fitting.RegressionFit,
        "lbfgs",
        30,
    ),
    "fit_regression optax-lbfgs": (
        lambda Phi, y: kronvi.fitting.fit_regression(
            _stats(Phi, y), *_priors(), method="optax-lbfgs", max_iter=30
        ),
        kronvi.fitting.RegressionFit,
        "optax-lbfgs",
        30,
    ),
    "fit_mixture_bound": (
        lambda Phi, y: kronvi.mixtures.fit_mixture_bound(
            _stats(Phi, y), *_priors(), init=_mixture_start(Phi.dtype), max_iter=4
        ),
        kronvi.mixtures.MixtureFit,
        "lbfgs",
        4,
    ),
    "fit_mixture_sgd": (
        lambda Phi, y: kronvi.mixtures.fit_mixture_sgd(
            jax.random.key(0),
            _stats(Phi, y),
            *_priors(),
            init=_mixture_start(Phi.dtype),
            optimizer=optax.adam(0.1),
            num_steps=3,
            num_samples=4,
        ),
        kronvi.mixtures.MixtureFit,
        "sgd",
        3,
    ),
    "fit_logistic": (
        lambda Phi, y: fit_logistic(Phi, (y > 0).astype(Phi.dtype), _priors()[0], max_iter=4),
        kronvi.logistic.LogisticFit,
        "optax-lbfgs",
        4,
    ),
    "fit_logistic lbfgs": (
        lambda Phi, y: fit_logistic(Phi, (y > 0).astype(Phi.dtype), _priors()[0], method="lbfgs", max_iter=4),
        kronvi.logistic.LogisticFit,
        "lbfgs",
        4,
    ),
    "fit_logistic sgd": (
        lambda Phi, y: fit_logistic(
            Phi,
            (y > 0).astype(Phi.dtype),
            _priors()[0],
            method="sgd",
            key=jax.random.key(0),
            num_steps=3,
            batch_size=8,
        ),
        kronvi.logistic.LogisticFit,
        "sgd",
        3,
    ),
    "fit_gaussian_mf": (
        lambda Phi, y: kronvi.gaussian.fit_gaussian_mf(
            _stats(Phi, y), prior_scale=1.0, noise_variance=0.5, max_iter=4
        ),
        kronvi.gaussian.GaussianFit,
        "cavi",
        4,
    ),
    "fit_gaussian_reparam": (
        lambda Phi, y: kronvi.gaussian.fit_gaussian_reparam(
            jax.random.key(0),
            Phi,
            y,
            init=(kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3)), 1.0),
            prior_scale=1.0,
            optimizer=optax.adam(0.1),
            num_steps=3,
            batch_size=5,
        ),
        kronvi.gaussian.GaussianFit,
        "sgd",
        3,
    ),
    "fit_elrg": (
        lambda Phi, y: kronvi.gaussian.fit_elrg(
            jax.random.key(0), _stats(Phi, y), 1.0, 0.5, rank=1, max_iter=4
        ),
        kronvi.gaussian.ELRGFit,
        "optax-lbfgs",
        4,
    ),
    "fit_elrg local-reparam": (
        lambda Phi, y: kronvi.gaussian.fit_elrg(
            jax.random.key(0),
            None,
            1.0,
            0.5,
            rank=1,
            objective="local-reparam",
            data=(Phi, y),
            optimizer=optax.adam(0.1),
            num_steps=3,
            batch_size=5,
        ),
        kronvi.gaussian.ELRGFit,
        "sgd",
        3,
    ),
}
# quadratic networks: the layer sizes ride on the statistics' shapes, concrete under `jit` too
FITS["fit_bnn"] = (
    lambda Phi, y: fit_bnn(bnn_stats(Phi, y, (3, 2, 1)), kronvi.model.gaussian_prior(8, 1.0, levels=3), _priors()[1],
                           max_iter=4),
    kronvi.bnn.BNNFit, "cavi", 4,
)  # fmt: skip


def _check(result, kind, optimizer, steps):
    assert type(result) is kind
    info = result.info
    assert isinstance(info, kronvi.FitInfo) and info._fields[:5] == COMMON
    assert info.optimizer == optimizer
    assert info.elbo.shape[-1] == steps + 1
    assert np.all(np.asarray(info.num_iter) <= steps)
    final = np.take_along_axis(np.asarray(info.elbo), np.asarray(info.num_iter)[..., None], axis=-1)[..., 0]
    np.testing.assert_array_equal(np.asarray(info.final_elbo), final)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(info))  # the name is no leaf


@pytest.mark.parametrize("name", sorted(FITS))
def test_named_results_and_jit_of_vmap_over_folds_matches_each_fold(name):
    fit, kind, optimizer, steps = FITS[name]
    with jax.enable_x64(True):
        folds = [_data(k) for k in range(2)]
        batched = jax.jit(jax.vmap(fit))(*jax.tree.map(lambda *a: jnp.stack(a), *folds))
        _check(batched, kind, optimizer, steps)
        assert batched.info.final_elbo.shape == (2,)
        for k, data in enumerate(folds):
            one = fit(*data)
            _check(one, kind, optimizer, steps)
            assert float(one.info.final_elbo) == float(one.info.elbo[int(one.info.num_iter)])
            for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(one), strict=True):
                np.testing.assert_allclose(a[k], b, rtol=1e-6, atol=1e-8)


def test_fit_info_is_a_pytree_with_a_static_optimizer():
    # the "fit_regression lbfgs" fit above (x64, max_iter=30): its compiled program serves
    with jax.enable_x64(True):
        info = FITS["fit_regression lbfgs"][0](*_data(0)).info
        leaves, tree = jax.tree.flatten(info)
        # elbo, final_elbo, num_iter, converged, grad_norm, iterate_elbo; not the name
        assert len(leaves) == 6 and "lbfgs" not in leaves
        assert jax.tree.unflatten(tree, leaves).optimizer == "lbfgs"
        doubled = jax.tree.map(lambda a: 2 * a, info)
        assert doubled.optimizer == "lbfgs" and float(doubled.final_elbo) == 2 * float(info.final_elbo)
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(info)[0]]
        assert paths[:2] == [".elbo", ".final_elbo"]


def test_other_results_have_named_fields():
    # fit_features and the pipeline: host-side loops, named all the same
    X, y = _data(0, n=30)
    fmap = kronvi.feature_learning.rff_lengthscale_map(jax.random.key(0), 3, 4)
    with jax.enable_x64(False):
        X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
        pw, pn = kronvi.model.gaussian_prior(8, 1.0, levels=5), kronvi.model.noise_prior(0.1)
        fit = kronvi.feature_learning.fit_features(
            jnp.zeros(3), X32, y32, pw, pn, feature_fn=fmap, max_iter=1, param_iter=2
        )
    assert type(fit) is kronvi.feature_learning.FeatureFit and fit._fields == (
        "params",
        "q_w",
        "q_noise",
        "info",
    )
    assert fit.info._fields[:5] == COMMON and fit.info.optimizer == "optax-lbfgs"
    assert fit.info.final_elbo == fit.info.elbo[fit.info.num_iter]
    assert kronvi.pipeline.DirectFit._fields == ("model", "timings", "info")
    assert kronvi.cv.FoldRun._fields == ("model", "result")
    assert set(COMMON) <= set(dir(kronvi.pipeline.DirectInfo))


def test_mixture_init_in_the_old_order_warns_and_still_works():
    # the shapes, dtype and max_iter of the "fit_mixture_bound" fit above: its compiled program serves
    with jax.enable_x64(True):
        stats = _stats(*_data(0))
        pw, pn = _priors()
        q, q_n = _mixture_start(jnp.float64)
        new = kronvi.mixtures.fit_mixture_bound(stats, pw, pn, init=(q, q_n, q.log_marginals), max_iter=4)
        with pytest.warns(DeprecationWarning, match=r"\(q, q_noise, log_center\)"):
            old = kronvi.mixtures.fit_mixture_bound(stats, pw, pn, init=(q, q.log_marginals, q_n), max_iter=4)
    np.testing.assert_array_equal(old.log_center, new.log_center)


def test_the_gp_fit_is_a_named_result():
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = np.sin(X[:, 0])
    fit = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), X, y, num_starts=1, max_iter=5)
    assert isinstance(fit, kronvi.inputs.GPFit) and fit._fields == ("hyper", "info")
    hyper, info = fit  # unpacks as the pair it was
    assert isinstance(hyper, kronvi.inputs.GPHyperparameters) and isinstance(info, kronvi.inputs.GPFitInfo)
