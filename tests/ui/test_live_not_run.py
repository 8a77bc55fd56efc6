"""A code cell the root model wrote but the run did not run (here its fence
was never closed) says why, in real JupyterLab: its note output, the badge's
"not run" and its tooltip carry the sentence the root model was told, and the
saved notebook keeps the reason in the cell's metadata and the note."""

from __future__ import annotations

import pytest
from labdriver import (
    CELLS,
    all_cells,
    open_run_notebook,
    output_text,
    rlm_magic,
    save_notebook,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

SENTENCE = "This code block was not run: its ``` fence was never closed."
SCRIPT = ["Let me look.\n```repl\nprint('SHOULD-NOT-RUN')", "FINAL(nothing ran)"]


def test_a_cell_that_did_not_run_says_why(page: Page, lab_server, request) -> None:
    with ScriptedServer(Script(root=SCRIPT)) as server:
        path = open_run_notebook(page, lab_server, "not-run.ipynb", "context = 'hay ' * 100",
                                 f"{rlm_magic(server.url)}\nLook.")
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=90_000)
    [code] = [c for c in all_cells(page) if c["role"] == "code"]
    assert code["status"] == "skipped" and code["count"] is None, code
    assert code["output"] == SENTENCE, code
    cell = page.locator(CELLS).nth(code["index"])
    cell.scroll_into_view_if_needed()
    expect(cell.locator(".jp-OutputArea-output")).to_have_text(SENTENCE)
    assert "SHOULD-NOT-RUN" not in cell.locator(".jp-OutputArea").inner_text()
    badge = cell.locator(".rlm-badge")
    expect(badge).to_contain_text("not run")
    assert badge.get_attribute("title").endswith("\n" + SENTENCE), badge.get_attribute("title")
    screenshot(page, request)

    save_notebook(page)
    saved = next(c for c in lab_server.read_notebook(path)["cells"] if c["id"] == code["id"])
    assert saved["metadata"]["rlm"]["skipped"] == "its ``` fence was never closed"
    assert [o["output_type"] for o in saved["outputs"]] == ["display_data"]
    assert output_text(saved["outputs"][0]) == SENTENCE
    assert saved["execution_count"] is None
