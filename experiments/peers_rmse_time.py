"""Test RMSE and NLPD against fit seconds: kronvi at each feature budget, BayesianRidge, a sparse variational GP
and an exact GP, side by side on the shared folds of the large regression sets (issue 49, items 4 and 5).

For each fold (the first `--folds` published folds, as `feature_budget.py`) of each dataset (fold-major: fold 0
of every dataset first, so a partial run covers every dataset):

- `kronvi b=<b>`: the default recipe with random Fourier features (`DirectConfig(feature_map="fourier")`, the
  default before Nyström features became it from 20,000 rows; b = 4000 features from 20,000 rows) end to end, then
  the same recipe at the other `--sizes` reusing that fold's GP step (`prepare_fold(gp=...)`); a budget's fit
  seconds are the GP step's seconds plus its own preparation and fit. RMSE and NLPD of `kronvi.predict` and
  `kronvi.log_density` (the fit's own predictive, in the targets' units).
- `kronvi default` (`--methods kronvi-default`): the library's default recipe as a user gets it
  (`kronvi.fit_direct` with `DirectConfig()`: Nyström features from 4,000 training rows, the GP step on
  `default_gp_points` rows, refined on `default_gp_refine_points` from 4,000 to 20,000), end to end on its own GP step; the record names the feature map, b and the GP
  step's rows (a rerun supersedes an earlier default's record: elevators' and bike's first were random
  Fourier features, the default below 20,000 rows then). Where it ran, the comparisons against the peers use it as the default.
- `BayesianRidge`: scikit-learn's `BayesianRidge()` on the default recipe's features (float64), the seconds
  of its fit only.
- `SVGP`: GPJax's sparse variational GP, 1024 inducing points (`benchmarks/bench_vs_peers.py`'s `run_svgp`:
  ARD RBF, the kernel and noise started at an exact GP's on 1,000 random rows, minibatch ELBO with Adam until
  a plateau or `--svgp-max-steps`, then the optimal q(u) in one full-batch natural step).
- `exact GP`: GPJax's exact GP on a random subset of `--exact-rows` (10,000) rows (`run_exact_gp`:
  hyperparameters by L-BFGS-B on `--exact-fit-rows` of them), only with `--methods` naming `exact-gp`.

Every result is appended to `--out` (JSONL) as soon as it exists; `--resume` skips the (dataset, fold,
method) records already there (kronvi then fits only the missing budgets, the default recipe only when its
record or BayesianRidge's is missing, every one on the GP step of the first it fits, whose seconds include it).
`--table` and `--plot` render whatever the file holds. Seconds are wall seconds on this machine with the load
average recorded beside each; they include XLA compilation.

Usage:
  python experiments/peers_rmse_time.py --data-dir ../shared/data/uci --datasets kin40k,protein,elevators,bike \
      --folds 3 --methods kronvi,bayesian-ridge,svgp --out experiments/results/peers_rmse_time.jsonl --resume
  python experiments/peers_rmse_time.py --data-dir ../shared/data/uci --datasets kin40k,protein,elevators,bike \
      --folds 3 --methods kronvi-default --out experiments/results/peers_rmse_time.jsonl --resume
  python experiments/peers_rmse_time.py --out experiments/results/peers_rmse_time.jsonl \
      --table experiments/results/peers_rmse_time.md --plot experiments/results/peers_rmse_time.png
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import study_cli

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
METHODS = ("kronvi", "kronvi-default", "bayesian-ridge", "svgp", "exact-gp")
DEFAULT = "kronvi default"  # the record of `kronvi-default`


def gaussian_nlpd(y, mean, var):
    """Mean negative log density of `y` under independent normals `N(mean, var)`."""
    y, mean, var = (np.asarray(a, np.float64) for a in (y, mean, var))
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def load_average() -> float:
    return os.getloadavg()[0]


def done_keys(path) -> set:
    """The `(dataset, fold, method)` of every record in the JSONL file at `path` (empty when there is none)."""
    return {(r["dataset"], r["fold"], r["method"]) for r in read_records(path)}


def read_records(path) -> list[dict]:
    p = pathlib.Path(path)
    if not p.exists():
        return []
    records = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    last = {}  # a rerun of a (dataset, fold, method) supersedes the earlier record (`superseded` lists them)
    for r in records:
        last[r["dataset"], r["fold"], r["method"]] = r
    return list(last.values())


def superseded(path) -> list[dict]:
    """The records of the JSONL file at `path` that a later record of the same (dataset, fold, method) replaced."""
    p = pathlib.Path(path)
    if not p.exists():
        return []
    records = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    kept = {id(r) for r in {(r["dataset"], r["fold"], r["method"]): r for r in records}.values()}
    return [r for r in records if id(r) not in kept]


def append(path, record) -> None:
    """One record as one line, written at once (a partial run stays usable)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def write_record(out, base, method, res, load0, **extra) -> None:
    """Appends one result (`base` names the dataset and fold) to `out` and prints it."""
    rec = dict(base, method=method, **extra, **res, load_before=load0, load_after=load_average())
    append(out, rec)
    print(f"  [{base['dataset']} fold {base['fold']}] {method}: RMSE {res['rmse']:.4f}, NLPD {res['nlpd']:.3f}, "
          f"{res['fit']:.1f} s (load {load0:.2f} -> {rec['load_after']:.2f})", flush=True)  # fmt: skip


def kronvi_budgets(default_b, sizes, done_budgets, need_default) -> list[int]:
    """The budgets `run_kronvi` fits, in order: the default `default_b` first when `need_default` (its record or
    the BayesianRidge on its features is missing), then each of `sizes` not in `done_budgets`."""
    rest = [b for b in dict.fromkeys(sizes) if b != default_b and b not in done_budgets]
    return [default_b] * need_default + rest


def run_kronvi(Xtr, ytr, Xte, yte, budgets):
    """Each budget in `budgets` (`DirectConfig(feature_map="fourier")` for its default b, else with
    `num_frequencies=b // 2`), every one on the GP step of the first; yields
    `(b, record, model)`. The first budget's seconds include the GP step; the others' add its seconds."""
    import jax

    import kronvi
    from kronvi.pipeline import DirectConfig, fit_prepared, prepare_fold

    n = len(Xtr)
    default_b = 2 * kronvi.pipeline.default_num_frequencies(n, "fourier")
    gp, gp_seconds = None, None
    for b in budgets:
        config = DirectConfig(feature_map="fourier", num_frequencies=None if b == default_b else b // 2)
        t0 = time.perf_counter()
        fold = prepare_fold(jax.random.key(0), Xtr, ytr, config, gp=gp)
        model, timings, _ = fit_prepared(fold, config)
        jax.block_until_ready(model.q_w.logits)
        own = time.perf_counter() - t0
        first = gp is None
        if first:
            gp, gp_seconds = (fold.hyper, fold.gp_info), timings.init_seconds
        pred = kronvi.pipeline.predict(model, Xte)
        try:
            ld, loose = np.asarray(kronvi.pipeline.log_density(model, Xte, yte), np.float64), 0
        except kronvi.DensityToleranceError as e:  # far-tail points: the best values, counted in the record
            ld, loose = np.asarray(e.log_density, np.float64), len(e.failed)
        yield b, dict(
            fit=own if first else own + gp_seconds, gp_seconds=gp_seconds, default=b == default_b,
            gp_points=int(gp[1].num_points),
            density_points_over_rtol=loose,
            rmse=float(np.sqrt(np.mean((np.asarray(pred.mean, np.float64) - yte) ** 2))), nlpd=float(-ld.mean()),
        ), model  # fmt: skip


def search_rows(gp_info, n: int) -> int | None:
    """The rows of the GP step's search where the default refined its optimum on more rows (`GPFitInfo.screened`
    is then the search's info); `None` where the search's rows are the step's."""
    import kronvi

    if int(gp_info.num_points) > min(kronvi.pipeline.default_gp_points(n), n) and gp_info.screened is not None:
        return int(gp_info.screened.num_points)
    return None


def run_default(X, y, test):
    """The library's default recipe on the training rows (`kronvi.fit_direct`'s stages with key 0, timed end to end,
    and its test scores: `study_cli.fit_and_score`); its record's fields as `run_kronvi`'s, with the feature map,
    b and the GP step's rows."""
    import jax

    import kronvi

    fold, model, fields = study_cli.fit_and_score(X, y, test, kronvi.DirectConfig(), jax.random.key(0))
    nystrom = isinstance(model.features, kronvi.inputs.NystromFeatures)
    return dict(
        fit=fields["prepare_seconds"] + fields["fit_seconds"], gp_seconds=fold.init_seconds,
        feature_map="nystrom" if nystrom else "fourier", b=int(model.q_w.logits.shape[0]),
        gp_points=int(fold.gp_info.num_points), gp_search_points=search_rows(fold.gp_info, len(y[~test])),
        density_points_over_rtol=fields["density_below_tolerance"],
        rmse=fields["rmse"], nlpd=fields["nlpd"],
    )  # fmt: skip


def parse(argv=None):
    ap = study_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="kin40k,protein,elevators,bike")
    ap.add_argument("--folds", type=int, default=3, help="the first K published folds")
    ap.add_argument("--methods", default="kronvi,bayesian-ridge,svgp", help=f"comma list of {METHODS}")
    ap.add_argument("--sizes", default="2000,4000,8000", help="kronvi's feature budgets b (even)")
    ap.add_argument("--svgp-max-steps", type=int, default=2000)
    ap.add_argument("--svgp-init-rows", type=int, default=1000, help="the SVGP's starting exact GP's rows (0: none)")
    ap.add_argument("--exact-rows", type=int, default=10_000, help="the exact GP's random training subset")
    ap.add_argument("--exact-fit-rows", type=int, default=3000, help="of which its hyperparameters see the first")
    ap.add_argument("--out", required=True, help="the JSONL results file (appended to)")
    ap.add_argument("--resume", action="store_true", help="skip the records already in --out")
    ap.add_argument("--table", default=None, help="render --out as a markdown table here (no runs)")
    ap.add_argument("--plot", default=None, help="render --out as a PNG figure here (no runs)")
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    if any(m not in METHODS for m in methods):
        ap.error(f"--methods must name {METHODS}, got {args.methods!r}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if any(s < 2 or s % 2 for s in sizes):
        ap.error(f"--sizes must be even numbers >= 2, got {args.sizes!r}")
    if args.folds < 1:
        ap.error(f"--folds must be >= 1, got {args.folds}")
    return args, methods, sizes


def main(argv=None):
    args, methods, sizes = parse(argv)
    if args.table or args.plot:
        records = read_records(args.out)
        if args.table:
            pathlib.Path(args.table).write_text(render(records, args.out))
        if args.plot:
            plot(records, args.plot)
        return 0
    import jax

    import kronvi

    sys.path.insert(0, str(BENCHMARKS))
    import bench_vs_peers as peers

    if "svgp" in methods or "exact-gp" in methods:
        missing = peers.gpjax_missing()
        if missing:
            print(f"SVGP and exact GP: {missing}", flush=True)
            methods = [m for m in methods if m not in ("svgp", "exact-gp")]
    done = done_keys(args.out) if args.resume else set()
    names = [d for d in args.datasets.split(",") if d]
    print(f"# peers_rmse_time: jax {jax.__version__}, {os.cpu_count()} cores, load {load_average():.2f}; "
          f"{names} x {args.folds} folds; methods {methods}", flush=True)  # fmt: skip
    data = {name: kronvi.load_uci(pathlib.Path(args.data_dir) / name) for name in names}
    for k in range(args.folds):
        for name in names:
            X, y, mask = (np.asarray(a) for a in data[name])
            test = mask[:, k].astype(bool)
            Xtr, ytr, Xte, yte = X[~test], y[~test].astype(np.float64), X[test], y[test].astype(np.float64)
            base = dict(dataset=name, fold=k, n=int(len(Xtr)), n_test=int(len(Xte)))
            record = functools.partial(write_record, args.out, base)

            default_b = 2 * kronvi.pipeline.default_num_frequencies(len(Xtr), "fourier")
            done_budgets = {int(m[9:]) for d, f, m in done if (d, f) == (name, k) and m.startswith("kronvi b=")}
            need_default = ("kronvi" in methods and default_b not in done_budgets) or (
                "bayesian-ridge" in methods and (name, k, "BayesianRidge") not in done
            )
            budgets = kronvi_budgets(default_b, sizes if "kronvi" in methods else [], done_budgets, need_default)
            if budgets:
                load0 = load_average()
                for b, res, model in run_kronvi(Xtr, ytr, Xte, yte, budgets):
                    if "kronvi" in methods and (name, k, f"kronvi b={b}") not in done:
                        record(f"kronvi b={b}", res, load0, b=b)
                    if res["default"] and "bayesian-ridge" in methods and (name, k, "BayesianRidge") not in done:
                        F, Ft = (np.asarray(kronvi.pipeline.fold_features(model, A), np.float64) for A in (Xtr, Xte))
                        load1 = load_average()
                        br = peers.run_bayesian_ridge(F, Ft, ytr, yte)
                        del F, Ft
                        record("BayesianRidge", br, load1, b=b)
                    load0 = load_average()
            if "kronvi-default" in methods and (name, k, DEFAULT) not in done:
                load0 = load_average()
                record(DEFAULT, run_default(X, y.astype(np.float64), test), load0)
            if "svgp" in methods and (name, k, "SVGP") not in done:
                load0 = load_average()
                res = peers.run_svgp(Xtr, ytr, Xte, yte, max_steps=args.svgp_max_steps, init_rows=args.svgp_init_rows, key=k,
                                     log=lambda m: print(f"  [{name} fold {k}] {m}", flush=True))  # noqa: B023  # fmt: skip
                record("SVGP", res, load0)
            if "exact-gp" in methods and (name, k, "exact GP") not in done:
                load0 = load_average()
                res = peers.run_exact_gp(Xtr, ytr, Xte, yte, max_rows=args.exact_rows, fit_rows=args.exact_fit_rows, key=k)
                record("exact GP", res, load0)
    return 0


def method_order(m: str):
    if m.startswith("kronvi b="):
        return (0, int(m.split("=")[1]))
    return (1, "") if m == DEFAULT else (2, m)


def common_folds(records) -> dict:
    """`{dataset: sorted folds on which every method run on that dataset has a record}`; the exact GP (a
    reference on a subset, often run on fewer folds) is left out of the intersection (`summary` averages it
    over its own folds among these)."""
    folds: dict = {}
    for r in records:
        folds.setdefault(r["dataset"], {}).setdefault(r["method"], set()).add(r["fold"])
    out = {}
    for d, ms in folds.items():
        rest = [f for m, f in ms.items() if m != "exact GP"]
        out[d] = sorted(set.intersection(*(rest or ms.values())))
    return out


def summary(records):
    """`{dataset: {method: (its folds, mean RMSE, mean NLPD, median seconds)}}` over each dataset's common folds."""
    common = common_folds(records)
    out: dict = {}
    for r in records:
        if r["fold"] in common[r["dataset"]]:
            out.setdefault(r["dataset"], {}).setdefault(r["method"], []).append(r)
    return {
        d: {
            m: (sorted({r["fold"] for r in rs}), statistics.mean(r["rmse"] for r in rs), statistics.mean(r["nlpd"] for r in rs),
                statistics.median(r["fit"] for r in rs))
            for m, rs in sorted(ms.items(), key=lambda kv: method_order(kv[0]))
        }
        for d, ms in out.items()
    }  # fmt: skip


def against_default(records, library=True):
    """`(dataset, peer, [(default record, peer record) per fold both ran])` for every peer of the default recipe:
    the library's default (`kronvi default`) where it ran on the fold, else (and with `library=False` always)
    the Fourier budget marked default."""
    by = {(r["dataset"], r["fold"], r["method"]): r for r in records}
    default = {(r["dataset"], r["fold"]): r for r in records if r.get("default")}
    if library:
        default.update({(r["dataset"], r["fold"]): r for r in records if r["method"] == DEFAULT})
    peers = sorted({r["method"] for r in records if not r["method"].startswith("kronvi")})
    for d in dict.fromkeys(r["dataset"] for r in records):
        for peer in peers:
            pairs = [(default[d, f], by[d, f, peer]) for (d_, f) in default if d_ == d and (d, f, peer) in by]
            if pairs:
                yield d, peer, pairs


def gp_rows(record) -> str:
    """The GP step's rows of a default's record: `2000`, or `1000 refined on 2000`."""
    search = record.get("gp_search_points")
    return f"{record['gp_points']}" if search is None else f"{search} refined on {record['gp_points']}"


def render(records, path) -> str:
    lines = [
        "# Test RMSE and NLPD against fit seconds: kronvi, BayesianRidge, SVGP, exact GP",
        "",
        f"Rendered from `{path}` by `python experiments/peers_rmse_time.py --out {path} --table ...` "
        "(the commands are in `experiments/README.md`). RMSE and NLPD in the targets' units; the NLPD is the "
        "mean negative log predictive density of the test targets (a new target's variance, the noise "
        "included). Seconds: wall seconds of the fit on this machine (2 cores shared with other jobs; "
        "the load averages are in every record), XLA compilation included.",
        "",
        "Per dataset, over the folds every method but the exact GP ran there (listed; the exact GP over those of "
        "them it ran): mean test RMSE, mean NLPD, median fit seconds. The figure plots these (every other fold is "
        "a faint dot).",
        "",
        "| dataset | folds | method | RMSE | NLPD | fit seconds |",
        "|---|---|---|---:|---:|---:|",
    ]
    default = {(r["dataset"], r["method"]) for r in records if r.get("default")}
    chosen = {(r["dataset"], r["method"]): f" ({r['feature_map']}, b = {r['b']}, GP on {gp_rows(r)} rows)"
              for r in records if r["method"] == DEFAULT}  # fmt: skip
    for d, ms in summary(records).items():
        for m, (fs, rmse, nlpd, sec) in ms.items():
            label = m + " (Fourier features' default b)" * ((d, m) in default) + chosen.get((d, m), "")
            lines.append(f"| {d} | {', '.join(map(str, fs))} | {label} | {rmse:.4f} | {nlpd:.3f} | {sec:.1f} |")
    lines += ["", "Every fold:", "", "| dataset | fold | method | RMSE | NLPD | fit seconds | load before / after |",
              "|---|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for r in sorted(records, key=lambda r: (r["dataset"], r["fold"], method_order(r["method"]))):
        lines.append(f"| {r['dataset']} | {r['fold']} | {r['method']} | {r['rmse']:.4f} | {r['nlpd']:.3f} | "
                     f"{r['fit']:.1f} | {r['load_before']:.2f} / {r['load_after']:.2f} |")  # fmt: skip
    lines += ["", "The default recipe against each peer, on the folds both ran: mean per-fold RMSE ratio (kronvi / "
              "peer), mean NLPD difference (kronvi - peer; negative: kronvi better) and the median fit-seconds ratio "
              "(issue 49's bar: RMSE at most 0.8x the SVGP's, NLPD no worse).", "",
              "| dataset | peer | folds | RMSE ratio | NLPD difference | seconds ratio |", "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    lines += _ratio_rows(against_default(records))
    if any(r["method"] == DEFAULT for r in records):
        lines += ["", "The same for the Fourier features' default b (the default recipe before Nyström features from 20,000 "
                  "rows), on the folds both ran:", "", "| dataset | peer | folds | RMSE ratio | NLPD difference | "
                  "seconds ratio |", "|---|---|---:|---:|---:|---:|"]  # fmt: skip
        lines += _ratio_rows(against_default(records, library=False))
    svgp = [r for r in records if r["method"] == "SVGP"]
    if svgp:
        lines += ["", "SVGP convergence: Adam steps, the mean per-row ELBO of each chunk of minibatch steps "
                  "(standardized targets; q(u) started at its optimum where the run says so), the rows of the exact GP "
                  "whose kernel and noise the SVGP started at (0: lengthscales 1, variance 1, noise sd 0.5), and the "
                  "full-batch per-row ELBO before and after the final optimal q(u) step.", "",
                  "| dataset | fold | steps (chunk) | start subset | ELBO per chunk | full-batch ELBO before / after |",
                  "|---|---:|---:|---:|---|---|"]  # fmt: skip
        for r in sorted(svgp, key=lambda r: (r["dataset"], r["fold"])):
            trace = ", ".join(f"{-v:.4f}" for v in r["trace"])
            lines.append(f"| {r['dataset']} | {r['fold']} | {r['steps']} ({r.get('chunk_steps', 500)}) | "
                         f"{r.get('init_rows', 0)} | {trace} | "
                         f"{r['full_elbo_before']:.4f} / {r['full_elbo_after']:.4f} |")  # fmt: skip
    old = superseded(path)
    if old:
        lines += ["", "Superseded records (kept in the JSONL; a later run of the same dataset, fold and method "
                  "replaced them above):", "", "| dataset | fold | method | RMSE | NLPD | fit seconds | steps | "
                  "q(u) started optimal | ELBO per chunk |", "|---|---:|---|---:|---:|---:|---:|---|---|"]  # fmt: skip
        for r in old:
            trace = ", ".join(f"{-v:.4f}" for v in r.get("trace", []))
            lines.append(f"| {r['dataset']} | {r['fold']} | {r['method']} | {r['rmse']:.4f} | {r['nlpd']:.3f} | "
                         f"{r['fit']:.1f} | {r.get('steps', '')} | {r.get('start_optimal', False)} | {trace} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _ratio_rows(comparisons) -> list[str]:
    return [f"| {d} | {peer} | {len(pairs)} | {statistics.mean(a['rmse'] / b['rmse'] for a, b in pairs):.3f} | "
            f"{statistics.mean(a['nlpd'] - b['nlpd'] for a, b in pairs):+.3f} | "
            f"{statistics.median(a['fit'] / b['fit'] for a, b in pairs):.2f} |" for d, peer, pairs in comparisons]  # fmt: skip


def plot(records, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["dataset"] for r in records))
    common = common_folds(records)
    fig, axes = plt.subplots(2, len(names), figsize=(4 * len(names), 7), squeeze=False)
    styles = {DEFAULT: ("*", "navy"), "BayesianRidge": ("s", "tab:orange"), "SVGP": ("^", "tab:green"), "exact GP": ("D", "tab:red")}
    for j, name in enumerate(names):
        every = [r for r in records if r["dataset"] == name]
        rs = [r for r in every if r["fold"] in common[name]]
        for i, metric in enumerate(("rmse", "nlpd")):
            ax = axes[i, j]
            kr = sorted({r["method"] for r in rs if r["method"].startswith("kronvi b=")}, key=method_order)
            pts = [(statistics.median(r["fit"] for r in rs if r["method"] == m),
                    statistics.mean(r[metric] for r in rs if r["method"] == m)) for m in kr]  # fmt: skip
            if pts:
                ax.plot(*zip(*pts, strict=True), "o-", color="tab:blue", label="kronvi b=" + "/".join(m[9:] for m in kr))
                for m, (x, yv) in zip(kr, pts, strict=True):
                    is_default = any(r.get("default") for r in rs if r["method"] == m)
                    ax.annotate(m[9:] + " (Fourier default)" * is_default, (x, yv), textcoords="offset points",
                                xytext=(4, 4), fontsize=7)  # fmt: skip
            for m, (marker, color) in styles.items():
                sel = [r for r in rs if r["method"] == m]
                if sel:
                    ax.plot(statistics.median(r["fit"] for r in sel), statistics.mean(r[metric] for r in sel),
                            marker, color=color, label=m)  # fmt: skip
            for r in every:  # every fold, faint
                color = "tab:blue" if r["method"].startswith("kronvi") else styles.get(r["method"], ("", "k"))[1]
                ax.plot(r["fit"], r[metric], ".", color=color, alpha=0.3)
            ax.set_xscale("log")
            ax.set_xlabel("fit seconds (log scale)")
            ax.set_ylabel(f"test {metric.upper()}")
            ax.set_title(f"{name} (markers: fold{'s' * (len(common[name]) > 1)} {', '.join(map(str, common[name]))})")
    handles = {}
    for ax in axes.flat:  # one legend for the figure: every method that appears in any panel
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label.split(" b=")[0], h)
    fig.legend(handles.values(), [k + " (Fourier features at each b; labels: b)" * (k == "kronvi") for k in handles],
               loc="lower center", ncol=len(handles), fontsize=8)  # fmt: skip
    fig.suptitle("Mean over the folds every method ran (markers; the exact GP over those of them it ran) and every "
                 "fold (dots); lower left is better")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    study_cli.run(main)
