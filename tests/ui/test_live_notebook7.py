"""A real %%rlm run in Jupyter Notebook 7 (/notebooks/...): the same
labextension inserts the agent cells, streams their outputs and shows the
sub-call widget."""

from __future__ import annotations

import pytest
from labdriver import (
    CELLS,
    all_cells,
    cell_by_id,
    open_in_notebook7,
    open_run_notebook,
    rlm_magic,
    save_notebook,
    saved_cells_by_id,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

pytest.importorskip("notebook", minversion="7", reason="Notebook 7 is not installed: pip install 'notebook==7.*'")

STEPS = [
    "Notebook 7 first step.\n```repl\nimport time\nprint('nb7 before', flush=True)\ntime.sleep(1.5)\n"
    "print('nb7 after')\n```",
    "A small batch.\n```repl\nreplies = llm_query_batched(['a', 'b', 'c'])\nprint(replies)\n```",
    "FINAL(notebook seven works)",
]


def test_notebook7_real_run_inserts_cells(page: Page, any_lab, request) -> None:
    """With collaboration (the server writes the shared document) and without (the page its copy)."""
    lab_server = any_lab
    with ScriptedServer(Script(root=STEPS, sub=lambda p: Reply(text=f"re {p}", delay=0.3))) as server:
        path = open_run_notebook(page, lab_server, "nb7-run.ipynb", "context = 'seven ' * 100",
                                 f"{rlm_magic(server.url)}\nDoes it work in Notebook 7?", opener=open_in_notebook7)
        assert "/notebooks/" in page.url
        assert page.locator("#jp-main-statusbar").count() == 0 or not page.locator("#jp-main-statusbar").is_visible()
        start_cell(page, "ask")

        # Streaming into the inserted cell works here too.
        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('nb7 before')", timeout=60_000)
        assert page.locator(f"{CELLS} .jp-OutputArea-output:has-text('nb7 after')").count() == 0
        screenshot(page, request, "-streaming")
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        expect(widget).to_contain_text("3 of 3 done", timeout=30_000)
        wait_cell_idle(page, "ask", timeout=30_000)
        expect(page.locator(".rlm-answer-cell")).to_contain_text("notebook seven works", timeout=10_000)

        cells = all_cells(page)
        ids = [c["id"] for c in cells]
        agent = cells[2:]
        assert ids[:2] == ["ctx", "ask"], ids
        assert [(c["role"], c["step"]) for c in agent] == [
            ("thought", 1), ("code", 1), ("thought", 2), ("code", 2), ("thought", 3), ("answer", 3)], agent
        assert agent[1]["output"].split() == ["nb7", "before", "nb7", "after"], agent[1]
        assert "re a" in agent[3]["output"] or "'re a'" in agent[3]["output"], agent[3]
        counts = [c["count"] for c in agent if c["role"] == "code"]
        ask_count = next(c["count"] for c in cells if c["id"] == "ask")
        assert counts == [ask_count + 1, ask_count + 2], (ask_count, counts)
        expect(page.locator(".rlm-agent-cell")).to_have_count(6)
        expect(cell_by_id(page, agent[1]["id"]).locator(".rlm-badge")).to_have_text("RLM")
        expect(cell_by_id(page, "ask").locator(".jp-OutputArea")).to_contain_text("RLM final")
        page.locator(".rlm-answer-cell").scroll_into_view_if_needed()
        screenshot(page, request, "-done")

        save_notebook(page)
        saved = saved_cells_by_id(lab_server.read_notebook(path))
        assert all(c["id"] in saved for c in agent)
        assert saved[agent[3]["id"]]["metadata"]["rlm"]["subcalls"][0]["status"] == "done"
