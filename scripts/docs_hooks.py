"""mkdocs hook for the docs build: the notes index lists every note in docs/notes/ when the site is built.

Replaces the line `<!-- notes -->` of docs/notes/index.md with one link per dated note (newest first),
titled by the note's first heading, so a new note needs no edit of the index.
"""

import os

MARKER = "<!-- notes -->"


def _title(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# "):
                return line[2:].strip()
    return os.path.basename(path)


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri != "notes/index.md" or MARKER not in markdown:
        return markdown
    notes = sorted(
        (f for f in files.documentation_pages() if f.src_uri.startswith("notes/") and f.src_uri != "notes/index.md"),
        key=lambda f: f.src_uri,
        reverse=True,
    )
    links = "\n".join(f"- [{_title(f.abs_src_path)}]({os.path.basename(f.src_uri)})" for f in notes)
    return markdown.replace(MARKER, links)


# ----------------------------------------------------------------------------------------------------
# Executed tutorials (mkdocs-jupyter) bypass the Markdown pipeline: their Markdown cells are rendered by
# nbconvert, so cross-references `[title][kronvi.name]` and links to other pages (`quickstart.py`,
# `../benchmarks.md`) come through as text and file names. Turn them into what the Markdown pages get:
# autorefs markers (resolved, or reported as warnings that fail the strict build, by mkdocs-autorefs) and
# page URLs (a link to a missing page is a warning too).

import logging  # noqa: E402
import posixpath  # noqa: E402
import re  # noqa: E402

from mkdocs.utils import get_relative_url  # noqa: E402

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
