"""``kronvi.model.predictive_log_density`` against enumeration of every weight and noise configuration."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi
from kronvi._model.density import log_density_kernel

B, M, S = 4, 5, 3  # one shape for most tests, so the kernel compiles once per dtype and node count


def enumerate_log_density(qw, qn, values, svals, Phi, y):
    """log q(y) by summing over all m**b weight configurations and all noise levels, in float64."""
    qw = qw / qw.sum(-1, keepdims=True)
    qn = qn / qn.sum()
    b, m = values.shape
    cfg = np.array(list(itertools.product(range(m), repeat=b))).reshape(-1, b)
    W = values[np.arange(b), cfg]
    with np.errstate(divide="ignore"):
        lp = np.log(qw[np.arange(b), cfg]).sum(-1)
        lqn = np.log(qn)
    f = W @ Phi.T  # (C, N)
    logs = (
        lp[:, None, None]
        + lqn[None, :, None]
        - 0.5 * (y[None, None] - f[:, None]) ** 2 / svals[None, :, None]
        - 0.5 * np.log(2 * np.pi * svals)[None, :, None]
    )
    return np.logaddexp.reduce(logs.reshape(-1, len(y)), axis=0)


def problem(rng, noise, *, peaked=False):
    """Random posterior and 16 test points: 7 random, 9 at fixed predictive z-scores out to 40 sds, with
    an all-zero feature row, a zero feature and a nearly inert weight. 16 points are the kernel's smallest
    padded call (`batch_size`), so the calls on all points and on subsets share one program per dtype and
    node count (17 padded to 32 compiled each node count twice)."""
    values = np.sort(rng.normal(size=(B, M)), -1)
    qw = rng.dirichlet(np.ones(M) * 0.7, size=B) + 1e-300
    if peaked:  # near one-hot rows
        qw = np.full((B, M), 1e-9)
        qw[np.arange(B), rng.integers(0, M, size=B)] = 1.0
    qw /= qw.sum(-1, keepdims=True)
    qn = rng.dirichlet(np.ones(S))
    svals = noise * np.exp(rng.uniform(-1.5, 1.5, size=S))
    Phi = rng.normal(size=(17, B))
    Phi[0] = 0.0
    Phi[1, 0] = 0.0
    Phi[:, -1] *= 1e-7
    mw = (qw * values).sum(-1)
    vw = (qw * values**2).sum(-1) - mw**2
    mean, var = Phi @ mw, (Phi**2) @ vw + qn @ svals
    z = np.concatenate([rng.normal(size=8) * 1.5, [0.0, 3.0, -5.0, 8.0, -12.0, 20.0, -30.0, 40.0, 0.3]])
    keep = np.arange(17) != 7  # the points of the 17 drawn before, less the last random one
    return (qw, qn, values, svals, Phi[keep], (mean + np.sqrt(var) * z)[keep]), z[keep]


def model(qw, qn, values, svals, dtype):
    return (
        kronvi.model.MeanField(jnp.log(jnp.asarray(qw, dtype))),
        kronvi.model.MeanField(jnp.log(jnp.asarray(qn, dtype))[None]),
        kronvi.model.DiscretePrior(jnp.asarray(values, dtype), jnp.zeros((B, M), dtype)),
        kronvi.model.DiscretePrior(jnp.asarray(svals, dtype)[None], jnp.zeros((1, S), dtype)),
    )


def check(args, z, dtype, *, near_upto, may_raise=False):
    """The one-pass bound covers the actual error of every point; the default call (refinement, float64 for
    float32 points that need it) holds every point to its `rtol`, or raises (only where `may_raise`)."""
    args = [np.asarray(a, dtype) for a in args]
    ref = enumerate_log_density(*[np.asarray(a, np.float64) for a in args])  # on the dtype-rounded inputs
    q_w, q_n, pw, pn = model(*args[:4], dtype)
    Phi, y = jnp.asarray(args[4]), jnp.asarray(args[5])
    # one pass at 32 nodes (the default first pass has 8, fewer than these spiky posteriors need)
    ld, err = kronvi.model.predictive_log_density(q_w, q_n, pw, pn, Phi, y, rtol=None, num_nodes=32)
    assert ld.dtype == jnp.dtype(dtype) and err.dtype == jnp.dtype(dtype)
    ld, err = np.asarray(ld, np.float64), np.asarray(err, np.float64)
    with np.errstate(over="ignore"):
        rel = np.abs(np.expm1(ld - ref))
    assert np.all(rel <= err + 1e-12), np.c_[z, ref, ld, rel, err][~(rel <= err + 1e-12)]
    near = np.abs(z) <= near_upto
    if near.any():  # the one-pass bound is small within a few sds
        loose, typical = (1e-2, 1e-3) if dtype == np.float32 else (1e-6, 1e-9)
        assert np.mean(err[near] < loose) >= 0.7, np.c_[z, err][near]
        assert np.median(err[near]) < typical, np.c_[z, err][near]
    rtol = 1e-2 if dtype == np.float32 else 1e-6  # the defaults

    def strict(idx):
        ld2, err2 = kronvi.model.predictive_log_density(q_w, q_n, pw, pn, Phi[idx], y[idx], max_nodes=256)
        ld2, err2 = np.asarray(ld2, np.float64), np.asarray(err2, np.float64)
        with np.errstate(over="ignore"):
            rel2 = np.abs(np.expm1(ld2 - ref[idx]))
        bad = ~((err2 <= rtol) & (rel2 <= rtol) & (rel2 <= err2 + 1e-12))
        assert not bad.any(), np.c_[z[idx], ref[idx], ld2, rel2, err2][bad]
        return rel2, err2

    near = np.flatnonzero(np.abs(z) <= max(near_upto, 0.0))
    if near.size:  # within a few sds every point is answered to the tolerance
        strict(near)
    if may_raise:  # far out some points are below every floor (raising is tested on its own below)
        return rel, err
    return strict(np.arange(len(z)))  # every point answered to the tolerance


@pytest.mark.parametrize("noise", [1e-3, 0.05, 1.0, 30.0])
def test_matches_enumeration(dtype, noise):
    args, z = problem(np.random.default_rng(int(noise * 1000)), noise)
    # noise sd 0.03 against atoms ~1 apart makes the density a comb of spikes: points in a valley lie
    # below the quadrature's rounding floor even in float64, where the call may raise rather than answer
    check(args, z, dtype, near_upto=-1.0 if noise < 0.01 else 8.0, may_raise=noise < 0.01)


def test_peaked_posterior(dtype):
    # near one-hot weights: far out (8-12 sds) the density is below the float64 floor for some points
    args, z = problem(np.random.default_rng(45), 0.01, peaked=True)
    check(args, z, dtype, near_upto=5.0, may_raise=True)


def test_far_tail_is_accurate(dtype):
    # 20-30 sds out the density is far below the float32 quadrature floor; tilting, and float64 where
    # float32 cannot reach the tolerance, keep it accurate
    args, z = problem(np.random.default_rng(11), 0.1)
    _, err = check(args, z, dtype, near_upto=8.0)
    far = (np.abs(z) >= 20) & (np.abs(z) <= 30)
    assert np.all(err[far] < (1e-2 if dtype == np.float32 else 1e-6)), np.c_[z, err]


@pytest.mark.parametrize("scale", [1.0, 1e6])
def test_small_noise_in_float32_is_redone_in_float64_or_raises(scale):
    # Issue 28: float32 with the noise ~1e-3 of the signal gave bounds of inf and densities off by up to
    # 18x, silently; features scaled by 1e6 gave log densities of +4e7.
    args, z = problem(np.random.default_rng(21), 1.0)
    qw, qn, values, svals, Phi, y = args
    svals = np.float32(svals * 1e-3 * scale**2)
    Phi, y = np.float32(Phi * scale), np.float32(y * scale)
    ref = enumerate_log_density(qw, qn, values, svals.astype(np.float64), Phi, y)
    q_w, q_n, pw, pn = model(qw, qn, values, svals, np.float32)
    near = np.abs(z) <= 8  # every one of these is answered to the tolerance
    ld, err = kronvi.model.predictive_log_density(
        q_w, q_n, pw, pn, jnp.asarray(Phi[near]), jnp.asarray(y[near])
    )
    rel = np.abs(np.expm1(np.asarray(ld, np.float64) - ref[near]))
    assert np.all(np.asarray(err) <= 1e-2) and np.all(rel <= 1e-2), np.c_[z[near], ref[near], ld, rel, err]
    if scale == 1.0:  # the far tails of this comb of spikes are below the float64 floor: an error
        with pytest.raises(FloatingPointError, match="could not be computed to `rtol`"):
            kronvi.model.predictive_log_density(q_w, q_n, pw, pn, jnp.asarray(Phi), jnp.asarray(y))


def test_noise_only_point_is_a_gaussian_mixture(dtype):
    args, _ = problem(np.random.default_rng(3), 0.5)
    qw, qn, values, svals, Phi, y = args
    Phi = np.zeros_like(Phi)
    ref = np.logaddexp.reduce(
        np.log(qn)[:, None] - 0.5 * y[None] ** 2 / svals[:, None] - 0.5 * np.log(2 * np.pi * svals)[:, None],
        axis=0,
    )
    q_w, q_n, pw, pn = model(qw, qn, values, svals, dtype)
    rtol = 1e-4 if dtype == np.float32 else 1e-8
    near = np.abs(y) < 5
    Phi, y, ref = Phi[near], y[near], ref[near]
    ld, err = kronvi.model.predictive_log_density(
        q_w, q_n, pw, pn, jnp.asarray(Phi, dtype), jnp.asarray(y, dtype), rtol=rtol
    )
    rel = np.abs(np.expm1(np.asarray(ld, np.float64) - ref))
    assert np.all(rel <= np.asarray(err) + 1e-12)
    assert np.all(np.asarray(err) <= rtol)


def test_under_jit_runs_one_pass_and_reports_its_bound():
    dtype = np.float32  # compile-bound; float64 refinement is covered by the enumeration tests
    args, z = problem(np.random.default_rng(5), 0.05)
    args = [np.asarray(a, dtype) for a in args]
    q_w, q_n, pw, pn = model(*args[:4], dtype)
    Phi, y = jnp.asarray(args[4]), jnp.asarray(args[5])
    # under jit the first pass alone: all 32 nodes with rtol=None, as eager; with rtol the nodes each point's
    # bound needs, too few for some of these spiky points, so eager refinement has something to do
    plain = jax.jit(lambda P, t: kronvi.model.predictive_log_density(q_w, q_n, pw, pn, P, t, rtol=None))
    eager = kronvi.model.predictive_log_density(q_w, q_n, pw, pn, Phi, y, rtol=None)
    np.testing.assert_allclose(plain(Phi, y)[0], eager[0], rtol=1e-5)
    near = np.abs(z) <= 8  # farther out some points are below the float32 and float64 floors here
    jitted = jax.jit(lambda P, t: kronvi.model.predictive_log_density(q_w, q_n, pw, pn, P, t, rtol=1e-3))
    first = np.asarray(jitted(Phi[near], y[near])[1])
    ld, err = kronvi.model.predictive_log_density(q_w, q_n, pw, pn, Phi[near], y[near], rtol=1e-3)
    assert np.all(np.asarray(err) <= first * (1 + 1e-3))  # the same first pass, compiled apart
    assert np.sum(np.asarray(err) < 0.5 * first) > 0  # refinement did something
    args[4], args[5] = args[4][near], args[5][near]
    ref = enumerate_log_density(*[np.asarray(a, np.float64) for a in args])
    rel = np.abs(np.expm1(np.asarray(ld, np.float64) - ref))
    assert np.all(rel <= np.asarray(err) + 1e-12)


def test_matches_a_dense_quadrature_at_b64(dtype):
    # b = 64: too many configurations to enumerate; compared with the same kernel at 8x the nodes in
    # float64, whose bound is below 1e-9.
    rng = np.random.default_rng(7)
    b, m, s, n = 64, 9, 5, 12
    grid = np.linspace(-2, 2, m)
    values = np.broadcast_to(grid, (b, m)).copy()
    logits = -0.5 * rng.gamma(2.0, 2.0, size=(b, 1)) * (grid[None] - rng.uniform(-1.5, 1.5, (b, 1))) ** 2
    qw = np.exp(logits - logits.max(-1, keepdims=True))
    qw /= qw.sum(-1, keepdims=True)
    qn = rng.dirichlet(np.ones(s) * 3)
    svals = 0.05 * np.exp(np.linspace(-1, 1, s))
    X = rng.normal(size=(n, 4))
    Phi = np.sqrt(2 / b) * np.cos(X @ rng.normal(size=(4, b)) + rng.uniform(0, 6.28, b))
    mw = (qw * values).sum(-1)
    var = (Phi**2) @ ((qw * values**2).sum(-1) - mw**2) + qn @ svals
    y = Phi @ mw + np.sqrt(var) * rng.standard_t(4, size=n)
    raw = (qw, qn, values, svals, Phi, y)
    with jax.enable_x64(True):
        ref, ref_err = log_density_kernel(*[jnp.asarray(a, np.float64) for a in raw], num_nodes=256)
        assert np.all(np.asarray(ref_err) < 1e-9)
    q_w = kronvi.model.MeanField(jnp.log(jnp.asarray(qw, dtype)))
    q_n = kronvi.model.MeanField(jnp.log(jnp.asarray(qn, dtype))[None])
    pw = kronvi.model.DiscretePrior(jnp.asarray(values, dtype), jnp.zeros((b, m), dtype))
    pn = kronvi.model.DiscretePrior(jnp.asarray(svals, dtype)[None], jnp.zeros((1, s), dtype))
    ld, err = kronvi.model.predictive_log_density(
        q_w, q_n, pw, pn, jnp.asarray(Phi, dtype), jnp.asarray(y, dtype)
    )
    diff = np.abs(np.asarray(ld, np.float64) - np.asarray(ref))
    assert np.all(np.expm1(diff) <= np.asarray(err, np.float64) + 1e-9)
    assert np.all(np.asarray(err) < (1e-2 if dtype == np.float32 else 1e-6))


def test_weight_chunks_and_node_counts_against_enumeration(dtype):
    # the kernel's weights in chunks of one and two (the chunks' products joined at the top of the tree) and
    # its per-point node count from the bound (`target`): each value within its bound of enumeration, and
    # the chunks change nothing but rounding
    args, z = problem(np.random.default_rng(13), 0.3)
    args = [np.asarray(a, dtype) for a in args]
    ref = enumerate_log_density(*[np.asarray(a, np.float64) for a in args])
    raw = [jnp.asarray(a) for a in args]
    whole = log_density_kernel(*raw, num_nodes=32)
    near = np.abs(z) <= 5
    for chunk in (M, 2 * M):
        for target in (None, 1e-3 if dtype == np.float32 else 1e-7):
            ld, err = (np.asarray(v, np.float64) for v in log_density_kernel(
                *raw, num_nodes=32, target=target, chunk=chunk))  # fmt: skip
            rel = np.abs(np.expm1(ld - ref))
            assert np.all(rel <= err + 1e-12), np.c_[z, ref, ld, rel, err]
            if target is None:
                np.testing.assert_allclose(ld, whole[0], rtol=1e-4 if dtype == np.float32 else 1e-12)
            else:  # the Gaussian estimate mostly holds near the mean (b = 4: valleys between modes are missed)
                assert np.median(err[near]) <= 4 * target, np.c_[z, err][near]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rtol": 0.0}, "rtol"),
        ({"rtol": "tight"}, "rtol"),
        ({"num_nodes": 1}, "num_nodes"),
        ({"y_new": np.ones(3)}, "y_new"),
        ({"y_new": np.array([0.0, np.nan])}, "y_new"),
        ({"Phi_new": np.ones((2, B + 1))}, "Phi_new"),
    ],
)
def test_bad_input_is_named(kwargs, message):
    args, _ = problem(np.random.default_rng(0), 1.0)
    q_w, q_n, pw, pn = model(*args[:4], np.float32)
    call = {"Phi_new": np.ones((2, B)), "y_new": np.zeros(2)} | kwargs
    Phi, y = call.pop("Phi_new"), call.pop("y_new")
    with pytest.raises(ValueError, match=message):
        kronvi.model.predictive_log_density(q_w, q_n, pw, pn, Phi, y, **call)


def test_traced_posterior_with_concrete_points_runs_one_pass():
    # vmap over posteriors (or a jvp through them) with concrete test points: the refinement loop cannot
    # read traced results, so the one-pass kernel runs, as under jit.
    args, _ = problem(np.random.default_rng(5), 0.05)
    q_w, q_n, pw, pn = model(*args[:4], np.float32)
    Phi, y = np.asarray(args[4], np.float32), np.asarray(args[5], np.float32)
    stacked = jnp.stack([q_w.logits, 0.5 * q_w.logits])
    ld, err = jax.vmap(
        lambda lg: kronvi.model.predictive_log_density(
            kronvi.model.MeanField(lg), q_n, pw, pn, Phi, y, rtol=1e-6
        )
    )(stacked)
    for k in range(2):  # the first pass of the same call, one posterior at a time
        ref = jax.jit(
            lambda lg: kronvi.model.predictive_log_density(
                kronvi.model.MeanField(lg), q_n, pw, pn, Phi, y, rtol=1e-6
            )
        )(stacked[k])
        np.testing.assert_allclose(ld[k], ref[0], rtol=1e-5)
        np.testing.assert_allclose(err[k], ref[1], rtol=1e-3)


def test_one_kernel_program_serves_the_first_pass_and_every_refinement(dtype):
    # far-out points need refinement (4x the nodes, up to `max_nodes`); before, every node count and every
    # padded call size compiled a kernel of its own (48 points: a first pass of 64, refinements of 16).
    # Counted from empty caches: one program per call of the density, the float64 redo of float32 points
    # below its rounding floor being a call of its own.
    from kronvi._model import density

    args, z = problem(np.random.default_rng(21), 0.05, peaked=True)
    args = [np.asarray(a, dtype) for a in args]
    q_w, q_n, pw, pn = model(*args[:4], dtype)
    Phi, y = np.tile(args[4], (3, 1)), np.tile(args[5], 3)
    passes = []
    original = density._refine

    def counting(run_in_chunks, ld, err, K, rtol, max_nodes):
        passes.append(int(np.sum(~(err <= rtol))))
        return original(run_in_chunks, ld, err, K, rtol, max_nodes)

    for twin in (density._lean_kernel.plain, density._lean_kernel.tuned):
        twin.clear_cache()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(density, "_refine", counting)
        try:
            ld, err = kronvi.model.predictive_log_density(q_w, q_n, pw, pn, Phi, y, max_nodes=512)
        except kronvi.DensityToleranceError as e:  # points below every floor: their best values
            ld, err = e.log_density, e.rel_error_bound
    assert passes[0] > 0  # some point was refined, with more nodes than the first pass
    assert density._lean_kernel._cache_size() == len(passes)
    ref = np.tile(enumerate_log_density(*[np.asarray(a, np.float64) for a in args]), 3)
    rel = np.abs(np.expm1(np.asarray(ld, np.float64) - ref))
    assert np.all(rel <= np.asarray(err, np.float64) + 1e-12)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_the_shared_kernel_at_any_node_count_against_enumeration(dtype, batch_size):
    # the nodes and the target as operands, in arrays with room for more nodes than the point uses, node
    # counts and room that are multiples of neither the node group nor the quadrature's step: every value
    # within its bound of enumeration, the same as the kernel with static nodes (to rounding), and the
    # inactive points zeros that change nothing
    from kronvi._model.density import _KERNEL_DEFAULTS, _shared_kernel

    args, z = problem(np.random.default_rng(3), 0.3)
    args = [np.asarray(a, dtype) for a in args]
    ref = enumerate_log_density(*[np.asarray(a, np.float64) for a in args])
    raw = [jnp.asarray(a) for a in args]
    n = raw[4].shape[0]
    active = np.arange(n) < n - 3
    static = ("node_cap", "target_nodes", "batch_size", *_KERNEL_DEFAULTS)
    shared = jax.jit(_shared_kernel, static_argnames=static)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    target = 1e-3 if dtype == np.float32 else 1e-7
    for cap, K, tgt in ((33, 2, None), (33, 30, None), (130, 37, None), (130, 130, None), (130, 30, target)):
        ld, err = (np.asarray(v, np.float64) for v in shared(
            *raw, np.int32(K), np.asarray(tgt or 0.0, dtype), active, node_cap=cap, target_nodes=30,
            batch_size=batch_size, **_KERNEL_DEFAULTS,
        ))  # fmt: skip
        assert np.all(ld[~active] == 0.0) and np.all(err[~active] == 0.0)
        rel = np.abs(np.expm1(ld[active] - ref[active]))
        table = np.c_[z[active], ref[active], ld[active], err[active]]
        assert np.all(rel <= err[active] + 1e-12), (cap, K, table)
        want = log_density_kernel(*raw, num_nodes=K if tgt is None else 30, target=tgt)
        np.testing.assert_allclose(ld[active], np.asarray(want[0], np.float64)[active], rtol=tol, atol=tol)


def test_forward_mode_derivatives_match_differences_and_reverse_mode_is_refused():
    # The kernel's loops (each point's tilt by Newton's iterations, its nodes in groups) run a data-dependent
    # number of times, whatever rtol: forward mode (jvp, jacfwd) differentiates them, reverse mode (grad,
    # vjp) cannot (docs/sharp_bits.md). Derivatives in y and in the posterior's logits against
    # central differences of the same one-pass call, in float64.
    args, _ = problem(np.random.default_rng(11), 1.0)
    with jax.enable_x64(True):
        q_w, q_n, pw, pn = model(*args[:4], np.float64)
        Phi, y = jnp.asarray(args[4][:4]), jnp.asarray(args[5][:4])

        def f(logits, yy):
            mf = kronvi.model.MeanField(logits)
            return kronvi.model.predictive_log_density(mf, q_n, pw, pn, Phi, yy, rtol=None, num_nodes=64)[0]

        d_y = jnp.diagonal(jax.jacfwd(f, argnums=1)(q_w.logits, y))
        h = 1e-5
        fd_y = (f(q_w.logits, y + h) - f(q_w.logits, y - h)) / (2 * h)  # each point's density in its own y
        np.testing.assert_allclose(d_y, fd_y, rtol=1e-6, atol=1e-8)
        direction = jnp.asarray(np.random.default_rng(12).normal(size=q_w.logits.shape))
        _, d_l = jax.jvp(lambda lg: f(lg, y), (q_w.logits,), (direction,))
        fd_l = (f(q_w.logits + h * direction, y) - f(q_w.logits - h * direction, y)) / (2 * h)
        np.testing.assert_allclose(d_l, fd_l, rtol=1e-6, atol=1e-8)
        with pytest.raises(ValueError, match="Reverse-mode differentiation"):
            jax.grad(lambda yy: f(q_w.logits, yy).sum())(y)
