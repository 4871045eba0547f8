"""The vocabulary of docs/design.md ("Vocabulary"), checked on the signature of every public function, and
the old spellings that keep working for one release."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import kronvi
from kronvi._solvers.info import OPTIMIZERS

P = inspect.Parameter
MODULES = [
    kronvi,
    kronvi.inputs,
    kronvi.stats,
    kronvi.model,
    kronvi.fitting,
    kronvi.files,
    kronvi.bnn,
    kronvi.feature_learning,
    kronvi.gaussian,
    kronvi.logistic,
    kronvi.mixtures,
    kronvi.pipeline,
    kronvi.quantize,
]


def _public_functions():
    found = {}
    for mod in MODULES:
        for name in dir(mod):
            obj = getattr(mod, name)
            if name.startswith("_") or not inspect.isfunction(obj) or not obj.__module__.startswith("kronvi"):
                continue
            found.setdefault(obj.__name__, obj)
    return found


FUNCTIONS = _public_functions()
FITS = {name: fn for name, fn in FUNCTIONS.items() if name.startswith("fit_")}
SIGNATURES = {name: inspect.signature(fn) for name, fn in FUNCTIONS.items()}

# Positional ranks: key (or the draws that replace it), data, variational parameters, priors, new data.
DATA = {"stats", "train_stats", "test_stats", "cv_stats", "Phi", "X", "y", "Phi_batch", "y_batch", "rotated"}
VARIATIONAL = {"q", "q_w", "q_noise", "state", "log_center", "logits_w", "logits_n", "idx_w", "idx_noise"}
PRIORS = {"prior_w", "prior_noise", "prior", "prior_scale", "noise_variance"}
NEW_DATA = {"Phi_new", "X_new", "y_new"}
HELD_OUT = ("predict", "heldout_")  # evaluate a fitted posterior: the new data come last


def _rank(fn_name, positional, i):
    name = positional[i]
    if name == "key" or (fn_name.endswith("_from_draws") and name in ("idx_w", "idx_noise")):
        return 0
    if name == "params" and positional[i + 1 : i + 2] == ["X"]:  # a feature map's (params, X, y)
        return 1
    if name in NEW_DATA or (fn_name.startswith(HELD_OUT) and name == "stats"):
        return 4
    if name in DATA:
        return 1
    if name in VARIATIONAL:
        return 2
    if name in PRIORS:
        return 3
    return None


def test_the_checks_see_every_family():
    for name in ["fit_regression", "fit_bnn", "fit_logistic", "fit_mixture_bound", "fit_mixture_sgd",
                 "fit_gaussian_mf", "fit_gaussian_reparam", "fit_elrg", "fit_features", "fit_features_eigen",
                 "fit_direct", "fit_prepared", "regression_elbo", "mixture_elbo_estimate", "mixture_sgd_step",
                 "logistic_elbo_bound", "predict_regression"]:  # fmt: skip
        assert name in FUNCTIONS


@pytest.mark.parametrize("name", sorted(n for n, s in SIGNATURES.items() if "key" in s.parameters))
def test_key_is_first_or_an_optional_keyword(name):
    sig = SIGNATURES[name]
    key = sig.parameters["key"]
    first = next(iter(sig.parameters))
    if key.kind is P.KEYWORD_ONLY:
        assert key.default is None, f"{name}: a keyword `key` is optional (key=None)"
    else:
        assert first == "key" and key.default is P.empty, f"{name}: a required `key` comes first"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_key_then_data_then_variational_parameters_then_priors(name):
    positional = [
        p.name
        for p in SIGNATURES[name].parameters.values()
        if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
    ]
    ranked = [(a, r) for i, a in enumerate(positional) if (r := _rank(name, positional, i)) is not None]
    ranks = [r for _, r in ranked]
    assert ranks == sorted(ranks), f"{name}{SIGNATURES[name]}: positional order {ranked}"


def test_the_order_rules_cover_the_objectives():
    expected = {
        "regression_elbo": ["stats", "q_w", "q_noise", "prior_w", "prior_noise"],
        "bnn_elbo": ["stats", "q_w", "q_noise", "prior_w", "prior_noise"],
        "mixture_elbo_bound": ["stats", "q", "q_noise", "log_center", "prior_w", "prior_noise"],
        "mixture_elbo_estimate": ["key", "stats", "q", "q_noise", "prior_w", "prior_noise"],
        "mixture_sgd_step": ["key", "stats", "state", "prior_w", "prior_noise"],
        "gaussian_reparam_step": ["key", "Phi_batch", "y_batch", "state"],
        "logistic_elbo_bound": ["Phi", "y", "q_w", "prior_w"],
        "fit_regression": ["stats", "prior_w", "prior_noise"],
        "fit_mixture_sgd": ["key", "stats", "prior_w", "prior_noise"],
    }
    for name, order in expected.items():
        positional = [
            p.name for p in SIGNATURES[name].parameters.values() if p.kind is P.POSITIONAL_OR_KEYWORD
        ]
        assert positional == order, name


OLD_WORDS = {"q_init", "max_rounds", "rounds", "num_restarts", "backend"}


@pytest.mark.parametrize("name", sorted(FITS))
def test_fits_speak_one_vocabulary(name):
    params = SIGNATURES[name].parameters
    assert not OLD_WORDS & set(params), f"{name}: {OLD_WORDS & set(params)}"
    for word in ("init", "method", "max_iter", "tol", "progress", "progress_every", "optimizer", "num_steps"):
        if word in params:
            assert params[word].kind is P.KEYWORD_ONLY, f"{name}: `{word}` is keyword-only"
    if "method" in params:
        assert params["method"].default in OPTIMIZERS, name
    if "max_iter" in params:
        d = params["max_iter"].default
        assert d is None or (isinstance(d, int) and d >= 0), name
    if "tol" in params:
        assert params["tol"].default is None or isinstance(params["tol"].default, float), name
    if "progress" in params:
        assert params["progress"].default is None and params["progress_every"].default is None, name
    if "starts" in params:
        starts = params["starts"].default
        assert isinstance(starts, tuple) and all(isinstance(s, str) for s in starts), name
    for count in ("num_starts", "num_steps", "num_samples"):
        if count in params:
            d = params[count].default
            assert d is P.empty or d is None or (isinstance(d, int) and not isinstance(d, bool)), name


def test_old_words_are_gone_from_every_public_signature():
    for name, sig in SIGNATURES.items():
        allowed = {"backend"} if name == "minimize_lbfgs" else set()  # the solver's, not a fit's, choice
        assert not (OLD_WORDS - allowed) & set(sig.parameters), name


def test_every_method_name_is_one_of_the_four():
    from kronvi._fit.regression import METHODS as REGRESSION
    from kronvi._solvers.lbfgs import BACKENDS
    from kronvi.bnn._fit import BNN_METHODS
    from kronvi.logistic._fit import METHODS as LOGISTIC

    for methods in (REGRESSION, BACKENDS, BNN_METHODS, LOGISTIC):
        assert set(methods) <= set(OPTIMIZERS)
    assert OPTIMIZERS == ("cavi", "lbfgs", "optax-lbfgs", "sgd")


# ----------------------------------------------------------------------------------------------------
# Old spellings: the same result, with a DeprecationWarning, for one release


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    b, m, n = 3, 5, 20
    Phi = jnp.asarray(rng.normal(size=(n, b)), jnp.float32)
    y = Phi @ jnp.asarray([1.0, -1.0, 0.0], jnp.float32) + 0.1 * jnp.asarray(rng.normal(size=n), jnp.float32)
    stats = kronvi.stats.regression_stats(Phi, y)
    pw, pn = kronvi.model.gaussian_prior(b, 1.0, levels=m), kronvi.model.noise_prior(0.1, levels=4)
    qw = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, m)), jnp.float32))
    qn = kronvi.model.MeanField.from_prior(pn)
    mix = kronvi.mixtures.Mixture(jnp.asarray(rng.normal(size=(2, b, m)), jnp.float32), jnp.zeros(2))
    labels = (y > 0).astype(jnp.float32)
    return dict(Phi=Phi, y=y, labels=labels, stats=stats, pw=pw, pn=pn, qw=qw, qn=qn, mix=mix, b=b)


def _reordered_calls(p):
    """(function, old positional arguments, new positional arguments, keyword arguments)."""
    key = jax.random.key(0)
    st, pw, pn, qw, qn, mix, Phi, y = (
        p[k] for k in ("stats", "pw", "pn", "qw", "qn", "mix", "Phi", "labels")
    )
    lc = mix.log_marginals
    bstats = kronvi.bnn.bnn_stats(Phi[:, :2], p["y"], (2, 1, 1))
    bpw = kronvi.model.gaussian_prior(3, 1.0, levels=3)
    bqw = kronvi.model.MeanField.from_prior(bpw)
    opt = optax.sgd(0.01)
    mstate = kronvi.mixtures.mixture_sgd_init(mix, qn, optimizer=opt)
    gq = kronvi.gaussian.GaussianMeanField(jnp.zeros(3), jnp.zeros(3))
    rstate = kronvi.gaussian.gaussian_reparam_init(gq, 1.0, optimizer=opt)
    eq = kronvi.gaussian.ELRG(jnp.zeros(3), jnp.zeros(3), jnp.ones((3, 1)))
    fmap = kronvi.feature_learning.rff_lengthscale_map(jax.random.key(1), 3, 2)  # 4 features
    fq, fpw = kronvi.model.MeanField(jnp.zeros((4, 5))), kronvi.model.gaussian_prior(4, 1.0, levels=5)
    order = jnp.arange(3)
    idx_w, idx_n = jnp.zeros((2, 3), jnp.int32), jnp.zeros(2, jnp.int32)
    return {
        "regression_elbo": ((qw, qn, pw, pn, st), (st, qw, qn, pw, pn), {}),
        "bnn_elbo": ((bqw, qn, bpw, pn, bstats), (bstats, bqw, qn, bpw, pn), {}),
        "bnn_expected_rss": ((bqw, bpw, bstats), (bstats, bqw, bpw), {}),
        "mixture_elbo_bound": ((mix, lc, qn, pw, pn, st), (st, mix, qn, lc, pw, pn), {}),
        "mixture_expected_loglik": ((mix, qn, pw, pn, st), (st, mix, qn, pw, pn), {}),
        "mixture_elbo_estimate": ((key, mix, qn, pw, pn, st), (key, st, mix, qn, pw, pn), {"num_samples": 4}),
        "mixture_elbo_unbiased": ((key, mix, qn, pw, pn, st), (key, st, mix, qn, pw, pn), {"num_samples": 4}),
        "mixture_sgd_step": (
            (key, mstate, st, pw, pn),
            (key, st, mstate, pw, pn),
            {"optimizer": opt, "num_samples": 4},
        ),
        "gaussian_mf_elbo": ((gq, 0.5, st), (st, gq, 0.5), {"prior_scale": 1.0}),
        "elrg_elbo": ((eq, 0.5, st), (st, eq, 0.5), {"prior_scale": 1.0}),
        "elrg_minibatch_elbo": (
            (key, eq, 0.5, Phi, p["y"]),
            (key, Phi, p["y"], eq, 0.5),
            {"num_data": 40, "prior_scale": 1.0},
        ),
        "gaussian_reparam_step": (
            (key, rstate, Phi, p["y"]),
            (key, Phi, p["y"], rstate),
            {"num_data": 40, "prior_scale": 1.0, "optimizer": opt},
        ),
        "logistic_loglik_bound": ((qw, pw, Phi, y), (Phi, y, qw, pw), {}),
        "logistic_elbo_bound": ((qw, pw, Phi, y), (Phi, y, qw, pw), {}),
        "logistic_loglik_estimate": ((key, qw, pw, Phi, y), (key, Phi, y, qw, pw), {"num_samples": 4}),
        "logistic_loglik_minibatch": ((key, qw, pw, Phi, y), (key, Phi, y, qw, pw), {"batch_size": 4}),
        "feature_elbo": (
            (jnp.zeros(3), fq, qn, fpw, pn, Phi, p["y"]),
            (jnp.zeros(3), Phi, p["y"], fq, qn, fpw, pn),
            {"feature_fn": fmap},
        ),
        "cavi_sweep": (
            (qw.logits, qn.logits, pw, pn, st, order),
            (st, qw.logits, qn.logits, pw, pn, order),
            {},
        ),
        "diagonal_sweep": (
            (qw.logits, qn.logits, pw, pn, st, order),
            (st, qw.logits, qn.logits, pw, pn, order),
            {},
        ),
        "coordinate_gains": ((qw.logits, qn.logits, pw, pn, st), (st, qw.logits, qn.logits, pw, pn), {}),
        "regression_log_joint": ((idx_w, idx_n, pw, pn, st), (st, idx_w, idx_n, pw, pn), {}),
        "reinforce_gradient": ((key, qw, qn, pw, pn, st), (key, st, qw, qn, pw, pn), {"num_samples": 2}),
        "reinforce_gradient_from_draws": (
            (idx_w, idx_n, qw, qn, pw, pn, st),
            (idx_w, idx_n, st, qw, qn, pw, pn),
            {},
        ),
    }


REORDERED = [
    "regression_elbo", "bnn_elbo", "bnn_expected_rss", "mixture_elbo_bound", "mixture_expected_loglik",
    "mixture_elbo_estimate", "mixture_elbo_unbiased", "mixture_sgd_step", "gaussian_mf_elbo", "elrg_elbo",
    "elrg_minibatch_elbo", "gaussian_reparam_step", "logistic_loglik_bound", "logistic_elbo_bound",
    "logistic_loglik_estimate", "logistic_loglik_minibatch", "feature_elbo", "cavi_sweep", "diagonal_sweep",
    "coordinate_gains", "regression_log_joint", "reinforce_gradient", "reinforce_gradient_from_draws",
]  # fmt: skip


def _same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)


@pytest.mark.parametrize("name", REORDERED)
def test_the_old_argument_order_warns_and_gives_the_same_result(problem, name):
    old, new, kw = _reordered_calls(problem)[name]
    fn = FUNCTIONS[name]
    expected = fn(*new, **kw)
    with pytest.warns(DeprecationWarning, match=rf"{name}\(.*the order is now {name}\("):
        got = fn(*old, **kw)
    _same(got, expected)


def test_renamed_keywords_warn_and_give_the_same_result(problem):
    p = problem
    bstats = kronvi.bnn.bnn_stats(p["Phi"][:, :2], p["y"], (2, 1, 1))
    bpw = kronvi.model.gaussian_prior(3, 1.0, levels=3)
    start = kronvi.bnn.bnn_init(jax.random.key(0), bpw, p["pn"])
    fmap = kronvi.feature_learning.rff_lengthscale_map(jax.random.key(1), 3, 2)
    # 15 levels of weights and noise, as fit_features_eigen's grids: its inner fit reuses fit_features's programs
    fpw, fpn = kronvi.model.gaussian_prior(4, 1.0, levels=15), kronvi.model.noise_prior(0.1, levels=15)
    X3 = p["Phi"]
    calls = [
        (kronvi.bnn.fit_bnn, (bstats, bpw, p["pn"]), {"q_init": start, "max_iter": 2}, {"init": start, "max_iter": 2}),
        (
            kronvi.logistic.fit_logistic, (p["Phi"], p["labels"], p["pw"]),
            {"q_init": "prior", "max_iter": 2}, {"init": "prior", "max_iter": 2},
        ),
        (
            kronvi.feature_learning.fit_features, (jnp.zeros(3), X3, p["y"], fpw, fpn),
            {"feature_fn": fmap, "max_rounds": 0, "backend": "lbfgs"},
            {"feature_fn": fmap, "max_iter": 0, "method": "lbfgs"},
        ),
        (
            kronvi.feature_learning.fit_features_eigen, (jnp.zeros(3), X3, p["y"]),
            {"feature_fn": fmap, "prior_scale": 1.0, "noise_variance": 0.1, "rounds": 0},
            {"feature_fn": fmap, "prior_scale": 1.0, "noise_variance": 0.1, "max_iter": 0},
        ),
        (
            kronvi.inputs.fit_gp_hyperparameters, (jax.random.key(2), X3, p["y"] - jnp.mean(p["y"])),
            {"num_restarts": 1, "max_iter": 3}, {"num_starts": 1, "max_iter": 3},
        ),
    ]  # fmt: skip
    for fn, args, old, new in calls:
        expected = fn(*args, **new)
        with pytest.warns(DeprecationWarning, match=r"is now called"):
            got = fn(*args, **old)
        _same(got, expected)
    with pytest.raises(TypeError, match="both `q_init` and its new name `init`"):
        kronvi.bnn.fit_bnn(bstats, bpw, p["pn"], q_init=start, init=start)
