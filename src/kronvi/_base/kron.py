r"""Kronecker-product algebra on factors, never forming the $m^b$ dense vectors: what the ELBOs use.

A Kronecker-product vector $\bigotimes_{j=1}^b a_j$ is stored as its factors `a` of shape
`(b, m)`; a Kronecker sum $\bigoplus_j s_j = \sum_j 1 \otimes \dots \otimes s_j \otimes \dots
\otimes 1$ (Evans & Nair 2018, eq. 6) likewise as `(b, m)`; a sum of `R` Kronecker-product vectors
as `(R, b, m)`. Dense vectors follow `jnp.kron` order (factor 0 is the slowest-varying index), so
`dense[i]` is the configuration `numpy.unravel_index(i, (m,) * b)`.

Every function works on the trailing axes and maps over leading ones under `jax.vmap`. The rest of the
algebra of Propositions 1-3 (inner products, Kronecker sums, dense forms), which the closed-form ELBOs do not
need, is in the tests' references (`tests/helpers.py`).

References:
  Evans & Nair (2018), Propositions 1-3 and eq. 6.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .precision import matmul


def kron_log_inner_from_logs(log_a, log_b):
    r"""$\log \langle \bigotimes_j a_j, \bigotimes_j b_j\rangle$ with factors given as logs: $\sum_j \mathrm{LSE}_k(\log a_{jk} +
    \log b_{jk})$, stable when factors underflow."""
    return jnp.sum(jax.nn.logsumexp(log_a + log_b, axis=-1), axis=-1)


def kron_sum_expectation(s, q):
    r"""Prop. 3 for normalized factors: $E_{\bigotimes_j q_j}[\bigoplus_j s_j] = \sum_j
    \langle s_j, q_j\rangle$, valid when every $\langle 1, q_j\rangle = 1$ (distributions).

    This is how $E_q[\log p]$ and $E_q[\log q]$ of factorized distributions cost
    $O(bm)$; it skips the products of factor totals of `kron_sum_inner` (all ones here),
    whose gradient would cost more than the rest of the ELBO.
    """
    return jnp.sum(s * q, axis=(-2, -1))


@functools.partial(jax.custom_jvp, nondiff_argnums=())
def expected_quadratic(mean, var, A):
    r"""$E[w^\top A w]$ for independent $w_j$ with means `mean` and variances `var`
    (both `(b,)`): $\bar w^\top A \bar w + \sum_j A_{jj} \mathrm{Var}(w_j)$.

    This is the quadratic term of the Gaussian log-likelihood on Kronecker factors: the $m^b$
    vector of $w^\top A w$ over all configurations is a sum of Kronecker sums (pairs
    $v_i \oplus v_j$ and squares $v_j^2$), and its inner product with
    $\bigotimes_j q_j$ reduces to one matrix-vector product with `A` (the paper's
    $H = \bar w^2 \cdot \mathrm{diag}(\Phi^\top\Phi)$ term carries the diagonal).

    `A` must be symmetric (as $\Phi^\top\Phi$ is). The derivative reuses $A\bar w$ from
    the forward pass, so value and gradient together cost one matrix-vector product.
    """
    return matmul(mean, matmul(A, mean)) + jnp.sum(jnp.diagonal(A, axis1=-2, axis2=-1) * var, axis=-1)


@expected_quadratic.defjvp
def _expected_quadratic_jvp(primals, tangents):
    mean, var, A = primals
    dmean, dvar, dA = tangents
    Am = matmul(A, mean)
    diag = jnp.diagonal(A, axis1=-2, axis2=-1)
    out = matmul(mean, Am) + jnp.sum(diag * var, axis=-1)
    # d(m'Am) = 2 dm'Am + m'dA m for symmetric A; d(sum diag(A) var) = diag(dA) var + diag(A) dvar.
    dout = 2.0 * matmul(dmean, Am) + jnp.sum(diag * dvar, axis=-1)
    dout = (
        dout + matmul(mean, matmul(dA, mean)) + jnp.sum(jnp.diagonal(dA, axis1=-2, axis2=-1) * var, axis=-1)
    )
    return out, dout
