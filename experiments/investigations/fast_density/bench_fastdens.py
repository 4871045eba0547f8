"""Benchmark: new fastdens.log_density_impl vs kronvi.predictive_log_density (snapshot).
N=4000 points, b=2000 weights, m=15 levels, S=15 noise levels. Usage: python bench_fastdens.py [32|64|both]"""

import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
N, b, m, S = int(os.environ.get("BENCH_N", 4000)), 2000, 15, 15
N_OLD = int(os.environ.get("BENCH_N_OLD", 100))
REPS = int(os.environ.get("BENCH_REPS", 3))


def problem(seed=0):
    rng = np.random.default_rng(seed)
    d_in = 8
    omega = rng.normal(size=(b, d_in)) * 1.5
    phase = rng.uniform(0, 2 * np.pi, size=b)
    X = rng.normal(size=(N, d_in))
    Phi = np.sqrt(2.0 / b) * np.cos(X @ omega.T + phase)  # random Fourier features
    unit = np.linspace(-3, 3, m)
    scale = 0.6
    values = np.broadcast_to(scale * unit, (b, m)).copy()
    # peaked-ish posterior: each weight concentrated around a random level, random sharpness
    centre = rng.uniform(-2.5, 2.5, size=b)
    sharp = rng.gamma(2.0, 1.5, size=b)
    logits = -0.5 * sharp[:, None] * (unit[None] - centre[:, None]) ** 2 + 0.3 * rng.normal(size=(b, m))
    qw = np.exp(logits - logits.max(-1, keepdims=True))
    qw /= qw.sum(-1, keepdims=True)
    svals = 0.05 * np.exp(np.linspace(-1, 1, S) * np.log(10.0))  # noise variance grid around 0.05
    ln = -0.5 * ((np.arange(S) - 6.0) / 1.2) ** 2
    qn = np.exp(ln - ln.max())
    qn /= qn.sum()
    mean = Phi @ (qw * values).sum(-1)
    var = (Phi**2) @ ((qw * values**2).sum(-1) - (qw * values).sum(-1) ** 2) + qn @ svals
    z = rng.standard_t(4, size=N)  # heavy-ish residuals: some points several sds out
    y = mean + np.sqrt(var) * z
    return qw, qn, values, svals, Phi, y, var


def timeit(f, reps):
    out = f()
    jax.block_until_ready(out)  # compile + warm
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = f()
        jax.block_until_ready(out)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), out


def run(x64):
    jax.config.update("jax_enable_x64", x64)
    import jax.numpy as jnp
    from fastdens import log_density_impl

    dt = np.float64 if x64 else np.float32
    qw, qn, values, svals, Phi, y, var = problem()
    args = [jnp.asarray(x, dt) for x in (qw, qn, values, svals, Phi, y)]
    name = "float64" if x64 else "float32"
    print(
        f"== {name}: N={N}, b={b}, m={m}, S={S}; var_f/s ~ {np.median(var / (qn @ svals) - 1):.2f} (median);"
        f" |z| max {np.max(np.abs((y - Phi @ (qw * values).sum(-1)) / np.sqrt(var))):.1f}",
        flush=True,
    )
    t_new, (ld, err) = timeit(lambda: log_density_impl(*args), REPS)
    print(
        f"new  (num_nodes={64 if x64 else 32}, default): median {t_new:.2f} s for {N} points ({REPS} reps after compile)",
        flush=True,
    )
    sub = [a[:N_OLD] for a in args[4:]]
    t_old, (ld_o, err_o) = timeit(lambda: old_impl(*args[:4], *sub, 256, 8), 1)
    print(
        f"old  (num_nodes=256, batch 8): {t_old:.2f} s for {N_OLD} points (1 rep after compile) -> "
        f"extrapolated {t_old * N / N_OLD:.1f} s for {N} points; speed-up x{t_old * N / N_OLD / t_new:.0f}",
        flush=True,
    )
    ld, err, ld_o = np.asarray(ld, np.float64), np.asarray(err, np.float64), np.asarray(ld_o, np.float64)
    diff = np.abs(ld[:N_OLD] - ld_o)
    print(
        f"max |log dens new - old| on the {N_OLD} points: {diff.max():.3e} (old's own bound max {np.max(err_o):.2e})"
    )
    q = np.percentile(err, [50, 90, 99])
    print(
        f"new rel_error_bound: max {err.max():.3e}, median {q[0]:.3e}, p90 {q[1]:.3e}, p99 {q[2]:.3e}, "
        f"finite {np.isfinite(err).mean():.4f}"
    )
    print(
        f"new vs old on the {N_OLD} points: max |diff| {diff.max():.3e}, median {np.median(diff):.3e}; "
        f"|diff| within new bound + old bound: {np.mean(np.expm1(diff) <= err[:N_OLD] + np.asarray(err_o)):.3f}"
    )
    return ld, err


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    res = {}
    for x64 in [False, True] if which == "both" else [which == "64"]:
        res[x64] = run(x64)
    if len(res) == 2:
        d = np.abs(res[False][0] - res[True][0])
        print(
            f"float32 vs float64 (new, all {N} points): max |diff| {d.max():.3e}, median {np.median(d):.3e}; "
            f"f32 bound covers it: {np.all(np.expm1(d) <= res[False][1] + res[True][1])}"
        )


def old_impl(qw, qn, values, svals, Phi, y, num_nodes, batch_size):
    """kronvi.predictive_log_density (the implementation this prototype would replace) on raw arrays."""
    import jax.numpy as jnp

    import kronvi

    return kronvi.predictive_log_density(
        kronvi.MeanField(jnp.log(qw)), kronvi.MeanField(jnp.log(qn)[None]),
        kronvi.DiscretePrior(values, jnp.zeros_like(values)), kronvi.DiscretePrior(svals[None], jnp.zeros_like(svals)[None]),
        Phi, y, num_nodes=num_nodes, batch_size=batch_size,
    )  # fmt: skip
