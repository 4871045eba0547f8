import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tol

import kronvi


def _blocks(Phi, y, sizes):
    start = 0
    for size in sizes:
        yield Phi[start : start + size], y[start : start + size]
        start += size
    assert start == len(y)


def _assert_stats_close(a, b, r):
    for u, v in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(u, np.float64), np.asarray(v, np.float64), rtol=r, atol=r)


def test_streaming_equals_one_shot(dtype):
    rng = np.random.default_rng(0)
    Phi, y = rng.normal(size=(100, 4)).astype(dtype), rng.normal(size=100).astype(dtype)
    s = kronvi.stats.regression_stats_from_chunks(_blocks(Phi, y, [40, 40, 20]), chunk_size=8)
    assert s.PhitPhi.dtype == np.dtype(dtype)
    r = tol(dtype, x32=1e-5, x64=1e-12)
    _assert_stats_close(s, kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y)), r)
    P64, y64 = Phi.astype(np.float64), y.astype(np.float64)
    _assert_stats_close(s, (100.0, y64 @ y64, P64.T @ y64, P64.T @ P64), r)
    # blocks with a row mask (padding), and raw inputs through a feature map
    padded = (
        (np.pad(Phi[i : i + 50], ((0, 14), (0, 0))), np.pad(y[i : i + 50], (0, 14)), np.arange(64) < 50)
        for i in (0, 50)
    )
    _assert_stats_close(kronvi.stats.regression_stats_from_chunks(padded), s, r)
    params = kronvi.inputs.rff_init(jax.random.key(0), jnp.ones(4, dtype), 3)
    fmap = functools.partial(kronvi.inputs.rff_features, params)
    f = kronvi.stats.regression_stats_from_chunks(_blocks(Phi, y, [50, 50]), feature_map=fmap)
    _assert_stats_close(
        f, kronvi.stats.regression_stats_from_inputs(fmap, jnp.asarray(Phi), jnp.asarray(y)), r
    )


def test_streaming_from_a_memory_mapped_file(dtype, tmp_path):
    rng = np.random.default_rng(1)
    table = rng.normal(size=(203, 4)).astype(dtype)  # 3 feature columns, then y
    path = tmp_path / "rows.npy"
    np.save(path, table)

    def read(rows=50):
        data = np.load(path, mmap_mode="r")
        for start in range(0, data.shape[0], rows):
            block = np.asarray(data[start : start + rows])
            yield block[:, :3], block[:, 3]

    s = kronvi.stats.regression_stats_from_chunks(read())
    ref = kronvi.stats.regression_stats(jnp.asarray(table[:, :3]), jnp.asarray(table[:, 3]))
    _assert_stats_close(s, ref, tol(dtype, x32=1e-5, x64=1e-12))


def test_streaming_keeps_compensated_accuracy_across_blocks():
    # float32 blocks of 16 rows: the first with y = 4096 (y^T y = 2^28, spacing 32), then 299 with y ~ 1
    # (y^T y ~ 16 each). Folding merge_stats over the blocks rounds each small sum away; the stream
    # carries the rounding errors along and ends within half a spacing of the exact sum.
    rng = np.random.default_rng(2)
    n, size = 300 * 16, 16
    Phi = rng.normal(size=(n, 2)).astype(np.float32)
    y = rng.normal(size=n).astype(np.float32)
    y[:size] = 4096.0
    with jax.enable_x64(False):
        s = kronvi.stats.regression_stats_from_chunks(_blocks(Phi, y, [size] * 300))
        parts = [kronvi.stats.regression_stats(P, t) for P, t in _blocks(Phi, y, [size] * 300)]
        plain = functools.reduce(kronvi.stats.merge_stats, parts)
    exact = y.astype(np.float64) @ y.astype(np.float64)
    spacing = float(np.spacing(np.float32(exact)))
    err, plain_err = abs(float(s.yty) - exact), abs(float(plain.yty) - exact)
    assert err <= 0.5 * spacing + 1e-3, (err, plain_err, spacing)
    assert plain_err > 4 * spacing, (err, plain_err, spacing)


def test_streaming_errors_name_the_argument():
    with pytest.raises(ValueError, match="`chunks` yielded no blocks"):
        kronvi.stats.regression_stats_from_chunks(iter([]))
    with pytest.raises(ValueError, match=r"`chunks` must yield \(X, y\).*block 1 is a ndarray"):
        kronvi.stats.regression_stats_from_chunks([(np.ones((2, 2)), np.ones(2)), np.ones(3)])
    with pytest.raises(ValueError, match="`Phi` contains"):
        kronvi.stats.regression_stats_from_chunks([(np.full((2, 2), np.nan), np.ones(2))])
