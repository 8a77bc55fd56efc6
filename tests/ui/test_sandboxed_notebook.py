"""A notebook on "RLM (Python 3, sandboxed)" in a real JupyterLab: a %%rlm run
whose cells run in the confined kernel streams into its inserted cells with a
sub-call widget; the person pins an edited sub-call response and re-runs the
cell (the pin replays, no model call); an ipywidgets slider made in the
confined kernel answers the page's drags; Interrupt stops a confined cell."""

from __future__ import annotations

import time

import pytest
from _helpers import repl, require_bubblewrap
from labdriver import (
    all_cells,
    append_code_cell,
    cell_by_id,
    cell_state,
    click_interrupt,
    code_cell,
    open_notebook,
    output_text,
    rlm_magic,
    run_cell,
    screenshot,
    start_cell,
    wait_cell_executed,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, ScriptedServer, all_text

pytestmark = pytest.mark.usefixtures("fresh_kernels")


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()

STEP = repl("import os, time\nprint('confined pid', os.getpid(), flush=True)\ntime.sleep(0.5)\n"
            "fact = llm_query('What is the capital of France?')\nprint('fact:', fact)",
            prose="I ask a sub-model, from inside the sandbox.")


def _responder(body: dict) -> Reply | str:
    if body.get("model") == "root-model":
        said = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return [STEP, "FINAL_VAR(fact)"][min(said, 1)]
    return "Paris" if "Answer with one city" in all_text(body) else "Lyon"


RUN_MS = 60_000  # for the run (a confined kernel's start, two root steps, one sub-call) on a busy machine
SEEN_S = 15  # for the slider's value to reach the confined kernel

# Records whether an agent code cell was still running when an output with
# `text` was added to it: streamed live. A poll for that state can miss it on a
# loaded page, where one frame may apply the output and the cell's end together.
_WATCH_STREAMED = """(text) => {
  const model = window.jupyterapp.shell.currentWidget.content.model;
  window.__rlmStreamed = false;
  const watch = cell => {
    if (cell.type !== 'code') return;
    cell.outputs.changed.connect(() => {
      if ((cell.getMetadata('rlm') || {}).role === 'code' && cell.executionState === 'running'
          && JSON.stringify(cell.outputs.toJSON()).includes(text)) window.__rlmStreamed = true;
    });
  };
  for (let i = 0; i < model.cells.length; i++) watch(model.cells.get(i));
  model.cells.changed.connect((_, change) => { if (change.type === 'add') change.newValues.forEach(watch); });
}"""


def _printed(page: Page, cell_id: str) -> str:
    return "".join(output_text(o) for o in cell_state(page, cell_id)["outputs"])


def test_a_sandboxed_notebook_end_to_end(page: Page, lab_server, request) -> None:
    with ScriptedServer(_responder) as server:
        path = lab_server.write_notebook("sandboxed.ipynb", [
            code_cell("context = 'Notes about France and its cities.'", "ctx"),
            code_cell(f"{rlm_magic(server.url)}\nWhat is the capital of France?", "ask"),
        ], kernel="rlm-sandboxed")
        open_notebook(page, lab_server, path)
        start_cell(page, "ctx")
        wait_cell_executed(page, "ctx")

        # the run: its code cell streams from the confined kernel, with a sub-call widget
        page.evaluate(_WATCH_STREAMED, "confined pid 2")
        start_cell(page, "ask")
        page.wait_for_function("() => window.__rlmStreamed === true", timeout=RUN_MS)
        wait_cell_idle(page, "ask", timeout=RUN_MS)
        try:
            expect(page.locator(".rlm-answer-cell")).to_have_count(1, timeout=15_000)
        except AssertionError:
            first = [(c["role"], c["status"], c["source"][:80], c["output"][-400:]) for c in all_cells(page)[:6]]
            raise AssertionError(f"the run gave no answer; its first cells: {first}") from None
        code = next(c for c in all_cells(page) if c["role"] == "code")
        assert "confined pid 2" in code["output"] and "fact: Lyon" in code["output"], code
        cell = cell_by_id(page, code["id"])
        widget = cell.locator(".rlm-subcall-widget")
        expect(widget).to_have_count(1, timeout=15_000)
        expect(widget).to_contain_text("Lyon")
        screenshot(page, request, "-run")

        # pin an edited response, re-run the cell: replayed inside, no model call
        widget.locator("button.rlm-sc-edit").click()
        prompt = widget.locator(".rlm-sc-edit-prompt textarea")
        text = widget.locator(".rlm-sc-edit-text textarea")
        expect(text).to_have_value("Lyon", timeout=10_000)
        prompt.fill("What is the capital of France? Answer with one city.")
        widget.locator("button.rlm-sc-ask").click()
        expect(text).to_have_value("Paris", timeout=15_000)
        widget.locator("button.rlm-sc-pin").click()
        expect(cell.locator(".rlm-badge")).to_contain_text("pinned", timeout=10_000)
        calls = len(server.calls("sub-model"))
        before = cell_state(page, code["id"])["count"]
        start_cell(page, code["id"])
        page.wait_for_function(
            """([id, before]) => { const m = window.jupyterapp.shell.currentWidget.content.model;
              for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                if (c.id === id) return c.executionCount !== before && c.executionState !== 'running'; }
              return false; }""", arg=[code["id"], before], timeout=30_000)
        printed = _printed(page, code["id"])
        assert "confined pid 2" in printed and "fact: Paris" in printed, printed
        assert "1 sub-call replayed from the notebook, 0 new" in printed, printed
        assert len(server.calls("sub-model")) == calls
        screenshot(page, request, "-pinned-replayed")

        # a person's slider, made in the confined kernel, answers the page
        append_code_cell(page)
        slider_cell = run_cell(page, "import ipywidgets as w\nseen = []\ns = w.IntSlider(value=3, max=10)\n"
                                     "s.observe(lambda change: seen.append(change['new']), 'value')\ns")
        handle = cell_by_id(page, slider_cell).locator(".noUi-handle, .ui-slider-handle").first
        expect(handle).to_be_visible(timeout=15_000)
        handle.click()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        expect(cell_by_id(page, slider_cell).locator(".widget-readout")).to_have_text("5", timeout=10_000)
        deadline = time.monotonic() + SEEN_S
        while True:
            check = run_cell(page, "print('seen', seen[-1] if seen else None, '| all seen', seen, '| value', s.value)")
            if "seen 5 " in _printed(page, check):
                break
            assert time.monotonic() < deadline, _printed(page, check)  # every value the kernel saw, and its own
        screenshot(page, request, "-slider")

        # Interrupt stops a confined cell
        sleeper = run_cell(page, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", wait=False)
        expect(cell_by_id(page, sleeper).locator(".jp-OutputArea")).to_contain_text("sleeping", timeout=15_000)
        clicked = time.monotonic()
        click_interrupt(page)
        wait_cell_idle(page, sleeper, timeout=15_000)
        assert time.monotonic() - clicked < 5
        expect(cell_by_id(page, sleeper).locator(".jp-OutputArea")).to_contain_text("KeyboardInterrupt")
        screenshot(page, request, "-interrupted")
