"""What the test suite's XLA flags (tests/suite_flags.py) save in compilation, program by program.

The suite is compile-bound: its programs run on tens of rows for milliseconds. This compiles a few of the
fits it compiles most (the sizes of tests/package/test_results.py: 24 rows, b = 3, 5 levels, float64) and
one small eager operation, each in a fresh process under three settings of `XLA_FLAGS`:

- `default`: XLA's defaults, as users compile;
- `llvm-O0`: LLVM's cheap passes only (`--xla_backend_optimization_level=0
  --xla_llvm_disable_expensive_passes=true`);
- `suite`: those plus XLA's older CPU fusion emitters (`--xla_cpu_use_fusion_emitters=false`).

The settings are interleaved over `--repeats` rounds; each figure is the median of `lower().compile()`
seconds (tracing and lowering excluded).

    python benchmarks/bench_compile_flags.py > benchmarks/results/bench_compile_flags_cpu.txt
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine  # noqa: E402

SETTINGS = {
    "default": (),
    "llvm-O0": ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"),
    "suite": (
        "--xla_backend_optimization_level=0",
        "--xla_llvm_disable_expensive_passes=true",
        "--xla_cpu_use_fusion_emitters=false",
    ),
}

# Run in a child process: `XLA_FLAGS` is read once, when JAX starts its backend.
CHILD = """
import json, time
import jax, jax.numpy as jnp, numpy as np, optax
import kronvi
from kronvi.logistic import fit_logistic

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)
Phi = jnp.asarray(rng.normal(size=(24, 3)))
y = Phi @ jnp.asarray(rng.normal(size=3)) + 0.3 * jnp.asarray(rng.normal(size=24))
pw, pn = kronvi.model.gaussian_prior(3, 1.0, levels=5), kronvi.model.noise_prior(0.1, levels=5)
stats = kronvi.stats.regression_stats(Phi, y)
start = kronvi.mixtures.Mixture(jnp.zeros((2, 3, 5)), jnp.zeros(2)), kronvi.model.MeanField.from_prior(pn)
programs = {
    'fit_regression(method="cavi")': lambda P, t: kronvi.fitting.fit_regression(
        kronvi.stats.regression_stats(P, t), pw, pn, max_iter=30),
    'fit_regression(method="lbfgs")': lambda P, t: kronvi.fitting.fit_regression(
        kronvi.stats.regression_stats(P, t), pw, pn, method="lbfgs", max_iter=30),
    "fit_mixture_bound": lambda P, t: kronvi.mixtures.fit_mixture_bound(
        kronvi.stats.regression_stats(P, t), pw, pn, init=start, max_iter=4),
    "fit_logistic": lambda P, t: fit_logistic(P, (t > 0).astype(P.dtype), pw, max_iter=4),
    "fit_elrg": lambda P, t: kronvi.gaussian.fit_elrg(
        jax.random.key(0), kronvi.stats.regression_stats(P, t), 1.0, 0.5, rank=1, max_iter=4),
    "one eager operation (jnp.sin on 7 x 5)": jnp.sin,
}
out = {}
for name, fn in programs.items():
    args = (jnp.ones((7, 5)),) if name.startswith("one eager") else (Phi, y)
    lowered = jax.jit(fn).lower(*args)
    t = time.perf_counter()
    lowered.compile()
    out[name] = time.perf_counter() - t
print(json.dumps(out))
"""


def run_child(flags):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"# {machine()}; {load_average()} at the start", flush=True)
    runs = {name: [] for name in SETTINGS}
    for r in range(args.repeats):
        for name, flags in SETTINGS.items():
            runs[name].append(run_child(flags))
            print(f"# round {r + 1}/{args.repeats}: {name} done", file=sys.stderr, flush=True)
    programs = list(runs["default"][0])
    median = {s: {p: statistics.median(run[p] for run in runs[s]) for p in programs} for s in SETTINGS}
    print(f"\n## Compile seconds, median of {args.repeats} fresh processes per setting")
    print("| program | " + " | ".join(SETTINGS) + " | suite / default |")
    print("|---|" + "---:|" * (len(SETTINGS) + 1))
    for p in programs:
        cells = " | ".join(f"{median[s][p]:.3f}" for s in SETTINGS)
        print(f"| {p} | {cells} | {median['suite'][p] / median['default'][p]:.2f} |")
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
