"""Command line: `kronvi fit` (or `python -m kronvi`) runs K-fold cross-validation of DIRECT
mean-field regression with random Fourier features.

With no arguments it uses the yacht data set shipped inside the package with its 10 published folds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import jax
import numpy as np

from . import __version__
from ._base.cache import enable_compilation_cache
from ._base.files import check_output_path, write_atomic
from ._base.progress import StatusLine, format_eta
from ._inputs.data import fold_indices, load_csv, load_demo, load_uci
from .pipeline import BASES, DirectConfig, parse_noise_cv, resolve_config, run_fold, summarize

MAX_SEED = 2**32 - 1  # as NumPy's and scikit-learn's integer seeds


def _fold_status(done: int, total: int, start: float, note: str = "") -> str:
    """`[###---] 3/10 folds  12.3s elapsed  eta 28.7s  <note>` (`eta ?` before the first fold ends)."""
    width = 30
    filled = int(width * done / max(total, 1))
    elapsed = time.perf_counter() - start
    bar = "#" * filled + "-" * (width - filled)
    return f"[{bar}] {done}/{total} folds  {elapsed:6.1f}s elapsed  {format_eta(elapsed, done, total)}  {note}".rstrip()


class _Parser(argparse.ArgumentParser):
    """Errors are one line, `<prog>: error: <message>`, exit status 2 (argparse's own add the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` ends each option's line with `(default: ...)`; options whose default is `None` or a flag's
    `False` say in their own words what happens without them."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _parsers():
    """The `kronvi` parser and its `fit` subparser."""
    p = _Parser(prog="kronvi", description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--version", action="version", version=f"kronvi {__version__}")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser(
        "fit",
        help="cross-validate DIRECT regression (default command)",
        description=__doc__,
        formatter_class=_HelpFormatter,
    )
    f.add_argument(
        "source",
        nargs="?",
        help="a CSV file (last column = target) or a folder with "
        "data.csv.gz and test_mask.csv.gz; default: the shipped yacht data",
    )
    f.add_argument("--folds", type=int, default=10, help="folds for a CSV without a mask")
    f.add_argument("--num-features", type=int, default=2000, help="b, random Fourier features (even)")
    f.add_argument("--levels", type=int, default=15, help="weight grid levels (15 = 4 bits)")
    f.add_argument(
        "--method",
        default="cavi",
        choices=["cavi", "lbfgs", "optax-lbfgs"],
        help="how the weights' posterior is fitted (kronvi.fit_regression)",
    )
    f.add_argument(
        "--max-folds", type=int, default=None, help="run only the first K folds (default: every fold)"
    )
    f.add_argument(
        "--noise-recentres",
        type=int,
        default=0,
        help="refit up to this many times with the noise grid recentred on E[sigma^2] while the "
        "noise posterior piles up on an end of its grid (default 0: the paper's fixed grid)",
    )
    f.add_argument(
        "--basis",
        choices=BASES,
        default=DirectConfig().basis,
        help="'eigen': weights in the eigenbasis of Phi^T Phi (accurate); 'compact': the eigen fit kept as its "
        "mean, the directions the data determine and one shared variance (smaller, faster to predict); "
        "'features': the paper's sparse 4-bit recipe on the random Fourier features "
        "(kronvi.pipeline.DirectConfig.basis)",
    )
    f.add_argument(
        "--noise-cv",
        default=None,
        help="--basis features only: noise grids s2 x [1/span, span] to choose from per fold by inner 5-fold "
        "cross-validation on the training rows (1 = noise fixed at the GP estimate s2); 'none' = the paper's "
        "single grid, span 10; default 10,3,1",
    )
    f.add_argument("--seed", type=int, default=0, help="random seed of the features and of a CSV's folds")
    f.add_argument(
        "--json",
        metavar="PATH",
        help="write per-fold results and the summary to this JSON file (checked before any compute, "
        "written atomically; NaN/inf values are written as null); an existing file is an error unless "
        "--force (default: no file)",
    )
    f.add_argument("--force", action="store_true", help="let --json overwrite an existing file")
    f.add_argument(
        "--no-compilation-cache",
        action="store_true",
        help="do not keep compiled programs on disk (default: JAX's persistent cache in "
        "$JAX_COMPILATION_CACHE_DIR or ~/.cache/kronvi/jax/<user>-<host>; kronvi.enable_compilation_cache)",
    )
    f.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p, f


def _check_args(parser, args):
    """One-line argparse errors (exit code 2) for bad option values, before any data is read."""
    if args.folds < 2:
        parser.error(f"--folds must be >= 2, got {args.folds}")
    if args.num_features < 2 or args.num_features % 2:
        parser.error(
            f"--num-features must be an even number >= 2 (cos and sin pairs), got {args.num_features}"
        )
    if args.levels < 2:
        parser.error(f"--levels must be >= 2, got {args.levels}")
    if args.max_folds is not None and args.max_folds < 1:
        parser.error(f"--max-folds must be >= 1, got {args.max_folds}")
    if args.noise_recentres < 0:
        parser.error(f"--noise-recentres must be >= 0, got {args.noise_recentres}")
    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed must be an integer in [0, {MAX_SEED}], got {args.seed}")
    if args.noise_cv is not None:
        try:
            args.noise_cv = parse_noise_cv(args.noise_cv)
        except ValueError as err:
            parser.error(str(err))
        if args.noise_cv and args.basis != "features":
            parser.error("--noise-cv applies to --basis features only")


def _input_files(source) -> list[str]:
    if source is None:
        return []
    if os.path.isdir(source):
        return [os.path.join(source, "data.csv.gz"), os.path.join(source, "test_mask.csv.gz")]
    return [source]


def _finite_or_none(x):
    """`x` with every non-finite float replaced by `None` (JSON has no NaN or inf)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_or_none(v) for v in x]
    return x


def _write_json(path: str, obj):
    """Writes strict JSON atomically (`kronvi.write_atomic`)."""
    write_atomic(path, json.dumps(_finite_or_none(obj), indent=1, allow_nan=False) + "\n")


def main(argv=None):
    """Runs `kronvi fit`. Errors in the user's input print `kronvi: error: <message>` and return 2
    (`--debug`: the traceback). Ctrl-C prints `kronvi: interrupted` and returns 130; run as the program
    (`argv` None) it then exits at once, without tearing down the interpreter under XLA's threads."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("fit", "-h", "--help", "--version"):
        argv = ["fit"] + argv
    parser, fit_parser = _parsers()
    args = parser.parse_args(argv)
    _check_args(fit_parser, args)
    try:
        return _fit(args)
    except (ValueError, TypeError, OSError) as err:
        if args.debug:
            raise
        sys.stderr.write(f"kronvi: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("\nkronvi: interrupted\n")
        if program:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        return 130


def _settings(args, config, num_folds: int, folds_run: int) -> dict:
    """What a `--json` record needs to be reproduced: the data, the options and the resolved config."""
    return {
        "source": args.source if args.source is not None else "yacht (shipped)",
        "source_path": None if args.source is None else os.path.abspath(args.source),
        "source_kind": (
            "shipped" if args.source is None else "folder" if os.path.isdir(args.source) else "csv"
        ),
        "basis": args.basis,
        "b": args.num_features,
        "levels": args.levels,
        "method": args.method,
        "seed": args.seed,
        "folds": num_folds,
        "folds_run": folds_run,
        "max_folds": args.max_folds,
        "noise_cv": None if args.noise_cv is None else list(args.noise_cv),
        "noise_recentres": args.noise_recentres,
        "config": json.loads(json.dumps(resolve_config(config)._asdict())),
        "kronvi_version": __version__,
    }


def _fit(args):
    if not args.no_compilation_cache:
        enable_compilation_cache()
    if args.json is not None:
        check_output_path(
            args.json,
            option="--json",
            inputs=_input_files(args.source),
            overwrite=args.force,
            exists_hint="pass --force to overwrite it",
        )
    if args.source is None:
        X, y, mask = load_demo()
        name = "yacht (shipped)"
    elif not os.path.exists(args.source):
        raise FileNotFoundError(f"`source` {args.source!r}: no such file or folder")
    elif not os.path.isdir(args.source):  # a CSV file, whatever its name (.csv, .data, .gz, ...)
        X, y = load_csv(args.source)
        if args.folds > len(y):
            raise ValueError(f"--folds {args.folds} is more than the {len(y)} rows of {args.source!r}")
        rng = np.random.default_rng(args.seed)
        ids = rng.permutation(len(y)) % args.folds
        mask = np.eye(args.folds, dtype=int)[ids]
        name = args.source
    else:
        X, y, mask = load_uci(args.source)
        name = args.source
    folds = fold_indices(mask)
    K = mask.shape[1] if args.max_folds is None else min(args.max_folds, mask.shape[1])
    config = DirectConfig(
        basis=args.basis,
        noise_cv=args.noise_cv,
        num_frequencies=args.num_features // 2,
        levels=args.levels,
        method=args.method,
        max_noise_recentres=args.noise_recentres,
    )
    print(
        f"DIRECT mean-field regression on {name}: n={len(y)}, d={X.shape[1]}, b={args.num_features}, "
        f"{args.levels}-level grid, basis={args.basis}, method={args.method}, {K} folds, "
        f"jax on {jax.devices()[0].platform}"
    )
    header = (
        f"{'fold':>4} {'n_train':>7} {'RMSE':>9} {'NLPD':>8} {'sparsity%':>9} {'init s':>7} "
        f"{'stats s':>7} {'cv s':>6} {'span':>5} {'fit s':>7} {'iters':>5}"
    )
    results, lines = [], []
    start = time.perf_counter()
    key = jax.random.key(args.seed)
    status = StatusLine()  # redrawn in place on a terminal; plain lines, now and then, in a log file
    status.show(_fold_status(0, K, start))
    try:
        for k in range(K):
            tr, te = folds != k, folds == k
            res = run_fold(jax.random.fold_in(key, k), X[tr], y[tr], X[te], y[te], config).result
            results.append(res)
            lines.append(
                f"{k:>4} {int(tr.sum()):>7} {res.rmse:>9.4f} {res.nlpd:>8.3f} {res.sparsity_pct:>9.1f} "
                f"{res.init_seconds:>7.2f} {res.stats_seconds:>7.2f} {res.select_seconds:>6.2f} "
                f"{res.noise_span:>5g} {res.fit_seconds:>7.2f} "
                f"{res.num_iter:>5}"
            )
            status.show(_fold_status(k + 1, K, start, f"fold {k}: RMSE {res.rmse:.3f}"), final=k + 1 == K)
    finally:
        status.close()
    s = summarize(results)
    print(header)
    print("\n".join(lines))
    print(
        f"mean RMSE {s['rmse_mean']:.4f} +- {s['rmse_sd']:.4f} | mean NLPD {s['nlpd_mean']:.3f} "
        f"+- {s['nlpd_sd']:.3f} | sparsity {s['sparsity_pct_mean']:.1f}% | seconds per fold: init "
        f"{s['init_seconds_mean']:.2f}, stats {s['stats_seconds_mean']:.2f}, noise cv "
        f"{s['select_seconds_mean']:.2f}, fit {s['fit_seconds_mean']:.2f}"
        f" | total {time.perf_counter() - start:.1f}s"
    )
    if args.json is not None:
        settings = _settings(args, config, mask.shape[1], K)
        _write_json(args.json, {"settings": settings, "folds": [r._asdict() for r in results], "summary": s})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
