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
