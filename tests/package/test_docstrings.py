"""Docstrings read as plain text in `help()`: they name other objects in backticks, and the docs build
(`scripts/griffe_autolinks.py`) turns those names into links; no mkdocs link syntax in the source."""

import ast
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
    text = pydoc.render_doc(kronvi.fit_regression, renderer=pydoc.plaintext)
    assert "`RegressionStats`" in text and "`DiscretePrior`" in text and "][" not in text
