"""Follow-up questions in the live notebook: a second ``%%rlm`` cell builds
on the first run, its cells (and its ``%%rlm`` cell) say which run they
follow, and the runs panel shows the chain under the run's row ("follow-up
of run X", a click goes to run X)."""

from __future__ import annotations

from typing import Any

import pytest
from labdriver import (
    code_cell,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

PANEL = "#rlm-runs-panel"


def root(body: dict[str, Any]) -> str:
    """The first run finds the late orders; the follow-up, told about them, reuses its variable."""
    messages = body.get("messages", [])
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if body.get("model") != "root-model":
        return "sub"
    if "Query: Which of them came first?" in first_user:
        if "Query: Which orders are late?\nAnswer (the value of `late`): ['A-17', 'C-7']" not in first_user:
            return "FINAL(the follow-up was not told about the earlier run)"
        return ["Reuse the earlier list.\n```repl\nfirst = late[0]\nprint(first)\n```", "FINAL_VAR(first)"][min(turn, 1)]
    return ["Find them.\n```repl\nlate = ['A-17', 'C-7']\nprint(late)\n```", "FINAL_VAR(late)"][min(turn, 1)]


def notebook_rlm(page: Page) -> list[dict]:
    return page.evaluate(
        """() => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          return Array.from({length: model.cells.length}, (_, i) => {
            const c = model.cells.get(i);
            return {id: c.id, rlm: c.getMetadata('rlm') || null};
          });
        }"""
    )


def test_the_runs_panel_shows_a_follow_up_chain(page: Page, lab_server, request, console) -> None:
    with ScriptedServer(root) as server:
        line = rlm_magic(server.url, sub_model=False)
        open_run_notebook(page, lab_server, "follow-up.ipynb", "context = 'orders A-17, B-2, C-7'",
                          f"{line}\nWhich orders are late?",
                          code_cell(f"{line}\nWhich of them came first?", "follow"))
        page.evaluate("() => window.jupyterapp.commands.execute('rlm-kernel:show-runs-panel')")
        expect(page.locator(PANEL)).to_be_visible()
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=60_000)
        start_cell(page, "follow")
        wait_cell_idle(page, "follow", timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_have_count(2)
        expect(page.locator(".rlm-answer-cell").last).to_contain_text("(the value of first, 4 characters)")

    cells = notebook_rlm(page)
    runs: list[str] = []
    for cell in cells:
        run_id = (cell["rlm"] or {}).get("run_id")
        if run_id and run_id not in runs:
            runs.append(run_id)
    assert len(runs) == 2, cells
    first, second = runs
    # the follow-up's %%rlm cell and every cell of its run say which run it follows
    by_id = {c["id"]: c for c in cells}
    assert by_id["follow"]["rlm"] == {"follows": first}
    assert not (by_id["ask"]["rlm"] or {}).get("follows")
    assert all(c["rlm"].get("follows") == first for c in cells if (c["rlm"] or {}).get("run_id") == second)
    assert not any((c["rlm"] or {}).get("follows") for c in cells if (c["rlm"] or {}).get("run_id") == first)

    # the panel: the second run's row says it is a follow-up of the first; a click goes there
    follows = page.locator(f"{PANEL} .rlm-tree-item[data-key='r:{second}'] > .rlm-row .rlm-run-follows")
    expect(follows).to_have_text(f"follow-up of run {first}")
    expect(page.locator(f"{PANEL} .rlm-tree-item[data-key='r:{first}'] > .rlm-row .rlm-run-follows")).to_have_count(0)
    assert "Which orders are late?" in (follows.get_attribute("title") or "")
    screenshot(page, request, "-chain")
    follows.click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.activeCell.model.id === 'ask'")
    expect(page.locator(f"{PANEL} .rlm-tree-item[data-key='r:{first}'] > .rlm-row")).to_have_class(
        "rlm-row rlm-selected")
    screenshot(page, request, "-clicked")
    assert not [line for line in console if line.startswith("pageerror")], console
