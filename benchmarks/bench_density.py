"""Speed and error bound of `kronvi.model.predictive_log_density` at N = 4,000 test points, b = 2000 weights.

A random-Fourier-feature posterior with m = 15 weight levels and S = 15 noise levels (each weight
concentrated around a random level, heavy-tailed test targets so that some points lie several sds out).
For float32 and float64: the one-pass kernel (``rtol=None``: every point on all of the first pass's nodes,
32 in float32, 64 in float64) and the default call (each point on the fewest nodes its bound needs for
``rtol``, 1e-2 in float32 and 1e-6 in float64; the points still above it redone with 4x the nodes), medians
of ``--repeats`` runs after compilation, the error bounds' quantiles, and the float32-float64 difference.
The header and the footer give the machine's load average: the timings are wall-clock on a shared machine.

The kernel this replaced (a complex log-sum-exp over 256 nodes per point) took an extrapolated 222 s
(float32) and 749 s (float64) for these 4,000 points on the 2-core CPU
(docs/decisions/default-recipe.md#the-exact-predictive-density).

Run: python benchmarks/bench_density.py [--n 4000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, timed  # noqa: E402


def problem(n, b, m, s, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    Phi = np.sqrt(2.0 / b) * np.cos(X @ (1.5 * rng.normal(size=(b, 8))).T + rng.uniform(0, 2 * np.pi, b))
    unit = np.linspace(-3, 3, m)
    values = np.broadcast_to(0.6 * unit, (b, m)).copy()
    centre, sharp = rng.uniform(-2.5, 2.5, size=b), rng.gamma(2.0, 1.5, size=b)
    logits = -0.5 * sharp[:, None] * (unit[None] - centre[:, None]) ** 2 + 0.3 * rng.normal(size=(b, m))
    svals = 0.05 * 10.0 ** np.linspace(-1, 1, s)
    ln = -0.5 * ((np.arange(s) - 6.0) / 1.2) ** 2
    qw = np.exp(logits - logits.max(-1, keepdims=True))
    qw /= qw.sum(-1, keepdims=True)
    qn = np.exp(ln - ln.max())
    qn /= qn.sum()
    mean = Phi @ (qw * values).sum(-1)
    var = (Phi**2) @ ((qw * values**2).sum(-1) - (qw * values).sum(-1) ** 2) + qn @ svals
    y = mean + np.sqrt(var) * rng.standard_t(4, size=n)
    return dict(values=values, logits=logits, svals=svals, log_qn=np.log(qn), Phi=Phi, y=y)


def run(p, dtype, repeats):
    a = {k: jnp.asarray(v, dtype) for k, v in p.items()}
    b, m = a["values"].shape
    prior_w = kronvi.model.DiscretePrior(a["values"], jnp.zeros((b, m), dtype))
    prior_n = kronvi.model.DiscretePrior(a["svals"][None], jnp.zeros((1, a["svals"].shape[0]), dtype))
    q_w, q_n = kronvi.model.MeanField(a["logits"]), kronvi.model.MeanField(a["log_qn"][None])

    cpu = []  # process CPU seconds of every call (all threads): less sensitive to the machine's load

    def call(**kw):
        c0 = time.process_time()
        out = jax.block_until_ready(
            kronvi.model.predictive_log_density(q_w, q_n, prior_w, prior_n, a["Phi"], a["y"], **kw)
        )
        cpu.append(time.process_time() - c0)
        return out

    t1, _, (_, e1) = timed(call, rtol=None, repeats=repeats)
    c1 = statistics.median(cpu[1:])
    cpu.clear()
    t2, _, (ld, e2) = timed(call, repeats=repeats)
    c2 = statistics.median(cpu[1:])
    e1, e2 = np.asarray(e1, np.float64), np.asarray(e2, np.float64)
    name = jnp.dtype(dtype).name
    tol = 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-2
    print(
        f"| {name} | one pass (rtol=None: all nodes) | {t1:.2f} | {1e3 * t1 / len(p['y']):.2f} | "
        f"{np.median(e1):.1e} | {np.percentile(e1, 99):.1e} | {e1.max():.1e} |"
    )
    print(f"| {name} | default (rtol {tol:g}: {np.sum(~(e1 <= tol))} points over it) | {t2:.2f} | "
          f"{1e3 * t2 / len(p['y']):.2f} | {np.median(e2):.1e} | {np.percentile(e2, 99):.1e} | {e2.max():.1e} |")  # fmt: skip
    return np.asarray(ld, np.float64), e2, f"{name} one pass {c1:.2f}, default {c2:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--b", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    m, s = 15, 15
    p = problem(args.n, args.b, m, s)
    dev = jax.devices()[0]
    print(
        f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), N={args.n}, b={args.b}, m={m}, S={s}; "
        f"{load_average()}"
    )
    print()
    print("| dtype | call | seconds (median) | ms per point | bound median | bound p99 | bound max |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with jax.enable_x64(False):
        ld32, e32, cpu32 = run(p, jnp.float32, args.repeats)
    with jax.enable_x64(True):
        ld64, e64, cpu64 = run(p, jnp.float64, args.repeats)
    d = np.abs(ld32 - ld64)
    print()
    print(f"float32 vs float64 log densities: max |diff| {d.max():.2e}, median {np.median(d):.2e}; "
          f"within the two bounds: {np.all(np.expm1(d) <= e32 + e64)}")  # fmt: skip
    print(f"CPU seconds (median, the process's threads together): {cpu32}; {cpu64}")
    print(f"at the end: {load_average()}")


if __name__ == "__main__":
    main()
