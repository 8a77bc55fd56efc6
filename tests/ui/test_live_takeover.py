"""Taking over a run in JupyterLab: a person rewrites a sub-call's prompt in
its widget, asks the sub-model again and pins the answer, re-runs the agent
cells (the pin replays, no model call, the status bar counts it, and the new
value flows into later output), then uses "RLM: Continue from here" and the
scripted root model is asked again with the edited state. A `%rlm continue
--from` typed at the end puts the new steps right after the chosen cell, the
old ones below them, and running it again asks no model."""

from __future__ import annotations

import re
from typing import Any

import pytest
from _helpers import repl
from labdriver import (
    all_cells,
    append_code_cell,
    cell_by_id,
    cell_state,
    open_run_notebook,
    output_text,
    rlm_magic,
    run_cell,
    save_notebook,
    saved_cells_by_id,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import ScriptedServer, all_text

pytestmark = pytest.mark.usefixtures("fresh_kernels")

AGENT_ROLES = ("thought", "code", "answer")
STEP_1 = repl("fact = llm_query('What is the capital of France?')\nprint('fact:', fact)",
              prose="I ask a sub-model for the capital.")
STEP_2 = repl("print('LATER', fact.upper())")
FINAL = "The sub-model answered.\nFINAL_VAR(fact)"
AFTER_CONTINUE = repl("print('CONTINUED WITH', fact)")
FINAL_AFTER = "Done.\nFINAL_VAR(fact)"


class RootModel:
    """The scripted root model: three steps, then (after "continue") two
    more; it keeps every conversation it was sent."""

    def __init__(self, after_continue: str = AFTER_CONTINUE) -> None:
        self.script = [STEP_1, STEP_2, FINAL, after_continue, FINAL_AFTER]
        self.seen: list[str] = []

    def __call__(self, body: dict[str, Any]) -> str:
        if body.get("model") != "root-model":
            # the sub-model gets the capital wrong, unless asked more precisely
            return "Paris" if "Answer with one city" in all_text(body) else "Lyon"
        self.seen.append(all_text(body))
        return self.script.pop(0) if self.script else "FINAL(out of script)"


def _agent(page: Page) -> list[dict]:
    return [c for c in all_cells(page) if c["role"] in AGENT_ROLES]


def _printed(page: Page, cell_id: str) -> str:
    return "".join(output_text(o) for o in cell_state(page, cell_id)["outputs"])


def _has(name: str) -> re.Pattern[str]:
    """Matches a class attribute that has the class `name`."""
    return re.compile(rf"(^|\s){re.escape(name)}(\s|$)")


def _rerun(page: Page, cell_id: str, keyboard: bool, shows: str | None = None) -> None:
    """Run an existing cell again, as a person does: click its prompt to select
    it and press Shift+Enter, or the 'Run Selected Cell' command; then wait
    for its new execute reply and, if given, until its outputs show ``shows``
    (outputs come on iopub, the reply on the shell channel: either may come first)."""
    before = cell_state(page, cell_id)["count"]
    if keyboard:
        # the "[n]:" prompt at the top (the RLM badge sits below it)
        cell_by_id(page, cell_id).locator(".jp-InputPrompt").first.click(position={"x": 30, "y": 8})
        page.keyboard.press("Escape")
        page.keyboard.press("Shift+Enter")
    else:
        start_cell(page, cell_id)
    page.wait_for_function(
        """([id, before]) => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          for (let i = 0; i < model.cells.length; i++) {
            const c = model.cells.get(i);
            if (c.id === id) return c.executionCount !== null && c.executionCount !== before
              && c.executionState !== 'running';
          }
          return false;
        }""",
        arg=[cell_id, before],
        timeout=30_000,
    )
    if shows is not None:
        try:
            page.wait_for_function(
                """([id, text]) => { const m = window.jupyterapp.shell.currentWidget.content.model;
                   for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                     if (c.id === id) return JSON.stringify(c.outputs.toJSON()).includes(text); }
                   return false; }""", arg=[cell_id, shows], timeout=15_000)
        except PlaywrightError:
            raise AssertionError(f"the cell does not show {shows!r}: {_printed(page, cell_id)!r}") from None


def _run_question(page: Page, lab_server, server: ScriptedServer, name: str) -> None:
    """A notebook with a context cell and the %%rlm cell, both run."""
    open_run_notebook(page, lab_server, name, "context = 'Notes about France and its cities.'",
                      f"{rlm_magic(server.url)}\nWhat is the capital of France?")
    start_cell(page, "ask")
    wait_cell_idle(page, "ask", timeout=60_000)
    expect(page.locator(".rlm-answer-cell")).to_have_count(1, timeout=15_000)


def test_pin_a_response_rerun_and_continue_from_here(page: Page, lab_server, request) -> None:
    root = RootModel()
    with ScriptedServer(root) as server:
        _run_question(page, lab_server, server, "takeover-pin-continue.ipynb")
        agent = _agent(page)
        codes = [c for c in agent if c["role"] == "code"]
        assert len(codes) == 2, agent
        first, second = codes[0]["id"], codes[1]["id"]
        assert "fact: Lyon" in codes[0]["output"] and "LATER LYON" in codes[1]["output"], codes
        assert len(server.calls("sub-model")) == 1 and len(root.seen) == 3

        # Rewrite the prompt in the sub-call widget of the step-1 cell, ask the
        # sub-model again, and pin its answer.
        cell = cell_by_id(page, first)
        widget = cell.locator(".rlm-subcall-widget")
        expect(widget).to_have_count(1, timeout=15_000)
        expect(widget).to_contain_text("Lyon")
        widget.locator("button.rlm-sc-edit").click()
        text = widget.locator(".rlm-sc-edit-text textarea")
        prompt = widget.locator(".rlm-sc-edit-prompt textarea")
        expect(text).to_have_value("Lyon", timeout=10_000)
        expect(prompt).to_have_value("What is the capital of France?")
        edited_prompt = "What is the capital of France? Answer with one city."
        prompt.fill(edited_prompt)
        widget.locator("button.rlm-sc-ask").click()
        expect(text).to_have_value("Paris", timeout=15_000)
        expect(widget.locator(".rlm-sc-answered")).to_be_visible()
        assert len(server.calls("sub-model")) == 2
        text.scroll_into_view_if_needed()
        screenshot(page, request, "-editor")
        widget.locator("button.rlm-sc-pin").click()
        expect(widget.locator(".rlm-sc-pinned-note")).to_contain_text("with your prompt", timeout=10_000)
        page.wait_for_function(
            """(id) => {
              const model = window.jupyterapp.shell.currentWidget.content.model;
              for (let i = 0; i < model.cells.length; i++) {
                const c = model.cells.get(i);
                if (c.id !== id) continue;
                const calls = (c.getMetadata('rlm') || {}).subcalls || [];
                return calls.length === 1 && calls[0].pinned === true && calls[0].response === 'Paris'
                  && calls[0].edited_prompt === 'What is the capital of France? Answer with one city.';
              }
              return false;
            }""",
            arg=first,
            timeout=10_000,
        )
        expect(cell).to_have_class(_has("rlm-pinned-cell"))
        expect(cell.locator(".rlm-badge")).to_contain_text("pinned")
        expect(widget.locator(".rlm-sc-flag.rlm-sc-pinned")).to_be_visible()
        expect(widget.locator(".rlm-sc-flag.rlm-sc-prompt-edited")).to_be_visible()
        cell.scroll_into_view_if_needed()
        screenshot(page, request, "-pinned")

        # Re-run the step-1 cell: the pin is returned, no model is called; the
        # status bar counts the replayed sub-call.
        replay_item = page.locator("#jp-main-statusbar .rlm-replay-status")
        expect(replay_item).to_be_hidden()
        _rerun(page, first, keyboard=True, shows="sub-call replayed")
        printed = _printed(page, first)
        assert "fact: Paris" in printed and "Lyon" not in printed, printed
        assert "1 sub-call replayed from the notebook, 0 new" in printed, printed
        assert len(server.calls("sub-model")) == 2, "re-running the pinned cell called the sub-model"
        [record] = cell_state(page, first)["metadata"]["subcalls"]
        assert record["pinned"] is True and record["edited_prompt"] == edited_prompt, record
        expect(cell_by_id(page, first).locator(".rlm-badge")).to_contain_text("pinned")
        expect(replay_item).to_have_text("RLM replay: 1 sub-call replayed · 0 new", timeout=10_000)
        rerun_widget = cell_by_id(page, first).locator(".rlm-subcall-widget")
        expect(rerun_widget.locator(".rlm-sc-prompt")).to_contain_text("Answer with one city.")
        screenshot(page, request, "-rerun")

        # The new value flows into the later cell.
        _rerun(page, second, keyboard=False, shows="LATER PARIS")
        later = next(c for c in all_cells(page) if c["id"] == second)
        assert "LATER PARIS" in later["output"] and "LYON" not in later["output"], later

        # "Continue from here" on the step-2 cell, from the cell toolbar's button.
        old_answer = next(c["id"] for c in _agent(page) if c["role"] == "answer")
        old_after = [c["id"] for c in _agent(page)
                     if c["index"] > cell_state(page, second)["index"]]
        second_cell = cell_by_id(page, second)
        second_cell.locator(".jp-InputPrompt").first.click(position={"x": 30, "y": 8})
        button = second_cell.locator(".jp-cell-toolbar [data-command='rlm:continue-from-here']")
        expect(button).to_be_visible(timeout=10_000)
        button.click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_be_visible(timeout=10_000)
        expect(dialog).to_contain_text(f"{len(old_after)} cell")
        screenshot(page, request, "-dialog")
        dialog.locator("button", has_text="Keep").click()
        expect(dialog).to_have_count(0)

        # A `%rlm continue` cell right below the step-2 cell runs the continuation.
        page.wait_for_function(
            """(id) => {
              const model = window.jupyterapp.shell.currentWidget.content.model;
              for (let i = 0; i + 1 < model.cells.length; i++) {
                if (model.cells.get(i).id === id) {
                  return model.cells.get(i + 1).sharedModel.getSource().startsWith('%rlm continue');
                }
              }
              return false;
            }""",
            arg=second,
            timeout=10_000,
        )
        cont = all_cells(page)[cell_state(page, second)["index"] + 1]
        assert cont["source"] == f"%rlm continue --from {second} --old keep", cont
        wait_cell_idle(page, cont["id"], timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_have_count(2, timeout=15_000)

        # The root model got the edited state: the pinned answer and its effect.
        assert len(root.seen) == 5, len(root.seen)
        history = root.seen[3]
        assert "fact: Paris" in history and "LATER PARIS" in history, history
        assert "Lyon" not in history and "LYON" not in history, history
        assert "pinned" in history and "rewrote the prompt" in history, history
        assert len(server.calls("sub-model")) == 2

        # New agent cells come right below the continue cell, before the old ones.
        cells = all_cells(page)
        ids = [c["id"] for c in cells]
        start = ids.index(cont["id"])
        new = [c for c in cells[start + 1:] if c["role"] in AGENT_ROLES and c["id"] not in old_after]
        assert [c["role"] for c in new][-1] == "answer", new
        assert any("CONTINUED WITH Paris" in c["output"] for c in new), new
        assert max(ids.index(c["id"]) for c in new) < min(ids.index(i) for i in old_after), (new, old_after)
        assert "Paris" in cell_by_id(page, new[-1]["id"]).inner_text()
        said = _printed(page, cont["id"])
        assert "Continuing run" in said and "1 pinned sub-call response;" in said, said
        assert f"{len(old_after)} old cells kept, marked superseded" in said, said

        # The old continuation is kept, marked superseded.
        for cell_id in old_after:
            old = cell_by_id(page, cell_id)
            expect(old).to_have_class(_has("rlm-superseded-cell"))
            assert cell_state(page, cell_id)["metadata"].get("superseded") is True
        expect(cell_by_id(page, old_answer).locator(".rlm-badge")).to_contain_text("superseded")
        for cell in new:
            expect(cell_by_id(page, cell["id"])).not_to_have_class(_has("rlm-superseded-cell"))
        cell_by_id(page, new[-1]["id"]).scroll_into_view_if_needed()
        screenshot(page, request, "-final")

        # The pin and the superseded marks are saved with the notebook.
        save_notebook(page)
        saved = saved_cells_by_id(lab_server.read_notebook("takeover-pin-continue.ipynb"))
        [record] = saved[first]["metadata"]["rlm"]["subcalls"]
        assert record["pinned"] is True and record["response"] == "Paris", record
        assert record["edited_prompt"] == edited_prompt, record
        assert all(saved[i]["metadata"]["rlm"].get("superseded") is True for i in old_after)
        assert not any(saved[c["id"]]["metadata"]["rlm"].get("superseded") for c in new)

        old = cell_by_id(page, old_answer)
        old.scroll_into_view_if_needed()
        expect(old.locator(".rlm-badge")).to_be_visible()
        expect(old).to_contain_text("Lyon")
        screenshot(page, request, "-superseded")


def test_continue_from_the_context_menu_removes_the_old_continuation(
        page: Page, lab_server, request) -> None:
    """The same command from the palette's list and the cell's context menu;
    Cancel changes nothing, Remove deletes the old steps."""
    root = RootModel(after_continue=repl("print('AGAIN', fact)"))
    with ScriptedServer(root) as server:
        _run_question(page, lab_server, server, "takeover-context-menu.ipynb")
        agent = _agent(page)
        first = next(c for c in agent if c["role"] == "code")
        old_after = [c["id"] for c in agent if c["index"] > first["index"]]
        # step 2's code, the final thought, the answer
        assert len(old_after) == 3, [c["source"][:60] for c in all_cells(page)]

        # On the %%rlm cell itself the whole run would be the old continuation;
        # Cancel leaves the notebook as it was.
        before = [c["id"] for c in all_cells(page)]
        page.evaluate(
            """(index) => {
              const notebook = window.jupyterapp.shell.currentWidget.content;
              notebook.activeCellIndex = index;
              notebook.mode = 'command';
              void window.jupyterapp.commands.execute('rlm:continue-from-here');
            }""",
            before.index("ask"),
        )
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text(f"{len(agent)} cells", timeout=10_000)
        dialog.locator("button", has_text="Cancel").click()
        expect(dialog).to_have_count(0)
        assert [c["id"] for c in all_cells(page)] == before

        # The command is in the palette too.
        page.keyboard.press("Control+Shift+C")
        palette = page.locator("#command-palette")
        palette.locator("input").fill("Continue from here")
        expect(palette.locator(".lm-CommandPalette-item", has_text="RLM: Continue from here")).to_be_visible()
        page.keyboard.press("Escape")

        # Right-click the step-1 cell, choose the command, remove the old steps.
        cell_by_id(page, first["id"]).locator(".jp-InputPrompt").first.click(
            button="right", position={"x": 30, "y": 8})
        item = page.locator(".lm-Menu .lm-Menu-item", has_text="RLM: Continue from here")
        expect(item).to_be_visible(timeout=10_000)
        item.click()
        expect(dialog).to_contain_text("3 cells", timeout=10_000)
        dialog.locator("button", has_text="Remove").click()

        page.wait_for_function(
            """(ids) => {
              const model = window.jupyterapp.shell.currentWidget.content.model;
              const now = Array.from({length: model.cells.length}, (_, i) => model.cells.get(i).id);
              return ids.every(id => !now.includes(id));
            }""",
            arg=old_after,
            timeout=15_000,
        )
        cont = all_cells(page)[first["index"] + 1]
        assert cont["source"] == f"%rlm continue --from {first['id']} --old remove", cont
        wait_cell_idle(page, cont["id"], timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_have_count(1, timeout=15_000)
        assert len(root.seen) == 5, len(root.seen)
        history = root.seen[3]
        assert "fact: Lyon" in history and "LATER" not in history, history
        cells = all_cells(page)
        roles = [c["role"] for c in cells[first["index"] + 2:]]
        assert roles == ["code", "thought", "answer"], cells
        assert "AGAIN Lyon" in cells[first["index"] + 2]["output"]
        assert page.locator(".rlm-superseded-cell").count() == 0
        cell_by_id(page, cells[-1]["id"]).scroll_into_view_if_needed()
        screenshot(page, request, "-removed")


def test_continue_typed_at_the_end_puts_new_steps_after_the_chosen_cell(
        page: Page, lab_server, request) -> None:
    """`%rlm continue --from <step-1 cell>` typed in a new cell at the end:
    the notebook then reads step 1, the continue cell, the new steps, the old
    continuation (kept, superseded); running the continue cell again asks no
    model (its continuation is below), nor does running the %%rlm cell again."""
    root = RootModel(after_continue=repl("print('TYPED', fact)"))
    with ScriptedServer(root) as server:
        _run_question(page, lab_server, server, "takeover-typed-continue.ipynb")
        agent = _agent(page)
        first = next(c for c in agent if c["role"] == "code")
        old_after = [c["id"] for c in agent if c["index"] > first["index"]]
        append_code_cell(page)
        cont = run_cell(page, f"%rlm continue --from {first['id']}", wait=False)
        wait_cell_idle(page, cont, timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_have_count(2, timeout=15_000)
        assert len(root.seen) == 5, len(root.seen)

        ids = [c["id"] for c in all_cells(page)]
        at = ids.index(first["id"])
        assert ids[at + 1] == cont, ids
        new = ids[at + 2:ids.index(old_after[0])]
        roles = [c["role"] for c in all_cells(page) if c["id"] in new]
        assert roles[-1] == "answer" and "code" in roles, roles
        old_at = at + 2 + len(new)
        assert ids[old_at:old_at + len(old_after)] == old_after, (ids, old_after)
        assert all(cell_state(page, i)["metadata"].get("superseded") is True for i in old_after)
        assert any("TYPED Lyon" in c["output"] for c in all_cells(page) if c["id"] in new)
        said = _printed(page, cont)
        assert f"{len(old_after)} cells moved below the new steps" in said, said
        cell_by_id(page, cont).scroll_into_view_if_needed()
        screenshot(page, request, "-moved")

        # Running the continue cell, then the %%rlm cell, again asks no model.
        _rerun(page, cont, keyboard=False, shows="already in the notebook below")
        _rerun(page, "ask", keyboard=False, shows="already in the notebook below")
        assert len(root.seen) == 5, "running the cells again asked the root model"
        assert [c["id"] for c in all_cells(page)] == ids
