"""The default regression fit's first call in a fresh process, without and with JAX's persistent
compilation cache (`docs/sharp_bits.md`).

For each dataset: one fresh process with no cache, then three with an empty cache directory that the first
of them fills. Each process runs `benchmarks/bench_vs_peers.py --first-call` (kronvi's whole default fit on
fold 0, then the predictive moments and the density of the test rows) and reports its seconds, with JAX's
compile log on: the number of XLA compilations, how many were loaded from the cache, and the slowest.

Usage: python experiments/investigations/compile_cache/first_calls.py --datasets yacht,energy \
    > experiments/investigations/compile_cache/results/first_calls.txt
(`--uncached-only N`: N fresh processes without a cache per dataset, to compare two versions of kronvi.)
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CACHE_ENV = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


def first_call(name, data_dir, cache_dir):
    env = dict(os.environ, JAX_LOG_COMPILES="1")
    if cache_dir is not None:
        env.update(CACHE_ENV, JAX_COMPILATION_CACHE_DIR=cache_dir)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_vs_peers.py"), "--first-call", name]
    res = subprocess.run([*cmd, "--data-dir", data_dir], capture_output=True, text=True, env=env, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    compiles = re.findall(r"Finished XLA compilation of jit\((\w+)\) in ([0-9.]+) sec", res.stderr)
    out["compiles"] = len(compiles)
    out["hits"] = len(re.findall(r"Persistent compilation cache hit", res.stderr))
    out["slowest"] = max(compiles, key=lambda c: float(c[1])) if compiles else ("-", "0")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="yacht,energy")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "uci"))
    ap.add_argument(
        "--uncached-only",
        type=int,
        default=0,
        metavar="N",
        help="only N fresh processes without a cache each",
    )
    args = ap.parse_args()
    print(f"# python {' '.join(sys.argv)}  ({os.cpu_count()} cores)")
    print(
        "| dataset | process | fit s | its GP / stats / CAVI s | density of the test rows s "
        "| XLA compilations (from the cache) | slowest compilation |"
    )
    print("|---|---|---:|---|---:|---|---|")
    for name in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as cache:
            runs = [("no cache", None), ("cache, empty (fills it)", cache)]
            runs += [(f"cache, warm ({k})", cache) for k in (1, 2)]
            if args.uncached_only:
                runs = [(f"no cache ({k + 1})", None) for k in range(args.uncached_only)]
            for label, cache_dir in runs:
                r = first_call(name, args.data_dir, cache_dir)
                print(
                    f"| {name} | {label} | {r['fit']:.2f} | {r['gp']:.2f} / {r['stats']:.2f} / {r['cavi']:.2f} "
                    f"| {r['density']:.2f} | {r['compiles']} ({r['hits']}) "
                    f"| {r['slowest'][0]} {float(r['slowest'][1]):.2f} s |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
