"""Saving and loading DirectModel files: exact round trips, and a clear error for every kind of bad file."""

import functools
import hashlib
import json
import os
import pathlib
import stat
import sys
import tracemalloc
import types
import zipfile
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi


@pytest.fixture(params=["float32", "float64"])
def precision(request):
    x64 = request.param == "float64"
    with jax.enable_x64(x64):
        yield np.float64 if x64 else np.float32


class Scaler(NamedTuple):  # a NamedTuple kronvi does not know
    mean: np.ndarray
    scale: np.ndarray


def make_model(dtype, *, b=6, m=15, S=5, features=None, q_w=None):
    rng = np.random.default_rng(0)
    prior_w = kronvi.model.gaussian_prior(b, 0.8, levels=m, dtype=dtype)
    prior_noise = kronvi.model.noise_prior(0.3, levels=5, dtype=dtype)
    q_w = kronvi.model.MeanField(rng.normal(size=(b, m)).astype(dtype)) if q_w is None else q_w
    q_noise = kronvi.model.MeanField(rng.normal(size=(1, 5)).astype(dtype))
    codes = rng.integers(0, m, size=(S, b))
    return kronvi.DirectModel(
        prior_w,
        prior_noise,
        q_w,
        q_noise,
        features=features,
        y_offset=jnp.asarray(1.25, dtype),
        packed_codes=kronvi.quantize.pack_codes(codes),
        bits=4,
    )


def assert_same_tree(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert type(x) is type(y) or (isinstance(x, jax.Array) and isinstance(y, jax.Array))
        if isinstance(x, (np.ndarray, jax.Array)):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        else:
            assert x == y


def test_round_trip_predicts_identically(precision, tmp_path):
    features = {"freq": jnp.asarray(np.random.default_rng(1).normal(size=(2, 3)), precision)}
    model = make_model(precision, features=features)
    path = tmp_path / "model.npz"
    kronvi.save_model(path, model)
    loaded = kronvi.load_model(path)
    assert isinstance(loaded, kronvi.DirectModel)
    assert_same_tree(model, loaded)
    Phi = np.random.default_rng(2).normal(size=(4, 6)).astype(precision)

    def moments(md):
        return kronvi.model.predict_regression(md.q_w, md.q_noise, md.prior_w, md.prior_noise, Phi)

    for x, y in zip(moments(model), moments(loaded), strict=True):
        np.testing.assert_array_equal(x, y)
    for integer in (False, True):
        np.testing.assert_array_equal(
            kronvi.quantize.predict_from_codes(model.packed_codes, model.prior_w, Phi, integer=integer),
            kronvi.quantize.predict_from_codes(loaded.packed_codes, loaded.prior_w, Phi, integer=integer),
        )
    # Uncompressed files read back the same.
    kronvi.save_model(tmp_path / "raw.npz", model, compress=False)
    assert_same_tree(model, kronvi.load_model(tmp_path / "raw.npz"))


def test_round_trip_of_generic_feature_pytrees(tmp_path):
    features = {
        "scaler": Scaler(np.arange(3.0), np.ones(3, np.float32)),
        "stack": [jnp.ones((2, 2)), (None, 3, 2.5, True)],
        "isamples": kronvi.quantize.integer_samples(
            kronvi.quantize.pack_codes(np.full((2, 3), 7)), kronvi.model.gaussian_prior(3, 1.0)
        ),
    }
    features["rff"] = kronvi.inputs.RandomFourierFeatures(jnp.ones((2, 4)))
    model = make_model(np.float32, features=features)._replace(packed_codes=None, y_offset=-0.5)
    kronvi.save_model(tmp_path / "m.npz", model)
    loaded = kronvi.load_model(tmp_path / "m.npz")
    f = loaded.features
    assert isinstance(f["isamples"], kronvi.quantize.IntegerSamples)  # kronvi classes come back as themselves
    assert type(f["scaler"]).__name__ == "Scaler" and f["scaler"]._fields == ("mean", "scale")
    assert isinstance(f["scaler"].mean, np.ndarray)  # NumPy leaves stay NumPy
    assert f["stack"][1] == (None, 3, 2.5, True) and isinstance(f["stack"], list)
    assert isinstance(f["rff"], kronvi.inputs.RandomFourierFeatures)
    assert loaded.packed_codes is None and loaded.y_offset == -0.5
    # A foreign NamedTuple comes back as a namedtuple with the same name, fields and leaves.
    assert_same_tree(
        model._replace(features={**features, "scaler": tuple(features["scaler"])}),
        loaded._replace(features={**f, "scaler": tuple(f["scaler"])}),
    )


def test_round_trip_mixture_posterior(tmp_path):
    Mixture = kronvi.mixtures.Mixture
    rng = np.random.default_rng(3)
    q = Mixture(rng.normal(size=(3, 6, 15)).astype(np.float32), rng.normal(size=3).astype(np.float32))
    model = make_model(np.float32, q_w=q)
    kronvi.save_model(tmp_path / "mix.npz", model)
    loaded = kronvi.load_model(tmp_path / "mix.npz")
    assert isinstance(loaded.q_w, Mixture)
    assert_same_tree(model, loaded)


# ----------------------------------------------------------------------------------------------------
# Whole pipeline models
# ----------------------------------------------------------------------------------------------------

RECIPES = ("features", "eigen", "compact")


def _demo_rows():
    X, y, mask = kronvi.load_demo()
    test = mask[:, 0].astype(bool)
    return X[~test], y[~test], X[test]


@functools.cache
def fitted(basis):
    """A small pipeline model of each recipe, fitted once per session."""
    X, y, _ = _demo_rows()
    recipe = kronvi.Features(noise_cv=()) if basis == "features" else kronvi.pipeline.RECIPES[basis]()
    config = kronvi.DirectConfig(
        recipe=recipe, num_frequencies=12, gp=kronvi.GPOptions(restarts=1, points=60)
    )
    return kronvi.pipeline.fit_direct(jax.random.key(0), X, y, config)[0]


@pytest.mark.parametrize("basis", RECIPES)
def test_a_whole_pipeline_model_round_trips_and_predicts_identically(basis, tmp_path):
    model = fitted(basis)
    path = tmp_path / f"{basis}.npz"
    kronvi.save_model(path, model)
    loaded = kronvi.load_model(path)
    assert isinstance(loaded, kronvi.pipeline.FittedDirect)
    assert_same_tree(model, loaded)
    _, _, X_test = _demo_rows()
    Phi, Phi_loaded = (kronvi.pipeline.fold_features(m, X_test) for m in (model, loaded))
    np.testing.assert_array_equal(Phi, Phi_loaded)
    y = jnp.linspace(-2.0, 2.0, Phi.shape[0])
    for fn in (kronvi.model.predict_regression, lambda *a: kronvi.model.predictive_log_density(*a, y)):
        for x, z in zip(
            fn(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi),
            fn(loaded.q_w, loaded.q_noise, loaded.prior_w, loaded.prior_noise, Phi_loaded),
            strict=True,
        ):
            np.testing.assert_array_equal(x, z)
    with np.load(path) as z:
        assert json.loads(str(z["__kronvi__"]))["kind"] == "FittedDirect"


def test_a_pipeline_model_file_is_checked_as_a_whole(tmp_path):
    model = fitted("eigen")
    b = model.prior_w.values.shape[0]
    cases = [
        (model._replace(basis=model.basis._replace(vectors=model.basis.vectors[:, :-1])), r"basis.vectors` has shape"),
        (model._replace(standardizer=model.standardizer._replace(mean=model.standardizer.mean[:2])), "standardizer.mean"),
        (model._replace(basis=None, features=kronvi.inputs.RandomFourierFeatures(model.features.frequencies[:, :-1])),
         f"has {b} weights but the features \\({b - 2}\\)"),
        (model._replace(q_w=kronvi.model.MeanField(model.q_w.logits[:-1])), "q_w.logits"),
        (model._replace(hyper=tuple(model.hyper)), "must be a GPHyperparameters"),
    ]  # fmt: skip
    for bad, match in cases:
        with pytest.raises((TypeError, ValueError), match=match):
            kronvi.save_model(tmp_path / "bad.npz", bad)
    assert not os.listdir(tmp_path)
    # The same checks guard loading: a file whose rotation was cut to another size is refused.
    kronvi.save_model(tmp_path / "good.npz", model)

    def edit(h, a):
        a["basis.vectors"] = a["basis.vectors"][:-1]
        h["arrays"]["basis.vectors"] = {
            "shape": [b - 1, b],
            "dtype": "<f4",
            "sha256": _sha(a["basis.vectors"]),
        }
        h["tree"]["fields"]["basis"]["fields"]["vectors"]["shape"] = [b - 1, b]

    with pytest.raises(ValueError, match="inconsistent model: `model.basis.vectors` has shape"):
        kronvi.load_model(rewrite(tmp_path / "good.npz", tmp_path / "cut.npz", edit))


def test_a_file_without_a_field_added_since_loads_with_its_default(tmp_path):
    model = fitted("features")
    kronvi.save_model(tmp_path / "m.npz", model)

    def drop_added(h, a):  # the fields added since version 1, in order
        h["tree"]["fields"].pop("basis")
        h["tree"]["fields"].pop("y_scale")
        h["tree"]["fields"].pop("support")

    bad = rewrite(tmp_path / "m.npz", tmp_path / "old.npz", drop_added)
    loaded = kronvi.load_model(bad)
    assert loaded.basis is None and loaded.y_scale == 1.0 and loaded.support is None
    assert_same_tree(model._replace(y_scale=1.0), loaded)
    # A field without a default cannot be left out.
    bad = rewrite(tmp_path / "m.npz", tmp_path / "older.npz", lambda h, a: h["tree"]["fields"].pop("hyper"))
    with pytest.raises(ValueError, match="has fields .* but kronvi.pipeline:FittedDirect has"):
        kronvi.load_model(bad)


# ----------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------


def rewrite(src, dst, edit):
    """Copies a model file, letting ``edit(header, arrays)`` change the header and arrays on the way."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("__kronvi__")))
    edit(header, arrays)
    with open(dst, "wb") as f:
        np.savez(f, __kronvi__=np.array(json.dumps(header)), **arrays)
    return dst


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "good.npz"
    kronvi.save_model(path, make_model(np.float32))
    return path


def set_(d, key, value):
    d[key] = value


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda h, a: set_(h, "version", 2), "format version 2, newer than this kronvi reads"),
        (lambda h, a: set_(h, "version", "1"), "invalid format version"),
        (lambda h, a: set_(h, "kind", "LogisticModel"), "holds a kronvi 'LogisticModel', not one of"),
        (lambda h, a: set_(h, "kind", "FittedDirect"), "does not describe a FittedDirect"),
        (lambda h, a: set_(h, "format", "other"), "not a kronvi model file"),
        (lambda h, a: a.pop("q_w.logits"), r"missing array\(s\) \['q_w.logits'\]"),
        (lambda h, a: set_(a, "spare", np.zeros(2)), r"array\(s\) \['spare'\] that its header does not list"),
        (lambda h, a: set_(a, "q_w.logits", a["q_w.logits"][:, :5]), "has shape .* but the header records"),
        (lambda h, a: set_(a, "q_w.logits", a["q_w.logits"] + 1), "does not match its checksum"),
        (
            lambda h, a: set_(h["tree"]["fields"]["q_w"], "cls", "kronvi._families:Nope"),
            "not a kronvi model class",
        ),
        (lambda h, a: set_(h["tree"]["fields"]["q_w"], "cls", "os:system"), "non-kronvi class"),
        (lambda h, a: set_(h["tree"], "cls", "kronvi._io:save_model"), "not a kronvi model class"),
        (lambda h, a: set_(h["arrays"]["q_w.logits"], "dtype", "|O"), "malformed kronvi header"),
        (lambda h, a: set_(h["arrays"]["q_w.logits"], "shape", [6, -15]), "malformed kronvi header"),
        (
            lambda h, a: (
                set_(h["tree"]["fields"]["features"], "t", "list")
                or set_(h["tree"]["fields"]["features"], "items", 1)
            ),
            "malformed kronvi header",
        ),
    ],
)
def test_bad_header_or_arrays(saved, tmp_path, edit, match):
    bad = rewrite(saved, tmp_path / "bad.npz", edit)
    with pytest.raises(ValueError, match=match):
        kronvi.load_model(bad)


def test_mismatched_shapes_in_file(saved, tmp_path):
    """A file whose arrays are each intact but do not fit together (q_w for another grid)."""

    def edit(h, a):
        a["q_w.logits"] = np.zeros((6, 7), np.float32)
        h["arrays"]["q_w.logits"] = {"shape": [6, 7], "dtype": "<f4", "sha256": _sha(a["q_w.logits"])}

    with pytest.raises(ValueError, match=r"inconsistent model: `model.q_w.logits` has shape \(6, 7\)"):
        kronvi.load_model(rewrite(saved, tmp_path / "bad.npz", edit))

    def nan(h, a):
        a["prior_w.values"] = np.full((6, 15), np.nan, np.float32)
        h["arrays"]["prior_w.values"]["sha256"] = _sha(a["prior_w.values"])

    with pytest.raises(ValueError, match=r"invalid `prior_w` in the file: `values` contains 90 NaN"):
        kronvi.load_model(rewrite(saved, tmp_path / "nan.npz", nan))


def _sha(a):
    return hashlib.sha256(a.tobytes(order="C")).hexdigest()


def test_corrupted_and_foreign_files(saved, tmp_path):
    data = bytearray(saved.read_bytes())
    flipped = tmp_path / "flipped.npz"
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted|not a readable"):
        kronvi.load_model(flipped)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(saved.read_bytes()[: len(data) // 2])
    with pytest.raises(ValueError, match="not a readable kronvi model file"):
        kronvi.load_model(truncated)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"hello, not a model")
    with pytest.raises(ValueError, match=r"is not a kronvi model file \(not an .npz archive\)"):
        kronvi.load_model(garbage)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ValueError, match="not a kronvi model file"):
        kronvi.load_model(other)
    npy = tmp_path / "plain.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(ValueError, match="plain .npy array"):
        kronvi.load_model(npy)
    with pytest.raises(FileNotFoundError):
        kronvi.load_model(tmp_path / "missing.npz")


def test_text_and_first_byte_flipped_files_are_not_model_files(saved, tmp_path):
    """Not NumPy's message about pickled data and `allow_pickle`: the file is simply not ours."""
    text = tmp_path / "notes.txt"
    text.write_text("a plain text file\n")
    flipped = tmp_path / "flipped0.npz"
    data = bytearray(saved.read_bytes())
    data[0] ^= 0xFF
    flipped.write_bytes(bytes(data))
    for path in (text, flipped):
        with pytest.raises(ValueError, match="is not a kronvi model file") as err:
            kronvi.load_model(path)
        assert "pickle" not in str(err.value)


def test_a_class_name_never_imports_a_module(saved, tmp_path, monkeypatch):
    """Naming `kronvi.__main__` imported the CLI, which ran `main()` on the host's `sys.argv` and exited.
    Here a stand-in module records any attribute the loader would look up on it."""
    touched = []

    class Spy(types.ModuleType):
        def __getattr__(self, name):
            touched.append(name)
            raise AttributeError(name)

    monkeypatch.setitem(sys.modules, "kronvi.__main__", Spy("kronvi.__main__"))
    for where in ("root", "q_w"):

        def edit(h, a, where=where):
            node = h["tree"] if where == "root" else h["tree"]["fields"]["q_w"]
            node["cls"] = "kronvi.__main__:main"

        with pytest.raises(ValueError, match="'kronvi.__main__:main', which is not a kronvi model class"):
            kronvi.load_model(rewrite(saved, tmp_path / f"{where}.npz", edit))
    assert touched == []


def test_saving_an_unregistered_kronvi_class_is_an_error(tmp_path):
    model = make_model(
        np.float32, features={"info": kronvi.FitInfo(*[jnp.zeros(())] * len(kronvi.FitInfo._fields))}
    )
    with pytest.raises(
        TypeError, match=r"cannot save `features.info`: .*FitInfo is not one of the kronvi classes"
    ):
        kronvi.save_model(tmp_path / "m.npz", model)
    assert not os.listdir(tmp_path)


def _zip_with_member(src, dst, key, array):
    """Copies the archive `src` to `dst` with member `key` replaced by `array`; the header is kept as is."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename == key + ".npy":
                with zout.open(info.filename, "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, array)
            else:
                zout.writestr(info, zin.read(info))
    return dst


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_sizes_are_checked_before_any_array_is_inflated(saved, tmp_path):
    """A 48 MB array of zeros deflates to 50 kB; the loader must reject it from the .npy header and the
    zip directory, before allocating it."""
    big = np.zeros((1000, 12000), np.float32)
    bomb = _zip_with_member(saved, tmp_path / "bomb.npz", "q_w.logits", big)
    assert bomb.stat().st_size < 200_000

    def load():
        with pytest.raises(
            ValueError, match=r"array 'q_w.logits' has shape \(1000, 12000\) .* header records"
        ):
            kronvi.load_model(bomb)

    assert _peak_bytes(load) < 5_000_000


def test_a_file_declaring_more_bytes_than_the_bound_is_refused_unread(saved, tmp_path):
    def edit(h, a):
        a["features"] = np.zeros((1000, 2000), np.float32)  # 8 MB, consistent with the header
        h["tree"]["fields"]["features"] = {
            "t": "array", "key": "features", "lib": "numpy", "shape": [1000, 2000], "dtype": "<f4"
        }  # fmt: skip
        h["arrays"]["features"] = {"shape": [1000, 2000], "dtype": "<f4", "sha256": _sha(a["features"])}

    path = tmp_path / "big.npz"
    with np.load(saved) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("__kronvi__")))
    edit(header, arrays)
    np.savez_compressed(path, __kronvi__=np.array(json.dumps(header)), **arrays)

    def load():
        with pytest.raises(ValueError, match=r"declares 8.* bytes of arrays, more than `max_bytes`=1000000"):
            kronvi.load_model(path, max_bytes=10**6)

    assert _peak_bytes(load) < 2_000_000
    assert kronvi.load_model(path).features.shape == (1000, 2000)  # within the default bound
    with pytest.raises(ValueError, match="`max_bytes` must be a non-negative integer"):
        kronvi.load_model(path, max_bytes=-1)


@pytest.mark.parametrize("depth", [1_000, 100_000])  # both past Python's recursion limit
def test_a_deeply_nested_header_is_a_clear_error(saved, tmp_path, depth):
    with np.load(saved) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("__kronvi__")))
    header["tree"]["fields"]["features"] = "DEEP"
    deep = '{"t": "list", "items": [' * depth + '{"t": "none"}' + "]}" * depth
    text = json.dumps(header).replace('"DEEP"', deep)
    path = tmp_path / "deep.npz"
    np.savez(path, __kronvi__=np.array(text), **arrays)
    with pytest.raises(ValueError, match="malformed kronvi header|corrupted kronvi header"):
        kronvi.load_model(path)


def test_save_keeps_an_existing_files_permissions_and_new_files_follow_the_umask(tmp_path):
    model = make_model(np.float32)
    old = os.umask(0o022)
    try:
        kronvi.save_model(tmp_path / "new.npz", model)
        existing = tmp_path / "existing.npz"
        existing.write_bytes(b"old")
        existing.chmod(0o640)
        kronvi.save_model(existing, model)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.npz").stat().st_mode) == 0o644
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640
    assert_same_tree(model, kronvi.load_model(existing))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.npz", "new.npz"]


def test_save_rejects_bad_models(tmp_path):
    model = make_model(np.float32)
    path = tmp_path / "x.npz"
    with pytest.raises(TypeError, match="`model` must be a DirectModel"):
        kronvi.save_model(path, tuple(model))
    with pytest.raises(ValueError, match="`model.q_w.logits` has shape"):
        kronvi.save_model(path, model._replace(q_w=kronvi.model.MeanField(jnp.zeros((6, 5)))))
    with pytest.raises(ValueError, match="`model.q_noise` must be a MeanField of shape"):
        kronvi.save_model(path, model._replace(q_noise=kronvi.model.MeanField(jnp.zeros((1, 3)))))
    with pytest.raises(ValueError, match="bytes per sample but 6 weights at 4 bits need 3"):
        kronvi.save_model(
            path, model._replace(packed_codes=kronvi.quantize.pack_codes(np.zeros((2, 6), int), bits=8))
        )
    with pytest.raises(ValueError, match="`model.bits`=2 cannot hold the 15 levels"):
        kronvi.save_model(path, model._replace(bits=2))
    with pytest.raises(ValueError, match="holds codes >= the 3 levels"):
        small = make_model(np.float32, m=3)
        kronvi.save_model(path, small._replace(packed_codes=kronvi.quantize.pack_codes(np.full((1, 6), 9))))
    with pytest.raises(ValueError, match="`model.y_offset` must be a finite real scalar"):
        kronvi.save_model(path, model._replace(y_offset=np.zeros(2)))
    with pytest.raises(TypeError, match="cannot save `features.f` of type bytes"):
        kronvi.save_model(path, model._replace(features={"f": b"bytes"}))
    with pytest.raises(TypeError, match="dict keys must be strings"):
        kronvi.save_model(path, model._replace(features={1: np.zeros(2)}))
    with pytest.raises(TypeError, match="dtype complex64"):
        kronvi.save_model(path, model._replace(features=np.zeros(2, np.complex64)))
    with pytest.raises(ValueError, match="two leaves map to the same key"):
        kronvi.save_model(path, model._replace(features={"a.b": np.zeros(1), "a": {"b": np.zeros(1)}}))
    assert not os.listdir(tmp_path)  # nothing half-written


def test_save_into_a_missing_folder_names_the_path(tmp_path):
    model = make_model(np.float32)
    path = tmp_path / "missing" / "m.npz"
    with pytest.raises(FileNotFoundError, match=r"m\.npz'?: no such folder") as err:
        kronvi.save_model(path, model)
    assert ".kronvi-" not in str(err.value)  # not the temporary file's name
    with pytest.raises(IsADirectoryError, match="is a folder"):
        kronvi.save_model(tmp_path, model)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("name", ["model_v1_meanfield.npz", "model_v1_mixture.npz"])
def test_files_written_by_version_1_still_load(name):
    # Written by kronvi 0.1.0 before the package layout changed; their headers name private modules
    # (kronvi._families:MeanField, kronvi._mixture:Mixture, ...).
    path = pathlib.Path(__file__).parents[1] / "data" / name
    model = kronvi.load_model(path)
    assert isinstance(model, kronvi.DirectModel)
    assert isinstance(model.prior_w, kronvi.model.DiscretePrior)
    expected = kronvi.mixtures.Mixture if "mixture" in name else kronvi.model.MeanField
    assert isinstance(model.q_w, expected)
    # Saving again writes the public class paths, and the round trip is exact.
    header = json.dumps(kronvi.quantize._io._encode(model, "", {}))
    assert "kronvi._" not in header


def test_a_pipeline_model_saved_as_a_direct_model_still_loads_and_predicts():
    # tests/data/make_pipeline_model_v1.py wrote it before save_model took a whole FittedDirect:
    # the standardizer, feature map and eigenbasis under `features`; the numbers are what it printed.
    model = kronvi.load_model(pathlib.Path(__file__).parents[1] / "data" / "pipeline_model_v1.npz")
    X, _, _ = kronvi.load_demo()
    f = model.features
    assert isinstance(f["standardizer"], kronvi.inputs.Standardizer) and isinstance(
        f["basis"], kronvi.stats.Eigenbasis
    )
    Xs = kronvi.inputs.standardize(f["standardizer"], jnp.asarray(X[[12, 16, 26]], jnp.float32))
    Phi = kronvi.stats.rotate_features(f["basis"], kronvi.inputs.rff_features(f["rff"], Xs))
    mean, var = kronvi.model.predict_regression(
        model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi
    )
    np.testing.assert_allclose(mean, [1.626542091369629, -1.954939603805542, 1.6127287149429321], rtol=1e-5)
    np.testing.assert_allclose(var, [0.12371628731489182, 0.12427255511283875, 0.1217116042971611], rtol=1e-5)
    codes = kronvi.quantize.unpack_codes(model.packed_codes, 8, bits=4)
    assert np.asarray(codes).tolist() == [
        [7, 7, 7, 7, 8, 7, 9, 8], [7, 7, 6, 7, 8, 8, 8, 8], [8, 5, 8, 5, 7, 5, 6, 8]
    ]  # fmt: skip


@pytest.mark.parametrize("field", ["q_w", "prior_w", "q_noise"])
def test_save_refuses_what_load_would_refuse(tmp_path, field):
    model = make_model(np.float32)
    leaf = "values" if field.startswith("prior") else "logits"
    bad = model._replace(
        **{field: jax.tree.map(lambda a: jnp.asarray(a).at[0, 0].set(jnp.nan), getattr(model, field))}
    )
    with pytest.raises(
        ValueError, match=f"^cannot save `model`: `load_model` would refuse .*`{leaf}` contains 1 NaN"
    ):
        kronvi.save_model(tmp_path / "m.npz", bad)
    assert not os.listdir(tmp_path)  # nothing written that could not be read back


def test_save_refuses_devices_pipes_and_links_and_load_refuses_pipes_without_blocking(tmp_path):
    model = make_model(np.float32)
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    good = tmp_path / "good.npz"
    kronvi.save_model(good, model)
    link = tmp_path / "link.npz"
    link.symlink_to(good)
    before = good.read_bytes()
    for path, message in [
        ("/dev/null", "is a device"),
        (fifo, "is a named pipe"),
        (link, "is a symbolic link"),
    ]:
        with pytest.raises(ValueError, match=message):
            kronvi.save_model(path, model)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert link.is_symlink() and good.read_bytes() == before
    for path in (fifo, "/dev/zero"):  # opening the pipe, or reading the device, would never end
        with pytest.raises(ValueError, match="not a regular file"):
            kronvi.load_model(path)
    assert_same_tree(kronvi.load_model(link), kronvi.load_model(good))  # reading through a link is fine
