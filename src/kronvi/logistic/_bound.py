r"""Lower bounds on the expected log-likelihood of logistic regression under a mean-field discrete q.

Labels are $y_i \in \{0, 1\}$ with $P(y_i = 1 \mid w) = \sigma(z_i)$, $z_i = \Phi_i w$.
With the sign $s_i = 2 y_i - 1$ the log-likelihood of a row is
$\log\sigma(s_i z_i) = -\mathrm{softplus}(u_i)$, $u_i = -s_i z_i$. The paper writes
$P(y = 0 \mid w) = \sigma(\Phi w)$, i.e. its logit is minus ours; its Theorem 2 reads the same in
either convention once written with $u_i$ (the "wrong-class margin").

Under a mean-field $q(w) = \prod_j q_j(w_j)$ the moment generating function of $z_i$ is a
product over weights (a Kronecker product, Prop. 2), so for any real $c$

$$ \log E_q\, e^{c z_i} = \sum_{j=1}^b \log \sum_{k=1}^m q_{jk}\, e^{c\, \Phi_{ij} v_{jk}}, $$

which costs $O(bm)$ per row and is computed with log-sum-exp (stable for any $|c\,\Phi w|$).
Every bound below is a function of a few of these per-row log-MGFs:

* `"theorem2"` (the paper's): $\mathrm{softplus}(u) \le e^{u}$, so
  $E\log\sigma(s z) \ge -E e^{u}$. Loose (exponentially so) for confidently misclassified rows.
* `"jensen"`: $\log(1 + t)$ is concave in $t = e^u$, so its tangent at a per-row centre
  $t_0 = e^{a}$ bounds it; the best centre is $a = \log E e^{u}$ and gives
  $E\log\sigma(s z) \ge -\log(1 + E e^{u})$. Always at least as tight as `"theorem2"` (the
  paper's first-order expansion around the optimized per-row centre).
* `"tilted"` (default): for any $\alpha$,
  $\mathrm{softplus}(u) = \alpha u + \log(e^{-\alpha u} + e^{(1-\alpha)u})$, and the concavity of
  $\log$ gives
  $$ E\log\sigma(s z) \ge -\min_{\alpha \in A}\Big[\alpha E u + \log\big(E e^{-\alpha u} + E e^{(1-\alpha) u}\big)\Big], $$
  here over $A = \{0, \tfrac12, 1\}$. $\alpha = 0$ is `"jensen"`;
  $\alpha = 1$ is its mirror image, nearly exact for confidently misclassified rows; for a
  Gaussian $u \sim N(\mu, v)$ $\alpha = \tfrac12$ gives $\mathrm{softplus}(\mu) + v/8$.

Why the default is `"tilted"`: `docs/decisions/classifier.md#the-tilted-bound`.

References:
  Evans & Nair (2018), section 4 (Theorem 2) and appendix B.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from .._base.checks import (
    as_float_array,
    check_finite,
    check_int,
    check_ndim,
    check_numeric,
    check_same_dtype,
    is_concrete,
    reduce_concrete,
)
from .._base.deprecation import reordered_arguments
from .._base.kron import kron_sum_expectation
from .._base.precision import matmul
from .._model.families import MeanField, check_family, entropy
from .._model.grids import DiscretePrior, check_weight_prior

BOUNDS = ("tilted", "jensen", "theorem2")
DEFAULT_BOUND = "tilted"
_ALPHAS = (0.0, 0.5, 1.0)

# Multipliers c of s_i z_i whose log-MGF each bound needs.
_EXPONENTS = {
    "theorem2": (-1.0,),
    "jensen": (-1.0,),
    "tilted": (-1.0, -0.5, 0.5, 1.0),
}
_ELEMENTS_PER_CHUNK = 1 << 20


# ----------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------


def check_bound(bound) -> str:
    if bound not in BOUNDS:
        raise ValueError(f"`bound` must be one of {BOUNDS}, got {bound!r}")
    return bound


@jax.jit
def _num_bad_labels(y):
    return jnp.sum((y != 0) & (y != 1))


def check_labels(y: ArrayLike | None, num_rows: int, dtype: DTypeLike, name: str = "y") -> jax.Array:
    """`y` as a float array of 0/1 labels `(num_rows,)`; `ValueError` naming `name` otherwise.

    Shapes are always checked; values (NaN, anything but 0 or 1) only for concrete arrays.
    """
    if y is None:
        raise ValueError(f"`{name}` must be an array of 0/1 labels, got None")
    kind = check_numeric(y, name).kind
    y = jnp.asarray(y)
    if kind in "biu":
        y = y.astype(dtype)
    if y.ndim != 1 or y.shape[0] != num_rows:
        raise ValueError(
            f"`{name}` must have shape ({num_rows},) (one 0/1 label per row), got {tuple(y.shape)}"
        )
    if is_concrete(y) and y.size:
        check_finite(y, name)
        bad = int(reduce_concrete(lambda h: np.sum((h != 0) & (h != 1)), _num_bad_labels, y))
        if bad:
            raise ValueError(f"`{name}` must hold labels 0 or 1 only; {bad} value(s) are neither")
    return y.astype(dtype)


def check_weights(weights, num_rows: int, dtype, name: str = "weights"):
    """Row weights `(num_rows,)`, finite and non-negative (ones for `None`)."""
    if weights is None:
        return jnp.ones((num_rows,), dtype)
    weights = as_float_array(weights, name).astype(dtype)
    if weights.shape != (num_rows,):
        raise ValueError(f"`{name}` must have shape ({num_rows},), got {tuple(weights.shape)}")
    check_finite(weights, name)
    if is_concrete(weights) and weights.size:
        if float(reduce_concrete(np.min, jnp.min, weights)) < 0:
            raise ValueError(f"`{name}` must be non-negative")
        if not float(reduce_concrete(np.max, jnp.max, weights)) > 0:
            raise ValueError(f"`{name}` are all zero: at least one row must count")
    return weights


def check_design(Phi: ArrayLike, prior_w: DiscretePrior, name: str = "Phi") -> jax.Array:
    """`Phi` as a finite float `(n, b)` array matching `prior_w`'s `b` weights and dtype."""
    check_weight_prior(prior_w)
    Phi = as_float_array(Phi, name)
    check_ndim(Phi, 2, name, "(num_points, num_features)")
    if Phi.shape[1] != prior_w.values.shape[-2]:
        raise ValueError(
            f"`{name}` has {Phi.shape[1]} features but `prior_w` has {prior_w.values.shape[-2]} weights"
        )
    check_finite(Phi, name)
    check_same_dtype({name: Phi, "prior_w": prior_w.values})
    return Phi


def check_logistic_args(
    q_w: MeanField,
    prior_w: DiscretePrior,
    Phi: ArrayLike,
    y: ArrayLike,
    name_phi: str = "Phi",
    name_y: str = "y",
) -> tuple[jax.Array, jax.Array]:
    Phi = check_design(Phi, prior_w, name_phi)
    check_family(q_w, prior_w, "q_w", "prior_w")
    check_same_dtype({name_phi: Phi, "q_w": q_w.logits})
    y = check_labels(y, Phi.shape[0], Phi.dtype, name_y)
    return Phi, y


def default_chunk(num_exponents: int, b: int, m: int, n: int) -> int:
    """Rows per chunk so that one chunk's `(rows, exponents, b, m)` tensor holds about 2**20 numbers."""
    return int(max(1, min(n, _ELEMENTS_PER_CHUNK // max(1, num_exponents * b * m))))


# ----------------------------------------------------------------------------------------------------
# Per-row terms
# ----------------------------------------------------------------------------------------------------


def log_mgf(log_q, values, Phi, c):
    r"""Per-row log-MGFs $\log E_q e^{c_{ik} z_i}$, `(r, K)`, for rows `Phi (r, b)` and
    exponents `c (r, K)`; `log_q` and `values` are `(b, m)`."""
    t = c[:, :, None, None] * (Phi[:, None, :, None] * values[None, None]) + log_q[None, None]
    return jnp.sum(jax.nn.logsumexp(t, axis=-1), axis=-1)


def bound_from_mgfs(L, sez, bound: str):
    r"""The per-row bound from its log-MGFs `L (r, K)` (exponents `_EXPONENTS[bound]` times
    $s_i$) and $s_i E_q[z_i]$ `(r,)`. A convex function of each factor $q_j$
    (coordinate ascent relies on it)."""
    if bound == "theorem2":
        return -jnp.exp(L[:, 0])
    if bound == "jensen":
        return -jax.nn.softplus(L[:, 0])
    col = {c: k for k, c in enumerate(_EXPONENTS[bound])}
    zero = jnp.zeros_like(L[:, 0])
    Lc = lambda c: zero if c == 0.0 else L[:, col[c]]  # noqa: E731
    cands = [-a * sez + jnp.logaddexp(Lc(a), Lc(a - 1.0)) for a in _ALPHAS]
    return -jnp.min(jnp.stack(cands, axis=-1), axis=-1)


def bound_grads(L, sez, weights, bound: str):
    r"""The gradients of $\sum_i \text{weights}_i\,\text{bound}_i$ (`bound_from_mgfs`)
    with respect to the log-MGFs `L (K, r)` (rows last) and to $s_i E_q z_i$ `(r,)`, in closed form.

    `"theorem2"`: $-e^{L}$; `"jensen"`: $-\sigma(L)$; `"tilted"`: the active tilt's softmax of its
    two log-MGFs (the gradient of the minimum is the gradient of its smallest term).
    """
    if bound == "theorem2":
        return -weights * jnp.exp(L), jnp.zeros_like(sez)
    if bound == "jensen":
        return -weights * jax.nn.sigmoid(L), jnp.zeros_like(sez)
    # columns: exponents (-1, -1/2, 1/2, 1); tilts 0: (0, L[-1]), 1/2: (L[1/2], L[-1/2]), 1: (L[1], 0)
    a0 = jnp.logaddexp(0.0, L[0])
    a1 = -0.5 * sez + jnp.logaddexp(L[2], L[1])
    a2 = -sez + jnp.logaddexp(L[3], 0.0)
    pick0 = (a0 <= a1) & (a0 <= a2)
    pick1 = ~pick0 & (a1 <= a2)
    pick2 = ~pick0 & ~pick1
    t1 = jax.nn.sigmoid(L[1] - L[2])
    zero = jnp.zeros_like(sez)
    gL = -weights * jnp.stack(
        [
            jnp.where(pick0, jax.nn.sigmoid(L[0]), zero),
            jnp.where(pick1, t1, zero),
            jnp.where(pick1, 1.0 - t1, zero),
            jnp.where(pick2, jax.nn.sigmoid(L[3]), zero),
        ]
    )
    gE = weights * jnp.where(pick1, 0.5, jnp.where(pick2, 1.0, 0.0))
    return gL, gE


def exponent_values(bound: str, dtype):
    """`(K,)` the multipliers $c$ of $s_i z_i$ whose log-MGFs `bound` needs (`_EXPONENTS[bound]`)."""
    return jnp.asarray(_EXPONENTS[bound], dtype)


def exponent_constants(bound: str) -> tuple[float, ...]:
    """The multipliers $c$ of `exponent_values`, as Python floats (for code specialized on them)."""
    return _EXPONENTS[bound]


def exponents(s, bound: str, dtype):
    """The MGF exponents of each row, `(r, K)`: `s_i` times `_EXPONENTS[bound]`."""
    return s[:, None] * exponent_values(bound, dtype)[None, :]


def row_bounds(log_q, values, mean, Phi, s, bound: str):
    r"""Lower bounds on $E_q \log\sigma(s_i z_i)$, `(r,)`, for rows `Phi (r, b)` and signs
    `s (r,)` in $\{-1, +1\}$; `mean (b,)` are the weights' means under q."""
    L = log_mgf(log_q, values, Phi, exponents(s, bound, Phi.dtype))
    return bound_from_mgfs(L, s * matmul(Phi, mean), bound)


def bound_rows_sum(log_q, values, Phi, y, weights, bound: str, chunk_size: int | None):
    r"""$\sum_i \text{weights}_i \cdot \text{bound}_i$ over the rows in chunks of `chunk_size` rows
    (`lax.scan` with rematerialization, so the gradient needs one chunk's memory, not `n`'s)."""
    n, b = Phi.shape
    m = values.shape[-1]
    mean = jnp.sum(jnp.exp(log_q) * values, axis=-1)
    chunk = default_chunk(len(_EXPONENTS[bound]), b, m, n) if chunk_size is None else min(chunk_size, n)
    num = -(-n // chunk)
    pad = num * chunk - n
    s = 2.0 * y - 1.0
    if pad:
        Phi = jnp.concatenate([Phi, jnp.zeros((pad, b), Phi.dtype)])
        s = jnp.concatenate([s, jnp.ones((pad,), s.dtype)])
        weights = jnp.concatenate([weights, jnp.zeros((pad,), weights.dtype)])

    @jax.checkpoint
    def body(total, xs):
        P, sc, wc = xs
        return total + jnp.sum(wc * row_bounds(log_q, values, mean, P, sc, bound)), None

    xs = (Phi.reshape(num, chunk, b), s.reshape(num, chunk), weights.reshape(num, chunk))
    total, _ = lax.scan(body, jnp.zeros((), Phi.dtype), xs)
    return total


_bound_rows_sum_jit = jax.jit(bound_rows_sum, static_argnums=(5, 6))


def kl_to_prior(q_w: MeanField, prior_w: DiscretePrior):
    r"""$\mathrm{KL}(q\,\|\,p) = E_q[\log q] - E_q[\log p]$, exact in $O(bm)$ (Prop. 3)."""
    return -entropy(q_w) - kron_sum_expectation(prior_w.log_probs, q_w.probs)


# ----------------------------------------------------------------------------------------------------
# Public bounds
# ----------------------------------------------------------------------------------------------------


def _old_order(args):
    return isinstance(args[0], MeanField)


def _old_order_after_key(args):
    return isinstance(args[1], MeanField)


@reordered_arguments(("q_w", "prior_w", "Phi", "y"), _old_order)
def logistic_loglik_bound(
    Phi: ArrayLike,
    y: ArrayLike,
    q_w: MeanField,
    prior_w: DiscretePrior,
    *,
    bound: str = DEFAULT_BOUND,
    chunk_size: int | None = None,
) -> jax.Array:
    r"""Lower bound on the expected log-likelihood $\sum_i E_q \log p(y_i \mid w)$ of logistic
    regression under a mean-field discrete posterior.

    $P(y_i = 1 \mid w) = \sigma(\Phi_i w)$; the paper's Theorem 2 writes
    $P(y_i = 0 \mid w) = \sigma(\Phi_i w)$, i.e. its weights are minus ours (see the module
    docstring for the three bounds and how they relate). Computed from per-row log-MGFs of
    $z_i = \Phi_i w$ in log space, $O(n b m)$ (times 1, 1 and 4 MGFs for `"theorem2"`,
    `"jensen"` and `"tilted"`), in chunks of rows.

    Args:
      Phi: `(n, b)` features, in the dtype of `prior_w`.
      y: `(n,)` labels in $\{0, 1\}$ (bool, int or float).
      q_w: `kronvi.model.MeanField` over the weights, logits `(b, m)`.
      prior_w: `kronvi.model.DiscretePrior` `(b, m)`: the weights' grids.
      bound: `"tilted"` (default, the tightest), `"jensen"` or `"theorem2"` (the paper's).
      chunk_size: rows per chunk (default: about 2**20 numbers per chunk).

    Returns:
      A scalar $\le \sum_i E_q \log p(y_i \mid w)$.

    Raises:
      ValueError: naming `y` for labels other than 0/1, NaN or a wrong shape; naming `Phi` for a
        wrong shape or non-finite features; naming `bound` for an unknown bound.

    References:
      Evans & Nair (2018), Theorem 2 and appendix B.

    Example:
      >>> import jax.numpy as jnp, kronvi.logistic as kl, kronvi
      >>> prior = kronvi.model.gaussian_prior(2, 1.0, levels=5)
      >>> q = kronvi.model.MeanField.from_prior(prior)
      >>> Phi, y = jnp.array([[1.0, 0.0], [0.0, -1.0]]), jnp.array([1, 0])
      >>> lb = kl.logistic_loglik_bound(Phi, y, q, prior)
      >>> bool(lb <= 2 * jnp.log(0.5)) and bool(lb > kl.logistic_loglik_bound(Phi, y, q, prior, bound="theorem2"))
      True
    """
    check_bound(bound)
    Phi, y = check_logistic_args(q_w, prior_w, Phi, y)
    if chunk_size is not None:
        chunk_size = check_int(chunk_size, "chunk_size", 1)
    weights = jnp.ones_like(y)
    return _bound_rows_sum_jit(q_w.log_probs, prior_w.values, Phi, y, weights, bound, chunk_size)


@reordered_arguments(("q_w", "prior_w", "Phi", "y"), _old_order)
def logistic_elbo_bound(
    Phi: ArrayLike,
    y: ArrayLike,
    q_w: MeanField,
    prior_w: DiscretePrior,
    *,
    bound: str = DEFAULT_BOUND,
    chunk_size: int | None = None,
) -> jax.Array:
    r"""Lower bound on the ELBO of DIRECT logistic regression:
    `logistic_loglik_bound` $+\, E_q[\log p(w)] - E_q[\log q(w)]$ (the last two exact).

    Args:
      Phi, y, q_w, prior_w, bound, chunk_size: as in `logistic_loglik_bound`.

    Returns:
      A scalar $\le E_q[\log p(y \mid w)] - \mathrm{KL}(q \,\|\, p)$.

    References:
      Evans & Nair (2018), eq. 7 and Theorem 2.
    """
    ll = logistic_loglik_bound(Phi, y, q_w, prior_w, bound=bound, chunk_size=chunk_size)
    return ll - kl_to_prior(q_w, prior_w)


@reordered_arguments(("key", "q_w", "prior_w", "Phi", "y"), _old_order_after_key)
def logistic_loglik_minibatch(
    key: jax.Array,
    Phi: ArrayLike,
    y: ArrayLike,
    q_w: MeanField,
    prior_w: DiscretePrior,
    *,
    batch_size: int,
    bound: str = DEFAULT_BOUND,
    chunk_size: int | None = None,
) -> jax.Array:
    r"""Unbiased minibatch estimate of `logistic_loglik_bound`: $\frac{n}{B}$ times the bound's
    sum over `batch_size` rows drawn uniformly without replacement.

    Args:
      key: `jax.random` key.
      Phi, y, q_w, prior_w, bound, chunk_size: as in `logistic_loglik_bound`.
      batch_size: $B$, rows per minibatch, `1 <= B <= n`.

    Returns:
      A scalar whose expectation over the draw equals `logistic_loglik_bound`.
    """
    check_bound(bound)
    Phi, y = check_logistic_args(q_w, prior_w, Phi, y)
    n = Phi.shape[0]
    batch_size = check_int(batch_size, "batch_size", 1)
    if batch_size > n:
        raise ValueError(f"`batch_size` must be <= the {n} rows of `Phi`, got {batch_size}")
    idx = jax.random.choice(key, n, (batch_size,), replace=False)
    weights = jnp.full((batch_size,), n / batch_size, Phi.dtype)
    return _bound_rows_sum_jit(q_w.log_probs, prior_w.values, Phi[idx], y[idx], weights, bound, chunk_size)


@reordered_arguments(("key", "q_w", "prior_w", "Phi", "y"), _old_order_after_key)
def logistic_loglik_estimate(
    key: jax.Array,
    Phi: ArrayLike,
    y: ArrayLike,
    q_w: MeanField,
    prior_w: DiscretePrior,
    *,
    num_samples: int = 1000,
) -> tuple[jax.Array, jax.Array]:
    r"""Unbiased Monte Carlo estimate of the exact $\sum_i E_q \log p(y_i \mid w)$ and its standard
    error, from `num_samples` independent draws of $w \sim q$ (to measure the bounds' gaps).

    Args:
      key: `jax.random` key.
      Phi, y, q_w, prior_w: as in `logistic_loglik_bound`.
      num_samples: draws $S \ge 2$.

    Returns:
      `(estimate, standard_error)`, scalars.
    """
    Phi, y = check_logistic_args(q_w, prior_w, Phi, y)
    num_samples = check_int(num_samples, "num_samples", 2)
    b = prior_w.values.shape[0]
    codes = jax.random.categorical(key, q_w.logits, axis=-1, shape=(num_samples, b))
    W = jnp.take_along_axis(prior_w.values[None], codes[..., None], axis=-1)[..., 0]  # (S, b)
    s = 2.0 * y - 1.0
    per_sample = jnp.sum(jax.nn.log_sigmoid(s[:, None] * matmul(Phi, W.T)), axis=0)  # (S,)
    return jnp.mean(per_sample), jnp.std(per_sample, ddof=1) / math.sqrt(num_samples)
