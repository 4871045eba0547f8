"""Statistics of row-sharded global arrays (4 host devices, 2 processes), a row mask, the exact
cross-device sum and the streaming path, against single-device float64 references.

The multi-device cases run in fresh processes (``distributed_worker.py``): the device count is fixed when
jax starts, and ``jax.distributed.initialize`` needs processes of its own. They are spawned, never forked,
and time out instead of hanging.
"""

import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_python, subprocess_env, tol
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import kronvi

WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
TIMEOUT = 180  # seconds; a hang in a collective fails the test


def _env(*xla_flags):
    return subprocess_env(*xla_flags, OPENBLAS_NUM_THREADS="1")


def _reference(Phi, y, rows=slice(None)):
    """Dense float64 statistics of ``rows`` and the sums of absolute terms (the scale of rounding errors)."""
    P, t = np.asarray(Phi[rows], np.float64), np.asarray(y[rows], np.float64)
    ref = {"n": float(len(t)), "yty": t @ t, "Phity": P.T @ t, "PhitPhi": P.T @ P}
    scale = {"n": 1.0, "yty": t @ t, "Phity": np.abs(P).T @ np.abs(t), "PhitPhi": np.abs(P).T @ np.abs(P)}
    return ref, scale


def _assert_close(got, ref, scale, dtype, what):
    # float32: a few units of rounding relative to the sum of |terms| (compensated sums; the chunk matmuls
    # round within a chunk); float64 far tighter.
    r = tol(dtype, x32=1e-6, x64=1e-14)
    for field in ("n", "yty", "Phity", "PhitPhi"):
        g = got[field]
        assert g.dtype == np.dtype(dtype), (what, field, g.dtype)
        np.testing.assert_array_less(
            np.abs(g - ref[field]), r * scale[field] + 1e-300, err_msg=f"{what} {field}"
        )


def _single_device(dtype, fn, *args):
    with jax.enable_x64(dtype == "float64"):
        s = fn(*(jnp.asarray(a) for a in args))
        return {f: np.asarray(v) for f, v in zip(s._fields, s, strict=True)}


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    out = tmp_path_factory.mktemp("devices") / "out.npz"
    env = _env("--xla_force_host_platform_device_count=4")
    run_python(str(WORKER), "devices", str(out), env=env, timeout=TIMEOUT)
    return dict(np.load(out))


def _case(results, key):
    return {f: results[f"{key}/{f}"] for f in ("n", "yty", "Phity", "PhitPhi")}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sharded_stats_on_1_to_4_devices_equal_single_device(four_devices, dtype):
    res = four_devices
    Phi, y = res[f"{dtype}/Phi"], res[f"{dtype}/y"]
    ref, scale = _reference(Phi, y)
    single = _single_device(dtype, kronvi.stats.regression_stats, Phi, y)
    _assert_close(single, ref, scale, dtype, "one device")
    with jax.enable_x64(dtype == "float64"):  # a one-device mesh, in this process
        mesh = Mesh(np.array(jax.devices()[:1]), ("rows",))
        one = kronvi.stats.regression_stats(
            *(jax.device_put(a, NamedSharding(mesh, P("rows"))) for a in (Phi, y))
        )
    results = {"k1": {f: np.asarray(v) for f, v in zip(one._fields, one, strict=True)}}
    keys = [k for k in ("k2", "k4", "mesh2d-ab", "mesh2d-a") if f"{dtype}/{k}/n" in res]
    assert len(keys) >= 2
    results |= {key: _case(res, f"{dtype}/{key}") for key in keys}
    for key, got in results.items():
        assert key == "k1" or res[f"{dtype}/{key}/replicated"], key
        _assert_close(got, ref, scale, dtype, key)
        for f in got:  # and the single-device kronvi statistics, to the same accuracy
            np.testing.assert_array_less(
                np.abs(got[f] - single[f]), 2 * tol(dtype, x32=1e-6, x64=1e-14) * scale[f] + 1e-300
            )
    # 1000 rows padded with NaN rows to 1002 on 3 devices; the mask drops the padding
    ref, scale = _reference(Phi, y, slice(0, 1000))
    assert res[f"{dtype}/uneven/replicated"]
    _assert_close(_case(res, f"{dtype}/uneven"), ref, scale, dtype, "uneven")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sharded_stats_from_inputs_with_padding(four_devices, dtype):
    res = four_devices
    X, y = res[f"{dtype}/X"], res[f"{dtype}/y"]
    with jax.enable_x64(dtype == "float64"):
        params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(X.shape[1], dtype), 4)
        F = np.asarray(kronvi.inputs.rff_features(params, jnp.asarray(X)))
    ref, scale = _reference(F, y, slice(0, 1000))
    assert res[f"{dtype}/uneven-features/replicated"]
    _assert_close(
        _case(res, f"{dtype}/uneven-features"), ref, {k: 2 * v for k, v in scale.items()}, dtype, "features"
    )


def test_cross_device_sum_is_exact(four_devices):
    # shard sums 2^24, 1, -2^24, 0.5 in float32: a plain psum returns 0 or 0.5
    assert four_devices["cancel/Phity"].tolist() == [1.5]


def test_nan_in_a_sharded_input_names_the_argument(four_devices):
    message = str(four_devices["nan/message"])
    assert "`stats.PhitPhi`" in message and "`Phi` or `y` may hold NaN/inf" in message, message


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_get_the_single_process_statistics(tmp_path):
    port = _free_port()
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "process", str(i), str(port), str(outs[i])],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        logs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, logs, strict=True):
        assert p.returncode == 0, err[-3000:]
    got = [dict(np.load(o)) for o in outs]
    for dtype in ("float32", "float64"):
        Phi, y, X = (got[0][f"{dtype}/{name}"] for name in ("Phi", "y", "X"))
        ref, scale = _reference(Phi, y)
        with jax.enable_x64(dtype == "float64"):
            params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(X.shape[1], dtype), 4)
            F = np.asarray(kronvi.inputs.rff_features(params, jnp.asarray(X)))
        fref, fscale = _reference(F, y)
        for g in got:
            _assert_close(_case(g, f"{dtype}/stats"), ref, scale, dtype, "2 processes")
            if f"{dtype}/features/n" in g:
                _assert_close(
                    _case(g, f"{dtype}/features"),
                    fref,
                    {k: 2 * v for k, v in fscale.items()},
                    dtype,
                    "features",
                )
        for key in g:  # both processes hold the same replicated statistics
            np.testing.assert_array_equal(got[0][key], got[1][key])


def test_mask_on_one_device_drops_rows(dtype):
    rng = np.random.default_rng(1)
    Phi, y = rng.normal(size=(30, 3)).astype(dtype), rng.normal(size=30).astype(dtype)
    keep = rng.random(30) < 0.6
    Phi[~keep] = np.nan  # masked rows may hold anything
    s = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y), mask=jnp.asarray(keep), chunk_size=7)
    ref, scale = _reference(Phi, y, keep)
    _assert_close(
        {f: np.asarray(v) for f, v in zip(s._fields, s, strict=True)},
        ref,
        scale,
        np.dtype(dtype).name,
        "mask",
    )
    # inside jit too (the mask is traced)
    t = jax.jit(lambda P, t, m: kronvi.stats.regression_stats(P, t, mask=m))(
        jnp.asarray(Phi), jnp.asarray(y), keep
    )
    np.testing.assert_allclose(t.PhitPhi, s.PhitPhi, rtol=tol(dtype))


def test_bad_mask_names_the_argument():
    with pytest.raises(ValueError, match=r"`mask` must have shape \(4,\)"):
        kronvi.stats.regression_stats(jnp.ones((4, 2)), jnp.ones(4), mask=np.ones(3, bool))
    with pytest.raises(TypeError, match="`mask` must hold booleans"):
        kronvi.stats.regression_stats(jnp.ones((4, 2)), jnp.ones(4), mask=np.array(["a"] * 4))
