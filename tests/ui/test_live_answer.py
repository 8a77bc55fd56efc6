"""The answer as written, in real JupyterLab: a multi-line plain answer keeps
its line breaks in the answer cell and also shows in the %%rlm cell's own
output; a run that ends without an answer is not styled as an answer."""

from __future__ import annotations

import pytest
from labdriver import CELLS, open_run_notebook, rlm_magic, screenshot, start_cell, wait_cell_idle
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

VERSES = "Genesis 1:1 In the beginning\nGenesis 1:2 And the earth was without form\nGenesis 1:3 And God said"
ANSWERED = ["```repl\nverses = " + repr(VERSES) + "\n```", "FINAL_VAR(verses)"]
UNANSWERED = ["```repl\nx = 1\n```", "```repl\nx = 2\n```"]


def _run(page: Page, lab_server, name: str, script: list[str], *options: str) -> None:
    server = ScriptedServer(Script(root=script)).start()
    try:
        open_run_notebook(page, lab_server, f"{name}.ipynb", "context = 'verse ' * 1000",
                          f"{rlm_magic(server.url, *options)}\nList the first three verses.")
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=90_000)
    finally:
        server.stop()


def test_a_multi_line_answer_keeps_its_line_breaks(page: Page, lab_server, request) -> None:
    _run(page, lab_server, "answer-lines", ANSWERED)
    answer = page.locator(f"{CELLS}.rlm-answer-cell")
    expect(answer).to_have_count(1, timeout=20_000)
    answer.scroll_into_view_if_needed()
    shown = answer.locator("pre").first.inner_text()
    assert shown.strip().splitlines() == VERSES.splitlines()
    # The %%rlm cell shows the answer too, under its status line.
    ask_output = page.locator(f"{CELLS}:has(.jp-InputArea:has-text('List the first three verses')) .jp-OutputArea")
    expect(ask_output.first).to_contain_text("Genesis 1:3 And God said", timeout=10_000)
    assert "Genesis 1:2" in ask_output.first.locator("pre").last.inner_text()
    screenshot(page, request)


def test_a_run_without_an_answer_does_not_look_like_one(page: Page, lab_server, request) -> None:
    _run(page, lab_server, "answer-ended", UNANSWERED, "--max-iterations 2")
    ended = page.locator(f"{CELLS}.rlm-ended-cell")
    expect(ended).to_have_count(1, timeout=20_000)
    assert page.locator(f"{CELLS}.rlm-answer-cell").count() == 0
    expect(ended.locator(".rlm-badge")).to_contain_text("RLM ended")
    border = ended.evaluate("el => getComputedStyle(el).borderLeftColor")
    assert border != page.evaluate("() => getComputedStyle(document.body).getPropertyValue('--jp-success-color1')")
    screenshot(page, request)
