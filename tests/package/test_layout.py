"""The package's shape: data flows one way, no module imports another's private names, no side effects."""

import ast
import inspect
import json
import os
import pathlib

from helpers import run_python

import kronvi

SRC = pathlib.Path(kronvi.__file__).parent


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(name, path):
    """``(imported module, [names])`` for every ``from`` import of a kronvi module (relative or absolute)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "kronvi" or target.startswith("kronvi."):
                out.append((target, [a.name for a in node.names]))
    return out


def _graph():
    modules = dict(_modules())
    graph = {}
    for name, path in modules.items():
        deps = set()
        for target, names in _imports(name, path):
            for n in names:  # `from . import gaussian` imports a submodule
                if f"{target}.{n}" in modules:
                    deps.add(f"{target}.{n}")
            if target in modules:
                deps.add(target)
        graph[name] = deps - {name}
    return graph


def test_no_import_cycles():
    graph = _graph()
    # The top-level package and the public sub-packages' __init__ only re-export.
    inits = {"kronvi"} | {m for m in graph if (SRC.parent / m.replace(".", "/") / "__init__.py").exists()}
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in graph[m]:
            if d in inits:
                continue
            if state.get(d) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d) :] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in graph:
        if m not in state and m not in inits:
            visit(m)


def test_no_module_imports_another_modules_private_names():
    offenders = []
    for name, path in _modules():
        for target, names in _imports(name, path):
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            if private:
                offenders.append(f"{name} imports {private} from {target}")
    assert not offenders, offenders


# a NamedTuple's public methods and fields start with an underscore (so as not to clash with field names)
_NAMEDTUPLE_API = {"_fields", "_field_defaults", "_replace", "_asdict", "_make"}


def _private_uses(tree):
    """The private kronvi names a parsed file imports or reads: `import kronvi._x`, `from kronvi._x import
    y`, `from kronvi.x import _y` and attribute reads `kronvi.<public>._x` (no allow-list)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "kronvi" and "._" in a.name]
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] == "kronvi"
        ):
            if "._" in node.module:
                out.append(node.module)
            private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
            out += [f"{node.module}.{name}" for name in private]
        elif isinstance(node, ast.Attribute) and _private_attribute(node.attr):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id == "kronvi":
                out.append(".".join(["kronvi", *reversed(chain)]))
    return out


def _private_attribute(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in _NAMEDTUPLE_API


def test_experiments_use_only_the_public_api():
    """A study is a use of the library: it imports no private kronvi module or name (a study of a private
    rule belongs in the tests, or in the git history once its decision is recorded)."""
    files = sorted((ROOT / "experiments").rglob("*.py"))
    assert len(files) > 10
    offenders = {str(p.relative_to(ROOT)): u for p in files if (u := _private_uses(ast.parse(p.read_text())))}
    assert offenders == {}


def test_the_private_name_check_can_fail():
    code = (
        "import kronvi._base.threads\nfrom kronvi._inputs import gp\nfrom kronvi.pipeline import _centre, fit_direct\n"
        "import kronvi\nkronvi.pipeline._parts(1)\nkronvi.fit_direct\nfrom kronvi import __version__\n"
        "kronvi.FitInfo._fields\nkronvi.__name__\n"
    )
    assert _private_uses(ast.parse(code)) == [
        "kronvi._base.threads", "kronvi._inputs", "kronvi.pipeline._centre", "kronvi.pipeline._parts"
    ]  # fmt: skip


def test_import_has_no_side_effects_on_the_environment():
    # Nor does it start JAX's backend: a user's XLA_FLAGS, `jax.config` or `jax.distributed.initialize()`
    # after `import kronvi` must still take effect (a module-level jnp array once started it).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS", "OMP_", "MKL_"))}
    code = (
        "import os, json; before = dict(os.environ); import kronvi; from jax._src import xla_bridge; "
        "print(json.dumps([dict(os.environ) == before, not xla_bridge._backends]))"
    )
    assert json.loads(run_python("-c", code, env=env).strip().splitlines()[-1]) == [True, True]


def test_every_public_name_is_documented():
    import importlib

    namespaces = [kronvi] + [getattr(kronvi, n) for n in kronvi.__all__ if inspect.ismodule(getattr(kronvi, n))]
    namespaces.append(importlib.import_module("kronvi.sklearn"))
    missing = [
        f"{module.__name__}.{n}" for module in namespaces for n in module.__all__
        if callable(getattr(module, n)) and not (getattr(module, n).__doc__ or "").strip()
    ]  # fmt: skip
    assert len(namespaces) > 10 and not missing, missing


ROOT = SRC.parent.parent


def _stated_stages():
    """`[(stage number, [module or package names], item text)]` of the numbered map in docs/design.md."""
    import re

    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=\d+\. )", "\n" + section)
    stages = []
    for item in items:
        m = re.match(r"(\d+)\. (.*?) — ", item.strip(), re.S)
        if m:
            names = [n.rstrip("/").removesuffix(".py") for n in re.findall(r"`([^`]+)`", m.group(2))]
            stages.append((int(m.group(1)), names, item))
    return stages


def _stage_of():
    """Module name -> its stage number in docs/design.md."""
    out = {}
    for number, names, _ in _stated_stages():
        for n in names:
            out[f"kronvi.{n}"] = number
    return out


def _module_stage(module, stages):
    parts = module.split(".")
    for k in range(len(parts), 1, -1):
        if ".".join(parts[:k]) in stages:
            return stages[".".join(parts[:k])]
    return None


def test_every_module_is_on_the_stated_map():
    stages = _stated_stages()
    stage_of = _stage_of()
    missing = []
    for name, path in _modules():
        if name == "kronvi" or path.name == "__init__.py":
            continue
        number = _module_stage(name, stage_of)
        if number is None:
            missing.append(f"{name}: no stage")
            continue
        if name not in stage_of:  # a module inside a stage's package: its file must be named in the item
            item = next(text for n, _, text in stages if n == number)
            if path.stem not in item:
                missing.append(f"{name}: not named in stage {number}")
    assert not missing, missing


def test_imports_follow_the_stated_order():
    stage_of = _stage_of()
    graph = _graph()
    inits = {m for m in graph if (SRC.parent / m.replace(".", "/") / "__init__.py").exists()}
    against = []
    for module, deps in graph.items():
        if module in inits:  # package __init__ files only re-export
            continue
        mine = _module_stage(module, stage_of)
        for dep in deps - inits:
            theirs = _module_stage(dep, stage_of)
            if theirs is not None and mine is not None and theirs > mine:
                against.append(f"{module} (stage {mine}) imports {dep} (stage {theirs})")
    assert not against, against


def test_every_public_module_declares_its_surface():
    """`__all__` in every public module: a package's or a namespace's is every public name it binds (its
    re-exports), `pipeline`'s the public names it defines (not the ones it imports), and each name exists."""
    import ast
    import importlib

    reexports = [  # the packages' __init__ files and the namespaces that only re-export
        "kronvi",
        "kronvi.bnn",
        "kronvi.gaussian",
        "kronvi.logistic",
        "kronvi.mixtures",
        "kronvi.quantize",
        "kronvi.inputs",
        "kronvi.stats",
        "kronvi.model",
        "kronvi.fitting",
        "kronvi.files",
    ]
    for name in reexports:
        module = importlib.import_module(name)
        # what the __init__ binds (not submodules that other imports attach later, like kronvi.cli)
        bound = {
            alias.asname or alias.name
            for node in ast.parse(pathlib.Path(module.__file__).read_text()).body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert sorted(module.__all__) == sorted(n for n in bound if not n.startswith("_")), name
    for name in ["kronvi.pipeline", "kronvi.cv", "kronvi.feature_learning", "kronvi.sklearn"]:
        module = importlib.import_module(name)
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        defined = {
            node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else target.id
            for node in tree.body
            for target in (node.targets if isinstance(node, ast.Assign) else [node])
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) or isinstance(target, ast.Name)
        }
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert missing == [], name
        if name in ("kronvi.pipeline", "kronvi.cv"):  # the end-to-end names; the stages it calls are kronvi's
            assert set(module.__all__) <= defined
    pipeline = importlib.import_module("kronvi.pipeline")
    assert {"DirectConfig", "prepare_fold", "fit_prepared", "fit_direct"} <= set(pipeline.__all__)
    cv = importlib.import_module("kronvi.cv")
    assert {"run_fold", "FoldResult", "summarize", "parse_noise_cv"} <= set(cv.__all__)
