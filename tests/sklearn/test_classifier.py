"""kronvi.sklearn.DirectClassifier: scikit-learn's estimator checks, probabilities against
kronvi.logistic.predict_logistic, one-vs-rest for several classes."""

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import kronvi  # noqa: E402
from kronvi.logistic import predict_logistic  # noqa: E402
from kronvi.sklearn import DirectClassifier  # noqa: E402

# 20 features and 30 L-BFGS iterations keep the fits below fast; the rows are padded (zero weights) to 512,
# so every fit's data share one compiled fit.
SMALL = dict(n_frequencies=10, max_iter=30, random_state=0)
# scikit-learn's checks test the API, not the fit: 10 features of 5 levels. Predictions are padded to 512
# rows too and cost (features + 1) x levels per row: check_methods_subset_invariance (60 one-row predictions
# of three one-vs-rest fits) took 13 s with 21 x 15 weights and takes 3.5 s with 11 x 5.
CHECKS = dict(n_frequencies=5, levels=5, max_iter=30, random_state=0)


@parametrize_with_checks([DirectClassifier(**CHECKS)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _rings(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1.0, 3.0] + [0.0, 10.0]
    r2 = X[:, 0] ** 2 + ((X[:, 1] - 10.0) / 3.0) ** 2
    return X, np.where(r2 > 1.4, "out", "in")


def test_probabilities_are_predict_logistic_of_the_fitted_posterior():
    X, y = _rings()
    clf = DirectClassifier(**SMALL).fit(X, y)
    assert clf.classes_.tolist() == ["in", "out"] and len(clf.q_w_) == 1
    Xt = X[:7]
    Phi = kronvi.rff_features(
        clf.feature_map_, kronvi.standardize(clf.standardizer_, jnp.asarray(Xt, jnp.float32))
    )
    Phi = jnp.concatenate([Phi, jnp.ones((7, 1))], axis=1)  # the intercept
    p_out = np.asarray(predict_logistic(clf.q_w_[0], clf.prior_w_, Phi))
    proba = clf.predict_proba(Xt)
    np.testing.assert_allclose(proba[:, 1], p_out, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(clf.decision_function(Xt), np.log(p_out / (1 - p_out)), rtol=1e-4, atol=1e-5)
    assert clf.predict(Xt).tolist() == np.where(p_out > 0.5, "out", "in").tolist()
    assert clf.score(X, y) > 0.85  # a ring: no linear classifier does this


def test_one_vs_rest_for_three_classes():
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    labels = rng.integers(0, 3, size=150)
    X = centres[labels] + 0.6 * rng.normal(size=(150, 2))
    clf = DirectClassifier(**SMALL).fit(X, labels + 5)
    assert clf.classes_.tolist() == [5, 6, 7] and len(clf.q_w_) == 3
    proba = clf.predict_proba(X)
    assert proba.shape == (150, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    assert clf.decision_function(X).shape == (150, 3)
    assert clf.score(X, labels + 5) > 0.9
    with pytest.raises(ValueError, match="`bound`"):
        DirectClassifier(bound="none").fit(X, labels)


def test_offset_inputs_are_standardized_before_the_float32_cast():
    """Inputs of 1e6 + N(0, 1) cast to float32 (spacing 0.0625) before standardizing moved the
    probabilities by up to 0.4; standardized in float64 first, by under 1e-3 (float32 L-BFGS paths)."""
    X, y = _rings()
    shift = np.array([1e6, -3e6])
    clf = DirectClassifier(**SMALL).fit(X, y)
    moved = DirectClassifier(**SMALL).fit(X + shift, y).predict_proba(X[:50] + shift)
    np.testing.assert_allclose(moved, clf.predict_proba(X[:50]), atol=0.01)
    # inputs whose standardized values overflow float32 are named as the user's `X`, not `Phi_new`
    with pytest.raises(ValueError, match="^`X` holds values too far from the training inputs"):
        clf.predict(X[:3] * 1e300)


def test_large_margins_keep_the_predictions():
    """With the weight grids scaled by 1e6 the margins reach ~1e7: predict_logistic returned NaN for every
    row, so `predict` answered the first class everywhere. Now the 15**3 configurations of the linear
    model are summed exactly: the probabilities are the q-mass of each margin's sign, which decides as the
    unscaled model does except near the boundary (199 of 200 rows)."""
    X, _ = _rings()
    y = np.where(X[:, 0] > 0.3, "out", "in")
    clf = DirectClassifier(features="linear", max_iter=30, random_state=0).fit(X, y)
    expected = clf.predict(X)
    clf.prior_w_ = kronvi.DiscretePrior(clf.prior_w_.values * 1e6, clf.prior_w_.log_probs)
    proba = clf.predict_proba(X)
    assert np.all(np.isfinite(proba))
    assert np.mean(clf.classes_[np.argmax(proba, axis=1)] == expected) > 0.95
    assert 0.5 < np.mean(expected == "in") < 0.8
