"""How many times one `kronvi.fit_direct` enters the validators of `kronvi._base.checks` (issue 48, item 5).

Counts, with `sys.setprofile`, every Python call into a function defined in `kronvi/_base/checks.py`
whose caller is outside that file (a top-level entry: `check_xy` calling `as_float_array` counts once; a
context manager once, not once more when it resumes), during one `kronvi.fit_direct(jax.random.key(0), X,
y)` on 300 x 4 synthetic rows with the default config: the first call in the process (which also traces)
and a second one. Prints the totals, with and without the plumbing (functions of checks.py that check
nothing: `is_concrete`, `host_arrays`, `fetch`, ...), and the calls per function and per calling module
(`--detail`: per calling function).

Run it on two checkouts to compare, e.g. the commit before and after the change:

    python benchmarks/bench_validation_calls.py                        # this checkout
    PYTHONPATH=/path/to/old/src python benchmarks/bench_validation_calls.py

Output (committed): benchmarks/results/bench_validation_calls_cpu.txt
"""

from __future__ import annotations

import collections
import inspect
import pathlib
import sys

import jax
import numpy as np

import kronvi

CHECKS = str(pathlib.Path(kronvi.__file__).parent / "_base" / "checks.py")
# Functions of checks.py that check nothing: they say whether an array is traced and where its data live,
# fetch a result, or rename an error.
PLUMBING = (
    "is_concrete",
    "host_arrays",
    "host_view",
    "fetch",
    "reduce_on_device",
    "reduce_concrete",
    "errors_name",
)


def count_validator_calls(call, detail=False):
    """`(total, {validator: calls}, {calling module: calls})` of the top-level entries into checks.py
    while `call()` runs."""
    by_name: collections.Counter = collections.Counter()
    by_caller: collections.Counter = collections.Counter()
    generators: list = []  # frames of generators already entered (a resumed generator reports a "call")

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_filename != CHECKS:
            return
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename == CHECKS:
            return  # nested: a validator calling another
        if frame.f_code.co_flags & inspect.CO_GENERATOR:
            if any(f is frame for f in generators):
                return
            generators.append(frame)
        by_name[frame.f_code.co_name] += 1
        where = "?" if caller is None else caller.f_code.co_filename
        src = where.split("/src/kronvi/")[-1] if "/src/kronvi/" in where else pathlib.Path(where).name
        by_caller[f"{src}:{caller.f_code.co_name}" if detail and caller is not None else src] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return sum(by_name.values()), by_name, by_caller


def main():
    print(f"kronvi from {pathlib.Path(kronvi.__file__).parent}")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=300)

    def fit():
        return kronvi.fit_direct(jax.random.key(0), X, y)

    detail = "--detail" in sys.argv
    cold, cold_names, _ = count_validator_calls(fit)  # the first call: also traces and compiles
    total, by_name, by_caller = count_validator_calls(fit, detail)
    print("\none kronvi.fit_direct(jax.random.key(0), X, y), X 300 x 4 float64 NumPy, default config")
    print("top-level entries into kronvi/_base/checks.py: all | validators (all but the plumbing:")
    print(f"{', '.join(PLUMBING)})")
    for label, t, names in [("first call in the process", cold, cold_names), ("second call", total, by_name)]:
        plumbing = sum(names.get(p, 0) for p in PLUMBING)
        print(f"  {label}: {t} | {t - plumbing}")
    print("\n| function of checks.py (second call) | calls | plumbing |\n|---|---:|---|")
    for name, c in by_name.most_common():
        print(f"| {name} | {c} | {'yes' if name in PLUMBING else ''} |")
    print("\n| called from | calls |\n|---|---:|")
    for name, c in by_caller.most_common():
        print(f"| {name} | {c} |")


if __name__ == "__main__":
    main()
