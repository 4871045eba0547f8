"""Two runs of experiments/uci.py side by side: direct-mf RMSE, NLPD and seconds per dataset.

Usage: python experiments/investigations/compare_runs.py BEFORE.json AFTER.json
"""

import json
import sys

import numpy as np


def seconds(r):
    """GP + statistics + fit seconds, mean per fold."""
    return r["init_seconds"] + r["stats_seconds"] + r["fit_seconds"]


def main(before_path, after_path):
    before = {(r["dataset"], r["method"]): r for r in json.load(open(before_path))}
    after = {(r["dataset"], r["method"]): r for r in json.load(open(after_path))}
    print(
        "| dataset | n | before RMSE / NLPD / s | after RMSE / NLPD / s | RMSE ratio | NLPD diff | time ratio |"
    )
    print("|---|---:|---|---|---:|---:|---:|")
    ratios, diffs, t_before, t_after = [], [], 0.0, 0.0
    for (d, m), a in after.items():
        if m != "direct-mf" or (d, m) not in before:
            continue
        b = before[(d, m)]
        ratios.append(a["rmse_mean"] / b["rmse_mean"])
        diffs.append(a["nlpd_mean"] - b["nlpd_mean"])
        t_before += seconds(b)
        t_after += seconds(a)
        print(
            f"| {d} | {a['n']} | {b['rmse_mean']:.4g} / {b['nlpd_mean']:.3f} / {seconds(b):.1f} | "
            f"{a['rmse_mean']:.4g} / {a['nlpd_mean']:.3f} / {seconds(a):.1f} | {ratios[-1]:.3f} | "
            f"{diffs[-1]:+.3f} | {seconds(a) / seconds(b):.2f} |"
        )
    print(
        f"\n{len(ratios)} datasets: geometric-mean RMSE ratio {np.exp(np.mean(np.log(ratios))):.4f}, mean NLPD "
        f"difference {np.mean(diffs):+.4f}, {sum(x > 1.02 for x in ratios)} more than 2% worse, "
        f"{sum(x < 0.98 for x in ratios)} more than 2% better; GP + statistics + fit seconds (per-fold means "
        f"summed over datasets) {t_before:.0f} -> {t_after:.0f} ({t_after / t_before:.2f}x)"
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
