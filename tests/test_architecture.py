"""The package's shape, as docs/architecture.md describes it: no import
circle (type-only imports counted), the engine's subpackages in layers that
import downwards only, the engine imports nothing outside itself but leaf
modules and the context loader, sinks and the kernel depend on the engine and
never the reverse, importing a module changes no global state, and modules
stay small."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rlm_kernel"
LEAVES = {"rlm_kernel._version", "rlm_kernel._words", "rlm_kernel._local_server", "rlm_kernel.errors",
          "rlm_kernel.redaction"}
# The engine's subpackages, lowest first: each may import only those before it
# (each one's __init__ docstring says the same).
ENGINE_LAYERS = ["protocol", "trajectory", "execution", "model", "subcalls", "steps", "runs"]
# Modules allowed past ~400 lines because they hold one idea (see docs/architecture.md).
LONG_BUT_ONE_IDEA = {
    "rlm_kernel.export.runs": "a trajectory notebook read as runs and steps, which every export walks",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts}


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports(name: str, type_only: bool = False) -> set[str]:
    """The rlm_kernel modules ``name`` imports: every import statement, at
    module level or inside a function; those under ``if TYPE_CHECKING:``
    (annotations only, never executed) only with ``type_only``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node) and not type_only:
            for child in node.orelse:  # type: ignore[attr-defined]
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rlm_kernel"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("rlm_kernel"):
                for alias in node.names:  # `from . import x` may name a module
                    found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(name)
    return {m for m in found if m in MODULES}


def runtime_imports(name: str) -> set[str]:
    return imports(name)


GRAPH = {name: runtime_imports(name) for name in MODULES}
# with the imports made for annotations only: a circle there is a circle of ideas
TYPED_GRAPH = {name: imports(name, type_only=True) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_engine_has_no_cycle_even_counting_imports_for_annotations() -> None:
    engine = {name: {m for m in imports if m.startswith("rlm_kernel.engine")}
              for name, imports in TYPED_GRAPH.items() if name.startswith("rlm_kernel.engine")}
    cycle = find_cycle(engine)
    assert cycle is None, "import cycle (type-only imports counted): " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    """A check of the check."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def engine_layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "engine" else None


def test_the_engine_is_its_subpackages_in_layers() -> None:
    """Every engine module lives in a subpackage of ENGINE_LAYERS, and imports
    (type-only ones too) only from its own subpackage or those before it."""
    loose = [name for name in MODULES if name.startswith("rlm_kernel.engine.") and engine_layer(name) not in
             ENGINE_LAYERS]
    assert not loose, f"engine modules outside the subpackages: {loose}"
    for name, imported in TYPED_GRAPH.items():
        layer = engine_layer(name)
        if layer is None:
            continue
        allowed = set(ENGINE_LAYERS[: ENGINE_LAYERS.index(layer) + 1])
        bad = sorted(m for m in imported if engine_layer(m) is not None and engine_layer(m) not in allowed)
        assert not bad, f"{name} ({layer}) imports {bad}, which sit above it"


def test_each_engine_subpackage_says_what_it_owns_and_may_import() -> None:
    for layer in ENGINE_LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / "engine" / layer / "__init__.py").read_text()))
        assert doc and "May import:" in doc, layer
        below = ENGINE_LAYERS[: ENGINE_LAYERS.index(layer)]
        assert all(f"``{b}``" in doc for b in below[-1:]) or "every" in doc or not below, layer


def test_the_import_graph_sees_imports_inside_functions() -> None:
    """A check of the check: a function-level import is an edge."""
    assert "rlm_kernel.api" in GRAPH["rlm_kernel"]  # the package imports it lazily, in __getattr__
    assert "rlm_kernel.engine.model.litellm_setup" in GRAPH["rlm_kernel.kernel.ipkernel"]


def test_the_engine_imports_only_itself_and_leaf_modules() -> None:
    for name, imports in TYPED_GRAPH.items():
        if name.startswith("rlm_kernel.engine"):
            outside = {m for m in imports if not m.startswith(("rlm_kernel.engine", "rlm_kernel.context"))} - LEAVES
            assert not outside, f"{name} imports {sorted(outside)}"


def test_leaf_modules_import_nothing_of_ours() -> None:
    for name in LEAVES:
        assert GRAPH[name] <= LEAVES, (name, GRAPH[name])


def test_the_context_loader_sits_below_the_engine() -> None:
    for name, imported in TYPED_GRAPH.items():
        if name.startswith("rlm_kernel.context"):
            bad = {m for m in imported if not m.startswith("rlm_kernel.context")} - LEAVES
            assert not bad, f"{name} imports {sorted(bad)}"


@pytest.mark.parametrize("layer, forbidden", [
    ("rlm_kernel.sinks", ("rlm_kernel.kernel", "rlm_kernel.api", "rlm_kernel.builder", "rlm_kernel.cli")),
    ("rlm_kernel.widgets", ("rlm_kernel.kernel", "rlm_kernel.api", "rlm_kernel.builder", "rlm_kernel.sinks")),
    ("rlm_kernel.cli", ("rlm_kernel.kernel",)),
    ("rlm_kernel.builder", ("rlm_kernel.kernel", "rlm_kernel.api", "rlm_kernel.cli")),
    ("rlm_kernel.bridges", ("rlm_kernel.kernel", "rlm_kernel.serve", "rlm_kernel.batch", "rlm_kernel.sandbox",
                            "rlm_kernel.cli")),
])
def test_layers_depend_downwards_only(layer: str, forbidden: tuple[str, ...]) -> None:
    for name, imports in GRAPH.items():
        if name == layer or name.startswith(layer + "."):
            bad = sorted(m for m in imports if m.startswith(forbidden))
            assert not bad, f"{name} imports {bad}"


def test_only_the_command_line_imports_the_bridges() -> None:
    for name, imported in TYPED_GRAPH.items():
        if name != "rlm_kernel.cli" and not name.startswith("rlm_kernel.bridges"):
            assert not any(m.startswith("rlm_kernel.bridges") for m in imported), name


def code_words(path: Path) -> set[str]:
    """The names and string literals of a module's code (not its docstrings or comments)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.alias):
            words.update(node.name.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.add(node.value)
    return words


def test_nothing_widget_or_page_specific_in_the_engine() -> None:
    for name, path in MODULES.items():
        if name.startswith("rlm_kernel.engine"):
            for word in code_words(path):
                for mark in ("ipywidgets", "widget-view", "jupyter.widget", "comm", "labextension", "LiveSink",
                             "subcall_views"):
                    assert mark not in word.split(".") and mark not in word.split("/") and not (
                        "-" in mark and mark in word), f"{name} uses {word!r}"


def test_importing_every_module_changes_no_global_state() -> None:
    code = r"""
import atexit, json, os, signal, sys, threading, time, importlib
names = json.loads(sys.argv[1])
# what our modules import of others' first: their own import-time effects are not ours
for other in ("nbformat", "IPython", "ipykernel.ipkernel", "ipykernel.kernelapp", "ipywidgets", "comm",
              "jupyter_client", "traitlets"):
    importlib.import_module(other)
before = (dict(os.environ), time.sleep, sys.stdout, sys.stderr, signal.getsignal(signal.SIGINT),
          threading._start_new_thread, atexit._ncallbacks(), threading.active_count())
for name in names:
    importlib.import_module(name)
after = (dict(os.environ), time.sleep, sys.stdout, sys.stderr, signal.getsignal(signal.SIGINT),
         threading._start_new_thread, atexit._ncallbacks(), threading.active_count())
labels = ["environment", "time.sleep", "sys.stdout", "sys.stderr", "SIGINT handler", "thread start",
          "atexit callbacks", "threads"]
changed = [label for label, x, y in zip(labels, before, after) if x != y]
print(json.dumps({"changed": changed, "litellm": "litellm" in sys.modules}))
"""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("LITELLM", "EXPERIMENTAL"))}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(sorted(MODULES))], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"changed": [], "litellm": False}


def test_modules_stay_small() -> None:
    for name, path in MODULES.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > 420 and name not in LONG_BUT_ONE_IDEA:
            pytest.fail(f"{name} has {lines} lines; split it, or say in LONG_BUT_ONE_IDEA why it is one idea")


def test_the_map_names_every_engine_module_in_its_subpackage_section() -> None:
    """docs/architecture.md has a section per engine subpackage naming each
    of its modules, so the map cannot silently fall behind the code."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## engine/(\w+)[^\n]*\n(.*?)(?=^## )", text, flags=re.S | re.M))
    for layer in ENGINE_LAYERS:
        assert layer in sections, f"docs/architecture.md has no section '## engine/{layer}'"
        for path in sorted((PACKAGE / "engine" / layer).glob("*.py")):
            if path.name != "__init__.py":
                assert f"`{path.name}`" in sections[layer], f"the map's engine/{layer} section misses {path.name}"


def test_map_table_cells_stay_short() -> None:
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            for cell in line.strip("|").split("|"):
                assert len(cell.strip()) <= 220, f"a map cell of {len(cell.strip())} characters: {cell[:60]}..."
