"""Superseded cells are history: Run All on a resumed run (tests/files'
resumed.ipynb, an old continuation kept below the new steps) runs every
other cell but leaves the superseded ones as they are, byte for byte, with a
one-line note on the page; running one directly does the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from labdriver import CELLS, open_notebook, save_notebook, screenshot
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.usefixtures("fresh_kernels")

FILES = Path(__file__).resolve().parents[1] / "files"
NOTE_ONE = ("Skipped a superseded cell: history of an earlier continuation, its recorded outputs kept. "
            "To run its code again, copy it into a new cell.")
TOAST = ".Toastify__toast"

_MODEL_CELLS = """() => {
  const model = window.jupyterapp.shell.currentWidget.content.model;
  return Array.from({length: model.cells.length}, (_, i) => model.cells.get(i).toJSON());
}"""


def _kept(cell: dict) -> str:
    """What Run All must not touch in a cell, as bytes to compare (the page's
    model adds `trusted`, JupyterLab's own state, to the metadata it holds)."""
    kept = {k: cell.get(k) for k in ("id", "source", "outputs", "execution_count", "metadata")}
    kept["metadata"] = {k: v for k, v in (kept["metadata"] or {}).items() if k != "trusted"}
    return json.dumps(kept, sort_keys=True)


def _superseded(cells: list[dict]) -> list[dict]:
    return [c for c in cells if (c.get("metadata") or {}).get("rlm", {}).get("superseded")]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_run_all_leaves_superseded_cells_as_they_are(page: Page, lab_server, request) -> None:
    for name in ("resumed.ipynb", "reviews.txt"):
        shutil.copy(FILES / name, lab_server.root_dir / name)
    fixture = json.loads((FILES / "resumed.ipynb").read_text(encoding="utf-8"))["cells"]
    history = _superseded(fixture)
    assert [c["cell_type"] for c in history] == ["markdown", "code", "markdown", "markdown"]
    [old_code] = [c for c in history if c["cell_type"] == "code"]
    assert old_code["outputs"] and old_code["execution_count"] == 2

    open_notebook(page, lab_server, "resumed.ipynb")
    before = page.evaluate(_MODEL_CELLS)
    assert [_kept(c) for c in _superseded(before)] == [_kept(c) for c in history]

    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    expect(page.locator(TOAST).filter(has_text="Skipped a superseded cell")).to_have_count(1, timeout=20_000)
    assert page.locator(TOAST).filter(has_text="Skipped").first.inner_text().strip() == NOTE_ONE
    # every other code cell runs
    page.wait_for_function(
        """() => { const panel = window.jupyterapp.shell.currentWidget;
                   const cells = panel.content.model.cells;
                   for (let i = 0; i < cells.length; i++) { const c = cells.get(i);
                     const rlm = c.getMetadata('rlm') || {};
                     if (c.type === 'code' && !rlm.superseded && (c.executionState === 'running' || c.executionCount === null))
                       return false; }
                   return panel.sessionContext.session.kernel.status === 'idle'; }""",
        timeout=90_000, polling=100)
    after = page.evaluate(_MODEL_CELLS)
    ran = [c for c in after if c["cell_type"] == "code" and not (c["metadata"].get("rlm") or {}).get("superseded")]
    assert [c["execution_count"] for c in ran] == [1, 2, 3, 4]  # each ran once, in order, in this kernel
    assert "recounted 2" in json.dumps([c["outputs"] for c in ran])
    assert [_kept(c) for c in _superseded(after)] == [_kept(c) for c in history]
    old = page.locator(CELLS).nth(next(i for i, c in enumerate(after) if c["id"] == old_code["id"]))
    old.scroll_into_view_if_needed()
    expect(old.locator(".jp-InputPrompt")).to_have_text("[2]:")
    screenshot(page, request, "-run-all")

    # Running it directly is refused the same way.
    page.evaluate(
        """(id) => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;
                     nb.activeCellIndex = nb.widgets.findIndex(w => w.model.id === id); nb.mode = 'command';
                     return app.commands.execute('notebook:run-cell'); }""", old_code["id"])
    expect(page.locator(TOAST).filter(has_text="Skipped a superseded cell")).to_have_count(2, timeout=10_000)
    assert [_kept(c) for c in _superseded(page.evaluate(_MODEL_CELLS))] == [_kept(c) for c in history]

    save_notebook(page)
    # in the file, every field as the run wrote it (read back as nbformat reads any
    # notebook: JupyterLab writes multi-line strings as lists of lines)
    saved = nbformat.read(lab_server.root_dir / "resumed.ipynb", as_version=4).cells
    written = nbformat.read(FILES / "resumed.ipynb", as_version=4).cells
    assert [json.dumps(c, sort_keys=True) for c in _superseded(saved)] == [
        json.dumps(c, sort_keys=True) for c in _superseded(written)]
    assert "recounted 2" in json.dumps([c.get("outputs") for c in saved if "recounted" in _source(c)])
