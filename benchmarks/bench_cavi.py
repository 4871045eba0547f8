"""Speed of one CAVI sweep (b = 2000, m = 15) by schedule and by where it runs.

1. One sweep on the default backend, per schedule: the sequential sweep (`kronvi.fitting.cavi_sweep`: one
   `lax.fori_loop` step per weight, also unrolled), the blocked sweep (the same updates in turn, b / B loop
   steps) and the damped block-Jacobi sweep (a block of B weights moved together towards its coordinate
   optima, damped when the exact ELBO change says the block's coupling costs more than half the gains), on
   B consecutive weights or on blocks of weakly coupled weights (`coupling_blocks`, built once per fit:
   timed separately). On an accelerator also on the host CPU device (the statistics copied there once).
2. A whole fit (`fit_regression`, 20 sweeps, order "gain") with the defaults (`sweep="auto"`: sequential on
   a CPU, damped block Jacobi on coupling blocks on an accelerator; in place) and other schedules; on an
   accelerator also on the host CPU (`device=jax.devices("cpu")[0]`, the statistics copied there once).
3. Three folds fitted in one vmapped call (as `cv_scores` does), where the statistics are and on the host.
4. The ELBO after k sweeps of a fit from the prior (order "gain", as `fit_regression` runs by default) per
   schedule, on random features and on strongly coupled (overlapping RBF) features: progress per sweep.

Medians of `--repeats` runs after compilation, float32. On an accelerator the 2-core CPU figures of
`benchmarks/results/bench_cavi_cpu.txt` are printed for comparison.
Run: python benchmarks/bench_cavi.py
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi._fit.cavi import _sequential_sweep, blocked_sweep, coupling_blocks, sweep_function

sys.path.insert(0, str(Path(__file__).parent))
from _timing import median_seconds  # noqa: E402

CPU_RESULTS = Path(__file__).parent / "results" / "bench_cavi_cpu.txt"
NEVER = -float("inf")  # a tolerance no sweep meets: every fit runs all its sweeps


def problems(b, m, n, rng):
    """Random features (weak coupling) and overlapping RBF bumps (neighbours correlated up to 0.9998)."""
    x = rng.uniform(size=(n, 1))
    feats = {
        "random": rng.normal(size=(n, b)) / np.sqrt(b),
        "rbf": np.exp(-0.5 * ((x - np.linspace(0, 1, b)[None]) / 0.01) ** 2),
    }
    out = {}
    for name, Phi in feats.items():
        w = rng.normal(size=b) * (rng.uniform(size=b) < 0.1)
        y = Phi @ w + 0.3 * rng.normal(size=n)
        out[name] = kronvi.stats.regression_stats(jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32))
    return out


def schedules(b, *, on_cpu):
    """Sweep factories: statistics' PhitPhi -> a sweep with the signature
    (logits_w, logits_n, prior_w, prior_noise, stats, order, temperature)."""
    blocked = functools.partial(blocked_sweep, jacobi=False)
    auto = "sequential" if on_cpu else "damped Jacobi, coupling blocks"

    def fixed(sweep):
        return lambda A: sweep

    return {
        "sequential (cavi_sweep)": fixed(_sequential_sweep),
        "sequential, unroll 8": fixed(functools.partial(_sequential_sweep, unroll=8)),
        "blocked, B=8": fixed(functools.partial(blocked, block_size=8)),
        'blocked, B=16 (sweep="blocked")': lambda A: sweep_function("blocked", A),
        "damped Jacobi, B=64 consecutive": fixed(
            functools.partial(blocked_sweep, block_size=64, jacobi=True)
        ),
        'damped Jacobi, B=64 coupling blocks (sweep="jacobi")': lambda A: sweep_function("jacobi", A),
        f'sweep="auto" (here: {auto})': lambda A: sweep_function("auto", A),
    }


def cpu_reference():
    """Figures of the committed 2-core CPU run, if present: the sequential sweep alone and a whole fit's
    milliseconds per sweep with the defaults, each (random, rbf)."""
    if not CPU_RESULTS.exists():
        return None
    text = CPU_RESULTS.read_text()
    sweep = re.search(r"^\| sequential \(cavi_sweep\) \| ([\d.]+) \| ([\d.]+) \|", text, re.M)
    fit = re.search(r"^per sweep with the defaults: ([\d.]+) / ([\d.]+) ms", text, re.M)
    if not (sweep and fit):
        return None
    return tuple(map(float, sweep.groups())), tuple(map(float, fit.groups()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=2000)
    ap.add_argument("--levels", type=int, default=15)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--fit-sweeps", type=int, default=20)
    args = ap.parse_args()
    b, m, n = args.b, args.levels, args.n
    dev = jax.devices()[0]
    on_cpu = dev.platform == "cpu"
    print(
        f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}), {os.cpu_count()} CPU cores, "
        f"float32, b={b}, m={m}, n={n}; load average {os.getloadavg()[0]:.1f} at the start"
    )
    rng = np.random.default_rng(0)
    stats = problems(b, m, n, rng)
    pw = kronvi.model.gaussian_prior(b, 1.0, levels=m)
    pn = kronvi.model.noise_prior(0.1)
    lw0 = jnp.asarray(rng.normal(size=(b, m)), jnp.float32)
    ln0 = pn.log_probs
    order = jnp.arange(b)
    host = jax.devices("cpu")[0]
    put = functools.partial(jax.device_put, device=host)
    ref = None if on_cpu else cpu_reference()

    # --- 1. one sweep per schedule
    print("\n## One sweep from random logits, milliseconds (median)")
    print("| schedule | random features | RBF features |")
    print("|---|---:|---:|")
    rows = [(name, make, False) for name, make in schedules(b, on_cpu=on_cpu).items()]
    if not on_cpu:
        rows += [
            ("host CPU: sequential (cavi_sweep)", lambda A: sweep_function("sequential", A), True),
            ("host CPU: blocked, B=16", lambda A: sweep_function("blocked", A), True),
            ("host CPU: damped Jacobi, coupling blocks", lambda A: sweep_function("jacobi", A), True),
        ]
    for name, make, on_host in rows:
        # The sweep's set-up (the coupling blocks) is done once, outside the timed call.
        place = put if on_host else (lambda x: x)
        reps = 3 * args.repeats if on_host else args.repeats
        t = []
        for p in ("random", "rbf"):
            sweep = make(place(stats[p].PhitPhi))
            f = jax.jit(lambda lw, ln, st, o, sweep=sweep: sweep(lw, ln, pw, pn, st, o, 1.0))
            t.append(median_seconds(f, *place((lw0, ln0, stats[p], order)), repeats=reps))
        print(f"| {name} | {t[0] * 1e3:.3f} | {t[1] * 1e3:.3f} |", flush=True)
    print("\nbuilding the coupling blocks (B=64) once per fit, milliseconds (median) and blocks used:")
    build = jax.jit(coupling_blocks, static_argnums=1)
    for p in ("random", "rbf"):
        t_build = median_seconds(build, stats[p].PhitPhi, 64, repeats=args.repeats)
        num = int(build(stats[p].PhitPhi, 64)[1])
        print(f"{p}: {t_build * 1e3:.2f} ms, {num} blocks (b / B = {-(-b // 64)})")
    if not on_cpu:
        t_copy = median_seconds(put, stats["random"], repeats=args.repeats)
        print(f"\ncopying the statistics to the host once: {t_copy * 1e3:.2f} ms")

    # --- 2. a whole fit
    print(
        f"\n## fit_regression, {args.fit_sweeps} sweeps (all of them run), order 'gain', milliseconds (median)"
    )
    print("| sweep, where | random features | RBF features | per sweep (random) | per sweep (RBF) |")
    print("|---|---:|---:|---:|---:|")
    cases = [("the defaults", "auto", None)]
    if on_cpu:
        cases += [('"jacobi"', "jacobi", None)]
    else:
        cases += [
            ('"blocked", in place', "blocked", None),
            ('"sequential", in place', "sequential", None),
            ('"sequential", device=host CPU', "sequential", host),
            ('"jacobi", device=host CPU', "jacobi", host),
        ]
    per_sweep_default = None
    for label, sweep, device in cases:
        ts = []
        for p in ("random", "rbf"):

            def fit(st, sweep=sweep, device=device):
                return kronvi.fitting.fit_regression(
                    st, pw, pn, max_iter=args.fit_sweeps, tol=NEVER, sweep=sweep, device=device
                )

            ts.append(median_seconds(fit, stats[p], repeats=max(3, args.repeats // 3)))
            assert int(fit(stats[p])[2].num_iter) == args.fit_sweeps
        per = [t * 1e3 / args.fit_sweeps for t in ts]
        per_sweep_default = per_sweep_default or per
        print(
            f"| {label} | {ts[0] * 1e3:.1f} | {ts[1] * 1e3:.1f} | {per[0]:.3f} | {per[1]:.3f} |", flush=True
        )
    print(f"per sweep with the defaults: {per_sweep_default[0]:.3f} / {per_sweep_default[1]:.3f} ms")
    if ref:
        (s_r, s_b), (f_r, f_b) = ref
        print(
            f"2-core CPU (bench_cavi_cpu.txt): per sweep with the defaults {f_r:.3f} / {f_b:.3f} ms, "
            f"sequential sweep alone {s_r:.3f} / {s_b:.3f} ms"
        )
        print(
            f"defaults here / 2-core CPU, per sweep of a fit: {per_sweep_default[0] / f_r:.2f} / "
            f"{per_sweep_default[1] / f_b:.2f}"
        )

    # --- 3. vmapped over folds (as cv_scores does)
    folds = 3
    stacked = jax.tree.map(lambda x: jnp.stack([x] * folds), stats["random"])

    def fit_folds(st):
        return jax.vmap(
            lambda s: kronvi.fitting.fit_regression(
                s, pw, pn, max_iter=args.fit_sweeps, tol=NEVER, order="cyclic"
            )
        )(st)

    print(
        f"\n## {folds} folds vmapped, {args.fit_sweeps} sweeps each (random features), milliseconds (median)"
    )
    print(f"where the statistics are: {median_seconds(fit_folds, stacked, repeats=3) * 1e3:.1f}")
    if not on_cpu:
        t_fold_host = median_seconds(lambda st: fit_folds(put(st)), stacked, repeats=3)
        print(f"on the host CPU (statistics copied there): {t_fold_host * 1e3:.1f}")

    # --- 4. progress per sweep
    sweeps = (1, 2, 5, 10, 20)
    print(f"\n## ELBO after k sweeps of a fit from the prior (k = {', '.join(map(str, sweeps))})")
    for p in ("random", "rbf"):
        print(f"\n{p} features")
        print("| sweep, order | " + " | ".join(f"k={k}" for k in sweeps) + " |")
        print("|---|" + "---:|" * len(sweeps))
        for sweep in ("sequential", "blocked", "jacobi"):
            for ordering in ("gain", "cyclic"):
                info = kronvi.fitting.fit_regression(
                    stats[p], pw, pn, max_iter=sweeps[-1], tol=NEVER, order=ordering, sweep=sweep
                )[2]
                row = [float(info.elbo[k]) for k in sweeps]
                print(f"| {sweep}, {ordering} | " + " | ".join(f"{e:.1f}" for e in row) + " |", flush=True)


if __name__ == "__main__":
    main()
