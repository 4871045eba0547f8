"""Summary table of `run.py`'s JSON lines: each refinement rule against `screened`, per fold and overall."""

import json
import sys
from collections import defaultdict

import numpy as np

RULES = ("warm1", "warm2", "screen", "first300")


def main(path):
    by = defaultdict(dict)
    for line in open(path):
        r = json.loads(line)
        by[(r["dataset"], r["fold"])][r["rule"]] = r
    seen = {r for v in by.values() for r in v} - {"screened"}
    rules = [r for r in RULES if r in seen] + sorted(seen - set(RULES))
    print(f"# The GP's refinement rules against `screened`\n\nFrom `{path}` (`run.py` beside this file). RMSE ratio, "
          "NLPD difference and GP-seconds ratio (warm) of the exact BLR predictive on each rule's features "
          "against the current rule; seconds are comparable only within a row (a busy machine).\n")  # fmt: skip
    print("| dataset | fold | n | screened: RMSE / NLPD / GP s | " + " | ".join(f"{r}: ratio / ΔNLPD / time" for r in rules) + " |")
    print("|---|---:|---:|---|" + "---|" * len(rules))
    agg = defaultdict(list)
    for (d, k), v in by.items():
        if "screened" not in v:
            continue
        b = v["screened"]
        cells = [f"{b['rmse']:.4g} / {b['nlpd']:.3f} / {b['gp_s']:.2f}"]
        for r in rules:
            if r in v:
                x = (v[r]["rmse"] / b["rmse"], v[r]["nlpd"] - b["nlpd"], v[r]["gp_s"] / b["gp_s"])
                agg[r].append(x)
                cells.append(f"{x[0]:.3f} / {x[1]:+.3f} / {x[2]:.2f}")
            else:
                cells.append("—")
        print(f"| {d} | {k} | {b['n_train']} | " + " | ".join(cells) + " |")
    print("\n| rule | folds | geometric-mean RMSE ratio | mean ΔNLPD | folds > 2% worse | folds > 2% better | median time ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rules:
        a = np.array(agg[r])
        print(f"| {r} | {len(a)} | {np.exp(np.mean(np.log(a[:, 0]))):.4f} | {a[:, 1].mean():+.4f} | "
              f"{(a[:, 0] > 1.02).sum()} | {(a[:, 0] < 0.98).sum()} | {np.median(a[:, 2]):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
