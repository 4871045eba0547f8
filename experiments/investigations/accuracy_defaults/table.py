"""Renders experiments/investigations/accuracy_defaults/results/results.jsonl as markdown (last record per dataset/variant wins)."""

import json
import sys
from collections import OrderedDict

rows = OrderedDict()
for line in open(
    sys.argv[1] if len(sys.argv) > 1 else "experiments/investigations/accuracy_defaults/results/results.jsonl"
):
    r = json.loads(line)
    rows[(r["dataset"], r["variant"])] = r
datasets = list(OrderedDict.fromkeys(k[0] for k in rows))
variants = list(OrderedDict.fromkeys(k[1] for k in rows if not k[1].startswith("BLR")))

print("### Per dataset (fold 0)\n")
for d in datasets:
    print(f"\n**{d}**\n")
    print(
        "| variant | RMSE | ratio | NLPD | ΔNLPD | ELBO | sparsity | bits | E[σ²] | sweeps | fit s | meets |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
    for (dd, v), r in rows.items():
        if dd != d:
            continue
        if v.startswith("BLR"):
            extra = f" σ_w²={r['s2w']:.4g}" if "s2w" in r else ""
            print(
                f"| {v} (σ²={r['s2']:.4g}{extra}) | {r['rmse']:.4f} | | {r['nlpd']:.3f} | | log ev {r['logev']:.1f} | | | | | | |"
            )
        else:
            print(
                f"| {v} | {r['rmse']:.4f} | {r['rmse_ratio']:.3f} ({r['ref']}) | {r['nlpd']:.3f} | {r['dnlpd']:+.3f} | "
                f"{r['elbo']:.1f} | {100 * r['sparsity']:.1f}% | {r['bits']:.2f} | {r['E_s2']:.4g} | {r['iters']} | "
                f"{r['fit_s']:.2f} | {'yes' if r['meets'] else 'no'} |"
            )

print(
    "\n### Summary: RMSE ratio / ΔNLPD against the exact BLR with the same noise (✓ = meets 1.02x and +0.05)\n"
)
print("| variant | " + " | ".join(datasets) + " | meets |")
print("|---|" + "---|" * len(datasets) + "---:|")
for v in variants:
    cells, n = [], 0
    for d in datasets:
        r = rows.get((d, v))
        if r is None:
            cells.append("")
            continue
        n += r["meets"]
        cells.append(f"{r['rmse_ratio']:.3f} / {r['dnlpd']:+.2f}{' ✓' if r['meets'] else ''}")
    print(f"| {v} | " + " | ".join(cells) + f" | {n}/{sum(1 for d in datasets if (d, v) in rows)} |")
