"""Runs sharded statistics in a fresh process for tests/stats/test_distributed.py (jax must start with the
right devices, so these cases cannot run inside the pytest process). Writes every result, and the data it
used, to an ``.npz`` file; the test compares them with single-device references.

  python distributed_worker.py devices OUT.npz              # one process, 4 host devices (XLA_FLAGS)
  python distributed_worker.py process I PORT OUT.npz       # process I of 2 after jax.distributed.initialize

Nothing runs on import (pytest imports this file to collect doctests).
"""

from __future__ import annotations

import functools
import sys

import numpy as np

N, B, D = 1200, 6, 3  # rows (divisible by 1..4 devices), features, raw inputs


def data(dtype, n=N):
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(n, B)).astype(dtype)
    y = (3.0 + rng.normal(size=n)).astype(dtype)  # an offset, as uncentred targets have
    X = rng.normal(size=(n, D)).astype(dtype)
    return Phi, y, X


def _feature_map(dtype):
    import jax
    import jax.numpy as jnp

    import kronvi

    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(D, dtype), 4)
    return functools.partial(kronvi.inputs.rff_features, params)


def _garbage_padding(a, rows):
    """``a`` with ``rows`` rows of NaN appended: padding that must not count."""
    return np.concatenate([a, np.full((rows,) + a.shape[1:], np.nan, a.dtype)])


def devices(out):
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import kronvi

    assert jax.device_count() == 4, jax.devices()
    devs = jax.devices()
    results = {}

    def put(a, mesh, spec):
        return jax.device_put(a, NamedSharding(mesh, spec))

    def save(key, stats, mesh):
        for field, value in zip(stats._fields, stats, strict=True):
            results[f"{key}/{field}"] = np.asarray(value)
        results[f"{key}/replicated"] = np.array(
            all(v.sharding.is_fully_replicated and len(v.sharding.device_set) == mesh.size for v in stats)
        )

    # (dtype, case): every case compiles once (~0.7 s on 2 cores), so float64 repeats only some of them
    cases = {
        "float32": ("k2", "k4", "mesh2d-ab", "mesh2d-a", "uneven", "uneven-features"),  # uneven: 3 devices
        "float64": ("k2", "k4", "uneven", "uneven-features"),
    }
    for dtype, x64 in (("float32", False), ("float64", True)):
        with jax.enable_x64(x64):
            Phi, y, X = data(dtype)
            results[f"{dtype}/Phi"], results[f"{dtype}/y"], results[f"{dtype}/X"] = Phi, y, X
            for case in cases[dtype]:
                if case.startswith("k"):  # rows over k devices; with 4, several chunks per shard
                    mesh = Mesh(np.array(devs[: int(case[1])]), ("rows",))
                    chunk = 128 if case == "k4" else None
                    s = kronvi.stats.regression_stats(
                        put(Phi, mesh, P("rows")), put(y, mesh, P("rows")), chunk_size=chunk
                    )
                elif case.startswith("mesh2d"):  # rows over both axes of a 2x2 mesh, or over one (replicated)
                    mesh = Mesh(np.array(devs).reshape(2, 2), ("a", "b"))
                    spec = ("a", "b") if case == "mesh2d-ab" else "a"
                    s = kronvi.stats.regression_stats(put(Phi, mesh, P(spec)), put(y, mesh, P(spec)))
                else:  # 1000 rows on 3 devices: padded to 1002 with NaN rows and a mask
                    mesh = Mesh(np.array(devs[:3]), ("rows",))
                    Pp, yp, Xp = (put(_garbage_padding(a[:1000], 2), mesh, P("rows")) for a in (Phi, y, X))
                    mask = put(np.arange(1002) < 1000, mesh, P("rows"))
                    if case == "uneven":
                        s = kronvi.stats.regression_stats(Pp, yp, mask=mask)
                    else:
                        s = kronvi.stats.regression_stats_from_inputs(
                            _feature_map(dtype), Xp, yp, mask=mask, chunk_size=100
                        )
                save(f"{dtype}/{case}", s, mesh)

    # A NaN in a sharded input (not checked on the host) is reported through the statistics.
    with jax.enable_x64(False):
        mesh = Mesh(np.array(devs[:2]), ("rows",))
        Phi, y, _ = data("float32")
        Phi[5, 1] = np.nan
        try:
            kronvi.stats.regression_stats(put(Phi, mesh, P("rows")), put(y, mesh, P("rows")))
            results["nan/message"] = np.array("no error")
        except ValueError as e:
            results["nan/message"] = np.array(str(e))

    # Cancellation across shards: the shard sums of Phi^T y are 2^24, 1, -2^24, 0.5. A plain float32
    # psum loses the 1 or the 0.5; the single-device compensated kernel and the exact sum give 1.5.
    with jax.enable_x64(False):
        mesh = Mesh(np.array(devs), ("rows",))
        y = np.array([2.0**23, 2.0**23, 0.5, 0.5, -(2.0**23), -(2.0**23), 0.25, 0.25], np.float32)
        s = kronvi.stats.regression_stats(
            put(np.ones((8, 1), np.float32), mesh, P("rows")), put(y, mesh, P("rows"))
        )
        results["cancel/Phity"] = np.asarray(s.Phity)
    np.savez(out, **results)


def process(i, port, out):
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=i)
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import kronvi

    assert jax.process_count() == 2 and jax.device_count() == 2, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("rows",))
    rows = NamedSharding(mesh, P("rows"))
    results = {}
    for dtype, x64 in (("float32", False), ("float64", True)):
        with jax.enable_x64(x64):
            Phi, y, X = data(dtype, n=1000)
            results[f"{dtype}/Phi"], results[f"{dtype}/y"], results[f"{dtype}/X"] = Phi, y, X
            # process 0 holds rows 0..599, process 1 rows 600..999, padded to 600 (NaN rows, masked out)
            mine = slice(0, 600) if i == 0 else slice(600, 1000)
            pad = 600 - (mine.stop - mine.start)
            local = [_garbage_padding(a[mine], pad) for a in (Phi, y, X)]
            local_mask = np.arange(600) < 600 - pad
            Pg, yg, Xg, mg = (jax.make_array_from_process_local_data(rows, a) for a in (*local, local_mask))
            assert not Pg.is_fully_addressable and Pg.shape == (1200, B)
            computed = {"stats": kronvi.stats.regression_stats(Pg, yg, mask=mg)}
            if dtype == "float32":  # each case compiles once (~0.7 s): features in one precision
                computed["features"] = kronvi.stats.regression_stats_from_inputs(
                    _feature_map(dtype), Xg, yg, mask=mg
                )
            for key, stats in computed.items():
                for field, value in zip(stats._fields, stats, strict=True):
                    assert value.sharding.is_fully_replicated
                    results[f"{dtype}/{key}/{field}"] = np.asarray(value)
    np.savez(out, **results)
    jax.distributed.shutdown()


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "devices":
        devices(rest[0])
    elif mode == "process":
        process(int(rest[0]), int(rest[1]), rest[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
