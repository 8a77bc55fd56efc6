"""A page that gets no animation frames still fills the notebook.

The live view applies what the kernel sends once per animation frame
(labextension/src/live.ts). Browsers give a hidden tab no frames, and a run
must still reach the notebook model there (an autosave of that tab writes
what the run did), so the view applies its queue after at most 100 ms
without a frame. The test takes the page's frames away (headless Chromium
keeps every tab visible), runs a three-step %%rlm cell, and reads the
notebook model; then gives the frames back and checks the cells render."""

from __future__ import annotations

import time
from typing import Any

import pytest
from labdriver import (
    all_cells,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

STEPS = 3


def _steps(body: dict[str, Any]) -> str:
    step = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    if step > STEPS:
        return "FINAL(three steps done)"
    return f"Step {step} while hidden.\n```repl\nprint('hidden step', {step})\n```"


# As in a hidden tab, callbacks asked for meanwhile wait for the frames to come back.
_NO_FRAMES = """() => {
  const held = window.__rlmTestHeldFrames = [];
  window.__rlmTestFrames = window.requestAnimationFrame;
  window.requestAnimationFrame = callback => { held.push(callback); return 0; };
}"""
_FRAMES_BACK = """() => {
  window.requestAnimationFrame = window.__rlmTestFrames;
  for (const callback of window.__rlmTestHeldFrames) window.requestAnimationFrame(callback);
}"""


def _run_is_in(cells: list[dict]) -> bool:
    code = [c for c in cells if c["role"] == "code"]
    return (len(code) == STEPS and all(f"hidden step {i + 1}" in c["output"] and c["count"] is not None
                                       for i, c in enumerate(code))
            and any(c["role"] == "answer" and "three steps done" in c["source"] for c in cells))


def test_a_page_without_animation_frames_still_gets_the_run(page: Page, lab_server, request) -> None:
    with ScriptedServer(_steps) as server:
        open_run_notebook(page, lab_server, "no-frames.ipynb", "context = 'quiet ' * 100",
                          f"{rlm_magic(server.url, '--fresh')}\nWork while nobody looks.")
        page.evaluate(_NO_FRAMES)
        try:
            start_cell(page, "ask")
            # Polled from here: Playwright's wait_for_function polls on animation frames.
            deadline = time.monotonic() + 60
            cells = all_cells(page)
            while not _run_is_in(cells) and time.monotonic() < deadline:
                time.sleep(0.1)
                cells = all_cells(page)
            assert _run_is_in(cells), [(c["role"], c["output"], c["count"]) for c in cells]
            thoughts = [c["source"] for c in cells if c["role"] == "thought"]
            assert [f"Step {i} while hidden." in " ".join(thoughts) for i in range(1, STEPS + 1)] == [True] * STEPS
        finally:
            page.evaluate(_FRAMES_BACK)
        wait_cell_idle(page, "ask", timeout=30_000)
        # With frames again, JupyterLab renders what the model got, agent badges included.
        page.wait_for_function(
            """(steps) => {
              const notebook = window.jupyterapp.shell.currentWidget.content;
              let shown = 0;
              for (const cell of notebook.widgets) {
                const meta = cell.model.getMetadata('rlm');
                if (meta && meta.role === 'code' && cell.node.isConnected
                    && cell.node.textContent.includes('hidden step')
                    && cell.node.querySelector(':scope > .rlm-badge')) shown++;
              }
              return shown === steps;
            }""", arg=STEPS, timeout=20_000)
        screenshot(page, request)
