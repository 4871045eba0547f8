"""Summary of `run.py`'s JSON lines: each GP budget against the first config, per fold and overall (each
config over the folds where it ran)."""

import json
import sys
from collections import defaultdict

import numpy as np


def label(r):
    return f"{r['points']}:{r['screen']}:{r['linesearch']}"


def main(path):
    by = defaultdict(dict)
    order = []
    for line in open(path):
        r = json.loads(line)
        by[(r["dataset"], r["fold"])][label(r)] = r
        if label(r) not in order:
            order.append(label(r))
    base, others = order[0], order[1:]
    print(f"# The GP step's budget against test accuracy\n\nFrom `{path}` (`run.py` beside this file). Configs are "
          "`gp_points:gp_screen_points:line-search cap`. RMSE ratio and NLPD difference of the exact BLR "
          f"predictive against `{base}`, and warm GP seconds (first call above 5,000 rows).\n")  # fmt: skip
    print(
        "| dataset | n | fold | "
        + f"{base}: RMSE / NLPD / GP s | "
        + " | ".join(f"{o}: ratio / ΔNLPD / GP s" for o in others)
        + " |"
    )
    print("|---|---:|---:|---|" + "---|" * len(others))
    for (d, k), v in sorted(by.items()):
        if base not in v:
            continue
        b = v[base]
        cells = [f"{b['rmse']:.4g} / {b['nlpd']:.3f} / {b['gp_s']:.2f}"]
        for o in others:
            cells.append(
                f"{v[o]['rmse'] / b['rmse']:.3f} / {v[o]['nlpd'] - b['nlpd']:+.3f} / {v[o]['gp_s']:.2f}"
                if o in v
                else "—"
            )
        print(f"| {d} | {b['n']} | {k} | " + " | ".join(cells) + " |")
    print("\n## Overall\n")
    print(
        "| config | folds | geometric-mean RMSE ratio | mean ΔNLPD | folds >2% worse / better | worst ratio | GP seconds, sum | sum over folds with n < 2,000 |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for o in order:  # over the folds where both `o` and the first config ran
        complete = [v for v in by.values() if base in v and o in v]
        ratios = np.array([v[o]["rmse"] / v[base]["rmse"] for v in complete])
        dn = np.array([v[o]["nlpd"] - v[base]["nlpd"] for v in complete])
        secs = sum(v[o]["gp_s"] for v in complete)
        small = sum(v[o]["gp_s"] for v in complete if v[o]["n"] < 2000)
        print(f"| {o} | {len(complete)} | {np.exp(np.mean(np.log(ratios))):.4f} | {dn.mean():+.4f} | "
              f"{int((ratios > 1.02).sum())} / {int((ratios < 0.98).sum())} | {ratios.max():.3f} | {secs:.1f} | {small:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
