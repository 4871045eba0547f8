"""Docstrings read as plain text in `help()`: they name other objects in backticks, and the docs build
(`scripts/griffe_autolinks.py`) turns those names into links; no mkdocs link syntax in the source."""

import ast
import dataclasses
import pathlib
import pydoc
import re

import kronvi

SRC = pathlib.Path(kronvi.__file__).parent
CROSS_REFERENCE = re.compile(r"\[[^\]\n]*\]\[[\w.]*\]")  # [`name`][kronvi.name] and [`name`][]


def _docstrings(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "name", path.name), doc


def test_no_docstring_uses_mkdocs_link_syntax():
    found = [
        f"{path.relative_to(SRC)}:{name}: {match.group(0)}"
        for path in sorted(SRC.rglob("*.py"))
        for name, doc in _docstrings(path)
        for match in CROSS_REFERENCE.finditer(doc)
    ]
    assert found == []


def test_help_of_fit_regression_names_objects_in_plain_backticks():
    text = pydoc.render_doc(kronvi.fitting.fit_regression, renderer=pydoc.plaintext)
    assert "`RegressionStats`" in text and "`DiscretePrior`" in text and "][" not in text


def _attributes_section(doc: str) -> list[str]:
    """The names an `Attributes:` section of a Google docstring lists, in order."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    indent = len(lines[start + 1]) - len(lines[start + 1].lstrip())
    names = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        if len(line) - len(line.lstrip()) == indent:
            names.append(line.strip().split(":")[0])
    return names


def test_the_pipeline_types_document_every_field():
    for cls in (kronvi.pipeline.DirectConfig, kronvi.pipeline.FittedDirect):
        assert _attributes_section(cls.__doc__) == list(cls._fields), cls.__name__
    for cls in (kronvi.Eigen, kronvi.Compact, kronvi.Features, kronvi.GPOptions):
        assert _attributes_section(cls.__doc__) == [f.name for f in dataclasses.fields(cls)], cls.__name__
