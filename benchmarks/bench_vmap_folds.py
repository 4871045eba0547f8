"""K-fold fits on a CPU: `jax.vmap(kronvi.fitting.fit_regression)` against a Python loop and `jax.lax.map`.

Five folds of synthetic data (random Fourier features of 8 inputs, `b` features, a smooth target plus noise;
`kronvi.stats.kfold_stats`) are fitted with the default `fit_regression` (CAVI, gain order, sequential sweeps, up to
100 sweeps), on general statistics (`PhitPhi` dense) and on eigenbasis statistics (diagonal `PhitPhi`,
`sweep="diagonal"`, the default recipe's fit). Three forms, each compiled before timing (medians of
`--repeats` calls, the three forms timed in turn in a rotated order, so that the machine's drift falls on
each):

- **loop**: `for k in range(5): fit(train[k])`, one jitted fit reused by every fold;
- **vmap**: `jax.jit(jax.vmap(fit))(train)`: one program for the stacked folds;
- **lax.map**: `jax.jit(lambda s: jax.lax.map(fit, s))(train)`: one program, the folds one after another.

Batched as JAX batches it, a `vmap` of a `lax.while_loop` runs every fold until the slowest stops (the others'
iterations are masked, not skipped), and each sweep's per-coordinate steps become gathers and scatters over
the fold axis; since `fit_regression` has a batching rule that runs the folds one after another on a CPU
(`lax.map`), the vmap column matches the loop. Run it on an older checkout for the figures before the rule.
The sweeps column gives each fold's count.

    python benchmarks/bench_vmap_folds.py > benchmarks/results/bench_vmap_folds_cpu.txt
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, seconds  # noqa: E402


def problem(b, n=2000, folds=5, seed=0):
    """Stacked training statistics `(folds, ...)` of `b` random Fourier features, and the priors."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 8))
    y = np.sin(1.5 * X[:, 0]) + 0.5 * np.cos(X[:, 1] * X[:, 2]) + 0.1 * rng.standard_normal(n)
    feats = kronvi.inputs.rff_init(jax.random.key(seed), jnp.full(8, 1.5), b // 2)
    Phi = kronvi.inputs.rff_features(feats, jnp.asarray(X, jnp.float32))
    train, _ = kronvi.stats.kfold_stats(Phi, jnp.asarray(y - y.mean(), jnp.float32), np.arange(n) % folds)
    prior_w = kronvi.model.gaussian_prior(b, 1.0, levels=15, width=3.0)
    prior_n = kronvi.model.noise_prior(0.01, levels=15, span=10.0)
    return train, prior_w, prior_n


def rotate(train):
    """The eigenbasis statistics of each fold (diagonal `PhitPhi`; the weight grid is the same)."""
    out = [
        kronvi.stats.eigenbasis(jax.tree.map(lambda a, k=k: a[k], train))[0] for k in range(train.n.shape[0])
    ]
    return jax.tree.map(lambda *a: jnp.stack(a), *out)


def forms(fit, train, repeats):
    folds = train.n.shape[0]
    one = jax.jit(fit)
    each = [jax.tree.map(lambda a, k=k: a[k], train) for k in range(folds)]

    def loop():
        return [one(s) for s in each]

    vmapped = jax.jit(jax.vmap(fit))
    mapped = jax.jit(lambda s: jax.lax.map(fit, s))
    calls = {"loop": loop, "vmap": lambda: vmapped(train), "lax.map": lambda: mapped(train)}
    firsts = {name: seconds(f) for name, f in calls.items()}  # each compiles
    times = {name: [] for name in calls}
    for r in range(repeats):  # the forms in turn, the order rotated: the machine's drift falls on all three
        names = list(calls)[r % 3 :] + list(calls)[: r % 3]
        for name in names:
            times[name].append(seconds(calls[name])[1])
    out = {}
    for name in calls:
        res, first = firsts[name]
        median = statistics.median(times[name])
        sweeps = (
            [int(r.info.num_iter) for r in res] if name == "loop" else np.asarray(res.info.num_iter).tolist()
        )
        elbo = (
            [float(r.info.final_elbo) for r in res]
            if name == "loop"
            else np.asarray(res.info.final_elbo).tolist()
        )
        out[name] = (median, first, sweeps, elbo)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"# python benchmarks/bench_vmap_folds.py --sizes {args.sizes} --repeats {args.repeats}")
    print(f"# {machine()}; {load_average()} at the start", flush=True)
    rows = []
    for b in map(int, args.sizes.split(",")):
        train, prior_w, prior_n = problem(b)
        dense = functools.partial(kronvi.fitting.fit_regression, prior_w=prior_w, prior_noise=prior_n)
        diagonal = functools.partial(dense, sweep="diagonal")
        cases = [("dense", train, dense), ("eigenbasis", rotate(train), diagonal)]
        for label, stats, fit in cases:
            out = forms(fit, stats, args.repeats)
            for name, (median, first, sweeps, elbo) in out.items():
                rows.append((b, label, name, median, first, sweeps, elbo, median / out["loop"][0]))
                print(
                    f"  b={b} {label} {name}: {median:.3f} s (first call {first:.2f} s), sweeps {sweeps}",
                    flush=True,
                )
    print("\n## 5 folds, seconds (median of warm calls)")
    print(
        "| b | statistics | form | seconds | / loop | first call (compiles) | sweeps per fold | max ELBO gap to loop |"
    )
    print("|---:|---|---|---:|---:|---:|---|---:|")
    loops = {(b, label): elbo for b, label, name, _, _, _, elbo, _ in rows if name == "loop"}
    for b, label, name, median, first, sweeps, elbo, ratio in rows:
        gap = max(abs(a - c) / max(1.0, abs(c)) for a, c in zip(elbo, loops[(b, label)], strict=True))
        print(f"| {b} | {label} | {name} | {median:.3f} | {ratio:.2f} | {first:.2f} | {sweeps} | {gap:.1e} |")
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
