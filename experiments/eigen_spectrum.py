"""Is there a prior-dominated complement to truncate? The default's eigen-directions and where a fold's time goes
(issue 49, item 1: "a truncated eigenbasis ... the prior-dominated complement treated exactly ... where b^3 would
dominate"; `docs/decisions/default-recipe.md#a-feature-budget-chosen-by-the-data`).

For each published fold asked for, prepares the training rows with the default recipe (`kronvi.pipeline.prepare_fold`,
key 0) and records the seconds of its stages as its progress reports them (the GP step, the statistics pass, the
eigendecomposition of the statistics and what follows it) and, for every eigen-direction $i$ of $\\Phi^\\top\\Phi$, the
ratio $r_i = s^2\\lambda_i/\\sigma^2$ of the data's precision to the prior's at the evidence-optimal prior scale $s$ and
noise $\\sigma^2$. The posterior variance of direction $i$ is the prior's over $1 + r_i$: a direction with $r_i$ below
0.01 is within 1% of the prior (prior-dominated), and only such directions could be left out of a truncated eigenbasis
and treated as the prior without changing the posterior. Directions of zero eigenvalue (fewer rows than features:
the null space, which the default already treats as the prior without vectors) are counted apart. Every record is
appended to `--out` as soon as it exists; a (dataset, fold) already there is skipped.

Usage:
  python experiments/eigen_spectrum.py --data-dir ../shared/data/uci --datasets kin40k,protein --out \\
      experiments/results/eigen_spectrum.jsonl
  python experiments/eigen_spectrum.py --out experiments/results/eigen_spectrum.jsonl --table \\
      experiments/results/eigen_spectrum.md
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import study_cli  # noqa: E402

THRESHOLDS = (0.01, 0.1, 1.0, 10.0)  # r = s^2 lambda / sigma^2: directions counted at or above each
PRIOR_DOMINATED = 0.01  # below this r a direction's posterior variance is within 1% of the prior's


def stage_seconds(stamps, total: float) -> dict:
    """``{stage: seconds}`` from the progress reports ``(seconds since the start, stage)``, in order: each stage runs
    from its first report to the next stage's first report (the last to ``total``)."""
    firsts = []
    for t, stage in stamps:
        if not firsts or firsts[-1][1] != stage:
            firsts.append((t, stage))
    out = {}
    for (t, stage), nxt in zip(firsts, [*firsts[1:], (total, None)], strict=True):
        out[stage] = out.get(stage, 0.0) + nxt[0] - t
    return out


def spectrum_counts(eigenvalues, prior_scale: float, noise_variance: float) -> dict:
    """The directions with zero eigenvalue, and those with ``r = s^2 lambda / sigma^2`` at or above each threshold and
    below `PRIOR_DOMINATED` (zero eigenvalues excluded)."""
    lam = np.asarray(eigenvalues, np.float64)
    r = prior_scale**2 * lam / noise_variance
    null = int(np.sum(lam <= 0))
    counts = {f"r>={t:g}": int(np.sum(r >= t)) for t in THRESHOLDS}
    return dict(null=null, prior_dominated=int(np.sum((lam > 0) & (r < PRIOR_DOMINATED))), **counts)


def one_fold(X, y, test) -> dict:
    """One record's fields: the default's preparation of the training rows, its stages' seconds and its spectrum."""
    import jax

    from kronvi import pipeline

    stamps = []
    t0 = time.perf_counter()

    def progress(step, total, metrics):
        stamps.append((time.perf_counter() - t0, metrics.get("stage")))

    fold = pipeline.prepare_fold(jax.random.key(0), X[~test], y[~test], progress=progress)
    total = time.perf_counter() - t0
    nystrom = type(fold.features).__name__ == "NystromFeatures"
    lam = np.asarray(fold.basis.eigenvalues, np.float64)
    return dict(
        n=int((~test).sum()), b=int(lam.size), feature_map="nystrom" if nystrom else "fourier",
        prior_scale=float(fold.prior_scale), noise_variance=float(fold.noise_variance), seconds=total,
        stages={k: round(v, 3) for k, v in stage_seconds(stamps, total).items()},
        **spectrum_counts(lam, float(fold.prior_scale), float(fold.noise_variance)),
    )  # fmt: skip


def render(records) -> str:
    lines = [
        "# The default's eigen-directions: is there a prior-dominated complement?",
        "",
        "Rendered by `python experiments/eigen_spectrum.py --out <records> --table <this file>` (commands in "
        "`experiments/README.md`). Per fold: the default recipe's b, its eigen-directions by $r = s^2\\lambda/\\sigma^2$ "
        "(the data's precision over the prior's at the evidence-optimal scale and noise; below "
        f"{PRIOR_DOMINATED:g} the posterior variance is within 1% of the prior's), the null space (zero eigenvalues: "
        "fewer rows than features), and the seconds of `prepare_fold`'s stages as its progress reports them "
        "(`eigen`: the eigendecomposition and the evidence's optimum after it).",
        "",
        "| dataset | fold | n | map, b | null | prior-dominated | "
        + " | ".join(f"r ≥ {t:g}" for t in THRESHOLDS)
        + " | gp s | statistics s | eigen s | total s |",
        "|---|---:|---:|---|---:|---:|" + "---:|" * len(THRESHOLDS) + "---:|---:|---:|---:|",
    ]
    for r in sorted(records, key=lambda r: (r["n"], r["dataset"], r["fold"])):
        st = r["stages"]
        cells = [f"{st.get(k, 0.0):.1f}" for k in ("gp", "statistics", "eigen")]
        lines.append(
            f"| {r['dataset']} | {r['fold']} | {r['n']} | {r['feature_map']}, {r['b']} | {r['null']} | "
            f"{r['prior_dominated']} | " + " | ".join(str(r[f"r>={t:g}"]) for t in THRESHOLDS)
            + " | " + " | ".join(cells) + f" | {r['seconds']:.1f} |"
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_cli.add_record_options(ap, datasets="kin40k,protein", folds=1)
    args = ap.parse_args(argv)
    if args.table:
        return study_cli.write_table(ap, args.out, args.table, render)
    names = study_cli.record_datasets(ap, args)

    def line(rec):
        return (
            f"[{rec['dataset']} fold {rec['fold']}] n {rec['n']}, {rec['feature_map']} b {rec['b']}: "
            f"{rec['prior_dominated']} prior-dominated, {rec['null']} null; stages {rec['stages']}, {rec['seconds']:.1f} s"
        )

    return study_cli.run_folds(args, names, lambda name, k, X, y, test: one_fold(X, y, test), line)


if __name__ == "__main__":
    study_cli.run(main)
