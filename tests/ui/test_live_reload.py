"""Reloading the page in the middle of a real %%rlm run: the new page says
hello, the kernel resyncs the cells the reload lost, and the later steps'
cells still arrive below the %%rlm cell, in order, with their outputs."""

from __future__ import annotations

import time

import pytest
from labdriver import (
    CELLS,
    all_cells,
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
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

STEPS = [
    "Step one: look around.\n```repl\nprint('step one output')\n```",
    # The model "thinks" for a while: the page is reloaded during this call.
    Reply(text="Step two: count.\n```repl\ncount = len(context.split())\nprint('step two output', count)\n```",
          delay=8.0),
    Reply(text="Step three: stream.\n```repl\nimport time\nprint('step three start', flush=True)\n"
               "time.sleep(1.0)\nprint('step three end')\n```", delay=0.5),
    "```repl\nresult = f'{count} words'\n```\nFINAL_VAR(result)",
]
AGENT_ROLES = ("thought", "code", "answer")


def test_reload_mid_run_keeps_filling_the_notebook(page: Page, lab_server, request) -> None:
    page.on("dialog", lambda dialog: dialog.accept())  # "leave the page with unsaved changes?"
    with ScriptedServer(Script(root=STEPS)) as server:
        path = open_run_notebook(page, lab_server, "reload.ipynb", "context = 'needle hay ' * 500",
                                 f"{rlm_magic(server.url)}\nCount the words.",
                                 code_cell("# a human cell below the run", "human"))
        start_cell(page, "ask")

        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('step one output')", timeout=60_000)
        lost = [c for c in all_cells(page) if c["role"] in AGENT_ROLES]
        assert [c["role"] for c in lost] == ["thought", "code"], lost
        assert len(server.calls("root-model")) == 2, "step two's model call should be in flight"
        screenshot(page, request, "-before-reload")

        reloaded = time.monotonic()
        page.reload()
        wait_notebook_attached(page)
        attached_s = time.monotonic() - reloaded

        # The resync brings step one's cells back (same ids, outputs), right below the %%rlm cell.
        # (JupyterLab holds the new page's messages, hello included, until the
        # kernel answers its kernel_info_request, which waits behind the running
        # %%rlm cell, or for 3 s: so the resync comes about 3 s after the reload.)
        deadline = time.monotonic() + 20
        while True:
            restored = [c for c in all_cells(page) if c["role"] in AGENT_ROLES]
            if "step one output" in "".join(c["output"] for c in restored):
                break
            assert time.monotonic() < deadline, f"step one's cells never came back: {restored}"
            time.sleep(0.05)
        resynced_s = time.monotonic() - reloaded
        assert not any(c["step"] == 2 for c in restored), (
            "step one's cells came back only with step two's, not from the resync on hello", restored)
        screenshot(page, request, "-resynced")
        assert [c["id"] for c in restored[:2]] == [c["id"] for c in lost], (lost, restored)

        # The run goes on: later steps land in place, outputs streamed into them.
        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('step three start')", timeout=30_000)
        page.wait_for_selector(".rlm-answer-cell", timeout=30_000)
        expect(page.locator("#jp-main-statusbar .rlm-status")).to_contain_text("ended: final", timeout=10_000)
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
        print(f"page attached {attached_s:.1f} s after the reload, step one resynced at {resynced_s:.1f} s")
