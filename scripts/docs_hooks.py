"""mkdocs hook for the docs build: links in the executed tutorials.

Executed tutorials (mkdocs-jupyter) bypass the Markdown pipeline: their Markdown cells are rendered by
nbconvert, so cross-references `[title][kronvi.name]` and links to other pages (`quickstart.py`,
`../benchmarks.md`) come through as text and file names. Turn them into what the Markdown pages get:
autorefs markers (resolved, or reported as warnings that fail the strict build, by mkdocs-autorefs) and
page URLs (a link to a missing page is a warning too)."""

import logging
import posixpath
import re

from mkdocs.utils import get_relative_url

_log = logging.getLogger("mkdocs.hooks.kronvi_docs")
_XREF = re.compile(r"\[((?:(?!\]\[)[^\[\]]){1,300})\]\[([A-Za-z_]\w*(?:\.\w+)+)\]")
_PAGE_LINK = re.compile(r'href="(?![a-z][a-z0-9+.-]*:|#|/)([^"#?]+\.(?:py|md|ipynb))(#[^"]*)?"')


def on_page_content(html, page, config, files, **kwargs):
    if not page.file.src_uri.endswith((".py", ".ipynb")):
        return html
    html = _XREF.sub(lambda m: f'<autoref identifier="{m[2]}">{m[1]}</autoref>', html)

    def link(m):
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), m[1]))
        file = files.get_file_from_path(target)
        if file is None:
            _log.warning("Doc file '%s' contains a link to '%s', which is not found", page.file.src_uri, m[1])
            return m[0]
        return f'href="{get_relative_url(file.url, page.url)}{m[2] or ""}"'

    return _PAGE_LINK.sub(link, html)
