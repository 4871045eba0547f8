"""Tables of ``run.py``'s JSON lines: per dataset (mean over its folds) each rule's RMSE and NLPD, and per
rule how often it stays within 1.02x the evidence rule's RMSE and 0.05 nats of its NLPD.

Usage: python experiments/investigations/scale_cap/summary.py experiments/investigations/scale_cap/results/scale_cap.jsonl
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections import defaultdict

import numpy as np


def main(argv=None) -> int:
    path = pathlib.Path((argv or sys.argv[1:])[0])
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["dataset"]][r["rule"]].append(r)
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    print(f"# python experiments/investigations/scale_cap/summary.py {path}\n")
    print(
        f"From `{path.name}` ({len(rows)} lines). Mean over the folds run; prior scale as a multiple of the GP's.\n"
    )
    print("| dataset | folds | " + " | ".join(f"{r} RMSE / NLPD (σ_w×)" for r in rules) + " |")
    print("|---|---:|" + "---|" * len(rules))
    mean = {}
    for d, per in by.items():
        gp = np.array([r["prior_scale"] for r in per["gp"]])
        cells = []
        for rule in rules:
            rs = per[rule]
            m = (np.mean([r["rmse"] for r in rs]), np.mean([r["nlpd"] for r in rs]))
            mean[d, rule] = m
            ratio = np.exp(np.mean(np.log(np.array([r["prior_scale"] for r in rs]) / gp)))
            cells.append(f"{m[0]:.4g} / {m[1]:.3f} ({ratio:.3g})")
        print(f"| {d} | {len(per['gp'])} | " + " | ".join(cells) + " |")
    print(
        "\n| rule | RMSE ≤ 1.02x evidence's and NLPD ≤ its + 0.05 | RMSE lower than evidence's | NLPD worse by > 0.05 "
        "| geometric-mean RMSE ratio to evidence | mean NLPD difference |"
    )
    print("|---|---:|---:|---|---:|---:|")
    names = list(by)
    for rule in rules:
        r = np.array([mean[d, rule][0] / mean[d, "evidence"][0] for d in names])
        n = np.array([mean[d, rule][1] - mean[d, "evidence"][1] for d in names])
        worse = ", ".join(f"{d} {x:+.2f}" for d, x in zip(names, n, strict=True) if x > 0.05) or "none"
        print(
            f"| {rule} | {int(np.sum((r <= 1.02) & (n <= 0.05)))} of {len(names)} | {int(np.sum(r < 1))} | {worse} "
            f"| {np.exp(np.mean(np.log(r))):.3f} | {np.mean(n):+.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
