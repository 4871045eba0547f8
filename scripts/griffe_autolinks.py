"""Griffe extension for the docs build: a backticked kronvi name in a docstring becomes a link.

The docstrings name other objects in plain backticks (`` `MeanField` ``, `` `kronvi.fitting.fit_regression` ``,
`` `DirectConfig.basis` ``), so `help()` reads as plain text. At build time this extension rewrites every
such name that resolves to an object the API pages render into mkdocstrings' cross-reference,
`` [`MeanField`][kronvi.model.MeanField] ``; anything else (a parameter, an expression, a name of another
library) stays code.

A name resolves, first component first, in this order: the members of the documented object and of its
parents up to its module (so a class's docstring can name its own fields, a module's its own functions),
then `kronvi`'s top-level names, then the names of its public namespaces (`kronvi.logistic`, ...) when
only one of them has it; a name that starts with `kronvi.` is taken as a full path. A namespace itself is
linked by its full name only (`kronvi.stats`; a bare `stats` or `model` is usually a parameter). The object found is
linked to the heading the API pages give it: the path of its `::: path` directive (or a member of one),
else an explicit `[](){#id}` anchor. The pages are read from `docs/api/*.md`.

`python scripts/griffe_autolinks.py` prints, for the package in `src/`, each backticked name the build
would link and where.
"""

from __future__ import annotations

import pathlib
import re

import griffe

ROOT = pathlib.Path(__file__).resolve().parents[1]
API_PAGES = ROOT / "docs" / "api"
PACKAGE = "kronvi"

_DIRECTIVE = re.compile(r"^::: (\S+)\s*$", re.M)
_ANCHOR = re.compile(r"\[\]\(\)\{#([\w.]+)\}")
# `name` or `a.b.c`, not already a link's text ([`name`][...]) nor part of ``double`` backticks
_CODE = re.compile(r"(?<![`\[])`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`(?![`\]])")
_FENCE = re.compile(r"^\s*```")


def _target(obj):
    """The object an alias stands for (None if it points outside the loaded packages)."""
    try:
        return obj.final_target if obj.is_alias else obj
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _lookup(obj, path: str):
    """`obj`'s member at the dotted `path` (followed through aliases), or None."""
    for part in path.split("."):
        obj = _target(obj)
        if obj is None:
            return None
        try:
            obj = obj.members[part]
        except (KeyError, AttributeError):
            return None
    return _target(obj)


def rendered_ids(pkg) -> dict[str, str]:
    """Canonical path of each object the API pages render -> the identifier its heading has.

    A `::: path` directive renders `path`, and its public non-imported members unless the directive says
    `members: false`; `[](){#id}` anchors name an object too. A directive's heading wins over an anchor.
    """
    headings, anchors = {}, {}
    for page in sorted(API_PAGES.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in _DIRECTIVE.finditer(text):
            path = match.group(1)
            obj = _lookup(pkg, path.removeprefix(PACKAGE + ".")) if path != PACKAGE else pkg
            if obj is None:
                continue
            headings.setdefault(obj.path, path)
            options = text[match.end() : match.end() + 200].split(":::")[0]
            if "members: false" not in options and obj.kind in (griffe.Kind.MODULE, griffe.Kind.CLASS):
                _add_members(obj, path, headings)
        for ident in _ANCHOR.findall(text):
            obj = _lookup(pkg, ident.removeprefix(PACKAGE + "."))
            if obj is not None:
                anchors.setdefault(obj.path, ident)
    return {**anchors, **headings}


def _add_members(obj, path: str, ids: dict[str, str]) -> None:
    for name, member in obj.members.items():
        if name.startswith("_") or member.is_alias or member.docstring is None:
            continue  # the pages render only public members with a docstring
        ids.setdefault(member.path, f"{path}.{name}")
        if member.kind is griffe.Kind.CLASS:
            _add_members(member, f"{path}.{name}", ids)


def _namespaces(pkg) -> list:
    return [
        m
        for name, m in pkg.members.items()
        if not name.startswith("_") and not m.is_alias and m.kind is griffe.Kind.MODULE
    ]


def resolve(name: str, owner, pkg, ids: dict[str, str]) -> str | None:
    """The identifier `name`, written in the docstring of `owner`, links to; None if none."""
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        obj = pkg if name == PACKAGE else _lookup(pkg, name[len(PACKAGE) + 1 :])
        return None if obj is None else ids.get(obj.path)
    scope = owner
    while scope is not None:  # the documented object, its class, its module, up to the package
        if scope.kind in (griffe.Kind.MODULE, griffe.Kind.CLASS):
            obj = _lookup(scope, name)
            # a namespace links by its full name only: a bare `stats` or `model` is a parameter
            if obj is not None and obj.path in ids and not (obj.kind is griffe.Kind.MODULE and "." not in name):
                return ids[obj.path]
        scope = scope.parent
    found = {ids[o.path] for ns in _namespaces(pkg) if (o := _lookup(ns, name)) is not None and o.path in ids}
    return found.pop() if len(found) == 1 else None


def link_docstring(text: str, owner, pkg, ids: dict[str, str]) -> str:
    """`text` with each resolvable backticked name made a cross-reference (code blocks untouched)."""
    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        if fenced or line.lstrip().startswith((">>>", "...")):
            out.append(line)
            continue
        out.append(_CODE.sub(lambda m: _link(m, owner, pkg, ids), line))
    return "".join(out)


def _link(match, owner, pkg, ids) -> str:
    ident = resolve(match.group(1), owner, pkg, ids)
    return match.group(0) if ident is None else f"[{match.group(0)}][{ident}]"


def _objects(obj):
    """`obj` and every object defined (not imported) under it."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class AutoLinks(griffe.Extension):
    def on_package(self, *, pkg, **kwargs):
        if pkg.name != PACKAGE:
            return
        ids = rendered_ids(pkg)
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = link_docstring(obj.docstring.value, obj, pkg, ids)


def main():
    pkg = griffe.load(PACKAGE, search_paths=[str(ROOT / "src")], resolve_aliases=True)
    ids = rendered_ids(pkg)
    for obj in _objects(pkg):
        if obj.docstring is None:
            continue
        for match in _CODE.finditer(obj.docstring.value):
            ident = resolve(match.group(1), obj, pkg, ids)
            if ident is not None:
                print(f"{obj.path}: `{match.group(1)}` -> {ident}")


if __name__ == "__main__":
    main()
