"""What every study's command line shares: one-line option errors (exit 2) and a clean Ctrl-C (exit 130).

Not a study: imported by them (``import study_cli``; a script's own folder is on ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time

import numpy as np

import kronvi

EXIT_USAGE = 2  # a bad option, bad data or an output that would be lost or would destroy something
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program stopped by Ctrl-C
MAX_SEED = 2**32 - 1  # NumPy's and scikit-learn's integer seeds


class UsageError(Exception):
    """A bad option or bad data, found before any compute: ``main`` prints it on one line and exits 2."""


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``<prog>: error: <message>``, exit status 2
    (argparse's own adds the usage block)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def report(prog: str, errors) -> int:
    """Prints each error on its own line (``<prog>: error: ...``) and returns the exit status 2."""
    for e in [errors] if isinstance(errors, (str, Exception)) else errors:
        print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def option_errors(args, rules: dict) -> list[str]:
    """One message per option of ``args`` outside its range. ``rules`` maps an attribute name to
    ``(low, high)`` (either may be ``None``: unbounded); ``None`` values (unset options) pass. Floats must
    also be finite."""
    errors = []
    for name, (low, high) in rules.items():
        value = getattr(args, name)
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, float) and not math.isfinite(value):
            errors.append(f"{flag} must be finite, got {value}")
        elif low is not None and high is not None and not low <= value <= high:
            errors.append(f"{flag} must be in [{low}, {high}], got {value}")
        elif low is not None and value < low:
            errors.append(f"{flag} must be >= {low}, got {value}")
        elif high is not None and value > high:
            errors.append(f"{flag} must be <= {high}, got {value}")
    return errors


def float_list(text: str, flag: str, *, positive: bool = True) -> list[float]:
    """A comma list of finite (positive) floats, else :class:`UsageError` naming ``flag``."""
    try:
        values = [float(s) for s in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag} must be a comma list of numbers, got {text!r}") from None
    bad = [v for v in values if not math.isfinite(v) or (positive and v <= 0)]
    if bad:
        what = "positive finite" if positive else "finite"
        raise UsageError(f"{flag} must hold {what} numbers, got {bad[0]} in {text!r}")
    return values


def check_outputs(outputs, *, inputs=(), overwrite=False, exists_hint="pass --overwrite to replace it"):
    """``kronvi.files.check_output_path`` for each ``(option, path)`` of ``outputs`` whose path is set, and no two
    options naming one file; raises ``ValueError``/``OSError`` with a one-line message."""
    seen = {}
    for option, path in outputs:
        if path is None:
            continue
        kronvi.files.check_output_path(
            path, option=option, inputs=inputs, overwrite=overwrite, exists_hint=exists_hint
        )
        real = os.path.realpath(path)
        if real in seen:
            raise ValueError(f"{option} {str(path)!r} is the {seen[real]} file too")
        seen[real] = option


def read_jsonl(path) -> list[dict]:
    """The records of a JSON-lines file, one per non-empty line (none when the file does not exist)."""
    path = pathlib.Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_jsonl(path, record: dict) -> None:
    """Appends ``record`` as one line and flushes it to disk (a stopped run keeps every record written)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_table(parser, out, table, render) -> int:
    """``--table``: ``render(records)`` of the JSON-lines file ``out`` written to ``table`` (atomically) and
    printed; a usage error when ``out`` holds no records. Returns the exit status 0."""
    records = read_jsonl(out)
    if not records:
        parser.error(f"--out {out} holds no records")
    text = render(records)
    kronvi.files.write_atomic(table, text)
    print(text)
    return 0


def dataset_names(parser, data_dir, datasets: str) -> list[str]:
    """The comma list ``--datasets``, each a folder of ``--data-dir``; else a usage error naming the option."""
    names = [d for d in datasets.split(",") if d]
    if not names:
        parser.error("--datasets must name at least one dataset")
    missing = [d for d in names if not (pathlib.Path(data_dir) / d).is_dir()]
    if missing:
        parser.error(f"no dataset folder {missing} in --data-dir {data_dir}")
    return names


def add_fold_options(parser, variants: str, choices, resume_key: str) -> None:
    """The options of a study that fits variants of the default recipe on published folds: ``--data-dir``,
    ``--datasets``, ``--folds``, ``--<variants>`` (a comma list of ``choices``), ``--num-features``, ``--out``,
    ``--resume`` (skipping the ``resume_key`` records already in ``--out``) and ``--table``."""
    parser.add_argument("--data-dir", default="../shared/data/uci")
    parser.add_argument("--datasets", default="")
    parser.add_argument("--folds", type=int, default=3, help="the first K published folds")
    parser.add_argument(f"--{variants}", default=",".join(choices), help=f"comma list of {tuple(choices)}")
    parser.add_argument("--num-features", type=int, default=None, help="b (even; default: the recipe's)")
    parser.add_argument("--out", required=True, help="JSON-lines records, appended")
    parser.add_argument("--resume", action="store_true", help=f"skip {resume_key} already in --out")
    parser.add_argument("--table", default=None, help="render the markdown table from --out and stop")


def fold_options(parser, args, variants: str, choices) -> tuple[pathlib.Path, list[str], list[str]]:
    """``(out, dataset names, chosen variants)`` of ``add_fold_options``' options, checked (one-line usage errors
    naming the option)."""
    names = dataset_names(parser, args.data_dir, args.datasets)
    text = getattr(args, variants)
    chosen = [v for v in text.split(",") if v]
    if not chosen or any(v not in choices for v in chosen):
        parser.error(f"--{variants} must be a comma list of {tuple(choices)}, got {text!r}")
    if args.num_features is not None and (args.num_features < 2 or args.num_features % 2):
        parser.error(f"--num-features must be an even number >= 2, got {args.num_features}")
    if args.folds < 1:
        parser.error(f"--folds must be >= 1, got {args.folds}")
    out = pathlib.Path(args.out)
    if out.exists() and not args.resume:
        parser.error(f"--out {args.out} exists: pass --resume to add to it")
    return out, names, chosen


def published_folds(data_dir, names, folds: int):
    """``(name, k, X, y, test)`` of the first ``folds`` published folds of each dataset (float64 rows, ``test`` the
    fold's boolean test mask)."""
    for name in names:
        X, y, mask = kronvi.load_uci(pathlib.Path(data_dir) / name)
        X, y, mask = np.asarray(X, np.float64), np.asarray(y, np.float64), np.asarray(mask)
        for k in range(min(folds, mask.shape[1])):
            yield name, k, X, y, mask[:, k].astype(bool)


BLOWN_UP = 2.0  # a fold is blown up when its RMSE is above this many times the median fold's


def spread(rmse) -> tuple[float, list[int]]:
    """``(largest fold / median fold, the positions of the folds above BLOWN_UP times the median)``."""
    rmse = np.asarray(rmse, np.float64)
    med = float(np.median(rmse))
    return float(rmse.max() / med), [int(k) for k in np.flatnonzero(rmse > BLOWN_UP * med)]


def add_record_options(parser, *, datasets: str, folds: int) -> None:
    """The options of a study that appends one record per published fold: ``--data-dir``, ``--datasets`` (default
    ``datasets``), ``--folds`` (default ``folds``), ``--out`` and ``--table`` (`run_folds`)."""
    parser.add_argument("--data-dir", default="../shared/data/uci")
    parser.add_argument("--datasets", default=datasets, help="comma list of dataset folders")
    parser.add_argument("--folds", type=int, default=folds, help="the first K published folds")
    parser.add_argument("--out", required=True, help="JSON-lines records, appended")
    parser.add_argument("--table", default=None, help="render the markdown table from --out and stop")


def record_datasets(parser, args) -> list[str]:
    """The datasets of `add_record_options`' options, checked: ``--folds`` at least 1, then every name of
    ``--datasets`` a folder of ``--data-dir`` (one-line usage errors naming the option)."""
    if args.folds < 1:
        parser.error(f"--folds must be >= 1, got {args.folds}")
    return dataset_names(parser, args.data_dir, args.datasets)


def run_folds(args, names, one, line, extra=None) -> int:
    """For each of the first ``args.folds`` published folds of the datasets ``names`` not yet in ``args.out`` (a
    record's ``dataset``, the fields of ``extra`` and ``fold``): the record ``dataset, **extra, fold`` and then
    ``one(name, k, X, y, test)``'s fields, appended as soon as it exists, and ``line(record)`` printed. Returns
    the exit status 0."""
    extra = extra or {}
    fields = ("dataset", *extra, "fold")
    done = {tuple(r.get(f) for f in fields) for r in read_jsonl(args.out)}
    for name, k, X, y, test in published_folds(args.data_dir, names, args.folds):
        record = dict(dataset=name, **extra, fold=k)
        if tuple(record.values()) in done:
            continue
        record.update(one(name, k, X, y, test))
        append_jsonl(args.out, record)
        print(line(record), flush=True)
    return 0


def fit_and_score(X, y, test, config, key):
    """``(fold, model, fields)``: ``prepare_fold`` and ``fit_prepared`` of the training rows with ``config``, and the
    test RMSE (``model.predict``), NLPD (``model.log_density``, the exact density of every test row; a far-tail point
    whose value misses the density's tolerance keeps its best value, counted in ``density_below_tolerance``, as
    ``kronvi fit`` does), the features' exact log evidence and the seconds of the two stages."""
    from kronvi.pipeline import fit_prepared, prepare_fold

    t0 = time.perf_counter()
    fold = prepare_fold(key, X[~test], y[~test], config)
    t1 = time.perf_counter()
    model = fit_prepared(fold, config).model
    t2 = time.perf_counter()
    mean = np.asarray(model.predict(X[test]).mean, np.float64)
    try:
        log_dens, below = model.log_density(X[test], y[test]), 0
    except kronvi.model.DensityToleranceError as e:
        log_dens, below = e.log_density, int(np.size(e.failed))
    return fold, model, dict(
        rmse=float(np.sqrt(np.mean((mean - y[test]) ** 2))),
        nlpd=-float(np.mean(np.asarray(log_dens, np.float64))),
        density_below_tolerance=below,
        log_evidence=float(fold.log_evidence),
        prepare_seconds=t1 - t0,
        fit_seconds=t2 - t1,
    )


def add_cache_option(parser) -> None:
    """``--no-compilation-cache``: the studies use JAX's persistent compilation cache by default, as ``kronvi fit``
    does (``kronvi.enable_compilation_cache``: ``$JAX_COMPILATION_CACHE_DIR`` or a per-user, per-host folder)."""
    parser.add_argument(
        "--no-compilation-cache", action="store_true",
        help="compile every program in this process (default: JAX's persistent cache, kronvi.enable_compilation_cache)",
    )  # fmt: skip


def compilation_cache(args) -> str:
    """Turns the persistent cache on unless ``--no-compilation-cache``; returns the state to report: ``"off"``,
    ``"cold"`` (an empty cache folder: this run compiles and fills it) or ``"cached"`` (programs on disk from an
    earlier run; those this run's programs match are read, not compiled)."""
    if getattr(args, "no_compilation_cache", False):
        return "off"
    folder = kronvi.enable_compilation_cache()
    return "cached" if any(folder.iterdir()) else "cold"


def run(main) -> None:
    """Runs a study's ``main()`` as the program and exits with its status. Ctrl-C exits with 130 after
    one line on stderr (``main`` keeps what it has written: its outputs are rewritten atomically), without
    tearing down the interpreter while XLA's threads may still be running (``os._exit`` after flushing)."""
    try:
        code = main()
    except KeyboardInterrupt:
        print(f"{os.path.basename(sys.argv[0])}: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    sys.exit(code)
