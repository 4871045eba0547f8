r"""Local-expectation score tables: every single-site change of a draw, for the `"local"` estimator.

For a draw $x$ of component `k`, the score of factor `j` depends on $x_j$ alone, so its
expectation over $x_j$ given the other coordinates is a sum over the `m` levels of
$g(x_{-j}, l)$. All `b m` single-site changes come from one `(b, m)` table per draw.

References:
  Titsias & Lazaro-Gredilla (2015), "Local expectation gradients for black box variational inference".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .._base.precision import einsum
from ._family import MixturePrior

LOCAL_BATCH = 2**19  # grid cells per batch of draws in the local scores (~2 MB of float32 at a time)


def level_scale(log_probs):
    """`(N, E)` for `local_table`: the per-site-and-level maximum over components of `log_probs
    (C, b, m)` and `exp(log_probs - N)`, whose maximum over components is 1."""
    N = jnp.max(log_probs, axis=0)
    return N, jnp.exp(log_probs - N)


def local_table(log_probs, log_weights, x, scale=None):
    r"""For one configuration `x (b,)`: $\log\sum_c w_c \prod_i p^{(c)}_i(x'_i)$ at every single-site
    change $x' = (x_{-j}, l)$, a `(b, m)` table (`log_probs (C, b, m)`), *less a per-site
    constant* $M_j = \max_c \rho_{cj}$, where $\rho_{cj}$ is the log weight plus the other
    sites' log product. The callers only use differences across levels, and leaving out $M_j$
    (and the other sites' sum, of order `b` nats) avoids float32 cancellation between large numbers.

    `scale=None`: $\mathrm{LSE}_c(\rho_{cj} - M_j + \log p^{(c)}_j(l))$, exact, `C * b * m`
    exponentials. With `scale` from `level_scale`: $N_{jl} + \log\sum_c e^{\rho_{cj} - M_j}
    E_{cjl}$, `C * b` exponentials and a multiply-add (`docs/decisions/fitting.md#mixtures`).
    Every factor is at most 1 and the sum at least its largest term, so it underflows only where every
    term is below the smallest normal number (about $e^{-87}$ in float32) and is floored there. Use it only for the
    posterior's own table (`local_scores`): there the floor can touch component `k`'s own term
    only where it is below $e^{-87}$, i.e. where $q^{(k)}_j(l)$ is that far below the
    likeliest component's, or at a draw from $q^{(k)}$ that another component explains
    $e^{87}$ times better (probability below $e^{-87}/\alpha_k$, Markov's inequality), and
    the score $q^{(k)}_j(l)\,(F_{jl} - \bar F_j)$ changes by that order. A mixture prior's table has
    no such link to the draws, so it is computed exactly."""
    at = log_probs[:, jnp.arange(x.shape[0]), x]  # (C, b): log p_c,j(x_j)
    rest = (log_weights + jnp.sum(at, axis=-1))[:, None] - at  # (C, b): without site j
    rest = rest - jnp.max(rest, axis=0)
    if scale is None:
        return jax.nn.logsumexp(rest[..., None] + log_probs, axis=0)
    N, E = scale
    s = einsum("cj,cjl->jl", jnp.exp(rest), E)
    return N + jnp.log(jnp.maximum(s, jnp.finfo(s.dtype).tiny))


def local_scores(q, prior_w, idx, batch_size):
    r"""Local-expectation (Rao-Blackwellized) score terms: for component `k`'s draws `idx[k] (S_k, b)`,
    the mean over draws of $q^{(k)}_j(l)\,(F_{jl} - \sum_{l'} q^{(k)}_j(l')F_{jl'})$, where
    $F_{jl} = f(x_{-j}, l)$ and $f = \log q^{(k)} - \log q\ (+ \log p)$: the exact
    expectation over $x_j$ of $f(x)\nabla_{\text{logits}_{kj}}\log q^{(k)}_j(x_j)$, given the
    draw's other coordinates. `F` enters only through differences across levels, so each site's
    constant (the other sites' log-probabilities) is left out. Returns `(r, b, m)`; no gradient flows
    through it."""
    r, per, b = idx.shape
    probs = q.probs
    comp = jnp.repeat(jnp.arange(r), per)
    q_scale = level_scale(q.log_probs)
    mixture_prior = isinstance(prior_w, MixturePrior)

    def one(args):
        k, x = args
        F = q.log_probs[k] - local_table(q.log_probs, q.log_weights, x, q_scale)  # (b, m)
        if mixture_prior:
            F = F + local_table(prior_w.log_probs, prior_w.log_weights, x)
        p = probs[k]
        return p * (F - jnp.sum(p * F, axis=-1, keepdims=True))

    terms = lax.map(one, (comp, idx.reshape(r * per, b)), batch_size=batch_size)  # (r * S_k, b, m)
    return jnp.mean(terms.reshape(r, per, b, -1), axis=1)
