import helpers as H
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

from kronvi._base import kron as K


def _rand(rng, shape, dtype, positive=False):
    x = rng.uniform(0.1, 1.0, size=shape) if positive else rng.normal(size=shape)
    return jnp.asarray(x, dtype)


@pytest.mark.parametrize("b,m", [(1, 4), (3, 3), (4, 2)])
def test_inner_products_match_dense(dtype, b, m):
    rng = np.random.default_rng(0)
    a, c = _rand(rng, (b, m), dtype), _rand(rng, (b, m), dtype)
    dense = float(np.dot(np.asarray(H.kron_dense(a), np.float64), np.asarray(H.kron_dense(c))))
    np.testing.assert_allclose(float(H.kron_inner(a, c)), dense, rtol=tol(dtype))
    ap, cp = jnp.abs(a) + 0.1, jnp.abs(c) + 0.1
    ref = np.log(np.dot(np.asarray(H.kron_dense(ap), np.float64), np.asarray(H.kron_dense(cp))))
    np.testing.assert_allclose(float(H.kron_log_inner(ap, cp)), ref, rtol=tol(dtype))
    np.testing.assert_allclose(
        float(K.kron_log_inner_from_logs(jnp.log(ap), jnp.log(cp))), ref, rtol=tol(dtype)
    )


def test_log_of_product_is_kronecker_sum(dtype):
    rng = np.random.default_rng(1)
    a = _rand(rng, (3, 4), dtype, positive=True)
    np.testing.assert_allclose(
        H.kron_sum_dense(H.kron_log(a)),
        np.log(np.asarray(H.kron_dense(a), np.float64)),
        rtol=tol(dtype),
        atol=tol(dtype),
    )


def test_elementwise_product(dtype):
    rng = np.random.default_rng(2)
    a, c = _rand(rng, (3, 3), dtype), _rand(rng, (3, 3), dtype)
    np.testing.assert_allclose(
        H.kron_dense(H.kron_mul(a, c)),
        np.asarray(H.kron_dense(a)) * np.asarray(H.kron_dense(c)),
        rtol=tol(dtype),
        atol=tol(dtype),
    )


@pytest.mark.parametrize("zero_total", [False, True])
def test_kron_sum_inner_matches_dense(dtype, zero_total):
    rng = np.random.default_rng(3)
    s, a = _rand(rng, (4, 3), dtype), _rand(rng, (4, 3), dtype)
    if zero_total:  # a factor summing to zero must not break the division-free product
        a = a.at[1].set(jnp.asarray([1.0, -1.0, 0.0], dtype))
    dense = np.dot(np.asarray(H.kron_sum_dense(s), np.float64), np.asarray(H.kron_dense(a), np.float64))
    np.testing.assert_allclose(float(H.kron_sum_inner(s, a)), dense, rtol=tol(dtype), atol=tol(dtype))


def test_kron_sum_times_product_is_sum_of_products(dtype):
    rng = np.random.default_rng(4)
    s, a = _rand(rng, (3, 2), dtype), _rand(rng, (3, 2), dtype)
    terms = H.kron_sum_mul_kron(s, a)
    assert terms.shape == (3, 3, 2)
    np.testing.assert_allclose(
        H.kron_sum_of_products_dense(terms),
        np.asarray(H.kron_sum_dense(s)) * np.asarray(H.kron_dense(a)),
        rtol=tol(dtype),
        atol=tol(dtype),
    )


def test_sum_of_products_inner(dtype):
    rng = np.random.default_rng(5)
    A, B = _rand(rng, (2, 3, 3), dtype), _rand(rng, (4, 3, 3), dtype)
    dense = np.dot(
        np.asarray(H.kron_sum_of_products_dense(A), np.float64),
        np.asarray(H.kron_sum_of_products_dense(B), np.float64),
    )
    np.testing.assert_allclose(float(H.kron_sum_of_products_inner(A, B)), dense, rtol=tol(dtype))


def test_expected_quadratic_matches_enumeration(dtype):
    rng = np.random.default_rng(6)
    b, m = 3, 4
    vals = rng.normal(size=(b, m))
    p = rng.dirichlet(np.ones(m), size=b)
    M = rng.normal(size=(b, b))
    A = M @ M.T
    from helpers import enumerate_configs

    cfg = enumerate_configs(b, m)
    W = vals[np.arange(b), cfg]
    prob = p[np.arange(b), cfg].prod(-1)
    ref = np.sum(prob * np.einsum("ci,ij,cj->c", W, A, W))
    mean = (p * vals).sum(-1)
    var = (p * (vals - mean[:, None]) ** 2).sum(-1)
    got = K.expected_quadratic(jnp.asarray(mean, dtype), jnp.asarray(var, dtype), jnp.asarray(A, dtype))
    np.testing.assert_allclose(float(got), ref, rtol=tol(dtype))


def test_kron_sum_expectation_matches_dense(dtype):
    # The library's E_q[sum_j s_j] for normalized factors: the dense Kronecker sum against the dense q.
    rng = np.random.default_rng(8)
    s = _rand(rng, (4, 3), dtype)
    q = jnp.asarray(rng.dirichlet(np.ones(3), size=4), dtype)
    dense = np.dot(np.asarray(H.kron_sum_dense(s), np.float64), np.asarray(H.kron_dense(q), np.float64))
    np.testing.assert_allclose(float(K.kron_sum_expectation(s, q)), dense, rtol=tol(dtype))


def test_primitives_vmap_over_leading_axis(dtype):
    rng = np.random.default_rng(7)
    s, a = _rand(rng, (5, 3, 2), dtype), _rand(rng, (5, 3, 2), dtype, positive=True)
    for fn in (K.kron_sum_expectation, K.kron_log_inner_from_logs, H.kron_inner, H.kron_sum_inner):
        batched = jax.vmap(fn)(s, a)
        looped = jnp.stack([fn(s[i], a[i]) for i in range(5)])
        np.testing.assert_allclose(batched, looped, rtol=tol(dtype))
        assert batched.dtype == jnp.dtype(dtype)
