"""Where a first fit's time goes: every program the default recipe compiles, with its tracing, lowering and
XLA compilation seconds.

For each dataset, a fresh process (no persistent cache, XLA's default flags, as users compile) fits fold 0
with `kronvi.pipeline.fit_direct` (float32) and predicts its test rows (`fold_features`,
`predict_regression`, `predictive_log_density`), with `jax_log_compiles` on; JAX's log lines of every
compilation are summed per program name. Then the same fit and prediction at `n - 1`, `0.9 n` and `0.8 n`
training rows in the same process list what a new row count compiles (`kronvi._base.buckets`).
`--classifier` does the same for `kronvi.fit_classifier` and `predict_proba` on the classification sets.

    python benchmarks/bench_compile_budget.py > benchmarks/results/bench_compile_budget_cpu.txt
    python benchmarks/bench_compile_budget.py --classifier > benchmarks/results/bench_compile_budget_classifier_cpu.txt
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
CLASSIFICATION = "anes96_vote,breastcancer_wdbc,digits_parity,fair_affairs,kin40k_median"

CHILD = r"""
import json, logging, re, sys, time
t0 = time.perf_counter()
import jax, numpy as np
import kronvi
from kronvi import pipeline
import_s = time.perf_counter() - t0
events, phase = [], ["fit"]
PATTERNS = [
    ("trace", re.compile(r"Finished tracing \+ transforming (\S+) for pjit in ([0-9.e-]+) sec")),
    ("trace", re.compile(r"Finished tracing (\S+) for jit in ([0-9.e-]+) sec")),
    ("lower", re.compile(r"Finished jaxpr to MLIR module conversion jit\((\S+)\) in ([0-9.e-]+) sec")),
    ("compile", re.compile(r"Finished XLA compilation of jit\((\S+)\) in ([0-9.e-]+) sec")),
]
class Handler(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        for kind, pat in PATTERNS:
            m = pat.search(msg)
            if m:
                events.append((phase[0], kind, m.group(1), float(m.group(2))))
                return
handler = Handler()
logging.getLogger("jax").addHandler(handler)
jax.config.update("jax_log_compiles", True)
for name in ("jax", "jax._src.interpreters.pxla", "jax._src.dispatch", "jax._src.pjit", "jax._src.compiler"):
    logging.getLogger(name).setLevel(logging.DEBUG)
logging.getLogger("jax").propagate = False
X, y, mask = kronvi.load_uci(sys.argv[1])
test = np.asarray(mask)[:, 0].astype(bool)
X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
n = Xtr.shape[0]
wall = {}
for label, rows in (("fit", n), ("fit at n-1", n - 1), ("fit at 0.9n", int(0.9 * n)), ("fit at 0.8n", int(0.8 * n))):
    for step in ("fit", "predict"):
        phase[0] = f"{label}: {step}"
        t = time.perf_counter()
        if step == "fit":
            fit = kronvi.fit_classifier if sys.argv[2] == "classifier" else pipeline.fit_direct
            model = fit(jax.random.key(0), Xtr[:rows], ytr[:rows]).model
            jax.block_until_ready(model)
        elif sys.argv[2] == "classifier":
            jax.block_until_ready(model.predict_proba(Xte))
        else:
            Phi = pipeline.fold_features(model, Xte)
            kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
            yc = (yte - float(model.y_offset)).astype(Phi.dtype)
            try:
                ld = kronvi.model.predictive_log_density(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, yc)
            except kronvi.DensityToleranceError:
                ld = None
            jax.block_until_ready(ld)
        wall[phase[0]] = time.perf_counter() - t
print(json.dumps(dict(n=n, import_s=import_s, wall=wall, events=events)))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classifier", action="store_true", help="fit_classifier on the classification sets")
    parser.add_argument(
        "--datasets", default=None, help=f"default concrete,yacht (--classifier: {CLASSIFICATION})"
    )
    parser.add_argument(
        "--data-dir", default=None, help="default ../shared/data/uci (--classifier: .../classification)"
    )
    args = parser.parse_args()
    family = "classifier" if args.classifier else "regression"
    args.datasets = args.datasets or (CLASSIFICATION if args.classifier else "concrete,yacht")
    args.data_dir = args.data_dir or str(DATA / ("classification" if args.classifier else "uci"))
    flag = " --classifier" if args.classifier else ""
    print(f"# python benchmarks/bench_compile_budget.py{flag} --datasets {args.datasets}")
    print(f"# {machine()}; OPENBLAS_NUM_THREADS=1; {load_average()} at the start", flush=True)
    for name in args.datasets.split(","):
        env = dict(os.environ, JAX_PLATFORMS="cpu", OPENBLAS_NUM_THREADS="1")
        env = {k: v for k, v in env.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT"))}
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(pathlib.Path(args.data_dir) / name), family],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"\n== {name}: {out['n']} training rows; import {out['import_s']:.2f} s; {load_average()}")
        for phase, seconds in out["wall"].items():
            compiled = [e for e in out["events"] if e[0] == phase and e[1] == "compile"]
            total = sum(e[3] for e in out["events"] if e[0] == phase)
            print(
                f"  {phase}: {seconds:.2f} s wall, {len(compiled)} programs compiled, "
                f"{total:.2f} s tracing + lowering + compiling"
            )
        for phase in out["wall"]:
            per = {}
            for ph, kind, prog, sec in out["events"]:
                if ph == phase:
                    row = per.setdefault(prog, {"trace": 0.0, "lower": 0.0, "compile": 0.0, "count": 0})
                    row[kind] += sec
                    row["count"] += kind == "compile"
            if not per:
                continue
            print(f"\n### {name}, {phase}: programs by compile seconds")
            print("| program | compiled | trace s | lower s | XLA compile s | total s |")
            print("|---|---:|---:|---:|---:|---:|")
            rows = sorted(per.items(), key=lambda kv: -(kv[1]["compile"] + kv[1]["lower"] + kv[1]["trace"]))
            for prog, r in rows:
                tot = r["trace"] + r["lower"] + r["compile"]
                print(
                    f"| {prog} | {r['count']} | {r['trace']:.3f} | {r['lower']:.3f} | {r['compile']:.3f} | {tot:.3f} |"
                )
            tr, lo, co = (sum(r[k] for r in per.values()) for k in ("trace", "lower", "compile"))
            print(
                f"| **all {sum(r['count'] for r in per.values())}** | | {tr:.2f} | {lo:.2f} | {co:.2f} | {tr + lo + co:.2f} |"
            )
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
