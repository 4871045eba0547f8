"""`kronvi._solvers.linalg`'s NumPy helper against the whole-matrix expression it replaces."""

import numpy as np
import pytest

from kronvi._solvers.linalg import mirror_lower


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 129, 300])
@pytest.mark.parametrize("order", ["C", "F"])
def test_mirror_lower_equals_the_triangles_expression_to_the_bit(n, order):
    R = np.asarray(np.random.default_rng(n).normal(size=(n, n)), order=order)
    lower = np.tril(R) + np.tril(R, -1).T
    upper = np.triu(R) + np.triu(R, 1).T
    out = mirror_lower(R.copy(order=order))
    assert np.array_equal(out, lower)
    assert np.array_equal(mirror_lower(R.copy(order=order).T).T, upper)  # the upper triangle, through `.T`
    if n > 1:  # not a no-op: the input was not symmetric
        assert not np.array_equal(out, R)


def test_mirror_lower_works_in_place_and_with_any_block():
    R = np.random.default_rng(0).normal(size=(70, 70))
    expected = np.tril(R) + np.tril(R, -1).T
    for block in (1, 7, 64, 200):
        S = R.copy()
        assert mirror_lower(S, block=block) is S
        assert np.array_equal(S, expected)


@pytest.mark.parametrize(
    "R, block, message",
    [(np.ones((3, 4)), 64, "square"), (np.ones(3), 64, "square"), (np.ones((3, 3)), 0, "block")],
)
def test_mirror_lower_names_a_bad_argument(R, block, message):
    with pytest.raises(ValueError, match=message):
        mirror_lower(R, block=block)


def test_jittered_cholesky_differentiates_through_its_jitter():
    """A float32 matrix the plain factorization cannot factor: the jitter found, and reverse mode through
    the factor equals reverse mode through a plain Cholesky of the matrix plus that jitter."""
    import jax
    import jax.numpy as jnp

    from kronvi._solvers.linalg import jittered_cholesky

    v = jnp.array([1.0, 1.0 + 1e-4, 1.0 - 1e-4], jnp.float32)
    M = jnp.outer(v, v) - 1e-6 * jnp.eye(3, dtype=jnp.float32)  # indefinite by a hair
    assert not np.all(np.isfinite(np.asarray(jnp.linalg.cholesky(M))))
    L = jittered_cholesky(M)
    assert np.all(np.isfinite(np.asarray(L)))
    jitter = float(jnp.mean(jnp.diagonal(L @ L.T - M)))
    assert jitter > 0
    f = lambda A: jnp.sum(jittered_cholesky(A) ** 2 * jnp.arange(1.0, 10.0).reshape(3, 3))  # noqa: E731
    g = lambda A: jnp.sum(jnp.linalg.cholesky(A + jitter * jnp.eye(3)) ** 2 * jnp.arange(1.0, 10.0).reshape(3, 3))  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(M), jax.grad(g)(M), rtol=1e-3, atol=1e-3)
