r"""scikit-learn estimators over DIRECT regression (and, once it exists, logistic regression).

`DirectRegressor` wraps the same stages as `kronvi.pipeline` (standardize the inputs
and the targets, GP hyperparameters, random Fourier features, exact statistics, the eigenbasis recipe,
coordinate ascent) behind `fit` / `predict(X, return_std=True)` / `partial_fit`, so it drops into a
`Pipeline`, `GridSearchCV` or `clone` like `BayesianRidge` or `GaussianProcessRegressor`.

scikit-learn is imported here only: `import kronvi` does not import it. Install it with
`pip install "kronvi[sklearn]"`.

**Streaming (`partial_fit`).** The statistics $(n, y^\top y, \Phi^\top y, \Phi^\top\Phi)$ are sums over
rows, so chunks merge exactly (`kronvi.merge_stats`). What is *not* a sum over rows is
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

while `partial_fit` on chunks without `initialize` fixes the map from the first chunk (a good choice when
the first chunk is a representative sample of a few thousand rows). The statistics are accumulated in
float64 (the eigenbasis recipe needs it), and every `partial_fit` refits the posterior from all rows seen
(an eigendecomposition of a `b x b` matrix and a CAVI fit: prefer chunks of thousands of rows).

References:
  Evans & Nair (2018), *Discretely Relaxing Continuous Variables for tractable Variational Inference*.
"""

from __future__ import annotations

import functools
import numbers

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


from ._base.checks import check_int
from ._base.precision import matmul
from ._inputs.data import Standardizer
from ._inputs.features import RandomFourierFeatures, rff_features
from ._inputs.gp import GPHyperparameters, fit_gp_hyperparameters
from ._model.grids import DiscretePrior, gaussian_prior
from ._model.regression import noise_moments, predict_regression
from ._stats.eigen import eigenbasis, rotate_features
from ._stats.regression import RegressionStats, merge_stats, regression_stats_from_inputs
from .gaussian._blr import spectral_evidence_optimum
from .logistic import ClassifierConfig, fit_classifier
from .logistic import predict_proba as classifier_proba
from .logistic._recipe import check_config as check_classifier_config
from .pipeline import (
    DirectConfig,
    eigen_posterior_grid,
    evidence_noise_variance,
    fit_best_start,
    noise_prior_for_span,
    resolve_config,
)
from .quantize import sample_codes

__all__ = ["DirectClassifier", "DirectRegressor"]

_FEATURES = ("rff", "linear")
_BASES = ("eigen", "features")
_DTYPES = ("float32", "float64")
_METHODS = ("cavi", "lbfgs")


def _features_of(feature_map, Xs):
    """Standardized inputs through the feature map (`None`: the linear features, the inputs themselves)."""
    return Xs if feature_map is None else rff_features(feature_map, Xs)


def _augmented_features(feature_map, Xs):
    """`[Phi(Xs), 1]`: the constant column carries the sums that re-centre y exactly."""
    Phi = _features_of(feature_map, Xs)
    return jnp.concatenate([Phi, jnp.ones((Phi.shape[0], 1), Phi.dtype)], axis=1)


@jax.jit
def _predict_moments(feature_map, basis, q_w, q_noise, prior_w, prior_noise, Xs):
    Phi = _features_of(feature_map, Xs)
    Phi = Phi if basis is None else rotate_features(basis, Phi)
    return Phi, predict_regression(q_w, q_noise, prior_w, prior_noise, Phi)


def _standardized(standardizer, X, dtype=np.float64):
    """`(X - mean) / scale` computed in float64 (the precision of the validated inputs, so that a large
    offset loses nothing), then cast to `dtype`; `ValueError` naming `X` when the values overflow."""
    Xs = (X - standardizer.mean) / standardizer.scale
    if Xs.size and not np.max(np.abs(Xs)) <= np.finfo(dtype).max:
        raise ValueError(
            f"`X` holds values too far from the training inputs: standardized, they overflow {np.dtype(dtype)}"
        )
    return Xs.astype(dtype)


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


def _target_scale(sd, offset):
    """The unit the model measures targets in: their standard deviation `sd`, at least `1e-6 |offset|`
    (below that the spread is rounding of a constant), and 1 when both are zero. Proportional to the
    units of y, so that the fit is equivariant to them."""
    scale = max(float(sd), 1e-6 * abs(float(offset)))
    return scale if scale > 0 and np.isfinite(scale) else 1.0


def _column_sd(y):
    """The standard deviation of `y`, scaled by a power of two first so that no square overflows."""
    unit = np.ldexp(1.0, np.frexp(np.max(np.abs(y)))[1]) if y.size else 1.0
    return float(np.std(y / unit)) * unit


def _bucket(n: int, chunk: int, minimum: int = 32) -> int:
    """Rows padded to a power of two (at least `minimum`), or to a multiple of `chunk` beyond it, so that
    data of many sizes share a few compiled programs."""
    size = max(minimum, 1 << max(0, int(n) - 1).bit_length())
    return size if size <= chunk else -(-int(n) // chunk) * chunk


def _pad_rows(a, rows: int):
    return (
        np.concatenate([a, np.zeros((rows - a.shape[0],) + a.shape[1:], a.dtype)]) if rows > a.shape[0] else a
    )


def _centred_stats(aug: RegressionStats):
    r"""Statistics of the features with $y$ centred on its mean, from those of `[Phi, 1]` and raw $y$.

    With $s = \sum_i \phi_i$, $n$ and $\sum_i y_i$ read off the constant column and $c = \sum_i y_i / n$:
    $\Phi^\top(y - c) = \Phi^\top y - c\,s$ and $\|y - c\|^2 = y^\top y - n c^2$. Returns `(stats, c)`."""
    n = aug.PhitPhi[-1, -1]
    c = aug.Phity[-1] / n
    yty = jnp.maximum(aug.yty - n * c**2, 0.0)
    stats = RegressionStats(aug.n, yty, aug.Phity[:-1] - c * aug.PhitPhi[:-1, -1], aug.PhitPhi[:-1, :-1])
    return stats, c


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
    r"""DIRECT mean-field regression with random Fourier features, as a scikit-learn regressor.

    The model is $y = \Phi(x)^\top w + \varepsilon$ with a discrete prior on every weight and on the noise
    variance, fitted by maximizing the exact ELBO (`kronvi.fit_regression`). `fit`
    follows `kronvi.pipeline.prepare_fold` and
    `kronvi.pipeline.fit_prepared`: standardize the inputs (in float64) and
    the targets (`y_offset_`, `y_scale_`: predictions are equivariant to the units of y), fit GP
    hyperparameters on at most `gp_points` rows
    (`kronvi.fit_gp_hyperparameters`), draw `n_frequencies` random
    frequencies, accumulate the statistics in float64, then

    - `basis="eigen"` (default): rotate to the eigenbasis of $\Phi^\top\Phi$
      (`kronvi.eigenbasis`), centre the noise grid on the exact-evidence optimum and
      place each weight's `levels` values on ±`width` posterior sds: the accuracy of exact Bayesian linear
      regression on the same features;
    - `basis="features"`: the paper's recipe, one grid of `levels` values on ±`width` prior sds with a zero
      level for every feature weight: sparse 4-bit posteriors
      (`kronvi.sample_codes`), less accurate.

    `predict(X, return_std=True)` returns the exact predictive mean and standard deviation of a new target
    (noise included), as `BayesianRidge` does. See the module docstring for `partial_fit`.

    Args:
      n_frequencies: $D$, the number of random frequencies: $b = 2D$ features (a cosine and a sine each;
        `features="rff"` only).
      features: `"rff"` (random Fourier features of an RBF kernel) or `"linear"` (the standardized inputs
        themselves, $b = d$).
      lengthscale: `"gp"` (the GP marginal-likelihood estimate, per input) or a positive number (one
        lengthscale in standardized input units; the signal variance is then the target variance and no GP
        is fitted).
      prior_scale: the prior sd $\sigma_w$ of the weights: `"auto"` or a positive number (in target
        units). `"auto"` with `basis="eigen"` and `noise="auto"`: the prior sd and the noise variance that
        jointly maximize the exact evidence
        (`kronvi.spectral_evidence_optimum`, as `BayesianRidge` chooses
        them), from the GP's values; otherwise the GP signal sd for `"rff"` with `lengthscale="gp"`, else
        the target sd for `"rff"` and target sd $/\sqrt d$ for `"linear"`.
      basis: `"eigen"` or `"features"`, above.
      levels: grid values per weight (15: 4-bit codes).
      width: grid half-width in posterior sds (`"eigen"`, default 6) or prior sds (`"features"`, default 3).
      noise: the centre $s^2$ of the noise-variance grid: `"auto"` (the exact-evidence optimum for
        `"eigen"`; the GP estimate, else a tenth of the target variance, for `"features"`) or a positive
        number.
      noise_levels: values on the noise grid.
      noise_span: the noise grid is $s^2 \times [1/\text{span}, \text{span}]$ (default 3 for `"eigen"`,
        10 for `"features"`); 1 fixes the noise variance at $s^2$.
      method: `"cavi"` (coordinate ascent, the default) or `"lbfgs"`.
      starts: starting points of the fit, `"gaussian"`, `"prior"` or `"both"` (the highest ELBO is kept);
        default: `"prior"` for `"eigen"` (diagonal coordinate ascent), `"both"` for `"features"`.
      max_iter: iterations of the fit (default: the method's).
      gp_points: the most rows used by the GP hyperparameter fit (a subsample of larger data), >= 2.
      gp_restarts: starts of the GP hyperparameter fit, >= 1.
      chunk_size: rows per block when accumulating the statistics.
      dtype: `"float32"` (default) or `"float64"`, the working precision of features and fits (the
        statistics are always accumulated in float64).
      random_state: seed of the GP subsample, the random frequencies and the fit (int, `None` or a
        `numpy.random.RandomState`).

    Attributes:
      n_features_in_: number of input columns $d$.
      standardizer_: `kronvi.Standardizer` of the inputs, float64 NumPy arrays
        (inputs are standardized in float64, then cast to `dtype`).
      hyperparameters_: `kronvi.GPHyperparameters` used for the features and the
        prior, in the units of the targets, float64 NumPy arrays: the GP estimate, or the fixed lengthscale
        with the variance of all targets seen.
      feature_map_: `kronvi.RandomFourierFeatures`, or `None` for `"linear"`.
      y_offset_: mean of all targets seen.
      y_scale_: standard deviation of all targets seen (at least `1e-6 |y_offset_|`; 1 when both are 0).
        The model is fitted to the standardized targets $(y -$ `y_offset_`$)/$`y_scale_`, so that its
        predictions are equivariant to the units of y and no float32 statistic overflows.
      stats_: `kronvi.RegressionStats` of the features and the standardized
        targets of all rows seen, float64, before any rotation.
      basis_: `kronvi.Eigenbasis` for `"eigen"`, else `None`.
      prior_scale_: the prior sd $\sigma_w$ of the weights used by the last fit, in target units.
      prior_w_: the `kronvi.DiscretePrior` grid of the weights `(b, levels)`, for the
        standardized targets.
      prior_noise_: the `kronvi.DiscretePrior` grid of the noise variance
        `(1, noise_levels)`, for the standardized targets.
      q_w_: the fitted `kronvi.MeanField` posterior of the weights `(b, levels)`.
      q_noise_: the fitted `kronvi.MeanField` posterior of the noise variance
        `(1, noise_levels)`.
      noise_variance_: posterior mean of the noise variance, in squared target units.
      elbo_: the final ELBO (nats) of the targets in their own units.
      fit_info_: the fit's `kronvi.FitInfo` (its trace: ELBOs of the standardized targets).
      n_iter_: iterations of the fit (sweeps for CAVI).
      n_samples_seen_: rows seen by `fit` / `partial_fit`.

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
        n_frequencies: int = 1000,
        features: str = "rff",
        lengthscale="gp",
        prior_scale="auto",
        basis: str = "eigen",
        levels: int = 15,
        width: float | None = None,
        noise="auto",
        noise_levels: int = 15,
        noise_span: float | None = None,
        method: str = "cavi",
        starts: str | None = None,
        max_iter: int | None = None,
        gp_points: int = 1000,
        gp_restarts: int = 4,
        chunk_size: int = 2048,
        dtype: str = "float32",
        random_state=None,
    ):
        self.n_frequencies = n_frequencies
        self.features = features
        self.lengthscale = lengthscale
        self.prior_scale = prior_scale
        self.basis = basis
        self.levels = levels
        self.width = width
        self.noise = noise
        self.noise_levels = noise_levels
        self.noise_span = noise_span
        self.method = method
        self.starts = starts
        self.max_iter = max_iter
        self.gp_points = gp_points
        self.gp_restarts = gp_restarts
        self.chunk_size = chunk_size
        self.dtype = dtype
        self.random_state = random_state

    # ------------------------------------------------------------------ configuration

    def _check_params(self):
        _check_choice(self.features, "features", _FEATURES)
        _check_choice(self.basis, "basis", _BASES)
        _check_choice(self.method, "method", _METHODS)
        _check_choice(self.dtype, "dtype", _DTYPES)
        check_int(self.n_frequencies, "n_frequencies", 1)
        _check_positive(self.lengthscale, "lengthscale", allow=("gp",))
        _check_positive(self.prior_scale, "prior_scale", allow=("auto",))
        _check_positive(self.noise, "noise", allow=("auto",))
        check_int(self.levels, "levels", 2)
        check_int(self.noise_levels, "noise_levels", 1)
        check_int(self.gp_points, "gp_points", 2)
        check_int(self.gp_restarts, "gp_restarts", 1)
        check_int(self.chunk_size, "chunk_size", 1)
        if self.width is not None:
            _check_positive(self.width, "width")
        if self.noise_span is not None and not (
            isinstance(self.noise_span, numbers.Real) and not isinstance(self.noise_span, bool)
            and self.noise_span >= 1.0
        ):  # fmt: skip
            raise ValueError(f"`noise_span` must be a number >= 1 (1 = fixed noise), got {self.noise_span!r}")
        if self.starts is not None:
            _check_choice(self.starts, "starts", ("gaussian", "prior", "both"))
        if self.max_iter is not None:
            check_int(self.max_iter, "max_iter", 1)

    def _config(self) -> DirectConfig:
        starts = None
        if self.starts is not None:
            starts = ("prior", "gaussian") if self.starts == "both" else (self.starts,)
        config = resolve_config(
            DirectConfig(
                basis=self.basis, levels=self.levels, width=self.width, noise_levels=self.noise_levels,
                noise_span=self.noise_span, noise_cv=(), method=self.method, max_iter=self.max_iter,
                starts=starts, chunk_size=self.chunk_size,
            )
        )  # fmt: skip
        return config

    def _jax_dtype(self):
        return jnp.float64 if self.dtype == "float64" else jnp.float32

    def _precision(self):
        """float64 work needs JAX's x64 mode, switched on for the call only."""
        return jax.enable_x64(True) if self.dtype == "float64" else _nullcontext()

    # ------------------------------------------------------------------ fitting

    def initialize(self, X, y):
        """Fixes the input standardization, the GP hyperparameters and the feature map from these rows, and
        forgets every statistic seen so far (the next `partial_fit` starts from zero rows).

        `fit(X, y)` is `initialize(X, y)` followed by one chunk of all rows; call it on a representative
        sample before streaming chunks with `partial_fit` (see the module docstring).

        Args:
          X: inputs `(n, d)`.
          y: targets `(n,)`.

        Returns:
          `self`, not yet fitted (no posterior) until `partial_fit` is called.
        """
        self._check_params()
        X, y = validate_data(self, X, _numeric_targets(y), y_numeric=True, reset=True, dtype=np.float64)
        _check_target_range(y)
        if X.shape[0] < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 samples, got 1 sample")
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        k_gp, _, k_fit = jax.random.split(jax.random.key(seed), 3)
        std = _standardizer(X)
        y_shift = float(np.mean(y))
        y_unit = _target_scale(_column_sd(y - y_shift), y_shift)  # the unit of the accumulated statistics
        d = X.shape[1]
        if self.features == "rff" and self.lengthscale == "gp":
            if np.all(y == y[0]):
                raise ValueError(
                    "`y` is constant in the rows that fix the GP hyperparameters (those of `initialize`, or "
                    "the first chunk of `partial_fit`): pass a representative sample to `initialize`, or "
                    "set a numeric `lengthscale`"
                )
            with self._precision():
                dtype = self._jax_dtype()
                gp_rule = DirectConfig()
                hyper, _ = fit_gp_hyperparameters(
                    k_gp, jnp.asarray(_standardized(std, X, dtype)), jnp.asarray((y - y_shift) / y_unit, dtype),
                    num_points=self.gp_points, num_starts=self.gp_restarts,
                    degenerate_margin=gp_rule.gp_degenerate_margin, restarts=gp_rule.gp_restart_rule,
                    screen_points=gp_rule.gp_screen_points, gain_tol=gp_rule.gp_gain_tol,
                )  # fmt: skip
            hyper = GPHyperparameters(
                np.asarray(hyper.lengthscales, np.float64),
                np.asarray(hyper.signal_variance, np.float64) * y_unit**2,
                np.asarray(hyper.noise_variance, np.float64) * y_unit**2,
            )
        else:  # the variances are those of all rows seen, set by every fit
            ls = 1.0 if self.lengthscale == "gp" else float(self.lengthscale)
            signal = y_unit**2 if self.features == "rff" else y_unit**2 / d
            hyper = GPHyperparameters(np.full((d,), ls), np.asarray(signal), np.asarray(0.1 * y_unit**2))
        fmap = None
        if self.features == "rff":
            with self._precision():
                fmap = _frequencies(seed, hyper.lengthscales, self.n_frequencies, self._jax_dtype())
        self.standardizer_ = std
        self.hyperparameters_ = hyper
        self.feature_map_ = fmap
        self._y_shift, self._y_unit = y_shift, y_unit
        self._fit_key = k_fit
        self._augmented_stats = None
        self.n_samples_seen_ = 0
        for name in ("q_w_", "q_noise_"):  # not fitted until rows are added
            self.__dict__.pop(name, None)
        return self

    def _accumulate(self, X, y):
        n = X.shape[0]
        rows = _bucket(n, self.chunk_size)
        mask = np.arange(rows) < n
        Xs = _standardized(self.standardizer_, X)
        with jax.enable_x64(True):
            f64 = functools.partial(jax.tree.map, functools.partial(jnp.asarray, dtype=jnp.float64))
            feature_fn = functools.partial(_augmented_features, f64(self.feature_map_))
            stats = regression_stats_from_inputs(
                feature_fn, f64(_pad_rows(Xs, rows)), f64(_pad_rows((y - self._y_shift) / self._y_unit, rows)),
                chunk_size=min(rows, self.chunk_size), mask=None if rows == n else mask,
            )  # fmt: skip
            if self._augmented_stats is not None:
                stats = merge_stats(self._augmented_stats, stats)
            self._augmented_stats = jax.device_get(stats)
        self.n_samples_seen_ += X.shape[0]

    def _fit_posterior(self):
        config = self._config()
        dtype = self._jax_dtype()
        with jax.enable_x64(True):
            f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
            stats, c = _centred_stats(jax.tree.map(f64, self._augmented_stats))
            # standardize the targets of all rows seen: from units of `_y_unit` to units of `y_scale`
            y_offset = self._y_shift + float(c) * self._y_unit
            sd = float(jnp.sqrt(stats.yty / stats.n)) * self._y_unit
            y_scale = _target_scale(sd, y_offset)
            r = self._y_unit / y_scale
            stats = RegressionStats(stats.n, stats.yty * r**2, stats.Phity * r, stats.PhitPhi)
            b = stats.Phity.shape[0]
            hyper = self.hyperparameters_
            if not (self.features == "rff" and self.lengthscale == "gp"):  # the variance of all rows seen
                signal = y_scale**2 if self.features == "rff" else y_scale**2 / self.n_features_in_
                hyper = GPHyperparameters(
                    hyper.lengthscales, np.asarray(signal), np.asarray(0.1 * y_scale**2)
                )
            if self.prior_scale == "auto":
                scale = np.sqrt(hyper.signal_variance) / y_scale
            else:
                scale = float(self.prior_scale) / y_scale
            guess = hyper.noise_variance if self.noise == "auto" else float(self.noise)
            scale, guess = f64(scale), f64(guess / y_scale**2)
            if self.basis == "eigen":
                rotated, basis = eigenbasis(stats)
                if self.noise == "auto" and self.prior_scale == "auto":  # both by the exact evidence
                    scale, s2 = spectral_evidence_optimum(
                        basis.eigenvalues, rotated.Phity, rotated.yty, rotated.n, scale, guess
                    )
                elif self.noise == "auto":
                    s2 = evidence_noise_variance(rotated, basis, scale, guess)
                else:
                    s2 = guess
                prior_w = eigen_posterior_grid(
                    rotated, basis, scale, s2, levels=config.levels, width=config.width
                )
                fit_stats = rotated
            else:
                basis = None
                s2 = guess
                prior_w = gaussian_prior(b, scale, levels=config.levels, width=config.width)
                fit_stats = stats
            self.stats_ = jax.device_get(stats)
            to = functools.partial(jnp.asarray, dtype=dtype)
            fit_stats, basis, s2 = jax.tree.map(to, (fit_stats, basis, s2))
            prior_w = DiscretePrior(to(prior_w.values), to(prior_w.log_probs))
        with self._precision():
            prior_n = noise_prior_for_span(s2, config.noise_span, config.noise_levels)
            q_w, q_n, info = fit_best_start(fit_stats, prior_w, prior_n, config, key=self._fit_key)
            noise = float(noise_moments(q_n, prior_n)[2])
        self.hyperparameters_ = hyper
        self.prior_scale_ = float(scale) * y_scale
        self.y_offset_, self.y_scale_ = y_offset, y_scale
        self.noise_variance_ = noise * y_scale**2
        self.basis_ = basis
        self.prior_w_, self.prior_noise_ = prior_w, prior_n
        self.q_w_, self.q_noise_ = q_w, q_n
        self.fit_info_ = info
        self.n_iter_ = max(int(info.num_iter), 1)
        # the density of y is that of the standardized targets divided by y_scale per row
        self.elbo_ = float(info.final_elbo) - self.n_samples_seen_ * np.log(y_scale)
        return self

    def fit(self, X, y):
        """Fits the posterior on all rows: `initialize(X, y)`, then the statistics of every row.

        Args:
          X: inputs `(n, d)`, array-like.
          y: targets `(n,)`.

        Returns:
          `self`.
        """
        self.initialize(X, y)
        X, y = validate_data(self, X, _numeric_targets(y), y_numeric=True, reset=False, dtype=np.float64)
        _check_target_range(y)
        self._accumulate(X, y)
        return self._fit_posterior()

    def partial_fit(self, X, y):
        """Adds a chunk of rows and refits the posterior on all rows seen so far.

        The first call (unless `initialize` came first) fixes
        the standardization, GP hyperparameters and feature map from this chunk. Statistics merge exactly
        (`kronvi.merge_stats`) and the targets are standardized by the mean and
        standard deviation of all rows, so after `initialize(X, y)` the chunks of `X` give the model of `fit(X, y)`.

        Args:
          X: inputs `(n_chunk, d)`.
          y: targets `(n_chunk,)`.

        Returns:
          `self`.
        """
        if not hasattr(self, "_augmented_stats"):  # neither initialize nor fit so far
            self.initialize(X, y)
        else:
            self._check_params()
        X, y = validate_data(self, X, _numeric_targets(y), y_numeric=True, reset=False, dtype=np.float64)
        _check_target_range(y)
        self._accumulate(X, y)
        return self._fit_posterior()

    # ------------------------------------------------------------------ prediction

    def _moments(self, X):
        """`(Phi, (mean, var))` at the inputs `X`, in the working dtype, for the standardized targets."""
        check_is_fitted(self, ("q_w_", "q_noise_"))
        X = validate_data(self, X, reset=False, dtype=np.float64)
        n = X.shape[0]
        dtype = self.q_w_.logits.dtype
        Xs = jnp.asarray(_pad_rows(_standardized(self.standardizer_, X, dtype), _bucket(n, 1 << 30)))
        Phi, (mean, var) = _predict_moments(
            self.feature_map_, self.basis_, self.q_w_, self.q_noise_, self.prior_w_, self.prior_noise_, Xs
        )
        return Phi[:n], (mean[:n], var[:n])

    def predict(self, X, return_std: bool = False):
        r"""Exact predictive mean (and standard deviation) of the target at new inputs.

        The mean is `y_offset_` + `y_scale_` $\Phi(x)^\top E_q[w]$; the variance, `y_scale_`$^2$ times
        $\sum_j \Phi_j(x)^2\,\mathrm{Var}_q(w_j) + E_q[\sigma^2]$, includes the noise
        (`kronvi.predict_regression` of the standardized targets).

        Args:
          X: inputs `(N, d)`.
          return_std: also return the predictive standard deviation.

        Returns:
          `mean (N,)`, or `(mean, std)`, float64 NumPy arrays.
        """
        with self._precision():
            _, (mean, var) = self._moments(X)
        mean = np.asarray(mean, np.float64) * self.y_scale_ + self.y_offset_
        if return_std:
            return mean, np.sqrt(np.maximum(np.asarray(var, np.float64), 0.0)) * self.y_scale_
        return mean

    def sample_y(self, X, n_samples: int = 1, random_state=0):
        r"""Draws functions from the posterior and evaluates them at `X`.

        Each draw takes every weight from its posterior factor (`kronvi.sample_codes`:
        grid values, exactly) and returns `y_offset_` + `y_scale_` $\Phi(x)^\top w$, the noise-free function
        (add $N(0,$ `noise_variance_`$)$ for new targets), laid out as in `GaussianProcessRegressor.sample_y`.

        Args:
          X: inputs `(N, d)`.
          n_samples: number of draws.
          random_state: seed (int, `None` or a `numpy.random.RandomState`).

        Returns:
          `(N, n_samples)` float64 NumPy array.
        """
        check_int(n_samples, "n_samples", 1)
        seed = check_random_state(random_state).randint(np.iinfo(np.int32).max)
        with self._precision():
            Phi, _ = self._moments(X)
            codes = sample_codes(jax.random.key(seed), self.q_w_, n_samples)  # (S, b)
            W = jnp.take_along_axis(self.prior_w_.values, codes.T.astype(jnp.int32), axis=1)  # (b, S)
            f = matmul(Phi, W)
        return np.asarray(f, np.float64) * self.y_scale_ + self.y_offset_


class DirectClassifier(ClassifierMixin, BaseEstimator):
    r"""DIRECT mean-field logistic regression, as a scikit-learn classifier: an adapter over
    `kronvi.fit_classifier`.

    The model is $P(y = 1 \mid x, w) = \sigma(\phi(x)^\top w)$ with random Fourier, linear and constant
    features $\phi$, the prior $N(0, \sigma_w^2)$ on a grid per weight and $\sigma_w$ chosen among
    `prior_scales` by the Laplace evidence; grids placed on the Laplace posterior (`grid="laplace"`) or the
    paper's even grids (`grid="paper"`); coordinate ascent from the Laplace start; exact probabilities
    $E_q[\sigma(\phi^\top w)]$ (`kronvi.logistic.predict_proba`). The parameters are the fields of
    `kronvi.ClassifierConfig`, and `DirectClassifier(random_state=k)` fits the model of
    `kronvi.fit_classifier(jax.random.key(k), X, y)`. More than two classes are fitted one-vs-rest (one
    binary model per class, the same features; `predict_proba` normalizes the per-class probabilities).

    Args:
      n_frequencies: $D$, random Fourier frequencies: `2 D` of the `2 D + d + 1` features.
      prior_scales: candidate prior sds of the weights, chosen by the Laplace evidence.
      levels: grid values per weight.
      width: grid half-width (`None`: 4 Laplace sds for `"laplace"`, 3 prior sds for `"paper"`).
      grid: `"laplace"` (default) or `"paper"`.
      max_iter: coordinate-ascent sweeps at most.
      tol: stop when a sweep gains less than `tol` nats per row.
      dtype: `"float32"` (default) or `"float64"`.
      random_state: seed of the lengthscale's subsample and the frequencies: an int `k` (the key
        `jax.random.key(k)`), `None` or a `numpy.random.RandomState` (a seed drawn from it).

    Attributes:
      classes_: the class labels, sorted.
      n_features_in_: number of input columns $d$.
      models_: list of `kronvi.FittedClassifier`: one for two classes (of the second class), one per
        class otherwise.
      fit_info_: list of the fits' `kronvi.ClassifierInfo`.
      prior_scale_: the chosen prior sd of each fit, `(n_fits,)`.
      n_iter_: coordinate-ascent sweeps of each fit, `(n_fits,)`.
      standardizer_: the `kronvi.Standardizer` of the inputs (float64 NumPy arrays).
      feature_map_: the `kronvi.RandomFourierFeatures` (shared by every fit).
      prior_w_, q_w_: lists of each fit's `kronvi.DiscretePrior` and `kronvi.MeanField`.

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
        prior_scales=(1.0, 3.0, 10.0, 30.0),
        levels: int = 15,
        width: float | None = None,
        grid: str = "laplace",
        max_iter: int = 10,
        tol: float = 1e-3,
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
        self.dtype = dtype
        self.random_state = random_state

    def _classifier_config(self) -> ClassifierConfig:
        """The parameters as a checked `ClassifierConfig`; errors name the parameter."""
        _check_choice(self.dtype, "dtype", _DTYPES)
        config = ClassifierConfig(
            num_frequencies=self.n_frequencies, prior_scales=self.prior_scales, levels=self.levels,
            width=self.width, grid=self.grid, max_iter=self.max_iter, tol=self.tol,
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
            key = jax.random.key(_classifier_seed(self.random_state))
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

    def _positive_probs(self, X):
        """`(N, n_fits)` probabilities of each fit's positive class."""
        check_is_fitted(self, "models_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        with self._classifier_precision():
            P = [np.asarray(classifier_proba(m, X), np.float64) for m in self.models_]
        return np.clip(np.stack(P, axis=1), 0.0, 1.0)

    def predict_proba(self, X):
        """Class probabilities `(N, n_classes)`, columns in the order of `classes_`.

        Args:
          X: inputs `(N, d)`.
        """
        P = self._positive_probs(X)
        if P.shape[1] == 1:
            return np.hstack([1.0 - P, P])
        total = P.sum(axis=1, keepdims=True)
        return np.where(total > 0, P / np.where(total > 0, total, 1.0), 1.0 / P.shape[1])

    def predict_log_proba(self, X):
        """Logarithms of `predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def decision_function(self, X):
        """Log-odds of the predictive probabilities: `(N,)` for two classes (positive: `classes_[1]`),
        `(N, n_classes)` one-vs-rest otherwise.

        Args:
          X: inputs `(N, d)`.
        """
        P = np.clip(self._positive_probs(X), 1e-300, 1.0 - 1e-16)
        logit = np.log(P) - np.log1p(-P)
        return logit[:, 0] if logit.shape[1] == 1 else logit

    def predict(self, X):
        """The most probable class of each row `(N,)`.

        Args:
          X: inputs `(N, d)`.
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


def _classifier_seed(random_state) -> int:
    """The seed of `jax.random.key`: an int as given, else one drawn from `check_random_state`."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def _frequencies(seed: int, lengthscales, num_frequencies: int, dtype) -> RandomFourierFeatures:
    """`kronvi.rff_init`'s draw, $W_{dj} = z_{dj} / \\ell_d$, from a NumPy generator
    seeded by `seed`: the same frequencies for every input dimension without a compile per dimension."""
    ls = np.asarray(lengthscales, np.float64)
    z = np.random.default_rng(seed).standard_normal((ls.shape[0], int(num_frequencies)))
    return RandomFourierFeatures(jnp.asarray(z / ls[:, None], dtype))


def _standardizer(X) -> Standardizer:
    """`kronvi.fit_standardizer`'s rule (moments of each column scaled by a
    power of two, scale 1 for constant columns) on the float64 inputs, in NumPy, so that data of every
    shape do not each compile a program. Float64 NumPy arrays."""
    unit = np.ldexp(1.0, np.frexp(np.max(np.abs(X), axis=0))[1])
    Z = X / unit
    mean = Z.mean(axis=0)
    std = np.sqrt(((Z - mean) ** 2).mean(axis=0))
    constant = ~(std > 100 * np.finfo(np.float64).eps * np.abs(mean))
    return Standardizer(mean * unit, np.where(constant, 1.0, std * unit))  # type: ignore[arg-type]  # NumPy fields


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
