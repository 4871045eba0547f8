r"""Choosing among priors by K-fold cross-validation computed from sufficient statistics.

The held-out squared error of the posterior-mean predictor needs only the held-out rows' statistics:
$\|y - \Phi\bar w\|^2 = y^\top y - 2\bar w^\top\Phi^\top y + \bar w^\top\Phi^\top\Phi\,\bar w$. With
fold statistics from one pass (`kronvi.stats.kfold_stats`, `kronvi.stats.kfold_stats_from_inputs`), a
K-fold cross-validation score is K fits on `total - fold_k` (vmapped) and K such evaluations: no
second pass over the data.

The mean-field ELBO is biased about the noise variance when many weights are weakly determined (their prior
variance counts as residual), so it cannot arbitrate between noise priors; held-out error can
(`docs/decisions/default-recipe.md#the-noise-grid`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base.checks import check_int
from .._base.precision import dot, matmul
from .._model.families import MeanField, grid_moments
from .._model.grids import DiscretePrior
from .._model.regression import noise_moments
from .._stats.regression import RegressionStats
from .regression import fit_regression

CRITERIA = ("log_density", "sq_error")


class HeldoutScores(NamedTuple):
    r"""Held-out scores of a fitted posterior, exact functions of the held-out statistics.

    Attributes:
      sq_error: $\sum_i (y_i - \bar f_i)^2$, the squared error of the posterior-mean predictor.
      log_density: $\sum_i \log N(y_i;\ \bar f_i,\ \bar v)$ with $\bar v$ the held-out rows'
        average predictive variance,
        $\bar v = \frac1{n}\sum_j \mathrm{Var}_q(w_j)(\Phi^\top\Phi)_{jj} + E_q[\sigma^2]$: a
        Gaussian predictive density with one pooled variance. It rewards a small error and penalizes
        overconfidence (a variance too small for the error), which the squared error alone does not.
    """

    sq_error: jax.Array
    log_density: jax.Array


def heldout_sq_error(q_w: MeanField, prior_w: DiscretePrior, stats: RegressionStats) -> jax.Array:
    r"""Exact sum of squared errors of the posterior-mean predictor $\Phi\,E_q[w]$ on the rows that
    `stats` summarizes: $y^\top y - 2\bar w^\top\Phi^\top y + \bar w^\top\Phi^\top\Phi\,\bar w$.

    Args:
      q_w: `MeanField` `(b, m)` over the weights.
      prior_w: `DiscretePrior` `(b, m)`: the grid values of `q_w`.
      stats: `RegressionStats` of held-out rows (targets centred like the training targets).

    Returns:
      A scalar, the sum (not the mean) of squared errors; divide by `stats.n` for the mean.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> prior_w = kronvi.model.gaussian_prior(2, 1.0, levels=3)  # grid {-3, 0, 3}
      >>> q_w = kronvi.model.MeanField(jnp.log(jnp.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]) + 1e-30))
      >>> stats = kronvi.stats.regression_stats(jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([2.0, -3.0]))
      >>> round(float(kronvi.fitting.heldout_sq_error(q_w, prior_w, stats)), 4)  # (2 - 3)^2 + (-3 + 3)^2
      1.0
    """
    _check_heldout(q_w, prior_w, stats)
    mean, _ = grid_moments(q_w.probs, prior_w.values)
    return _sq_error(mean, stats)


def _sq_error(mean, stats):
    return stats.yty - dot(mean, 2.0 * stats.Phity - matmul(stats.PhitPhi, mean))


def _check_heldout(q_w, prior_w, stats):
    if q_w.logits.shape[-2:] != prior_w.values.shape[-2:]:
        raise ValueError(
            f"`q_w` has shape {q_w.logits.shape[-2:]} but `prior_w` has {prior_w.values.shape[-2:]}"
        )
    if stats.PhitPhi.ndim != 2:
        raise ValueError(
            f"`stats` must be one data set's statistics (PhitPhi of shape (b, b)), got {stats.PhitPhi.shape}; "
            "for stacked folds use kronvi.fitting.cv_scores"
        )
    if stats.Phity.shape[-1] != prior_w.values.shape[-2]:
        raise ValueError(
            f"`stats` has {stats.Phity.shape[-1]} features but `prior_w` has {prior_w.values.shape[-2]}"
        )


def heldout_scores(
    q_w: MeanField,
    q_noise: MeanField,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    stats: RegressionStats,
) -> HeldoutScores:
    r"""Both `HeldoutScores` of `(q_w, q_noise)` on the rows that `stats` summarizes.

    Args:
      q_w: `MeanField` `(b, m)` over the weights.
      q_noise: `MeanField` `(1, m_sigma)` over the noise variance.
      prior_w: `DiscretePrior` `(b, m)`.
      prior_noise: `DiscretePrior` `(1, m_sigma)`.
      stats: `RegressionStats` of held-out rows.

    Returns:
      `HeldoutScores` (sums over the held-out rows).
    """
    if q_noise.logits.shape[-2:] != prior_noise.values.shape[-2:]:
        raise ValueError(
            f"`q_noise` has shape {q_noise.logits.shape[-2:]} but `prior_noise` has {prior_noise.values.shape[-2:]}"
        )
    _check_heldout(q_w, prior_w, stats)
    mean, var = grid_moments(q_w.probs, prior_w.values)
    sq = _sq_error(mean, stats)
    v = jnp.sum(var * jnp.diagonal(stats.PhitPhi, axis1=-2, axis2=-1)) / stats.n
    v = v + noise_moments(q_noise, prior_noise)[2]
    return HeldoutScores(sq, -0.5 * stats.n * jnp.log(2.0 * jnp.pi * v) - 0.5 * sq / v)


def cv_scores(
    train_stats: RegressionStats,
    test_stats: RegressionStats,
    prior_w: DiscretePrior,
    prior_noise: DiscretePrior,
    *,
    init: str | tuple[MeanField, MeanField] | None = "gaussian",
    method: str = "cavi",
    max_iter: int | None = None,
) -> HeldoutScores:
    r"""Held-out scores of DIRECT mean field on every fold, one vmapped fit per fold.

    Args:
      train_stats: `RegressionStats` stacked on a leading fold axis `(K, ...)` (e.g. the first
        output of `kronvi.stats.kfold_stats`).
      test_stats: the held-out statistics, stacked the same way.
      prior_w: `DiscretePrior` `(b, m)`, shared by the folds.
      prior_noise: `DiscretePrior` `(1, m_sigma)`, shared by the folds.
      init: passed to `kronvi.fitting.fit_regression` (default `"gaussian"`: CAVI from
        `kronvi.fitting.gaussian_start`).
      method: passed to `kronvi.fitting.fit_regression` (default `"cavi"`).
      max_iter: passed to `kronvi.fitting.fit_regression`.

    Returns:
      `HeldoutScores` of `(K,)` arrays, one entry per held-out fold.
    """
    if train_stats.PhitPhi.ndim != 3 or test_stats.PhitPhi.ndim != 3:
        raise ValueError(
            "`train_stats` and `test_stats` must be stacked on a leading fold axis (PhitPhi of shape "
            f"(K, b, b)), got {train_stats.PhitPhi.shape} and {test_stats.PhitPhi.shape}"
        )
    if train_stats.PhitPhi.shape != test_stats.PhitPhi.shape:
        raise ValueError(
            f"`train_stats` {train_stats.PhitPhi.shape} and `test_stats` {test_stats.PhitPhi.shape} differ"
        )

    named = init is None or isinstance(init, str)
    if not named and not (
        isinstance(init, tuple) and len(init) == 2 and all(isinstance(q, MeanField) for q in init)
    ):
        raise TypeError(
            f'`init` must be "prior", "gaussian" or a tuple (q_w, q_noise) of MeanField, got {init!r}'
        )
    return _cv_scores(
        train_stats,
        test_stats,
        prior_w,
        prior_noise,
        None if named else init,
        init_name=init if named else None,
        method=method,
        max_iter=None if max_iter is None else check_int(max_iter, "max_iter", 1),
    )


@functools.partial(jax.jit, static_argnames=("init_name", "method", "max_iter"))
def _cv_scores(train_stats, test_stats, prior_w, prior_noise, init_q, *, init_name, method, max_iter):
    # One program for the fold fits and scores: unjitted, the starts and scores around the jitted fit
    # ran op by op for every fold batch and every candidate of `select_prior`.
    init = init_name if init_q is None else init_q

    def one(train, test):
        q_w, q_n, _ = fit_regression(train, prior_w, prior_noise, init=init, method=method, max_iter=max_iter)
        return heldout_scores(q_w, q_n, prior_w, prior_noise, test)

    return jax.vmap(one)(train_stats, test_stats)


def select_prior(
    train_stats: RegressionStats,
    test_stats: RegressionStats,
    candidates: Sequence[tuple[DiscretePrior, DiscretePrior]],
    *,
    criterion: str = "log_density",
    **fit_kwargs: Any,
) -> tuple[int, HeldoutScores]:
    r"""Picks the `(prior_w, prior_noise)` pair with the best K-fold cross-validated score.

    The candidates may differ in shape (e.g. a 15-level noise grid and a single fixed noise level), so
    they are scored one after another; the folds of each are fitted in one vmapped call.

    Args:
      train_stats: stacked training statistics of the folds, as for `cv_scores`.
      test_stats: stacked held-out statistics of the folds, as for `cv_scores`.
      candidates: a non-empty sequence of `(prior_w, prior_noise)` pairs.
      criterion: `"log_density"` (default: the highest pooled-variance predictive log density, see
        `HeldoutScores`) or `"sq_error"` (the lowest squared error).
      **fit_kwargs: `init`, `method`, `max_iter` for `cv_scores`.

    Returns:
      `(index, scores)`: the index of the best candidate (the first one on ties) and
      `HeldoutScores` of `(C,)` arrays, per held-out row: the mean squared error and the mean log
      density over all held-out rows.
    """
    if criterion not in CRITERIA:
        raise ValueError(f"`criterion` must be one of {CRITERIA}, got {criterion!r}")
    candidates = list(candidates)
    if not candidates:
        raise ValueError("`candidates` must hold at least one (prior_w, prior_noise) pair")
    rows = jnp.sum(test_stats.n)
    per = [cv_scores(train_stats, test_stats, pw, pn, **fit_kwargs) for pw, pn in candidates]
    scores = HeldoutScores(
        *(jnp.stack([jnp.sum(f) / rows for f in field]) for field in zip(*per, strict=True))
    )
    for name, v in scores._asdict().items():
        if not bool(jnp.all(jnp.isfinite(v))):
            raise FloatingPointError(
                f"cross-validated {name} is not finite for every candidate: {v.tolist()}"
            )
    best = jnp.argmin(scores.sq_error) if criterion == "sq_error" else jnp.argmax(scores.log_density)
    return int(best), scores
