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
    """Rank-one matrices, which no plain factorization takes, along a path that stays rank one (the jitter's
    level stays put): forward and reverse mode against central differences in float64, the jitter's
    dependence on the mean diagonal included; a plain matrix too, and one matrix at a time."""
    import jax
    import jax.numpy as jnp

    from kronvi._solvers.linalg import jittered_cholesky

    with jax.enable_x64(True):
        v, u = jnp.array([1.0, 2.0, -1.0]), jnp.array([0.3, -0.2, 0.5])
        W = jnp.arange(1.0, 10.0).reshape(3, 3)
        path = lambda t: jnp.outer(v + t * u, v + t * u)  # noqa: E731
        f = lambda t: jnp.sum(W * jittered_cholesky(path(t)))  # noqa: E731
        assert not np.all(np.isfinite(np.asarray(jnp.linalg.cholesky(path(0.0)))))
        assert np.all(np.isfinite(np.asarray(jittered_cholesky(path(0.0)))))
        h = 1e-4
        fd = (f(0.3 + h) - f(0.3 - h)) / (2 * h)
        np.testing.assert_allclose(jax.jvp(f, (0.3,), (1.0,))[1], fd, rtol=1e-6)
        np.testing.assert_allclose(jax.grad(f)(0.3), fd, rtol=1e-6)
        A = jnp.eye(3) + 0.1 * jnp.outer(v, v)  # no jitter: the plain Cholesky's derivative
        g = lambda B: jnp.sum(W * jittered_cholesky(B))  # noqa: E731
        np.testing.assert_allclose(jax.grad(g)(A), jax.grad(lambda B: jnp.sum(W * jnp.linalg.cholesky(B)))(A), rtol=1e-10)
    with pytest.raises(ValueError, match=r"^`M` must be one \(b, b\) matrix"):
        jittered_cholesky(np.ones((2, 3, 3)))
