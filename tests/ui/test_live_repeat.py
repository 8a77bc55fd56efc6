"""Many short %%rlm runs back to back in the same notebook (``--fresh``: a
re-run cell would otherwise find its run below and not ask the model): every
one of them must finish (found by bench_live_speed.py: a run sometimes never starts
and its cell stays [*] forever)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from labdriver import (
    all_cells,
    cell_state,
    click_interrupt,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
)
from playwright.sync_api import Page

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

RUNS = 15
FINISH_WITHIN_S = 5.0  # an instant two-step run takes ~0.3 s
# The first run in a kernel also waits for litellm's import (~2 s idle, over 5 s
# on a loaded CI machine; the kernel starts it in the background at launch).
FIRST_RUN_WITHIN_S = 60.0
ENOUGH_STUCK = 3  # stop early: the point is made, and the test stays under a minute


def _instant(body: dict[str, Any]) -> str:
    # FINAL beside code is not taken (docs/reference/reply-protocol.md): the answer comes alone, a step later
    if any(m.get("role") == "assistant" for m in body.get("messages", [])):
        return "FINAL(quick answer)"
    return "One quick step.\n```repl\nprint('quick step')\n```"


def _answers(page: Page) -> int:
    return sum(1 for c in all_cells(page) if c["role"] == "answer")


def test_back_to_back_runs_all_finish(page: Page, lab_server, request) -> None:
    with ScriptedServer(_instant) as server:
        open_run_notebook(page, lab_server, "repeat.ipynb", "context = 'quick ' * 100",
                          f"{rlm_magic(server.url, '--fresh')}\nQuick?")

        stuck: list[dict] = []
        durations: list[float] = []
        for attempt in range(RUNS):
            before = _answers(page)
            requests_before = len(server.requests)
            started = time.monotonic()
            start_cell(page, "ask")
            within = FIRST_RUN_WITHIN_S if attempt == 0 else FINISH_WITHIN_S
            while _answers(page) == before and time.monotonic() - started < within:
                time.sleep(0.05)
            if _answers(page) > before:
                durations.append(time.monotonic() - started)
                page.wait_for_function(
                    "() => { const m = window.jupyterapp.shell.currentWidget.content.model;"
                    " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);"
                    " if (c.id === 'ask') return c.executionState !== 'running' && c.executionCount !== null; }"
                    " return false; }", timeout=10_000)
                continue
            # Stuck: record what the page and the model server saw, then free the kernel.
            state = cell_state(page, "ask")
            stuck.append({"attempt": attempt, "ask_state": state["state"],
                          "model_requests": len(server.requests) - requests_before,
                          "status_line": [o.get("data", {}).get("text/plain") for o in state["outputs"]]})
            if len(stuck) == 1:
                screenshot(page, request, "-stuck")
            click_interrupt(page)
            page.wait_for_function(
                "() => { const m = window.jupyterapp.shell.currentWidget.content.model;"
                " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);"
                " if (c.id === 'ask') return c.executionState !== 'running'; } return false; }",
                timeout=15_000)
            if len(stuck) >= ENOUGH_STUCK:
                break
        screenshot(page, request, "-end")
    assert not stuck, (
        f"{len(stuck)} of {len(durations) + len(stuck)} back-to-back %%rlm runs never finished (no cell, no model call, "
        f"[*] until interrupted): {stuck}; finished runs took {min(durations, default=0):.2f}-"
        f"{max(durations, default=0):.2f} s")
