"""Hostile, malformed and edge-case inputs against the installed kronvi: issue 28's cases and more.

Every case runs what a careful user or an attacker would run and says what happens now: ``ok`` (the
expected behaviour: a one-line error naming the argument before any compute, nothing on disk touched, a
correct answer, ...) or ``NOT OK`` (with what happened instead), or ``manual`` where only reading the code
can tell. Cases run in this process on tiny data unless they need a process of their own (a file that
could run code, Ctrl-C, thread counts); the whole list takes a few minutes on two cores.

Usage:
  python experiments/investigations/hostile_inputs.py \
      --out experiments/investigations/results/hostile_inputs.md
  python experiments/investigations/hostile_inputs.py --only model-file   # cases whose group/text match
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gzip
import inspect
import io
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
import zipfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
for _p in (EXPERIMENTS, EXPERIMENTS / "tests"):
    sys.path.insert(0, str(_p))

import classification  # noqa: E402
import uci  # noqa: E402
from study_folds import write_folds, write_sine_folds  # noqa: E402

from kronvi import cli  # noqa: E402

KRONVI_DIR = pathlib.Path(inspect.getfile(kronvi)).parent  # the kronvi under test
CLI_MODULE = ".".join(("kronvi", "__main__"))  # the module a crafted file names (a string: never imported here)
CASES = []


def case(group: str, text: str):
    """Registers ``fn(tmp) -> (ok, what happened)``; ``ok`` None means 'read the code'."""

    def register(fn):
        CASES.append((group, text, fn))
        return fn

    return register


# ----------------------------------------------------------------------------------------------------
# Helpers


def run_main(main, argv, patches=()):
    """``(exit code, stdout, stderr)`` of ``main(argv)`` in this process, with ``patches`` (``(object,
    name, value)``) applied for the call. An exception other than SystemExit is re-raised."""
    out, err = io.StringIO(), io.StringIO()
    saved = [(obj, name, getattr(obj, name, None)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (1 if e.code else 0)
                if not isinstance(e.code, int) and e.code:
                    err.write(str(e.code) + "\n")
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
    return code, out.getvalue(), err.getvalue()


def computes(*args, **kwargs):
    raise RuntimeError("COMPUTE STARTED")


def verdict_cli(code, out, err, message="", want=2):
    """ok when the run exited ``want`` with one error line containing ``message`` and no traceback."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    ok = code == want and "Traceback" not in err and len(lines) == 1 and message in last
    return ok, f"exit {code}: {last[:150] or '(no message)'}" + ("" if len(lines) <= 1 else f" (+{len(lines) - 1} lines)")


def raised_by(e: BaseException) -> str:
    """Where the exception was raised: 'kronvi', 'sklearn', or the outside library it came from."""
    frames = traceback.extract_tb(e.__traceback__)
    path = frames[-1].filename if frames else ""
    for name in ("kronvi", "sklearn", "jax", "numpy", "scipy", "optax", "jaxopt"):
        if f"/{name}/" in path:
            return name
    return pathlib.Path(path).name or "?"


def clean_error(fn, *names):
    """ok when ``fn()`` raises a ValueError/TypeError from kronvi (or scikit-learn's validation) whose message
    names one of ``names``."""
    try:
        fn()
    except (ValueError, TypeError) as e:
        where = raised_by(e)
        msg = str(e).splitlines()[0][:150]
        named = not names or any(n in str(e) for n in names)
        return where in ("kronvi", "sklearn") and named, f"{type(e).__name__} from {where}: {msg}"
    except Exception as e:  # noqa: BLE001
        return False, f"{type(e).__name__} from {raised_by(e)}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    return False, "no error"


def sine_data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def write_csv(path, X, y):
    np.savetxt(path, np.column_stack([X, y]), delimiter=",")
    return path


def class_folds(folder, n=40, seed=0, labels=(0.0, 1.0)):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, labels[1], labels[0])
    write_folds(folder, X, y, np.eye(2, dtype=int)[np.arange(n) % 2])
    return folder


def uci_argv(data, out, *extra, datasets="small", methods="direct-mf"):
    return [
        "--data-dir", str(data), "--datasets", datasets, "--methods", methods, "--json", str(out),
        "--num-features", "16", "--max-folds", "1", *extra,
    ]  # fmt: skip


def cls_argv(data, out, *extra, datasets="tiny"):
    return [
        "--data-dir", str(data), "--datasets", datasets, "--methods", "direct-logistic", "--json", str(out),
        "--folds", "2", "--num-frequencies", "3", "--max-iter", "3", "--prior-scales", "1", *extra,
    ]  # fmt: skip


def fake_uci_records(folder, methods, cfg, *, settings, **kwargs):
    return [dict(dataset=folder.name, method=m, settings=settings) for m in methods]


def fake_cls_records(name, dataset, methods, args, records, rel):
    records.extend(dict(dataset=name, method=m) for m in methods)
    rel.setdefault(name, {}).update({m: {} for m in methods})


def fake_fold(*args, **kwargs):
    fields = {f: 0.0 for f in kronvi.cv.FoldResult._fields}
    return kronvi.cv.FoldRun(None, kronvi.cv.FoldResult(**{**fields, "num_iter": 1}))


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def small_model(b=6, m=15):
    rng = np.random.default_rng(0)
    pw, pn = kronvi.model.gaussian_prior(b, 0.8, levels=m), kronvi.model.noise_prior(0.3, levels=5)
    q = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, m)), jnp.float32))
    return kronvi.DirectModel(pw, pn, q, kronvi.model.MeanField.from_prior(pn))


def model_file(tmp, name="good.npz"):
    path = tmp / name
    kronvi.save_model(path, small_model())
    return path


def rewrite_model(src, dst, edit_header=None, member=None, member_writer=None, extra=()):
    """Copies a model archive, editing its JSON header and/or replacing one member's bytes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename == "__kronvi__.npy" and edit_header is not None:
                header = json.loads(str(np.lib.format.read_array(io.BytesIO(zin.read(info)))))
                text = edit_header(header)
                text = json.dumps(header) if text is None else text
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.array(text))
                zout.writestr(info.filename, buf.getvalue())
            elif info.filename == member:
                with zout.open(info.filename, "w", force_zip64=True) as fh:
                    member_writer(fh)
            else:
                zout.writestr(info, zin.read(info))
        for name, data in extra:
            zout.writestr(name, data)
    return dst


def load_verdict(path, message, **kw):
    try:
        kronvi.load_model(path, **kw)
    except ValueError as e:
        ok = message in str(e) and "pickle" not in str(e)
        return ok, f"ValueError: {str(e)[:160]}"
    except Exception as e:  # noqa: BLE001
        return False, f"{type(e).__name__} from {raised_by(e)}: {str(e)[:150]}"
    return False, "loaded without an error"


def peak_bytes(fn):
    tracemalloc.start()
    try:
        result = fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, peak


def child_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(KRONVI_DIR.parent)
    env.update(extra)
    return env


# ----------------------------------------------------------------------------------------------------
# Data loss


@case("data loss", "classification.py --json <its own data.csv.gz> (also with --overwrite)")
def _(tmp):
    data = tmp / "data"
    src = class_folds(data / "tiny") / "data.csv.gz"
    before = src.read_bytes()
    results = []
    for extra in ([], ["--overwrite"]):
        code, out, err = run_main(
            classification.main, cls_argv(data, src, *extra), [(classification, "run_dataset", computes)]
        )
        results.append(verdict_cli(code, out, err, "input"))
    ok = all(r[0] for r in results) and src.read_bytes() == before
    return ok, results[-1][1] + ("" if src.read_bytes() == before else "; THE INPUT WAS OVERWRITTEN")


@case("data loss", "classification.py --json PATH without --append drops other datasets' records in PATH")
def _(tmp):
    data = tmp / "data"
    class_folds(data / "tiny")
    out = tmp / "res.json"
    out.write_text(json.dumps([{"dataset": "other", "method": "direct-logistic"}]))
    code, o, e = run_main(classification.main, cls_argv(data, out), [(classification, "run_dataset", computes)])
    kept = any(r.get("dataset") == "other" for r in json.loads(out.read_text()))
    ok, what = verdict_cli(code, o, e, "exists")
    return ok and kept, what + ("" if kept else "; the other dataset's record is gone")


@case("data loss", "uci.py --overwrite --json <its own data.csv.gz>")
def _(tmp):
    data = tmp / "data"
    write_sine_folds(data / "small", n=40)
    src = data / "small" / "data.csv.gz"
    before = src.read_bytes()
    code, o, e = run_main(uci.main, uci_argv(data, src, "--overwrite"), [(uci, "run_dataset", fake_uci_records)])
    ok, what = verdict_cli(code, o, e, "input")
    same = src.read_bytes() == before
    return ok and same, what + ("" if same else "; THE INPUT WAS OVERWRITTEN")


@case("data loss", "kronvi fit --json DIR/nosuchdir/../out.json: refused before the fit")
def _(tmp):
    code, o, e = run_main(cli.main, ["fit", "--json", str(tmp / "nosuchdir" / ".." / "out.json")],
                          [(cli, "run_fold", computes)])  # fmt: skip
    return verdict_cli(code, o, e, "no such folder")


@case("data loss", "uci.py --json into a missing folder: refused before the compute")
def _(tmp):
    data = tmp / "data"
    write_sine_folds(data / "small", n=40)
    code, o, e = run_main(uci.main, uci_argv(data, tmp / "missing" / "out.json"), [(uci, "run_dataset", computes)])
    return verdict_cli(code, o, e, "no such folder")


@case("data loss", "save_model over an existing 0644 file keeps 0644; a new file gets 0666 less the umask")
def _(tmp):
    old = os.umask(0o022)
    try:
        path = tmp / "m.npz"
        path.write_bytes(b"x")
        path.chmod(0o644)
        kronvi.save_model(path, small_model())
        kronvi.save_model(tmp / "new.npz", small_model())
    finally:
        os.umask(old)
    got = (mode(path), mode(tmp / "new.npz"))
    return got == (0o644, 0o644), f"modes after: existing {got[0]:o}, new {got[1]:o}"


@case("data loss", "kronvi fit --json --force over an existing 0644 file keeps 0644")
def _(tmp):
    X, y = sine_data(30)
    csv = write_csv(tmp / "d.csv", X, y)
    out = tmp / "out.json"
    out.write_text("{}")
    out.chmod(0o644)
    code, o, e = run_main(cli.main, ["fit", str(csv), "--folds", "3", "--max-folds", "1", "--json", str(out), "--force"],
                          [(cli, "run_fold", fake_fold)])  # fmt: skip
    return code == 0 and mode(out) == 0o644, f"exit {code}, mode after {mode(out):o}"


@case("data loss", "uci.py --overwrite over an existing 0644 JSON keeps 0644")
def _(tmp):
    data = tmp / "data"
    write_sine_folds(data / "small", n=40)
    out = tmp / "out.json"
    out.write_text("[]")
    out.chmod(0o644)
    code, o, e = run_main(uci.main, uci_argv(data, out, "--overwrite"), [(uci, "run_dataset", fake_uci_records)])
    return code == 0 and mode(out) == 0o644, f"exit {code}, mode after {mode(out):o}"


# ----------------------------------------------------------------------------------------------------
# Model files


@case("model file", "a file naming the CLI's module (kronvi/__main__.py) as a class (in a separate process)")
def _(tmp):
    bad = rewrite_model(model_file(tmp), tmp / "main.npz",
                        edit_header=lambda h: h["tree"]["fields"]["q_w"].update(cls=CLI_MODULE + ":main"))  # fmt: skip
    code = (
        "import sys, kronvi\n"
        "try:\n    kronvi.load_model(sys.argv[1])\nexcept ValueError as e:\n    print('VALUEERROR', e)\n"
        f"print('IMPORTED' if {CLI_MODULE!r} in sys.modules else 'NOT IMPORTED')\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, timeout=300,
                          env=child_env(OPENBLAS_NUM_THREADS="1"))  # fmt: skip
    ok = done.returncode == 0 and "VALUEERROR" in done.stdout and "NOT IMPORTED" in done.stdout
    what = done.stdout.strip().replace("\n", " | ") or done.stderr.strip().splitlines()[-1:]
    return ok, f"exit {done.returncode}: {str(what)[:200]}"


def _zeros(n_bytes, header):
    def write(fh):
        np.lib.format.write_array_header_1_0(fh, header)
        chunk = bytes(2**22)
        for _ in range(n_bytes // len(chunk)):
            fh.write(chunk)
        fh.write(bytes(n_bytes % len(chunk)))

    return write


@case("model file", "a 0.1 MB file whose q_w member inflates to 100 MB (shape differs from the header)")
def _(tmp):
    shape = (5000, 5000)
    bad = rewrite_model(model_file(tmp), tmp / "bomb.npz", member="q_w.logits.npy",
                        member_writer=_zeros(4 * 25_000_000, {"descr": "<f4", "fortran_order": False, "shape": shape}))  # fmt: skip
    (ok, what), peak = peak_bytes(lambda: load_verdict(bad, "shape"))
    return ok and peak < 10e6, f"file {bad.stat().st_size / 1e6:.2f} MB, peak traced memory {peak / 1e6:.1f} MB; {what}"


@case("model file", "a 0.2 MB file declaring a consistent 200 MB array (header, .npy and zip sizes agree)")
def _(tmp):
    shape = (10000, 5000)

    def edit(h):
        h["tree"]["fields"]["features"] = {"t": "array", "key": "features", "lib": "numpy", "shape": list(shape),
                                           "dtype": "<f4"}  # fmt: skip
        h["arrays"]["features"] = {"shape": list(shape), "dtype": "<f4", "sha256": "0" * 64}

    bad = rewrite_model(model_file(tmp), tmp / "big.npz", edit_header=edit,
                        extra=[])  # fmt: skip
    with zipfile.ZipFile(bad, "a", zipfile.ZIP_DEFLATED) as z, z.open("features.npy", "w", force_zip64=True) as fh:
        _zeros(4 * 50_000_000, {"descr": "<f4", "fortran_order": False, "shape": shape})(fh)
    (ok, what), peak = peak_bytes(lambda: load_verdict(bad, "max_bytes"))
    return ok and peak < 10e6, f"file {bad.stat().st_size / 1e6:.2f} MB, peak traced memory {peak / 1e6:.1f} MB; {what}"


@case("model file", "a text file given to load_model")
def _(tmp):
    p = tmp / "notes.txt"
    p.write_text("not a model\n")
    return load_verdict(p, "not a kronvi model file")


@case("model file", "a valid model file with byte 0 flipped")
def _(tmp):
    p = model_file(tmp)
    data = bytearray(p.read_bytes())
    data[0] ^= 0xFF
    p.write_bytes(bytes(data))
    return load_verdict(p, "not a kronvi model file")


@case("model file", "model files written by kronvi 0.1.0 (tests/data/model_v1_*.npz) still load")
def _(tmp):
    got = []
    for name in ("model_v1_meanfield.npz", "model_v1_mixture.npz"):
        m = kronvi.load_model(ROOT / "tests" / "data" / name)
        got.append(type(m.q_w).__name__)
    return got == ["MeanField", "Mixture"], f"q_w: {got}"


# ----------------------------------------------------------------------------------------------------
# Silent wrong answers


@case("silent", "standardization of a float32 column near 1e20 and a float64 column near 1e155")
def _(tmp):
    rng = np.random.default_rng(0)
    res = []
    for dtype, big in ((np.float32, 1e20), (np.float64, 1e155)):
        X = rng.normal(size=(100, 2))
        X[:, 1] *= big
        X = X.astype(dtype)
        try:
            st = kronvi.inputs.fit_standardizer(X)
            Z = np.asarray(kronvi.inputs.standardize(st, X), np.float64)
            sd = float(np.std(Z[:, 1]))
            res.append((np.isfinite(np.asarray(st.scale)).all() and abs(sd - 1) < 1e-2, f"{dtype.__name__}: sd {sd:.3g}"))
        except (ValueError, TypeError) as e:
            res.append((raised_by(e) == "kronvi", f"{dtype.__name__}: {type(e).__name__}: {str(e)[:80]}"))
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


def _regressor_pair(make, X1, y1, X2, y2, Xt1, Xt2):
    a, b = make().fit(X1, y1), make().fit(X2, y2)
    return a, b, a.predict(Xt1, return_std=True), b.predict(Xt2, return_std=True)


@case("silent", "DirectRegressor with a column 1e6 + N(0, 1): predictions move against the unshifted fit")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, y = sine_data(150)
    Xs = X.copy()
    Xs[:, 1] += 1e6
    _, _, (m1, _), (m2, _) = _regressor_pair(lambda: DirectRegressor(n_frequencies=50, random_state=0),
                                             X[:120], y[:120], Xs[:120], y[:120], X[120:], Xs[120:])  # fmt: skip
    diff = float(np.max(np.abs(m1 - m2)) / np.std(y))
    return diff < 1e-2, f"max |prediction change| = {diff:.3g} sd(y)"


@case("silent", "DirectClassifier with a column 1e6 + N(0, 1): probabilities move against the unshifted fit")
def _(tmp):
    from kronvi.sklearn import DirectClassifier

    X, y = sine_data(150)
    yc = (y > 0).astype(int)
    Xs = X.copy()
    Xs[:, 1] += 1e6
    a = DirectClassifier(n_frequencies=30, random_state=0).fit(X[:120], yc[:120])
    b = DirectClassifier(n_frequencies=30, random_state=0).fit(Xs[:120], yc[:120])
    diff = float(np.max(np.abs(a.predict_proba(X[120:]) - b.predict_proba(Xs[120:]))))
    return diff < 1e-2, f"max |probability change| = {diff:.3g}"


@case("silent", "fit_direct with y + 1e6: predictions (offset removed) move against y")
def _(tmp):
    X, y = sine_data(150)
    cfg = kronvi.pipeline.DirectConfig(num_frequencies=50)
    preds = []
    for off in (0.0, 1e6):
        model, _, _ = kronvi.pipeline.fit_direct(jax.random.key(0), X[:120], y[:120] + off, cfg)
        Phi = kronvi.pipeline.fold_features(model, X[120:])
        m, _ = kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
        preds.append(np.asarray(m, np.float64) + float(model.y_offset) - off)
    diff = float(np.max(np.abs(preds[0] - preds[1])) / np.std(y))
    return diff < 1e-2, f"max |prediction change| = {diff:.3g} sd(y)"


@case("silent", "DirectRegressor(lengthscale=1.0) is equivariant to the units of y (y x 1e-12)")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, y = sine_data(150)
    s = 1e-12
    _, _, (m1, s1), (m2, s2) = _regressor_pair(lambda: DirectRegressor(n_frequencies=50, lengthscale=1.0, random_state=0),
                                               X[:120], y[:120], X[:120], s * y[:120], X[120:], X[120:])  # fmt: skip
    ratio = float(np.median(s2 / (s * s1)))
    mean_err = float(np.max(np.abs(m2 / s - m1)) / np.std(y))
    return abs(ratio - 1) < 1e-2 and mean_err < 1e-2, f"predicted sd ratio {ratio:.4g} (want 1), mean change {mean_err:.3g} sd"


@case("silent", "DirectRegressor(features='linear') at y x 1e-30: R^2 equals the unscaled fit's")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, y = sine_data(150)
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * np.random.default_rng(1).normal(size=150)
    r2 = [DirectRegressor(features="linear", random_state=0).fit(X, s * y).score(X, s * y) for s in (1.0, 1e-30)]
    return abs(r2[0] - r2[1]) < 1e-3, f"R^2 {r2[0]:.4g} at y, {r2[1]:.4g} at y x 1e-30"


@case("silent", "DirectRegressor.partial_fit whose first chunk has constant y learns as fit does")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, y = sine_data(200)
    y = y.copy()
    y[:50] = 0.7  # the first chunk: constant targets
    full = DirectRegressor(n_frequencies=50, lengthscale=1.0, random_state=0).fit(X, y)
    part = DirectRegressor(n_frequencies=50, lengthscale=1.0, random_state=0)
    part.partial_fit(X[:50], y[:50])
    part.partial_fit(X[50:], y[50:])
    r2 = (full.score(X[50:], y[50:]), part.score(X[50:], y[50:]))
    return abs(r2[0] - r2[1]) < 0.05, f"R^2 on the second chunk: fit {r2[0]:.3f}, partial_fit {r2[1]:.3f}"


def _density_problem(dtype, noise=1e-3, phi_scale=1.0, b=4, m=5, n=25, seed=0):
    rng = np.random.default_rng(seed)
    pw = kronvi.model.gaussian_prior(b, 1.0, levels=m, dtype=dtype)
    pn = kronvi.model.noise_prior(noise, levels=3, span=2.0, dtype=dtype)
    qw = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, m)) * 2, dtype))
    qn = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(1, 3)), dtype))
    Phi = rng.normal(size=(n, b)) * phi_scale
    w = np.asarray(pw.values, np.float64)[np.arange(b), rng.integers(0, m, size=b)]
    y = Phi @ w + np.sqrt(noise) * phi_scale * rng.normal(size=n)
    return pw, pn, qw, qn, Phi, y


def _enumerated_log_density(pw, pn, qw, qn, Phi, y):
    import itertools

    values = np.asarray(pw.values, np.float64)
    probs = np.asarray(qw.probs, np.float64)
    b, m = values.shape
    svals, sq = np.asarray(pn.values[0], np.float64), np.asarray(qn.probs[0], np.float64)
    logs = []
    for cfg in itertools.product(range(m), repeat=b):
        lq = np.sum(np.log(probs[np.arange(b), cfg]))
        f = Phi @ values[np.arange(b), cfg]
        for s, q in zip(svals, sq, strict=True):
            logs.append(lq + np.log(q) - 0.5 * (y - f) ** 2 / s - 0.5 * np.log(2 * np.pi * s))
    logs = np.array(logs)
    mx = logs.max(0)
    return mx + np.log(np.exp(logs - mx).sum(0))


@case("silent", "predictive_log_density in float32 with noise 1e-3 of the signal, and with Phi x 1e6")
def _(tmp):
    res = []
    for scale in (1.0, 1e6):
        pw, pn, qw, qn, Phi, y = _density_problem(jnp.float32, phi_scale=scale)
        if scale != 1.0:  # the weights' grid and noise scale with Phi's units so the true density is finite
            pn = kronvi.model.noise_prior(1e-3 * scale**2, levels=3, span=2.0, dtype=jnp.float32)
        want = _enumerated_log_density(pw, pn, qw, qn, Phi, y)
        got, bound = kronvi.model.predictive_log_density(qw, qn, pw, pn, jnp.asarray(Phi, jnp.float32), jnp.asarray(y, jnp.float32))
        got, bound = np.asarray(got, np.float64), np.asarray(bound, np.float64)
        err = np.abs(np.expm1(got - want))
        silent = (err > 1e-2) & np.isfinite(bound) & (bound < 1e-2)
        res.append((np.all(np.isfinite(bound)) and not silent.any() and err.max() < 1e-2,
                    f"Phi x {scale:g}: max rel. error {err.max():.3g}, {np.sum(~np.isfinite(bound))} inf bounds, "
                    f"max log density {got.max():.3g} (true {want.max():.3g})"))  # fmt: skip
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("silent", "predict_logistic at |Phi w| ~ 1e4 and 1e6 against enumeration")
def _(tmp):
    import itertools

    rng = np.random.default_rng(0)
    b, m = 3, 5
    pw = kronvi.model.gaussian_prior(b, 1.0, levels=m)
    qw = kronvi.model.MeanField(jnp.asarray(rng.normal(size=(b, m)), jnp.float32))
    res = []
    for scale in (1e4, 1e6):
        Phi = rng.normal(size=(10, b)) * scale
        got = kronvi.logistic.predict_logistic(qw, pw, jnp.asarray(Phi, jnp.float32))
        got = np.asarray(got[0] if isinstance(got, tuple) else got, np.float64)
        values, probs = np.asarray(pw.values, np.float64), np.asarray(qw.probs, np.float64)
        want = np.zeros(10)
        for cfg in itertools.product(range(m), repeat=b):
            p = np.prod(probs[np.arange(b), cfg])
            want += p * (0.5 * (1 + np.tanh(0.5 * (Phi @ values[np.arange(b), cfg]))))
        err = np.nanmax(np.abs(got - want)) if np.isfinite(got).any() else np.inf
        res.append((np.isfinite(got).all() and err < 1e-3, f"|Phi w| ~ {scale:g}: max error {err:.3g}, {np.sum(~np.isfinite(got))} NaN"))
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("silent", "fit_logistic on Phi x 1e30, and with all-zero weights: NaN logits or a named error")
def _(tmp):
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(40, 3)).astype(np.float32)
    y = (Phi[:, 0] > 0).astype(np.float32)
    pw = kronvi.model.gaussian_prior(3, 1.0)
    res = []
    for label, kw, P in (("Phi x 1e30", {}, Phi * 1e30), ("weights 0", {"weights": np.zeros(40, np.float32)}, Phi)):
        try:
            q, _ = kronvi.logistic.fit_logistic(jnp.asarray(P), jnp.asarray(y), pw, **kw)
            finite = bool(np.isfinite(np.asarray(q.logits)).all())
            res.append((finite, f"{label}: {'finite' if finite else 'NaN'} logits, no error"))
        except (ValueError, TypeError) as e:
            res.append((raised_by(e) == "kronvi", f"{label}: {type(e).__name__}: {str(e)[:80]}"))
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("silent", "fit_bnn's default on its docstring example reaches CAVI's ELBO, or says converged=False")
def _(tmp):
    from kronvi.bnn import bnn_stats, fit_bnn

    X = jax.random.normal(jax.random.key(0), (50, 2))
    y = X[:, 0] ** 2 - 1.0
    X1 = jnp.concatenate([X, jnp.ones((50, 1))], axis=1)
    stats = bnn_stats(X1, y, (3, 2, 1))
    pw, pn = kronvi.model.gaussian_prior(8, 1.0, levels=7), kronvi.model.noise_prior(0.1)
    _, _, d = fit_bnn(stats, pw, pn)
    _, _, c = fit_bnn(stats, pw, pn, method="cavi")
    ed, ec = float(d.final_elbo), float(c.final_elbo)
    ok = ed >= ec - 1.0 or not bool(d.converged)
    return ok, f"default: ELBO {ed:.1f} after {int(d.num_iter)} iterations, converged={bool(d.converged)}; cavi: {ec:.1f}"


@case("silent", "fit_regression(max_iter=2.7)")
def _(tmp):
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(30, 4)).astype(np.float32)
    stats = kronvi.stats.regression_stats(Phi, Phi @ np.ones(4, np.float32))
    pw, pn = kronvi.model.gaussian_prior(4, 1.0), kronvi.model.noise_prior(0.1)
    return clean_error(lambda: kronvi.fitting.fit_regression(stats, pw, pn, max_iter=2.7), "max_iter")


# ----------------------------------------------------------------------------------------------------
# Same seed, same answer


_QUICKSTART = """
import json, jax, jax.numpy as jnp, numpy as np, kronvi
X, y, mask = kronvi.load_demo()
test = mask[:, 2].astype(bool)
config = kronvi.pipeline.DirectConfig(num_frequencies=100)
model, timings, info = kronvi.pipeline.fit_direct(jax.random.key(0), X[~test], y[~test], config)
Phi = kronvi.pipeline.fold_features(model, X[test])
mean, var = kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
rmse = float(jnp.sqrt(jnp.mean((mean + model.y_offset - y[test]) ** 2)))
print(json.dumps(dict(rmse=rmse)))
"""


@case("same seed", "the quickstart's pipeline fit with OpenBLAS's default threads and with 1 thread")
def _(tmp):
    outs = []
    for threads in (None, "1"):
        env = child_env() if threads is None else child_env(OPENBLAS_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, "-c", _QUICKSTART], capture_output=True, text=True, env=env, timeout=600)
        if done.returncode:
            return False, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        outs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    diff = abs(outs[0]["rmse"] - outs[1]["rmse"])
    return diff < 1e-3 * outs[1]["rmse"], f"RMSE {outs[0]['rmse']:.5f} (default threads) vs {outs[1]['rmse']:.5f} (1 thread)"


@case("same seed", "the README's first example: CAVI's iterates never lower the (float64) ELBO; the float32 trace dips only by its rounding, as fit_regression says")
def _(tmp):
    X, y, test_mask = kronvi.load_demo()
    test = test_mask[:, 0].astype(bool)
    config = kronvi.pipeline.DirectConfig()
    fold = kronvi.pipeline.prepare_fold(jax.random.key(0), X[~test], y[~test], config)
    model, _, info = kronvi.pipeline.fit_prepared(fold, config)
    e = np.asarray(info.elbo, np.float64)[: int(info.num_iter) + 1]
    step = float(np.diff(e).min()) if len(e) > 1 else 0.0
    exact = []
    with jax.enable_x64(True):
        f64 = lambda t: jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), t)  # noqa: E731
        for k in range(1, len(e)):
            q_w, q_n, _ = kronvi.fitting.fit_regression(fold.stats, fold.prior_w, model.prior_noise, max_iter=k,
                                                sweep="diagonal", key=fold.key)  # fmt: skip
            exact.append(float(kronvi.model.regression_elbo(f64(fold.stats), f64(q_w), f64(q_n), f64(fold.prior_w),
                                                      f64(model.prior_noise))))  # fmt: skip
    exact_step = float(np.diff(exact).min()) if len(exact) > 1 else 0.0
    ok = exact_step >= 0 and -step <= 1e-4 * abs(e[-1])
    return ok, (f"{len(e) - 1} sweeps; float32 trace's largest step down {max(0.0, -step):.3g} at {e[-1]:.5g}; "
                f"float64 ELBO of the iterates: smallest step {exact_step:+.3g}")  # fmt: skip


@case("same seed", "kronvi fit yacht.data (a CSV not named .csv)")
def _(tmp):
    src = ROOT / "src" / "kronvi" / "data" / "yacht" / "data.csv.gz"
    src = src if src.exists() else KRONVI_DIR / "data" / "yacht" / "data.csv.gz"
    path = tmp / "yacht.data"
    path.write_bytes(gzip.decompress(src.read_bytes()))
    code, o, e = run_main(cli.main, ["fit", str(path), "--max-folds", "1"], [(cli, "run_fold", fake_fold)])
    return code == 0 and "n=308" in o, f"exit {code}: {(e.strip().splitlines() or o.strip().splitlines()[:1] or [''])[-1][:150]}"


@case("same seed", "kronvi fit --json records source, basis, b, levels, seed and folds")
def _(tmp):
    out = tmp / "o.json"
    code, o, e = run_main(cli.main, ["fit", "--max-folds", "1", "--seed", "3", "--json", str(out)], [(cli, "run_fold", fake_fold)])
    if code != 0:
        return False, f"exit {code}: {e.strip()[-150:]}"
    settings = json.loads(out.read_text()).get("settings") or {}
    want = ("source", "basis", "b", "levels", "seed", "folds")
    missing = [k for k in want if k not in settings]
    return not missing, f"settings: {json.dumps({k: settings.get(k) for k in want})}"


# ----------------------------------------------------------------------------------------------------
# Raw errors and crashes


@case("raw errors", "jax_enable_x64 on: fit_logistic(method='lbfgs') on float32 data, and DirectClassifier")
def _(tmp):
    from kronvi.sklearn import DirectClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    res = []
    with jax.enable_x64(True):
        for label, fn in (
            ("fit_logistic", lambda: kronvi.logistic.fit_logistic(jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32),
                                                        kronvi.model.gaussian_prior(2, 1.0, dtype=jnp.float32), method="optax-lbfgs")),
            ("DirectClassifier", lambda: DirectClassifier(n_frequencies=10, random_state=0).fit(X, y)),
        ):  # fmt: skip
            try:
                fn()
                res.append((True, f"{label}: fits"))
            except Exception as e:  # noqa: BLE001
                res.append((False, f"{label}: {type(e).__name__} from {raised_by(e)}: {str(e).splitlines()[0][:80]}"))
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


def _uci_case(extra, message, *, setup=None, datasets="small"):
    def run(tmp):
        data = tmp / "data"
        write_sine_folds(data / "small", n=40)
        out = tmp / "out.json"
        argv = uci_argv(data, out, *extra, datasets=datasets)
        if setup:
            argv = setup(tmp, argv)
        return verdict_cli(*run_main(uci.main, argv, [(uci, "run_dataset", computes)]), message)

    return run


for _extra, _msg in (
    (["--max-folds", "0"], "--max-folds"),
    (["--noise-span", "0.5"], "--noise-span"),
    (["--data-dir", "/nonexistent/uci"], "--data-dir"),
):
    case("raw errors", "uci.py " + " ".join(_extra))(_uci_case(_extra, _msg))


def _resume_with(text):
    def setup(tmp, argv):
        (tmp / "out.json").write_text(text)
        return argv + ["--resume"]

    return setup


case("raw errors", "uci.py --resume with a truncated JSON")(_uci_case([], "JSON", setup=_resume_with('[{"dataset": "sm')))
case("raw errors", "uci.py --resume with a JSON that is not a list")(_uci_case([], "JSON", setup=_resume_with('{"a": 1}')))


def _cls_case(extra, message, *, labels=(0.0, 1.0), datasets="tiny"):
    def run(tmp):
        data = tmp / "data"
        class_folds(data / "tiny", labels=labels)
        argv = cls_argv(data, tmp / "out.json", *extra, datasets=datasets)
        code, o, e = run_main(classification.main, argv, [(classification, "run_dataset", computes)])
        ok, what = verdict_cli(code, o, e, message)
        return ok and "wrote" not in o, what + (" ; printed 'wrote'" if "wrote" in o else "")

    return run


for _extra, _msg in (
    (["--folds", "0"], "--folds"),
    (["--prior-scales", "-1"], "--prior-scales"),
    (["--num-frequencies", "0"], "--num-frequencies"),
    (["--data-dir", "/nonexistent/classification"], "--data-dir"),
):
    case("raw errors", "classification.py " + " ".join(_extra))(_cls_case(_extra, _msg))
case("raw errors", "classification.py on labels 0 and 2")(_cls_case([], "labels", labels=(0.0, 2.0)))
case("raw errors", "classification.py --datasets missing")(_cls_case([], "missing", datasets="missing"))


def _interrupt(cmd, log, ready_text, timeout=300):
    """Runs ``cmd`` with stdout to ``log``, sends SIGINT a second after ``ready_text`` appears in it;
    ``(exit code, stderr, seconds)``."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True,
                                env=child_env(OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1"), cwd=EXPERIMENTS)  # fmt: skip
        t0 = time.perf_counter()
        try:
            while ready_text not in log.read_text() and proc.poll() is None and time.perf_counter() - t0 < timeout:
                time.sleep(0.2)
            time.sleep(1.0)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    return proc.returncode, err, time.perf_counter() - t0


def _interrupt_verdict(code, err, secs, out, want_records):
    kept = out.exists() and len(json.loads(out.read_text())) == want_records
    lines = err.strip().splitlines()
    ok = code == 130 and kept and "Traceback" not in err and "Segmentation" not in err
    note = " (finished before the interrupt)" if code == 0 else ""
    return ok, f"exit {code}{note} after {secs:.0f}s, first dataset's records kept: {kept}, stderr: {lines[-1][:100] if lines else '(none)'}"


@case("raw errors", "Ctrl-C during uci.py's second dataset: first dataset's records kept, exit 130, no crash")
def _(tmp):
    data = tmp / "data"
    write_sine_folds(data / "a_small", n=40)
    write_sine_folds(data / "b_big", n=2000)
    out = tmp / "out.json"
    cmd = [sys.executable, str(EXPERIMENTS / "uci.py"), *uci_argv(data, out, datasets="a_small,b_big")]
    return _interrupt_verdict(*_interrupt(cmd, tmp / "stdout.txt", "== b_big"), out, 1)


@case("raw errors", "Ctrl-C during classification.py's second dataset: records kept, exit 130, no crash")
def _(tmp):
    data = tmp / "data"
    class_folds(data / "a_tiny")
    class_folds(data / "b_tiny", n=60, seed=1)
    out = tmp / "out.json"
    cmd = [sys.executable, str(EXPERIMENTS / "classification.py"), *cls_argv(data, out, datasets="a_tiny,b_tiny")]
    return _interrupt_verdict(*_interrupt(cmd, tmp / "stdout.txt", "b_tiny:"), out, 1)


@case("raw errors", "DirectRegressor with string targets")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, _ = sine_data(30)
    return clean_error(lambda: DirectRegressor(n_frequencies=10).fit(X, np.array(["a", "b", "c"] * 10)), "y")


@case("raw errors", "fit_logistic with string labels")
def _(tmp):
    Phi = np.random.default_rng(0).normal(size=(6, 2)).astype(np.float32)
    return clean_error(lambda: kronvi.logistic.fit_logistic(Phi, np.array(["yes", "no"] * 3), kronvi.model.gaussian_prior(2, 1.0)), "`y`")


@case("raw errors", "laplace_grid_prior on float16 data")
def _(tmp):
    Phi = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float16)
    y = (Phi[:, 0] > 0).astype(np.float16)
    return clean_error(lambda: kronvi.logistic.laplace_grid_prior(Phi, y, 1.0), "float16")


@case("raw errors", "fit_regression(max_iter=-5)")
def _(tmp):
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(30, 4)).astype(np.float32)
    stats = kronvi.stats.regression_stats(Phi, Phi @ np.ones(4, np.float32))
    pw, pn = kronvi.model.gaussian_prior(4, 1.0), kronvi.model.noise_prior(0.1)
    return clean_error(lambda: kronvi.fitting.fit_regression(stats, pw, pn, max_iter=-5), "max_iter")


@case("raw errors", "kronvi fit --seed 99999999999999999999")
def _(tmp):
    argv = ["fit", "--seed", "99999999999999999999"]
    return verdict_cli(*run_main(cli.main, argv, [(cli, "run_fold", computes)]), "--seed")


@case("raw errors", "DirectRegressor's messages name X and y, not internal names (Phi, center)")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, y = sine_data(40)
    msgs = []
    for label, fn in (
        ("predict with 2 columns", lambda: DirectRegressor(n_frequencies=10, random_state=0).fit(X, y).predict(X[:, :2])),
        ("constant y, lengthscale=1.0", lambda: DirectRegressor(n_frequencies=10, lengthscale=1.0).fit(X, np.ones(40))),
        ("one row", lambda: DirectRegressor(n_frequencies=10).fit(X[:1], y[:1])),
        ("inf in X", lambda: DirectRegressor(n_frequencies=10).fit(np.where(X > 1, np.inf, X), y)),
    ):  # fmt: skip
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            msgs.append((label, str(e).splitlines()[0] if str(e) else type(e).__name__))
    leaks = [(label, m) for label, m in msgs if "Phi" in m or "`center`" in m]
    return not leaks, "; ".join(f"{label}: {m[:70]}" for label, m in (leaks or msgs)) or "no errors raised"


# ----------------------------------------------------------------------------------------------------
# Tests that cannot fail (read from the test files)


@case("tests", "monotonicity tests check the true objective after each step, not a best-so-far trace")
def _(tmp):
    # Each of the six places the issue names reads a per-step trace: `iterate_elbo` (L-BFGS: the objective at
    # every iterate; `elbo` is its running maximum) or, for fit_features, `attempted` (each round's objective
    # before the no-progress test).
    places = {
        "tests/logistic/test_fit.py": "iterate_elbo", "tests/bnn/test_fit.py": "iterate_elbo",
        "tests/fit/test_features.py": "info.attempted", "tests/fit/test_regression.py": "iterate_elbo",
        "tests/gaussian/test_elrg.py": "iterate_elbo", "src/kronvi/mixtures/_fit_bound.py": "info.iterate_elbo",
    }  # fmt: skip
    missing = [f"{f} ({w})" for f, w in places.items() if w not in (ROOT / f).read_text()]
    return not missing, ("every one reads a per-step trace" if not missing else f"best-so-far only: {missing}")


@case("tests", "the CAVI monotonicity test covers the default order='gain'")
def _(tmp):
    tree = ast.parse((ROOT / "tests" / "fit" / "test_regression.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and "monotone" in node.name:
            src = ast.get_source_segment((ROOT / "tests" / "fit" / "test_regression.py").read_text(), node) or ""
            decos = " ".join(ast.unparse(d) for d in node.decorator_list)
            has = "'gain'" in decos or '"gain"' in src or "'gain'" in src
            return has, f"{node.name}: {decos[:120]}"
    return False, "no monotonicity test found in tests/fit/test_regression.py"


@case("tests", "tqdm is in the test extra (the progress-bar test is not always skipped)")
def _(tmp):
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("\ntest = [", 1)[1].split("]", 1)[0] if "\ntest = [" in text else ""
    extra = [ln.split("#")[0].strip().strip('",') for ln in block.splitlines() if ln.split("#")[0].strip()]
    has = any(d.split(">")[0].split("=")[0].strip() == "tqdm" for d in extra)
    return has, f"test extra: {extra}"


@case("tests", "no skip guards that can never fire in tests/quantize/test_codes.py and test_io.py")
def _(tmp):
    found = []
    for name in ("test_codes.py", "test_io.py"):
        for i, line in enumerate((ROOT / "tests" / "quantize" / name).read_text().splitlines(), 1):
            if "getattr(kronvi," in line or "pytest.skip(" in line:
                found.append(f"{name}:{i}")
    return not found, f"guards at {', '.join(found)}" if found else "none"


# ----------------------------------------------------------------------------------------------------
# More hostile inputs (not in the issue)


@case("more", "kronvi fit --json through a symbolic link to the input CSV, with --force")
def _(tmp):
    X, y = sine_data(30)
    csv = write_csv(tmp / "d.csv", X, y)
    before = csv.read_bytes()
    link = tmp / "out.json"
    link.symlink_to(csv)
    ok, what = verdict_cli(*run_main(cli.main, ["fit", str(csv), "--json", str(link), "--force"], [(cli, "run_fold", fake_fold)]), "input")
    return ok and csv.read_bytes() == before, what


@case("more", "kronvi fit --json '' and --json <a folder>")
def _(tmp):
    res = [verdict_cli(*run_main(cli.main, ["fit", "--json", p], [(cli, "run_fold", computes)]), "--json") for p in ("", str(tmp))]
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("more", "kronvi fit on an empty file, a one-column CSV and a CSV with NaN")
def _(tmp):
    (tmp / "empty.csv").write_text("")
    (tmp / "one.csv").write_text("1\n2\n3\n")
    (tmp / "nan.csv").write_text("1,2,3\n4,nan,6\n7,8,9\n")
    res = [verdict_cli(*run_main(cli.main, ["fit", str(tmp / f)], [(cli, "run_fold", computes)]), "")
           for f in ("empty.csv", "one.csv", "nan.csv")]  # fmt: skip
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("more", "kronvi fit on a folder without data.csv.gz")
def _(tmp):
    (tmp / "folder").mkdir()
    return verdict_cli(*run_main(cli.main, ["fit", str(tmp / "folder")], [(cli, "run_fold", computes)]), "data.csv.gz")


@case("more", "kronvi fit --json onto a dangling symbolic link without --force")
def _(tmp):
    link = tmp / "o.json"
    link.symlink_to(tmp / "nowhere.json")
    return verdict_cli(*run_main(cli.main, ["fit", "--json", str(link)], [(cli, "run_fold", computes)]), "symbolic link")


@case("more", "load_model: a header nested 100,000 lists deep")
def _(tmp):
    deep = '{"t": "list", "items": [' * 100_000 + '{"t": "none"}' + "]}" * 100_000

    def edit(h):
        h["tree"]["fields"]["features"] = "DEEP"
        return json.dumps(h).replace('"DEEP"', deep)

    return load_verdict(rewrite_model(model_file(tmp), tmp / "deep.npz", edit_header=edit), "header")


@case("more", "load_model: the header declares an object dtype")
def _(tmp):
    return load_verdict(rewrite_model(model_file(tmp), tmp / "o.npz", edit_header=lambda h: h["arrays"]["q_w.logits"].update(dtype="|O")), "dtype")


@case("more", "load_model: the header declares a negative dimension")
def _(tmp):
    return load_verdict(rewrite_model(model_file(tmp), tmp / "n.npz", edit_header=lambda h: h["arrays"]["q_w.logits"].update(shape=[6, -15])), "shape")


@case("more", "load_model: a member stored in Fortran order (a valid .npy of the same array) loads exactly")
def _(tmp):
    src = model_file(tmp)
    with zipfile.ZipFile(src) as z:
        arr = np.lib.format.read_array(io.BytesIO(z.read("q_w.logits.npy")))

    def write(fh):
        np.lib.format.write_array(fh, np.asfortranarray(arr))

    try:
        got = np.asarray(kronvi.load_model(rewrite_model(src, tmp / "f.npz", member="q_w.logits.npy", member_writer=write)).q_w.logits)
    except Exception as e:  # noqa: BLE001
        return False, f"{type(e).__name__}: {str(e)[:150]}"
    return np.array_equal(got, arr), "loaded, identical" if np.array_equal(got, arr) else "loaded, different values"


@case("more", "load_model: an archive with an extra member named ../../evil.sh")
def _(tmp):
    bad = rewrite_model(model_file(tmp), tmp / "e.npz", extra=[("../../evil.sh", b"rm -rf /")])
    ok, what = load_verdict(bad, "")
    return ok and not (tmp.parent / "evil.sh").exists(), what


@case("more", "load_model: a folder, and a missing file")
def _(tmp):
    res = []
    for p in (tmp, tmp / "missing.npz"):
        try:
            kronvi.load_model(p)
            res.append((False, "loaded"))
        except OSError as e:
            res.append((True, f"{type(e).__name__}: {e.strerror}"))
        except Exception as e:  # noqa: BLE001
            res.append((False, f"{type(e).__name__}: {str(e)[:80]}"))
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("more", "load_model(max_bytes=-1)")
def _(tmp):
    return clean_error(lambda: kronvi.load_model(model_file(tmp), max_bytes=-1), "max_bytes")


@case("more", "save_model over a read-only (0444) file: replaced, still 0444")
def _(tmp):
    path = model_file(tmp, "ro.npz")
    path.chmod(0o444)
    kronvi.save_model(path, small_model(b=4))
    m = kronvi.load_model(path)
    return m.q_w.logits.shape[0] == 4 and mode(path) == 0o444, f"b after {m.q_w.logits.shape[0]}, mode {mode(path):o}"


@case("more", "save_model through a symbolic link: refused (issue 47), the link and its target untouched")
def _(tmp):
    target = model_file(tmp, "target.npz")
    before = target.read_bytes()
    link = tmp / "link.npz"
    link.symlink_to(target)
    ok, what = clean_error(lambda: kronvi.save_model(link, small_model(b=4)), "symbolic link")
    return ok and link.is_symlink() and target.read_bytes() == before, what


@case("more", "save_model with a kronvi class the loader would refuse (FitInfo in features)")
def _(tmp):
    info = kronvi.FitInfo(*[jnp.zeros(())] * len(kronvi.FitInfo._fields))
    ok, what = clean_error(lambda: kronvi.save_model(tmp / "m.npz", small_model()._replace(features={"info": info})), "features")
    return ok and not (tmp / "m.npz").exists(), what


@case("more", "uci.py --log is the --json file")
def _(tmp):
    return _uci_case(["--log", "LOG"], "--log", setup=lambda t, a: [x if x != "LOG" else str(t / "out.json") for x in a])(tmp)


@case("more", "uci.py --datasets ',' and --seed 2**70")
def _(tmp):
    a = _uci_case([], "--datasets", datasets=",")(tmp / "a")
    b = _uci_case(["--seed", str(2**70)], "--seed")(tmp / "b")
    return a[0] and b[0], a[1] + "; " + b[1]


@case("more", "uci.py --lb-tol nan --sgd-init-noise -1: one line for each")
def _(tmp):
    data = tmp / "data"
    write_sine_folds(data / "small", n=40)
    argv = uci_argv(data, tmp / "o.json", "--lb-tol", "nan", "--sgd-init-noise", "-1")
    code, o, e = run_main(uci.main, argv, [(uci, "run_dataset", computes)])
    lines = e.strip().splitlines()
    ok = code == 2 and len(lines) == 2 and all(ln.startswith("uci.py: error: --") for ln in lines)
    return ok, f"exit {code}: " + " / ".join(lines)


@case("more", "DirectRegressor on y x 1e30 (equivariant: the targets are standardized) and y x 1e300 (a one-line error naming y)")
def _(tmp):
    from kronvi.sklearn import DirectRegressor

    X, y = sine_data(40)
    base = DirectRegressor(n_frequencies=10, random_state=0).fit(X, y).predict(X[:5])
    with np.errstate(all="ignore"):
        big = DirectRegressor(n_frequencies=10, random_state=0).fit(X, 1e30 * y).predict(X[:5]) / 1e30
    change = float(np.max(np.abs(big - base)) / np.std(y))
    res = [(change < 1e-3, f"y x 1e30: predictions / 1e30 move by {change:.2g} sd(y)")]
    with np.errstate(all="ignore"):
        ok, what = clean_error(lambda: DirectRegressor(n_frequencies=10).fit(X, 1e300 * y), "`y`")
    internal = any(n in what for n in ("min_noise_variance", "Phi", "`center`", "fit_gp_hyperparameters"))
    res.append((ok and not internal, f"y x 1e300: {what}"))
    return all(r[0] for r in res), "; ".join(r[1] for r in res)


@case("more", "classification.py --append onto a file that is not JSON: refused, file untouched")
def _(tmp):
    data = tmp / "data"
    class_folds(data / "tiny")
    out = tmp / "res.json"
    out.write_text("not json")
    ok, what = verdict_cli(*run_main(classification.main, cls_argv(data, out, "--append"),
                                     [(classification, "run_dataset", computes)]), "")  # fmt: skip
    return ok and out.read_text() == "not json", what


@case("more", "classification.py --json <its own test_mask.csv.gz> --append")
def _(tmp):
    data = tmp / "data"
    mask = class_folds(data / "tiny") / "test_mask.csv.gz"
    before = mask.read_bytes()
    ok, what = verdict_cli(*run_main(classification.main, cls_argv(data, mask, "--append"),
                                     [(classification, "run_dataset", computes)]), "input")  # fmt: skip
    return ok and mask.read_bytes() == before, what


@case("more", "classification.py on a dataset whose training fold holds one class")
def _(tmp):
    data = tmp / "data"
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.r_[np.zeros(10), np.ones(10)]
    mask = np.zeros((20, 2), int)
    mask[:10, 0] = 1  # fold 0's test rows: all the zeros, so its training rows are all ones
    mask[10:, 1] = 1
    write_folds(data / "tiny", X, y, mask)
    ok, what = verdict_cli(*run_main(classification.main, cls_argv(data, tmp / "o.json"),
                                     [(classification, "run_dataset", computes)]), "class")  # fmt: skip
    return ok, what


@case("more", "classification.py --prior-scales nan,inf")
def _(tmp):
    return _cls_case(["--prior-scales", "nan,inf"], "--prior-scales")(tmp)


@case("more", "check_output_path and write_atomic: a failed write leaves the old file and no temporary")
def _(tmp):
    path = tmp / "o.txt"
    kronvi.files.write_atomic(path, "old")

    def fails(fh):
        fh.write(b"half")
        raise OSError("disk full")

    try:
        kronvi.files.write_atomic(path, fails)
    except OSError:
        pass
    left = sorted(p.name for p in tmp.iterdir())
    return path.read_text() == "old" and left == ["o.txt"], f"content {path.read_text()!r}, files {left}"


# ----------------------------------------------------------------------------------------------------
# Driver


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help="run the cases whose group or text contains this")
    p.add_argument("--out", help="also write the table (Markdown) to this file, replacing it")
    args = p.parse_args(argv)
    files = getattr(kronvi, "files", None)  # kronvi.files: absent before the namespaces (the probe runs on both)
    write = getattr(files, "write_atomic", None) or (lambda path, text: pathlib.Path(path).write_text(text))
    if args.out and hasattr(files, "check_output_path"):  # (absent before issue 28)
        kronvi.files.check_output_path(args.out, option="--out", overwrite=True)
    rows, t_start = [], time.perf_counter()
    selected = [c for c in CASES if args.only in c[0] or args.only in c[1]]
    for i, (group, text, fn) in enumerate(selected, 1):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            tmp = pathlib.Path(d)
            try:
                ok, what = fn(tmp)
            except Exception as e:  # noqa: BLE001 - a crash of the case is its answer
                ok, what = False, f"{type(e).__name__} from {raised_by(e)}: {str(e).splitlines()[0][:150] if str(e) else ''}"
            finally:
                for f in tmp.rglob("*"):  # read-only files from the cases
                    with contextlib.suppress(OSError):
                        f.chmod(0o700 if f.is_dir() else 0o600)
        verdict = "manual" if ok is None else ("ok" if ok else "NOT OK")
        secs = time.perf_counter() - t0
        rows.append((group, text, verdict, what.replace("|", "/").replace("\n", " "), secs))
        print(f"[{i}/{len(selected)}] {verdict:6s} {group}: {text} -- {what} ({secs:.1f}s)", flush=True)
    counts = {v: sum(r[2] == v for r in rows) for v in ("ok", "NOT OK", "manual")}
    groups = sorted({r[0] for r in rows}, key=[c[0] for c in CASES].index)
    lines = [
        "# Hostile inputs (issue 28)",
        "",
        f"`python experiments/investigations/hostile_inputs.py{' --only ' + args.only if args.only else ''}` on "
        f"kronvi {getattr(kronvi, '__version__', '?')} from `{KRONVI_DIR}`, jax {jax.__version__}, "
        f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}, {time.perf_counter() - t_start:.0f} s.",
        "",
        f"**{counts['ok']} ok, {counts['NOT OK']} not ok, {counts['manual']} to read** of {len(rows)} cases.",
        "",
        "| group | ok | not ok | manual |",
        "|---|---|---|---|",
    ]
    for g in groups:
        n = [sum(r[0] == g and r[2] == v for r in rows) for v in ("ok", "NOT OK", "manual")]
        lines.append(f"| {g} | {n[0]} | {n[1]} | {n[2]} |")
    lines += ["", "| # | group | case | verdict | what happened | s |", "|---|---|---|---|---|---|"]
    lines += [f"| {i} | {g} | {t} | {v} | {w} | {s:.1f} |" for i, (g, t, v, w, s) in enumerate(rows, 1)]
    text = "\n".join(lines) + "\n"
    print("\n".join(lines[4:6 + len(groups) + 2]))
    if args.out:
        write(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
