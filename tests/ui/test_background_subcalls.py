"""Background sub-calls in real JupyterLab: a step starts a batch with
``wait=False``; the batch's widget, in the cell that started it, keeps
filling while the next step's cell runs and waits in ``.result()``; once the
calls are over that cell's metadata on the page holds every answer."""

from __future__ import annotations

import re
import time

import pytest
from _helpers import repl
from labdriver import (
    CELLS,
    all_cells,
    cell_state,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

N = 6


def _sub(prompt: str) -> Reply:
    index = int(prompt.split()[-1])
    return Reply(text=f"answer {index}", delay=1.0 + 0.8 * index)  # 1 s ... 5 s


def test_a_background_batch_fills_its_widget_while_a_later_cell_runs(page: Page, lab_server, request) -> None:
    root = [
        repl(f"bg = llm_query_batched([f'item {{i}}' for i in range({N})], wait=False)\nprint('started')",
             prose="Start the batch in the background."),
        Reply(text=repl("print('exploring meanwhile', bg.progress)\nanswers = bg.result()\nprint(answers)",
                        prose="Collect it."), delay=0.5),
        "FINAL_VAR(answers)",
    ]
    with ScriptedServer(Script(root=root, sub=_sub)) as server:
        open_run_notebook(page, lab_server, "background.ipynb", "context = 'some text'",
                          f"{rlm_magic(server.url)}\nLabel the items.")
        start_cell(page, "ask")
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        widget.wait_for(timeout=60_000)
        samples: list[tuple[int, int]] = []  # (calls done as the widget says, code cells on the page)
        shot = False
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            title = widget.inner_text()
            found = re.search(rf"(\d+) of {N} done", title)
            done = int(found.group(1)) if found else 0
            code = [c for c in all_cells(page) if c["role"] == "code"]
            samples.append((done, len(code)))
            if not shot and len(code) >= 2 and 0 < done < N:
                widget.scroll_into_view_if_needed()
                screenshot(page, request, "-filling")
                shot = True
            if done == N:
                break
            time.sleep(0.2)  # the sampling interval: the fill is watched as it goes
        wait_cell_idle(page, "ask", timeout=60_000)
        # the run's last cell: the page has applied every op before it (outputs included)
        expect(page.locator(".rlm-answer-cell")).to_have_count(1, timeout=15_000)
        widget.scroll_into_view_if_needed()
        screenshot(page, request, "-done")
    assert samples[-1][0] == N, samples
    # the widget went on filling once the next step's cell was on the page
    later = [done for done, code in samples if code >= 2]
    assert later and later[0] < N and max(later) == N, samples
    first, second = [c for c in all_cells(page) if c["role"] == "code"][:2]
    assert "started" in first["output"]
    assert "['answer 0', 'answer 1', 'answer 2', 'answer 3', 'answer 4', 'answer 5']" in second["output"]
    records = cell_state(page, first["id"])["metadata"]["subcalls"]
    assert [(r["status"], r["response"]) for r in records] == [("done", f"answer {i}") for i in range(N)]
