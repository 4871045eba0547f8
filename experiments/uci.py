"""The DIRECT paper's UCI regression study (Evans & Nair 2018, Table 1 and Table 2), reproducible.

For every dataset folder (``data.csv.gz`` + ``test_mask.csv.gz``) and each of its 10 folds, the training rows
go through ``kronvi.pipeline.prepare_fold`` (standardize the inputs with training-fold statistics, centre y on
the training mean, GP hyperparameters on min(n, 1000) training rows, b = 2000 random Fourier features, the
sufficient statistics in one chunked pass, per inner fold for the noise grid's choice), and every requested
method is fitted on that one preparation (``direct-mf`` and ``exact-blr`` on a second one that reuses its GP
hyperparameters and features):

  direct-mf        DIRECT mean field with kronvi's default recipe (``DirectConfig()``, basis "eigen"): the
                   weights discretized in the eigenbasis of Phi^T Phi, each on 15 levels spanning +-6 sds of
                   its exact posterior under N(0, sw^2), sw and the noise centre at the joint exact evidence
                   maximizer, the noise on 15 levels spanning 3x around it; CAVI from the prior, all weights
                   at once (the eigenbasis statistics are diagonal). Predicts as ``kronvi.predict``: with random
                   Fourier features a test row's eigen-coordinates count up to 20 training RMS in the mean
                   (``DirectConfig.support_rms``).
                   From 4,000 to 100,000 training rows its features are Nyström features (2000 landmarks,
                   6000 from 20,000 rows; ``kronvi.pipeline.default_feature_map``), the GP step's the same, and
                   the mean is not bounded (``support_rms="auto"``: they vanish away from the landmarks).
  exact-blr        exact Bayesian linear regression on the same features, prior N(0, sw^2 I), sw and the noise
                   at the joint evidence maximizer (kronvi.gaussian.spectral_evidence_optimum, as
                   BayesianRidge chooses them; kronvi.gaussian.blr_posterior); closed-form NLPD on every test row.
  direct-mf-sparse DIRECT mean field with the paper's recipe (basis "features"), ``kronvi.pipeline.fit_prepared``:
                   weights on linspace(-3 sw, 3 sw, 15)
                   with a discretized N(0, sw^2) prior, a uniform prior over 15 log-spaced noise variances in
                   [s2/span, span s2]; exact CAVI from the prior and from kronvi.fitting.gaussian_start, the higher
                   ELBO kept (--direct-fit lbfgs: the paper's L-BFGS recipe). The span is chosen per fold among
                   --noise-cv (default 10, 3 and 1 = the noise fixed at s2) by inner 5-fold cross-validation on
                   the training rows (kronvi.fitting.select_prior: pooled-variance held-out log density); --noise-cv
                   none is the paper's single grid of span 10. The mixtures start from this fit and use its
                   noise grid: sparse 4-bit weights.
  direct-mix5-sgd  r = 5 mixture started from the mean-field fit with perturbed components; optax Adam on
                   the unbiased ELBO gradient (--sgd-estimator, default local), 300 draws per step
                   (--sgd-samples; the paper's t = 3000 with --sgd-estimator stratified), 150 steps; float32.
  direct-mix5-lb   r = 5 mixture, Theorem-3 lower bound maximized by L-BFGS jointly over q and the centre,
                   started from the mean-field fit; 100 iterations, fitted in float64 (--lb-precision).
  reparam-mf       the paper's REPARAM: continuous prior N(0, sw^2), diagonal Gaussian q, reparameterization
                   gradients with minibatches of 100 and 10 Monte Carlo samples, 1000 steps (n < 3000) or
                   10000 (larger).
  gauss-mf-exact   the same Gaussian family fitted with the exact ELBO from the sufficient statistics
                   (closed-form coordinate ascent).
  elrg-<rank>      Tomczak et al.'s (2020) low-rank-plus-diagonal Gaussian (kronvi.gaussian.fit_elrg, one variance per
                   weight plus <rank> factor columns) trained beside REPARAM with its settings: local
                   reparameterization (outputs sampled per row), minibatches of 100 rows, 10 draws per row,
                   Adam, 1000 or 10000 steps; the noise variance fixed at exact-blr's (the evidence
                   maximizer). Not part of ``--methods all``; e.g. ``--methods elrg-4``.

Both Gaussian baselines learn the noise variance as a point estimate, started at the GP estimate and kept
inside [s2/span, span s2] (span = DirectConfig.noise_span, 10).

Metrics per fold: test RMSE (all test rows, stored target units), test NLPD on a fixed random subset of at
most --nlpd-points test rows per fold (the same rows for every method; ``all``: every test row): discrete
posteriors by ``kronvi.model.predictive_log_density`` (a mixture: its components' densities weighted by alpha),
Gaussian posteriors in closed form; expected sparsity; seconds: GP initialization, features + statistics,
noise-grid choice, fit.

The JSON is the table's only input (``experiments/render_uci.py``). Every record carries ``settings``, the
configuration that made it; an existing JSON is extended only with --resume, and only by records of the same
settings (--rerun-mismatched reruns the (dataset, method) pairs whose settings differ), or replaced with
--overwrite. Runs with --resume over other datasets may share one --json, started together: each write
reads the file again under a lock on its folder and keeps the other runs' records (``write_merged``).

Usage:
  python experiments/uci.py --datasets all --methods all --json experiments/results/uci.json \
      --log experiments/results/uci_run.log
  python experiments/uci.py --merge a.json,b.json --json experiments/results/uci.json   # parallel runs' records
  python experiments/uci.py --datasets yacht --methods direct-mf --max-folds 2 --num-features 100 \
      --json /tmp/smoke.json          # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import functools
import gzip
import json
import os
import pathlib
import platform
import re
import shlex
import sys
import time

# OpenBLAS threads inside XLA's thread pool deadlock on small machines: single-threaded before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import study_cli  # noqa: E402
from jax.scipy.stats import norm  # noqa: E402

import kronvi  # noqa: E402
from kronvi.cv import parse_noise_cv  # noqa: E402
from kronvi.pipeline import (  # noqa: E402
    DirectConfig,
    fit_prepared,
    fold_features,
    prepare_fold,
    resolve_config,
    support_shift,
)

METHODS = (
    "direct-mf", "exact-blr", "direct-mf-sparse", "direct-mix5-sgd", "direct-mix5-lb", "reparam-mf",
    "gauss-mf-exact",
)  # fmt: skip
ELRG_METHOD = re.compile(r"elrg-(\d+)")  # elrg-<rank>: not in METHODS ("all"), any rank up to b
DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"
# the JSON on disk would be replaced or mixed with the records of other settings
EXIT_REFUSED = study_cli.EXIT_USAGE
EXISTS_HINT = "pass --resume to add this run's missing records to it or --overwrite to replace it"


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """Every setting of the study: the DIRECT pipeline's (``direct``) and the study's own."""

    # The paper's recipe (direct-mf-sparse; the mixtures start from it): the fold preparation, its features,
    # noise grid and GP settings, which every method shares.
    direct: DirectConfig = resolve_config(DirectConfig(recipe=kronvi.Features(), num_frequencies=1000))
    # kronvi's default recipe (direct-mf, exact-blr): the same GP hyperparameters; the same features below
    # 4,000 training rows, from there its own (kronvi.pipeline.default_feature_map, default_num_frequencies).
    default: DirectConfig = resolve_config(DirectConfig())
    # REPARAM (the paper's settings) and its optimizer
    reparam_batch: int = 100
    reparam_samples: int = 10
    reparam_steps_small: int = 1000  # n < 3000
    reparam_steps_large: int = 10000
    reparam_lr: float = 1e-2
    reparam_init_std: float = 0.1  # initial q std, in prior standard deviations
    # mixtures
    mix_components: int = 5
    mix_init_noise: float = 0.03  # logit perturbation of the components (bound fit)
    sgd_init_noise: float = 0.03  # logit perturbation of the components (SGD fit)
    sgd_steps: int = 150
    # draws per step, stratified over the components (60 each): with the local-expectation gradient less
    # time per step than the paper's t = 3000 stratified draws and a small fraction of their gradient
    # variance near the start (benchmarks/results/bench_mixture.txt)
    sgd_samples: int = 300
    sgd_lr: float = 1e-2  # Adam, cosine-decayed to 0
    sgd_estimator: str = "local"  # kronvi.mixtures.mixture_elbo_estimate's estimator
    sgd_eval_samples: int = 30000  # final unbiased ELBO estimates, in chunks of sgd_eval_chunk draws
    sgd_eval_chunk: int = 3000
    lb_max_iter: int = 100
    lb_tol: float = 0.0  # gradient-norm tolerance on -bound/n: at n ~ 1e4, 1e-6 stops 0.04 nats short
    lb_precision: str = "float64"  # float32 bound values carry ~1 nat of rounding at UCI scale
    # evaluation: NLPD on at most this many test rows per fold (None: all of them)
    nlpd_points: int | None = None  # None: every test row
    nlpd_tol: float = 1e-2  # points whose density's relative error bound exceeds this are redone ...
    nlpd_max_nodes: int = 512  # ... with 4x the quadrature nodes, up to this many


def _jsonable(x):
    return json.loads(json.dumps(x))


def study_settings(cfg: StudyConfig, *, seed: int, max_folds: int | None) -> dict:
    """The settings a record carries: everything that changes its numbers (not the dataset or method)."""
    study = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("direct", "default")}
    return _jsonable(
        dict(
            direct=cfg.direct.as_flat_dict(), default=cfg.default.as_flat_dict(), study=study, seed=seed, max_folds=max_folds
        )
    )


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def settings_diff(recorded, current) -> list[str] | None:
    """``None`` when a record's ``recorded`` settings equal ``current``; else the differing settings as
    ``"name: recorded -> current"`` (``["no settings ..."]`` for records made before records carried them)."""
    if recorded is None:
        return ["no settings (made by the study before records carried them, 2026-11-22)"]
    a, b = _flatten(recorded), _flatten(current)
    diff = [f"{k}: {a.get(k, '(unset)')} -> {b.get(k, '(unset)')}" for k in sorted(a.keys() | b.keys())]
    diff = [d for d, k in zip(diff, sorted(a.keys() | b.keys()), strict=True) if a.get(k) != b.get(k)]
    return diff or None


class RefusedError(Exception):
    """The run would replace the JSON, or mix its records with records of other settings."""


def records_to_keep(path: pathlib.Path, current: dict, pairs: set, *, resume, overwrite, rerun_mismatched):
    """The records of ``path`` the run keeps (it skips their (dataset, method) pairs).

    Raises :class:`RefusedError` when ``path`` exists without ``resume`` or ``overwrite``, or, with
    ``resume``, when a record's settings differ from ``current`` (with ``rerun_mismatched``: only when that
    record's pair is not among the run's ``pairs``; the others are rerun).
    """
    if not path.exists():
        return []
    if overwrite:
        return []
    if not resume:
        raise RefusedError(f"{path} exists; {EXISTS_HINT}")
    keep, refused = [], []
    for r in read_records(path):
        diff = settings_diff(r.get("settings"), current)
        if diff is None:
            keep.append(r)
        elif not (rerun_mismatched and (r["dataset"], r["method"]) in pairs):
            refused.append(f"  {r['dataset']}/{r['method']}: " + "; ".join(diff))
    if refused:
        raise RefusedError(
            f"{path} holds {len(refused)} record(s) made with other settings than this run's:\n"
            + "\n".join(refused)
            + "\nrerun with the same settings, --rerun-mismatched (reruns those pairs if this run covers them) "
            "or --overwrite, or write to another --json"
        )
    return keep


def merged_records(paths: list[pathlib.Path]) -> list[dict]:
    """The records of several study JSONs made by parallel runs over disjoint datasets, in one list.

    Raises :class:`RefusedError` (one line per problem) unless every record carries settings equal to the
    first record's and no (dataset, method) pair appears twice."""
    records, seen, problems, reference = [], {}, [], None
    for path in paths:
        for r in read_records(path):
            name = f"{path}: {r['dataset']}/{r['method']}"
            if r.get("settings") is None:
                problems.append(f"{name} carries no settings")
                continue
            reference = r["settings"] if reference is None else reference
            diff = settings_diff(r["settings"], reference)
            pair = (r["dataset"], r["method"])
            if diff is not None:
                problems.append(f"{name} has other settings than the first record's: " + "; ".join(diff))
            elif pair in seen:
                problems.append(f"{name} is also in {seen[pair]}")
            else:
                seen[pair] = path
                records.append(r)
    if problems:
        raise RefusedError("cannot merge: " + "\n".join(problems))
    return records


def merge_main(args) -> int:
    """``--merge A.json,B.json --json OUT``: writes the union of parallel runs' records (``merged_records``)."""
    paths = [pathlib.Path(p.strip()) for p in args.merge.split(",")]
    try:
        if len(paths) < 2 or any(not p.name for p in paths):
            raise study_cli.UsageError(f"--merge needs two or more comma-separated files, got {args.merge!r}")
        kronvi.files.check_output_path(
            args.json, option="--json", inputs=paths, overwrite=args.overwrite, exists_hint=EXISTS_HINT
        )
        records = merged_records(paths)
    except (study_cli.UsageError, RefusedError, ValueError, OSError) as err:
        return study_cli.report("uci.py", err)
    write_json(pathlib.Path(args.json), records)
    datasets = sorted({r["dataset"] for r in records})
    print(f"wrote {args.json}: {len(records)} records of {len(datasets)} datasets from {len(paths)} files")
    return 0


def read_records(path: pathlib.Path) -> list[dict]:
    """The records of a study JSON, or :class:`RefusedError` (one line) when it is not a list of records."""
    try:
        records = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RefusedError(f"{path} is not a JSON list of study records ({type(e).__name__}: {e})") from None
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("dataset"), str) and isinstance(r.get("method"), str)
        for r in records
    ):
        raise RefusedError(f"{path} is not a JSON list of study records (objects with dataset and method)")
    return records


def write_json(path: pathlib.Path, records) -> None:
    """Writes ``records`` to ``path`` atomically, keeping an existing file's permissions
    (``kronvi.files.write_atomic``)."""
    kronvi.files.write_atomic(path, json.dumps(records, indent=1))


@contextlib.contextmanager
def folder_lock(folder: pathlib.Path):
    """An exclusive ``flock`` on ``folder`` for the block: the runs that merge into one JSON of that
    folder take turns (the lock goes with the process, so a killed run leaves no lock behind)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_merged(path: pathlib.Path, records: list[dict]) -> list[dict]:
    """Writes ``records`` plus the records that other runs (``--resume`` runs over other datasets, started
    together) wrote to ``path`` meanwhile: under ``folder_lock``, ``path`` is read again and each of its
    records whose (dataset, method) pair is not in ``records`` is kept after them. Returns what was
    written. If ``path`` no longer holds study records, ``records`` go to ``<stem>.<pid>.json`` beside it
    and :class:`RefusedError` says so: no run's records are dropped."""
    with folder_lock(path.parent if str(path.parent) else pathlib.Path(".")):
        mine = {(r["dataset"], r["method"]) for r in records}
        try:
            theirs = read_records(path) if path.exists() else []
        except RefusedError as e:
            other = path.with_name(f"{path.stem}.{os.getpid()}{path.suffix or '.json'}")
            write_json(other, records)
            raise RefusedError(f"{e}; this run's {len(records)} record(s) are in {other}") from None
        merged = records + [r for r in theirs if (r["dataset"], r["method"]) not in mine]
        write_json(path, merged)
    return merged


# ----------------------------------------------------------------------------------------------------
# Data


def dataset_size(folder: pathlib.Path) -> int:
    with gzip.open(folder / "data.csv.gz", "rt") as f:
        return sum(1 for line in f if line.strip())


def dataset_folders(data_dir: pathlib.Path, names: str) -> list[pathlib.Path]:
    """The dataset folders ``names`` (a comma list of folder names or paths, or ``all``) names, checked to
    hold ``data.csv.gz`` and ``test_mask.csv.gz``; :class:`study_cli.UsageError` otherwise. Reads no data."""
    if not data_dir.is_dir():
        raise study_cli.UsageError(f"--data-dir {str(data_dir)!r}: no such folder")
    if names == "all":
        folders = [p for p in sorted(data_dir.iterdir()) if (p / "data.csv.gz").is_file()]
        if not folders:
            raise study_cli.UsageError(f"--data-dir {str(data_dir)!r} holds no dataset folders")
        return folders
    folders = []
    for name in names.split(","):
        name = name.strip()
        if not name:
            raise study_cli.UsageError(f"--datasets {names!r} has an empty name")
        p = pathlib.Path(name) if os.sep in name else data_dir / name
        if not (p / "data.csv.gz").is_file() or not (p / "test_mask.csv.gz").is_file():
            raise study_cli.UsageError(f"no dataset folder {p} (needs data.csv.gz and test_mask.csv.gz)")
        if p not in folders:
            folders.append(p)
    return folders


def input_files(folders) -> list[pathlib.Path]:
    return [p / f for p in folders for f in ("data.csv.gz", "test_mask.csv.gz")]


def list_datasets(data_dir: pathlib.Path, names: str):
    """Dataset folders ordered small to large; ``names`` is a comma list or ``all``."""
    folders = dataset_folders(data_dir, names)
    sizes = {p: dataset_size(p) for p in folders}
    return sorted(folders, key=lambda p: (sizes[p], p.name))


def check_datasets(folders) -> None:
    """Reads every dataset once before any compute: bad data is a one-line :class:`study_cli.UsageError`."""
    for p in folders:
        try:
            kronvi.load_uci(p)
        except (OSError, ValueError) as e:
            raise study_cli.UsageError(f"dataset {p}: {e}") from None


def fold_masks(test_mask, k):
    """Boolean ``(train, test)`` rows of fold ``k``: test = the mask's column k, train = the rest."""
    test = kronvi.inputs.fold_indices(test_mask) == k
    return ~test, test


def nlpd_subset(num_test: int, cap: int | None, seed: int, fold: int) -> np.ndarray:
    """Indices of the test rows used for NLPD: all of them (``cap`` None or >= ``num_test``), or a fixed
    random subset of ``cap``."""
    if cap is None or num_test <= cap:
        return np.arange(num_test)
    rng = np.random.default_rng([seed, fold, 7919])
    return np.sort(rng.choice(num_test, cap, replace=False))


def dataset_key(name: str, seed: int):
    """The study's PRNG key for a dataset; fold ``k`` uses ``jax.random.fold_in(key, k)``."""
    return jax.random.fold_in(jax.random.key(seed), sum(map(ord, name)))


def _block(x):
    return jax.block_until_ready(x)


@functools.cache
def adam(lr: float):
    """One optax.adam object per learning rate: the optimizer is a static argument of the jitted fits, and
    a fresh object (new closures, new hash) per fold would recompile the whole training loop every fold."""
    return optax.adam(lr)


@functools.cache
def adam_cosine(lr: float, steps: int):
    """Adam with the step size decaying from ``lr`` to 0 over ``steps`` (cosine), cached like :func:`adam`.
    The decay lets the stochastic mixture fit settle instead of jittering around its optimum."""
    return optax.adam(optax.cosine_decay_schedule(lr, steps))


# ----------------------------------------------------------------------------------------------------
# One fold


class Setup:
    """One fold for every method: the pipeline's preparation of the training rows, the test rows through
    its features, and (once fitted) DIRECT's mean field that the mixtures start from."""

    def __init__(
        self, fold, X_test, y_test, cfg: StudyConfig, key, nlpd_idx=None, *, train=None, progress=None
    ):
        self.fold, self.cfg, self.key = fold, cfg, key
        self.progress = progress  # the step loops' `progress` (None, True or a callable); not a setting
        self.train = train  # the raw training rows (X, y), for the eigenbasis preparation
        self.X_test = X_test
        self.Phi_test = fold_features(fold, X_test)
        # the test targets in the fit's units; `metrics` reports RMSE and NLPD in the targets' own
        self.unit = float(fold.y_scale)
        self.y_test = jnp.asarray((np.asarray(y_test, np.float64) - fold.y_offset) / self.unit, fold.y.dtype)
        self.nlpd_idx = np.arange(len(self.y_test)) if nlpd_idx is None else nlpd_idx
        self.sw = jnp.sqrt(fold.hyper.signal_variance)
        self.s2 = fold.hyper.noise_variance
        span = cfg.direct.noise_span
        self.noise_bounds = (self.s2 / span, self.s2 * span)
        self._direct = None
        self._eigen = None

    def eigen(self):
        """``(fold, Phi_test)`` of the default recipe's preparation (basis "eigen"), with this fold's GP
        hyperparameters and the default's own features (the paper's below 4,000 training rows; from there b =
        2000 Nyström features, 6000 from 20,000 rows up to 100,000 rows, 4000 random Fourier features above);
        prepared once per fold."""
        if self._eigen is None:
            if self.train is None:
                raise ValueError("this Setup was built without its training rows")
            fold = prepare_fold(
                self.key, *self.train, self.cfg.default, gp=(self.fold.hyper, self.fold.gp_info)
            )
            self._eigen = fold, fold_features(fold, self.X_test)
        return self._eigen

    stats = property(lambda self: self.fold.stats)
    prior_w = property(lambda self: self.fold.prior_w)

    def direct(self):
        """The ``DirectFit`` ``(model, timings, info)`` of ``kronvi.pipeline.fit_prepared``, fitted once per fold."""
        if self._direct is None:
            self._direct = fit_prepared(self.fold, self.cfg.direct)
        return self._direct

    @property
    def prior_n(self):
        """DIRECT's noise grid, as the mean-field fit chose it."""
        return self.direct()[0].prior_noise

    def selection(self) -> dict:
        _, timings, info = self.direct()
        sc = info.cv_scores
        return dict(
            noise_span=float(info.noise_span), select_seconds=timings.select_seconds,
            cv_mse=None if sc is None else [float(v) for v in sc.sq_error],
            cv_log_density=None if sc is None else [float(v) for v in sc.log_density],
        )  # fmt: skip

    def metrics(self, mean, log_density, Phi_test=None):
        """Test RMSE (all rows), NLPD and the density's largest error bound (``nlpd_idx`` rows)."""
        y = self.y_test
        Phi_test = self.Phi_test if Phi_test is None else Phi_test
        rmse = float(jnp.sqrt(jnp.mean((mean - y) ** 2))) * self.unit
        idx = self.nlpd_idx
        ld, err = log_density(Phi_test[idx], y[idx])
        return rmse, float(-np.mean(ld)) + float(np.log(self.unit)), err


def fold_setup(name: str, k: int, cfg: StudyConfig, *, data_dir=DEFAULT_DATA, seed: int = 0) -> Setup:
    """The :class:`Setup` that :func:`run_dataset` builds for fold ``k`` of a dataset (same keys): other
    scripts start from exactly the study's fold."""
    X, y, mask = kronvi.load_uci(pathlib.Path(data_dir) / name)
    train, test = fold_masks(mask, k)
    fkey = jax.random.fold_in(dataset_key(name, seed), k)
    fold = prepare_fold(fkey, X[train], y[train], cfg.direct)
    nlpd_idx = nlpd_subset(int(test.sum()), cfg.nlpd_points, seed, k)
    return Setup(fold, X[test], y[test], cfg, fkey, nlpd_idx, train=(X[train], y[train]))


# ----------------------------------------------------------------------------------------------------
# Methods


def _log_density(q, q_n, prior_w, prior_noise, Phi, y, *, tol, max_nodes):
    """``kronvi.model.predictive_log_density`` (more nodes, then float64, where a bound exceeds ``tol``); points that
    meet ``tol`` in neither (far-tail points below the rounding floor) keep their best value and its bound,
    which the record reports as ``nlpd_max_rel_error``."""
    try:
        ld, err = kronvi.model.predictive_log_density(q, q_n, prior_w, prior_noise, Phi, y, rtol=tol, max_nodes=max_nodes)
    except kronvi.DensityToleranceError as e:
        ld, err = e.log_density, e.rel_error_bound
    return np.array(ld, np.float64), np.array(err, np.float64)


def discrete_log_density(q, q_n, prior_w, prior_noise, Phi, y, *, tol=1e-2, max_nodes=512):
    """``(log q(y), largest relative error bound)`` of a discrete posterior (``kronvi.model.MeanField`` or
    ``kronvi.mixtures.Mixture``) by ``kronvi.model.predictive_log_density`` (points whose error bound exceeds ``tol``
    redone with more nodes, up to ``max_nodes``, then in float64); a mixture's is its components' weighted by alpha, summed
    in log space."""
    comps = [q] if isinstance(q, kronvi.model.MeanField) else [kronvi.model.MeanField(lg) for lg in q.logits]
    parts = [
        _log_density(c, q_n, prior_w, prior_noise, Phi, y, tol=tol, max_nodes=max_nodes)
        for c in comps
    ]
    lds = np.stack([np.asarray(p[0]) for p in parts])
    if isinstance(q, kronvi.mixtures.Mixture):
        lds = np.asarray(jax.nn.logsumexp(np.asarray(q.log_weights)[:, None] + lds, axis=0))
    return lds.reshape(-1), max(float(np.max(p[1])) for p in parts)


def _discrete_result(setup: Setup, q, q_n, fit_seconds, elbo, extra):
    pw, pn = setup.prior_w, setup.prior_n
    if isinstance(q, kronvi.mixtures.Mixture):
        mean, _ = kronvi.mixtures.predict_mixture(q, q_n, pw, pn, setup.Phi_test)
        marginals = kronvi.model.MeanField(q.log_marginals)
    else:
        mean, _ = kronvi.model.predict_regression(q, q_n, pw, pn, setup.Phi_test)
        marginals = q
    cfg = setup.cfg
    rmse, nlpd, err = setup.metrics(
        mean,
        lambda P, y: discrete_log_density(
            q, q_n, pw, pn, P, y, tol=cfg.nlpd_tol, max_nodes=cfg.nlpd_max_nodes
        ),
    )
    return dict(
        rmse=rmse, nlpd=nlpd, nlpd_max_rel_error=err,
        sparsity_pct=100.0 * float(kronvi.model.expected_sparsity(marginals, pw)), fit_seconds=fit_seconds,
        elbo=elbo, noise_variance=float(kronvi.model.noise_moments(q_n, pn)[2]), **setup.selection(), **extra,
    )  # fmt: skip


def run_direct_default(setup: Setup):
    """kronvi's default recipe (basis "eigen"), timed from its own preparation's statistics."""
    fold, Phi_test = setup.eigen()
    t0 = time.perf_counter()
    model, timings, info = fit_prepared(fold, setup.cfg.default)
    _block(model.q_w.logits)
    secs = time.perf_counter() - t0
    pw, pn, q, q_n = model.prior_w, model.prior_noise, model.q_w, model.q_noise
    # the model's predictive, as kronvi.predict gives it: test rows beyond the training rows' reach recentred
    mean = kronvi.model.predict_regression(q, q_n, pw, pn, Phi_test)[0] + support_shift(model.support, Phi_test)
    cfg = setup.cfg
    rmse, nlpd, err = setup.metrics(
        mean,
        lambda P, y: discrete_log_density(
            q, q_n, pw, pn, P, y - support_shift(model.support, P), tol=cfg.nlpd_tol, max_nodes=cfg.nlpd_max_nodes
        ),
        Phi_test,
    )
    return dict(
        rmse=rmse, nlpd=nlpd, nlpd_max_rel_error=err,
        sparsity_pct=100.0 * model.sparsity, fit_seconds=secs,  # stored zeros: none in the eigenbasis
        elbo=float(info.final_elbo), noise_variance=float(kronvi.model.noise_moments(q_n, pn)[2]),
        iterations=int(info.num_iter), eigen_stats_seconds=fold.stats_seconds,
        feature_map=info.feature_map, b=int(q.logits.shape[0]),  # the features the default chose
    )  # fmt: skip


def run_exact_blr(setup: Setup):
    """Exact Bayesian linear regression on the same features, the prior scale and the noise at the joint
    evidence maximizer (the default recipe's prior and the centre of its noise grid, as scikit-learn's
    BayesianRidge chooses them); NLPD in closed form on every test row."""
    fold, Phi_test = setup.eigen()
    t0 = time.perf_counter()
    s2, sw = fold.noise_variance, fold.prior_scale
    mean_w, cov = kronvi.gaussian.blr_posterior(fold.stats, sw, s2)
    _block(cov)
    secs = time.perf_counter() - t0
    m, v = kronvi.gaussian.predict_blr(mean_w, cov, s2, Phi_test)

    def log_density(P, y):
        mp, vp = kronvi.gaussian.predict_blr(mean_w, cov, s2, P)
        return np.asarray(norm.logpdf(y, mp, jnp.sqrt(vp))), 0.0  # closed form: no quadrature error

    rmse, nlpd, _ = setup.metrics(m, log_density, Phi_test)
    nlpd_all = float(-jnp.mean(norm.logpdf(setup.y_test, m, jnp.sqrt(v)))) + float(np.log(setup.unit))
    return dict(
        rmse=rmse, nlpd=nlpd, nlpd_all_rows=nlpd_all, sparsity_pct=0.0, fit_seconds=secs,
        elbo=float(kronvi.gaussian.blr_log_evidence(fold.stats, sw, s2)), noise_variance=float(s2), prior_scale=float(sw),
        eigen_stats_seconds=fold.stats_seconds,
    )  # fmt: skip


def run_direct_mf(setup: Setup):
    model, timings, info = setup.direct()
    elbo = float(info.final_elbo)
    extra = dict(iterations=int(info.num_iter))
    return _discrete_result(setup, model.q_w, model.q_noise, timings.fit_seconds, elbo, extra)


def in_precision(precision, fn, *trees):
    """``fn(*trees)`` computed in ``precision`` ("float32": as given; "float64": every array cast under
    ``jax.enable_x64``), the result's arrays returned as NumPy arrays in that precision."""
    if precision == "float32":
        return jax.tree.map(np.asarray, jax.block_until_ready(fn(*trees)))
    if precision != "float64":
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
    with jax.enable_x64(True):
        cast = [jax.tree.map(lambda a: jnp.asarray(np.asarray(a, np.float64)), t) for t in trees]
        return jax.tree.map(np.asarray, jax.block_until_ready(fn(*cast)))


def f64(fn, *trees):
    """``fn(*trees)`` in float64, as Python floats: at UCI scale float32 ELBO values carry rounding errors
    of up to about a nat (``docs/decisions/precision.md``), larger than the
    mixture-vs-mean-field differences they are compared for."""
    return jax.tree.map(float, in_precision("float64", fn, *trees))


def mf_elbo64(setup: Setup, q_w, q_n):
    return f64(kronvi.model.regression_elbo, setup.stats, q_w, q_n, setup.prior_w, setup.prior_n)


def unbiased64(setup: Setup, key, q, qn, *, num_samples=None):
    """Unbiased float64 ELBO estimate and its standard error from ``num_samples`` (default
    ``sgd_eval_samples``) draws, in chunks of ``sgd_eval_chunk``."""
    cfg = setup.cfg
    return f64(
        lambda *a: kronvi.mixtures.mixture_elbo_unbiased(
            key, *a, num_samples=num_samples or cfg.sgd_eval_samples, chunk_size=cfg.sgd_eval_chunk
        ),
        setup.stats, q, qn, setup.prior_w, setup.prior_n,
    )  # fmt: skip


def _mean_field(setup: Setup):
    """``(q_w, q_n, elbo, fit seconds)`` of DIRECT's mean field."""
    model, timings, info = setup.direct()
    return model.q_w, model.q_noise, float(info.final_elbo), timings.fit_seconds


def run_mix_sgd(setup: Setup):
    cfg = setup.cfg
    q_w, q_n, mf_elbo, mf_secs = _mean_field(setup)
    t0 = time.perf_counter()
    k_init, k_fit, k_eval = jax.random.split(jax.random.fold_in(setup.key, 2), 3)
    q0 = kronvi.mixtures.mixture_from_mean_field(k_init, q_w, cfg.mix_components, noise_scale=cfg.sgd_init_noise)
    q, qn, _, info = kronvi.mixtures.fit_mixture_sgd(
        k_fit, setup.stats, setup.prior_w, setup.prior_n, init=(q0, q_n),
        optimizer=adam_cosine(cfg.sgd_lr, cfg.sgd_steps),
        num_steps=cfg.sgd_steps, num_samples=cfg.sgd_samples, estimator=cfg.sgd_estimator,
        progress=setup.progress,
    )  # fmt: skip
    _block(q.logits)
    secs = time.perf_counter() - t0
    # Compared in float64 (same q and statistics): float32 rounding exceeds the differences at large n.
    mf64 = mf_elbo64(setup, q_w, q_n)
    est, se = unbiased64(setup, k_eval, q, qn)
    est0, se0 = unbiased64(setup, k_eval, q0, q_n, num_samples=cfg.sgd_eval_chunk)  # for the record only
    fallback = not est >= mf64
    extra = dict(
        mf_elbo=mf64, mf_elbo_f32=mf_elbo, mix_elbo=est, mix_elbo_se=se, mix_start_elbo=est0,
        mix_start_elbo_se=se0, fallback_to_mf=fallback, mixture_seconds=secs,
        weights=[float(a) for a in q.weights], compared_in="float64", estimator=cfg.sgd_estimator,
        eval_samples=cfg.sgd_eval_samples,
    )  # fmt: skip
    total = mf_secs + secs
    if fallback:
        return _discrete_result(setup, q_w, q_n, total, mf_elbo, extra)
    return _discrete_result(setup, q, qn, total, est, extra)


def run_mix_lb(setup: Setup):
    cfg = setup.cfg
    q_w, q_n, mf_elbo, mf_secs = _mean_field(setup)
    t0 = time.perf_counter()
    k_init, k_eval = jax.random.split(jax.random.fold_in(setup.key, 3))
    q0 = kronvi.mixtures.mixture_from_mean_field(k_init, q_w, cfg.mix_components, noise_scale=cfg.mix_init_noise)
    q, qn, log_c, info = in_precision(
        cfg.lb_precision,
        lambda *a: kronvi.mixtures.fit_mixture_bound(
            *a[:3], init=a[3:], method="lbfgs", max_iter=cfg.lb_max_iter, tol=cfg.lb_tol
        ),
        setup.stats, setup.prior_w, setup.prior_n, q0, q_n,
    )  # fmt: skip
    secs = time.perf_counter() - t0
    # Compared in float64 (same q and statistics): float32 rounding exceeds the differences at large n.
    mf64 = mf_elbo64(setup, q_w, q_n)
    pw, pn, st = setup.prior_w, setup.prior_n, setup.stats
    bound = f64(kronvi.mixtures.mixture_elbo_bound, st, q, qn, log_c, pw, pn)
    bound0 = f64(kronvi.mixtures.mixture_elbo_bound, st, q0, q_n, q0.log_marginals, pw, pn)  # the fit's start
    est, se = unbiased64(setup, k_eval, q, qn)
    fallback = not bound >= mf64
    extra = dict(
        mf_elbo=mf64, mf_elbo_f32=mf_elbo, mix_bound=bound, fit_precision=cfg.lb_precision,
        mix_start_bound=bound0, mix_elbo=est, mix_elbo_se=se, fallback_to_mf=fallback, mixture_seconds=secs,
        iterations=int(info.num_iter), weights=[float(a) for a in q.weights], compared_in="float64",
    )  # fmt: skip
    total = mf_secs + secs
    if fallback:
        return _discrete_result(setup, q_w, q_n, total, mf_elbo, extra)
    q = kronvi.mixtures.Mixture(jnp.asarray(q.logits, jnp.float32), jnp.asarray(q.weight_logits, jnp.float32))
    qn = kronvi.model.MeanField(jnp.asarray(qn.logits, jnp.float32))
    return _discrete_result(setup, q, qn, total, bound, extra)


def _gaussian_result(setup: Setup, q, s2, fit_seconds, extra):
    mean, _ = kronvi.gaussian.predict_gaussian_mf(q, s2, setup.Phi_test)
    elbo = float(kronvi.gaussian.gaussian_mf_elbo(setup.stats, q, s2, prior_scale=setup.sw))

    def log_density(P, y):
        m, v = kronvi.gaussian.predict_gaussian_mf(q, s2, P)
        return np.asarray(norm.logpdf(y, m, jnp.sqrt(v))), 0.0  # closed form: no quadrature error

    rmse, nlpd, _ = setup.metrics(mean, log_density)
    return dict(
        rmse=rmse, nlpd=nlpd, sparsity_pct=0.0, fit_seconds=fit_seconds, elbo=elbo, noise_variance=float(s2),
        **extra,
    )  # fmt: skip


def run_gauss_exact(setup: Setup):
    t0 = time.perf_counter()
    q, s2, info = kronvi.gaussian.fit_gaussian_mf(
        setup.stats, prior_scale=setup.sw, noise_variance=setup.s2, noise_bounds=setup.noise_bounds
    )
    _block(q.mean)
    secs = time.perf_counter() - t0
    return _gaussian_result(setup, q, s2, secs, dict(iterations=int(info.num_iter)))


def run_reparam(setup: Setup):
    cfg = setup.cfg
    fold = setup.fold
    b = 2 * fold.features.frequencies.shape[1]
    n_total = fold.X.shape[0] + len(setup.y_test)
    steps = cfg.reparam_steps_small if n_total < 3000 else cfg.reparam_steps_large
    # Weights in prior-standard-deviation units (w = sw * u, features scaled by sw): Adam's step size is
    # then independent of the target units; the model and its ELBO are unchanged. The training features are
    # computed once (counted in the fit time): gathering minibatch rows is ~7x cheaper than recomputing
    # 100 x 2000 cos/sin features every step.
    u0 = kronvi.gaussian.GaussianMeanField(jnp.zeros((b,)), jnp.full((b,), float(np.log(cfg.reparam_init_std))))
    t0 = time.perf_counter()
    Phi_train = setup.sw * kronvi.inputs.rff_features(fold.features, fold.X)
    qu, s2, info = kronvi.gaussian.fit_gaussian_reparam(
        jax.random.fold_in(setup.key, 4), Phi_train, fold.y, init=(u0, setup.s2), prior_scale=1.0,
        optimizer=adam(cfg.reparam_lr), num_steps=steps, batch_size=cfg.reparam_batch,
        num_samples=cfg.reparam_samples, noise_bounds=setup.noise_bounds, progress=setup.progress,
    )  # fmt: skip
    _block(qu.mean)
    secs = time.perf_counter() - t0
    del Phi_train
    q = kronvi.gaussian.GaussianMeanField(setup.sw * qu.mean, qu.log_std + jnp.log(setup.sw))
    last = np.asarray(info.steps.elbo[-min(50, steps) :])
    return _gaussian_result(setup, q, s2, secs, dict(steps=steps, last_minibatch_elbo=float(last.mean())))


def run_elrg(setup: Setup, *, rank: int):
    """ELRG (kronvi.gaussian.fit_elrg, local reparameterization) with REPARAM's protocol: prior-sd units (features
    multiplied by sw, prior N(0, I)), the training features computed once inside the fit time, minibatches of
    ``reparam_batch`` rows with ``reparam_samples`` draws per row, Adam at ``reparam_lr``, the start at mean 0
    with variances ``reparam_init_std``^2 and factors a tenth of that scale. The noise variance is fixed at
    exact-blr's, the exact evidence maximizer of the default recipe's preparation (the same features below
    4,000 training rows, the default's own from there; its float64 eigendecomposition is not counted in the
    fit time, as for exact-blr)."""
    cfg = setup.cfg
    fold = setup.fold
    eigen_fold, _ = setup.eigen()
    s2 = float(eigen_fold.noise_variance)
    b = 2 * fold.features.frequencies.shape[1]
    n_total = fold.X.shape[0] + len(setup.y_test)
    steps = cfg.reparam_steps_small if n_total < 3000 else cfg.reparam_steps_large
    k_init, k_fit = jax.random.split(jax.random.fold_in(setup.key, 5))
    z = jax.random.normal(k_init, (b, rank))
    u0 = kronvi.gaussian.ELRG(
        jnp.zeros((b,)), jnp.full((b,), 2.0 * float(np.log(cfg.reparam_init_std))),
        0.1 * cfg.reparam_init_std * z / np.sqrt(max(rank, 1)),
    )  # fmt: skip
    t0 = time.perf_counter()
    Phi_train = setup.sw * kronvi.inputs.rff_features(fold.features, fold.X)
    qu, info = kronvi.gaussian.fit_elrg(
        k_fit, None, 1.0, s2, rank=rank, objective="local-reparam", init=u0, data=(Phi_train, fold.y),
        optimizer=adam(cfg.reparam_lr), num_steps=steps, batch_size=cfg.reparam_batch,
        num_samples=cfg.reparam_samples, progress=setup.progress,
    )  # fmt: skip
    _block(qu.mean)
    secs = time.perf_counter() - t0
    del Phi_train
    sw = setup.sw
    q = kronvi.gaussian.ELRG(sw * qu.mean, qu.log_diag + 2.0 * jnp.log(sw), sw * qu.factors)
    mean, _ = kronvi.gaussian.predict_elrg(q, s2, setup.Phi_test)

    def log_density(P, y):
        m, v = kronvi.gaussian.predict_elrg(q, s2, P)
        return np.asarray(norm.logpdf(y, m, jnp.sqrt(v))), 0.0  # closed form: no quadrature error

    rmse, nlpd, _ = setup.metrics(mean, log_density)
    last = np.asarray(info.steps.elbo[-min(50, steps) :])
    return dict(
        rmse=rmse, nlpd=nlpd, sparsity_pct=0.0, fit_seconds=secs,
        elbo=float(kronvi.gaussian.elrg_elbo(setup.stats, q, s2, prior_scale=sw)), noise_variance=s2, rank=rank,
        steps=steps, last_minibatch_elbo=float(last.mean()), eigen_stats_seconds=eigen_fold.stats_seconds,
    )  # fmt: skip


def runner(method: str):
    """The function that runs ``method`` on a :class:`Setup`: ``RUNNERS[method]`` or, for ``elrg-<rank>``,
    :func:`run_elrg` at that rank."""
    match = ELRG_METHOD.fullmatch(method)
    if match:
        return functools.partial(run_elrg, rank=int(match.group(1)))
    return RUNNERS[method]


def is_method(method: str) -> bool:
    return method in METHODS or ELRG_METHOD.fullmatch(method) is not None


RUNNERS = {
    "direct-mf": run_direct_default,
    "exact-blr": run_exact_blr,
    "direct-mf-sparse": run_direct_mf,
    "direct-mix5-sgd": run_mix_sgd,
    "direct-mix5-lb": run_mix_lb,
    "reparam-mf": run_reparam,
    "gauss-mf-exact": run_gauss_exact,
}


# ----------------------------------------------------------------------------------------------------
# Driver


def summarize_record(dataset, method, n, d, per_fold, settings):
    def ms(key):
        v = np.asarray([f[key] for f in per_fold], float)
        return float(v.mean()), (float(v.std(ddof=1)) if len(v) > 1 else 0.0)

    rmse, rmse_sd = ms("rmse")
    nlpd, nlpd_sd = ms("nlpd")
    rec = dict(
        dataset=dataset, method=method, n=n, d=d, rmse_mean=rmse, rmse_sd=rmse_sd, nlpd_mean=nlpd,
        nlpd_sd=nlpd_sd, sparsity_pct=ms("sparsity_pct")[0], fit_seconds=ms("fit_seconds")[0],
        stats_seconds=ms("stats_seconds")[0], init_seconds=ms("init_seconds")[0], folds=len(per_fold),
        elbo_mean=ms("elbo")[0],
    )  # fmt: skip
    if "select_seconds" in per_fold[0]:
        rec["select_seconds"] = ms("select_seconds")[0]
        spans = [f["noise_span"] for f in per_fold]
        rec["noise_span_counts"] = {str(s): spans.count(s) for s in sorted(set(spans))}
    if "fallback_to_mf" in per_fold[0]:
        rec["fallback_folds"] = int(sum(bool(f["fallback_to_mf"]) for f in per_fold))
        rec["mf_elbo_mean"] = ms("mf_elbo")[0]
        rec["mix_elbo_mean"] = ms("mix_elbo")[0]
        rec["mixture_seconds"] = ms("mixture_seconds")[0]
    rec["settings"] = settings
    rec["per_fold"] = per_fold
    return rec


def run_dataset(folder, methods, cfg: StudyConfig, *, seed, max_folds, settings, log, progress=None):
    name = folder.name
    X, y, mask = kronvi.load_uci(folder)
    n, d = X.shape
    K = mask.shape[1] if max_folds is None else min(max_folds, mask.shape[1])
    key = dataset_key(name, seed)
    log(f"== {name}: n={n} d={d} folds={K}")
    per_method = {m: [] for m in methods}
    t_start = time.perf_counter()
    for k in range(K):
        train, test = fold_masks(mask, k)
        fkey = jax.random.fold_in(key, k)
        fold = prepare_fold(fkey, X[train], y[train], cfg.direct)
        nlpd_idx = nlpd_subset(int(test.sum()), cfg.nlpd_points, seed, k)
        setup = Setup(
            fold, X[test], y[test], cfg, fkey, nlpd_idx, train=(X[train], y[train]), progress=progress
        )
        t_init, t_stats = fold.init_seconds, fold.stats_seconds
        parts = []
        for m in methods:
            res = runner(m)(setup)
            uses_stats = not (m == "reparam-mf" or ELRG_METHOD.fullmatch(m))  # these fit from the rows
            res.update(
                fold=k, init_seconds=t_init, stats_seconds=t_stats if uses_stats else 0.0,
                gp_degenerate=bool(fold.gp_info.degenerate), nlpd_points=len(nlpd_idx),
            )  # fmt: skip
            per_method[m].append(res)
            fb = "*" if res.get("fallback_to_mf") else ""
            if m == "direct-mf-sparse":
                fb += f" span {res['noise_span']:g} (cv {res['select_seconds']:.2f}s)"
            parts.append(
                f"{m}: rmse {res['rmse']:.4g} nlpd {res['nlpd']:.3f} fit {res['fit_seconds']:.2f}s{fb}"
            )
        elapsed = time.perf_counter() - t_start
        log(
            f"  [{name} fold {k + 1}/{K}] init {t_init:.2f}s stats {t_stats:.2f}s | " + " | ".join(parts)
            + f" | elapsed {elapsed:.0f}s, eta {elapsed / (k + 1) * (K - k - 1):.0f}s"
        )  # fmt: skip
    recs = [summarize_record(name, m, n, d, per_method[m], settings) for m in methods]
    for r in recs:
        log(
            f"  {name:14s} {r['method']:16s} RMSE {r['rmse_mean']:.4g} +- {r['rmse_sd']:.3g}  NLPD "
            f"{r['nlpd_mean']:.3f}  sparsity {r['sparsity_pct']:.1f}%  fit {r['fit_seconds']:.2f}s  stats "
            f"{r['stats_seconds']:.2f}s  init {r['init_seconds']:.2f}s"
            + (f"  fallback {r['fallback_folds']}/{K}" if "fallback_folds" in r else "")
        )
    log(f"  {name} done in {time.perf_counter() - t_start:.0f}s")
    return recs


def _nlpd_points(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'all', got {text!r}")
    return v


def parse_args(argv=None):
    p = study_cli.Parser(
        prog="uci.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="folder of dataset folders")
    p.add_argument("--datasets", default="all", help="comma-separated folder names (or paths), or 'all'")
    p.add_argument(
        "--methods", default="direct-mf,reparam-mf,gauss-mf-exact",
        help=f"comma list of {METHODS} and elrg-<rank> (e.g. elrg-4), or 'all' (the former)",
    )  # fmt: skip
    p.add_argument(
        "--json", required=True, help="output JSON list (rewritten atomically after every dataset)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume", action="store_true",
        help="keep the records already in --json (they must have this run's settings) and skip their pairs",
    )  # fmt: skip
    mode.add_argument("--overwrite", action="store_true", help="replace an existing --json")
    p.add_argument(
        "--rerun-mismatched", action="store_true",
        help="with --resume: rerun this run's (dataset, method) pairs whose records have other settings",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--direct-fit", default="cavi", choices=["cavi", "lbfgs"], help="lbfgs: the paper's recipe"
    )
    p.add_argument(
        "--direct-starts", default="prior,gaussian",
        help="comma list of DIRECT mean-field starts (prior, gaussian); the highest final ELBO is kept",
    )  # fmt: skip
    p.add_argument("--max-folds", type=int, default=None, help="run only the first K folds")
    p.add_argument(
        "--nlpd-points", type=_nlpd_points, default=StudyConfig.nlpd_points,
        help="test rows per fold for NLPD, or 'all' (the default)",
    )  # fmt: skip
    p.add_argument("--sgd-steps", type=int, default=StudyConfig.sgd_steps)
    p.add_argument("--sgd-samples", type=int, default=StudyConfig.sgd_samples, help="draws per SGD step")
    p.add_argument(
        "--sgd-init-noise", type=float, default=StudyConfig.sgd_init_noise,
        help="logit perturbation of the SGD mixture's components around the mean-field fit",
    )  # fmt: skip
    p.add_argument(
        "--sgd-estimator", default=StudyConfig.sgd_estimator, choices=kronvi.mixtures.ESTIMATORS,
        help="entropy-gradient estimator (kronvi.mixtures.mixture_elbo_estimate)",
    )  # fmt: skip
    p.add_argument("--lb-iters", type=int, default=StudyConfig.lb_max_iter)
    p.add_argument(
        "--lb-precision", default=StudyConfig.lb_precision, choices=("float32", "float64"),
        help="precision of the Theorem-3 bound fit (float32 bound values carry ~1 nat of rounding at UCI scale)",
    )  # fmt: skip
    p.add_argument("--lb-tol", type=float, default=StudyConfig.lb_tol, help="L-BFGS gradient-norm tolerance")
    p.add_argument(
        "--num-features", type=int, default=None,
        help="b (even) of every method; default: 2000, and the default recipe's (direct-mf, exact-blr) by the "
        "training rows and map (kronvi.pipeline.default_num_frequencies: 2000 Nyström features from 4,000 rows, "
        "6000 from 20,000 up to 100,000 rows, 4000 random Fourier features above)",
    )
    p.add_argument(
        "--noise-span",
        type=float,
        default=StudyConfig.direct.noise_span,
        help="noise grid s2 x [1/span, span]",
    )
    p.add_argument(
        "--noise-cv", default="10,3,1",
        help="DIRECT noise grids s2 x [1/span, span] to choose from per fold by inner 5-fold CV (pooled-variance "
        "held-out log density; 1 = noise fixed at s2); 'none' = the paper's single grid of --noise-span",
    )  # fmt: skip
    p.add_argument("--reparam-steps", type=int, default=None, help="override the paper's 1000 / 10000 steps")
    p.add_argument("--log", help="also append progress lines to this file")
    p.add_argument(
        "--merge", default=None,
        help="A.json,B.json,...: write the records of parallel runs over disjoint datasets (same settings) to "
        "--json, and run nothing",
    )  # fmt: skip
    p.add_argument(
        "--progress", action="store_true",
        help="show a bar (tqdm, else lines on stderr) for the SGD, REPARAM and ELRG step loops; not recorded",
    )  # fmt: skip
    study_cli.add_cache_option(p)
    return p.parse_args(argv)


OPTION_RANGES = {
    "seed": (0, study_cli.MAX_SEED), "max_folds": (1, None), "sgd_steps": (1, None), "sgd_samples": (1, None),
    "sgd_init_noise": (0.0, None), "lb_iters": (1, None), "lb_tol": (0.0, None), "num_features": (2, None),
    "reparam_steps": (1, None),
}  # fmt: skip


def option_errors(args) -> list[str]:
    """One line per bad option value (none: an empty list); checks everything that needs no data."""
    errors = study_cli.option_errors(args, OPTION_RANGES)
    if args.num_features is not None and args.num_features >= 2 and args.num_features % 2:
        errors.append(f"--num-features must be an even number (cos and sin pairs), got {args.num_features}")
    if not args.noise_span > 1.0 or not np.isfinite(args.noise_span):  # NaN fails both
        errors.append(f"--noise-span must be a finite number > 1, got {args.noise_span}")
    try:
        parse_noise_cv(args.noise_cv)
    except ValueError as err:
        errors.append(str(err))
    starts = [x.strip() for x in args.direct_starts.split(",")]
    if not set(starts) <= {"prior", "gaussian"} or not starts:
        errors.append(f"--direct-starts must be a comma list of prior, gaussian; got {args.direct_starts!r}")
    methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",")]
    bad = [m for m in methods if not is_method(m)]
    if bad:
        errors.append(f"unknown method(s) {bad}; choose from {METHODS} or elrg-<rank>")
    ranks = [int(m.split("-")[1]) for m in methods if ELRG_METHOD.fullmatch(m)]
    num_features = args.num_features or 2 * StudyConfig.direct.num_frequencies
    if any(not 1 <= r <= num_features for r in ranks):
        errors.append(f"elrg-<rank>: ranks must be in [1, --num-features ({num_features})], got {ranks}")
    if args.rerun_mismatched and not args.resume:
        errors.append("--rerun-mismatched needs --resume")
    return errors


def config_from_args(args) -> StudyConfig:
    errors = option_errors(args)
    if errors:
        raise study_cli.UsageError(errors[0])
    noise_cv = parse_noise_cv(args.noise_cv)
    recipe = kronvi.Features(
        noise_span=args.noise_span, noise_cv=noise_cv, starts=tuple(x.strip() for x in args.direct_starts.split(","))
    )
    direct = resolve_config(DirectConfig(
        recipe=recipe, num_frequencies=(args.num_features or 2 * StudyConfig.direct.num_frequencies) // 2,
        method=args.direct_fit,
    ))  # fmt: skip
    steps = {}
    if args.reparam_steps is not None:
        steps = dict(reparam_steps_small=args.reparam_steps, reparam_steps_large=args.reparam_steps)
    default = resolve_config(DirectConfig(num_frequencies=args.num_features and args.num_features // 2))
    return StudyConfig(
        direct=direct, default=default, nlpd_points=args.nlpd_points, sgd_steps=args.sgd_steps, sgd_samples=args.sgd_samples,
        sgd_init_noise=args.sgd_init_noise, sgd_estimator=args.sgd_estimator, lb_max_iter=args.lb_iters,
        lb_tol=args.lb_tol, lb_precision=args.lb_precision, **steps,
    )  # fmt: skip


def check_outputs(args, folders) -> None:
    """Raises ``ValueError``/``OSError`` (one line) unless --json and --log can be written: their folders
    exist and take files, neither is an input, --json exists only with --resume or --overwrite, and --log
    (appended to) is not --json."""
    inputs = input_files(folders)
    kronvi.files.check_output_path(
        args.json, option="--json", inputs=inputs, overwrite=args.resume or args.overwrite, exists_hint=EXISTS_HINT
    )  # fmt: skip
    if args.log:
        kronvi.files.check_output_path(args.log, option="--log", inputs=inputs + [pathlib.Path(args.json)], overwrite=True)
        if os.path.realpath(args.log) == os.path.realpath(args.json):
            raise ValueError(f"--log {args.log!r} is the --json file")


def main(argv=None):
    args = parse_args(argv)
    if args.merge is not None:
        return merge_main(args)
    errors = option_errors(args)
    if errors:
        return study_cli.report("uci.py", errors)
    methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",")]
    try:
        cfg = config_from_args(args)
        folders = dataset_folders(pathlib.Path(args.data_dir), args.datasets)
        check_outputs(args, folders)
        out = pathlib.Path(args.json)
        settings = study_settings(cfg, seed=args.seed, max_folds=args.max_folds)
        pairs = {(f.name, m) for f in folders for m in methods}
        records = records_to_keep(
            out, settings, pairs, resume=args.resume, overwrite=args.overwrite,
            rerun_mismatched=args.rerun_mismatched,
        )  # fmt: skip
        check_datasets(folders)
        folders = list_datasets(pathlib.Path(args.data_dir), args.datasets)
    except (study_cli.UsageError, RefusedError, ValueError, OSError) as err:
        return study_cli.report("uci.py", err)
    done = {(r["dataset"], r["method"]) for r in records}
    logf = open(args.log, "a") if args.log else None  # noqa: SIM115

    def log(msg):
        print(msg, flush=True)
        if logf:
            logf.write(msg + "\n")
            logf.flush()

    cache = study_cli.compilation_cache(args)
    log(f"# started {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()}; compilation cache {cache}")
    log(f"# command: python experiments/uci.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
    log(
        f"# uci study: jax {jax.__version__} on {jax.devices()[0].platform} ({platform.machine()}, "
        f"{os.cpu_count()} cores), {len(folders)} datasets, methods {methods}; settings {settings}"
    )
    t0 = time.perf_counter()
    try:
        for i, folder in enumerate(folders):
            todo = [m for m in methods if (folder.name, m) not in done]
            if not todo:
                log(f"== {folder.name}: already in {out}, skipped")
                continue
            log(f"[{i + 1}/{len(folders)}] {time.perf_counter() - t0:.0f}s elapsed")
            recs = run_dataset(
                folder, todo, cfg, seed=args.seed, max_folds=args.max_folds, settings=settings, log=log,
                progress=True if args.progress else None,
            )  # fmt: skip
            records.extend(recs)
            if args.resume:  # another --resume run may be writing to the same file: merge, never replace
                write_merged(out, records)
            else:
                write_json(out, records)
    except RefusedError as err:
        if logf:
            logf.close()
        return study_cli.report("uci.py", err)
    except KeyboardInterrupt:
        kept = f"{len(records)} record(s) kept in {out}" if out.exists() else f"nothing written to {out}"
        log(f"# interrupted after {time.perf_counter() - t0:.0f}s: {kept}")
        if logf:
            logf.close()
        return study_cli.EXIT_INTERRUPTED
    log(
        f"# total {time.perf_counter() - t0:.0f}s, finished {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()}"
    )
    if logf:
        logf.close()
    return 0


if __name__ == "__main__":
    study_cli.run(main)
