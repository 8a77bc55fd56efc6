"""Reloading the page in the middle of a real %%rlm run: the kernel answers
the new page's kernel_info_request at once (the kernel indicator shows
"Busy", not "Unknown"), the page says hello, the kernel resyncs what the
reload lost (the run's cells, the %%rlm cell's own status line, the output
of the cell that loaded `context`), and the later steps' cells still arrive
below the %%rlm cell, in order, with their outputs, while the status line
keeps updating."""

from __future__ import annotations

import time

import pytest
from labdriver import (
    CELLS,
    all_cells,
    cell_state,
    code_cell,
    open_run_notebook,
    output_text,
    rlm_magic,
    save_notebook,
    screenshot,
    start_cell,
    status_bar_text,
    wait_notebook_attached,
)
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

STEPS = [
    "Step one: look around.\n```repl\nprint('step one output')\n```",
    # The model "thinks" for a while: the page is reloaded during this call.
    Reply(text="Step two: count.\n```repl\ncount = len(context.split())\nprint('step two output', count)\n```",
          delay=10.0),
    Reply(text="Step three: stream.\n```repl\nimport time\nprint('step three start', flush=True)\n"
               "time.sleep(1.0)\nprint('step three end')\n```", delay=0.5),
    "```repl\nresult = f'{count} words'\n```\nFINAL_VAR(result)",
]
AGENT_ROLES = ("thought", "code", "answer")
CONTEXT_CELL = "context = 'needle hay ' * 500\nprint('context loaded:', len(context), 'characters')"

_KERNEL_SHOWN = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const indicator = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
  return {status: panel.sessionContext.kernelDisplayStatus,
          title: indicator ? (indicator.getAttribute('title') || indicator.textContent || '') : ''};
}"""


def _cell_text(page: Page, cell_id: str) -> tuple[str, int | None]:
    state = cell_state(page, cell_id)
    assert state is not None, cell_id
    text = "".join(output_text(o) for o in state["outputs"])
    return text, state["count"]


def test_reload_mid_run_keeps_filling_the_notebook(page: Page, lab_server_no_rtc, request) -> None:
    """Without collaboration: the page's own copy (with it, see test_live_viewers.py)."""
    lab_server = lab_server_no_rtc
    page.on("dialog", lambda dialog: dialog.accept())  # "leave the page with unsaved changes?"
    with ScriptedServer(Script(root=STEPS)) as server:
        path = open_run_notebook(page, lab_server, "reload.ipynb", CONTEXT_CELL,
                                 f"{rlm_magic(server.url)}\nCount the words.",
                                 code_cell("# a human cell below the run", "human"))
        start_cell(page, "ask")

        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('step one output')", timeout=60_000)
        lost = [c for c in all_cells(page) if c["role"] in AGENT_ROLES]
        assert [c["role"] for c in lost] == ["thought", "code"], lost
        assert len(server.calls("root-model")) == 2, "step two's model call should be in flight"
        context_shown, context_count = _cell_text(page, "ctx")
        assert "context loaded: 5500 characters" in context_shown and context_count == 1
        status_shown, _ = _cell_text(page, "ask")
        assert status_shown.startswith("RLM · step"), status_shown
        assert page.evaluate(_KERNEL_SHOWN)["status"] == "busy"
        screenshot(page, request, "-before-reload")

        reloaded = time.monotonic()
        page.reload()
        wait_notebook_attached(page)
        attached = time.monotonic()
        attached_s = attached - reloaded
        # The file on disk was never saved with outputs: the reload emptied the cells a person ran.
        assert lab_server.read_notebook(path)["cells"][0]["outputs"] == []

        # The kernel answers the page's kernel_info_request during the run, and
        # says its run's request is busy: the indicator shows Busy, not Unknown.
        page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext"
                               ".kernelDisplayStatus === 'busy'", timeout=3_000, polling=50)
        busy_s = time.monotonic() - attached

        # The resync brings step one's cells back (same ids, outputs), right below the %%rlm cell,
        # and what the reload took from the person's cells: the context cell's output and count,
        # the %%rlm cell's status line.
        deadline = time.monotonic() + 20
        while True:
            restored = [c for c in all_cells(page) if c["role"] in AGENT_ROLES]
            if "step one output" in "".join(c["output"] for c in restored):
                break
            assert time.monotonic() < deadline, f"step one's cells never came back: {restored}"
            time.sleep(0.05)
        resynced_s = time.monotonic() - attached  # printed below; the check on step two's cells is the bound
        assert not any(c["step"] == 2 for c in restored), (
            "step one's cells came back only with step two's, not from the resync on hello", restored)
        assert _cell_text(page, "ctx") == (context_shown, context_count)
        restored_status, _ = _cell_text(page, "ask")
        assert restored_status.startswith("RLM · step"), restored_status
        assert cell_state(page, "ask")["state"] == "running"
        # Busy again at once after the side requests' own idles (the page's hello, its cells'
        # answer: each ends with an idle, followed by the run's busy); one look could land between.
        try:
            page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext"
                                   ".kernelDisplayStatus === 'busy'", timeout=2_000, polling=50)
        except PlaywrightError:
            raise AssertionError(f"the kernel is not shown busy mid-run: {page.evaluate(_KERNEL_SHOWN)}") from None
        screenshot(page, request, "-resynced")
        assert [c["id"] for c in restored[:2]] == [c["id"] for c in lost], (lost, restored)

        # The status line keeps updating in the %%rlm cell as the run goes on.
        page.wait_for_function(
            """() => { const m = window.jupyterapp.shell.currentWidget.content.model;
                       for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                         if (c.id !== 'ask') continue;
                         return c.outputs.toJSON().some(o => o.data && /step [3-9]\\//.test(
                           [].concat(o.data['text/plain'] || []).join(''))); }
                       return false; }""", timeout=30_000, polling=100)
        screenshot(page, request, "-status-updates")

        # The run goes on: later steps land in place, outputs streamed into them.
        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('step three start')", timeout=30_000)
        page.wait_for_selector(".rlm-answer-cell", timeout=30_000)
        expect(page.locator("#jp-main-statusbar .rlm-status")).to_contain_text("ended: final", timeout=10_000)
        # The %%rlm cell's request ends: its own count, the final status line and the answer under it,
        # and the kernel shows idle.
        page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext"
                               ".kernelDisplayStatus === 'idle'", timeout=10_000, polling=50)
        page.wait_for_function(
            """() => { const m = window.jupyterapp.shell.currentWidget.content.model;
                       for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                         if (c.id === 'ask') return c.executionCount !== null && c.executionState === 'idle'; }
                       return false; }""", timeout=10_000, polling=50)
        ask_text, ask_count = _cell_text(page, "ask")
        assert ask_text.startswith("RLM final · step 4/"), ask_text
        assert "1000 words" in ask_text and ask_count == 2, (ask_text, ask_count)
        screenshot(page, request, "-done")

        cells = all_cells(page)
        ids = [c["id"] for c in cells]
        assert ids[:2] == ["ctx", "ask"], ids
        agent = cells[2:-1]
        assert ids[-1] == "human", "the run's cells must go between the %%rlm cell and the cell below it"
        assert [(c["role"], c["step"]) for c in agent] == [
            ("thought", 1), ("code", 1), ("thought", 2), ("code", 2),
            ("thought", 3), ("code", 3), ("code", 4), ("thought", 4), ("answer", 4),
        ], [(c["role"], c["step"]) for c in agent]
        codes = [c for c in agent if c["role"] == "code"]
        assert codes[0]["output"].strip() == "step one output", codes[0]
        assert codes[1]["output"].strip() == "step two output 1000", codes[1]
        assert codes[2]["output"].split() == ["step", "three", "start", "step", "three", "end"], codes[2]
        counts = [c["count"] for c in codes]
        assert None not in counts and counts == sorted(counts) and len(set(counts)) == len(counts), counts
        assert "1000 words" in agent[-1]["source"]
        assert "ended: final" in status_bar_text(page)

        save_notebook(page)
        saved = lab_server.read_notebook(path)["cells"]
        assert [c["id"] for c in saved] == ids
        assert "step one output" in "".join(output_text(o) for o in saved[3]["outputs"])
        assert "context loaded: 5500 characters" in "".join(output_text(o) for o in saved[0]["outputs"])
        assert saved[1]["execution_count"] == 2 and "1000 words" in "".join(
            output_text(o) for o in saved[1]["outputs"])
        print(f"page attached {attached_s:.1f} s after the reload; then busy shown at {busy_s:.1f} s, "
              f"step one resynced at {resynced_s:.1f} s")
