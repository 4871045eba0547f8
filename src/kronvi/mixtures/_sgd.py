r"""Stochastic-gradient ascent on the exact ELBO of a mixture posterior (the paper's "Mixture SGD").

The optax/blackjax shape: `mixture_sgd_init` returns a state, `mixture_sgd_step` maps
`(key, stats, state, ...)` to `(state, info)`, and `fit_mixture_sgd` runs the steps in `lax.scan`. The
optimizer is captured in a closure built once per optimizer configuration
(`kronvi._solvers.optimizers.cache_by_optimizer`), never passed as a static `jit` argument, so
fresh but equal optimizers (two calls of `optax.adam(1e-2)`) share one compiled program.

References:
  Evans & Nair (2018), section 4 and Table 2 ("5-Mixture SGD").
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import optax
from jax import lax

from .._base.checks import check_int, check_optimizer
from .._base.deprecation import reordered_arguments
from .._base.progress import ProgressCallback, check_progress, progress_scope
from .._model.families import MeanField
from .._model.grids import DiscretePrior
from .._solvers.optimizers import cache_by_optimizer
from .._solvers.sgd import run_sgd, sgd_step
from .._stats.regression import RegressionStats
from ._bounds import noise_cavi_logits
from ._estimators import estimator_fn
from ._family import Mixture, MixtureFit, MixturePrior, check_mixture, check_mixture_args

NOISE_UPDATES = ("cavi", "gradient")


class MixtureSGDState(NamedTuple):
    """State of `mixture_sgd_step`: the current posterior and the optax state.

    Attributes:
      q: `Mixture` over the weights.
      q_noise: `MeanField` `(1, m_sigma)` over the noise variance.
      opt_state: the optimizer's state for the parameters
        `(q.logits, q.weight_logits, q_noise.logits)`.
    """

    q: Mixture
    q_noise: MeanField
    opt_state: optax.OptState


class MixtureSGDInfo(NamedTuple):
    r"""Diagnostics of one `mixture_sgd_step` (stacked over steps by `fit_mixture_sgd`).

    Attributes:
      elbo: unbiased estimate of the ELBO at the parameters *before* the step (same draws as the
        gradient).
      elbo_stderr: its Monte Carlo standard error.
      grad_norm: norm of the stochastic gradient of $-\mathcal{L}/n$.
    """

    elbo: jax.Array
    elbo_stderr: jax.Array
    grad_norm: jax.Array


def _check_noise_update(noise_update):
    if noise_update not in NOISE_UPDATES:
        raise ValueError(f"`noise_update` must be one of {NOISE_UPDATES}, got {noise_update!r}")


def _params(q, q_noise):
    return (q.logits, q.weight_logits, q_noise.logits)


def _objective(stats, prior_w, prior_noise, num_samples, noise_update, estimator):
    """The step objective `(key, params) -> (-surrogate / n, {"elbo", "elbo_stderr"})`
    (`kronvi._solvers.sgd`); with `noise_update="cavi"` the noise logits get no gradient."""
    estimate = estimator_fn(estimator)

    def objective(key, params):
        lw, wl, ln = params
        if noise_update == "cavi":
            ln = lax.stop_gradient(ln)
        q, qn = Mixture._unchecked(lw, wl), MeanField._unchecked(ln)
        surrogate, est, se = estimate(key, q, qn, prior_w, prior_noise, stats, num_samples=num_samples)
        return -surrogate / stats.n, {"elbo": est, "elbo_stderr": se}

    return objective


def _cavi_noise(stats, prior_w, prior_noise, noise_update):
    """With `noise_update="cavi"`, the projection that sets the noise logits to their exact optimum
    given the mixture (`None` otherwise)."""
    if noise_update != "cavi":
        return None

    def project(params):
        lw, wl, _ = params
        return lw, wl, noise_cavi_logits(Mixture._unchecked(lw, wl), prior_w, prior_noise, stats)

    return project


def _state(params, opt_state):
    lw, wl, ln = params
    return MixtureSGDState(Mixture._unchecked(lw, wl), MeanField._unchecked(ln), opt_state)


@cache_by_optimizer
def _compiled_step(optimizer):
    def step(key, state, stats, prior_w, prior_noise, *, num_samples, noise_update, estimator):
        objective = _objective(stats, prior_w, prior_noise, num_samples, noise_update, estimator)
        params, opt_state, info = sgd_step(
            optimizer, objective, key, _params(state.q, state.q_noise), state.opt_state, info=MixtureSGDInfo,
            project=_cavi_noise(stats, prior_w, prior_noise, noise_update),
        )  # fmt: skip
        return _state(params, opt_state), info

    return jax.jit(step, static_argnames=("num_samples", "noise_update", "estimator"))


@cache_by_optimizer
def _compiled_fit(optimizer):
    def fit(
        key, q, q_noise, stats, prior_w, prior_noise, progress, *, num_steps, num_samples, noise_update,
        estimator,
    ):  # fmt: skip
        if noise_update == "cavi":
            q_noise = MeanField._unchecked(noise_cavi_logits(q, prior_w, prior_noise, stats))
        params, _, info = run_sgd(
            optimizer, _objective(stats, prior_w, prior_noise, num_samples, noise_update, estimator),
            _params(q, q_noise), key, num_steps=num_steps, info=MixtureSGDInfo,
            project=_cavi_noise(stats, prior_w, prior_noise, noise_update), progress=progress,
        )  # fmt: skip
        state = _state(params, None)  # the posterior: the optimizer's state is not returned
        return MixtureFit(state.q, state.q_noise, None, info)

    return jax.jit(fit, static_argnames=("num_steps", "num_samples", "noise_update", "estimator"))


def mixture_sgd_init(
    q: Mixture, q_noise: MeanField, *, optimizer: optax.GradientTransformation
) -> MixtureSGDState:
    r"""Initial `MixtureSGDState` for `mixture_sgd_step`.

    Args:
      q: `Mixture` to start from (e.g. `mixture_from_mean_field`).
      q_noise: `MeanField` `(1, m_sigma)`.
      optimizer: an `optax.GradientTransformation` (it minimizes $-\mathcal{L}/n$).

    Returns:
      A `MixtureSGDState`.

    Example:
      >>> import jax.numpy as jnp, optax, kronvi
      >>> q = kronvi.mixtures.Mixture(jnp.zeros((2, 3, 4)), jnp.zeros(2))
      >>> state = kronvi.mixtures.mixture_sgd_init(q, kronvi.model.MeanField(jnp.zeros((1, 5))), optimizer=optax.adam(0.1))
      >>> state.opt_state[0].mu[0].shape
      (2, 3, 4)
    """
    check_mixture(q)
    if not isinstance(q_noise, MeanField):
        raise TypeError(f"`q_noise` must be a MeanField, got {type(q_noise).__name__}")
    check_optimizer(optimizer)
    return MixtureSGDState(q, q_noise, optimizer.init(_params(q, q_noise)))


@reordered_arguments(
    ("key", "state", "stats", "prior_w", "prior_noise"), lambda a: isinstance(a[1], MixtureSGDState)
)
def mixture_sgd_step(
    key: jax.Array,
    stats: RegressionStats,
    state: MixtureSGDState,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
    *,
    optimizer: optax.GradientTransformation,
    num_samples: int,
    noise_update: str = "cavi",
    estimator: str = "local",
) -> tuple[MixtureSGDState, MixtureSGDInfo]:
    r"""One stochastic-gradient step on the ELBO of a mixture posterior (optax/blackjax shape).

    Draws `num_samples` configurations, forms the unbiased gradient of `mixture_elbo_estimate`
    with respect to the component logits, the weight logits and the noise logits, and applies
    `optimizer` to $-\mathcal{L}/n$. With `noise_update="cavi"` (default) the noise factor is
    instead set to its exact coordinate-ascent optimum given the updated mixture,
    $\log q_\sigma(s) = \log p_\sigma(s) - \tfrac n2 \log s - \tfrac{1}{2s}\sum_k\alpha_k
    E_{q^{(k)}}\|y - \Phi w\|^2$ (closed form because the expected residual is linear in `q`);
    `"gradient"` moves it with the optimizer like the other parameters.

    Args:
      key: PRNG key for this step's draws.
      stats: `RegressionStats`.
      state: `MixtureSGDState` from `mixture_sgd_init` or a previous step.
      prior_w, prior_noise: the priors, as in `mixture_elbo_estimate`.
      optimizer: the `optax.GradientTransformation` given to `mixture_sgd_init`.
      num_samples: draws per step (>= 2); the paper uses 3000.
      noise_update: `"cavi"` or `"gradient"`.
      estimator: `"local"` (default), `"stratified"`, `"stratified-pathwise"` or `"score"`,
        see `mixture_elbo_estimate`.

    Returns:
      `(state, info)` with `info` a `MixtureSGDInfo`.
    """
    if not isinstance(state, MixtureSGDState):
        raise TypeError(f"`state` must be a MixtureSGDState, got {type(state).__name__}")
    check_mixture_args(state.q, state.q_noise, prior_w, prior_noise, stats)
    check_optimizer(optimizer)
    _check_noise_update(noise_update)
    num_samples = check_int(num_samples, "num_samples", 2)
    estimator_fn(estimator)
    return _compiled_step(optimizer)(
        key, state, stats, prior_w, prior_noise, num_samples=num_samples, noise_update=noise_update,
        estimator=estimator,
    )  # fmt: skip


def fit_mixture_sgd(
    key: jax.Array,
    stats: RegressionStats,
    prior_w: DiscretePrior | MixturePrior,
    prior_noise: DiscretePrior,
    *,
    init: tuple[Mixture, MeanField],
    optimizer: optax.GradientTransformation,
    num_steps: int,
    num_samples: int,
    noise_update: str = "cavi",
    estimator: str = "local",
    progress: bool | ProgressCallback | None = None,
    progress_every: int | None = None,
) -> MixtureFit:
    r"""Fits a mixture posterior by stochastic gradient ascent on the exact ELBO (the paper's "Mixture SGD").

    Runs `mixture_sgd_step` `num_steps` times inside `lax.scan`, with a fresh key per step; one
    compile serves every call with an equal optimizer configuration and equal static arguments and shapes.
    With `noise_update="cavi"` the noise factor is first set to its exact optimum given the initial
    mixture. Unlike `fit_mixture_bound` the objective is the ELBO itself (no entropy bound), at the
    price of Monte Carlo noise; `mixture_elbo_unbiased` reports the result.

    Args:
      key: PRNG key.
      stats, prior_w, prior_noise: as in `mixture_elbo_estimate`.
      init: `(q, q_noise)`: a `Mixture` (e.g. `mixture_from_mean_field` of a mean-field fit)
        and a `MeanField` over the noise.
      optimizer: an `optax.GradientTransformation`, e.g. `optax.adam(1e-2)`.
      num_steps: number of steps.
      num_samples: draws per step (>= 2); the paper's "5-Mixture SGD" uses 3000.
      noise_update: `"cavi"` (default) or `"gradient"`, see `mixture_sgd_step`.
      estimator: `"local"` (default), `"stratified"`, `"stratified-pathwise"` or `"score"`,
        see `mixture_elbo_estimate`.
      progress: `None` (default: no reporting, nothing added to the compiled loop), `True` (a tqdm bar,
        or lines on stderr without tqdm) or a callable `(step, total, metrics)` receiving the fields of
        `MixtureSGDInfo` as floats; see `kronvi/_base/progress.py`.
      progress_every: report every this many steps and at the last (default: about 100 reports).

    Returns:
      `MixtureFit` `(q, q_noise, None, info)`: `info` a
      `kronvi.FitInfo` (`optimizer="sgd"`) whose `elbo` trace `(num_steps + 1,)` holds
      each step's unbiased estimate at the parameters before it and one more at the returned
      parameters, and whose `steps` is the `MixtureSGDInfo` of the
      steps, `(num_steps,)` arrays.

    References:
      Evans & Nair (2018), section 4 and Table 2 ("5-Mixture SGD").

    Example:
      >>> import jax, jax.numpy as jnp, optax, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (30, 2)); stats = kronvi.stats.regression_stats(Phi, Phi[:, 0])
      >>> pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=5), kronvi.model.noise_prior(0.1)
      >>> qw, qn, _ = kronvi.fitting.fit_regression(stats, pw, pn)
      >>> q0 = kronvi.mixtures.mixture_from_mean_field(jax.random.key(1), qw, 2)
      >>> fit = kronvi.mixtures.fit_mixture_sgd(jax.random.key(2), stats, pw, pn, init=(q0, qn),
      ...                              optimizer=optax.adam(0.05), num_steps=20, num_samples=16)
      >>> fit.info.elbo.shape, fit.info.steps.elbo_stderr.shape, fit.info.optimizer
      ((21,), (20,), 'sgd')
    """
    if not (isinstance(init, tuple) and len(init) == 2):
        raise TypeError("`init` must be a tuple (q, q_noise)")
    q, q_noise = init
    check_mixture_args(q, q_noise, prior_w, prior_noise, stats)
    check_optimizer(optimizer)
    _check_noise_update(noise_update)
    num_samples = check_int(num_samples, "num_samples", 2)
    num_steps = check_int(num_steps, "num_steps", 1)
    estimator_fn(estimator)
    every = check_progress(progress, progress_every, num_steps)
    with progress_scope(progress, total=num_steps, every=every, desc="mixture SGD") as prog:
        return _compiled_fit(optimizer)(
            key, q, q_noise, stats, prior_w, prior_noise, prog, num_steps=num_steps, num_samples=num_samples,
            noise_update=noise_update, estimator=estimator,
        )  # fmt: skip
