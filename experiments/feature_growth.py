"""A feature budget chosen by the data and the machine (issue 49, item 1): `DirectConfig(feature_budget=...)` beside
the default's fixed b, on the same folds.

For each of the first `--folds` published folds of each dataset, with the same key (the same GP step):
- `default`: the default recipe (b = 2000 below 20,000 training rows, 4000 above);
- `grown`: b doubles from 1000 while the exact log evidence rises by at least `--gain` nats per training row and
  the next doubling is predicted to end within `--budget` seconds of feature work (random Fourier features);
- `grown-nystrom`: the same with Nyström features (`feature_map="nystrom"`).
Per variant: the b kept and every b tried (`DirectInfo.feature_steps`: b, log evidence, seconds), the test RMSE,
also over the training targets' sd (issue 49's bars: kin40k <= 0.105, protein <= 0.58), the NLPD (the exact
predictive density of every test row), and the seconds of `prepare_fold` and `fit_prepared`. Every record holds
the 1-minute load average.

Usage:
  python experiments/feature_growth.py --data-dir ../shared/data/uci --datasets kin40k,protein,bike,elevators \\
      --folds 3 --budget 80 --out experiments/results/feature_growth.jsonl --resume
  python experiments/feature_growth.py --out experiments/results/feature_growth.jsonl \\
      --table experiments/results/feature_growth.md
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import study_cli  # noqa: E402

from kronvi.pipeline import FEATURE_GAIN, DirectConfig  # noqa: E402

VARIANTS = ("default", "grown", "grown-nystrom")


def config_of(variant: str, budget: float, gain: float, num_features: int | None) -> DirectConfig:
    """The `DirectConfig` of a variant (`--num-features`: the fixed b of `default`, the first b of the others)."""
    m = None if num_features is None else num_features // 2
    if variant == "default":  # the fixed b of random Fourier features, the default when this study ran
        return DirectConfig(num_frequencies=m, feature_map="fourier")
    feature_map = "nystrom" if variant == "grown-nystrom" else "fourier"
    return DirectConfig(num_frequencies=m, feature_map=feature_map, feature_budget=budget, feature_gain=gain)


def run_variant(X, y, test, config, key):
    """One variant on one fold: the record's measured fields."""
    fold, model, fields = study_cli.fit_and_score(X, y, test, config, key)
    steps = [dict(b=s.num_features, log_evidence=s.log_evidence, seconds=s.seconds) for s in fold.feature_steps]
    return dict(
        fields, rmse_std=fields["rmse"] / float(np.std(y[~test])), b=int(model.prior_w.values.shape[0]), steps=steps
    )


def main(argv=None):
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_cli.add_fold_options(ap, "variants", VARIANTS, "(dataset, fold, variant, budget, gain)")
    ap.add_argument("--budget", type=float, default=80.0, help="seconds of feature work a fold (feature_budget)")
    ap.add_argument("--gain", type=float, default=FEATURE_GAIN, help="nats per training row a doubling must add")
    args = ap.parse_args(argv)
    if args.table:
        return study_cli.write_table(ap, pathlib.Path(args.out), args.table, render)
    out, names, variants = study_cli.fold_options(ap, args, "variants", VARIANTS)
    errors = study_cli.option_errors(args, {"budget": (0.0, None), "gain": (0.0, None)})
    if args.budget == 0:
        errors.append("--budget must be > 0, got 0.0")
    if errors:
        return study_cli.report(ap.prog, errors)
    print(f"# feature growth: jax {jax.__version__}, {os.cpu_count()} cores; {names} x {args.folds} folds x "
          f"{variants}; budget {args.budget:g} s, gain {args.gain:g}", flush=True)  # fmt: skip
    t_start = time.perf_counter()
    for name, k, X, y, test in study_cli.published_folds(args.data_dir, names, args.folds):
        for variant in variants:
            done = {
                (r["dataset"], r["fold"], r["variant"], r["budget"], r["gain"]) for r in study_cli.read_jsonl(out)
            }
            budget = None if variant == "default" else args.budget
            gain = None if variant == "default" else args.gain
            if (name, k, variant, budget, gain) in done:
                continue
            rec = dict(
                dataset=name, fold=k, variant=variant, budget=budget, gain=gain, n=int((~test).sum()),
                d=int(X.shape[1]),
            )  # fmt: skip
            config = config_of(variant, args.budget, args.gain, args.num_features)
            rec.update(run_variant(X, y, test, config, jax.random.fold_in(jax.random.key(0), k)))
            rec["load"] = os.getloadavg()[0]
            study_cli.append_jsonl(out, rec)
            tried = ", ".join(f"{s['b']}: {s['log_evidence'] / rec['n']:.4f}/row {s['seconds']:.1f} s" for s in rec["steps"])
            print(f"[{name} fold {k}] {variant} b={rec['b']}: RMSE {rec['rmse']:.4f} ({rec['rmse_std']:.4f} sd) NLPD "
                  f"{rec['nlpd']:.3f}; {rec['prepare_seconds']:.1f} + {rec['fit_seconds']:.1f} s; load "
                  f"{rec['load']:.2f}; elapsed {time.perf_counter() - t_start:.0f} s" + (f"; tried {tried}" if tried else ""),
                  flush=True)  # fmt: skip
    return 0


def render(records) -> str:
    lines = [
        "# A feature budget chosen by the data and the machine",
        "",
        "Rendered from `experiments/results/feature_growth.jsonl` by `python experiments/feature_growth.py --out "
        "experiments/results/feature_growth.jsonl --table experiments/results/feature_growth.md` (the run's command "
        "is in `experiments/README.md`). Per fold, the same key (the same GP step): the default recipe's fixed b, and "
        "b grown from 1000 by `DirectConfig(feature_budget=budget, feature_gain=gain)` with random Fourier or "
        "Nyström features. RMSE and NLPD in the targets' units, RMSE/sd over the training targets' sd (NLPD: the "
        "exact predictive density of every test row); seconds: `prepare_fold` (the GP step included) + "
        "`fit_prepared` on this machine's 2 cores (load in the records); tried: each b, its log evidence per "
        "training row and its seconds; feature s: their sum (what the budget bounds).",
        "",
        "| dataset | fold | n | variant | budget s | b | RMSE | RMSE/sd | NLPD | seconds | load | feature s | tried |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(records, key=lambda r: (r["dataset"], r["fold"], VARIANTS.index(r["variant"]))):
        tried = "; ".join(f"{s['b']}: {s['log_evidence'] / r['n']:.4f}, {s['seconds']:.1f} s" for s in r["steps"])
        lines.append(
            f"| {r['dataset']} | {r['fold']} | {r['n']} | {r['variant']} | "
            f"{'' if r['budget'] is None else format(r['budget'], 'g')} | {r['b']} | {r['rmse']:.4f} | "
            f"{r['rmse_std']:.4f} | {r['nlpd']:.3f} | {r['prepare_seconds'] + r['fit_seconds']:.1f} | "
            f"{r['load']:.1f} | {sum(s['seconds'] for s in r['steps']) if r['steps'] else 0:.1f} | {tried} |"
        )
    lines += [
        "",
        "Per dataset and variant, over its folds: mean RMSE/sd, mean NLPD, the mean per-fold RMSE ratio and NLPD "
        "difference against `default` on the same fold, and the median seconds.",
        "",
        "| dataset | variant | folds | mean b | RMSE/sd | NLPD | RMSE ratio | NLPD difference | median seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {(r["dataset"], r["fold"]): r for r in records if r["variant"] == "default"}
    groups = sorted({(r["dataset"], r["variant"], r["budget"], r["gain"]) for r in records},
                    key=lambda g: (g[0], VARIANTS.index(g[1]), g[2] or 0))  # fmt: skip
    for name, variant, budget, gain in groups:
        rs = [r for r in records if (r["dataset"], r["variant"], r["budget"], r["gain"]) == (name, variant, budget, gain)]
        paired = [(r, base[(name, r["fold"])]) for r in rs if (name, r["fold"]) in base]
        ratio = f"{statistics.mean(r['rmse'] / b['rmse'] for r, b in paired):.3f}" if paired else "—"
        diff = f"{statistics.mean(r['nlpd'] - b['nlpd'] for r, b in paired):+.3f}" if paired else "—"
        label = variant if budget is None else f"{variant} ({budget:g} s, gain {gain:g})"
        lines.append(
            f"| {name} | {label} | {len(rs)} | {statistics.mean(r['b'] for r in rs):.0f} | "
            f"{statistics.mean(r['rmse_std'] for r in rs):.4f} | {statistics.mean(r['nlpd'] for r in rs):.3f} | "
            f"{ratio} | {diff} | {statistics.median(r['prepare_seconds'] + r['fit_seconds'] for r in rs):.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    study_cli.run(main)
