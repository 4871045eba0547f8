r"""scikit-learn estimators over DIRECT regression (and, once it exists, logistic regression).

`DirectRegressor` wraps the same stages as `kronvi.pipeline` (standardize the inputs
and the targets, GP hyperparameters, random Fourier features, exact statistics, the eigenbasis recipe,
coordinate ascent) behind `fit` / `predict(X, return_std=True)` / `partial_fit`, so it drops into a
`Pipeline`, `GridSearchCV` or `clone` like `BayesianRidge` or `GaussianProcessRegressor`.

scikit-learn is imported here only: `import kronvi` does not import it. Install it with
`pip install "kronvi[sklearn]"`.

**Streaming (`partial_fit`).** The statistics $(n, y^\top y, \Phi^\top y, \Phi^\top\Phi)$ are sums over
rows, so chunks merge exactly (`kronvi.stats.merge_stats`). What is *not* a sum over rows is
everything the statistics are computed *through*: the input standardization, the GP hyperparameters and the
random frequencies. They are fixed once, by `DirectRegressor.initialize`
on the rows it is given (`partial_fit` calls it on its first chunk unless it was called before), and every
later chunk goes through the same map. The standardization of $y$ is exact whatever the chunks: the
statistics are accumulated for the features augmented with a constant column (which carries
$\sum_i \phi_i$, $\sum_i y_i$ and $n$) and re-centred on the mean, and rescaled by the standard deviation,
of all rows seen before every fit (so are the prior and noise scales that derive from the target
variance). Hence

```python
est.fit(X, y)                                   # == initialize(X, y), then one chunk of all rows
est2.initialize(X, y)                           # the same map, standardization and GP hyperparameters
for Xc, yc in chunks: est2.partial_fit(Xc, yc)  # the same model, up to float64 summation order
```

(with random Fourier features: from 4,000 to 100,000 rows, where `fit`'s default map is Nyström features, set
`feature_map="fourier"` for the same model), while `partial_fit` on chunks without `initialize` fixes the map from
the first chunk (a good choice when
the first chunk is a representative sample of a few thousand rows). The statistics are accumulated in
float64 (the eigenbasis recipe needs it), and every `partial_fit` refits the posterior from all rows seen
(an eigendecomposition of a `b x b` matrix and a CAVI fit: prefer chunks of thousands of rows).

References:
  Evans & Nair (2018), *Discretely Relaxing Continuous Variables for tractable Variational Inference*.
"""

from __future__ import annotations

import numbers
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

try:
    from sklearn.utils.validation import validate_data
except ImportError:  # scikit-learn < 1.6

    def validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


from ._base.checks import check_int, check_nonnegative_number, check_positive_number
from ._base.precision import matmul
from ._model.regression import noise_moments
from .logistic import ClassifierConfig, fit_classifier
from .logistic import predict_log_proba as classifier_log_proba
from .logistic._recipe import check_config as check_classifier_config
from .pipeline import (
    BASES,
    FEATURE_GAIN,
    FEATURE_MAP_CHOICES,
    KERNEL_CHOICES,
    RECIPES,
    DirectConfig,
    GPOptions,
    check_fit_memory,
    fit_direct,
    fit_prepared,
    fold_features,
    predict,
    stream_init,
    stream_prepare,
    stream_update,
    support_shift,
)
from .quantize import sample_codes

__all__ = ["DirectClassifier", "DirectRegressor"]

_FEATURES = ("rff", "linear")
_DTYPES = ("float32", "float64")
_METHODS = ("cavi", "lbfgs")


def _numeric_targets(y):
    """`y` unchanged when its dtype is numeric; else converted to float64 as scikit-learn converts object
    targets, with a `ValueError` naming `y` when that fails (strings such as "a")."""
    dtype = getattr(y, "dtype", None)
    if not isinstance(dtype, np.dtype):
        dtype = np.asarray(y).dtype
    if dtype.kind in "biufc":  # complex: scikit-learn's validation refuses it
        return y
    try:
        return np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"`y` must hold numbers (the targets of a regressor), got dtype {dtype}: {e}"
        ) from None


def _check_target_range(y):
    """`ValueError` naming `y` when its squares (the statistics' `y^T y`) would overflow float64."""
    big = float(np.max(np.abs(y))) if y.size else 0.0
    if big > 1e150:
        raise ValueError(f"`y` holds magnitudes up to {big:.3g}, whose squares overflow float64: rescale `y`")


def _check_choice(value, name, choices):
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}")


def _check_positive(value, name, *, allow=()):
    if isinstance(value, str) and value in allow:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value) and value > 0
    if not ok:
        extra = f" or one of {allow}" if allow else ""
        raise ValueError(f"`{name}` must be a positive number{extra}, got {value!r}")


class DirectRegressor(RegressorMixin, BaseEstimator):
    r"""DIRECT regression as a scikit-learn regressor: `kronvi.fit_direct` behind `fit` / `predict` /
    `partial_fit`, so it drops into a `Pipeline`, `GridSearchCV` or `clone` like `BayesianRidge` or
    `GaussianProcessRegressor`.

    The estimator is a thin adapter: its parameters are the fields of a `kronvi.DirectConfig`
    (`config_`), `fit(X, y)` is `kronvi.fit_direct(jax.random.key(random_state), X, y, config_)` and
    its fitted model is `model_` (a `kronvi.FittedDirect`, which `kronvi.save_model` saves whole):
    `DirectRegressor(random_state=k).fit(X, y).predict(X_new)` equals
    `kronvi.fit_direct(jax.random.key(k), X, y).model.predict(X_new).mean` to float rounding.
    `predict(X, return_std=True)` returns the exact predictive mean and standard deviation of a new target
    (noise included), as `BayesianRidge` does.

    Args:
      n_frequencies: $D$, random frequencies: $b = 2D$ features (a cosine and a sine each; with Nyström
        features $2D$ landmarks); `None`: the recipe's default for the training rows and the feature map
        (`kronvi.pipeline.default_num_frequencies`).
      basis: `"eigen"` (default: the accuracy of exact Bayesian linear regression on the features),
        `"compact"` (the same fit in a compact form: a smaller model, faster predictions) or `"features"`
        (the paper's sparse 4-bit recipe) (`DirectConfig.basis`).
      lengthscale: `"gp"` (the GP marginal-likelihood estimate, per input) or a positive number (one
        lengthscale in standardized input units; no GP is fitted) (`DirectConfig.lengthscale`).
      levels: grid values per weight (15: 4-bit codes).
      width: grid half-width in posterior sds (`"eigen"`, default 6) or prior sds (`"features"`, default 3).
      noise_levels: values on the noise grid.
      noise_span: the noise grid spans $s^2 \times [1/\text{span}, \text{span}]$ (default: the basis's).
      method: `"cavi"` (coordinate ascent, the default) or `"lbfgs"`.
      starts: `"prior"`, `"gaussian"` or `"both"` (the highest ELBO is kept); default: the basis's.
      max_iter: iterations of the fit (default: the method's).
      gp_points: the most rows the GP hyperparameters are fitted on, >= 2 (default: 1000, or 2000 from
        20,000 rows: `kronvi.pipeline.default_gp_points`; from 4,000 to 20,000 rows the 1,000-row optimum is then
        refined on 2000 rows, `kronvi.pipeline.default_gp_refine_points`, which an explicit count turns off).
      gp_restarts: starts of the GP hyperparameter fit, >= 1.
      kernel: `"rbf"` (squared exponential, default), `"matern52"`, `"matern32"`, or `"auto"` (the three
        compared by the features' exact evidence; `"eigen"` and `"compact"`) (`DirectConfig.kernel`).
      feature_map: `None` (default: by the training rows, Nyström features from 4,000 to 100,000 rows with
        `"eigen"` and `"compact"`, random Fourier features otherwise and with `partial_fit`;
        `kronvi.pipeline.default_feature_map`), `"fourier"` (random Fourier features), `"nystrom"` (Nyström
        features on `2 n_frequencies` landmarks among the training rows; not with `partial_fit`) or `"auto"`
        (the map of the larger exact evidence; `"eigen"` and `"compact"`) (`DirectConfig.feature_map`).
      feature_budget: `None` (default: b from `n_frequencies`), or seconds: b doubles from `2 n_frequencies`
        (default 1000) while the exact evidence rises by at least `feature_gain` nats per training row and the
        next doubling fits the budget (or less, to fill it) (`DirectConfig.feature_budget`; `"eigen"` and `"compact"`; not with
        `partial_fit`). `fit_info_.feature_steps` lists the b tried.
      feature_gain: with `feature_budget`: the least rise of the log evidence per row a doubling must bring.
      compact_tol: `"compact"` only: its variance budget (`DirectConfig.compact_tol`).
      chunk_size: rows per block of the statistics.
      dtype: `"float32"` (default) or `"float64"`, the working precision.
      random_state: the seed of `jax.random.key` (an int; `None` or a `numpy.random.RandomState` draw one).

    Attributes:
      model_: the fitted `kronvi.FittedDirect`.
      config_: the `kronvi.DirectConfig` it was fitted with.
      fit_info_: `kronvi.pipeline.DirectInfo` of the last fit.
      n_features_in_: number of input columns $d$.
      y_offset_, y_scale_: the targets' offset and unit (`model_.y_offset`, `model_.y_scale`).
      noise_variance_: posterior mean of the noise variance, in squared target units.
      elbo_: the final ELBO (nats) of the targets in their own units.
      n_iter_: iterations of the fit (sweeps for CAVI).
      n_samples_seen_: rows seen by `fit` / `partial_fit`.

    **Streaming (`partial_fit`).** The statistics are sums over rows, so chunks merge exactly
    (`kronvi.pipeline.stream_update`); what is not a sum over rows (the input standardization, the GP
    hyperparameters and the random frequencies) is fixed once by `initialize` on the rows it is given
    (`partial_fit` calls it on its first chunk unless it was called before). The targets' offset and unit and
    the features' centring are those of all rows seen (read off the statistics), so after `initialize(X, y)`
    the chunks of `X` give the model of `fit(X, y)` up to float64 summation order. `basis="features"` streams
    without the inner noise cross-validation (`noise_cv=()`).

    Example:
      >>> import numpy as np
      >>> from kronvi.sklearn import DirectRegressor
      >>> rng = np.random.default_rng(0)
      >>> X = rng.normal(size=(200, 2)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
      >>> est = DirectRegressor(n_frequencies=25, lengthscale=1.0, random_state=0).fit(X, y)
      >>> mean, std = est.predict(X[:3], return_std=True)
      >>> mean.shape, bool(est.score(X, y) > 0.9), bool(np.all(std > 0))
      ((3,), True, True)
    """

    def __init__(
        self,
        *,
        n_frequencies: int | None = None,
        basis: str = "eigen",
        lengthscale="gp",
        levels: int = 15,
        width: float | None = None,
        noise_levels: int = 15,
        noise_span: float | None = None,
        method: str = "cavi",
        starts: str | None = None,
        max_iter: int | None = None,
        gp_points: int | None = None,
        gp_restarts: int = 4,
        kernel: str = "rbf",
        feature_map: str | None = None,
        feature_budget: float | None = None,
        feature_gain: float = FEATURE_GAIN,
        compact_tol: float = 0.1,
        chunk_size: int = 2048,
        dtype: str = "float32",
        random_state=None,
    ):
        self.n_frequencies = n_frequencies
        self.basis = basis
        self.lengthscale = lengthscale
        self.levels = levels
        self.width = width
        self.noise_levels = noise_levels
        self.noise_span = noise_span
        self.method = method
        self.starts = starts
        self.max_iter = max_iter
        self.gp_points = gp_points
        self.gp_restarts = gp_restarts
        self.kernel = kernel
        self.feature_map = feature_map
        self.feature_budget = feature_budget
        self.feature_gain = feature_gain
        self.compact_tol = compact_tol
        self.chunk_size = chunk_size
        self.dtype = dtype
        self.random_state = random_state

    # ------------------------------------------------------------------ configuration

    def _config(self, *, stream: bool = False) -> DirectConfig:
        """The `DirectConfig` of the parameters; errors name the estimator's parameter."""
        _check_choice(self.basis, "basis", BASES)
        _check_choice(self.method, "method", _METHODS)
        _check_choice(self.dtype, "dtype", _DTYPES)
        _check_choice(self.kernel, "kernel", KERNEL_CHOICES)
        if self.feature_map is not None:
            _check_choice(self.feature_map, "feature_map", FEATURE_MAP_CHOICES)
        if self.feature_map not in (None, "fourier") and stream:
            raise ValueError(
                f"`feature_map` {self.feature_map!r} draws its landmarks from the rows of `fit`: not with `partial_fit`"
            )
        if self.feature_map == "auto" and self.basis == "features":
            raise ValueError(
                "`feature_map` 'auto' compares the maps by the evidence of the 'eigen' and 'compact' bases' `fit`: "
                "with `basis='features'`, name the map"
            )
        if self.feature_budget is not None:
            check_positive_number(self.feature_budget, "feature_budget")
            if stream or self.basis == "features":
                raise ValueError(
                    "`feature_budget` grows b by the evidence of the 'eigen' and 'compact' bases' `fit`: with "
                    "`basis='features'` or `partial_fit`, set `n_frequencies` (and feature_budget=None)"
                )
        check_nonnegative_number(self.feature_gain, "feature_gain")
        if not float(self.feature_gain) < np.inf:
            raise ValueError(f"`feature_gain` must be a finite number >= 0, got {self.feature_gain!r}")
        if self.kernel == "auto" and (stream or self.basis == "features"):
            raise ValueError(
                "`kernel` 'auto' compares the kernels by the evidence of the 'eigen' and 'compact' bases' `fit`: "
                "with `basis='features'` or `partial_fit`, name the kernel"
            )
        _check_positive(self.lengthscale, "lengthscale", allow=("gp",))
        if self.n_frequencies is not None:
            check_int(self.n_frequencies, "n_frequencies", 1)
        if self.width is not None:
            _check_positive(self.width, "width")
        if self.noise_span is not None and not (
            isinstance(self.noise_span, numbers.Real) and not isinstance(self.noise_span, bool)
            and self.noise_span >= 1.0
        ):  # fmt: skip
            raise ValueError(f"`noise_span` must be a number >= 1 (1 = fixed noise), got {self.noise_span!r}")
        starts = None
        if self.starts is not None:
            _check_choice(self.starts, "starts", ("gaussian", "prior", "both"))
            starts = ("prior", "gaussian") if self.starts == "both" else (self.starts,)
        for name, minimum in [
            ("levels", 2), ("noise_levels", 1), ("gp_restarts", 1), ("chunk_size", 1),
        ]:  # fmt: skip
            check_int(getattr(self, name), name, minimum)
        for name, minimum in [("max_iter", 1), ("gp_points", 2)]:  # None: the recipe's
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, minimum)
        check_nonnegative_number(self.compact_tol, "compact_tol")
        # a set `noise_span` on the "features" basis replaces its inner choice among spans (`noise_cv`)
        no_cv = stream or (self.basis == "features" and self.noise_span is not None)
        options: dict = {"width": self.width, "noise_span": self.noise_span, "starts": starts}
        if self.basis == "compact":
            options["tol"] = self.compact_tol
        if self.basis == "features" and no_cv:
            options["noise_cv"] = ()
        recipe = RECIPES[self.basis](**{k: v for k, v in options.items() if v is not None})
        return DirectConfig(
            recipe=recipe, gp=GPOptions(points=self.gp_points, restarts=self.gp_restarts),
            num_frequencies=self.n_frequencies, levels=self.levels, noise_levels=self.noise_levels,
            method=self.method, max_iter=self.max_iter, chunk_size=self.chunk_size,
            lengthscale=None if self.lengthscale == "gp" else float(self.lengthscale), kernel=self.kernel,
            feature_map="fourier" if stream and self.feature_map is None else self.feature_map,
            feature_budget=self.feature_budget, feature_gain=self.feature_gain,
        )  # fmt: skip

    def _jax_dtype(self):
        return jnp.float64 if self.dtype == "float64" else jnp.float32

    def _precision(self):
        """float64 work needs JAX's x64 mode, switched on for the call only."""
        return jax.enable_x64(True) if self.dtype == "float64" else _nullcontext()

    def _key(self):
        return jax.random.key(_seed(self.random_state))

    def _validate(self, X, y, *, reset: bool):
        X, y = validate_data(self, X, _numeric_targets(y), y_numeric=True, reset=reset, dtype=np.float64)
        _check_target_range(y)
        if reset and X.shape[0] < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 samples, got 1 sample")
        return X, y

    # ------------------------------------------------------------------ fitting

    def fit(self, X, y):
        """Fits the model on all rows: `kronvi.fit_direct(jax.random.key(random_state), X, y, config_)`.

        Args:
          X: inputs `(n, d)`, array-like.
          y: targets `(n,)`.

        Returns:
          `self`.
        """
        config = self._config()
        X, y = self._validate(X, y, reset=True)
        _check_gp_targets(y, self.lengthscale)
        self.__dict__.pop("_stream", None)
        check_fit_memory(X.shape[0], config, dtype=self._jax_dtype(), argument="n_frequencies")
        with self._precision():
            fit = fit_direct(self._key(), X, y, config, dtype=self._jax_dtype())
        self.n_samples_seen_ = X.shape[0]
        return self._keep(fit, config)

    def initialize(self, X, y):
        """Fixes the input standardization, the GP hyperparameters and the feature map from these rows
        (`kronvi.pipeline.stream_init`), and forgets every row seen so far (the next `partial_fit` starts
        from zero rows).

        Args:
          X: inputs `(n, d)`.
          y: targets `(n,)`.

        Returns:
          `self`, not yet fitted (no model) until `partial_fit` is called.
        """
        config = self._config(stream=True)
        X, y = self._validate(X, y, reset=True)
        _check_gp_targets(y, self.lengthscale)
        check_fit_memory(X.shape[0], config, dtype=self._jax_dtype(), argument="n_frequencies")
        with self._precision():
            self._stream = stream_init(self._key(), X, y, config, dtype=self._jax_dtype())
        self.n_samples_seen_ = 0
        for name in ("model_", "fit_info_"):  # not fitted until rows are added
            self.__dict__.pop(name, None)
        return self

    def partial_fit(self, X, y):
        """Adds a chunk of rows and refits the model on all rows seen so far (`kronvi.pipeline.stream_update`,
        `stream_prepare`, `fit_prepared`). The first call (unless `initialize` came first) fixes the map
        from this chunk. An estimator fitted by `fit` keeps no running statistics: `partial_fit` then starts a
        new stream from this chunk, with a `UserWarning` (call `initialize` to begin a stream that rows are added
        to).

        Args:
          X: inputs `(n_chunk, d)`.
          y: targets `(n_chunk,)`.

        Returns:
          `self`.
        """
        if not hasattr(self, "_stream"):  # neither initialize nor partial_fit so far
            if hasattr(self, "model_"):  # fitted by `fit`: it starts over, and says so
                warnings.warn(
                    f"this {type(self).__name__} was fitted by `fit`, which keeps no running statistics: "
                    "`partial_fit` starts a new stream from this chunk and replaces the fitted model. To add rows to "
                    "a model, begin with `initialize(X, y)` and add every chunk with `partial_fit`",
                    UserWarning, stacklevel=2,
                )  # fmt: skip
            self.initialize(X, y)
        config = self._config(stream=True)
        X, y = self._validate(X, y, reset=False)
        with self._precision():
            self._stream = stream_update(self._stream, X, y, chunk_size=self.chunk_size)
            fit = fit_prepared(stream_prepare(self._stream, config), config)
        self.n_samples_seen_ += X.shape[0]
        return self._keep(fit, config)

    def _keep(self, fit, config):
        model, info = fit.model, fit.info
        self.model_, self.config_, self.fit_info_ = model, config, info
        self.y_offset_, self.y_scale_ = float(model.y_offset), float(model.y_scale)
        with self._precision():
            e_s = float(noise_moments(model.q_noise, model.prior_noise)[2])
        self.noise_variance_ = e_s * self.y_scale_**2
        self.n_iter_ = max(int(info.num_iter), 1)
        self.elbo_ = float(info.final_elbo) - self.n_samples_seen_ * np.log(self.y_scale_)
        return self

    def __getstate__(self):
        """Pickles the fitted model's arrays as NumPy arrays, which keep their dtype: a `dtype="float64"`
        estimator loaded in a process without JAX's x64 mode stays float64 (its methods switch x64 on)."""
        state = dict(self.__dict__)
        if "model_" in state:
            state["model_"] = jax.tree.map(np.asarray, jax.device_get(state["model_"]))
        return state

    # ------------------------------------------------------------------ prediction

    def predict(self, X, return_std: bool = False):
        r"""Exact predictive mean (and standard deviation) of the target at new inputs (`kronvi.predict`):
        the variance includes the noise.

        Args:
          X: inputs `(N, d)`.
          return_std: also return the predictive standard deviation.

        Returns:
          `mean (N,)`, or `(mean, std)`, float64 NumPy arrays.
        """
        check_is_fitted(self, "model_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        with self._precision():
            pred = predict(self.model_, X, chunk_size=max(self.chunk_size, 1))
        mean = np.asarray(pred.mean, np.float64)
        if return_std:
            return mean, np.sqrt(np.maximum(np.asarray(pred.variance, np.float64), 0.0))
        return mean

    def sample_y(self, X, n_samples: int = 1, random_state=0):
        r"""Draws functions from the posterior and evaluates them at `X`.

        Each draw takes every weight from its posterior factor (`kronvi.quantize.sample_codes`: grid values,
        exactly) and returns `y_offset_` + `y_scale_` ($\Phi(x)^\top w$ + `kronvi.pipeline.support_shift`), the
        noise-free function, moved as `predict`'s mean (add
        $N(0,$ `noise_variance_`$)$ for new targets), laid out as in `GaussianProcessRegressor.sample_y`.

        Args:
          X: inputs `(N, d)`.
          n_samples: number of draws.
          random_state: seed (int, `None` or a `numpy.random.RandomState`).

        Returns:
          `(N, n_samples)` float64 NumPy array.
        """
        check_is_fitted(self, "model_")
        check_int(n_samples, "n_samples", 1)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        seed = check_random_state(random_state).randint(np.iinfo(np.int32).max)
        model = self.model_
        with self._precision():
            Phi = fold_features(model, X)
            codes = sample_codes(jax.random.key(seed), model.q_w, n_samples)  # (S, b)
            W = jnp.take_along_axis(model.prior_w.values, codes.T.astype(jnp.int32), axis=1)  # (b, S)
            f = matmul(Phi, W) + support_shift(model.support, Phi)[:, None]
        return np.asarray(f, np.float64) * self.y_scale_ + self.y_offset_


def _check_gp_targets(y, lengthscale):
    if lengthscale == "gp" and y.size and np.all(y == y[0]):
        raise ValueError(
            "`y` is constant in the rows that fix the GP hyperparameters (those of `initialize`, or "
            "the first chunk of `partial_fit`): pass a representative sample to `initialize`, or "
            "set a numeric `lengthscale`"
        )


class DirectClassifier(ClassifierMixin, BaseEstimator):
    r"""DIRECT mean-field logistic regression, as a scikit-learn classifier: an adapter over
    `kronvi.fit_classifier`.

    The model is $P(y = 1 \mid x, w) = \sigma(\phi(x)^\top w)$ with random Fourier, linear and constant
    features $\phi$, the prior $N(0, \sigma_w^2)$ on a grid per weight and $\sigma_w$ of the largest
    Laplace evidence; grids placed on the Laplace posterior (`grid="laplace"`) or the
    paper's even grids (`grid="paper"`); coordinate ascent from the Laplace start; exact probabilities
    $E_q[\sigma(\phi^\top w)]$ (`kronvi.logistic.predict_proba`). The parameters are the fields of
    `kronvi.ClassifierConfig`, and `DirectClassifier(random_state=k)` fits the model of
    `kronvi.fit_classifier(jax.random.key(k), X, y)`. More than two classes are fitted one-vs-rest (one
    binary model per class, the same features; `predict_proba` normalizes the per-class probabilities).

    Args:
      n_frequencies: $D$, random Fourier frequencies: `2 D` of the `2 D + d + 1` features.
      prior_scales: `None` (default): the prior sd of the weights of the largest Laplace evidence, searched
        for; or candidate sds, the best by the Laplace evidence used (`kronvi.ClassifierConfig.prior_scales`).
      levels: grid values per weight.
      width: grid half-width (`None`: 4 Laplace sds for `"laplace"`, 3 prior sds for `"paper"`).
      grid: `"laplace"` (default) or `"paper"`.
      max_iter: coordinate-ascent sweeps at most.
      tol: stop when a sweep gains less than `tol` nats per row.
      basis: `grid="laplace"` only: `"eigen"` (default: the weights rotated to the eigenbasis of the
        Laplace Hessian) or `"features"` (`kronvi.ClassifierConfig.basis`).
      dtype: `"float32"` (default) or `"float64"`.
      random_state: seed of the lengthscale's subsample and the frequencies: an int `k` (the key
        `jax.random.key(k)`), `None` or a `numpy.random.RandomState` (a seed drawn from it).

    Attributes:
      classes_: the class labels, sorted.
      n_features_in_: number of input columns $d$.
      models_: list of `kronvi.FittedClassifier`: one for two classes (of the second class), one per
        class otherwise.
      fit_info_: list of the fits' `kronvi.logistic.ClassifierInfo`.
      prior_scale_: the chosen prior sd of each fit, `(n_fits,)`.
      n_iter_: coordinate-ascent sweeps of each fit, `(n_fits,)`.
      standardizer_: the `kronvi.inputs.Standardizer` of the inputs (float64 NumPy arrays).
      feature_map_: the `kronvi.inputs.RandomFourierFeatures` (shared by every fit).
      prior_w_, q_w_: lists of each fit's `kronvi.model.DiscretePrior` and `kronvi.model.MeanField`.

    Example:
      >>> import numpy as np
      >>> from kronvi.sklearn import DirectClassifier
      >>> rng = np.random.default_rng(0)
      >>> X = rng.normal(size=(200, 2)); y = np.where(X[:, 0] ** 2 + X[:, 1] ** 2 > 1.4, "out", "in")
      >>> clf = DirectClassifier(random_state=0).fit(X, y)
      >>> clf.classes_.tolist(), clf.predict_proba(X[:2]).shape, bool(clf.score(X, y) > 0.85)
      (['in', 'out'], (2, 2), True)
    """

    def __init__(
        self,
        *,
        n_frequencies: int = 50,
        prior_scales=None,
        levels: int = 15,
        width: float | None = None,
        grid: str = "laplace",
        max_iter: int = 10,
        tol: float = 1e-3,
        basis: str = "eigen",
        dtype: str = "float32",
        random_state=None,
    ):
        self.n_frequencies = n_frequencies
        self.prior_scales = prior_scales
        self.levels = levels
        self.width = width
        self.grid = grid
        self.max_iter = max_iter
        self.tol = tol
        self.basis = basis
        self.dtype = dtype
        self.random_state = random_state

    def _classifier_config(self) -> ClassifierConfig:
        """The parameters as a checked `ClassifierConfig`; errors name the parameter."""
        _check_choice(self.dtype, "dtype", _DTYPES)
        config = ClassifierConfig(
            num_frequencies=self.n_frequencies, prior_scales=self.prior_scales, levels=self.levels,
            width=self.width, grid=self.grid, max_iter=self.max_iter, tol=self.tol, basis=self.basis,
        )  # fmt: skip
        try:
            check_classifier_config(config)
        except ValueError as e:
            raise ValueError(
                str(e).replace("`config.num_frequencies`", "`n_frequencies`").replace("`config.", "`")
            ) from None
        return config

    def _classifier_precision(self):
        return jax.enable_x64(True) if self.dtype == "float64" else _nullcontext()

    def fit(self, X, y):
        """Fits one model (two classes) or one per class (one-vs-rest) with `kronvi.fit_classifier`.

        Args:
          X: inputs `(n, d)`.
          y: class labels `(n,)`, at least two distinct values.

        Returns:
          `self`.
        """
        config = self._classifier_config()
        X, y = validate_data(self, X, y, reset=True, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes; got 1 class")
        targets = [codes == 1] if len(self.classes_) == 2 else [codes == k for k in range(len(self.classes_))]
        with self._classifier_precision():
            key = jax.random.key(_seed(self.random_state))
            dtype = jnp.float64 if self.dtype == "float64" else jnp.float32
            fits = [fit_classifier(key, X, t, config, dtype=dtype) for t in targets]
        self.models_ = [f.model for f in fits]
        self.fit_info_ = [f.info for f in fits]
        self.prior_scale_ = np.array([i.prior_scale for i in self.fit_info_])
        self.n_iter_ = np.array([max(int(i.fit.num_iter), 1) for i in self.fit_info_])
        self.standardizer_ = self.models_[0].standardizer
        self.feature_map_ = self.models_[0].features
        self.prior_w_ = [m.prior_w for m in self.models_]
        self.q_w_ = [m.q_w for m in self.models_]
        return self

    def __getstate__(self):
        """Pickles the fitted models' arrays as NumPy arrays, which keep their dtype: a `dtype="float64"`
        classifier loaded in a process without JAX's x64 mode stays float64 (its methods switch x64 on)."""
        state = dict(self.__dict__)
        for name in ("models_", "standardizer_", "feature_map_", "prior_w_", "q_w_"):
            if name in state:
                state[name] = jax.tree.map(np.asarray, jax.device_get(state[name]))
        return state

    def _log_pairs(self, X):
        """`(N, 2, n_fits)` log probabilities of each fit's negative and positive class
        (`kronvi.logistic.predict_log_proba`), float64."""
        check_is_fitted(self, "models_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        with self._classifier_precision():
            L = [np.asarray(classifier_log_proba(m, X), np.float64) for m in self.models_]
        return np.minimum(np.stack(L, axis=2), 0.0)

    def predict_proba(self, X):
        """Class probabilities `(N, n_classes)`, columns in the order of `classes_`: with two classes
        exact to the model's precision and accurate in the tails (`kronvi.logistic.predict_log_proba`), with
        more the one-vs-rest probabilities normalized.

        Args:
          X: inputs `(N, d)`.
        """
        L = self._log_pairs(X)
        if L.shape[2] == 1:
            return np.exp(L[:, :, 0])
        P = np.exp(L[:, 1, :])
        total = P.sum(axis=1, keepdims=True)
        return np.where(total > 0, P / np.where(total > 0, total, 1.0), 1.0 / P.shape[1])

    def predict_log_proba(self, X):
        """Logarithms of `predict_proba`, from the log probabilities themselves with two classes (finite
        where a probability underflows)."""
        L = self._log_pairs(X)
        if L.shape[2] == 1:
            return L[:, :, 0]
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def decision_function(self, X):
        """Log-odds of the predictive probabilities: `(N,)` for two classes (positive: `classes_[1]`),
        `(N, n_classes)` one-vs-rest otherwise; finite and ordered in the tails
        (`kronvi.logistic.predict_log_proba`).

        Args:
          X: inputs `(N, d)`.
        """
        L = self._log_pairs(X)
        logit = L[:, 1, :] - L[:, 0, :]
        return logit[:, 0] if logit.shape[1] == 1 else logit

    def predict(self, X):
        """The most probable class of each row `(N,)`.

        Args:
          X: inputs `(N, d)`.
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


def _seed(random_state) -> int:
    """The seed of `jax.random.key` for both estimators: an int as given (`ValueError` naming `random_state`
    outside [0, 2**32)), else one drawn from `check_random_state`."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if not 0 <= int(random_state) < 2**32:
            raise ValueError(
                f"`random_state` must be an int in [0, 2**32), None or a RandomState, got {random_state!r}"
            )
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
