"""The import contract: the package's layers, checked on its source.

Every import statement counts, function-level ones included (they are read
off the syntax tree, nothing is imported). A module may import its own layer
or a lower one, never a higher one; no set of modules imports itself in a
circle; only the layers that know SGLang import SGLang or torch; drafter
code (the examples, ``new``'s template) imports only the public modules.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

from sglang_spec_plugins import scaffold

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sglang_spec_plugins"

LAYERS = ("core", "engine", "patches", "serving", "worker", "app", "testing")
"""Lowest first: what each is in DESIGN.md's terms (pure core; reads SGLang;
edits SGLang; wires a server; the drafter authors' API; loader, CLI and
scaffold; the conformance kit)."""

APP = {"sglang_spec_plugins.loader", "sglang_spec_plugins.cli", "sglang_spec_plugins.scaffold",
       "sglang_spec_plugins.__main__"}
KNOWS_SGLANG = {"engine", "patches", "serving", "worker", "testing"}
PUBLIC = {"sglang_spec_plugins", "sglang_spec_plugins.worker", "sglang_spec_plugins.testing"}
"""What drafter code may import of this package."""


def _modules() -> Dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def layer(module: str) -> str:
    parts = module.split(".")
    if module in APP:
        return "app"
    if module == "sglang_spec_plugins.worker" or module.startswith("sglang_spec_plugins.worker."):
        return "worker"
    if len(parts) > 1 and parts[1] in ("engine", "patches", "serving", "testing"):
        return parts[1]
    return "core"


def imports(module: str, source: str, is_package: bool) -> Set[str]:
    """Every module ``source`` imports (absolute names), at any depth of the tree."""
    found: Set[str] = set()
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[:len(here) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES}
            found.update(submodules)
            if len(submodules) < len(node.names):  # names of the module itself, not only its submodules
                found.add(base)
    return found


def _graph() -> Dict[str, Set[str]]:
    return {m: {d for d in imports(m, p.read_text(), p.name == "__init__.py") if d in MODULES and d != m}
            for m, p in MODULES.items()}


GRAPH = _graph()


def test_the_layer_table_knows_every_module():
    assert all(layer(m) in LAYERS for m in MODULES)
    assert {layer(m) for m in MODULES} == set(LAYERS)


def test_no_module_imports_a_higher_layer():
    back = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in sorted(GRAPH.items()) for d in sorted(deps)
            if LAYERS.index(layer(d)) > LAYERS.index(layer(m))]
    assert not back, "back-arrows:\n" + "\n".join(back)


def _cycle() -> List[str]:
    """One import circle among the package's modules, or []."""
    state: Dict[str, int] = {}  # 1: on the path, 2: done
    path: List[str] = []

    def visit(module: str) -> List[str]:
        state[module] = 1
        path.append(module)
        for dep in sorted(GRAPH[module]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(GRAPH):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return []


def test_no_import_circle():
    circle = _cycle()
    assert not circle, "import circle: " + " -> ".join(circle)


def test_the_package_root_imports_only_the_contract():
    """The hook contract (its ``DraftModel`` imported on first use) and ``errors.is_plain_int`` (the exact-int
    rule plugins judge their settings by; errors is pure core: no SGLang)."""
    assert GRAPH["sglang_spec_plugins"] == {"sglang_spec_plugins.hookspecs", "sglang_spec_plugins.draft_model",
                                            "sglang_spec_plugins.errors"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) not in KNOWS_SGLANG))
def test_only_the_rooms_that_know_sglang_import_it(module):
    path = MODULES[module]
    heavy = sorted(d for d in imports(module, path.read_text(), path.name == "__init__.py")
                   if d.split(".")[0] in ("sglang", "torch", "triton"))
    assert not heavy, f"{module} ({layer(module)}) imports {heavy}"


def _drafter_sources():
    for path in sorted((ROOT / "examples").rglob("*.py")):
        if path.name == "serve_demo.py" or "build" in path.parts:
            continue  # the operator quick start's demo (it drives the CLI and the CPU harness), build copies
        yield str(path.relative_to(ROOT)), path.read_text()
    for draft_model in (False, True):
        for name, text in scaffold.files("my_drafter", draft_model).items():
            if name.endswith(".py"):
                yield f"new{' --draft-model' if draft_model else ''}: {name}", text


@pytest.mark.parametrize("where,source", list(_drafter_sources()), ids=lambda v: v if "\n" not in v else "")
def test_drafter_code_imports_only_the_public_modules(where, source):
    used = {m for m in imports("drafter.module", source, False) if m.split(".")[0] == "sglang_spec_plugins"}
    assert used <= PUBLIC, f"{where} imports {sorted(used - PUBLIC)}; drafters import only {sorted(PUBLIC)}"


def test_a_back_arrow_is_found():
    """The check itself can fail: a core module importing the engine is a back-arrow."""
    source = "def f():\n    from .engine.probe import probe\n"
    deps = imports("sglang_spec_plugins.policy", source, False)
    assert "sglang_spec_plugins.engine.probe" in deps
    assert LAYERS.index(layer("sglang_spec_plugins.engine.probe")) > LAYERS.index(layer("sglang_spec_plugins.policy"))
