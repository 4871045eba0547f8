r"""Drawing grid configurations from a `Mixture`, and its log-density at drawn configurations."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._base.checks import check_int, check_key
from ._family import Mixture, check_mixture


def inverse_cdf(probs, u):
    """Grid index of each uniform `u (..., b)` under factor probabilities `probs (..., b, m)`."""
    cdf = jnp.cumsum(probs, axis=-1)[..., :-1]
    return jnp.sum(cdf <= u[..., None], axis=-1, dtype=jnp.int32)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def sample_indices(key, probs, log_weights, num_samples):
    """Component by categorical draw, then each weight by inverse CDF: `(S, b)` int32 grid indices."""
    key_c, key_u = jax.random.split(key)
    comps = jax.random.categorical(key_c, log_weights, shape=(num_samples,))
    u = jax.random.uniform(key_u, (num_samples, probs.shape[-2]), probs.dtype)
    return inverse_cdf(probs[comps], u)


def log_prob_at(log_probs, log_weights, idx):
    r"""$\log\sum_k \alpha_k \prod_j q^{(k)}_j(x_{sj})$ at indices `idx (S, b)`: `(S,)`."""
    b = log_probs.shape[-2]
    per_comp = jnp.sum(log_probs[:, jnp.arange(b)[None, :], idx], axis=-1)  # (r, S)
    return jax.nn.logsumexp(log_weights[:, None] + per_comp, axis=0)


def sample_per_component(key, probs, per_component):
    """`per_component` draws from each component by inverse CDF: `(r, S_k, b)` int32 grid indices."""
    r, b = probs.shape[0], probs.shape[1]
    u = jax.random.uniform(key, (r, per_component, b), probs.dtype)
    return inverse_cdf(probs[:, None], u)


def sample_mixture(key: jax.Array, q: Mixture, num_samples: int) -> jax.Array:
    r"""Draws from a mixture: a component $k \sim \alpha$, then each $x_j \sim q^{(k)}_j$.

    Args:
      key: PRNG key.
      q: `Mixture` `(r, b, m)` with `m <= 256`.
      num_samples: number of draws `S`.

    Returns:
      Grid indices `(S, b)` as `uint8` (4-bit grids fit; map to values with
      `jnp.take_along_axis(prior_w.values, idx.T, 1).T`).

    Example:
      >>> import jax, jax.numpy as jnp, kronvi
      >>> q = kronvi.mixtures.Mixture(jnp.array([[[9.0, 0.0]], [[0.0, 9.0]]]), jnp.zeros(2))
      >>> x = kronvi.mixtures.sample_mixture(jax.random.key(0), q, 1000)
      >>> x.shape, x.dtype, bool(0.4 < x.mean() < 0.6)
      ((1000, 1), dtype('uint8'), True)
    """
    check_key(key)
    check_mixture(q)
    num_samples = check_int(num_samples, "num_samples", 1)
    if q.logits.shape[-1] > 256:
        raise ValueError(f"`q` has {q.logits.shape[-1]} grid levels; uint8 indices need <= 256")
    return sample_indices(key, q.probs, q.log_weights, num_samples=num_samples).astype(jnp.uint8)
