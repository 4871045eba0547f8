"""Opt-in progress reporting of the scanned loops: steps, default-off, tqdm-absent path, vmap and jit."""

import builtins
import io
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import count_compiles

import kronvi
from kronvi._base import progress as prog


def _reparam_problem():
    X = jax.random.normal(jax.random.key(0), (60, 2))
    y = X @ jnp.array([1.0, -1.0])
    q0 = kronvi.gaussian.GaussianMeanField(jnp.zeros(2), jnp.full(2, -3.0))
    kw = dict(init=(q0, 1.0), prior_scale=1.0, optimizer=optax.adam(0.05), num_steps=23, batch_size=10)
    return X, y, kw


def test_callable_receives_every_kth_step_and_the_last_with_the_info_values():
    X, y, kw = _reparam_problem()
    seen = []
    q, s2, info = kronvi.gaussian.fit_gaussian_reparam(
        jax.random.key(1), X, y, progress=lambda s, t, m: seen.append((s, t, m)), progress_every=5, **kw
    )
    assert [s for s, _, _ in seen] == [5, 10, 15, 20, 23]
    assert all(t == 23 and isinstance(s, int) for s, t, _ in seen)
    for s, _, m in seen:  # the metrics are that step's ReparamInfo
        assert set(m) == {"elbo", "grad_norm"} and isinstance(m["elbo"], float)
        assert m["elbo"] == pytest.approx(float(info.steps.elbo[s - 1]), rel=1e-6)
        assert m["grad_norm"] == pytest.approx(float(info.steps.grad_norm[s - 1]), rel=1e-6)
    # the result does not depend on reporting
    q2, s22, _ = kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, **kw)
    np.testing.assert_array_equal(np.asarray(q.mean), np.asarray(q2.mean))
    assert float(s2) == float(s22)


def test_default_interval_reports_about_100_times():
    assert prog.check_progress(None, None, 1000) == 10
    assert prog.check_progress(True, None, 50) == 1
    with pytest.raises(ValueError, match="progress_every"):
        prog.check_progress(True, 0, 10)
    with pytest.raises(TypeError, match="progress"):
        prog.check_progress("yes", None, 10)


def test_mixture_sgd_and_elrg_report_their_steps():
    Phi = jax.random.normal(jax.random.key(0), (30, 2))
    stats = kronvi.stats.regression_stats(Phi, Phi[:, 0])
    pw, pn = kronvi.model.gaussian_prior(2, 1.0, levels=5), kronvi.model.noise_prior(0.1)
    qw, qn = (
        kronvi.model.MeanField.from_prior(pw),
        kronvi.model.MeanField.from_prior(pn),
    )  # any start: no CAVI compile
    q0 = kronvi.mixtures.mixture_from_mean_field(jax.random.key(1), qw, 2)
    seen = []
    info = kronvi.mixtures.fit_mixture_sgd(
        jax.random.key(2), stats, pw, pn, init=(q0, qn), optimizer=optax.adam(0.05), num_steps=7,
        num_samples=8, progress=lambda s, t, m: seen.append((s, t, m["elbo"])), progress_every=3,
    ).info  # fmt: skip
    assert [(s, t) for s, t, _ in seen] == [(3, 7), (6, 7), (7, 7)]
    assert seen[-1][2] == pytest.approx(float(info.steps.elbo[-1]), rel=1e-6)
    seen.clear()
    kronvi.gaussian.fit_elrg(
        jax.random.key(3), None, 1.0, 0.1, rank=1, objective="local-reparam", data=(Phi, Phi[:, 0]),
        optimizer=optax.adam(0.01), num_steps=4, batch_size=8, progress=lambda s, t, m: seen.append(s),
        progress_every=2,
    )  # fmt: skip
    assert seen == [2, 4]


def test_logistic_sgd_reports_its_steps_as_the_others_do(capsys):
    Phi = jax.random.normal(jax.random.key(0), (40, 2))
    y = (Phi[:, 0] > 0).astype(Phi.dtype)
    prior = kronvi.model.gaussian_prior(2, 1.0, levels=5)
    kw = dict(method="sgd", key=jax.random.key(1), num_steps=9, batch_size=10, init="prior")
    seen = []
    q, info = kronvi.logistic.fit_logistic(
        Phi, y, prior, progress=lambda s, t, m: seen.append((s, t, m)), progress_every=4, **kw
    )
    assert [(s, t) for s, t, _ in seen] == [(4, 9), (8, 9), (9, 9)]
    for s, _, m in seen:  # the step's minibatch estimate, as the trace holds it, and its gradient norm
        assert set(m) == {"elbo", "grad_norm"} and m["grad_norm"] > 0
        assert m["elbo"] == pytest.approx(float(info.elbo[s - 1]), rel=1e-6)
    q2, _ = kronvi.logistic.fit_logistic(Phi, y, prior, progress=True, progress_every=4, **kw)
    err = capsys.readouterr().err  # not a terminal: plain lines, the first report and the last
    assert re.findall(r"^logistic SGD: step (\d+)/9 elbo \S+ grad_norm \S+", err, re.M) == ["4", "9"], err
    np.testing.assert_array_equal(np.asarray(q.logits), np.asarray(q2.logits))
    kronvi.logistic.fit_logistic(Phi, y, prior, progress=lambda *a: seen.append(a), max_iter=3, init="prior")
    assert len(seen) == 3  # L-BFGS has no steps to report


def test_default_adds_no_callback_to_the_compiled_loop():
    X, y, kw = _reparam_problem()
    jaxpr = str(
        jax.make_jaxpr(lambda k: kronvi.gaussian.fit_gaussian_reparam(k, X, y, **kw))(jax.random.key(0))
    )
    assert "callback" not in jaxpr

    def loop(progress_args):
        def body(c, i):
            prog.report_progress(progress_args, i, 4, {"c": c})
            return c + 1.0, None

        return jax.lax.scan(body, 0.0, jnp.arange(4))[0]

    assert "callback" not in str(jax.make_jaxpr(loop)(None))
    on = (jnp.asarray(1, jnp.int32), jnp.asarray(1, jnp.int32))
    assert "callback" in str(jax.make_jaxpr(loop)(on))  # the check above can fail


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_true_without_tqdm_on_a_terminal_redraws_one_line(monkeypatch):
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError("no tqdm here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    X, y, kw = _reparam_problem()
    kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, progress=True, progress_every=10, **kw)
    err = sys.stderr.getvalue()
    steps = re.findall(r"\rREPARAM: step (\d+)/23 elbo \S+ grad_norm \S+ \(\S+s elapsed, eta \S+s\)", err)
    assert steps == ["10", "20", "23"], err
    assert err.endswith("\n") and err.count("\n") == 1 and "nan" not in err


def test_true_off_a_terminal_writes_plain_lines_at_a_modest_rate(monkeypatch, capsys):
    X, y, kw = _reparam_problem()
    kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, progress=True, progress_every=10, **kw)
    err = capsys.readouterr().err  # not a terminal: no tqdm bar, no carriage return
    assert "\r" not in err and "nan" not in err and "it/s" not in err
    # a fast fit: the first report and the last, within the 10-second spacing
    assert re.findall(r"^REPARAM: step (\d+)/23 .*\(\S+ elapsed, eta \S+\)$", err, re.M) == ["10", "23"], err
    monkeypatch.setattr(prog, "PLAIN_LINE_SECONDS", 0.0)
    kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, progress=True, progress_every=10, **kw)
    assert re.findall(r"^REPARAM: step (\d+)/23", capsys.readouterr().err, re.M) == ["10", "20", "23"]


def test_plain_lines_keep_their_spacing_and_always_show_the_last():
    out, clock = io.StringIO(), _Clock()
    line = prog.StatusLine(file=out, min_interval=10.0, clock=clock)
    assert not line.terminal
    for t in range(0, 35):  # one status a second
        clock.now = float(t)
        line.show(f"status {t}", final=t == 34)
    line.close()
    assert out.getvalue().splitlines() == ["status 0", "status 10", "status 20", "status 30", "status 34"]
    assert "\r" not in out.getvalue()


def test_a_terminal_line_is_redrawn_and_ended_once():
    out = _Terminal()
    line = prog.StatusLine(file=out)
    assert line.terminal
    line.show("a long first status")
    line.show("short", final=True)
    line.close()  # already ended: nothing more
    assert out.getvalue() == "\ra long first status\x1b[K\rshort\x1b[K\n"
    closed = io.StringIO()
    closed.close()
    assert not prog.is_terminal(closed) and not prog.is_terminal(object())


def test_eta_is_a_question_mark_until_known():
    assert prog.format_eta(0.0, 0, 10) == "eta ?"
    assert prog.format_eta(float("nan"), 3, 10) == "eta ?"
    assert prog.format_eta(6.0, 3, 10) == "eta 14.0s"
    assert prog.format_eta(6.0, 12, 10) == "eta 0.0s"


def test_true_with_tqdm_draws_a_bar_on_a_terminal(monkeypatch):
    import tqdm  # noqa: F401  (in the `test` extra: the bar must be drawn, not the test skipped)

    monkeypatch.setattr(sys, "stderr", _Terminal())
    X, y, kw = _reparam_problem()
    kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, progress=True, progress_every=10, **kw)
    err = sys.stderr.getvalue()
    assert "REPARAM" in err and "23/23" in err and "it/s" in err


def test_under_vmap_each_fold_reports_and_under_jit_it_is_a_clear_error():
    X, y, kw = _reparam_problem()
    seen = []

    def fit(key, progress):
        return kronvi.gaussian.fit_gaussian_reparam(key, X, y, progress=progress, progress_every=10, **kw)[1]

    keys = jax.random.split(jax.random.key(0), 3)
    s2 = jax.vmap(lambda k: fit(k, lambda s, t, m: seen.append((s, m["elbo"]))))(keys)
    assert sorted(s for s, _ in seen) == [10] * 3 + [20] * 3 + [23] * 3
    np.testing.assert_array_equal(np.asarray(s2), np.asarray(jax.vmap(lambda k: fit(k, None))(keys)))
    with pytest.raises(ValueError, match="outer jax.jit"):
        jax.jit(lambda k: fit(k, lambda *a: None))(keys[0])
    assert prog._REPORTERS == {}  # nothing left registered


def test_one_compile_serves_different_callables():
    X, y, kw = _reparam_problem()
    kronvi.gaussian.fit_gaussian_reparam(jax.random.key(1), X, y, progress=lambda *a: None, **kw)
    with count_compiles() as compiles:
        kronvi.gaussian.fit_gaussian_reparam(jax.random.key(2), X, y, progress=lambda *a: None, **kw)
        kronvi.gaussian.fit_gaussian_reparam(jax.random.key(3), X, y, progress=True, **kw)
    assert len(compiles) == 0
