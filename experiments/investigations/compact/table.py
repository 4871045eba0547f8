"""Renders ``results/results.jsonl`` (from ``run.py``) as ``results/RESULTS.md``.

python experiments/investigations/compact/table.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    src = Path(argv[0]) if argv else HERE / "results" / "results.jsonl"
    records = {}
    for line in src.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            records[rec["dataset"]] = rec  # a later run of a data set replaces an earlier one
    L = ["# Compact candidates against exact BLR (issue 27)", ""]
    L.append(
        "Fold 0; the default recipe's GP hyperparameters and b random Fourier features for every candidate. "
        "RMSE and NLPD over every test row, in parentheses the ratio to / difference from exact-blr's. "
        "Sparsity: expected fraction of zero weights in a posterior sample. Bytes: `kronvi.save_model` of "
        "the whole `FittedDirect` (compressed); `compact-v16` counts its kept vectors at 2 bytes. Prediction: "
        "`fold_features` + `predict_regression` for 1,000 points, candidates interleaved, median. Produced by "
        f"`python experiments/investigations/compact/run.py {' '.join(records)}` and `table.py`."
    )
    L.append("")
    for name, rec in records.items():
        L.append(f"## {name} (n = {rec['n_train']}, test {rec['n_test']}, d = {rec['d']}, b = {rec['b']})")
        L.append("")
        L.append(
            "| candidate | RMSE | NLPD | sparsity | bits | weights (kept k) | file kB (vs eigen) | ms / 1000 |"
        )
        L.append("|---|---|---|---|---|---|---|---|")
        for r in rec["rows"]:
            if r["candidate"] == "exact-blr":
                L.append(f"| exact-blr | {r['rmse']:.4g} | {r['nlpd']:.3f} | — | — | — | — | — |")
                continue
            kept = f" ({r['kept_directions']})" if r.get("kept_directions") is not None else ""
            ms = r.get("predict_s_per_1000")
            L.append(
                f"| {r['candidate']} | {r['rmse']:.4g} ({r['rmse_ratio']:.3f}) | {r['nlpd']:.3f} "
                f"({r['nlpd_diff']:+.3f}) | {100 * r['sparsity']:.0f}% | {r['bits']} | {r['weights']}{kept} | "
                f"{r['file_bytes'] / 1e3:,.0f} ({r['file_bytes'] / _eigen(rec)['file_bytes']:.3f}) | "
                + ("—" if ms is None else f"{1e3 * ms:.1f}")
                + " |"
            )
        L.append("")
    L.append("## Summary")
    L.append("")
    L.append(
        "| candidate | RMSE ≤ 1.02x and NLPD ≤ +0.05 | worst RMSE ratio | worst NLPD difference | median sparsity "
        "| median bytes vs eigen | median time vs eigen |"
    )
    L.append("|---|---|---|---|---|---|---|")
    names = [r["candidate"] for r in next(iter(records.values()))["rows"] if r["candidate"] != "exact-blr"]
    for cand in names:
        rs = [(rec, r) for rec in records.values() for r in rec["rows"] if r["candidate"] == cand]
        ok = sum(r["rmse_ratio"] <= 1.02 and r["nlpd_diff"] <= 0.05 for _, r in rs)
        times = [
            r["predict_s_per_1000"] / _eigen(rec)["predict_s_per_1000"]
            for rec, r in rs
            if "predict_s_per_1000" in r
        ]
        time_ratio = f"{np.median(times):.2f}" if times else "—"
        L.append(
            f"| {cand} | {ok} / {len(rs)} | {max(r['rmse_ratio'] for _, r in rs):.3f} "
            f"| {max(r['nlpd_diff'] for _, r in rs):+.3f} | {100 * np.median([r['sparsity'] for _, r in rs]):.0f}% "
            f"| {np.median([r['file_bytes'] / _eigen(rec)['file_bytes'] for rec, r in rs]):.3f} | {time_ratio} |"
        )
    L.append("")
    (src.parent / "RESULTS.md").write_text("\n".join(L) + "\n")
    print(f"wrote {src.parent / 'RESULTS.md'}")


def _eigen(rec):
    return next(r for r in rec["rows"] if r["candidate"] == "eigen")


if __name__ == "__main__":
    main()
