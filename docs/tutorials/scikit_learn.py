# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # kronvi in scikit-learn
#
# [`kronvi.sklearn`][kronvi.sklearn] wraps DIRECT regression and classification as scikit-learn
# estimators, so they work wherever `BayesianRidge` or `GaussianProcessRegressor` do: in a `Pipeline`,
# under `GridSearchCV`, with `clone`. scikit-learn is an optional extra (`pip install "kronvi[sklearn]"`);
# `import kronvi` never imports it.
#
# - [`DirectRegressor`][kronvi.sklearn.DirectRegressor]: `fit`, `predict(X, return_std=True)`, `score`,
#   `sample_y`, `partial_fit`. It runs the same stages as `kronvi fit` (standardized inputs, centred
#   targets, random Fourier features, float64 statistics, the eigenbasis recipe, coordinate ascent).
# - [`DirectClassifier`][kronvi.sklearn.DirectClassifier]: `fit`, `predict`, `predict_proba`,
#   `decision_function` over [`kronvi.logistic`][kronvi.logistic].
#
# The yacht data ship with kronvi: 308 rows, 6 inputs, and the 10 published train/test splits.

# %%
import time

import numpy as np
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import kronvi
from kronvi.sklearn import DirectRegressor

t_start = time.perf_counter()
X, y, test_mask = kronvi.load_demo()
X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
test = test_mask[:, 0].astype(bool)
X_train, y_train, X_test, y_test = X[~test], y[~test], X[test], y[test]
print(X_train.shape, X_test.shape)

# %% [markdown]
# ## Pipeline + GridSearchCV
#
# The lengthscale of the random Fourier features is chosen here by 3-fold cross-validation on the
# training rows instead of the GP marginal likelihood (`lengthscale="gp"`, the default). The estimator
# standardizes its inputs itself; the `StandardScaler` is there to show the pipeline. `n_frequencies=100`
# (200 features) keeps the search to a few seconds; the command line's default is 1000.

# %%
pipe = make_pipeline(StandardScaler(), DirectRegressor(n_frequencies=100, random_state=0))
search = GridSearchCV(
    pipe,
    {"directregressor__lengthscale": [1.0, 2.0, 4.0]},
    cv=3,
    scoring="neg_root_mean_squared_error",
)
search.fit(X_train, y_train)
for ls, score in zip(
    search.cv_results_["param_directregressor__lengthscale"],
    search.cv_results_["mean_test_score"],
    strict=True,
):
    print(f"lengthscale {ls:4}: cross-validated RMSE {-score:.3f}")
print("chosen:", search.best_params_)

# %% [markdown]
# The refitted pipeline predicts with the exact predictive mean and standard deviation (noise included,
# as `BayesianRidge` returns it); the negative log predictive density of a Gaussian with those moments is
# a quick check of calibration.

# %%
mean, std = search.best_estimator_.predict(X_test, return_std=True)  # Pipeline passes return_std on
rmse = np.sqrt(np.mean((mean - y_test) ** 2))
nlpd = np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y_test - mean) / std) ** 2)
print(
    f"test RMSE {rmse:.3f}, Gaussian NLPD {nlpd:.3f}, R^2 {search.best_estimator_.score(X_test, y_test):.4f}"
)

# %% [markdown]
# One isotropic lengthscale is a blunt tool on yacht, whose target depends mostly on one input: the
# default, `lengthscale="gp"`, fits one lengthscale per input by the GP marginal likelihood (at the cost
# of a GP fit per `fit`) and does better here.
#
# ## Posterior draws
#
# `sample_y` draws weight vectors from the discrete posterior (each weight takes one of its grid values)
# and evaluates the functions they define, laid out as in `GaussianProcessRegressor.sample_y`:
# `(n_points, n_samples)`. A pipeline has no `sample_y`, so the scaler is applied by hand.

# %%
best = search.best_estimator_
draws = best[-1].sample_y(best[:-1].transform(X_test[:3]), n_samples=1000, random_state=0)
print("draws:", draws.shape)
print("mean of the draws  ", np.round(draws.mean(axis=1), 3))
print("predictive mean    ", np.round(mean[:3], 3))

# %% [markdown]
# ## Streaming with `partial_fit`
#
# The sufficient statistics are sums over rows, so chunks merge exactly. What does not stream is the map
# the statistics go through (input standardization, lengthscales, random frequencies): `initialize`
# fixes it from the rows it is given, then `partial_fit` adds chunks. After `initialize` on all rows,
# chunks give the model of `fit` up to rounding: the float64 statistics agree to about 1e-15. The float32
# fit (the default `dtype`) usually keeps the predictions within about 1e-7, but a rounding difference
# can flip one weight's coordinate-ascent choice between two grid levels and move them by up to about
# 1e-3; `dtype="float64"` leaves about 1e-10. Without `initialize`, the first chunk fixes the map.

# %%
params = dict(n_frequencies=100, lengthscale=2.0, random_state=0)
full = DirectRegressor(**params).fit(X_train, y_train).predict(X_test)
stream = DirectRegressor(**params).initialize(X_train, y_train)
for rows in np.array_split(np.arange(len(y_train)), 4):
    stream.partial_fit(X_train[rows], y_train[rows])
print("rows seen:", stream.n_samples_seen_)
print("largest difference from fit:", float(np.max(np.abs(stream.predict(X_test) - full))))
print("largest |prediction|:", float(np.max(np.abs(full))))
print(f"tutorial ran in {time.perf_counter() - t_start:.1f} s")
