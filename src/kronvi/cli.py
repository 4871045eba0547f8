"""Command line: `kronvi fit` (or `python -m kronvi`) runs K-fold cross-validation of DIRECT
mean-field regression with random Fourier features.

With no arguments it uses the yacht data set shipped inside the package with its 10 published folds.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import signal
import sys
import threading
import time

import jax
import numpy as np

from . import __version__
from ._base.cache import enable_compilation_cache
from ._base.checks import check_positive_number
from ._base.files import check_output_path, write_atomic
from ._base.memory import check_memory, regression_fit_bytes
from ._base.progress import StatusLine, format_eta
from ._inputs.data import csv_table, fold_indices, load_demo, load_uci
from .cv import parse_noise_cv, run_fold, summarize
from .pipeline import (
    BASES,
    FEATURE_GAIN,
    FEATURE_MAP_CHOICES,
    KERNEL_CHOICES,
    RECIPES,
    DirectConfig,
    Features,
    default_feature_map,
    fit_direct,
    num_fit_features,
    resolve_config,
)
from .quantize import save_model

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
    f.add_argument(
        "--folds",
        type=int,
        default=None,
        help="folds for a CSV file (default 10); a folder's test_mask.csv.gz and the shipped data define theirs",
    )
    f.add_argument(
        "--num-features",
        type=int,
        default=None,
        help="b, the features (even) (default: the recipe's, 2000 below 20,000 training rows; from there 6000 "
        "Nyström features up to 100,000 rows and 4000 random Fourier features above: "
        "kronvi.pipeline.default_num_frequencies)",
    )
    f.add_argument("--levels", type=int, default=15, help="weight grid levels (15 = 4 bits)")
    f.add_argument(
        "--method",
        default="cavi",
        choices=["cavi", "lbfgs", "optax-lbfgs"],
        help="how the weights' posterior is fitted (kronvi.fitting.fit_regression)",
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
    f.add_argument(
        "--kernel",
        choices=KERNEL_CHOICES,
        default="rbf",
        help="the kernel of the random features: 'rbf' (squared exponential), 'matern52', 'matern32', or "
        "'auto': each fold prepared with all three and the features of the largest exact evidence kept "
        "(three preparations' time; --basis eigen or compact) (kronvi.pipeline.DirectConfig.kernel)",
    )
    f.add_argument(
        "--feature-map",
        choices=FEATURE_MAP_CHOICES,
        default=None,
        help="'fourier' (random Fourier features), 'nystrom' (Nyström features on b landmarks among the "
        "training rows) or 'auto' (the map of the larger exact evidence; --basis eigen or compact) (default: "
        "by the training rows, Nyström from 4,000 to 100,000 with --basis eigen or compact, else Fourier: "
        "kronvi.pipeline.default_feature_map)",
    )
    f.add_argument(
        "--feature-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="b chosen per fold by the data and the machine: from --num-features (default 1000) b doubles while "
        f"the exact evidence rises by at least {FEATURE_GAIN:g} nats per training row and the next doubling is predicted to "
        "end within SECONDS of feature work, or grows as far as they allow (--basis eigen or compact) "
        "(kronvi.pipeline.DirectConfig.feature_budget)",
    )
    f.add_argument("--seed", type=int, default=0, help="random seed of the features and of a CSV's folds")
    f.add_argument(
        "--json",
        metavar="PATH",
        help="write per-fold results and the summary to this JSON file (checked before any compute, "
        "written atomically; NaN/inf values are written as null); an existing file is an error unless "
        "--force (default: no file)",
    )
    f.add_argument(
        "--save",
        metavar="PATH",
        help="save the fitted model (kronvi.save_model; load it with kronvi.load_model): the last fold's, or "
        "with --refit the model of every row; checked before any compute (default: no file)",
    )
    f.add_argument(
        "--refit",
        action="store_true",
        help="after the folds, fit on every row with --seed's key (kronvi.fit_direct(jax.random.key(seed), X, y)) "
        "for --save",
    )
    f.add_argument(
        "--density-rows",
        type=int,
        default=2000,
        help="the NLPD is the exact log density of at most this many test rows per fold, drawn at random "
        "(said in the output when fewer than all); 0 = none",
    )
    f.add_argument("--no-density", action="store_true", help="skip the NLPD (same as --density-rows 0)")
    f.add_argument("--force", action="store_true", help="let --json and --save overwrite existing files")
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
    if args.folds is not None:
        if args.source is None or os.path.isdir(args.source):
            parser.error(
                "--folds applies to a CSV file: the folds of "
                + ("the shipped data" if args.source is None else "a folder")
                + " are its test_mask.csv.gz's columns (--max-folds runs fewer)"
            )
        if args.folds < 2:
            parser.error(f"--folds must be >= 2, got {args.folds}")
    else:
        args.folds = 10
    if args.density_rows < 0:
        parser.error(f"--density-rows must be >= 0, got {args.density_rows}")
    if args.no_density:
        args.density_rows = 0
    if args.refit and args.save is None:
        parser.error("--refit needs --save (the refitted model is saved, not evaluated)")
    if args.num_features is not None and (args.num_features < 2 or args.num_features % 2):
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
    if args.basis == "features":  # what the library checks in DirectConfig, before the data are read
        for option, value in (("--kernel", args.kernel), ("--feature-map", args.feature_map)):
            if value == "auto":
                parser.error(
                    f"{option} auto compares by the exact evidence of --basis eigen or compact: with --basis "
                    f"features name one"
                )
    if args.feature_budget is not None:
        try:
            check_positive_number(args.feature_budget, "--feature-budget")
        except ValueError as err:
            parser.error(str(err))
        if args.basis == "features":
            parser.error(
                "--feature-budget grows b by the exact evidence of --basis eigen or compact, not --basis features "
                "(set --num-features there)"
            )


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


def _write_json(path: str, obj, *, overwrite: bool):
    """Writes strict JSON atomically (`kronvi.files.write_atomic`). Without `overwrite` the file is created only
    if no file of that name exists then; if another run created it while this one computed, the results
    go to a fresh name beside it (`out.<pid>.json`, else `kronvi-fit-<pid>.json`) and `FileExistsError`
    says where: a run's results are never lost, nor written over another run's."""
    text = json.dumps(_finite_or_none(obj), indent=1, allow_nan=False) + "\n"
    try:
        write_atomic(path, text, overwrite=overwrite)
        return
    except FileExistsError:
        pass
    root, ext = os.path.splitext(path)
    for other in (
        f"{root}.{os.getpid()}{ext or '.json'}",
        os.path.join(os.path.dirname(path), f"kronvi-fit-{os.getpid()}.json"),
    ):
        try:
            write_atomic(other, text, overwrite=False)
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENAMETOOLONG):
                continue
            raise
        raise FileExistsError(
            f"--json {path!r} was created by another run while this one computed: this run's results are "
            f"in {other!r}"
        )
    raise FileExistsError(
        f"--json {path!r} was created by another run while this one computed: results not written"
    )


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises `KeyboardInterrupt`."""


def _on_sigterm(signum, frame):
    raise _Terminated


EXIT_INTERRUPTED = {KeyboardInterrupt: 130, _Terminated: 143}  # 128 + SIGINT, 128 + SIGTERM


def main(argv=None):
    """Runs `kronvi fit`. Errors in the user's input print `kronvi: error: <message>` and return 2
    (`--debug`: the traceback). Ctrl-C (SIGTERM) keeps the finished folds (their table, and `--json`
    marked `"interrupted": true`), prints `kronvi: interrupted` (`terminated`) and returns 130 (143); run
    as the program (`argv` None) it then exits at once, without tearing down the interpreter under XLA's
    threads."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("fit", "-h", "--help", "--version"):
        argv = ["fit"] + argv
    parser, fit_parser = _parsers()
    args = parser.parse_args(argv)
    _check_args(fit_parser, args)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return _fit(args)
    except (ValueError, TypeError, OSError) as err:
        if args.debug:
            raise
        sys.stderr.write(f"kronvi: error: {err}\n")
        return 2
    except (KeyboardInterrupt, _Terminated) as stop:
        code = EXIT_INTERRUPTED[type(stop)]
        sys.stderr.write(f"\nkronvi: {'interrupted' if code == 130 else 'terminated'}\n")
        if program:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _recipe(basis: str, noise_cv: tuple[float, ...] | None):
    """The recipe of `--basis` and `--noise-cv` (`None`: the recipe's default; only `features` has one)."""
    if basis not in RECIPES:
        raise ValueError(f"`config.basis` must be one of {BASES}, got {basis!r}")
    if noise_cv is None:
        return RECIPES[basis]()
    if basis == "features":
        return Features(noise_cv=noise_cv)
    if noise_cv:
        raise ValueError(
            f"`config.noise_cv` applies to basis='features' only: with basis={basis!r} the noise grid is "
            "centred on the evidence maximizer (set noise_cv=() or basis='features')"
        )
    return RECIPES[basis]()


def _settings(args, config, num_folds: int, folds_run: int) -> dict:
    """What a `--json` record needs to be reproduced: the data, the options and the resolved config."""
    return {
        "source": args.source if args.source is not None else "yacht (shipped)",
        "source_path": None if args.source is None else os.path.abspath(args.source),
        "source_kind": (
            "shipped" if args.source is None else "folder" if os.path.isdir(args.source) else "csv"
        ),
        "basis": args.basis,
        "kernel": args.kernel,
        "feature_map": args.feature_map,
        "feature_budget": args.feature_budget,
        "b": args.num_features,
        "density_rows": args.density_rows,
        "save": None if args.save is None else os.path.abspath(args.save),
        "refit": args.refit,
        "levels": args.levels,
        "method": args.method,
        "seed": args.seed,
        "folds": num_folds,
        "folds_run": folds_run,
        "max_folds": args.max_folds,
        "noise_cv": None if args.noise_cv is None else list(args.noise_cv),
        "noise_recentres": args.noise_recentres,
        "config": json.loads(json.dumps(resolve_config(config).as_flat_dict())),
        "kronvi_version": __version__,
    }


def _fit(args):
    if not args.no_compilation_cache:
        enable_compilation_cache()
    for option, path in (("--json", args.json), ("--save", args.save)):
        if path is not None:
            check_output_path(
                path,
                option=option,
                inputs=_input_files(args.source),
                overwrite=args.force,
                exists_hint="pass --force to overwrite it",
            )
    if (
        args.json is not None
        and args.save is not None
        and os.path.abspath(args.json) == os.path.abspath(args.save)
    ):
        raise ValueError("--json and --save name the same file")
    if args.source is None:
        X, y, mask = load_demo()
        name = "yacht (shipped)"
    elif not os.path.exists(args.source):
        raise FileNotFoundError(f"`source` {args.source!r}: no such file or folder")
    elif not os.path.isdir(args.source):  # a CSV file, whatever its name (.csv, .data, .gz, ...)
        X, y = csv_table(args.source, name="source")
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
    n_train = int(np.sum(folds != 0))
    fmap = args.feature_map or default_feature_map(n_train, args.basis)
    config = DirectConfig(
        recipe=_recipe(args.basis, args.noise_cv),
        num_frequencies=None if args.num_features is None else args.num_features // 2,
        levels=args.levels,
        method=args.method,
        max_noise_recentres=args.noise_recentres,
        kernel=args.kernel,
        feature_map=args.feature_map,
        feature_budget=args.feature_budget,
    )
    sizes = (n_train, len(y)) if args.refit else (n_train,)  # the refit's map and b are its rows'
    b = max(num_fit_features(n, config) for n in sizes)
    check_memory(
        regression_fit_bytes(len(y), b, dtype="float32"),
        what=f"a fit with b = {b} features on {len(y)} rows",
        argument="--num-features",
    )
    print(
        f"DIRECT mean-field regression on {name}: n={len(y)}, d={X.shape[1]}, b={b}, "
        + ("" if fmap == "fourier" else f"feature map {fmap} (b at most the training rows), ")
        + ("" if args.feature_budget is None else f"b growing within {args.feature_budget:g} s a fold, ")
        + f"{args.levels}-level grid, basis={args.basis}, method={args.method}, {K} folds, "
        f"jax on {jax.devices()[0].platform}"
    )
    header = (
        f"{'fold':>4} {'n_train':>7} {'RMSE':>9} {'NLPD':>8} {'sparsity%':>9} {'init s':>7} "
        f"{'stats s':>7} {'cv s':>6} {'span':>5} {'fit s':>7} {'iters':>5}"
    ) + ("" if args.feature_budget is None else f" {'b':>6}")
    results, lines = [], []
    start = time.perf_counter()
    key = jax.random.key(args.seed)
    # redrawn in place on a terminal; plain lines, now and then, in a log file
    status = _Heartbeat(StatusLine())
    status.show(_fold_status(0, K, start))
    model = None
    stop = None  # Ctrl-C or SIGTERM: the finished folds are printed and written, then it ends the run
    try:
        for k in range(K):
            tr, te = folds != k, folds == k
            progress = _within_fold(status, k, K, start)
            run = run_fold(
                jax.random.fold_in(key, k), X[tr], y[tr], X[te], y[te], config, density_rows=args.density_rows,
                progress=progress,
            )  # fmt: skip
            res, model = run.result, run.model
            results.append(res)
            lines.append(
                f"{k:>4} {int(tr.sum()):>7} {res.rmse:>9.4f} {res.nlpd:>8.3f} {res.sparsity_pct:>9.1f} "
                f"{res.init_seconds:>7.2f} {res.stats_seconds:>7.2f} {res.select_seconds:>6.2f} "
                f"{res.noise_span:>5g} {res.fit_seconds:>7.2f} "
                f"{res.num_iter:>5}" + ("" if args.feature_budget is None else f" {res.num_features:>6}")
            )
            status.show(_fold_status(k + 1, K, start, f"fold {k}: RMSE {res.rmse:.3f}"), final=k + 1 == K)
    except (KeyboardInterrupt, _Terminated) as e:
        stop = e
    finally:
        status.stop()
    if stop is not None and not results:
        raise stop
    s = summarize(results)
    print(header)
    print("\n".join(lines))
    if args.density_rows == 0:
        print("NLPD not computed (--no-density)")
    elif any(
        r.nlpd_rows < n_test for r, n_test in zip(results, _test_rows(folds, len(results)), strict=True)
    ):
        print(f"NLPD on a random sample of at most {args.density_rows} test rows per fold (--density-rows)")
    nlpd = "" if args.density_rows == 0 else f" | mean NLPD {s['nlpd_mean']:.3f} +- {s['nlpd_sd']:.3f}"
    print(
        f"mean RMSE {s['rmse_mean']:.4f} +- {s['rmse_sd']:.4f}{nlpd} | sparsity {s['sparsity_pct_mean']:.1f}% | "
        f"seconds per fold: init "
        f"{s['init_seconds_mean']:.2f}, stats {s['stats_seconds_mean']:.2f}, noise cv "
        f"{s['select_seconds_mean']:.2f}, fit {s['fit_seconds_mean']:.2f}"
        f" | total {time.perf_counter() - start:.1f}s"
    )
    if stop is not None:
        print(f"interrupted after {len(results)} of {K} folds: the table above holds the finished folds")
    if args.json is not None:
        settings = _settings(args, config, mask.shape[1], len(results))
        record = {"settings": settings, "interrupted": stop is not None}
        record.update(folds=[r._asdict() for r in results], summary=s)
        _write_json(args.json, record, overwrite=args.force)
    if stop is not None:  # the last finished fold's model is kept too; no refit
        if args.save is not None and not args.refit:
            save_model(args.save, model)
            print(f"saved the fold {len(results) - 1} model to {args.save}")
        raise stop
    if args.save is not None:
        if args.refit:
            print(f"refitting on all {len(y)} rows for --save ...", flush=True)
            beat = _Heartbeat(StatusLine())
            try:
                progress = _within_fold(beat, f"refit on all {len(y)} rows", K, start)
                model = fit_direct(key, X, y, config, progress=progress).model
            finally:
                beat.stop()
        save_model(args.save, model)
        print(f"saved the {'refitted' if args.refit else f'fold {K - 1}'} model to {args.save}")
    return 0


def _test_rows(folds, K):
    return [int(np.sum(folds == k)) for k in range(K)]


def _within_fold(status, k, K, start):
    """The progress of one fold's fit on the fold status line: its stage and, over many rows, the statistics
    pass's rows, speed and time left. A `_Heartbeat` redraws the line while a stage runs without reports."""

    def show(step, total, metrics):
        note = f"{'fold ' if isinstance(k, int) else ''}{k}: {metrics['stage']}"
        rate = metrics.get("rows_per_second")
        if rate:
            note += f" {step:,}/{total:,} rows, {rate:,.0f} rows/s, eta {(total - step) / rate:.0f}s"
        done = k if isinstance(k, int) else K
        status.show(_fold_status(done, K, start, note))

    return show


class _Heartbeat:
    """The fold status line, shown on every report and redrawn every `every` seconds between them with the
    seconds since the last report, so that a long stage (the GP step, an eigendecomposition of a large `b`)
    still shows signs of life at least that often. A daemon thread; `stop` ends it."""

    def __init__(self, status, every: float = 5.0):
        self._status, self._every = status, every
        self._text, self._since = "", time.perf_counter()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def show(self, text: str, final: bool = False) -> None:
        with self._lock:
            self._text, self._since = text, time.perf_counter()
            self._status.show(text, final=final)

    def _run(self) -> None:
        while not self._done.wait(self._every):
            with self._lock:
                if self._text and not self._done.is_set():
                    self._status.show(
                        f"{self._text} ({time.perf_counter() - self._since:.0f}s since the last report)"
                    )

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._status.close()
