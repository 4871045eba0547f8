"""Griffe extension for the docs build: reads kronvi's docstring headings the way the house style means them.

- `Example:` (singular, the house style) is read as `Examples:`; griffe's Google parser knows only the
  plural and would render the doctest as prose in a plain admonition.
- `Methods:` in a *function's* docstring (a list of the `method=` options) is read as a paragraph;
  griffe's Google parser would take it for a class's methods section and fail on it.
"""

import re

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)
_METHODS = re.compile(r"^(\s*)Methods:\s*$", re.M)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        doc = obj.docstring
        if doc is None:
            return
        value = _EXAMPLE.sub(r"\1Examples:", doc.value)
        if obj.kind is griffe.Kind.FUNCTION:
            value = _METHODS.sub(r"\1The methods:", value)
        doc.value = value
