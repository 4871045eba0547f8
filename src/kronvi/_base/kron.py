r"""Kronecker-product algebra on factors, never forming the $m^b$ dense vectors.

A Kronecker-product vector $\bigotimes_{j=1}^b a_j$ is stored as its factors `a` of shape
`(b, m)`; a Kronecker sum $\bigoplus_j s_j = \sum_j 1 \otimes \dots \otimes s_j \otimes \dots
\otimes 1$ (Evans & Nair 2018, eq. 6) likewise as `(b, m)`; a sum of `R` Kronecker-product vectors
as `(R, b, m)`. Dense vectors follow `jnp.kron` order (factor 0 is the slowest-varying index), so
`dense[i]` is the configuration `numpy.unravel_index(i, (m,) * b)`.

Every function works on the trailing axes and maps over leading ones under `jax.vmap`.

References:
  Evans & Nair (2018), Propositions 1-3 and eq. 6.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .precision import matmul


def kron_dense(factors):
    r"""Dense $\bigotimes_j a_j$ of factors `(b, m)` (length `m**b`): a test reference."""
    return functools.reduce(jnp.kron, list(factors))


def kron_sum_dense(factors):
    r"""Dense Kronecker sum $\bigoplus_j s_j$ of factors `(b, m)`: a test reference."""
    b, m = factors.shape
    ones = jnp.ones((m,), factors.dtype)
    out = 0.0
    for j in range(b):
        out = out + kron_dense(jnp.stack([factors[i] if i == j else ones for i in range(b)]))
    return out


def kron_inner(a, b):
    r"""Prop. 1: $\langle \bigotimes_j a_j, \bigotimes_j b_j \rangle = \prod_j \langle a_j, b_j\rangle$.

    Args:
      a, b: factors `(..., b, m)`.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.array([[1.0, 2.0], [3.0, 4.0]]); b = jnp.ones((2, 2))
      >>> float(kron_inner(a, b)) == float(jnp.dot(kron_dense(a), kron_dense(b)))
      True
    """
    return jnp.prod(jnp.sum(a * b, axis=-1), axis=-1)


def kron_log_inner(a, b):
    r"""$\log \langle \bigotimes_j a_j, \bigotimes_j b_j\rangle = \sum_j \log\langle a_j, b_j\rangle$,
    for nonnegative factors (the log-space form used for products over many weights)."""
    return jnp.sum(jnp.log(jnp.sum(a * b, axis=-1)), axis=-1)


def kron_log_inner_from_logs(log_a, log_b):
    r"""As `kron_log_inner` with factors given as logs: $\sum_j \mathrm{LSE}_k(\log a_{jk} +
    \log b_{jk})$, stable when factors underflow."""
    return jnp.sum(jax.nn.logsumexp(log_a + log_b, axis=-1), axis=-1)


def kron_log(factors):
    r"""Prop. 2: the element-wise log of $\bigotimes_j a_j$ is the Kronecker sum
    $\bigoplus_j \log a_j$; returns its factors `log(a)` (positive `a`)."""
    return jnp.log(factors)


def kron_mul(a, b):
    r"""Element-wise product of Kronecker products: $(\bigotimes a_j) \circ (\bigotimes b_j) =
    \bigotimes (a_j \circ b_j)$ (mixed-product property); returns the factors."""
    return a * b


def kron_sum_inner(s, a):
    r"""Prop. 3: $\langle \bigoplus_j s_j, \bigotimes_j a_j\rangle = \sum_j \langle s_j, a_j\rangle
    \prod_{i \neq j} \langle 1, a_i\rangle$.

    For normalized distributions ($\langle 1, a_i\rangle = 1$) this is the expectation
    $\sum_j E_{a_j}[s_j]$, which is how $E_q[\log p]$ and $E_q[\log q]$ of factorized
    distributions cost $O(bm)$. Computed without division, so zero factors are fine.

    Args:
      s: Kronecker-sum factors `(..., b, m)`.
      a: Kronecker-product factors `(..., b, m)`.
    """
    dots = jnp.sum(s * a, axis=-1)  # (..., b)
    totals = jnp.sum(a, axis=-1)  # (..., b)
    # prod_{i != j} totals_i via exclusive prefix and suffix products.
    ones = jnp.ones_like(totals[..., :1])
    prefix = jnp.cumprod(jnp.concatenate([ones, totals[..., :-1]], axis=-1), axis=-1)
    suffix = jnp.flip(
        jnp.cumprod(jnp.concatenate([ones, jnp.flip(totals, -1)[..., :-1]], axis=-1), axis=-1), -1
    )
    return jnp.sum(dots * prefix * suffix, axis=-1)


def kron_sum_expectation(s, q):
    r"""Prop. 3 for normalized factors: $E_{\bigotimes_j q_j}[\bigoplus_j s_j] = \sum_j
    \langle s_j, q_j\rangle$, valid when every $\langle 1, q_j\rangle = 1$ (distributions).

    This is how $E_q[\log p]$ and $E_q[\log q]$ of factorized distributions cost
    $O(bm)$; it skips the products of factor totals of `kron_sum_inner` (all ones here),
    whose gradient would cost more than the rest of the ELBO.
    """
    return jnp.sum(s * q, axis=(-2, -1))


def kron_sum_mul_kron(s, a):
    r"""Element-wise $(\bigoplus_j s_j) \circ (\bigotimes_j a_j)$, a sum of `b` Kronecker
    products: returns factors `(b, b, m)` where term `j` has factor `s_j a_j` at `j` and `a_i`
    elsewhere."""
    b = a.shape[-2]
    eye = jnp.eye(b, dtype=bool)[..., None]
    return jnp.where(eye, (s * a)[..., None, :, :], a[..., None, :, :])


def kron_sum_of_products_dense(terms):
    r"""Dense $\sum_r \bigotimes_j a^{(r)}_j$ of terms `(R, b, m)`: a test reference."""
    return sum(kron_dense(t) for t in terms)


def kron_sum_of_products_inner(A, B):
    r"""$\langle \sum_r \bigotimes_j a^{(r)}_j, \sum_s \bigotimes_j b^{(s)}_j\rangle =
    \sum_{r,s} \prod_j \langle a^{(r)}_j, b^{(s)}_j\rangle$ for terms `A (R, b, m)`, `B (S, b, m)`,
    in $O(RSbm)$."""
    return jnp.sum(jax.vmap(lambda a: jax.vmap(lambda bb: kron_inner(a, bb))(B))(A))


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
