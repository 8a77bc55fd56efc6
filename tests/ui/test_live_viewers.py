"""Runs that survive their viewers (DESIGN principle 10): several tabs on
one notebook, a reload in the middle of a run, every tab closed until the
run is over; with real-time collaboration (one shared document, which the
server writes) and without it (each page its own copy). Whatever the pages
do, every cell, output and count of the run is there exactly once, in every
view and in the saved file."""

from __future__ import annotations

import pytest
from _viewers import (
    CONTEXT_CELL,
    agent_cells,
    ask_state,
    check_run,
    check_saved,
    describe,
    run_status,
    script,
    wait_for_run,
    wait_kernel_idle,
    wait_output,
    wait_saved_run,
)
from labdriver import (
    cell_state,
    code_cell,
    open_in_notebook7,
    open_notebook,
    open_run_notebook,
    rlm_magic,
    save_notebook,
    screenshot,
    start_cell,
    wait_notebook_attached,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")


def _notebook(page: Page, lab, name: str, url: str) -> str:
    return open_run_notebook(page, lab, name, CONTEXT_CELL, f"{rlm_magic(url)}\nWhere does each wind blow?",
                             code_cell("# a person's cell below the run", "below"))


def _yjs_errors(lines: list[str]) -> list[str]:
    return [line for line in lines if "Yjs update" in line or "pageerror" in line]


def _watch(page: Page) -> list[str]:
    lines: list[str] = []
    page.on("console", lambda message: lines.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: lines.append(f"pageerror: {error}"))
    return lines


def _widget_live(page: Page) -> None:
    """The batch's sub-call widget is drawn from the kernel's live model (not a saved view)."""
    widget = page.locator(".jp-NotebookPanel:visible .rlm-subcall-widget").first
    widget.scroll_into_view_if_needed()
    expect(widget).to_contain_text("3 of 3 done", timeout=20_000)
    note = widget.evaluate("el => getComputedStyle(el.closest('.rlm-subcall-widget'), '::after').content")
    assert "Saved view" not in note, note


def test_two_tabs_with_collaboration(page: Page, lab_server, request) -> None:
    """Two tabs on one notebook, collaboration on: one shared document, the run written once."""
    first_log = _watch(page)
    with ScriptedServer(script()) as server:
        path = _notebook(page, lab_server, "viewers-two-tabs.ipynb", server.url)
        second = page.context.new_page()
        second_log = _watch(second)
        open_notebook(second, lab_server, path)
        start_cell(page, "ask")
        wait_output(second, "slept 2000")
        screenshot(page, request, "-first-mid-run")
        screenshot(second, request, "-second-mid-run")
        for where, tab in (("first tab", page), ("second tab", second)):
            cells = wait_for_run(tab)
            check_run(cells, where)
            expect(tab.locator("#jp-main-statusbar .rlm-status")).to_contain_text("ended: final", timeout=10_000)
        screenshot(page, request, "-first-done")
        screenshot(second, request, "-second-done")
        saved = wait_saved_run(lab_server, path)
    check_saved(saved, "the saved file")
    log = lab_server.log_path.read_text()
    assert "Non-unique cell ID" not in log, "the server found the same cell twice"
    assert not _yjs_errors(first_log) and not _yjs_errors(second_log), _yjs_errors(first_log + second_log)


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_reload_mid_run_with_collaboration(page: Page, lab_server, request, frontend: str) -> None:
    """Reload while a step's cell runs: the %%rlm cell ends with its count and
    final status, the running cell keeps its output and count, the status bar
    (JupyterLab; Notebook 7 has none) and the sub-call widget come back live."""
    page.on("dialog", lambda dialog: dialog.accept())
    opener = open_in_notebook7 if frontend == "notebook7" else open_notebook
    name = f"viewers-reload-{frontend}.ipynb"
    with ScriptedServer(script(think_s=8.0)) as server:
        open_run_notebook(page, lab_server, name, CONTEXT_CELL, f"{rlm_magic(server.url)}\nWhere does each wind blow?",
                          code_cell("# a person's cell below the run", "below"), opener=opener)
        start_cell(page, "ask")
        page.wait_for_function(
            """() => { const m = window.jupyterapp.shell.currentWidget.content.model;
                       for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                         const meta = c.getMetadata('rlm');
                         if (meta && meta.role === 'code' && meta.step === 2) return c.executionState === 'running'; }
                       return false; }""", timeout=60_000, polling=50)
        screenshot(page, request, f"-{frontend}-before-reload")
        running = next(c["id"] for c in agent_cells(page) if c["role"] == "code" and c["step"] == 2)
        page.reload()
        wait_notebook_attached(page)
        if frontend == "lab":
            expect(page.locator("#jp-main-statusbar .rlm-status")).to_contain_text("step", timeout=15_000)
        screenshot(page, request, f"-{frontend}-after-reload")
        cells = wait_for_run(page)
        try:
            check_run(cells, "the reloaded tab")
        except AssertionError:
            import json
            saved = wait_saved_run(lab_server, name)
            print("SAVED", json.dumps([(c["id"], c.get("outputs")) for c in saved["cells"] if c["cell_type"] == "code"])[:6000])
            print("PAGE", json.dumps([(c["id"], (cell_state(page, c["id"]) or {}).get("outputs")) for c in cells if c["type"] == "code"])[:6000])
            raise
        assert next(c for c in cells if c["id"] == running)["output"] == "slept 2000\n"
        if frontend == "lab":
            expect(page.locator("#jp-main-statusbar .rlm-status")).to_contain_text("ended: final", timeout=10_000)
        _widget_live(page)
        screenshot(page, request, f"-{frontend}-done")
        assert ask_state(page)["state"] == "idle"
    check_saved(wait_saved_run(lab_server, name), "the saved file")


def test_closed_tabs_reopened_after_the_run(page: Page, any_lab, request) -> None:
    """Start a run, close every tab, come back after it ended: every cell with
    its outputs and counts, the %%rlm cell finished, the sub-call widget
    working; without collaboration a line says the cells were brought in."""
    page.on("dialog", lambda dialog: dialog.accept())
    name = f"viewers-closed-{'rtc' if any_lab.collaboration else 'no-rtc'}.ipynb"
    with ScriptedServer(script()) as server:
        path = _notebook(page, any_lab, name, server.url)
        start_cell(page, "ask")
        wait_output(page, "step one output")
        screenshot(page, request, "-before-closing")
        page.goto("about:blank")  # the only tab: no page shows the notebook now
        wait_kernel_idle(any_lab, path, server)
        said = _watch(page)
        open_notebook(page, any_lab, path)
        cells = wait_for_run(page, timeout=30)
        screenshot(page, request, "-reopened")
        check_run(cells, "the reopened notebook")
        _widget_live(page)
        if not any_lab.collaboration:
            note = page.locator(".jp-toast-message, .jp-Notification-Toast").filter(has_text="brought in")
            expect(note.first).to_be_visible(timeout=10_000)
            save_notebook(page)
            saved = any_lab.read_notebook(path)
        else:
            saved = wait_saved_run(any_lab, path)
        check_saved(saved, "the saved file")
        assert not _yjs_errors(said), _yjs_errors(said)


def test_two_tabs_and_a_reload_without_collaboration(page: Page, lab_server_no_rtc, request) -> None:
    """Collaboration off: each tab has its own copy, as Jupyter does; both
    show the whole run once, a reloaded one too."""
    lab = lab_server_no_rtc
    page.on("dialog", lambda dialog: dialog.accept())
    with ScriptedServer(script()) as server:
        path = _notebook(page, lab, "viewers-no-rtc.ipynb", server.url)
        second = page.context.new_page()
        second.on("dialog", lambda dialog: dialog.accept())
        open_notebook(second, lab, path)
        start_cell(page, "ask")
        wait_output(second, "slept 2000")
        second.reload()
        wait_notebook_attached(second)
        screenshot(second, request, "-second-reloaded")
        for where, tab in (("the tab that ran it", page), ("the reloaded tab", second)):
            cells = wait_for_run(tab)
            try:
                check_run(cells, where)
            except AssertionError:
                screenshot(tab, request, "-failed")
                raise
        assert "ended: final" in run_status(page)
        screenshot(page, request, "-first-done")
        screenshot(second, request, "-second-done")
        assert describe(cells)
