r"""Saving and loading fitted DIRECT models: one versioned `.npz` file, no pickle.

A file holds every array of a [`DirectModel`][kronvi.quantize.DirectModel] under a readable key (`prior_w.values`,
`features.frequencies`, ...) plus a JSON header under `__kronvi__` with the format tag, the format
version, the tree structure (which class goes where) and the shape, dtype and SHA-256 digest of each
array. Loading checks all of it and then validates the model as a whole (grid shapes agree, codes fit the
grid), so a corrupted, truncated, foreign or mismatched file raises a `ValueError` saying what is wrong
instead of yielding a model that predicts garbage.

Classes are restored by name only from the `kronvi` package (priors, families, feature maps,
standardizers, ...); any other `NamedTuple` in `features` comes back as a `collections.namedtuple`
with the same name and fields. Nothing is unpickled and no other module is imported.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import json
import os
import tempfile
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._model.families import MeanField
from .._model.grids import DiscretePrior, check_noise_prior
from ..mixtures._family import Mixture
from ._codes import BITS, check_bits, packed_width, unpack_codes

FORMAT = "kronvi"
KIND = "DirectModel"
VERSION = 1
_HEADER = "__kronvi__"


class DirectModel(NamedTuple):
    r"""A fitted DIRECT regression model or classifier, ready to save, load and predict with.

    A classifier ([`kronvi.logistic.fit_logistic`][kronvi.logistic.fit_logistic]) has `prior_noise = q_noise = None`; its
    probabilities from stored samples are `jax.nn.sigmoid(predict_from_codes(...) + y_offset).mean(1)`,
    exactly [`kronvi.logistic.predict_logistic`][kronvi.logistic.predict_logistic] computes their expectation under `q_w`.

    Attributes
    ----------
    prior_w
        [`kronvi.DiscretePrior`][kronvi.DiscretePrior] `(b, m)`, the weight grids.
    prior_noise
        [`kronvi.DiscretePrior`][kronvi.DiscretePrior] `(1, m_sigma)`, the noise-variance grid (`None`: a classifier).
    q_w
        Posterior over the weights: [`kronvi.MeanField`][kronvi.MeanField] `(b, m)` or [`kronvi.Mixture`][kronvi.mixtures.Mixture]
        `(r, b, m)`.
    q_noise
        [`kronvi.MeanField`][kronvi.MeanField] `(1, m_sigma)`, posterior over the noise variance (`None`: a classifier).
    features
        The feature map's parameters: `None` or any pytree of arrays built from dicts (string keys),
        lists, tuples and `NamedTuple` s (e.g. `(Standardizer, RandomFourierFeatures)`).
    y_offset
        Scalar added to $\Phi^* w$ to predict `y` (the training mean of `y`).
    packed_codes
        `None` or `(S, ceil(b * bits / 8))` `uint8` posterior samples from [`kronvi.pack_codes`][kronvi.quantize.pack_codes].
    bits
        Bits per code of `packed_codes`, one of 1, 2, 4, 8.
    """

    prior_w: DiscretePrior
    prior_noise: DiscretePrior
    q_w: Any
    q_noise: MeanField
    features: Any = None
    y_offset: Any = 0.0
    packed_codes: Any = None
    bits: int = 4


# ----------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------


def check_model(model) -> None:
    """Raises `TypeError`/`ValueError` naming the field if `model` is not a consistent DirectModel."""
    if not isinstance(model, DirectModel):
        raise TypeError(f"`model` must be a DirectModel, got {type(model).__name__}")
    prior_w, prior_noise, q_w, q_noise = model.prior_w, model.prior_noise, model.q_w, model.q_noise
    if not isinstance(prior_w, DiscretePrior) or prior_w.values.ndim != 2:
        raise ValueError(f"`model.prior_w` must be a DiscretePrior of shape (b, m), got {prior_w!r}")
    b, m = prior_w.values.shape
    classifier = prior_noise is None and q_noise is None
    if (prior_noise is None) != (q_noise is None):
        raise ValueError(
            "`model.prior_noise` and `model.q_noise` must both be set (regression) or both be None "
            "(a classifier)"
        )
    if not classifier:
        check_noise_prior(prior_noise, "model.prior_noise")
        if prior_noise.values.ndim != 2:
            raise ValueError(
                f"`model.prior_noise` must have shape (1, m_sigma), got {prior_noise.values.shape}"
            )
    logits = getattr(q_w, "logits", None)
    mixture = isinstance(q_w, Mixture)
    if not (isinstance(q_w, MeanField) or mixture):
        raise TypeError(f"`model.q_w` must be a MeanField or Mixture, got {type(q_w).__name__}")
    want = logits.shape[:1] + (b, m) if mixture else (b, m)
    if logits.shape != want or (mixture and logits.ndim != 3):
        raise ValueError(
            f"`model.q_w.logits` has shape {tuple(logits.shape)} but `model.prior_w` has grid ({b}, {m}): "
            f"expected {want}"
        )
    if not classifier and (
        not isinstance(q_noise, MeanField) or q_noise.logits.shape != prior_noise.values.shape
    ):
        got = getattr(getattr(q_noise, "logits", None), "shape", type(q_noise).__name__)
        raise ValueError(
            f"`model.q_noise` must be a MeanField of shape {tuple(prior_noise.values.shape)} "
            f"(as `model.prior_noise`), got {got}"
        )
    y_offset = np.asarray(model.y_offset)
    if y_offset.shape != () or y_offset.dtype.kind not in "iuf" or not np.isfinite(y_offset):
        raise ValueError(f"`model.y_offset` must be a finite real scalar, got {model.y_offset!r}")
    if model.packed_codes is not None:
        try:
            bits = check_bits(model.bits)
        except ValueError:
            raise ValueError(f"`model.bits` must be one of {BITS}, got {model.bits!r}") from None
        if 2**bits < m:
            raise ValueError(f"`model.bits`={bits} cannot hold the {m} levels of `model.prior_w`")
        packed = model.packed_codes
        if getattr(packed, "dtype", None) != np.uint8 or np.ndim(packed) != 2:
            raise ValueError(
                "`model.packed_codes` must be a 2-D uint8 array (num_samples, num_bytes), got "
                f"{getattr(packed, 'dtype', type(packed).__name__)} of shape {np.shape(packed)}"
            )
        width = packed_width(b, bits)
        if packed.shape[1] != width:
            raise ValueError(
                f"`model.packed_codes` has {packed.shape[1]} bytes per sample but {b} weights at {bits} bits "
                f"need {width}"
            )
        if packed.shape[0] and int(np.max(unpack_codes(np.asarray(packed), b, bits=bits))) >= m:
            raise ValueError(f"`model.packed_codes` holds codes >= the {m} levels of `model.prior_w`")


# ----------------------------------------------------------------------------------------------------
# Tree encoding: structure -> JSON header, leaves -> named arrays
# ----------------------------------------------------------------------------------------------------


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(x, "_asdict")


def _is_kronvi_pytree(x) -> bool:
    cls = type(x)
    return cls.__module__.startswith("kronvi.") and isinstance(getattr(cls, "_fields", None), tuple)


# Where each public data class is exported; files name classes by these paths, so that moving a class
# between private modules never breaks a saved file.
_PUBLIC_MODULES = ("kronvi", "kronvi.mixtures", "kronvi.gaussian", "kronvi.quantize", "kronvi.pipeline")


def _class_name(cls) -> str:
    for name in _PUBLIC_MODULES:
        if getattr(importlib.import_module(name), cls.__name__, None) is cls:
            return f"{name}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def _encode(node, path: str, arrays: dict):
    if node is None:
        return {"t": "none"}
    if isinstance(node, (bool, int, float)) and not isinstance(node, np.generic):
        return {"t": "py", "type": type(node).__name__, "value": node}
    if isinstance(node, (jax.Array, np.ndarray, np.generic)):
        arr = np.asarray(node)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"cannot save `{path}`: dtype {arr.dtype} (only bool, integer and float arrays)")
        if path in arrays:
            raise ValueError(f"cannot save: two leaves map to the same key {path!r} (rename a dict key)")
        arrays[path] = np.array(arr, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
        lib = "numpy" if isinstance(node, (np.ndarray, np.generic)) else "jax"
        return {"t": "array", "key": path, "lib": lib, "shape": list(arr.shape), "dtype": arr.dtype.str}
    if _is_namedtuple(node) or _is_kronvi_pytree(node):
        cls = type(node)
        fields = {f: _encode(getattr(node, f), f"{path}.{f}" if path else f, arrays) for f in cls._fields}
        kind = "namedtuple" if _is_namedtuple(node) else "kronvi"
        return {"t": kind, "cls": _class_name(cls), "fields": fields}
    if isinstance(node, dict):
        bad = [k for k in node if not isinstance(k, str)]
        if bad:
            raise TypeError(f"cannot save `{path}`: dict keys must be strings, got {bad[0]!r}")
        return {"t": "dict", "items": [[k, _encode(v, f"{path}.{k}", arrays)] for k, v in node.items()]}
    if isinstance(node, (list, tuple)):
        t = "list" if isinstance(node, list) else "tuple"
        return {"t": t, "items": [_encode(v, f"{path}.{i}", arrays) for i, v in enumerate(node)]}
    raise TypeError(
        f"cannot save `{path}` of type {type(node).__name__}: use arrays, None, Python scalars, dicts, "
        "lists, tuples or NamedTuples"
    )


def _resolve_class(name: str, path: str):
    """The kronvi class called `name` (`module:qualname`), or `None` for a foreign class."""
    module, _, qualname = name.partition(":")
    if not (module == "kronvi" or module.startswith("kronvi.")):
        return None
    try:
        if module not in _PUBLIC_MODULES and "." not in qualname:
            # Files written before the public paths (version 1 named private modules, e.g.
            # ``kronvi._families:MeanField``): find the class among the public exports.
            module = next(
                (m for m in _PUBLIC_MODULES if hasattr(importlib.import_module(m), qualname)), module
            )
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise ValueError(
            f"`{path}` is a {name}, which this version of kronvi does not have (file from another version?)"
        ) from None
    return obj


def _decode(node, path: str, arrays, specs: dict):
    if not isinstance(node, dict) or "t" not in node:
        raise ValueError(f"malformed header entry at `{path}`")
    t = node["t"]
    if t == "none":
        return None
    if t == "py":
        kinds = {"bool": bool, "int": int, "float": float}
        value = node.get("value")
        if node.get("type") not in kinds or type(value) is not kinds[node["type"]]:
            raise ValueError(f"malformed scalar at `{path}` in the header")
        return value
    if t == "array":
        key = node.get("key")
        if key not in specs:
            raise ValueError(f"header refers to array {key!r} at `{path}` with no recorded shape")
        arr = arrays[key]
        return jnp.asarray(arr) if node.get("lib") == "jax" else arr
    if t in ("list", "tuple"):
        items = [_decode(v, f"{path}.{i}", arrays, specs) for i, v in enumerate(node.get("items", []))]
        return items if t == "list" else tuple(items)
    if t == "dict":
        return {k: _decode(v, f"{path}.{k}", arrays, specs) for k, v in node.get("items", [])}
    if t in ("namedtuple", "kronvi"):
        fields = node.get("fields")
        if not isinstance(fields, dict):
            raise ValueError(f"malformed header entry at `{path}`")
        values = {f: _decode(v, f"{path}.{f}" if path else f, arrays, specs) for f, v in fields.items()}
        name = str(node.get("cls", ""))
        cls = _resolve_class(name, path or "model")
        if cls is None:
            if t == "kronvi":
                raise ValueError(f"`{path}` names a non-kronvi class {name!r}")
            short = name.partition(":")[2].rpartition(".")[2]
            try:
                foreign = collections.namedtuple(short if short.isidentifier() else "Record", list(values))
            except ValueError as e:
                raise ValueError(f"malformed NamedTuple at `{path}` in the header: {e}") from None
            return foreign(**values)
        if not (isinstance(cls, type) and isinstance(getattr(cls, "_fields", None), tuple)):
            raise ValueError(f"`{path or 'model'}` names {name!r}, which is not a kronvi data class")
        expected = list(cls._fields)
        if expected != list(values):
            raise ValueError(f"`{path or 'model'}` has fields {list(values)} but {name} has {expected}")
        if t == "namedtuple":
            return cls(**values)
        try:
            cls(*values.values())  # full validation (finite, shapes, ...)
        except (TypeError, ValueError) as e:
            raise ValueError(f"invalid `{path}` in the file: {e}") from None
        return cls._unchecked(*values.values())  # the exact stored arrays, bit for bit
    raise ValueError(f"unknown entry type {t!r} at `{path}` in the header")


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(arr.tobytes(order="C")).hexdigest()


# ----------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------


def save_model(path, model: DirectModel, *, compress: bool = True) -> None:
    r"""Writes a [`DirectModel`][kronvi.quantize.DirectModel] to one versioned `.npz` file (atomically).

    Parameters
    ----------
    path
        Destination file name (`str` or path-like); written as given, no suffix is added.
    model
        The model; validated first (see [`load_model`][kronvi.quantize.load_model] for what is checked).
    compress
        Deflate the arrays (`numpy.savez_compressed`).

    Raises
    ------
    TypeError, ValueError
        If the model is inconsistent or holds something other than arrays, scalars, `None` and
        containers.
    FileNotFoundError, IsADirectoryError
        If the folder of `path` does not exist, or `path` is a folder.

    Examples
    --------
    >>> import os, tempfile, jax.numpy as jnp, kronvi
    >>> pw, pn = kronvi.gaussian_prior(3, 1.0), kronvi.noise_prior(0.1)
    >>> model = kronvi.DirectModel(pw, pn, kronvi.MeanField.from_prior(pw), kronvi.MeanField.from_prior(pn))
    >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
    >>> kronvi.save_model(path, model)
    >>> bool(jnp.all(kronvi.load_model(path).q_w.logits == model.q_w.logits))
    True
    """
    check_model(model)
    arrays: dict = {}
    tree = _encode(model, "", arrays)
    header = {
        "format": FORMAT,
        "kind": KIND,
        "version": VERSION,
        "tree": tree,
        "arrays": {
            k: {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": _digest(a)} for k, a in arrays.items()
        },
    }
    if _HEADER in arrays:
        raise ValueError(f"cannot save: the key {_HEADER!r} is reserved")
    arrays[_HEADER] = np.array(json.dumps(header))
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"`path` {path!r}: no such folder {directory!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"`path` {path!r} is a folder; give a file name")
    fd, tmp = tempfile.mkstemp(prefix=".kronvi-", suffix=".npz.tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            (np.savez_compressed if compress else np.savez)(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_header(z, path) -> dict:
    if _HEADER not in z.files:
        raise ValueError(
            f"{path!r} is not a kronvi model file (an .npz archive without a {_HEADER!r} header)"
        )
    raw = z[_HEADER]
    if raw.shape != () or raw.dtype.kind != "U":
        raise ValueError(f"{path!r}: malformed kronvi header")
    try:
        header = json.loads(str(raw))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path!r}: corrupted kronvi header ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path!r} is not a kronvi model file (format tag {header.get('format')!r})")
    if header.get("kind") != KIND:
        raise ValueError(f"{path!r} holds a kronvi {header.get('kind')!r}, not a {KIND}")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{path!r}: invalid format version {version!r}")
    if version > VERSION:
        raise ValueError(
            f"{path!r} uses format version {version}, newer than this kronvi reads ({VERSION}): "
            "upgrade kronvi"
        )
    if version != VERSION:  # pragma: no cover - no older versions exist yet
        raise ValueError(f"{path!r}: unsupported format version {version}")
    if not isinstance(header.get("arrays"), dict) or not isinstance(header.get("tree"), dict):
        raise ValueError(f"{path!r}: malformed kronvi header (no tree or array table)")
    return header


def _read_arrays(z, path):
    """The header, its array table and the verified arrays of an open archive."""
    try:
        header = _read_header(z, path)
        specs = header["arrays"]
        stored = set(z.files) - {_HEADER}
        missing = sorted(set(specs) - stored)
        if missing:
            raise ValueError(f"{path!r} is missing array(s) {missing}: truncated or edited file")
        extra = sorted(stored - set(specs))
        if extra:
            raise ValueError(f"{path!r} has array(s) {extra} that its header does not list: mismatched file")
        arrays = {}
        for key, spec in specs.items():
            arr = z[key]
            if list(arr.shape) != spec.get("shape") or arr.dtype.str != spec.get("dtype"):
                raise ValueError(
                    f"{path!r}: array {key!r} has shape {arr.shape} and dtype {arr.dtype.str} but the "
                    f"header records {tuple(spec.get('shape') or ())} and {spec.get('dtype')}"
                )
            if _digest(arr) != spec.get("sha256"):
                raise ValueError(f"{path!r}: array {key!r} does not match its checksum: corrupted file")
            arrays[key] = arr
    except Exception as e:  # noqa: BLE001 - zip CRC, zlib, truncated member, bad .npy header, ...
        if isinstance(e, ValueError) and str(e).startswith(repr(path)):
            raise
        raise ValueError(f"{path!r}: corrupted kronvi model file ({type(e).__name__}: {e})") from None
    return header, specs, arrays


def load_model(path) -> DirectModel:
    r"""Reads a [`DirectModel`][kronvi.quantize.DirectModel] written by [`save_model`][kronvi.quantize.save_model].

    Checks, each with its own `ValueError`: the file is an `.npz` archive with a kronvi header of kind
    `DirectModel`; its format version is supported; every array the header lists is present, with the
    recorded shape, dtype and SHA-256 digest, and there are no others; every kronvi object passes its
    constructor's validation; and the model is consistent ($q_w$ and the priors share the grid shape,
    the packed codes have the width of `b` codes and stay below `m`).

    Arrays come back as JAX arrays (NumPy arrays for leaves that were NumPy arrays) with the stored dtype,
    so the reloaded model predicts identically. (A float64 file loaded with `jax_enable_x64` off comes
    back in float32, as JAX converts it.)

    Parameters
    ----------
    path
        A file written by [`save_model`][kronvi.quantize.save_model].

    Returns
    -------
    DirectModel
    """
    path = os.fspath(path)
    with open(path, "rb") as f:  # we own the handle: np.load leaks it when the archive is unreadable
        try:
            z = np.load(f, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - any parse failure means "not our file"
            raise ValueError(f"{path!r} is not a readable kronvi model file: {e}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(f"{path!r} is not a kronvi model file (a plain .npy array, not an .npz archive)")
        with z:
            header, specs, arrays = _read_arrays(z, path)
    model = _decode(header["tree"], "", arrays, specs)
    if not isinstance(model, DirectModel):
        raise ValueError(f"{path!r}: the header does not describe a DirectModel")
    try:
        check_model(model)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path!r}: inconsistent model: {e}") from None
    return model
