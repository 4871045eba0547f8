r"""Saving and loading fitted DIRECT models: one versioned `.npz` file, no pickle.

A file holds every array of a `DirectModel` or of a whole pipeline model
(`kronvi.pipeline.FittedDirect`: standardizer, feature map, basis, priors and
posteriors) under a readable key (`prior_w.values`, `features.frequencies`, ...) plus a JSON header under
`__kronvi__` with the format tag, the kind of model, the format version, the tree structure (which class
goes where) and the shape, dtype and SHA-256 digest of each array. Loading checks all of it and then validates the model as a whole (grid shapes agree, codes fit the
grid), so a corrupted, truncated, foreign or mismatched file raises a `ValueError` saying what is wrong
instead of yielding a model that predicts garbage.

A model file is untrusted input. Classes are restored only from a fixed registry of kronvi's model
classes (priors, families, feature maps, standardizers, ...), looked up by their public name; a module
named in a file is never imported. Any other `NamedTuple` in `features` comes back as a
`collections.namedtuple` with the same name and fields. Nothing is unpickled. Before any array is
read, its shape and dtype in the `.npy` header and its size in the zip directory must agree with the
file's header, and all arrays together must fit a size bound, so a small file cannot make the loader
allocate gigabytes.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib
import json
import math
import os
import stat
import zipfile
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base.files import check_output_path, write_atomic
from .._inputs.data import Standardizer
from .._inputs.features import RandomFourierFeatures
from .._inputs.gp import GPHyperparameters
from .._model.compact import CompactBasis
from .._model.families import MeanField
from .._model.grids import DiscretePrior, check_noise_prior
from .._stats.eigen import Eigenbasis
from ..mixtures._family import Mixture
from ._codes import BITS, check_bits, packed_width, unpack_codes

FORMAT = "kronvi"
KIND = "DirectModel"
KINDS = (KIND, "FittedDirect", "FittedClassifier")  # the classes a file's root may be (its header's "kind")
VERSION = 1
_HEADER = "__kronvi__"
_MAX_HEADER_BYTES = 16 * 2**20  # the JSON header of a model with thousands of arrays is well below this
_MIN_BOUND_BYTES = 64 * 2**20  # the default `max_bytes`: this, or 16x the file's size if that is more
_BOUND_RATIO = 16


class DirectModel(NamedTuple):
    r"""A fitted DIRECT regression model or classifier, ready to save, load and predict with.

    A classifier (`kronvi.logistic.fit_logistic`) has `prior_noise = q_noise = None`; its
    probabilities from stored samples are `jax.nn.sigmoid(predict_from_codes(...) + y_offset).mean(1)`,
    exactly `kronvi.logistic.predict_logistic` computes their expectation under `q_w`.

    Attributes
    ----------
    prior_w
        `kronvi.model.DiscretePrior` `(b, m)`, the weight grids.
    prior_noise
        `kronvi.model.DiscretePrior` `(1, m_sigma)`, the noise-variance grid (`None`: a classifier).
    q_w
        Posterior over the weights: `kronvi.model.MeanField` `(b, m)` or `kronvi.mixtures.Mixture`
        `(r, b, m)`.
    q_noise
        `kronvi.model.MeanField` `(1, m_sigma)`, posterior over the noise variance (`None`: a classifier).
    features
        The feature map's parameters: `None` or any pytree of arrays built from dicts (string keys),
        lists, tuples and `NamedTuple` s (e.g. `(Standardizer, RandomFourierFeatures)`).
    y_offset
        Scalar added to $\Phi^* w$ to predict `y` (the training mean of `y`).
    packed_codes
        `None` or `(S, ceil(b * bits / 8))` `uint8` posterior samples from `kronvi.quantize.pack_codes`.
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
    mixture = isinstance(q_w, Mixture)
    if not (isinstance(q_w, MeanField) or mixture):
        raise TypeError(f"`model.q_w` must be a MeanField or Mixture, got {type(q_w).__name__}")
    logits = q_w.logits
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


def _finite_array(x, name: str, shape=None):
    if not isinstance(x, (jax.Array, np.ndarray)) or np.asarray(x).dtype.kind != "f":
        raise ValueError(f"`{name}` must be a float array, got {type(x).__name__}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"`{name}` has shape {tuple(x.shape)}, expected {tuple(shape)}")
    if not np.all(np.isfinite(np.asarray(x))):
        raise ValueError(f"`{name}` holds NaN or inf")


def _basis_width(basis, b: int, name: str) -> int:
    """The number of weights a pipeline model's `basis` maps `b` features to (checking its shapes)."""
    if basis is None:
        return b
    if isinstance(basis, Eigenbasis):
        _finite_array(basis.vectors, f"{name}.vectors", (b, b))
        _finite_array(basis.eigenvalues, f"{name}.eigenvalues", (b,))
        return b
    if isinstance(basis, CompactBasis):
        return CompactBasis.check(basis, b, name)
    raise TypeError(f"`{name}` must be None, an Eigenbasis or a CompactBasis, got {type(basis).__name__}")


def check_fitted(model) -> None:
    """Raises `TypeError`/`ValueError` naming the field if `model` is not a consistent
    `kronvi.pipeline.FittedDirect`: the standardizer, feature map, GP
    hyperparameters and basis agree on the input and feature counts, and the priors and posteriors are a
    consistent regression model (`check_model`) on the basis's weights."""
    fitted: Any = _registry()["kronvi.pipeline:FittedDirect"]  # a class: `model` is one of its instances
    if not isinstance(model, fitted):
        raise TypeError(f"`model` must be a FittedDirect, got {type(model).__name__}")
    for field, cls in [("standardizer", Standardizer), ("hyper", GPHyperparameters)]:
        if not isinstance(getattr(model, field), cls):
            raise TypeError(
                f"`model.{field}` must be a {cls.__name__}, got {type(getattr(model, field)).__name__}"
            )
    d, b = _feature_map_shape(model.features)
    _finite_array(model.standardizer.mean, "model.standardizer.mean", (d,))
    _finite_array(model.standardizer.scale, "model.standardizer.scale", (d,))
    if not np.all(np.asarray(model.standardizer.scale) > 0):
        raise ValueError("`model.standardizer.scale` must be positive")
    _finite_array(model.hyper.lengthscales, "model.hyper.lengthscales", (d,))
    if not isinstance(model.y_offset, (jax.Array, np.ndarray, np.generic)):
        raise ValueError(f"`model.y_offset` must be a scalar array, got {model.y_offset!r}")
    width = _basis_width(model.basis, b, "model.basis")
    weights = model.prior_w.values.shape[0] if isinstance(model.prior_w, DiscretePrior) else None
    if weights != width:
        raise ValueError(
            f"`model.prior_w` has {weights} weights but the features ({b}) and `model.basis` give {width}"
        )
    if not isinstance(model.q_w, MeanField):
        raise TypeError(f"`model.q_w` must be a MeanField, got {type(model.q_w).__name__}")
    if model.prior_noise is None or model.q_noise is None:
        raise ValueError("`model.prior_noise` and `model.q_noise` must be set")
    if model.support is not None:
        _check_support(model.support, width)
    check_model(
        DirectModel(model.prior_w, model.prior_noise, model.q_w, model.q_noise, y_offset=model.y_offset)
    )


def _feature_map_shape(features: Any) -> tuple[int, int]:
    """`(d, b)` of a model's `RandomFourierFeatures` or `NystromFeatures`, checked (finite, consistent shapes)."""
    nystrom: Any = _registry()["kronvi:NystromFeatures"]
    if isinstance(features, RandomFourierFeatures):
        freq = features.frequencies
        _finite_array(freq, "model.features.frequencies")
        if freq.ndim != 2:
            raise ValueError(f"`model.features.frequencies` must have shape (d, D), got {tuple(freq.shape)}")
        d, b = freq.shape[0], 2 * freq.shape[1]
    elif isinstance(features, nystrom):
        Z = features.landmarks
        _finite_array(Z, "model.features.landmarks")
        if Z.ndim != 2:
            raise ValueError(f"`model.features.landmarks` must have shape (M, d), got {tuple(Z.shape)}")
        b, d = Z.shape
        _finite_array(features.inv_lengthscales, "model.features.inv_lengthscales", (d,))
        _finite_array(features.whiten, "model.features.whiten", (b, b))
        if features.kernel not in ("rbf", "matern52", "matern32"):
            raise ValueError(f"`model.features.kernel` must name a kernel, got {features.kernel!r}")
    else:
        raise TypeError(
            "`model.features` must be a RandomFourierFeatures or NystromFeatures, got "
            f"{type(features).__name__}"
        )
    if features.offset is not None:
        _finite_array(features.offset, "model.features.offset", (b,))
    return d, b


def _check_support(support: Any, width: int) -> None:
    cls: Any = _registry()["kronvi.pipeline:SupportBound"]  # a class: `support` is one of its instances
    if not isinstance(support, cls):
        raise TypeError(f"`model.support` must be None or a SupportBound, got {type(support).__name__}")
    _finite_array(support.weight, "model.support.weight", (width,))
    bound = np.asarray(support.bound)
    if bound.shape != (width,) or bound.dtype.kind != "f" or not np.all(bound >= 0):  # NaN fails `>=`
        raise ValueError(f"`model.support.bound` must be ({width},) non-negative bounds (inf: none)")
    if (support.mix is None) != (support.mix_bound is None):
        raise ValueError("`model.support.mix` and `model.support.mix_bound` must be both set or both None")
    if support.mix is not None:
        _finite_array(support.mix, "model.support.mix", (width,))
        _finite_array(support.mix_bound, "model.support.mix_bound", ())
        if not float(support.mix_bound) >= 0:
            raise ValueError("`model.support.mix_bound` must be >= 0")


def check_classifier(model) -> None:
    """Raises `TypeError`/`ValueError` naming the field if `model` is not a consistent
    `kronvi.FittedClassifier`: standardizer, frequencies and grids agree on `b = 2D + d + 1` weights, the
    scalars are finite and positive, and the priors and posterior are a consistent classifier
    (`check_model`)."""
    fitted: Any = _registry()["kronvi:FittedClassifier"]
    if not isinstance(model, fitted):
        raise TypeError(f"`model` must be a FittedClassifier, got {type(model).__name__}")
    for field, cls in [("standardizer", Standardizer), ("features", RandomFourierFeatures)]:
        if not isinstance(getattr(model, field), cls):
            raise TypeError(
                f"`model.{field}` must be a {cls.__name__}, got {type(getattr(model, field)).__name__}"
            )
    freq = model.features.frequencies
    _finite_array(freq, "model.features.frequencies")
    if freq.ndim != 2 or model.features.offset is not None:
        raise ValueError(
            f"`model.features` must hold frequencies (d, D) and no offset, got {tuple(freq.shape)}"
        )
    d, b = freq.shape[0], 2 * freq.shape[1] + freq.shape[0] + 1
    _finite_array(model.standardizer.mean, "model.standardizer.mean", (d,))
    _finite_array(model.standardizer.scale, "model.standardizer.scale", (d,))
    if not np.all(np.asarray(model.standardizer.scale) > 0):
        raise ValueError("`model.standardizer.scale` must be positive")
    for field in ("lengthscale", "prior_scale"):
        _finite_array(getattr(model, field), f"model.{field}", ())
        if not float(getattr(model, field)) > 0:
            raise ValueError(f"`model.{field}` must be positive")
    if not isinstance(model.prior_w, DiscretePrior) or model.prior_w.values.shape[:1] != (b,):
        raise ValueError(f"`model.prior_w` must be a DiscretePrior of {b} weights (2 D + d + 1)")
    if model.rotation is not None:
        _finite_array(model.rotation, "model.rotation", (b, b))
    check_model(DirectModel(model.prior_w, None, model.q_w, None))  # type: ignore[arg-type]  # a classifier


def _check_root(model) -> None:
    if isinstance(model, DirectModel):
        check_model(model)
    elif type(model).__name__ == "FittedDirect":
        check_fitted(model)
    elif type(model).__name__ == "FittedClassifier":
        check_classifier(model)
    else:
        raise TypeError(
            "`model` must be a DirectModel, a kronvi.pipeline.FittedDirect or a kronvi.FittedClassifier, got "
            f"{type(model).__name__}"
        )


# ----------------------------------------------------------------------------------------------------
# Tree encoding: structure -> JSON header, leaves -> named arrays
# ----------------------------------------------------------------------------------------------------


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(x, "_asdict")


def _is_kronvi_pytree(x) -> bool:
    cls = type(x)
    return cls.__module__.startswith("kronvi.") and isinstance(getattr(cls, "_fields", None), tuple)


# The registry: the kronvi classes a model file may name, by the path `save_model` writes ("kronvi:Name" for
# the classes that were top-level names when the format was fixed), and the public module each is read from.
# `load_model` resolves a name only through this table; it never imports a module a file names.
_MODEL_CLASSES = {
    "kronvi:DirectModel": "kronvi.quantize", "kronvi:DiscretePrior": "kronvi.model",
    "kronvi:MeanField": "kronvi.model", "kronvi:Mixture": "kronvi.mixtures", "kronvi:MixturePrior": "kronvi.mixtures",
    "kronvi:IntegerSamples": "kronvi.quantize", "kronvi:Standardizer": "kronvi.inputs",
    "kronvi:RandomFourierFeatures": "kronvi.inputs", "kronvi:GPHyperparameters": "kronvi.inputs",
    "kronvi:Eigenbasis": "kronvi.stats", "kronvi:RegressionStats": "kronvi.stats",
    "kronvi:EigenFeatureModel": "kronvi.feature_learning", "kronvi:GaussianMeanField": "kronvi.gaussian",
    "kronvi:ELRG": "kronvi.gaussian", "kronvi:BNNStats": "kronvi.bnn",
    "kronvi.pipeline:FittedDirect": "kronvi.pipeline",
    "kronvi:CompactBasis": "kronvi.model", "kronvi:FittedClassifier": "kronvi.logistic",
    "kronvi.pipeline:SupportBound": "kronvi.pipeline", "kronvi:NystromFeatures": "kronvi.inputs",
}  # fmt: skip


@functools.cache
def _registry() -> dict[str, type]:
    """`{"kronvi:Name": class}` for the names of `_MODEL_CLASSES` (fixed module names only)."""
    return {
        name: getattr(importlib.import_module(module), name.partition(":")[2])
        for name, module in _MODEL_CLASSES.items()
    }


def _class_name(cls, path: str) -> str:
    for name, known in _registry().items():
        if known is cls:
            return name
    raise TypeError(
        f"cannot save `{path or 'model'}`: {cls.__module__}.{cls.__qualname__} is not one of the kronvi "
        f"classes a model file may hold ({', '.join(n.partition(':')[2] for n in _MODEL_CLASSES)})"
    )


def _encode(node, path: str, arrays: dict):
    if node is None:
        return {"t": "none"}
    if isinstance(node, (bool, int, float, str)) and not isinstance(node, np.generic):
        return {"t": "py", "type": type(node).__name__, "value": node}
    if isinstance(node, (jax.Array, np.ndarray, np.generic)):
        arr = np.asarray(node)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"cannot save `{path}`: dtype {arr.dtype} (only bool, integer and float arrays)")
        if path in arrays:
            raise ValueError(f"cannot save: two leaves map to the same key {path!r} (rename a dict key)")
        arrays[path] = np.array(arr, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
        lib = (
            "numpy-scalar"
            if isinstance(node, np.generic)
            else "numpy"
            if isinstance(node, np.ndarray)
            else "jax"
        )
        return {"t": "array", "key": path, "lib": lib, "shape": list(arr.shape), "dtype": arr.dtype.str}
    if _is_namedtuple(node) or _is_kronvi_pytree(node):
        cls = type(node)
        fields = {f: _encode(getattr(node, f), f"{path}.{f}" if path else f, arrays) for f in cls._fields}
        kind = "namedtuple" if _is_namedtuple(node) else "kronvi"
        name = _class_name(cls, path) if _is_kronvi_pytree(node) else f"{cls.__module__}:{cls.__qualname__}"
        return {"t": kind, "cls": name, "fields": fields}
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
    """The registered kronvi class called `name` (`module:qualname`), or `None` for a foreign class.
    Files of format version 1 named private modules (``kronvi._families:MeanField``): a name in any
    kronvi module resolves by its class name alone, among the registered classes."""
    module, _, qualname = name.partition(":")
    if not (module == "kronvi" or module.startswith("kronvi.")):
        return None
    registry = _registry()
    if name in registry:
        return registry[name]
    by_name = {n.partition(":")[2]: c for n, c in registry.items()}
    if qualname in by_name:
        return by_name[qualname]
    raise ValueError(
        f"`{path}` names {name!r}, which is not a kronvi model class this version reads "
        "(file from another version?)"
    )


def _decode(node, path: str, arrays, specs: dict):
    if not isinstance(node, dict) or "t" not in node:
        raise ValueError(f"malformed header entry at `{path}`")
    t = node["t"]
    if t == "none":
        return None
    if t == "py":
        kinds = {"bool": bool, "int": int, "float": float, "str": str}
        value = node.get("value")
        if node.get("type") not in kinds or type(value) is not kinds[node["type"]]:
            raise ValueError(f"malformed scalar at `{path}` in the header")
        return value
    if t == "array":
        key = node.get("key")
        if key not in specs:
            raise ValueError(f"header refers to array {key!r} at `{path}` with no recorded shape")
        arr = arrays[key]
        lib = node.get("lib")
        return jnp.asarray(arr) if lib == "jax" else arr[()] if lib == "numpy-scalar" else arr
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
                foreign = collections.namedtuple(  # type: ignore[misc]  # a name read from the file
                    short if short.isidentifier() else "Record", list(values)
                )
            except ValueError as e:
                raise ValueError(f"malformed NamedTuple at `{path}` in the header: {e}") from None
            return foreign(**values)
        expected = list(cls._fields)
        defaults = getattr(cls, "_field_defaults", {})
        got = list(values)
        if got == expected[: len(got)] and all(f in defaults for f in expected[len(got) :]):
            values.update({f: defaults[f] for f in expected[len(got) :]})  # fields added since: defaults
        if expected != list(values):
            raise ValueError(f"`{path or 'model'}` has fields {got} but {name} has {expected}")
        try:
            obj = cls(*values.values())  # full validation (finite, shapes, ...) where the class has it
        except (TypeError, ValueError) as e:
            raise ValueError(f"invalid `{path or 'model'}` in the file: {e}") from None
        unchecked = getattr(cls, "_unchecked", None)
        return obj if unchecked is None else unchecked(*values.values())  # the stored arrays, bit for bit
    raise ValueError(f"unknown entry type {t!r} at `{path}` in the header")


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(arr.tobytes(order="C")).hexdigest()


# ----------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------


def save_model(path: str | os.PathLike[str], model: Any, *, compress: bool = True) -> None:
    r"""Writes a `DirectModel`, a whole pipeline model (`kronvi.pipeline.FittedDirect`) or a classifier
    (`kronvi.logistic.FittedClassifier`) to one versioned `.npz` file (atomically).

    Parameters
    ----------
    path
        Destination file name (`str` or path-like); written as given, no suffix is added.
    model
        A `DirectModel`, a `FittedDirect` from `kronvi.pipeline.fit_direct`
        (any recipe: its standardizer, feature map, basis, priors and posteriors) or a `FittedClassifier`
        from `kronvi.fit_classifier`; validated first (see
        `load_model` for what is checked).
    compress
        Deflate the arrays (`numpy.savez_compressed`).

    Raises
    ------
    TypeError, ValueError
        If the model is inconsistent or holds something other than arrays, scalars, `None` and
        containers, or if `load_model` would refuse the file (every check `load_model` makes of the
        model is made before writing: NaN or infinite values in the grids or posteriors, for one).
    ValueError
        If `path` is a symbolic link, a device (`/dev/null`), a named pipe or a socket: only regular
        files are written, a link is never written through (see `kronvi.files.check_output_path`).
    FileNotFoundError, IsADirectoryError, PermissionError
        If the folder of `path` does not exist, `path` is a folder, or the folder cannot take a file
        (checked before anything is written; an existing file is replaced atomically and keeps its
        permission bits, see `kronvi.files.write_atomic`).

    Examples
    --------
    >>> import os, tempfile, jax.numpy as jnp, kronvi
    >>> pw, pn = kronvi.model.gaussian_prior(3, 1.0), kronvi.model.noise_prior(0.1)
    >>> model = kronvi.DirectModel(pw, pn, kronvi.model.MeanField.from_prior(pw), kronvi.model.MeanField.from_prior(pn))
    >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
    >>> kronvi.save_model(path, model)
    >>> bool(jnp.all(kronvi.load_model(path).q_w.logits == model.q_w.logits))
    True
    """
    path = check_output_path(path, option="`path`", overwrite=True)
    _check_root(model)
    arrays: dict = {}
    tree = _encode(model, "", arrays)
    header = {
        "format": FORMAT,
        "kind": type(model).__name__,
        "version": VERSION,
        "tree": tree,
        "arrays": {
            k: {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": _digest(a)} for k, a in arrays.items()
        },
    }
    if _HEADER in arrays:
        raise ValueError(f"cannot save: the key {_HEADER!r} is reserved")
    text = json.dumps(header)
    try:  # what `load_model` would make of the file, so that every file written can be read back
        _check_root(_decode(json.loads(text)["tree"], "", arrays, header["arrays"]))
    except (TypeError, ValueError) as e:
        raise ValueError(f"cannot save `model`: `load_model` would refuse the file: {e}") from None
    arrays[_HEADER] = np.array(text)
    write_atomic(path, lambda f: (np.savez_compressed if compress else np.savez)(f, **arrays))


def _check_header(header, path) -> dict:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ValueError(f"{path!r} is not a kronvi model file (format tag {got!r})")
    if header.get("kind") not in KINDS:
        raise ValueError(f"{path!r} holds a kronvi {header.get('kind')!r}, not one of {KINDS}")
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


def _spec(key, spec, path) -> tuple[tuple[int, ...], np.dtype, int]:
    """`(shape, dtype, nbytes)` of an array the header lists, checked to be a plain numeric array."""
    shape = spec.get("shape") if isinstance(spec, dict) else None
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape) or len(shape) > 32:
        raise ValueError(f"{path!r}: malformed kronvi header (array {key!r} has shape {shape!r})")
    try:
        dtype = np.dtype(spec.get("dtype"))
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biuf" or dtype.str != spec.get("dtype"):
        raise ValueError(f"{path!r}: malformed kronvi header (array {key!r} has dtype {spec.get('dtype')!r})")
    return tuple(shape), dtype, math.prod(shape) * dtype.itemsize


def _npy_header(fh, key, path):
    """`(shape, fortran_order, dtype)` from the `.npy` header at the start of an archive member."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fh)
    raise ValueError(f"{path!r}: array {key!r} has an unsupported .npy version {version}")


def _read_member(zf, info, shape, dtype, nbytes, key, path) -> np.ndarray:
    """The array in `info`, after its `.npy` header and its size in the zip directory are checked against
    the expected `shape` and `dtype`: no more than `nbytes` of data are ever inflated."""
    with zf.open(info) as fh:
        got_shape, fortran, got_dtype = _npy_header(fh, key, path)
        if got_shape != shape or got_dtype != dtype:
            raise ValueError(
                f"{path!r}: array {key!r} has shape {got_shape} and dtype {got_dtype.str} but the header "
                f"records {shape} and {dtype.str}"
            )
        if info.file_size != fh.tell() + nbytes:
            raise ValueError(
                f"{path!r}: array {key!r} takes {info.file_size} bytes in the archive but shape {shape} and "
                f"dtype {dtype.str} need {fh.tell() + nbytes}: corrupted file"
            )
        buf = bytearray(nbytes)
        if fh.readinto(buf) != nbytes:
            raise ValueError(f"{path!r}: array {key!r} is truncated: corrupted file")
    arr = np.frombuffer(buf, dtype).reshape(shape, order="F" if fortran else "C")
    return np.ascontiguousarray(arr) if fortran else arr


def _read_file(f, path, max_bytes):
    """The header and the verified arrays of an open model file."""
    head = f.read(6)
    f.seek(0)
    if head == b"\x93NUMPY":
        raise ValueError(f"{path!r} is not a kronvi model file (a plain .npy array, not an .npz archive)")
    if head[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise ValueError(f"{path!r} is not a kronvi model file (not an .npz archive)")
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path!r} is not a readable kronvi model file ({type(e).__name__}: {e})") from None
    with zf:
        members = {}
        for info in zf.infolist():
            if not info.filename.endswith(".npy") or info.filename[:-4] in members:
                raise ValueError(f"{path!r} is not a kronvi model file (archive member {info.filename!r})")
            members[info.filename[:-4]] = info
        if _HEADER not in members:
            raise ValueError(
                f"{path!r} is not a kronvi model file (an .npz archive without a {_HEADER!r} header)"
            )
        info = members.pop(_HEADER)
        if info.file_size > _MAX_HEADER_BYTES:
            raise ValueError(f"{path!r}: malformed kronvi header ({info.file_size} bytes)")
        with zf.open(info) as fh:
            shape, _, dtype = _npy_header(fh, _HEADER, path)
        if shape != () or dtype.kind != "U":
            raise ValueError(f"{path!r}: malformed kronvi header")
        raw = _read_member(zf, info, shape, dtype, dtype.itemsize, _HEADER, path)
        try:
            header = json.loads(str(raw))
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{path!r}: corrupted kronvi header ({type(e).__name__}: {e})") from None
        specs = _check_header(header, path)["arrays"]
        missing = sorted(set(specs) - set(members))
        if missing:
            raise ValueError(f"{path!r} is missing array(s) {missing}: truncated or edited file")
        extra = sorted(set(members) - set(specs))
        if extra:
            raise ValueError(f"{path!r} has array(s) {extra} that its header does not list: mismatched file")
        shapes = {key: _spec(key, spec, path) for key, spec in specs.items()}
        total = sum(nbytes for _, _, nbytes in shapes.values())
        if max_bytes is None:
            max_bytes = max(_MIN_BOUND_BYTES, _BOUND_RATIO * os.fstat(f.fileno()).st_size)
        if total > max_bytes:
            raise ValueError(
                f"{path!r} declares {total} bytes of arrays, more than `max_bytes`={max_bytes} "
                f"(default: {_BOUND_RATIO}x the file's size, at least {_MIN_BOUND_BYTES}); pass a larger "
                "`max_bytes` to load it if you trust the file"
            )
        arrays = {}
        for key, (shape, dtype, nbytes) in shapes.items():
            arr = _read_member(zf, members[key], shape, dtype, nbytes, key, path)
            if hashlib.sha256(arr.reshape(-1)).hexdigest() != specs[key].get("sha256"):
                raise ValueError(f"{path!r}: array {key!r} does not match its checksum: corrupted file")
            arrays[key] = arr
    return header, specs, arrays


def _open_regular(path, flags):
    """`os.open` that never blocks on a named pipe put at `path` after it was checked, and refuses
    anything but a regular file once open."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path!r} is not a regular file: not a kronvi model file")
    os.set_blocking(fd, True)
    return fd


def load_model(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Any:
    r"""Reads a `DirectModel`, a `kronvi.pipeline.FittedDirect` or a `kronvi.logistic.FittedClassifier`
    written by `save_model`.

    The file is untrusted input. Checks, each with its own `ValueError`: the file is an `.npz` archive
    (a text file or a damaged one "is not a kronvi model file") with a kronvi header of kind
    `DirectModel`, `FittedDirect` or `FittedClassifier`; its format version is supported; every array the header lists is present, a plain
    bool, integer or float array, and there are no others; before anything is inflated, each array's
    `.npy` header and its size in the zip directory agree with the shape and dtype the header records,
    and all of them together fit `max_bytes`; each array matches its SHA-256 digest; every class the
    file names is one of kronvi's model classes (looked up in a fixed registry: no module named in a
    file is imported) and passes its constructor's validation; and the model is consistent ($q_w$ and
    the priors share the grid shape, the packed codes have the width of `b` codes and stay below `m`; for a
    `FittedDirect`, the standardizer, feature map and basis agree on the number of inputs, features and
    weights, and their arrays are finite). A file written before a class gained a field with a default
    loads with that default.

    Arrays come back as JAX arrays (NumPy arrays for leaves that were NumPy arrays) with the stored dtype,
    so the reloaded model predicts identically. (A float64 file loaded with `jax_enable_x64` off comes
    back in float32, as JAX converts it.)

    Parameters
    ----------
    path
        A file written by `save_model`.
    max_bytes
        The most bytes all arrays of the file may take once read (checked from the file's directory
        before any array is inflated). Default: 16 times the file's size, and at least 64 MiB.

    Returns
    -------
    DirectModel or FittedDirect
        The model the file holds (its header's kind); a `FittedDirect` gives the same
        `fold_features` and predictions as the model that was saved.

    Raises
    ------
    ValueError
        If the file is not a valid kronvi model file (the message says why), or is not a regular file
        (a named pipe, a device or a socket is refused before it is opened: reading one could block
        forever or never end).
    FileNotFoundError, IsADirectoryError
        If there is no such file, or `path` is a folder.
    """
    path = os.fspath(path)
    if max_bytes is not None and not (type(max_bytes) is int and max_bytes >= 0):
        raise ValueError(f"`max_bytes` must be a non-negative integer or None, got {max_bytes!r}")
    st = os.stat(path)  # FileNotFoundError for a missing file
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{path!r} is a folder, not a kronvi model file")
    if not stat.S_ISREG(st.st_mode):  # opening a named pipe would block until someone writes to it
        raise ValueError(
            f"{path!r} is not a regular file (a device, named pipe or socket): not a kronvi model file"
        )
    with open(path, "rb", opener=_open_regular) as f:
        try:
            header, specs, arrays = _read_file(f, path, max_bytes)
        except ValueError as e:
            if str(e).startswith(repr(path)):
                raise
            raise ValueError(f"{path!r}: corrupted kronvi model file ({type(e).__name__}: {e})") from None
        except Exception as e:  # noqa: BLE001 - zip CRC, zlib, truncated member, bad .npy header, ...
            raise ValueError(f"{path!r}: corrupted kronvi model file ({type(e).__name__}: {e})") from None
    try:
        model = _decode(header["tree"], "", arrays, specs)
    except RecursionError:
        raise ValueError(f"{path!r}: malformed kronvi header (nested too deeply)") from None
    except (TypeError, AttributeError, KeyError) as e:
        raise ValueError(f"{path!r}: malformed kronvi header ({type(e).__name__}: {e})") from None
    if type(model).__name__ != header["kind"]:
        raise ValueError(f"{path!r}: the header does not describe a {header['kind']}")
    try:
        _check_root(model)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path!r}: inconsistent model: {e}") from None
    return model
