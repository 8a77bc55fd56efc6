"""How the test suite is laid out: test modules share code through helper
modules (conftest.py and ``_*.py`` such as _helpers.py, _kernel.py,
_cli.py), never by importing one another, so that a test module can be
moved, renamed or run alone."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module name) of every import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _is_shared_by_import_forbidden(name: str) -> bool:
    """Test modules (``test_*``) and conftest modules are never imported."""
    return name.startswith("test_") or name == "conftest"


def test_no_module_imports_a_test_module_or_a_conftest():
    offenders = [f"{path.relative_to(TESTS)}:{line} imports {name}"
                 for path in _python_files() for line, name in _imported_modules(path)
                 if _is_shared_by_import_forbidden(name)]
    assert offenders == [], ("put what they share in conftest.py or a tests/_*.py helper module:\n"
                             + "\n".join(offenders))


def test_the_check_finds_such_imports(tmp_path):
    """The check above would see each way of importing a test module."""
    sample = tmp_path / "test_sample.py"
    sample.write_text("import os\nimport test_cli\nfrom test_kernel import Kernel\nfrom conftest import x\n"
                      "def f():\n    from test_takeover import Frontend\nfrom _helpers import repl\n",
                      encoding="utf-8")
    names = [name for _, name in _imported_modules(sample) if _is_shared_by_import_forbidden(name)]
    assert names == ["test_cli", "test_kernel", "conftest", "test_takeover"]


def test_helper_module_names_are_unique_across_test_folders():
    """tests/, tests/ui and tests/smoke share one sys.path: two helper
    modules with the same name would shadow each other."""
    names: dict[str, list[str]] = {}
    for path in _python_files():
        if path.name != "conftest.py":
            names.setdefault(path.stem, []).append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
