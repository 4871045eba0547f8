"""Renders the classification study's JSON as a markdown table and a reliability diagram.

Usage:
  python experiments/render_classification.py experiments/results/classification.json
writes ``classification.md`` (the table, with the done criteria checked per dataset) and
``classification_reliability.png`` (from ``classification_reliability.json``) beside the JSON.
"""

from __future__ import annotations

import argparse
import json
import os

METHODS = ("direct-logistic", "sklearn-logistic", "linear-logistic", "gauss-vi", "direct-logistic-paper")


def table(records):
    lines = [
        "| dataset | n | d | method | accuracy | log loss | ECE | fit s/fold: mean / median / fold 0 | sparsity % "
        "| compilation cache |",
        "|---|---:|---:|---|---|---|---:|---:|---:|---|",
    ]
    order = {m: k for k, m in enumerate(METHODS)}
    for r in sorted(records, key=lambda r: (r["dataset"], order.get(r["method"], len(order)), r["method"])):
        lines.append(
            f"| {r['dataset']} | {r['n']} | {r['d']} | {r['method']} | {r['accuracy_mean']:.4f} ± "
            f"{r['accuracy_sd']:.4f} | {r['logloss_mean']:.4f} ± {r['logloss_sd']:.4f} | {r['ece_mean']:.4f} | "
            f"{_seconds(r)} | {r['sparsity_pct']:.1f} | {r.get('compilation_cache', 'not recorded')} |"
        )
    return "\n".join(lines)


def _seconds(r):
    """`mean / median / fold 0` fit seconds; records from before the per-fold times were kept: the mean only."""
    folds = r.get("fit_seconds_folds")
    if not folds:
        return f"{r['fit_seconds']:.2f} / — / —"
    return f"{r['fit_seconds']:.2f} / {r['fit_seconds_median']:.2f} / {folds[0]:.2f}"


def speed(records):
    """direct-logistic's fit seconds against sklearn-logistic's on the same features (issue 26's bar)."""
    by = {}
    for r in records:
        by.setdefault(r["dataset"], {})[r["method"]] = r
    lines = [
        "| dataset | direct-logistic s: mean / median | sklearn-logistic s: mean / median | ratio of means | "
        "ratio of medians | log loss no worse |",
        "|---|---|---|---:|---:|---|",
    ]
    for name, ms in by.items():
        d, sk = ms.get("direct-logistic"), ms.get("sklearn-logistic")
        if d is None or sk is None or "fit_seconds_median" not in d or "fit_seconds_median" not in sk:
            continue
        lines.append(
            f"| {name} | {d['fit_seconds']:.2f} / {d['fit_seconds_median']:.2f} | {sk['fit_seconds']:.2f} / "
            f"{sk['fit_seconds_median']:.2f} | {d['fit_seconds'] / sk['fit_seconds']:.2f} | "
            f"{d['fit_seconds_median'] / sk['fit_seconds_median']:.2f} | "
            f"{'yes' if d['logloss_mean'] <= sk['logloss_mean'] else 'NO'} |"
        )
    return "\n".join(lines)


def criteria(records):
    """Per dataset and direct method: vs linear-logistic (accuracy and log loss at least as good) and its log
    loss relative to the best baseline (within 5%)."""
    by = {}
    for r in records:
        by.setdefault(r["dataset"], {})[r["method"]] = r
    lines = [
        "| dataset (method) | acc ≥ linear | log loss ≤ linear | log loss / best baseline | within 5% |",
        "|---|---|---|---:|---|",
    ]
    for name, ms in by.items():
        for dm in ("direct-logistic", "direct-logistic-paper"):
            d, lin = ms.get(dm), ms.get("linear-logistic")
            base = [ms[m]["logloss_mean"] for m in ms if not m.startswith("direct")]
            if d is None or lin is None or not base:
                continue
            ratio = d["logloss_mean"] / min(base)
            lines.append(
                f"| {name} ({dm}) | {'yes' if d['accuracy_mean'] >= lin['accuracy_mean'] else 'NO'} "
                f"({d['accuracy_mean']:.4f} vs {lin['accuracy_mean']:.4f}) | "
                f"{'yes' if d['logloss_mean'] <= lin['logloss_mean'] else 'NO'} | {ratio:.3f} | "
                f"{'yes' if ratio <= 1.05 else 'NO'} |"
            )
    return "\n".join(lines)


def reliability_plot(rel, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(rel)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        ax.plot([0, 1], [0, 1], color="0.7", lw=1)
        for k, m in enumerate(METHODS):
            if m not in rel[name]:
                continue
            c = np.asarray(rel[name][m]["counts"])
            ok = c > 0
            pm = np.asarray(rel[name][m]["psum"])[ok] / c[ok]
            ym = np.asarray(rel[name][m]["ysum"])[ok] / c[ok]
            ax.plot(pm, ym, "o-", ms=3, lw=1.2, color=f"C{k}", label=m)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("mean predicted P(y=1)", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("observed frequency of y=1", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="upper left")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.suptitle("Reliability (10 equal-width bins, test rows pooled over folds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("json")
    args = ap.parse_args(argv)
    with open(args.json) as fh:
        records = json.load(fh)
    stem = os.path.splitext(args.json)[0]
    text = (
        f"# Classification study\n\nFrom `{os.path.basename(args.json)}` (the two `experiments/classification.py` "
        f"commands in its docstring, then `python experiments/render_classification.py {args.json}`; "
        "mean ± sd over folds).\n\n" + table(records) + "\n\n## Done criteria (direct methods)\n\n"
        + criteria(records) + "\n\n## Fit time against sklearn-logistic (same features)\n\n"
        "Fold 0 of direct-logistic includes XLA compilation; the median is the warm fit.\n\n" + speed(records) + "\n"
    )  # fmt: skip
    with open(stem + ".md", "w") as fh:
        fh.write(text)
    rel_path = stem + "_reliability.json"
    if os.path.exists(rel_path):
        with open(rel_path) as fh:
            reliability_plot(json.load(fh), stem + "_reliability.png")
    print(text)


if __name__ == "__main__":
    main()
