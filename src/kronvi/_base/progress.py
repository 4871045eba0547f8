r"""Opt-in progress reporting for long loops compiled into `lax.scan`.

kronvi's long loops (the SGD fits: mixture SGD, REPARAM, local-reparameterization ELRG, logistic SGD, all
run by `kronvi._solvers.sgd.run_sgd`) run entirely inside one jitted `lax.scan`, so a Python loop cannot print between steps. With `progress` on, the scan body
calls `jax.debug.callback` every `progress_every` steps (and at the last step), inside a
`lax.cond` on the step counter, and the host-side reporter receives `(step, total, metrics)`. With
`progress=None` (the default) the compiled program contains no callback at all: the switch is part of
the pytree structure of the jitted function's arguments, so the two cases are separate compiles and the
default one is unchanged.

The reporter itself is never baked into the compiled program. Each call registers its reporter under a
fresh integer token for the duration of the call and passes the token to the program as a traced
argument, so one compile serves every callable and every tqdm bar; on exit the call waits for the
outstanding callbacks (`jax.effects_barrier`) and unregisters the token.

`progress` accepts:

- `None`: nothing (no callback in the program, no overhead);
- `True`: on a terminal, a `tqdm` bar when tqdm is importable, else one line redrawn in place; when
  `stderr` is not a terminal (a log file, a pipe), plain lines without carriage returns, at most one
  every `PLAIN_LINE_SECONDS` seconds besides the first and the last report (`StatusLine`);
- a callable `progress(step, total, metrics)`: `step` is the number of steps done (1-based, a Python
  `int`), `total` the number of steps, `metrics` a `dict` of this step's diagnostics (Python floats
  for scalars, NumPy arrays otherwise).

Under `jax.vmap` of a fitting function (e.g. over cross-validation folds) the callback is unrolled over
the mapped axis, so a callable is called once per fold and reported step, each time with that fold's
scalar metrics; a tqdm bar moves to the largest step seen. Under an outer `jax.jit` the token would be
unregistered before the program runs, so the fitting functions raise a `ValueError` that says so.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "PLAIN_LINE_SECONDS",
    "ProgressReporter",
    "StatusLine",
    "check_progress",
    "format_eta",
    "is_terminal",
    "progress_scope",
    "report_progress",
]

# A progress callback `(step, total, metrics)`, the `progress` argument of the stochastic fits besides `True`.
ProgressCallback = Callable[[int, int, dict[str, Any]], None]
_REPORTERS: dict[int, Callable[[int, int, dict], None]] = {}
_TOKENS = itertools.count(1)
_LOCK = threading.Lock()


def _under_jit() -> bool:
    """True while tracing under `jit` (not under an eager `vmap`)."""
    from jax._src import core  # noqa: PLC0415 (private, so looked up lazily and guarded)

    fn = getattr(core, "unsafe_am_i_under_a_jit", None)
    return bool(fn()) if fn is not None else False


PLAIN_LINE_SECONDS = 10.0  # off a terminal: at most one progress line this often (plus first and last)


def is_terminal(stream) -> bool:
    """True when `stream` is shown live: a terminal (`isatty()`) or a Jupyter cell's output (which draws
    `\\r` and tqdm's widgets); False for files, pipes and closed streams."""
    if type(stream).__module__.startswith("ipykernel."):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except (ValueError, OSError):  # closed or detached
        return False


def format_eta(elapsed: float, done: int, total: int) -> str:
    """The remaining time from the mean pace so far: `"eta 12.3s"`, or `"eta ?"` before the first step
    (never `nan`).

    Example:
      >>> format_eta(10.0, 0, 4), format_eta(10.0, 2, 4), format_eta(10.0, 4, 4)
      ('eta ?', 'eta 10.0s', 'eta 0.0s')
    """
    if done <= 0 or not elapsed >= 0:
        return "eta ?"
    return f"eta {elapsed / done * max(total - done, 0):.1f}s"


class StatusLine:
    """One status line of a long loop, for terminals and log files alike.

    On a terminal each `show` redraws the line in place (`\\r`) and `close` ends it with a newline. Anywhere
    else (a log file, a pipe, a CI log) each shown status is a plain line ending in `\\n`, with no carriage
    return, and only at a modest rate: the first status, then at most one every `min_interval` seconds,
    and the final one (`final=True`), so a log of a long run stays short.

    Args:
      file: the stream (default `sys.stderr`, looked up at each write).
      min_interval: seconds between plain lines off a terminal (default `PLAIN_LINE_SECONDS`).
      terminal: force the terminal (`True`) or plain (`False`) behaviour; default `is_terminal(file)`.
      clock: the time source in seconds (default `time.monotonic`).
    """

    def __init__(
        self, *, file=None, min_interval: float | None = None, terminal: bool | None = None, clock=None
    ):
        self.file = file
        self.min_interval = PLAIN_LINE_SECONDS if min_interval is None else float(min_interval)
        self.terminal = is_terminal(self._stream) if terminal is None else bool(terminal)
        self.clock = time.monotonic if clock is None else clock
        self._last_time: float | None = None  # when the last plain line was written
        self._open = False  # a terminal line waits for its newline

    @property
    def _stream(self):
        return self.file if self.file is not None else sys.stderr

    def show(self, text: str, *, final: bool = False) -> None:
        """Shows `text` as the current status (`final`: the last one, always written)."""
        stream = self._stream
        if self.terminal:
            stream.write(f"\r{text}\x1b[K")  # \x1b[K: clear what a longer previous line left
            self._open = True
            if final:
                self.close()
                return
        else:
            now = self.clock()
            if not final and self._last_time is not None and now - self._last_time < self.min_interval:
                return
            stream.write(text + "\n")
            self._last_time = now
        stream.flush()

    def close(self) -> None:
        """Ends a terminal line with its newline (plain lines need nothing)."""
        if self._open:
            self._stream.write("\n")
            self._stream.flush()
            self._open = False


class StageLine:
    """`progress=True` of `kronvi.fit_direct` and `kronvi.cv.run_fold`: the stage, the rows done, their speed
    and the time left, on one line of `stderr` (redrawn on a terminal, plain lines now and then in a log:
    `StatusLine`). Called as `progress(step, total, metrics)` with `metrics["stage"]` and, optionally,
    `metrics["rows_per_second"]`."""

    def __init__(self):
        self._line = StatusLine()

    def __call__(self, step: int, total: int, metrics: dict) -> None:
        text = f"fit_direct: {metrics['stage']}, {step:,}/{total:,} rows"
        rate = metrics.get("rows_per_second")
        if rate:
            text += f", {rate:,.0f} rows/s, eta {(total - step) / rate:.0f}s"
        self._line.show(text, final=False)

    def close(self) -> None:
        self._line.close()


class ProgressReporter:
    """The host-side end of `progress=True`.

    On a terminal: a tqdm bar when tqdm is importable, else a `StatusLine` redrawn in place. Anywhere else
    (a log file, a pipe): plain lines through a `StatusLine`, `step i/total` with the scalar metrics,
    elapsed time and `eta` (`eta ?` until a step is done), at most one every `PLAIN_LINE_SECONDS` seconds
    besides the first and the last report.

    Args:
      total: number of steps.
      desc: label shown before the bar or at the start of each line.
      file: the stream (default `sys.stderr`).
      min_interval: seconds between plain lines off a terminal (default `PLAIN_LINE_SECONDS`).
    """

    def __init__(self, total: int, desc: str = "", *, file=None, min_interval: float | None = None):
        self.total = int(total)
        self.desc = desc
        self.file = file
        self._bar = None
        self._last = 0
        self._start = time.monotonic()
        self._line = StatusLine(file=file, min_interval=min_interval)
        tqdm: Any = None
        if self._line.terminal:
            try:
                from tqdm.auto import tqdm  # type: ignore[no-redef]  # noqa: PLC0415 (optional dependency)
            except ImportError:
                tqdm = None
        if tqdm is not None:
            self._bar = tqdm(total=self.total, desc=desc or None, leave=True, file=file)

    def __call__(self, step: int, total: int, metrics: dict) -> None:
        if step <= self._last:  # under vmap every fold reports the same step
            return
        shown = {k: v for k, v in metrics.items() if isinstance(v, float)}
        if self._bar is not None:
            self._bar.update(step - self._last)
            if shown:
                self._bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
        else:
            elapsed = time.monotonic() - self._start
            words = [f"step {step}/{total}", *(f"{k} {v:.6g}" for k, v in shown.items())]
            words.append(f"({elapsed:.1f}s elapsed, {format_eta(elapsed, step, total)})")
            prefix = f"{self.desc}: " if self.desc else ""
            self._line.show(prefix + " ".join(words), final=step >= total)
        self._last = step

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._line.close()


def check_progress(progress, progress_every, total: int, name: str = "progress"):
    """Validates `progress` and `progress_every`; returns the reporting interval as an `int`.

    `progress_every=None` reports about 100 times over `total` steps (every `max(1, total // 100)`).

    Raises:
      TypeError: `progress` is not `None`, a bool or a callable.
      ValueError: `progress_every` is not a positive integer.
    """
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            f"`{name}` must be None, True or a callable (step, total, metrics), got {type(progress).__name__}"
        )
    if progress_every is None:
        return max(1, int(total) // 100)
    if (
        isinstance(progress_every, bool)
        or not isinstance(progress_every, (int, np.integer))
        or progress_every < 1
    ):
        raise ValueError(f"`{name}_every` must be a positive integer, got {progress_every!r}")
    return int(progress_every)


def _to_host(v):
    a = np.asarray(v)
    return a.item() if a.ndim == 0 else a


def _emit(token, step, total, metrics):
    reporter = _REPORTERS.get(int(token))
    if reporter is not None:
        reporter(int(step), int(total), {k: _to_host(v) for k, v in metrics.items()})


@contextmanager
def progress_scope(progress, *, total: int, every: int, desc: str = ""):
    """Registers the reporter of one call; yields the traced-argument pytree for `report_progress`.

    Yields `None` when `progress` is `None` or `False` (then nothing is registered and the compiled
    program has no callback), else `(token, every)` as `int32` arrays. On exit it waits for the
    outstanding callbacks, closes a bar it made and unregisters the token.

    Args:
      progress: `None`, `True` or a callable `(step, total, metrics)`, as checked by
        `check_progress`.
      total: number of steps of the loop.
      every: report every this many steps (and at the last).
      desc: label of the bar made for `progress=True`.

    Raises:
      ValueError: `progress` is on while tracing under an outer `jax.jit`.
    """
    if progress is None or progress is False:
        yield None
        return
    if _under_jit():
        raise ValueError(
            "`progress` cannot report from inside an outer jax.jit (the reporter would be gone before the "
            "program runs); call the fitting function outside jit, or pass progress=None"
        )
    reporter = ProgressReporter(total, desc) if progress is True else progress
    with _LOCK:
        token = next(_TOKENS)
        _REPORTERS[token] = reporter
    try:
        yield (jnp.asarray(token, jnp.int32), jnp.asarray(every, jnp.int32))
        jax.effects_barrier()
    finally:
        with _LOCK:
            _REPORTERS.pop(token, None)
        if isinstance(reporter, ProgressReporter):
            reporter.close()


def report_progress(progress_args, i, total: int, metrics: dict[str, Any]) -> None:
    """Inside a traced loop body: reports step `i + 1` of `total` when it is due.

    Does nothing (adds nothing to the program) when `progress_args` is `None`; else emits one
    `jax.debug.callback` under `lax.cond` when `i + 1` is a multiple of `every` or equals
    `total`.

    Args:
      progress_args: what `progress_scope` yielded, passed through the jitted function.
      i: the traced 0-based step index (unbatched, e.g. from `jnp.arange` scanned over).
      total: the static number of steps.
      metrics: `dict` of traced arrays to report.
    """
    if progress_args is None:
        return
    token, every = progress_args
    step = i + 1
    due = (step % every == 0) | (step == total)

    def emit():
        jax.debug.callback(_emit, token, step, total, metrics)

    lax.cond(due, emit, lambda: None)
