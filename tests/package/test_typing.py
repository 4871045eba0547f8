"""Every public function is annotated: each parameter and the return (`mypy` checks them in CI, `.ci/run`)."""

import importlib
import inspect

import pytest

MODULES = [
    "kronvi",
    "kronvi.inputs",
    "kronvi.stats",
    "kronvi.model",
    "kronvi.fitting",
    "kronvi.files",
    "kronvi.bnn",
    "kronvi.cv",
    "kronvi.feature_learning",
    "kronvi.gaussian",
    "kronvi.logistic",
    "kronvi.mixtures",
    "kronvi.pipeline",
    "kronvi.quantize",
    "kronvi.sklearn",
]


def _public_functions():
    found = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isfunction(obj):
                found.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return found


FUNCTIONS = _public_functions()


def _unannotated(fn):
    """The parameters without an annotation, and `"return"` when the return has none, as `inspect.signature`
    shows them (through decorators such as `reordered_arguments`, to the function they wrap)."""
    sig = inspect.signature(fn)
    missing = [name for name, p in sig.parameters.items() if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def test_the_check_sees_the_public_functions():
    assert len(FUNCTIONS) > 100
    names = {fn.__name__ for fn in FUNCTIONS.values()}
    assert {"fit_regression", "regression_elbo", "fit_direct", "save_model", "fit_features_eigen"} <= names


def test_the_check_finds_a_missing_annotation():
    def partly(x: int, y, *, z=1.0):
        return x

    assert _unannotated(partly) == ["y", "z", "return"]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_public_signature_is_annotated(name):
    assert _unannotated(FUNCTIONS[name]) == [], f"{name}: annotate {_unannotated(FUNCTIONS[name])}"
