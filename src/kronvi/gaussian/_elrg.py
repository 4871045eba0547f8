r"""ELRG: Gaussian posteriors with a low-rank-plus-diagonal covariance (Tomczak et al., 2020).

Family: $q(w) = N(\mu, \Sigma)$, $\Sigma = D + VV^\top$, $D = \mathrm{diag}(d)$,
$d = \exp(\text{log\_diag})$ (one entry per weight, or one shared constant: the paper's ELRG-VI
variant), $V \in \mathbb{R}^{b\times r}$. Rank 0 is the factorized Gaussian; rank `b` holds every
full covariance whose smallest eigenvalue exceeds the diagonal.

The prior is $N(0, \mathrm{diag}(\sigma_w^2))$ and the model $y = \Phi w + \varepsilon$,
$\varepsilon \sim N(0, \sigma^2 I)$ with $\sigma^2$ fixed.

- KL to the prior (the paper's Lemma 2). With $W = D^{-1/2}V$ the matrix determinant lemma gives
  $\log|\Sigma| = \sum_j \log d_j + \log|I_r + W^\top W|$, so

  $$
  \mathrm{KL}(q\,\|\,p) = \tfrac12\Big(\sum_j \frac{d_j + \|V_{j\cdot}\|^2 + \mu_j^2}{\sigma_{w,j}^2}
    - b + \sum_j \log\sigma_{w,j}^2 - \sum_j \log d_j - \log|I_r + W^\top W|\Big),
  $$

  $O(br^2 + r^3)$ instead of the $O(b^3)$ of a dense determinant.
- Exact ELBO from the statistics. $E_q\|y - \Phi w\|^2 = \|y - \Phi\mu\|^2 +
  \mathrm{tr}(\Phi^\top\Phi\,\Sigma)$ and $\mathrm{tr}(\Phi^\top\Phi\,\Sigma) = \sum_j
  (\Phi^\top\Phi)_{jj} d_j + \mathrm{tr}(V^\top\Phi^\top\Phi V)$: $O(b^2 r)$, whatever `n` is.
- Local reparameterization (the paper's Lemma 1). Under $q$, the output of one row
  $f_i = \phi_i^\top w$ has the law of $\phi_i^\top\mu + \sum_k \epsilon_{ik}\,\phi_i^\top v_k +
  \xi_i\,(\sum_j \phi_{ij}^2 d_j)^{1/2}$ with independent standard normals $\epsilon_{ik}, \xi_i$.
  Drawing these per row (not one weight vector per minibatch) gives independent outputs across rows at
  the cost of $r + 2$ matrix-vector products, and an unbiased minibatch estimate of the ELBO and of
  its gradient.

References:
  Tomczak, Swaroop, Turner (2020), "Efficient Low Rank Gaussian Variational Inference for Neural
  Networks", NeurIPS: section 3, Lemma 1 (local reparameterization) and Lemma 2 (KL); the constant
  diagonal is their ELRG-VI, the per-weight one ELRG-D-VI.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_ndim,
    check_optimizer,
    check_xy,
)
from .._base.deprecation import reordered_arguments
from .._base.precision import dot, einsum, matmul
from .._base.progress import ProgressCallback, check_progress, progress_scope
from .._base.pytree import validated_pytree
from .._model.regression import LOG_2PI
from .._solvers.info import FitInfo
from .._solvers.lbfgs import minimize_lbfgs
from .._solvers.linalg import jittered_cholesky
from .._solvers.optimizers import cache_by_optimizer
from .._solvers.sgd import minibatch_rows, run_sgd
from .._stats.regression import RegressionStats, check_stats
from ._meanfield import check_noise_variance, check_prior_scale
from ._reparam import ReparamInfo

OBJECTIVES = ("exact", "local-reparam")
DIAGONALS = ("full", "constant")


@validated_pytree
class ELRG:
    r"""Gaussian $N(\mu,\ \mathrm{diag}(e^{\text{log\_diag}}) + FF^\top)$ with `F = factors`.

    Args:
      mean: `(b,)` $\mu$.
      log_diag: `(b,)` log of each weight's diagonal variance, or `()` for one shared constant (the
        paper's ELRG-VI); broadcast to `(b,)` where used.
      factors: `(b, rank)` low-rank factor $V$ (`rank` may be 0: the factorized Gaussian).

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> q = kronvi.gaussian.ELRG(jnp.zeros(3), jnp.zeros(3), jnp.ones((3, 1)))
      >>> q.rank, q.covariance().tolist()
      (1, [[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 2.0]])
    """

    _fields = ("mean", "log_diag", "factors")
    mean: jax.Array
    log_diag: jax.Array
    factors: jax.Array
    # added by `validated_pytree`: construction without validation, and a copy with fields replaced
    _unchecked: ClassVar[Callable[..., ELRG]]
    _replace: Callable[..., ELRG]

    def __init__(self, mean, log_diag, factors):
        mean = as_float_array(mean, "mean")
        log_diag = as_float_array(log_diag, "log_diag")
        factors = as_float_array(factors, "factors")
        check_ndim(mean, 1, "mean", "(num_features,)")
        check_ndim(factors, 2, "factors", "(num_features, rank)")
        b = mean.shape[0]
        if b == 0:
            raise ValueError("`mean` is empty")
        if log_diag.shape not in ((), (b,)):
            raise ValueError(f"`log_diag` must have shape () or ({b},), got {log_diag.shape}")
        if factors.shape[0] != b:
            raise ValueError(f"`factors` must have {b} rows (one per weight), got shape {factors.shape}")
        if len({mean.dtype, log_diag.dtype, factors.dtype}) > 1:
            raise TypeError(
                f"dtypes differ: `mean` {mean.dtype}, `log_diag` {log_diag.dtype}, `factors` {factors.dtype}"
            )
        for name, a in (("mean", mean), ("log_diag", log_diag), ("factors", factors)):
            check_finite(a, name)
            object.__setattr__(self, name, a)

    @property
    def rank(self) -> int:
        return self.factors.shape[-1]

    @property
    def diag(self):
        """`(b,)` diagonal variances $d$."""
        return jnp.broadcast_to(jnp.exp(self.log_diag), self.mean.shape)

    def covariance(self):
        """The dense `(b, b)` covariance $D + VV^\\top$ ($O(b^2 r)$; for tests and small `b`)."""
        return jnp.diag(self.diag) + matmul(self.factors, self.factors.T)


def check_elrg(q, b=None, name="q"):
    """Checks that `q` is an `ELRG` (with `b` weights when given)."""
    if not isinstance(q, ELRG):
        raise TypeError(f"`{name}` must be an ELRG, got {type(q).__name__}")
    if b is not None and q.mean.shape[0] != b:
        raise ValueError(f"`{name}` has {q.mean.shape[0]} weights but the data have {b} features")


# ----------------------------------------------------------------------------------------------------
# Traced formulas on raw arrays (d broadcast to (b,), scale (b,) or scalar)


def _kl(mean, log_diag, V, scale):
    b = mean.shape[0]
    log_d = jnp.broadcast_to(log_diag, (b,))
    prec = jnp.broadcast_to(1.0 / scale**2, (b,))
    W = V * jnp.exp(-0.5 * log_d)[:, None]
    M = jnp.eye(V.shape[1], dtype=V.dtype) + einsum("jk,jl->kl", W, W)
    logdet_M = 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(M))))
    trace = jnp.sum(prec * (jnp.exp(log_d) + jnp.sum(V**2, axis=1) + mean**2))
    return 0.5 * (trace - b - jnp.sum(jnp.log(prec)) - jnp.sum(log_d) - logdet_M)


def _expected_rss(mean, log_diag, V, stats):
    G = stats.PhitPhi
    d = jnp.broadcast_to(jnp.exp(log_diag), mean.shape)
    quad = dot(mean, matmul(G, mean)) + jnp.sum(jnp.diagonal(G) * d) + jnp.sum(matmul(G, V) * V)
    return stats.yty - 2.0 * dot(mean, stats.Phity) + quad


def _elbo(mean, log_diag, V, s2, stats, scale):
    ell = -0.5 * stats.n * (LOG_2PI + jnp.log(s2)) - 0.5 * _expected_rss(mean, log_diag, V, stats) / s2
    return ell - _kl(mean, log_diag, V, scale)


def _safe_sqrt(x):
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _minibatch_elbo(key, mean, log_diag, V, s2, Phi_b, y_b, n, scale, num_samples):
    B = y_b.shape[0]
    d = jnp.broadcast_to(jnp.exp(log_diag), mean.shape)
    f_mean = matmul(Phi_b, mean)  # (B,)
    f_low = matmul(Phi_b, V)  # (B, r)
    f_sd = _safe_sqrt(matmul(Phi_b**2, d))  # (B,)
    k_eps, k_xi = jax.random.split(key)
    eps = jax.random.normal(k_eps, (num_samples, B, V.shape[1]), mean.dtype)
    xi = jax.random.normal(k_xi, (num_samples, B), mean.dtype)
    f = f_mean[None] + jnp.sum(eps * f_low[None], axis=-1) + xi * f_sd[None]  # (S, B)
    resid2 = jnp.mean(jnp.sum((y_b[None] - f) ** 2, axis=1))
    ll = -0.5 * B * (LOG_2PI + jnp.log(s2)) - 0.5 * resid2 / s2
    return (n / B) * ll - _kl(mean, log_diag, V, scale)


_kl_jit = jax.jit(_kl)
_elbo_jit = jax.jit(_elbo)
_minibatch_elbo_jit = jax.jit(_minibatch_elbo, static_argnums=9)


# ----------------------------------------------------------------------------------------------------
# Public formulas


def elrg_kl(q: ELRG, prior_scale: ArrayLike) -> jax.Array:
    r"""$\mathrm{KL}(q\,\|\,N(0, \sigma_w^2 I))$ of an `ELRG` posterior, by the paper's Lemma 2.

    $$
    \mathrm{KL} = \tfrac12\Big(\sum_j \frac{d_j + \|V_{j\cdot}\|^2 + \mu_j^2}{\sigma_{w,j}^2} - b
      + \sum_j \log\sigma_{w,j}^2 - \sum_j\log d_j - \log\big|I_r + V^\top D^{-1} V\big|\Big)
    $$

    (the matrix determinant lemma for $\log|D + VV^\top|$): $O(b r^2 + r^3)$, never forming a
    `b x b` matrix.

    Args:
      q: `ELRG` with `b` weights and rank `r`.
      prior_scale: $\sigma_w$, a positive scalar or `(b,)` array (a diagonal prior).

    Returns:
      The KL divergence in nats, a scalar.

    References:
      Tomczak et al. (2020), Lemma 2.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> q = kronvi.gaussian.ELRG(jnp.zeros(2), jnp.zeros(2), jnp.zeros((2, 1)))  # N(0, I)
      >>> float(kronvi.gaussian.elrg_kl(q, 1.0))
      0.0
    """
    check_elrg(q)
    scale = check_prior_scale(prior_scale, q.mean.shape[0], q.mean.dtype)
    return _kl_jit(q.mean, q.log_diag, q.factors, scale)


@reordered_arguments(("q", "noise_variance", "stats"), lambda a: isinstance(a[0], ELRG))
def elrg_elbo(
    stats: RegressionStats, q: ELRG, noise_variance: ArrayLike, *, prior_scale: ArrayLike
) -> jax.Array:
    r"""Exact ELBO of an `ELRG` posterior for Bayesian linear regression, from the statistics.

    $$
    \mathcal{L} = -\tfrac n2\log(2\pi\sigma^2) - \frac{1}{2\sigma^2}\Big(y^\top y - 2\mu^\top\Phi^\top y
      + \mu^\top\Phi^\top\Phi\mu + \sum_j (\Phi^\top\Phi)_{jj}d_j + \mathrm{tr}(V^\top\Phi^\top\Phi V)\Big)
      - \mathrm{KL}(q\,\|\,p),
    $$

    $O(b^2 r)$ whatever `n` is; $\log p(y) - \mathcal{L} = \mathrm{KL}(q\,\|\,p(w\mid y))$,
    the KL to the exact posterior (`kronvi.gaussian.blr_log_evidence`).

    Args:
      stats: `kronvi.stats.RegressionStats` with `b` features.
      q: `ELRG` with `b` weights.
      noise_variance: $\sigma^2$, a positive scalar.
      prior_scale: $\sigma_w$, a positive scalar or `(b,)`.

    Returns:
      The ELBO, a scalar.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (50, 3)); y = Phi @ jnp.array([1., 0., -1.])
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> q = kronvi.gaussian.ELRG(jnp.zeros(3), jnp.zeros(3), jnp.zeros((3, 1)))
      >>> bool(kronvi.gaussian.elrg_elbo(stats, q, 0.1, prior_scale=1.0) <= kronvi.gaussian.blr_log_evidence(stats, 1.0, 0.1))
      True
    """
    b = check_stats(stats)
    check_elrg(q, b)
    dtype = stats.PhitPhi.dtype
    scale = check_prior_scale(prior_scale, b, dtype)
    s2 = check_noise_variance(noise_variance, dtype)
    return _elbo_jit(q.mean, q.log_diag, q.factors, s2, stats, scale)


@reordered_arguments(("key", "q", "noise_variance", "Phi_batch", "y_batch"), lambda a: isinstance(a[1], ELRG))
def elrg_minibatch_elbo(
    key: jax.Array,
    Phi_batch: ArrayLike,
    y_batch: ArrayLike,
    q: ELRG,
    noise_variance: ArrayLike,
    *,
    num_data: int,
    prior_scale: ArrayLike,
    num_samples: int = 1,
) -> jax.Array:
    r"""Unbiased minibatch estimate of the ELBO of an `ELRG` posterior by local reparameterization.

    For each row of the minibatch (drawn uniformly from the `num_data` rows) and each of `num_samples`
    draws, the output is sampled directly (the paper's Lemma 1):
    $f_i = \phi_i^\top\mu + \sum_k \epsilon_{ik}\,\phi_i^\top v_k + \xi_i\,(\sum_j\phi_{ij}^2 d_j)^{1/2}$,
    and

    $$
    \hat{\mathcal{L}} = \frac nB\sum_{i\in\text{batch}}\frac1S\sum_{s=1}^S \log N(y_i\mid f_i^{(s)}, \sigma^2)
      - \mathrm{KL}(q\,\|\,p)
    $$

    (closed-form KL, `elrg_kl`). Its expectation over the rows and the draws is the exact ELBO
    (`elrg_elbo`), and so is that of its gradient in `q`.

    Args:
      key: PRNG key for the draws.
      Phi_batch: `(B, b)` features of the minibatch rows.
      y_batch: `(B,)` their targets.
      q: `ELRG` with `b` weights and rank `r`.
      noise_variance: $\sigma^2$.
      num_data: $n$, the number of rows the minibatch was drawn from.
      prior_scale: $\sigma_w$, a positive scalar or `(b,)`.
      num_samples: draws $S$ per row.

    Returns:
      The estimate, a scalar.

    References:
      Tomczak et al. (2020), Lemma 1; Kingma, Salimans, Welling (2015), the local reparameterization trick.
    """
    Phi_batch, y_batch = check_xy(Phi_batch, y_batch, "Phi_batch", "y_batch", "(batch_size, num_features)")
    check_elrg(q, Phi_batch.shape[1])
    dtype = q.mean.dtype
    scale = check_prior_scale(prior_scale, Phi_batch.shape[1], dtype)
    s2 = check_noise_variance(noise_variance, dtype)
    num_samples = check_int(num_samples, "num_samples", 1)
    return _minibatch_elbo_jit(
        key, q.mean, q.log_diag, q.factors, s2, Phi_batch.astype(dtype), y_batch.astype(dtype),
        jnp.asarray(num_data, dtype), scale, num_samples,
    )  # fmt: skip


def predict_elrg(q: ELRG, noise_variance: ArrayLike, Phi_new: ArrayLike) -> tuple[jax.Array, jax.Array]:
    r"""Predictive mean and variance under an `ELRG` posterior (exact, Gaussian).

    $y^* \sim N(\Phi^*\mu,\ (\Phi^*)^{\circ 2}d + \|\Phi^* V\|^2_{\text{row}} + \sigma^2)$:
    $O(b r)$ per point.

    Args:
      q: `ELRG`.
      noise_variance: $\sigma^2$.
      Phi_new: `(num_points, b)` test features.

    Returns:
      `(mean, variance)`, each `(num_points,)`.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> q = kronvi.gaussian.ELRG(jnp.zeros(2), jnp.zeros(()), jnp.ones((2, 1)))
      >>> m, v = kronvi.gaussian.predict_elrg(q, 0.5, jnp.array([[1.0, 1.0]]))
      >>> float(m[0]), float(v[0])  # 1 + 1 (diagonal) + 4 (low rank) + 0.5
      (0.0, 6.5)
    """
    Phi_new = as_float_array(Phi_new, "Phi_new")
    check_ndim(Phi_new, 2, "Phi_new", "(num_points, num_features)")
    check_finite(Phi_new, "Phi_new")
    check_elrg(q, Phi_new.shape[1])
    s2 = check_noise_variance(noise_variance, Phi_new.dtype)
    low = matmul(Phi_new, q.factors)
    return matmul(Phi_new, q.mean), matmul(Phi_new**2, q.diag) + jnp.sum(low**2, axis=-1) + s2


# ----------------------------------------------------------------------------------------------------
# Fitting


class ELRGFit(NamedTuple):
    """The result of `fit_elrg`.

    Attributes:
      q: the fitted `ELRG`.
      info: `kronvi.FitInfo`, for either objective.
    """

    q: ELRG
    info: FitInfo


def _mf_variance(G_diag, scale, s2):
    """The factorized Gaussian's optimal variances $1/((\\Phi^\\top\\Phi)_{jj}/\\sigma^2 + \\sigma_w^{-2})$."""
    return 1.0 / (G_diag / s2 + 1.0 / scale**2)


@jax.jit
def _optimal_mean(stats, scale, s2):
    # Every Gaussian family's optimal mean under the exact ELBO: (PhitPhi + s2/sw^2) mu = Phi^T y.
    b = stats.Phity.shape[-1]
    L = jittered_cholesky(stats.PhitPhi + jnp.diag(jnp.broadcast_to(s2 / scale**2, (b,))))
    return jax.scipy.linalg.cho_solve((L, True), stats.Phity)


def _default_init(key, G_diag, scale, s2, mean, rank, diagonal, diag_variance):
    b = G_diag.shape[0]
    dtype = G_diag.dtype
    d = jnp.broadcast_to(_mf_variance(G_diag, scale, s2), (b,))
    if diag_variance is not None:
        log_diag = jnp.log(jnp.asarray(diag_variance, dtype))
    elif diagonal == "constant":
        log_diag = jnp.mean(jnp.log(d))
    else:
        log_diag = jnp.log(d)
    z = jax.random.normal(key, (b, rank), dtype)
    factors = 0.1 * jnp.sqrt(d)[:, None] * z / math.sqrt(max(rank, 1))
    return ELRG._unchecked(mean, log_diag.astype(dtype), factors)


def _check_options(rank, b, diagonal, diag_variance, dtype):
    rank = check_int(rank, "rank", 0)
    if rank > b:
        raise ValueError(f"`rank` must be at most the number of features {b}, got {rank}")
    if diagonal not in DIAGONALS:
        raise ValueError(f"`diagonal` must be one of {DIAGONALS}, got {diagonal!r}")
    if diag_variance is not None:
        if diagonal != "constant":
            raise ValueError("`diag_variance` fixes a constant diagonal: use it with diagonal='constant'")
        diag_variance = check_noise_variance(diag_variance, dtype, "diag_variance")
    return rank, diag_variance


def _check_init(init, b, rank, diagonal, dtype):
    check_elrg(init, b, "init")
    if init.rank != rank:
        raise ValueError(f"`init` has rank {init.rank} but `rank` is {rank}")
    want = () if diagonal == "constant" else (b,)
    if init.log_diag.shape != want:
        raise ValueError(
            f"`init.log_diag` must have shape {want} for diagonal={diagonal!r}, got {init.log_diag.shape}"
        )
    if init.mean.dtype != dtype:
        raise TypeError(f"`init` has dtype {init.mean.dtype} but the data have {dtype}")
    return init


def fit_elrg(
    key: jax.Array,
    stats: RegressionStats | None,
    prior_scale: ArrayLike,
    noise_variance: ArrayLike,
    *,
    rank: int,
    objective: str = "exact",
    diagonal: str = "full",
    diag_variance: float | None = None,
    init: ELRG | None = None,
    max_iter: int = 1000,
    tol: float = 1e-7,
    data: tuple[ArrayLike, ArrayLike] | None = None,
    optimizer: optax.GradientTransformation | None = None,
    num_steps: int | None = None,
    batch_size: int = 100,
    num_samples: int = 1,
    progress: bool | ProgressCallback | None = None,
    progress_every: int | None = None,
) -> ELRGFit:
    r"""Fits an `ELRG` posterior (low-rank plus diagonal covariance) for Bayesian linear regression.

    The noise variance $\sigma^2$ is fixed. Two objectives:

    - `"exact"`: L-BFGS (`kronvi.fitting.minimize_lbfgs`) on the closed-form ELBO `elrg_elbo` from
      the statistics, with exact gradients; $O(b^2 r)$ per evaluation whatever `n` is. Without
      `init` it starts with the mean at its exact optimum, which is the same for every Gaussian family
      under this objective (the exact posterior mean: one Cholesky factorization), the diagonal at the
      factorized Gaussian's optimum and small random factors from `key` (zero factors are a stationary
      point).
    - `"local-reparam"`: the paper's training. `num_steps` steps of `optimizer` (an
      `optax.GradientTransformation`) on `elrg_minibatch_elbo` over minibatches of `batch_size`
      rows of `data = (Phi, y)` drawn uniformly with replacement, `num_samples` draws per row (Lemma 1).
      Without `init` the mean starts at 0 and the diagonal and factors as above. `stats` may be
      `None`.

    Args:
      key: PRNG key (the starting factors; the minibatches and draws of `"local-reparam"`).
      stats: `kronvi.stats.RegressionStats` of the training data (`None` allowed for
        `"local-reparam"`).
      prior_scale: $\sigma_w$, a positive scalar or `(b,)`.
      noise_variance: $\sigma^2$, a positive scalar (not learned).
      rank: $r$, the number of factor columns, `0 <= rank <= b` (0: the factorized Gaussian).
      objective: `"exact"` or `"local-reparam"`.
      diagonal: `"full"` (one variance per weight, the paper's ELRG-D) or `"constant"` (one shared
        variance, the paper's ELRG; `log_diag` is then a scalar).
      diag_variance: with `diagonal="constant"`, a positive value fixes the diagonal there (the paper sets
        a small constant); `None` learns it.
      init: optional starting `ELRG` (its `log_diag` replaced by `log(diag_variance)` when that
        is given).
      max_iter: `"exact"`: the most L-BFGS iterations, an int >= 1.
      tol: `"exact"`: the L-BFGS gradient-norm tolerance on $-\mathcal{L}/n$.
      data: `"local-reparam"`: `(Phi, y)`, the `(n, b)` training features and `(n,)` targets.
      optimizer: `"local-reparam"`: an `optax.GradientTransformation` minimizing
        $-\hat{\mathcal{L}}/n$, e.g. `optax.adam(1e-2)`.
      num_steps: `"local-reparam"` (required there): the number of optimizer steps, an int >= 1.
      batch_size: `"local-reparam"`: rows per minibatch, an int >= 1.
      num_samples: `"local-reparam"`: draws per row, an int >= 1.
      progress: `"local-reparam"`: `None` (default: no reporting, nothing added to the compiled loop),
        `True` (a tqdm bar, or lines on stderr without tqdm) or a callable `(step, total, metrics)`
        receiving the fields of `kronvi.gaussian.ReparamInfo` as floats; see `kronvi/_base/progress.py`.
        Ignored by `"exact"` (one L-BFGS call).
      progress_every: report every this many steps and at the last (default: about 100 reports).

    Returns:
      `ELRGFit` `(q, info)`: the fitted `ELRG` and a
      `kronvi.FitInfo`. For `"exact"` (`optimizer="optax-lbfgs"`) its `elbo` is the
      exact ELBO trace; for `"local-reparam"` (`optimizer="sgd"`) it holds `(num_steps + 1,)` minibatch
      estimates (each step's at the parameters before it, then one at the returned parameters) and
      `steps` the `kronvi.gaussian.ReparamInfo` of the steps.

    References:
      Tomczak et al. (2020), section 3 (Lemmas 1 and 2, ELRG-VI and ELRG-D-VI).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (100, 4))
      >>> y = Phi @ jnp.array([1., -1., 0.5, 0.]) + 0.3 * jax.random.normal(jax.random.key(1), (100,))
      >>> stats = kronvi.stats.regression_stats(Phi, y)
      >>> q, info = kronvi.gaussian.fit_elrg(jax.random.key(2), stats, 1.0, 0.09, rank=2)
      >>> q.factors.shape, q.mean.dtype, bool(info.final_elbo > info.elbo[0])
      ((4, 2), dtype('float32'), True)
      >>> gap = kronvi.gaussian.blr_log_evidence(stats, 1.0, 0.09) - kronvi.gaussian.elrg_elbo(stats, q, 0.09, prior_scale=1.0)
      >>> bool(-0.01 < gap < 0.1)  # KL(q || exact posterior), nats, up to float32 rounding
      True
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"`objective` must be one of {OBJECTIVES}, got {objective!r}")
    if objective == "exact":
        if stats is None:
            raise ValueError("`stats` is required for objective='exact'")
        b = check_stats(stats)
        dtype = stats.PhitPhi.dtype
    else:
        if data is None:
            raise ValueError("`data=(Phi, y)` is required for objective='local-reparam'")
        if not (isinstance(data, tuple | list) and len(data) == 2):
            raise TypeError("`data` must be a pair (Phi, y)")
        Phi, y = check_xy(*data, "data[0]", "data[1]", "(num_points, num_features)")
        if Phi.shape[0] == 0:
            raise ValueError("`data[0]` is empty")
        check_finite(Phi, "data[0]")
        check_finite(y, "data[1]")
        b = Phi.shape[1]
        dtype = Phi.dtype
        if stats is not None and check_stats(stats) != b:
            raise ValueError(f"`stats` has {stats.Phity.shape[-1]} features but `data[0]` has {b}")
    scale = check_prior_scale(prior_scale, b, dtype)
    s2 = check_noise_variance(noise_variance, dtype)
    rank, diag_variance = _check_options(rank, b, diagonal, diag_variance, dtype)
    if init is not None:
        init = _check_init(init, b, rank, diagonal, dtype)

    if objective == "exact":
        max_iter = check_int(max_iter, "max_iter", 1)
        if not float(tol) >= 0:
            raise ValueError(f"`tol` must be >= 0, got {tol}")
        assert stats is not None  # required above for objective="exact"
        if init is None:
            mean0 = _optimal_mean(stats, scale, s2)
            init = _default_init(
                key, jnp.diagonal(stats.PhitPhi), scale, s2, mean0, rank, diagonal, diag_variance
            )
        elif diag_variance is not None:
            init = init._replace(log_diag=jnp.log(diag_variance))
        return _fit_exact(
            init, stats, scale, s2, jnp.asarray(diag_variance is None), max_iter=max_iter, tol=float(tol)
        )

    check_optimizer(optimizer)
    if num_steps is None:
        raise ValueError("`num_steps` is required for objective='local-reparam'")
    num_steps = check_int(num_steps, "num_steps", 1)
    batch_size = check_int(batch_size, "batch_size", 1)
    num_samples = check_int(num_samples, "num_samples", 1)
    every = check_progress(progress, progress_every, num_steps)
    k_init, k_fit = jax.random.split(key)
    if init is None:
        G_diag = jnp.sum(Phi**2, axis=0) if stats is None else jnp.diagonal(stats.PhitPhi)
        init = _default_init(k_init, G_diag, scale, s2, jnp.zeros((b,), dtype), rank, diagonal, diag_variance)
    elif diag_variance is not None:
        init = init._replace(log_diag=jnp.log(diag_variance))
    with progress_scope(progress, total=num_steps, every=every, desc="ELRG") as prog:
        return _compiled_local(optimizer)(
            k_fit, init, Phi, y.astype(dtype), scale, s2, jnp.asarray(diag_variance is None), prog,
            num_steps=num_steps, batch_size=batch_size, num_samples=num_samples,
        )  # fmt: skip


def _fixable(p, q0, learn_diag):
    """The ELRG fields of the parameters `p`; where `learn_diag` is False (traced, so that a fixed and
    a learned diagonal share one compile) the diagonal is `q0`'s and its gradient is zero, so neither
    L-BFGS nor Adam ever moves it."""
    mean, log_diag, V = p
    return mean, jnp.where(learn_diag, log_diag, q0.log_diag), V


@functools.partial(jax.jit, static_argnames=("max_iter", "tol"))
def _fit_exact(q0, stats, scale, s2, learn_diag, *, max_iter, tol):
    def loss(p):
        return -_elbo(*_fixable(p, q0, learn_diag), s2, stats, scale) / stats.n

    best, info = minimize_lbfgs(loss, tuple(q0), stats.n, max_iter=max_iter, tol=tol)
    return ELRGFit(ELRG._unchecked(*_fixable(best, q0, learn_diag)), info)


@cache_by_optimizer
def _compiled_local(optimizer):
    def fit(key, q0, Phi, y, scale, s2, learn_diag, progress, *, num_steps, batch_size, num_samples):
        n = Phi.shape[0]
        n_arr = jnp.asarray(n, Phi.dtype)

        def objective(k, p):
            idx, k_draw = minibatch_rows(k, n, batch_size)
            mean, log_diag, V = _fixable(p, q0, learn_diag)
            elbo = _minibatch_elbo(k_draw, mean, log_diag, V, s2, Phi[idx], y[idx], n_arr, scale, num_samples)
            return -elbo / n_arr, {"elbo": elbo}

        params, _, info = run_sgd(
            optimizer, objective, tuple(q0), key, num_steps=num_steps, info=ReparamInfo, progress=progress
        )
        return ELRGFit(ELRG._unchecked(*_fixable(params, q0, learn_diag)), info)

    return jax.jit(fit, static_argnames=("num_steps", "batch_size", "num_samples"))
