import gzip
import pathlib
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi

SHARED_UCI = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "uci"
needs_shared = pytest.mark.skipif(not SHARED_UCI.is_dir(), reason="../shared/data/uci is not available")


def _write_gz(path, text):
    with gzip.open(path, "wt") as f:
        f.write(text)


def _write_uci(folder, data_text, mask_text):
    folder.mkdir(parents=True, exist_ok=True)
    _write_gz(folder / "data.csv.gz", data_text)
    _write_gz(folder / "test_mask.csv.gz", mask_text)
    return folder


GOOD_DATA = "1,2,10\n3,4,20\n5,6,30\n7,8,40\n"
GOOD_MASK = "1,0\n0,1\n1,0\n0,1\n"


# ---------------------------------------------------------------------------------------------------
# Standardizer


def test_standardizer_zero_mean_unit_scale(dtype):
    X = np.random.default_rng(0).normal(3.0, 5.0, size=(50, 4))
    st = kronvi.inputs.fit_standardizer(jnp.asarray(X, dtype))
    assert isinstance(st, kronvi.inputs.Standardizer)
    assert st.mean.dtype == jnp.dtype(dtype) and st.scale.shape == (4,)
    Z = np.asarray(kronvi.inputs.standardize(st, jnp.asarray(X, dtype)), np.float64)
    np.testing.assert_allclose(Z.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(Z.std(0), 1.0, rtol=1e-5)


def test_standardizer_of_huge_columns_is_finite_and_exact(dtype):
    """Squared deviations overflowed above 1.8e19 (float32) and 1.3e154 (float64): the column got scale
    inf and was standardized to zeros. Scaled by a power of two first, the moments are those of the
    scaled-down column, scaled back exactly."""
    big = 1e30 if dtype == np.float32 else 1e200
    X = np.random.default_rng(0).normal(3.0, 5.0, size=(50, 3))
    small = kronvi.inputs.fit_standardizer(jnp.asarray(X, dtype))
    X_big = X * [1.0, big, 1.0 / big]
    st = kronvi.inputs.fit_standardizer(jnp.asarray(X_big, dtype))
    np.testing.assert_allclose(
        np.asarray(st.scale, np.float64) / [1.0, big, 1.0 / big], small.scale, rtol=1e-6
    )
    np.testing.assert_allclose(np.asarray(st.mean, np.float64) / [1.0, big, 1.0 / big], small.mean, rtol=1e-6)
    Z = np.asarray(kronvi.inputs.standardize(st, jnp.asarray(X_big, dtype)), np.float64)
    np.testing.assert_allclose(Z.std(0), 1.0, rtol=1e-5)
    # ordinary columns: the same numbers as the unscaled formulas, to the rounding of a sum (the rows are
    # summed padded to a bucket of row counts, kronvi._base.buckets: another order of the same terms)
    X = jnp.asarray(X, dtype)
    mean = jnp.mean(X, axis=0)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(small.mean, mean, rtol=4 * eps)
    np.testing.assert_allclose(small.scale, jnp.sqrt(jnp.mean((X - mean) ** 2, axis=0)), rtol=4 * eps)


@pytest.mark.parametrize("value", [0.0, 0.1, -7.3, 1e6])
def test_constant_columns_get_unit_scale(dtype, value):
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(size=1000), np.full(1000, value), rng.normal(size=1000)])
    X = jnp.asarray(X, dtype)
    st = kronvi.inputs.fit_standardizer(X)
    assert float(st.scale[1]) == 1.0
    Z = np.asarray(kronvi.inputs.standardize(st, X))
    assert np.all(np.isfinite(Z)) and np.all(np.isfinite(np.asarray(st.scale)))
    np.testing.assert_allclose(Z[:, 1], 0.0, atol=1e-6 * max(1.0, abs(value)))
    # test rows with a different constant stay finite too
    assert np.all(np.isfinite(np.asarray(kronvi.inputs.standardize(st, X + 1.0))))


def test_single_row_standardizer_is_finite():
    st = kronvi.inputs.fit_standardizer(jnp.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(np.asarray(st.scale), [1.0, 1.0])


def test_standardizer_jit_and_validation():
    X = jnp.arange(12.0).reshape(4, 3)
    st = jax.jit(kronvi.inputs.fit_standardizer)(X)
    np.testing.assert_allclose(jax.jit(kronvi.inputs.standardize)(st, X), kronvi.inputs.standardize(st, X))
    with pytest.raises(ValueError, match="`X` must be 2-D"):
        kronvi.inputs.fit_standardizer(jnp.ones(3))
    with pytest.raises(ValueError, match="`X` is empty"):
        kronvi.inputs.fit_standardizer(jnp.ones((0, 3)))
    with pytest.raises(ValueError, match="NaN"):
        kronvi.inputs.fit_standardizer(jnp.array([[1.0], [jnp.nan]]))
    with pytest.raises(ValueError, match="fit on 3"):
        kronvi.inputs.standardize(st, jnp.ones((2, 2)))
    with pytest.raises(TypeError, match="Standardizer"):
        kronvi.inputs.standardize((st.mean, st.scale), X)


# ---------------------------------------------------------------------------------------------------
# Loading


def test_load_uci_roundtrip(tmp_path):
    X, y, mask = kronvi.load_uci(_write_uci(tmp_path / "toy", GOOD_DATA, GOOD_MASK))
    assert X.dtype == np.float64 and y.dtype == np.float64
    np.testing.assert_array_equal(X, [[1, 2], [3, 4], [5, 6], [7, 8]])
    np.testing.assert_array_equal(y, [10, 20, 30, 40])
    assert mask.shape == (4, 2) and np.issubdtype(mask.dtype, np.integer)
    np.testing.assert_array_equal(kronvi.inputs.fold_indices(mask), [0, 1, 0, 1])


@pytest.mark.parametrize(
    "data, mask, match",
    [
        ("1,2,10\n3,4\n5,6,30\n7,8,40\n", GOOD_MASK, "ragged rows: line 2 has 2 fields"),
        ("1,2,10\n3,nan,20\n5,6,30\n7,8,40\n", GOOD_MASK, "NaN or infinite.*line 2, column 1"),
        ("1,2,10\n3,inf,20\n5,6,30\n7,8,40\n", GOOD_MASK, "NaN or infinite"),
        ("1,2,10\n3,x,20\n5,6,30\n7,8,40\n", GOOD_MASK, "non-numeric value 'x' on line 2"),
        ("", GOOD_MASK, "no data rows"),
        ("1\n2\n3\n4\n", GOOD_MASK, "at least 2 columns"),
        (GOOD_DATA, "1,0\n1,1\n1,0\n0,1\n", "exactly one test fold.*row 1 sums to 2"),
        (GOOD_DATA, "1,0\n0,0\n1,0\n0,1\n", "exactly one test fold"),
        (GOOD_DATA, "1,0\n0,1\n1,0\n", "3 rows but the data have 4"),
        (GOOD_DATA, "1,0\n0,2\n1,0\n0,1\n", "only 0 and 1"),
        (GOOD_DATA, "1,0\n1,0\n1,0\n1,0\n", r"fold\(s\) \[1\] without test rows"),
    ],
)
def test_load_uci_errors(tmp_path, data, mask, match):
    folder = _write_uci(tmp_path / "bad", data, mask)
    with pytest.raises(ValueError, match=match):
        kronvi.load_uci(folder)


def test_load_uci_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        kronvi.load_uci(tmp_path / "nope")
    (tmp_path / "half").mkdir()
    _write_gz(tmp_path / "half" / "data.csv.gz", GOOD_DATA)
    with pytest.raises(FileNotFoundError, match="test_mask.csv.gz"):
        kronvi.load_uci(tmp_path / "half")


def test_load_demo_is_yacht():
    X, y, mask = kronvi.load_demo()
    assert X.shape == (308, 6) and y.shape == (308,) and mask.shape == (308, 10)
    assert np.all(mask.sum(1) == 1)
    folds = kronvi.inputs.fold_indices(mask)
    assert folds.shape == (308,) and set(folds.tolist()) == set(range(10))
    np.testing.assert_array_equal(mask[np.arange(308), folds], 1)
    # The fold ids plug into kfold_stats.
    train, test = kronvi.stats.kfold_stats(X, y, folds)
    assert train.n.shape == (10,)
    np.testing.assert_allclose(np.asarray(train.n) + np.asarray(test.n), 308)


@needs_shared
def test_load_uci_shared_yacht_matches_demo():
    X, y, mask = kronvi.load_uci(SHARED_UCI / "yacht")
    Xd, yd, maskd = kronvi.load_demo()
    np.testing.assert_array_equal(X, Xd)
    np.testing.assert_array_equal(y, yd)
    np.testing.assert_array_equal(mask, maskd)


@needs_shared
def test_load_uci_shared_constant_column_standardizes():
    X, _, mask = kronvi.load_uci(SHARED_UCI / "challenger")  # has a constant input column
    train = kronvi.inputs.fold_indices(mask) != 0
    st = kronvi.inputs.fit_standardizer(X[train])
    Z = np.asarray(kronvi.inputs.standardize(st, X))
    assert np.all(np.isfinite(Z))
    assert np.any(np.asarray(st.scale) == 1.0)


def test_load_csv_header_and_target(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("a, b ,target\n1,2,3\n4,5,6\n\n")
    X, y = kronvi.load_csv(p)
    np.testing.assert_array_equal(X, [[1, 2], [4, 5]])
    np.testing.assert_array_equal(y, [3, 6])
    X0, y0 = kronvi.load_csv(p, target_column=0)
    np.testing.assert_array_equal(X0, [[2, 3], [5, 6]])
    np.testing.assert_array_equal(y0, [1, 4])
    X1, y1 = kronvi.load_csv(str(p), target_column=-2)
    np.testing.assert_array_equal(X1, [[1, 3], [4, 6]])
    np.testing.assert_array_equal(y1, [2, 5])


def test_load_csv_no_header_and_gzip(tmp_path):
    p = tmp_path / "n.csv"
    p.write_text("1,2,3\n4,5,6\n-1e3,0.5,7\n")
    X, y = kronvi.load_csv(p)
    assert X.shape == (3, 2) and X.dtype == np.float64
    np.testing.assert_array_equal(y, [3, 6, 7])
    g = tmp_path / "n.csv.gz"
    _write_gz(g, p.read_text())
    Xg, yg = kronvi.load_csv(g)
    np.testing.assert_array_equal(Xg, X)
    np.testing.assert_array_equal(yg, y)


def test_load_csv_errors(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="`target_column` 2 is out of range for 2 columns"):
        kronvi.load_csv(p, target_column=2)
    with pytest.raises(TypeError, match="target_column"):
        kronvi.load_csv(p, target_column="y")
    with pytest.raises(FileNotFoundError, match="no such file"):
        kronvi.load_csv(tmp_path / "missing.csv")
    with pytest.raises(IsADirectoryError, match=r"^`path` .* is a folder, not a file$"):
        kronvi.load_csv(tmp_path)
    p.write_text("x,y\n1,2\n3,oops\n")
    with pytest.raises(ValueError, match="non-numeric value 'oops' on line 3"):
        kronvi.load_csv(p)
    p.write_text("x,y\n")
    with pytest.raises(ValueError, match="no data rows"):
        kronvi.load_csv(p)


def test_fold_indices_validation():
    np.testing.assert_array_equal(kronvi.inputs.fold_indices(np.eye(3, dtype=int)), [0, 1, 2])
    with pytest.raises(ValueError, match="exactly one test fold"):
        kronvi.inputs.fold_indices([[1, 1], [0, 1]])
    with pytest.raises(ValueError, match="2-D"):
        kronvi.inputs.fold_indices([1, 0, 1])


def test_load_csv_never_drops_a_data_row(tmp_path):
    p = tmp_path / "d.csv"
    # a UTF-8 byte-order mark on a header-less file: the first row is data, not a header
    p.write_bytes(b"\xef\xbb\xbf1,2,3\n4,5,6\n")
    X, y = kronvi.load_csv(p)
    np.testing.assert_array_equal(y, [3, 6])
    # ... and on a file with a header
    p.write_bytes(b"\xef\xbb\xbfa,b,y\n1,2,3\n")
    np.testing.assert_array_equal(kronvi.load_csv(p)[1], [3])
    # a first row with some numbers and some text is neither header nor data
    p.write_text("1,oops,3\n4,5,6\n")
    with pytest.raises(ValueError, match=r"line 1 mixes numbers and text \(column 1: 'oops'\)"):
        kronvi.load_csv(p)
    p.write_text("id,2019,y\n4,5,6\n")
    with pytest.raises(ValueError, match="line 1 mixes numbers and text"):
        kronvi.load_csv(p)
    X, y = kronvi.load_csv(p, header=True)
    np.testing.assert_array_equal(y, [6])
    p.write_text("a,b,y\n4,5,6\n")
    with pytest.raises(ValueError, match="non-numeric value 'a' on line 1"):
        kronvi.load_csv(p, header=False)
    with pytest.raises(ValueError, match="`header` must be"):
        kronvi.load_csv(p, header="yes")


def test_truncated_or_corrupt_gzip_names_the_file(tmp_path):
    g = tmp_path / "t.csv.gz"
    _write_gz(g, "1,2,3\n" * 2000)
    raw = g.read_bytes()
    g.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"t\.csv\.gz.*truncated or corrupt gzip"):
        kronvi.load_csv(g)
    g.write_bytes(raw[:10] + b"\x00" * 20 + raw[30:])
    with pytest.raises(ValueError, match=r"t\.csv\.gz.*truncated or corrupt gzip"):
        kronvi.load_csv(g)
    folder = _write_uci(tmp_path / "u", GOOD_DATA, GOOD_MASK)
    mask = folder / "test_mask.csv.gz"
    mask.write_bytes(mask.read_bytes()[:-6])
    with pytest.raises(ValueError, match=r"test_mask\.csv\.gz.*truncated or corrupt gzip"):
        kronvi.load_uci(folder)


def test_load_csv_refuses_a_header_of_another_width_naming_the_lines(tmp_path):
    p = tmp_path / "h.csv"
    for text, got in [("a,b\n1,2,3\n4,5,6\n", "has 2 fields but line 2 has 3"),
                      ("a,b,c,d\n1,2,3\n", "has 4 fields but line 2 has 3")]:  # fmt: skip
        p.write_text(text)
        with pytest.raises(ValueError, match=rf"the header \(line 1\) {got}"):
            kronvi.load_csv(p)
        with pytest.raises(ValueError, match=rf"the header \(line 1\) {got}"):
            kronvi.load_csv(p, header=True)
    p.write_text("a,b,y\n1,2,3\n4,5\n")
    with pytest.raises(ValueError, match="ragged rows: line 3 has 2 fields, the header has 3"):
        kronvi.load_csv(p)


def test_load_csv_names_an_over_long_field_and_its_line(tmp_path):
    p = tmp_path / "long.csv"
    p.write_text("1,2,3\n4," + "5" * 200_000 + ",6\n")
    with pytest.raises(ValueError, match=r"line 2 has a field longer than 131072 characters"):
        kronvi.load_csv(p)


def test_gzip_inflating_past_the_cap_is_refused_before_it_is_parsed(tmp_path):
    g = tmp_path / "bomb.csv.gz"
    with gzip.open(g, "wb") as f:
        row = b"0,0,0,0\n" * 2**15  # 256 KiB
        for _ in range(16):
            f.write(row)
    assert g.stat().st_size < 2**20 // 16
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError, match=r"bomb\.csv\.gz.*inflate to more than `max_inflated_bytes`=1048576"
        ):
            kronvi.load_csv(g, max_inflated_bytes=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20  # inflated by the first pass in 256 KiB pieces, never parsed nor kept
    X, y = kronvi.load_csv(g, max_inflated_bytes=None)
    assert X.shape == (16 * 2**15, 3)
    assert kronvi.load_csv(g)[1].shape == (16 * 2**15,)  # the default (1 GiB) takes 4 MiB
    folder = _write_uci(tmp_path / "u", GOOD_DATA, GOOD_MASK)
    with pytest.raises(ValueError, match=r"data\.csv\.gz.*max_inflated_bytes`=10 "):
        kronvi.load_uci(folder, max_inflated_bytes=10)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="`max_inflated_bytes` must be an int >= 0 or None"):
            kronvi.load_csv(g, max_inflated_bytes=bad)


def test_load_csv_streams_with_memory_bounded_by_the_table(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(100_000, 8))
    p = tmp_path / "big.csv"
    np.savetxt(p, data, delimiter=",", fmt="%.17g")  # 18 MB of text, 6.4 MB of float64
    tracemalloc.start()
    try:
        X, y = kronvi.load_csv(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(np.column_stack([X, y]), data)
    assert peak < 4 * data.nbytes, (peak, data.nbytes)  # the table, its blocks and its two outputs


def test_not_utf8_and_nul_bytes_are_one_line_errors(tmp_path):
    p = tmp_path / "b.csv"
    p.write_bytes(b"1,2,3\n4,\xff,6\n")
    with pytest.raises(ValueError, match=r"is not UTF-8 text"):
        kronvi.load_csv(p)
