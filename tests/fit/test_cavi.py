"""Sweep schedules (sequential, blocked, guarded block Jacobi) and where a CAVI fit runs."""

import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import brute_force_elbo, tol

import kronvi
from kronvi._fit.cavi import blocked_sweep, jacobi_block_change
from kronvi._fit.placement import resolve_device
from kronvi._model.families import grid_moments
from kronvi._model.regression import elbo_from_logits, noise_moments


def _problem(dtype, *, n=200, b=12, seed=0, levels=7, coupling=0.0):
    """Regression data; ``coupling`` mixes a shared column into every feature (correlation ~coupling**2)."""
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b)) + coupling * rng.normal(size=(n, 1))
    w = rng.normal(size=b) * (rng.uniform(size=b) < 0.5)
    y = Phi @ w + 0.5 * rng.normal(size=n)
    stats = kronvi.regression_stats(jnp.asarray(Phi, dtype), jnp.asarray(y, dtype))
    prior_w = kronvi.gaussian_prior(b, 1.0, levels=levels, dtype=dtype)
    prior_n = kronvi.noise_prior(0.3, levels=9, dtype=dtype)
    return stats, prior_w, prior_n, Phi, y


def _sweep(block_size, jacobi):
    return jax.jit(functools.partial(blocked_sweep, block_size=block_size, jacobi=jacobi))


_cavi_sweep = jax.jit(kronvi.cavi_sweep)


@jax.jit
def _move_all(lw, ln, pw, pn, stats):
    """:func:`jacobi_block_change` with every weight in one block."""
    A = stats.PhitPhi
    e_inv = noise_moments(kronvi.MeanField._unchecked(ln), pn)[0]
    mean, _ = grid_moments(jax.nn.softmax(lw, -1), pw.values)
    ok = jnp.ones(lw.shape[0], bool)
    return jacobi_block_change(
        lw, mean, A @ mean, A, stats.Phity, jnp.diagonal(A), pw.values, pw.log_probs, ok, e_inv
    )


def test_jacobi_block_change_is_the_exact_elbo_change():
    # Brute force over all 3**3 weight configurations: moving the whole block at once changes the ELBO by
    # the gains minus the coupling term, whatever the coupling.
    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        n, b, m = 9, 3, 3
        Phi = 0.3 * (rng.normal(size=(n, b)) + 2.0 * rng.normal(size=(n, 1)))
        y = Phi @ rng.normal(size=b) + rng.normal(size=n)
        stats = kronvi.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
        pw = kronvi.gaussian_prior(b, 1.0, levels=m, dtype=np.float64)
        pn = kronvi.noise_prior(1.0, levels=3, dtype=np.float64)
        lw = jnp.asarray(rng.normal(size=(b, m)))
        ln = jnp.asarray(rng.normal(size=(1, 3)))
        new, m_new, change, coupling, rounding = _move_all(lw, ln, pw, pn, stats)

        def brute(logits):
            q = np.asarray(jax.nn.softmax(logits, -1))
            qn = np.asarray(jax.nn.softmax(ln, -1))[0]
            values, log_p = np.asarray(pw.values), np.asarray(pw.log_probs)
            return brute_force_elbo(
                Phi, y, values, log_p, q, np.asarray(pn.values[0]), np.asarray(pn.log_probs[0]), qn
            )

        np.testing.assert_allclose(float(change), brute(new) - brute(lw), rtol=1e-9)
        np.testing.assert_allclose(m_new, grid_moments(jax.nn.softmax(new, -1), pw.values)[0], rtol=1e-12)
        assert abs(float(coupling)) > 1e-3 * abs(float(change))  # the coupling term matters here
        assert 0 < float(rounding) < 1e-12 * abs(float(change))


def test_blocked_sweep_makes_the_sequential_updates():
    # Same updates in the same order as cavi_sweep (incl. a padded last block), only rounded differently.
    with jax.enable_x64(True):
        stats, pw, pn, _, _ = _problem(np.float64, coupling=1.0)
        order = jnp.asarray(np.random.default_rng(1).permutation(12))
        lw, ln = pw.log_probs, pn.log_probs
        ref = _cavi_sweep(lw, ln, pw, pn, stats, order, 0.7)
        out = _sweep(5, False)(lw, ln, pw, pn, stats, order, 0.7)  # 3 blocks, the last one padded
        np.testing.assert_allclose(out[0], ref[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(out[1], ref[1], rtol=1e-9, atol=1e-9)


def test_jacobi_sweep_is_sequential_without_coupling_and_guarded_with_it():
    with jax.enable_x64(True):
        # Orthogonal features: A is diagonal, the weights are independent given the noise, and moving a block
        # together is the sequential sweep.
        stats, pw, pn, _, _ = _problem(np.float64)
        A = jnp.diag(jnp.diagonal(stats.PhitPhi))
        stats = stats._replace(PhitPhi=A)
        order = jnp.arange(12)
        lw, ln = pw.log_probs, pn.log_probs
        ref = _cavi_sweep(lw, ln, pw, pn, stats, order)
        out = _sweep(5, True)(lw, ln, pw, pn, stats, order)
        np.testing.assert_allclose(out[0], ref[0], rtol=1e-10, atol=1e-10)
        # With the weak coupling of the random features themselves the blocks move together: another path.
        stats = stats._replace(PhitPhi=_problem(np.float64)[0].PhitPhi)
        out = _sweep(5, True)(lw, ln, pw, pn, stats, order)
        ref = _cavi_sweep(lw, ln, pw, pn, stats, order)
        assert float(jnp.max(jnp.abs(out[0] - ref[0]))) > 1e-3

        # Strongly coupled features that each explain y alone: moving all weights at once overshoots and
        # lowers the ELBO; the guard refuses every block.
        rng = np.random.default_rng(0)
        Phi = rng.normal(size=(200, 12)) + 3.0 * rng.normal(size=(200, 1))
        stats = kronvi.regression_stats(jnp.asarray(Phi), jnp.asarray(Phi @ np.full(12, 0.5)))
        _, _, change, _, _ = _move_all(pw.log_probs, ln, pw, pn, stats)
        assert float(change) < 0
        seq = _cavi_sweep(lw, ln, pw, pn, stats, order)
        out = _sweep(5, True)(lw, ln, pw, pn, stats, order)
        np.testing.assert_allclose(out[0], seq[0], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("jacobi", [False, True])
def test_block_sweeps_never_lower_the_elbo(dtype, jacobi):
    stats, pw, pn, _, _ = _problem(dtype, b=23, coupling=1.5)  # 6 blocks of 4, the last one padded
    sweep = _sweep(4, jacobi)
    elbo = jax.jit(lambda lw, ln: elbo_from_logits(lw, ln, pw, pn, stats))
    rng = np.random.default_rng(0)
    lw, ln = jnp.asarray(rng.normal(size=(23, 7)), dtype), pn.log_probs
    trace = [float(elbo(lw, ln))]
    for _ in range(12):
        lw, ln = sweep(lw, ln, pw, pn, stats, jnp.asarray(rng.permutation(23)))
        trace.append(float(elbo(lw, ln)))
    assert lw.dtype == jnp.dtype(dtype)
    assert np.all(np.diff(trace) >= -tol(dtype, x32=1e-5, x64=1e-11) * abs(trace[-1]))
    assert trace[-1] > trace[0] + 10.0


def test_jacobi_reaches_the_sequential_fixed_point():
    with jax.enable_x64(True):
        for coupling in (0.0, 1.0):
            stats, pw, pn, _, _ = _problem(np.float64, n=400, b=10, coupling=coupling)
            kw = dict(max_iter=300, tol=1e-13, order="cyclic")
            q_ref, qn_ref, info_ref = kronvi.fit_regression(stats, pw, pn, sweep="sequential", **kw)
            q, qn, info = kronvi.fit_regression(stats, pw, pn, sweep="jacobi", **kw)
            assert bool(info.converged) and bool(info_ref.converged)
            np.testing.assert_allclose(q.probs, q_ref.probs, atol=1e-7)
            np.testing.assert_allclose(qn.probs, qn_ref.probs, atol=1e-7)
            gains = kronvi.coordinate_gains(q.logits, qn.logits, pw, pn, stats)
            assert float(jnp.max(gains)) < 1e-9


def test_jacobi_runs_under_jit_and_vmap_over_folds():
    # "jacobi" runs both block updates: together (lax.cond's first branch) and in turn (its second).
    with jax.enable_x64(True):
        folds = [_problem(np.float64, b=8, seed=s, coupling=1.0) for s in range(3)]
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *[f[0] for f in folds])
        pw, pn = folds[0][1], folds[0][2]

        def fit(st):
            return kronvi.fit_regression(st, pw, pn, max_iter=15, order="random", sweep="jacobi")

        q_b, qn_b, info_b = jax.jit(jax.vmap(fit))(stacked)
        for k in range(3):
            q, qn, info = fit(folds[k][0])
            np.testing.assert_allclose(q_b.probs[k], q.probs, atol=1e-8)
            np.testing.assert_allclose(qn_b.probs[k], qn.probs, atol=1e-8)
            np.testing.assert_allclose(info_b.elbo[k], info.elbo, rtol=1e-10)


def test_device_option():
    stats, pw, pn, _, _ = _problem(np.float32)
    cpu = jax.devices("cpu")[0]
    home = stats.PhitPhi.devices()
    assert resolve_device(None, stats) is None
    moved = kronvi.fit_regression(stats, pw, pn, max_iter=5, device=cpu, sweep="sequential")
    assert moved[0].logits.devices() == home  # results come back to the statistics' device
    if all(d.platform == "cpu" for d in home):
        here = kronvi.fit_regression(stats, pw, pn, max_iter=5)  # sweep "auto" on a CPU: sequential
        for x, y in zip(jax.tree.leaves(here), jax.tree.leaves(moved), strict=True):
            assert bool(jnp.all(x == y))
    with pytest.raises(ValueError, match="`device`"):
        kronvi.fit_regression(stats, pw, pn, device="gpu")
    with pytest.raises(ValueError, match="`device`"):
        jax.jit(lambda st: kronvi.fit_regression(st, pw, pn, device=cpu))(stats)
    with pytest.raises(ValueError, match="`sweep`"):
        kronvi.fit_regression(stats, pw, pn, sweep="parallel")


def test_device_option_moves_and_returns(tmp_path):
    # Two host devices stand in for an accelerator and the host: the fit runs on device 0 and its results
    # come back to where the statistics live (one device, or replicated over two).
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np, kronvi
        from kronvi._fit.placement import home_sharding
        d0, d1 = jax.devices()
        rng = np.random.default_rng(0)
        Phi, y = rng.normal(size=(60, 5)).astype(np.float32), rng.normal(size=60).astype(np.float32)
        stats = kronvi.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
        pw, pn = kronvi.gaussian_prior(5, 1.0, levels=5), kronvi.noise_prior(0.5)
        ref = kronvi.fit_regression(stats, pw, pn, max_iter=5)
        on1 = jax.device_put((stats, pw, pn), d1)
        out = kronvi.fit_regression(*on1, max_iter=5, device=d0)
        assert out[0].logits.devices() == {d1}, out[0].logits.devices()
        assert all(bool(jnp.all(a == b)) for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(out)))
        mesh = jax.sharding.Mesh(np.array([d0, d1]), ("d",))
        rep = jax.device_put((stats, pw, pn), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
        out = kronvi.fit_regression(*rep, max_iter=5, device=d0)
        assert out[0].logits.sharding.device_set == {d0, d1}
        assert home_sharding(np.zeros(3)) is None
        print("ok")
        """
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")
