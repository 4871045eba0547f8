"""kronvi.sklearn.DirectClassifier: scikit-learn's estimator checks, the model of kronvi.fit_classifier with the
same seed, one-vs-rest for several classes."""

import json
import pickle
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_python, subprocess_env

pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import kronvi  # noqa: E402
import kronvi.logistic as kl  # noqa: E402
from kronvi.sklearn import DirectClassifier  # noqa: E402

SMALL = dict(n_frequencies=10, random_state=0)
# scikit-learn's checks test the API, not the fit: 5 frequencies (b = 10 + d + 1 weights) of 5 levels, two
# candidate scales. Training rows are padded to at least 128 (zero weights), so the checks' data share a few
# compiled programs.
CHECKS = dict(n_frequencies=5, levels=5, prior_scales=(1.0, 10.0), random_state=0)


@parametrize_with_checks([DirectClassifier(**CHECKS)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _rings(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1.0, 3.0] + [0.0, 10.0]
    r2 = X[:, 0] ** 2 + ((X[:, 1] - 10.0) / 3.0) ** 2
    return X, np.where(r2 > 1.4, "out", "in")


def test_the_model_of_fit_classifier_with_the_same_seed():
    """`DirectClassifier(random_state=k)` is `fit_classifier(jax.random.key(k), X, y)` with the same config."""
    X, y = _rings()
    clf = DirectClassifier(**SMALL).fit(X, y)
    assert clf.classes_.tolist() == ["in", "out"] and len(clf.models_) == 1
    model = kronvi.fit_classifier(
        jax.random.key(0), X, y == "out", kl.ClassifierConfig(num_frequencies=10)
    ).model
    for a, b in zip(jax.tree.leaves(clf.models_[0]), jax.tree.leaves(model), strict=True):
        np.testing.assert_array_equal(a, b)
    Xt = X[:7]
    p_out = np.asarray(model.predict_proba(Xt), np.float64)
    proba = clf.predict_proba(Xt)
    np.testing.assert_allclose(proba[:, 1], p_out, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    log_pair = np.asarray(kl.predict_log_proba(model, Xt), np.float64)
    np.testing.assert_allclose(clf.predict_log_proba(Xt), log_pair)
    np.testing.assert_allclose(clf.decision_function(Xt), log_pair[:, 1] - log_pair[:, 0])
    assert clf.predict(Xt).tolist() == np.where(p_out > 0.5, "out", "in").tolist()
    assert clf.score(X, y) > 0.9  # a ring: no linear classifier does this
    assert clf.prior_scale_.shape == (1,) and clf.n_iter_.shape == (1,)


def test_the_defaults_are_the_recipe_and_pickle_small():
    X, y = _rings()
    clf = DirectClassifier(random_state=3).fit(X, y)
    defaults = kl.ClassifierConfig()
    assert clf.models_[0].features.frequencies.shape == (2, defaults.num_frequencies)
    assert clf.models_[0].prior_w.values.shape == (2 * 50 + 2 + 1, defaults.levels)
    blob = pickle.dumps(clf)
    assert len(blob) < 100_000  # the model's arrays, no training data
    again = pickle.loads(blob)
    np.testing.assert_array_equal(again.predict_proba(X[:5]), clf.predict_proba(X[:5]))
    # the paper's grids: even, on +-3 prior sds, through `grid`
    paper = clone(clf).set_params(grid="paper", n_frequencies=10).fit(X, y)
    ref = kronvi.model.gaussian_prior(23, paper.prior_scale_[0], levels=15, width=3.0)
    np.testing.assert_allclose(paper.prior_w_[0].values, ref.values)


def test_a_pickled_float64_classifier_stays_float64_without_x64(tmp_path):
    X, y = _rings()
    clf = DirectClassifier(dtype="float64", **SMALL).fit(X, y)
    path = tmp_path / "clf.pkl"
    path.write_bytes(pickle.dumps(clf))
    code = textwrap.dedent(
        f"""
        import json, pickle, numpy as np, jax
        assert not jax.config.jax_enable_x64
        clf = pickle.loads(open({str(path)!r}, "rb").read())
        assert {{np.asarray(a).dtype.name for a in jax.tree.leaves(clf.models_)}} == {{"float64"}}
        print(json.dumps(clf.predict_proba(np.array({X[:4].tolist()!r}))[:, 1].tolist()))
        """
    )
    p = json.loads(run_python("-c", code, env=subprocess_env()).strip().splitlines()[-1])
    np.testing.assert_allclose(p, clf.predict_proba(X[:4])[:, 1], rtol=1e-12)


def test_separable_classes_by_default():
    """`DirectClassifier()` on linearly separable classes: the searched prior sd stays within its bounds
    (the evidence keeps growing with it there), the fit is finite, and it separates them with confidence."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    clf = DirectClassifier(random_state=0).fit(X, y)
    (info,) = clf.fit_info_
    assert 0.01 <= clf.prior_scale_[0] <= 1000 and clf.prior_scale_[0] >= max(info.scales[:1])
    assert np.all(np.isfinite(np.asarray(info.log_evidence)))
    proba = clf.predict_proba(X)
    assert np.all(np.isfinite(proba)) and clf.score(X, y) == 1.0
    assert np.mean(np.max(proba, axis=1)) > 0.9
    # Far rows on both sides: probabilities far below float32's quadrature error, not 0 or 1 (before: 0, log
    # proba -inf, log-odds -690.8 = log(1e-300) on one side and +36.7 on the other); ordered by the margin.
    far = np.outer(np.linspace(-3.0, 3.0, 13), [1.0, 0.5, 0.0])
    far_proba, log_proba, logit = clf.predict_proba(far), clf.predict_log_proba(far), clf.decision_function(far)
    assert np.all(far_proba > 0) and np.all(np.isfinite(log_proba)) and np.all(np.isfinite(logit))
    np.testing.assert_allclose(log_proba, np.log(far_proba), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(logit, log_proba[:, 1] - log_proba[:, 0], rtol=1e-12)
    assert np.all(logit[:6] < -16) and np.all(logit[7:] > 15) and np.sum(np.abs(logit) > 40) >= 6


def test_one_vs_rest_for_three_classes():
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    labels = rng.integers(0, 3, size=150)
    X = centres[labels] + 0.6 * rng.normal(size=(150, 2))
    clf = DirectClassifier(**SMALL).fit(X, labels + 5)
    assert clf.classes_.tolist() == [5, 6, 7] and len(clf.models_) == 3
    # one fit per class on the same features
    for k, m in enumerate(clf.models_):
        np.testing.assert_array_equal(m.features.frequencies, clf.feature_map_.frequencies)
        ref = kronvi.fit_classifier(
            jax.random.key(0), X, labels == k, kl.ClassifierConfig(num_frequencies=10)
        )
        np.testing.assert_array_equal(m.q_w.logits, ref.model.q_w.logits)
    proba = clf.predict_proba(X)
    assert proba.shape == (150, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    assert clf.decision_function(X).shape == (150, 3)
    assert clf.score(X, labels + 5) > 0.9


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(width=-1.0), "^`width` must be"), (dict(n_frequencies=0), "^`n_frequencies` must be"),
        (dict(grid="even"), "^`grid` must be one of"), (dict(prior_scales=(1.0, 0.0)), "^`prior_scales` must be"),
        (dict(max_iter=0), "^`max_iter` must be"), (dict(tol=-1.0), "^`tol` must be"),
        (dict(levels=1), "^`levels` must be"), (dict(dtype="float16"), "^`dtype` must be one of"),
    ],
)  # fmt: skip
def test_bad_parameters_are_named(params, match):
    X, y = _rings(20)
    with pytest.raises(ValueError, match=match):
        DirectClassifier(**params).fit(X, y)


def test_offset_inputs_are_standardized_before_the_float32_cast():
    """Inputs of 1e6 + N(0, 1) cast to float32 (spacing 0.0625) before standardizing moved the
    probabilities by up to 0.4; standardized in float64 first, by float32 rounding only."""
    X, y = _rings()
    shift = np.array([1e6, -3e6])
    clf = DirectClassifier(**SMALL).fit(X, y)
    moved = DirectClassifier(**SMALL).fit(X + shift, y).predict_proba(X[:50] + shift)
    np.testing.assert_allclose(moved, clf.predict_proba(X[:50]), atol=0.01)
    # inputs whose standardized values overflow float32 are named as the user's `X`
    with pytest.raises(ValueError, match="^`X` holds values too far from the training inputs"):
        clf.predict(X[:3] * 1e300)


def test_float64():
    X, y = _rings()
    clf = DirectClassifier(dtype="float64", **SMALL).fit(X, y)
    assert clf.models_[0].q_w.logits.dtype == jnp.float64
    with jax.enable_x64(True):
        ref = kronvi.fit_classifier(
            jax.random.key(0), X, y == "out", kl.ClassifierConfig(num_frequencies=10), dtype=jnp.float64
        ).model
        expected = np.asarray(ref.predict_proba(X[:9]))
        log_pair = np.asarray(kl.predict_log_proba(ref, X[:9]))
    # within the quadrature's bound (1e-13), the tails refined by predict_log_proba's bracket
    np.testing.assert_allclose(clf.predict_proba(X[:9])[:, 1], expected, rtol=1e-12, atol=2e-13)
    np.testing.assert_allclose(clf.predict_log_proba(X[:9]), log_pair, rtol=1e-12)
