"""Summary table of `run.py`'s JSON lines: fewer GP restarts against the best of 4, per fold and overall."""

import json
import sys
from collections import defaultdict

import numpy as np


def main(path):
    by = defaultdict(dict)
    for line in open(path):
        r = json.loads(line)
        by[(r["dataset"], r["fold"])][r["restarts"]] = r
    print(f"# GP restarts against test accuracy\n\nFrom `{path}` (`run.py` beside this file, run at commit 2672b26 on a machine busy with other jobs, "
          "load average about 5: seconds are comparable only within a row). RMSE ratio and NLPD "
          "difference of the exact BLR predictive against the best of 4 starts, GP seconds (warm) of each.\n")  # fmt: skip
    print(
        "| dataset | fold | 4 starts: RMSE / NLPD / GP s | 2 starts: ratio / ΔNLPD / GP s | 1 start: ratio / ΔNLPD / GP s |"
    )
    print("|---|---:|---|---|---|")
    for (d, k), v in by.items():
        b = v[4]
        cells = [f"{b['rmse']:.4g} / {b['nlpd']:.3f} / {b['gp_s']:.2f}"]
        for r in (2, 1):
            cells.append(
                f"{v[r]['rmse'] / b['rmse']:.3f} / {v[r]['nlpd'] - b['nlpd']:+.3f} / {v[r]['gp_s']:.2f}"
            )
        print(f"| {d} | {k} | " + " | ".join(cells) + " |")
    print()
    for r in (2, 1):
        ratio = np.array([v[r]["rmse"] / v[4]["rmse"] for v in by.values()])
        dn = np.array([v[r]["nlpd"] - v[4]["nlpd"] for v in by.values()])
        time = sum(v[r]["gp_s"] for v in by.values()) / sum(v[4]["gp_s"] for v in by.values())
        print(f"- {r} start(s) against 4, {len(ratio)} folds: geometric-mean RMSE ratio {np.exp(np.log(ratio).mean()):.4f}, "
              f"{(ratio > 1.02).sum()} folds more than 2% worse and {(ratio < 0.98).sum()} more than 2% better, "
              f"mean NLPD difference {dn.mean():+.4f}, total GP time {time:.2f} of the 4 starts'.")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
