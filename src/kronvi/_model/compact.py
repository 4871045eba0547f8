r"""A compact form of an eigenbasis posterior: its exact mean, the directions the data determine, and one
shared variance for the rest.

In the eigenbasis of $\Phi^\top\Phi$ (`kronvi.stats.eigenbasis`, $\Phi^\top\Phi = V\Lambda
V^\top$, $u = V^\top w$) a mean-field posterior $q(u) = \prod_i q_i(u_i)$ predicts with mean
$\phi^\top V\bar u$ and variance $\sum_i (\phi^\top v_i)^2 s_i + E[\sigma^2]$, $s_i = \mathrm{Var}_q(u_i)$: it
needs the whole `b x b` rotation. `compact_posterior` keeps

- the mean in the feature basis, $m = V\bar u$ (`b` numbers): the predictive mean $\phi^\top m$ is exact;
- the `k` directions $V_K$ whose variances differ from a shared value $\bar s$, with their factors
  $q_i$ centred on their means;
- for the complement $C$ (the other `b - k` directions) the variance $\bar s\,\|P_C\phi\|^2$ with
  $\|P_C\phi\|^2 = \|\phi\|^2 - \|V_K^\top\phi\|^2$, which needs no vector of $C$.

The variance of the compact model differs from the full one by
$\Delta(\phi) = \sum_{i \in C} (\phi^\top v_i)^2 (\bar s - s_i)$. $C$ is one band of the sorted variances,
the larger of two (`tol` is the budget of both bounds):

- **the largest variances** (the null space of $\Phi$, where the posterior is the prior, and the directions
  the data barely move), with $\bar s = \max_C s_i$: then $0 \le \Delta(\phi) \le (\bar s/\min_C s_i - 1)
  \sum_{i\in C}(\phi^\top v_i)^2 s_i$ at every input, so the band is the largest with
  $\bar s/\min_C s_i - 1 \le$ `tol`: the predictive variance is at most `1 + tol` times the full model's,
  never less (a point's log density falls by at most $\tfrac12\log(1 + \mathrm{tol})$);
- **the smallest variances** (directions the data pin down, $s_i \approx \sigma^2/\lambda_i$; below the null
  space), with $\bar s$ their $\lambda$-weighted median: over the training rows
  $\frac1n\sum_{rows} (\phi^\top v_i)^2 = \lambda_i/n$, so the mean of $|\Delta|$ over them is at most
  $\frac1n\sum_{i\in C}\lambda_i|\bar s - s_i|$, and the band is the largest with that bound at most `tol`
  $E[\sigma^2]$: a bound for inputs like the training rows (with many rows, the case where this band is
  the larger), not for every input.

With few rows (`n < b`) the first band is most of the basis; with many, the second.

The compact model is an ordinary mean-field model on `1 + k + J` features
(`compact_features`): $\phi^\top m$ with a weight fixed at 1, $\phi^\top V_K$ with
the centred factors, and `J = 8` copies of $\|P_C\phi\|$ whose weights take discrete $N(0, 1)$ grids of widths
from `width` down to `width / 2` sds, scaled so that their variances add to $\bar s$ (incommensurate grids, so
that the complement's part of the predictive distribution is close to a Gaussian, as the many factors of the
full model make it, rather than a lattice of atoms).
`kronvi.model.predict_regression`, `kronvi.model.predictive_log_density`,
`kronvi.quantize.sample_codes` and the integer path take it as it is.
Why this form: `docs/decisions/default-recipe.md#the-compact-recipe`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._base.buckets import to_device
from .._base.checks import check_basis_features
from .._base.precision import matmul
from .._stats.eigen import Eigenbasis
from .families import MeanField
from .grids import DiscretePrior

_ROUNDING = 1e-6  # variances this close (relatively) count as equal in the top band
COPIES = 8  # J: complement columns, their grids' widths from `width` down to `width / 2`


class CompactBasis(NamedTuple):
    r"""The map from `b` features to the `1 + k + J` features of a compact model
    (`compact_features`).

    Attributes:
      mean: `(b,)` the posterior mean of the weights in the feature basis, $m = V\bar u$.
      vectors: `(b, k)` the kept eigenvectors $V_K$ (orthonormal columns).
      complement: `(J,)` the factors $a_j$ of the complement's columns $a_j\|P_C\phi\|$.
    """

    mean: jax.Array
    vectors: jax.Array
    complement: jax.Array

    @property
    def num_weights(self) -> int:
        return 1 + self.vectors.shape[-1] + self.complement.shape[-1]

    @staticmethod
    def check(basis, num_features: int, name: str = "basis") -> int:
        """Checks the shapes and values for `num_features` features; returns the number of weights."""
        b = num_features
        for field, ndim in (("mean", 1), ("vectors", 2), ("complement", 1)):
            x = getattr(basis, field)
            if (
                not isinstance(x, (jax.Array, np.ndarray))
                or np.asarray(x).dtype.kind != "f"
                or x.ndim != ndim
            ):
                raise ValueError(f"`{name}.{field}` must be a {ndim}-d float array, got {x!r}")
            if not np.all(np.isfinite(np.asarray(x))):
                raise ValueError(f"`{name}.{field}` holds NaN or inf")
        if basis.mean.shape != (b,) or basis.vectors.shape[0] != b:
            raise ValueError(
                f"`{name}` is for {basis.mean.shape[0]} and {basis.vectors.shape[0]} features, expected {b}"
            )
        if basis.vectors.shape[1] > b or not 1 <= basis.complement.shape[0]:
            raise ValueError(f"`{name}` keeps {basis.vectors.shape[1]} of {b} directions with "
                             f"{basis.complement.shape[0]} complement columns")  # fmt: skip
        if not np.all(np.asarray(basis.complement) >= 0):
            raise ValueError(f"`{name}.complement` must be non-negative")
        return 1 + basis.vectors.shape[1] + basis.complement.shape[0]


def compact_features(basis: CompactBasis, Phi: ArrayLike) -> jax.Array:
    r"""The features of a compact model: $[\phi^\top m,\ \phi^\top V_K,\ a_1 r, \dots, a_J r]$ with
    $r = \|\phi - V_K V_K^\top\phi\|$, `(num_points, 1 + k + J)`.

    Args:
      basis: `CompactBasis` from `compact_posterior`.
      Phi: `(num_points, b)` features in the basis the eigenvectors were computed in.

    Example:
      >>> import jax.numpy as jnp, kronvi
      >>> basis = kronvi.model.CompactBasis(jnp.array([1.0, 0.0]), jnp.array([[1.0], [0.0]]), jnp.array([2.0]))
      >>> kronvi.model.compact_features(basis, jnp.array([[3.0, 4.0]])).tolist()  # r = |(0, 4)| = 4
      [[3.0, 3.0, 8.0]]
    """
    if not isinstance(basis, CompactBasis):
        raise TypeError(f"`basis` must be a CompactBasis, got {type(basis).__name__}")
    Phi = check_basis_features(Phi, basis.mean.shape[0])
    return _compact_features(basis, Phi)


@jax.jit
def _compact_features(basis, Phi):
    dtype = Phi.dtype
    V = basis.vectors.astype(dtype)
    P = matmul(Phi, jnp.concatenate([basis.mean[:, None].astype(dtype), V], axis=1))
    # |P_C phi| as the norm of the residual phi - V_K V_K^T phi, not as |phi|^2 - |V_K^T phi|^2: that
    # difference cancels where phi lies almost in the kept span, and with float16 vectors (V_K^T V_K = I
    # to ~1e-4) its error, times the complement's prior-sized variance, tripled the predictive variance
    # (concreteslump); the residual's error is second order in it.
    r = jnp.sqrt(jnp.sum((Phi - matmul(P[:, 1:], V.T)) ** 2, axis=1))
    return jnp.concatenate([P, r[:, None] * basis.complement.astype(dtype)[None, :]], axis=1)


def _weighted_median(s, w):
    """The `w`-weighted median of `s` (sorted ascending); the middle value when all weights are 0."""
    total = np.sum(w)
    if not total > 0:
        return s[len(s) // 2]
    return s[min(int(np.searchsorted(np.cumsum(w), 0.5 * total)), len(s) - 1)]


def _bottom_bound(s, lam, n):
    """The mean |Delta| bound over the training rows of a band of small variances sharing their
    `lam`-weighted median."""
    return float(np.sum(lam * np.abs(s - _weighted_median(s, lam))) / n) if len(s) else 0.0


def complement_split(
    eigenvalues: ArrayLike,
    variances: ArrayLike,
    num_rows: float | jax.Array,
    noise_variance: float | jax.Array,
    *,
    tol: float,
) -> tuple[np.ndarray, float]:
    r"""Which directions a compact model keeps: `(keep, s_bar)`.

    `keep` is a boolean `(b,)` mask of the directions outside the complement band $C$ and `s_bar` the
    band's shared variance $\bar s$ (the module's docstring gives the two bands and their bounds).
    NumPy, float64.

    Args:
      eigenvalues: `(b,)` $\lambda_i$ of $\Phi^\top\Phi$.
      variances: `(b,)` posterior variances $s_i$ of the rotated weights.
      num_rows: $n$, the training rows.
      noise_variance: $E[\sigma^2]$.
      tol: the budget of the bounds, >= 0.

    Example:
      >>> import numpy as np, kronvi
      >>> lam = np.array([0.0, 0.0, 1.0, 50.0]); s = np.array([1.0, 1.0, 0.999, 0.02])
      >>> keep, s_bar = kronvi.model.complement_split(lam, s, 10, 0.1, tol=0.01)
      >>> keep.tolist(), float(s_bar)  # the null space and the barely moved direction share s = 1
      ([False, False, False, True], 1.0)
    """
    lam = np.maximum(np.asarray(eigenvalues, np.float64), 0.0)
    s = np.asarray(variances, np.float64)
    if lam.ndim != 1 or s.shape != lam.shape:
        raise ValueError(f"`eigenvalues` and `variances` must be (b,) arrays, got {lam.shape} and {s.shape}")
    if not (np.all(np.isfinite(lam)) and np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError("`eigenvalues` and `variances` must be finite, and the variances positive")
    if not float(tol) >= 0:
        raise ValueError(f"`tol` must be >= 0, got {tol!r}")
    b, n = len(s), float(num_rows)
    order = np.argsort(s, kind="stable")
    ss, ls = s[order], lam[order]
    # the suffix with s_max / s_min - 1 <= tol, up to float32 rounding (the null space's equal variances)
    top = int(np.sum(ss >= ss[-1] / (1.0 + float(tol) + _ROUNDING)))
    # the null space at float64's rank tolerance (the eigenbasis is computed in float64)
    null = (lam <= np.max(lam) * b * np.finfo(np.float64).eps)[order]
    below = int(np.argmax(null)) if np.any(null) else b  # the bottom band stays below the null space
    budget = float(tol) * float(noise_variance)
    lo, hi = 0, below  # the bound grows with the band (an L1 spread about its minimizer): binary search
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _bottom_bound(ss[:mid], ls[:mid], n) <= budget else (lo, mid - 1)
    in_band = np.zeros(b, bool)
    if top >= lo:
        in_band[order[b - top :]] = True
        return ~in_band, float(ss[-1])
    in_band[order[:lo]] = True
    return ~in_band, float(_weighted_median(ss[:lo], ls[:lo]))


def _unit_grid(levels, width, dtype):
    """A discrete N(0, 1) on `levels` points over `± width`: `(values, log_probs, variance)`."""
    values = np.linspace(-width, width, levels)
    logp = -0.5 * values**2
    logp -= np.logaddexp.reduce(logp)
    p = np.exp(logp)
    return values.astype(dtype), logp.astype(dtype), float(np.sum(p * values**2) - np.sum(p * values) ** 2)


def weight_moments64(q_w: MeanField, prior_w: DiscretePrior) -> tuple[np.ndarray, np.ndarray]:
    """Posterior means and variances `(b,)` of the weights of `q_w` on `prior_w`'s grids, float64 NumPy (the
    probabilities normalized in float64 from the logits)."""
    values = np.asarray(prior_w.values, np.float64)
    logq = np.asarray(q_w.logits, np.float64)
    probs = np.exp(logq - np.logaddexp.reduce(logq, axis=1, keepdims=True))
    mean = np.sum(probs * values, axis=1)
    return mean, np.sum(probs * (values - mean[:, None]) ** 2, axis=1)


def compact_posterior(
    basis: Eigenbasis,
    q_w: MeanField,
    prior_w: DiscretePrior,
    num_rows: float | jax.Array,
    noise_variance: float | jax.Array,
    *,
    tol: float,
    width: float,
    vectors_dtype: DTypeLike | None = None,
) -> tuple[CompactBasis, DiscretePrior, MeanField]:
    r"""The compact form of a mean-field posterior over eigenbasis weights: `(compact_basis, prior, q)`.

    See the module's docstring for the construction and the bound on the variance it changes. The
    predictive mean on `compact_features` is the full model's; the predictive
    variance differs by $\Delta(\phi)$, within the bound of the band chosen
    (`complement_split`). Computed in float64 and returned in the dtype of
    `prior_w`, except the kept vectors, which are stored in `vectors_dtype`.

    Args:
      basis: `Eigenbasis` `(b, b)` of the training features.
      q_w: `MeanField` `(b, m)`, the posterior of the rotated weights.
      prior_w: `DiscretePrior` `(b, m)`, their prior.
      num_rows: the training rows $n$.
      noise_variance: $E_q[\sigma^2]$.
      tol: the budget of the variance bound (`complement_split`).
      width: half-width, in sds, of the complement columns' widest grid.
      vectors_dtype: the dtype the kept eigenvectors are stored in; `None`: the dtype of `prior_w`.
        `jnp.float16` halves the model's largest array; `compact_features` computes in the dtype of its
        features whatever this is.

    Returns:
      `CompactBasis`, and the `DiscretePrior` and
      `MeanField` of its `1 + k + J` weights: the first fixed at 1, then the kept
      directions' grids minus their means, then `J` complement grids.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> Phi = jax.random.normal(jax.random.key(0), (3, 6)); y = Phi[:, 0]  # n = 3 < b = 6: a null space
      >>> stats, basis = kronvi.stats.eigenbasis(kronvi.stats.regression_stats(Phi, y))
      >>> prior = kronvi.model.gaussian_prior(6, 1.0)
      >>> q = kronvi.fitting.fit_regression(stats, prior, kronvi.model.noise_prior(0.1, levels=1), sweep="diagonal")[0]
      >>> cb, prior_c, q_c = kronvi.model.compact_posterior(basis, q, prior, 3, 0.1, tol=0.01, width=3.0)
      >>> cb.vectors.shape, prior_c.values.shape  # 3 of 6 directions kept, 1 + 3 + 8 weights
      ((6, 3), (12, 15))
    """
    if not isinstance(basis, Eigenbasis):
        raise TypeError(f"`basis` must be an Eigenbasis, got {type(basis).__name__}")
    if not isinstance(prior_w, DiscretePrior) or not isinstance(q_w, MeanField):
        raise TypeError("`prior_w` must be a DiscretePrior and `q_w` a MeanField")
    dtype = prior_w.values.dtype
    vectors_dtype = dtype if vectors_dtype is None else jnp.dtype(vectors_dtype)
    if not jnp.issubdtype(vectors_dtype, jnp.floating):
        raise ValueError(f"`vectors_dtype` must be a float dtype, got {vectors_dtype!r}")
    b, m = prior_w.values.shape
    if basis.vectors.shape != (b, b) or q_w.logits.shape != (b, m):
        raise ValueError(
            f"`basis` {basis.vectors.shape}, `prior_w` {(b, m)} and `q_w` {q_w.logits.shape} must agree on b"
        )
    values = np.asarray(prior_w.values, np.float64)
    logq = np.asarray(q_w.logits, np.float64)
    mean_u, var_u = weight_moments64(q_w, prior_w)
    V = np.asarray(basis.vectors, np.float64)
    keep, s_bar = complement_split(basis.eigenvalues, var_u, num_rows, noise_variance, tol=tol)
    grids = [_unit_grid(m, width * (1.0 - 0.5 * j / COPIES), np.float64) for j in range(COPIES)]
    scales = np.array([np.sqrt(s_bar / (COPIES * g[2])) for g in grids])
    # cast by NumPy, then placed: no program to compile
    compact = CompactBasis(
        *to_device((np.asarray(V @ mean_u, dtype), np.asarray(V[:, keep], vectors_dtype), np.asarray(scales, dtype)))
    )
    fixed = np.ones((1, m))
    prior_values = np.concatenate([fixed, values[keep] - mean_u[keep, None], [g[0] for g in grids]])
    prior_logp = np.concatenate(
        [np.zeros((1, m)), np.asarray(prior_w.log_probs, np.float64)[keep], [g[1] for g in grids]]
    )
    q_logits = np.concatenate([np.zeros((1, m)), logq[keep], [g[1] for g in grids]])
    prior = DiscretePrior(*to_device((np.asarray(prior_values, dtype), np.asarray(prior_logp, dtype))))
    return compact, prior, MeanField(to_device(q_logits, dtype))
