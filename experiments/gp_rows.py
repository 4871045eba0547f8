"""The GP step's rows: the default recipe with its kernel hyperparameters fitted on P training rows (issue 49,
item 2; `docs/decisions/gp-step.md#the-gp-steps-rows`).

For each of the first `--folds` published folds of each dataset and each P in `--points`, fits
`kronvi.fit_direct(key, X, y, DirectConfig(gp=GPOptions(points=P)))` with `experiments/uci.py`'s key of the fold
(so P = `kronvi.pipeline.default_gp_points` of the rows is that study's fit) and records the test RMSE, the RMSE
over the sd of the training targets, the NLPD (`model.log_density` of every test row), the GP step's seconds
(`DirectTimings.init_seconds`, the standardizing included), the whole fit's seconds, and the chosen start's
lengthscales and log marginal likelihood on the GP step's rows. Every record is appended to `--out` as soon as
it exists; a (dataset, fold, P) already there is skipped.

Usage:
  python experiments/gp_rows.py --data-dir ../shared/data/uci --datasets protein,kin40k --folds 1 \\
      --points 1000,2000,4000 --out experiments/results/gp_rows.jsonl
  python experiments/gp_rows.py --out experiments/results/gp_rows.jsonl --table experiments/results/gp_rows.md
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import study_cli  # noqa: E402
import uci  # noqa: E402  (experiments/uci.py: the study's folds and keys)

import kronvi  # noqa: E402


def fit_points(name, k, X, y, test, points):
    """One record: the default recipe on fold `k`'s training rows with the GP step on at most `points` rows
    (`study_cli.fit_and_score`, which scores the test rows as `kronvi fit` does)."""
    key = jax.random.fold_in(uci.dataset_key(name, 0), k)
    config = kronvi.DirectConfig(gp=kronvi.GPOptions(points=points))
    fold, model, fields = study_cli.fit_and_score(X, y, test, config, key)
    gp, chosen = fold.gp_info, int(fold.gp_info.chosen)
    return dict(
        dataset=name, fold=k, points=points, gp_rows=int(gp.num_points), n=int((~test).sum()),
        feature_map="nystrom" if isinstance(model.features, kronvi.inputs.NystromFeatures) else "fourier",
        b=int(model.q_w.logits.shape[0]), rmse=fields["rmse"],
        rmse_over_sd=fields["rmse"] / float(np.std(y[~test])), nlpd=fields["nlpd"],
        gp_seconds=fold.init_seconds, seconds=fields["prepare_seconds"] + fields["fit_seconds"],
        lengthscales=[round(float(v), 4) for v in np.asarray(gp.starts.lengthscales[chosen])],
        lml_per_row=float(gp.log_marginal_likelihoods[chosen]) / int(gp.num_points),
    )  # fmt: skip


def render(records) -> str:
    lines = [
        "# The GP step's rows",
        "",
        "Rendered by `python experiments/gp_rows.py --out <records> --table <this file>` (commands in "
        "`experiments/README.md`). The default recipe with `GPOptions(points=P)`, `experiments/uci.py`'s key per "
        "fold; RMSE and NLPD in the targets' units, RMSE/sd over the training targets' sd; GP s: the GP step's "
        "seconds (standardizing included); seconds: the whole `fit_direct`; LML/row: the chosen start's log "
        "marginal likelihood over its rows.",
        "",
        "| dataset | fold | P | rows | map, b | RMSE | RMSE/sd | NLPD | GP s | seconds | LML/row | lengthscales |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(records, key=lambda r: (r["dataset"], r["fold"], r["points"])):
        lines.append(
            f"| {r['dataset']} | {r['fold']} | {r['points']} | {r['gp_rows']} | {r['feature_map']}, {r['b']} | "
            f"{r['rmse']:.4f} | {r['rmse_over_sd']:.4f} | {r['nlpd']:.3f} | {r['gp_seconds']:.1f} | "
            f"{r['seconds']:.1f} | {r['lml_per_row']:.4f} | {', '.join(f'{v:.3g}' for v in r['lengthscales'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="protein,kin40k")
    ap.add_argument("--folds", type=int, default=1, help="the first K published folds")
    ap.add_argument("--points", default="1000,2000,4000", help="comma list of the GP step's rows P (>= 2)")
    ap.add_argument("--out", required=True, help="JSON-lines records, appended")
    ap.add_argument("--table", default=None, help="render the markdown table from --out and stop")
    args = ap.parse_args(argv)
    if args.table:
        return study_cli.write_table(ap, args.out, args.table, render)
    try:
        points = [int(p) for p in args.points.split(",") if p]
    except ValueError:
        ap.error(f"--points must be a comma list of integers >= 2, got {args.points!r}")
    if not points or min(points) < 2:
        ap.error(f"--points must be a comma list of integers >= 2, got {args.points!r}")
    if args.folds < 1:
        ap.error(f"--folds must be >= 1, got {args.folds}")
    names = study_cli.dataset_names(ap, args.data_dir, args.datasets)
    done = {(r["dataset"], r["fold"], r["points"]) for r in study_cli.read_jsonl(args.out)}
    for name, k, X, y, test in study_cli.published_folds(args.data_dir, names, args.folds):
        for p in points:
            if (name, k, p) in done:
                continue
            rec = fit_points(name, k, X, y, test, p)
            study_cli.append_jsonl(args.out, rec)
            print(f"[{name} fold {k}] P={p} ({rec['gp_rows']} rows): RMSE/sd {rec['rmse_over_sd']:.4f}, NLPD "
                  f"{rec['nlpd']:.3f}, GP {rec['gp_seconds']:.1f} s of {rec['seconds']:.1f} s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    study_cli.run(main)
