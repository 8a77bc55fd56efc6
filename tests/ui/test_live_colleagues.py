"""Two people on one notebook with real-time collaboration: two browsers
(two browser contexts, each its own user), one shared document that the
Jupyter server writes the run into. The colleague sees the run live, types
in a cell of their own meanwhile (never overwritten), and takes over from
their page: Interrupt, "Edit response" and pin, "Continue from here"; each
acts once, in both pages and in the saved file."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from _viewers import (
    CONTEXT_CELL,
    agent_cells,
    check_run,
    describe,
    script,
    wait_for_run,
    wait_output,
    wait_saved_run,
)
from labdriver import (
    cell_by_id,
    cell_state,
    click_interrupt,
    code_cell,
    open_notebook,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    status_bar_text,
    wait_cell_idle,
)
from playwright.sync_api import Browser, Locator, Page, expect
from playwright.sync_api import Error as PlaywrightError

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

TYPED = "colleague_note = 'written while the run goes'  # by hand"


@pytest.fixture
def colleague(browser: Browser, browser_context_args: dict) -> Iterator[Page]:
    """A second person: a browser context of their own (their own JupyterLab identity)."""
    context = browser.new_context(**browser_context_args)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


def test_a_colleague_watches_the_run_and_types_beside_it(page: Page, colleague: Page, lab_server, request) -> None:
    with ScriptedServer(script()) as server:
        path = open_run_notebook(page, lab_server, "colleagues-watch.ipynb", CONTEXT_CELL,
                                 f"{rlm_magic(server.url)}\nWhere does each wind blow?",
                                 code_cell("", "below"))
        open_notebook(colleague, lab_server, path)
        start_cell(page, "ask")
        # The colleague sees the run live, its outputs as they come.
        wait_output(colleague, "step one output")
        screenshot(colleague, request, "-colleague-live")
        # ... and types in a cell of their own while the run inserts cells above it.
        editor = cell_by_id(colleague, "below").locator(".cm-content")
        editor.click()
        colleague.keyboard.type(TYPED, delay=15)
        # Every key landed where it was typed: the run's cells, inserted above meanwhile,
        # neither took the focus nor scrolled the cell away.
        assert _source(colleague, "below") == TYPED, f"the colleague's own page reads {_source(colleague, 'below')!r}"
        wait_output(colleague, "slept again 6000")
        for where, tab in (("the colleague's page", colleague), ("the page that ran it", page)):
            cells = wait_for_run(tab)
            check_run(cells, where)
            try:  # the typing reaches the other page through the server's shared document
                tab.wait_for_function(f"(t) => ({SOURCE_JS})('below') === t", arg=TYPED, timeout=15_000)
            except PlaywrightError:
                raise AssertionError(f"{where}: the typed cell reads {_source(tab, 'below')!r}") from None
        screenshot(page, request, "-runner-done")
        screenshot(colleague, request, "-colleague-done")
        saved = wait_saved_run(lab_server, path)
    assert next(c for c in saved["cells"] if c["id"] == "below")["source"] in (TYPED, [TYPED])


BATCH_STEP = ("A batch.\n```repl\nnotes = llm_query_batched(['north', 'south', 'east'])\n"
              "print('notes:', notes)\n```")
SLEEP_STEP = "A long wait.\n```repl\nimport time\nprint('going to sleep', flush=True)\ntime.sleep(60)\n```"
AFTER = "Going on.\n```repl\nprint('continued with', notes[0])\n```"


def _batch_cell(page: Page) -> str:
    return next(c["id"] for c in agent_cells(page) if c["role"] == "code" and c["step"] == 1)


def test_a_colleague_interrupts_pins_and_continues(page: Page, colleague: Page, lab_server, request) -> None:
    root = [BATCH_STEP, SLEEP_STEP, AFTER, "FINAL(continued)"]  # the last two: after "Continue from here"
    with ScriptedServer(Script(root=root, sub=lambda p: Reply(text=f"note on {p}", delay=0.3))) as server:
        path = open_run_notebook(page, lab_server, "colleagues-take-over.ipynb", CONTEXT_CELL,
                                 f"{rlm_magic(server.url)}\nWhere does each wind blow?")
        open_notebook(colleague, lab_server, path)
        start_cell(page, "ask")
        wait_output(colleague, "going to sleep")

        # Interrupt from the colleague's page: the run stops once, in both pages.
        click_interrupt(colleague)
        for tab in (page, colleague):
            wait_cell_idle(tab, "ask", timeout=30_000)
        sleeper = next(c for c in agent_cells(page) if c["role"] == "code" and c["step"] == 2)
        for tab in (page, colleague):
            state = cell_state(tab, sleeper["id"])
            errors = [o for o in state["outputs"] if o["output_type"] == "error"]
            assert len(errors) <= 1 and state["state"] != "running", state
            assert state["metadata"]["status"] == "interrupted", state["metadata"]
            ask = cell_state(tab, "ask")
            text = "".join(str(o.get("data", {}).get("text/plain", "")) for o in ask["outputs"])
            assert text.count("RLM interrupted") == 1, text
        assert len(server.calls("root-model")) == 2
        screenshot(colleague, request, "-interrupted")

        # "Edit response" and pin, from the colleague's page: the record is pinned once.
        batch = _batch_cell(colleague)
        widget = cell_by_id(colleague, batch).locator(".rlm-subcall-widget")
        widget.scroll_into_view_if_needed()
        widget.locator(".rlm-sc-row-edit").first.click()
        text = widget.locator(".rlm-sc-edit-text textarea")
        expect(text).to_have_value("note on north", timeout=15_000)
        text.fill("pinned by a colleague")
        widget.locator("button.rlm-sc-pin").click()
        for tab in (page, colleague):
            tab.wait_for_function(
                """(id) => { const m = window.jupyterapp.shell.currentWidget.content.model;
                   for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                     if (c.id !== id) continue;
                     const calls = (c.getMetadata('rlm') || {}).subcalls || [];
                     return calls.length === 3 && calls.filter(r => r.pinned).length === 1
                       && calls[0].pinned === true && calls[0].response === 'pinned by a colleague'; }
                   return false; }""", arg=batch, timeout=15_000)
        screenshot(colleague, request, "-pinned")

        # "Continue from here" on the interrupted cell, from the colleague's page.
        target = cell_by_id(colleague, sleeper["id"])
        target.locator(".jp-InputPrompt").first.click(position={"x": 30, "y": 8})
        colleague.evaluate("() => { void window.jupyterapp.commands.execute('rlm:continue-from-here'); }")
        dialog = colleague.locator(".jp-Dialog")
        colleague.wait_for_function(
            """() => !!document.querySelector('.jp-Dialog') || Array.from(
               {length: window.jupyterapp.shell.currentWidget.content.model.cells.length},
               (_, i) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).sharedModel.getSource())
               .some(s => s.startsWith('%rlm continue'))""", timeout=15_000)
        if dialog.count():  # cells of the run after the interrupted one (its note): keep them
            screenshot(colleague, request, "-continue-dialog")
            dialog.locator("button", has_text="Keep").click()
        colleague.wait_for_function(
            """() => { const m = window.jupyterapp.shell.currentWidget.content.model;
               for (let i = 0; i < m.cells.length; i++) {
                 if (m.cells.get(i).sharedModel.getSource().startsWith('%rlm continue')) return true; }
               return false; }""", timeout=15_000)
        for tab in (page, colleague):
            expect(tab.locator(".rlm-answer-cell")).to_have_count(1, timeout=60_000)
            wait_output(tab, "continued with note on north")
        for where, tab in (("the page that ran it", page), ("the colleague's page", colleague)):
            cells = [c for c in agent_cells(tab)]
            ids = [c["id"] for c in cells]
            assert len(ids) == len(set(ids)), f"{where}:\n{describe(cells)}"
            continues = [c for c in cell_states(tab) if c.startswith("%rlm continue")]
            assert len(continues) == 1, continues
            assert sum("continued with note on north" in c["output"] for c in cells) == 1, describe(cells)
        screenshot(page, request, "-runner-continued")
        screenshot(colleague, request, "-colleague-continued")
        saved = wait_saved_run(lab_server, path, done=lambda nb: "continued with note on north" in json.dumps(nb))
    saved_ids = [c["id"] for c in saved["cells"]]
    assert len(saved_ids) == len(set(saved_ids)), saved_ids
    [batch_saved] = [c for c in saved["cells"] if c["id"] == batch]
    records = batch_saved["metadata"]["rlm"]["subcalls"]
    assert [r.get("pinned", False) for r in records] == [True, False, False], records


SOURCE_JS = """(id) => { const m = window.jupyterapp.shell.currentWidget.content.model;
  for (let i = 0; i < m.cells.length; i++) { if (m.cells.get(i).id === id) return m.cells.get(i).sharedModel.getSource(); }
  return null; }"""


def _source(page: Page, cell_id: str) -> str | None:
    return page.evaluate(f"({SOURCE_JS})({json.dumps(cell_id)})")


def cell_states(page: Page) -> list[str]:
    """The source of every cell of the notebook in ``page``."""
    return page.evaluate("""() => { const m = window.jupyterapp.shell.currentWidget.content.model;
                                    return Array.from({length: m.cells.length},
                                                      (_, i) => m.cells.get(i).sharedModel.getSource()); }""")


APPROVED = "First.\n```repl\nprint('approved by the colleague')\n```"
SKIPPED = "Second.\n```repl\nprint('this never runs')\n```"


def _question(tab: Page, step: int, timeout: float = 60) -> Locator:
    """The approval question of step ``step`` in the %%rlm cell of ``tab``,
    once it is shown. A windowed notebook renders only the cells in view and
    the page follows the run's new cells: the %%rlm cell is brought back into
    view while waiting."""
    question = cell_by_id(tab, "ask").locator(".rlm-approval").filter(has_text=f"Step {step}:")
    deadline = time.monotonic() + timeout
    while question.count() != 1:
        if time.monotonic() > deadline:
            raise AssertionError(f"no question for step {step} in the %%rlm cell within {timeout:g} s: "
                                 f"{cell_state(tab, 'ask')}; status bar {status_bar_text(tab)!r}")
        cell_by_id(tab, "ask").scroll_into_view_if_needed()
        tab.wait_for_timeout(300)
    return question


def _answer_approval(tab: Page, step: int, button: str) -> None:
    """Click ``button`` of step ``step``'s approval question; it gives way to
    what was decided (the next step's question may come at once)."""
    question = _question(tab, step, timeout=30)
    question.get_by_role("button", name=button, exact=True).click()
    expect(question).to_have_count(0, timeout=15_000)


def test_either_person_approves_a_step(page: Page, colleague: Page, lab_server, request) -> None:
    """``--approve`` in a shared notebook: the question is a row of buttons in
    the %%rlm cell, on every page; the colleague runs the first step, the
    person who started the run skips the second; each answer acts once."""
    with ScriptedServer(Script(root=[APPROVED, SKIPPED, "FINAL(approved steps done)"])) as server:
        path = open_run_notebook(page, lab_server, "colleagues-approve.ipynb", CONTEXT_CELL,
                                 f"{rlm_magic(server.url, '--approve')}\nAsk before each step.")
        open_notebook(colleague, lab_server, path)
        start_cell(page, "ask")
        _question(page, 1)
        for tab in (page, colleague):  # the status says what the run waits for
            expect(tab.locator("#jp-main-statusbar .rlm-status")).to_contain_text("waiting for approval",
                                                                                  timeout=15_000)
        screenshot(colleague, request, "-question")
        _answer_approval(colleague, 1, "Run")
        wait_output(page, "approved by the colleague")
        _answer_approval(page, 2, "Skip")
        for tab in (page, colleague):
            wait_cell_idle(tab, "ask", timeout=60_000)
            expect(tab.locator(".rlm-answer-cell")).to_contain_text("approved steps done", timeout=15_000)
        for where, tab in (("the page that ran it", page), ("the colleague's page", colleague)):
            codes = [c for c in agent_cells(tab) if c["role"] == "code"]
            assert [(c["step"], c["status"]) for c in codes] == [(1, "ok"), (2, "skipped")], f"{where}:\n{describe(codes)}"
            assert codes[0]["output"].count("approved by the colleague") == 1, f"{where}:\n{describe(codes)}"
            assert "this never runs" not in codes[1]["output"], f"{where}:\n{describe(codes)}"
            said = "".join(str(o.get("data", {}).get("text/plain", "")) for o in cell_state(tab, "ask")["outputs"])
            assert said.count("Step 1's code: ran as written.") == 1 and said.count("Step 2's code: skipped.") == 1, said
        screenshot(page, request, "-answered")
