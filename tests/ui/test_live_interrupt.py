"""Interrupting a real %%rlm run from JupyterLab's toolbar: the run stops
within seconds, in-flight and queued sub-calls end as cancelled, and no cell
already written is lost (also after saving)."""

from __future__ import annotations

import time

import pytest
from labdriver import (
    CELLS,
    all_cells,
    append_code_cell,
    cell_by_id,
    cell_state,
    click_interrupt,
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
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

BATCH = 40
FIRST_STEP = "First, the size of the context.\n```repl\nprint('context has', len(context), 'characters')\n```"
BATCH_STEP = (
    "Now one question per chunk.\n"
    f"```repl\nanswers = llm_query_batched([f'chunk {{i}}' for i in range({BATCH})])\n"
    "print('batch finished', len(answers))\n```"
)
SLEEP_STEP = (
    "A long computation.\n"
    "```repl\nimport time\nprint('going to sleep', flush=True)\ntime.sleep(30)\nprint('woke up')\n```"
)
NEVER = "FINAL(this step must never be reached)"

# How long the %%rlm cell may take to end after the Interrupt click.
STOP_WITHIN_S = 3.0
SETTLED_S = 10  # for the batch widget to show every row done or cancelled after the interrupt


def _interrupt_and_time(page: Page, rlm_cell: str) -> float:
    clicked = time.monotonic()
    click_interrupt(page)
    wait_cell_idle(page, rlm_cell, timeout=20_000)
    return time.monotonic() - clicked


def _setup(page: Page, lab_server, name: str, magic: str) -> tuple[str, str]:
    path = open_run_notebook(page, lab_server, f"{name}.ipynb", "context = 'needle in a haystack ' * 2000",
                             f"{magic}\nFind the needle.")
    start_cell(page, "ask")
    return path, "ask"


def _status_counts(widget) -> dict[str, int]:
    """How many of the batch's rows have each status, as its status filter
    counts them (the list draws only the rows in view)."""
    chips = widget.locator(".rlm-sc-chip").evaluate_all("cs => cs.map(c => c.textContent)")
    counts = {}
    for chip in chips:
        status, _, count = chip.rpartition(" ")
        counts[status] = int(count.replace(",", ""))
    return counts


def _agent_ids(page: Page) -> list[str]:
    return [c["id"] for c in all_cells(page) if c["role"] in ("thought", "code", "answer")]


def test_interrupt_during_batched_subcalls(page: Page, lab_server, request) -> None:
    script = Script(root=[FIRST_STEP, BATCH_STEP, NEVER],
                    sub=lambda prompt: Reply(text=f"summary of {prompt}", delay=2.0))
    with ScriptedServer(script) as server:
        path, rlm_cell = _setup(page, lab_server, "interrupt-batch",
                                rlm_magic(server.url, "--concurrency 4"))

        # Wait until the batch widget shows calls running and a first wave done.
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        widget.wait_for(timeout=60_000)
        expect(widget.locator(".rlm-sc-row[data-status='running']").first).to_be_attached(timeout=15_000)
        expect(widget).to_contain_text(f"4 of {BATCH}", timeout=15_000)
        before = _agent_ids(page)
        assert len(before) == 4, all_cells(page)  # thought, code, thought, code
        statuses_before = widget.locator(".rlm-sc-row").evaluate_all("rows => rows.map(r => r.dataset.status)")
        assert "queued" in statuses_before and "running" in statuses_before, statuses_before
        counts = _status_counts(widget)
        assert counts["queued"] > 0 and counts["running"] > 0 and counts["all"] == BATCH, counts
        screenshot(page, request, "-running")

        took = _interrupt_and_time(page, rlm_cell)
        requests_at_stop = len(server.calls("sub-model"))
        screenshot(page, request, "-interrupted")
        assert took < STOP_WITHIN_S, f"the %%rlm cell ended {took:.2f} s after the Interrupt click"

        # Status bar and the %%rlm cell's own status line say "interrupted".
        expect(page.locator("#jp-main-statusbar .rlm-status")).to_contain_text("interrupted", timeout=5_000)
        expect(cell_by_id(page, rlm_cell).locator(".jp-OutputArea")).to_contain_text("RLM interrupted")

        # Every cell written before the click is still there, in order, and the
        # run closed with an "ended" cell saying why.
        cells = all_cells(page)
        agent = [c for c in cells if c["role"] in ("thought", "code", "answer")]
        assert [c["id"] for c in agent[: len(before)]] == before
        assert [c["role"] for c in agent] == ["thought", "code", "thought", "code", "answer"], agent
        assert "context has 42000 characters" in agent[1]["output"], agent[1]
        assert "interrupted" in agent[-1]["source"], agent[-1]
        batch_cell = agent[3]
        assert batch_cell["state"] != "running", batch_cell
        # The interrupted cell's metadata says so once its cell_finished arrives.
        page.wait_for_function(
            "(id) => { const m = window.jupyterapp.shell.currentWidget.content.model;"
            " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);"
            " if (c.id === id) return (c.getMetadata('rlm') || {}).status === 'interrupted'; } return false; }",
            arg=batch_cell["id"], timeout=5_000,
        )

        # The batch widget: no row left running or queued; the unfinished ones say cancelled.
        deadline = time.monotonic() + SETTLED_S
        while (counts := _status_counts(widget)).get("done", 0) + counts.get("cancelled", 0) != BATCH:
            assert time.monotonic() < deadline, f"rows still queued or running after the interrupt: {counts}"
            time.sleep(0.05)  # the poll's interval
        expect(widget.locator(".rlm-sc-row[data-status='queued'], .rlm-sc-row[data-status='running']")).to_have_count(0)
        statuses = widget.locator(".rlm-sc-row").evaluate_all("rows => rows.map(r => r.dataset.status)")
        assert statuses and set(statuses) <= {"done", "cancelled"}, statuses
        assert counts["all"] == BATCH, counts
        cancelled = counts["cancelled"]
        assert cancelled >= BATCH - 12, counts
        expect(widget.locator(".rlm-sc-title")).to_contain_text(
            f"{BATCH - cancelled} of {BATCH} done, {cancelled} cancelled")
        expect(widget.locator(".rlm-sc-status", has_text="cancelled").first).to_be_visible()

        ended = cell_by_id(page, agent[-1]["id"])
        ended.scroll_into_view_if_needed()
        expect(ended.locator(".jp-RenderedMarkdown")).to_contain_text("Run ended without an answer", timeout=5_000)
        expect(ended.locator(".jp-RenderedMarkdown")).to_be_visible()

        # Queued sub-calls were never sent: an absence check, so a window after the run's end
        # (the %%rlm cell's reply and its "ended" cell, waited for above) in which none may come.
        page.wait_for_timeout(2500)
        assert len(server.calls("sub-model")) == requests_at_stop <= 12, (requests_at_stop, len(server.calls("sub-model")))
        assert len(server.calls("root-model")) == 2
        screenshot(page, request, "-after")

        # Saved, every cell keeps its id and rlm metadata.
        save_notebook(page)
        saved = saved_cells_by_id(lab_server.read_notebook(path))
        for cell in agent:
            assert cell["id"] in saved, cell
            meta = saved[cell["id"]]["metadata"].get("rlm", {})
            assert meta.get("role") == cell["role"] and meta.get("run_id"), (cell, meta)
        saved_batch = saved[batch_cell["id"]]
        assert saved_batch["metadata"]["rlm"]["status"] == "interrupted"
        records = saved_batch["metadata"]["rlm"].get("subcalls", [])
        assert len(records) == BATCH, len(records)
        assert {r["status"] for r in records} <= {"done", "error"}, [r["status"] for r in records]
        assert all(r.get("error") == "cancelled" for r in records if r["status"] == "error"), records
        assert saved[agent[1]["id"]]["outputs"], "the first step's output was not saved"
        assert saved[agent[-1]["id"]]["metadata"]["rlm"].get("reason") == "interrupted"

        # The kernel is usable again.
        append_code_cell(page)
        probe = run_cell(page, "print('still alive', 6 * 7)")
        assert "still alive 42" in "".join(output_text(o) for o in cell_state(page, probe)["outputs"])


def test_interrupt_during_long_cell(page: Page, lab_server, request) -> None:
    with ScriptedServer(Script(root=[SLEEP_STEP, NEVER])) as server:
        path, rlm_cell = _setup(page, lab_server, "interrupt-sleep", rlm_magic(server.url))
        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('going to sleep')", timeout=60_000)
        sleeping = [c for c in all_cells(page) if c["role"] == "code"]
        assert len(sleeping) == 1 and "woke up" not in sleeping[0]["output"], sleeping
        assert cell_state(page, rlm_cell)["state"] == "running"
        screenshot(page, request, "-sleeping")

        took = _interrupt_and_time(page, rlm_cell)
        screenshot(page, request, "-interrupted")
        assert took < STOP_WITHIN_S, f"the %%rlm cell ended {took:.2f} s after the Interrupt click"

        expect(page.locator("#jp-main-statusbar .rlm-status")).to_contain_text("interrupted", timeout=5_000)
        expect(cell_by_id(page, rlm_cell).locator(".jp-OutputArea")).to_contain_text("RLM interrupted")
        agent = [c for c in all_cells(page) if c["role"] in ("thought", "code", "answer")]
        assert [c["role"] for c in agent] == ["thought", "code", "answer"], agent
        sleep_cell = agent[1]
        assert "going to sleep" in sleep_cell["output"] and "woke up" not in sleep_cell["output"], sleep_cell
        assert "KeyboardInterrupt" in sleep_cell["output"], sleep_cell
        assert sleep_cell["state"] != "running" and sleep_cell["count"] is not None, sleep_cell
        assert "interrupted" in agent[-1]["source"]
        assert len(server.calls("root-model")) == 1

        save_notebook(page)
        saved = saved_cells_by_id(lab_server.read_notebook(path))
        meta = saved[sleep_cell["id"]]["metadata"]["rlm"]
        assert meta["status"] == "interrupted" and meta["role"] == "code", meta
        assert "going to sleep" in "".join(output_text(o) for o in saved[sleep_cell["id"]]["outputs"])
        assert saved[agent[-1]["id"]]["metadata"]["rlm"].get("reason") == "interrupted"
