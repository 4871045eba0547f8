"""Converts reST markup in docstrings to the Markdown the docs site renders (review the diff after).

Usage: python scripts/md_docstrings.py src/kronvi/<file>.py ...

- :math:`x` -> $x$; `.. math::` blocks -> $$ ... $$ blocks at the directive's indentation;
- :func:/:class:/:mod:/...`x` -> `x` (`~a.b.x` -> `x`); the docs build links the names of documented kronvi
  objects (scripts/griffe_autolinks.py);
- ``code`` -> `code`.

Only docstrings (module, class, function) are touched; comments and string literals are left alone.
Keep docstrings with backslashes raw (r-prefixed), and run the file's doctests afterwards.
"""
import ast
import re
import sys

ROLE = re.compile(r":(func|class|mod|attr|data|meth|obj|exc):`([^`]+)`")
MATH = re.compile(r":math:`([^`]+)`", re.S)
LIT = re.compile(r"``([^`]+?)``", re.S)
DIRECTIVE = re.compile(r"^(\s*)\.\. math::[ \t]*(.*)$")


def role(m):
    text = m.group(2).strip()
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text.rstrip('()')}`"


def math_blocks(lines):
    out, i = [], 0
    while i < len(lines):
        m = DIRECTIVE.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        ind, first = m.group(1), m.group(2)
        body = [first] if first.strip() else []
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > len(ind)):
            body.append(lines[j])
            j += 1
        while body and not body[-1].strip():
            body.pop()
            j -= 1
        # j now points after the last content line (trailing blanks are kept in place)
        content = [b for b in body]
        extra = min((len(b) - len(b.lstrip()) for b in content if b.strip() and b is not first), default=len(ind))
        dedented = []
        for b in content:
            if b is first:
                dedented.append(ind + b.strip())
            elif b.strip():
                dedented.append(ind + b[extra:] if extra >= len(ind) else b)
            else:
                dedented.append("")
        out.append(ind + "$$")
        out.extend(dedented)
        out.append(ind + "$$")
        i = j
    return out


def inline_math(m):
    body = " ".join(m.group(1).split("\n")) if False else m.group(1)
    return "$" + body.strip() + "$"


def convert_text(text):
    lines = math_blocks(text.split("\n"))
    text = "\n".join(lines)
    text = MATH.sub(inline_math, text)
    text = ROLE.sub(role, text)
    text = LIT.sub(lambda m: f"`{m.group(1)}`", text)
    return text


def docstring_ranges(source):
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].end_lineno


def convert_file(path):
    src = open(path).read()
    lines = src.split("\n")
    for a, b in sorted(docstring_ranges(src), reverse=True):
        chunk = "\n".join(lines[a - 1 : b])
        new = convert_text(chunk)
        lines[a - 1 : b] = new.split("\n")
    out = "\n".join(lines)
    if out != src:
        open(path, "w").write(out)
        print("converted", path)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        convert_file(p)
