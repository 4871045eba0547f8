"""What validating at the public boundary costs, and what validating once saves (issue 29, item 3).

1. How often one public call runs each checker: `fit_regression(init="gaussian")` and
   `pipeline.fit_direct`, counted by wrapping the checkers where the library looks them up.
2. The cost of one call of each checker at b = 2000 (the statistics' NaN/inf scan reads b x b entries and
   fetches one count to the host), and the wall time of `fit_regression(init="gaussian", max_iter=1)` at
   b = 2000, the call whose validation the issue counted (statistics twice, weight prior four times).

Run it on two checkouts to compare, e.g. the commit before and after the change:

    python benchmarks/bench_validation.py                       # this checkout
    PYTHONPATH=/path/to/old/src python benchmarks/bench_validation.py

Output (committed): benchmarks/results/bench_validation_cpu.txt
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys

import jax
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, median_seconds  # noqa: E402

CHECKERS = ("check_stats", "check_weight_prior", "check_noise_prior", "check_family", "resolve_config")


def count_checks(calls):
    """`{call name: {checker: calls}}`, each checker wrapped in every kronvi module that binds it."""
    counts = collections.Counter()
    bound = [
        (mod, name, getattr(mod, name))
        for n, mod in list(sys.modules.items())
        if n.startswith("kronvi") and mod is not None
        for name in CHECKERS
        if callable(getattr(mod, name, None)) and not isinstance(getattr(mod, name), type)
    ]

    def counted(f, name):
        def wrapped(*a, **k):
            counts[name] += 1
            return f(*a, **k)

        return wrapped

    for mod, name, f in bound:
        setattr(mod, name, counted(f, name))
    out = {}
    try:
        for label, call in calls.items():
            counts.clear()
            call()
            out[label] = dict(counts)
    finally:
        for mod, name, f in bound:
            setattr(mod, name, f)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--b", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    print(machine())
    print(f"kronvi from {pathlib.Path(kronvi.__file__).parent}; {load_average()}\n")

    b, n = args.b, 4 * args.b
    Phi = jax.random.normal(jax.random.key(0), (n, b)) / np.sqrt(b)
    y = Phi[:, 0] + 0.1 * jax.random.normal(jax.random.key(1), (n,))
    stats = kronvi.stats.regression_stats(Phi, y)
    pw, pn = kronvi.model.gaussian_prior(b, 1.0), kronvi.model.noise_prior(0.01)
    X, yy, mask = kronvi.load_demo()
    config = kronvi.DirectConfig(num_frequencies=50, gp=kronvi.GPOptions(restarts=1, points=100))

    def fit():
        return kronvi.fitting.fit_regression(stats, pw, pn, init="gaussian", max_iter=1)

    counts = count_checks(
        {
            f'fit_regression(init="gaussian"), b = {b}': fit,
            "pipeline.fit_direct (yacht, b = 100)": lambda: kronvi.pipeline.fit_direct(
                jax.random.key(0), X[:200], yy[:200], config
            ),
        }
    )
    print("## Checker calls per public call")
    print("| call | " + " | ".join(CHECKERS) + " |")
    print("|---|" + "---:|" * len(CHECKERS))
    for label, c in counts.items():
        print(f"| {label} | " + " | ".join(str(c.get(k, 0)) for k in CHECKERS) + " |")

    from kronvi._model.grids import check_weight_prior
    from kronvi._stats.regression import check_stats

    print(f"\n## Milliseconds, median of {args.repeats} (b = {b})")
    print("| operation | ms |")
    print("|---|---:|")
    rows = {
        "check_stats (type, shape, dtype, n > 0, NaN/inf scan)": lambda: check_stats(stats),
        "check_weight_prior": lambda: check_weight_prior(pw, b),
        'fit_regression(init="gaussian", max_iter=1), whole call': fit,
    }
    for label, call in rows.items():
        print(f"| {label} | {median_seconds(call, repeats=args.repeats) * 1e3:.2f} |")
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
