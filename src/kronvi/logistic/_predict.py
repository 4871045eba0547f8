r"""Exact predictive probabilities of DIRECT logistic regression from the characteristic function.

Under a mean-field q, $Z = \Phi^* w$ is a sum of independent discrete variables with the exact
characteristic function $\varphi_Z(t) = \prod_j \sum_k q_{jk} e^{i t \Phi^*_j v_{jk}}$ ($O(bm)$
per $t$). With $L$ a standard logistic variable independent of $Z$,
$E[\sigma(Z)] = P(L < Z) = P(Z - L > 0)$, and the Gil-Pelaez inversion with
$\varphi_L(t) = \pi t / \sinh(\pi t)$ gives

$$ E_q[\sigma(Z)] = \tfrac12 + \int_0^\infty \frac{\operatorname{Im}\varphi_Z(t)}{\sinh(\pi t)}\, dt, $$

an integrand that is finite at 0 and decays like $e^{-\pi t}$. It is computed with the midpoint
rule $t_k = (k + \tfrac12) h$, $k < N$. Two rigorous error terms (derivation in
`docs/notes/2026-11-23-logistic.md`): aliasing, at most
$E[\cosh Z]\, e^{-2\pi/h} / (1 - e^{-2\pi/h})$ with $E\cosh Z$ exact from the MGF, and
truncation, at most $\tfrac{2}{\pi} e^{-\pi N h} / (1 - e^{-\pi N h})$. The step $h$ is chosen
per point to balance the two.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from .._base.checks import check_int, fetch, is_concrete
from .._model.families import check_family
from ._bound import check_design, log_mgf


def default_num_nodes(dtype) -> int:
    """Quadrature nodes inside a trace: 32 in float32, 64 in float64 (errors below 1e-8 and 1e-11 for
    $\\log E\\cosh Z \\lesssim 10$)."""
    return 64 if jnp.dtype(dtype) == jnp.float64 else 32


@jax.jit
def _max_log_cosh(log_q, values, Phi):
    one = jnp.ones((Phi.shape[0], 1), Phi.dtype)
    L = lax.map(
        lambda P: log_mgf(log_q, values, P[None], jnp.concatenate([one[:1], -one[:1]], axis=1))[0],
        Phi,
    )
    return jnp.max(jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0))


def nodes_for(max_log_cosh: float, dtype) -> int:
    r"""Nodes for a total error below 1e-7 (float32) or 1e-13 (float64) at every point: with the balanced
    step the error is about $e^{-E}$ once $N \ge E (E + a) / (2\pi^2)$,
    $a = \log(2 E\cosh Z)$; rounded up to a power of 2 in `[16, 4096]`."""
    E = (13.0 if jnp.dtype(dtype) == jnp.float64 else 7.0) * math.log(10.0) + 2.0
    a = max(float(max_log_cosh), 0.0) + math.log(2.0)
    need = E * (E + a) / (2.0 * math.pi**2)
    return int(min(4096, max(16, 2 ** math.ceil(math.log2(max(need, 1.0))))))


def _step_and_error(log_cosh, num_nodes):
    """Per-point step `h` balancing aliasing and truncation, and the resulting error bound."""
    a = jnp.maximum(log_cosh, 0.0) + math.log(2.0)  # log(2 E cosh Z) >= log 2
    N = num_nodes
    h = (-a + jnp.sqrt(a * a + 8.0 * math.pi**2 * N)) / (2.0 * math.pi * N)
    alias = jnp.exp(log_cosh - 2.0 * math.pi / h) / -jnp.expm1(-2.0 * math.pi / h)
    trunc = (2.0 / math.pi) * jnp.exp(-math.pi * N * h) / -jnp.expm1(-math.pi * N * h)
    return h, alias + trunc


def _chunk_probs(log_q, q, values, Phi, num_nodes):
    r, b = Phi.shape
    one = jnp.ones((r, 1), Phi.dtype)
    L = log_mgf(log_q, values, Phi, jnp.concatenate([one, -one], axis=1))  # log E e^{±Z}
    log_cosh = jnp.logaddexp(L[:, 0], L[:, 1]) - math.log(2.0)
    h, err = _step_and_error(log_cosh, num_nodes)
    t = (jnp.arange(num_nodes, dtype=Phi.dtype) + 0.5)[None, :] * h[:, None]  # (r, N)
    theta = t[:, :, None, None] * (Phi[:, None, :, None] * values[None, None])  # (r, N, b, m)
    re = jnp.sum(q * jnp.cos(theta), axis=-1)
    im = jnp.sum(q * jnp.sin(theta), axis=-1)
    log_abs = jnp.sum(0.5 * jnp.log(re * re + im * im), axis=-1)  # (r, N)
    arg = jnp.sum(jnp.arctan2(im, re), axis=-1)
    integrand = jnp.exp(log_abs) * jnp.sin(arg) / jnp.sinh(math.pi * t)
    p = 0.5 + h * jnp.sum(integrand, axis=-1)
    return jnp.clip(p, 0.0, 1.0), err


def _predict(log_q, values, Phi, num_nodes, chunk):
    n, b = Phi.shape
    m = values.shape[-1]
    num = -(-n // chunk)
    pad = num * chunk - n
    if pad:
        Phi = jnp.concatenate([Phi, jnp.zeros((pad, b), Phi.dtype)])
    q = jnp.exp(log_q)
    p, err = lax.map(lambda P: _chunk_probs(log_q, q, values, P, num_nodes), Phi.reshape(num, chunk, b))
    del m
    return p.reshape(-1)[:n], err.reshape(-1)[:n]


def predict_logistic(
    q_w,
    prior_w,
    Phi_new,
    *,
    num_nodes: int | None = None,
    chunk_size: int | None = None,
    with_error_bound: bool = False,
):
    r"""Exact predictive probabilities $P(y^* = 1 \mid x^*) = E_q[\sigma(\Phi^* w)]$ of DIRECT
    logistic regression, from the exact distribution of $\Phi^* w$ (no sampling).

    $E_q[\sigma(Z)] = \tfrac12 + \int_0^\infty \operatorname{Im}\varphi_Z(t) / \sinh(\pi t)\,dt$ with
    the exact characteristic function $\varphi_Z$ of $Z = \Phi^* w$ (a product over weights),
    by a midpoint rule whose error is bounded rigorously per point (module docstring).
    $O(N b m)$ per point.

    Args:
      q_w: [`kronvi.MeanField`][kronvi.MeanField] `(b, m)`.
      prior_w: [`kronvi.DiscretePrior`][kronvi.DiscretePrior] `(b, m)`.
      Phi_new: `(N, b)` test features, in the dtype of `prior_w`.
      num_nodes: quadrature nodes. Default: for concrete inputs, enough for an error below 1e-7
        (float32) or 1e-13 (float64) at every point (`nodes_for`, from the exact
        $\max_i \log E\cosh Z_i$); inside a trace 32 (float32) or 64 (float64).
      chunk_size: points per chunk (default: about 2**20 numbers per chunk).
      with_error_bound: also return the `(N,)` bound on each probability's quadrature error.

    Returns:
      `(N,)` probabilities; with `with_error_bound`, `(probs, error_bound)`.

    References:
      Gil-Pelaez (1951), "Note on the inversion theorem"; Evans & Nair (2018), section 4.

    Example:
      >>> import jax, jax.numpy as jnp, kronvi, kronvi.logistic as kl
      >>> prior = kronvi.gaussian_prior(1, 1.0, levels=3)   # levels -3, 0, 3
      >>> q = kronvi.MeanField(jnp.log(jnp.array([[0.2, 0.3, 0.5]])))
      >>> p = kl.predict_logistic(q, prior, jnp.array([[1.0]]))
      >>> exact = 0.2 * jax.nn.sigmoid(-3.0) + 0.3 * 0.5 + 0.5 * jax.nn.sigmoid(3.0)
      >>> round(float(p[0]), 5) == round(float(exact), 5)
      True
    """
    Phi_new = check_design(Phi_new, prior_w, "Phi_new")
    check_family(q_w, prior_w, "q_w", "prior_w")
    n, b = Phi_new.shape
    m = prior_w.values.shape[-1]
    if n == 0:
        empty = jnp.zeros((0,), Phi_new.dtype)
        return (empty, empty) if with_error_bound else empty
    if num_nodes is None:
        args = (q_w.logits, prior_w.values, Phi_new)
        if all(is_concrete(a) for a in args):
            log_q = jax.nn.log_softmax(q_w.logits, axis=-1)
            num_nodes = nodes_for(fetch(_max_log_cosh(log_q, prior_w.values, Phi_new)), Phi_new.dtype)
        else:
            num_nodes = default_num_nodes(Phi_new.dtype)
    num_nodes = check_int(num_nodes, "num_nodes", 1)
    if chunk_size is None:
        chunk_size = max(1, min(n, (1 << 20) // (num_nodes * b * m)))
    chunk_size = min(check_int(chunk_size, "chunk_size", 1), n)
    p, err = _predict_jit(q_w.log_probs, prior_w.values, Phi_new, num_nodes, chunk_size)
    return (p, err) if with_error_bound else p


_predict_jit = jax.jit(_predict, static_argnums=(3, 4))
