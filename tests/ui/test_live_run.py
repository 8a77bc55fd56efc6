"""A real %%rlm run in JupyterLab: the RLM kernel, the labextension and the
scripted model server, driven by Chromium."""

from __future__ import annotations

import time

import pytest
from labdriver import CELLS, open_notebook, run_cell, save_notebook, screenshot
from playwright.sync_api import Page

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

STREAMING_STEP = (
    "I will print twice with a pause.\n"
    "```repl\nimport time\nprint('first line', flush=True)\ntime.sleep(2.5)\nprint('second line')\n```"
)
BATCH_STEP = (
    "Now a batch of sub-calls.\n"
    "```repl\nanswers = llm_query_batched([f'item {i}' for i in range(12)])\nprint(len(answers), answers[0])\n```"
)
FINAL_STEP = "```repl\nresult = ' | '.join(answers[:3])\n```\nFINAL_VAR(result)"


def _sub(prompt: str) -> Reply:
    # Staggered latencies, so the batch widget visibly fills row by row.
    index = int(prompt.split()[-1]) if prompt.split()[-1].isdigit() else 0
    return Reply(text=f"answer to {prompt}", delay=0.3 + 0.25 * index)


@pytest.fixture
def model_server():
    with ScriptedServer(Script(root=[STREAMING_STEP, BATCH_STEP, FINAL_STEP], sub=_sub)) as server:
        yield server


def _agent_cells(page: Page) -> list[dict]:
    return page.evaluate(
        """() => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          const out = [];
          for (let i = 0; i < model.cells.length; i++) {
            const c = model.cells.get(i);
            const meta = c.getMetadata('rlm');
            out.push({index: i, id: c.id, type: c.type, role: meta ? meta.role : null,
                      count: c.type === 'code' ? c.executionCount : null});
          }
          return out;
        }"""
    )


def test_live_run_fills_the_notebook(page: Page, any_lab, model_server, request) -> None:
    """With collaboration (the server writes the shared document) and without (the page its copy)."""
    lab_server = any_lab
    (lab_server.root_dir / "haystack.txt").write_text("needle " * 5000)
    path = lab_server.write_notebook("live-run.ipynb", [], kernel="rlm")
    open_notebook(page, lab_server, path)
    run_cell(page, "%rlm context haystack.txt")
    page.keyboard.press("Escape")
    rlm_cell = run_cell(
        page,
        f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {model_server.url}\n"
        "Find the needle.",
        wait=False,
    )

    # Streaming: the first line shows in the inserted cell before the second exists.
    page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('first line')", timeout=60_000)
    seen_first = time.monotonic()
    assert page.locator(f"{CELLS} .jp-OutputArea-output:has-text('second line')").count() == 0
    # Saving mid-run clears the dirty mark; the next step's cells set it again.
    save_notebook(page)
    agent_cells_when_saved = sum(1 for c in _agent_cells(page) if c["role"])
    page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('second line')", timeout=20_000)
    assert time.monotonic() - seen_first > 1.0
    screenshot(page, request, "-streaming")

    # The batch widget fills row by row: watch its progress description move.
    progress = page.locator(".rlm-subcall-widget .widget-progress, .rlm-subcall-widget .widget-inline-hbox")
    progress.first.wait_for(timeout=30_000)
    assert sum(1 for c in _agent_cells(page) if c["role"]) > agent_cells_when_saved
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty"), \
        "the notebook is not marked dirty after a new step"
    filling_shot = False
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = page.locator(".rlm-subcall-widget").first.inner_text()
        for k in range(13):
            if f"{k} of 12" in text:
                seen.add(f"{k} of 12")
        if "12 of 12" in text:
            break
        if len(seen) >= 2 and not filling_shot:
            screenshot(page, request, "-batch-filling")
            filling_shot = True
        time.sleep(0.1)
    assert "12 of 12" in seen and len(seen) >= 4, seen
    screenshot(page, request, "-batch")

    # The run ends with an answer cell; the status bar says so.
    page.wait_for_selector(".rlm-answer-cell, .jp-Cell.rlm-answer", timeout=60_000)
    status = page.locator("#jp-main-statusbar").inner_text()
    assert "RLM" in status and "final" in status
    cells = _agent_cells(page)
    ids = [c["id"] for c in cells]
    start = ids.index(rlm_cell)
    # Shift+Enter left an empty human cell below the %%rlm cell: the agent cells go between.
    roles = [c["role"] for c in cells[start + 1 :] if c["role"] is not None]
    assert roles[:3] == ["thought", "code", "thought"], roles
    assert roles[-1] == "answer"
    counts = [c["count"] for c in cells[start + 1 :] if c["role"] == "code"]
    assert None not in counts and counts == sorted(counts), counts
    first = [c for c in cells if c["id"] == rlm_cell][0]["count"]
    assert counts == list(range(first + 1, first + 4)), (first, counts)
    assert page.locator(".rlm-agent-cell").count() >= 5
    screenshot(page, request, "-done")

    save_notebook(page)
    saved = lab_server.read_notebook(path)
    saved_roles = [c.get("metadata", {}).get("rlm", {}).get("role") for c in saved["cells"]]
    saved_roles = [r for r in saved_roles if r is not None]
    assert saved_roles.count("code") == 3 and saved_roles[-1] == "answer"
    code_cells = [c for c in saved["cells"] if c.get("metadata", {}).get("rlm", {}).get("role") == "code"]
    texts = ["".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
             for o in code_cells[0]["outputs"]]
    assert "first line" in "".join(texts)
    assert code_cells[1]["metadata"]["rlm"]["subcalls"][0]["response"].startswith("answer to")
    widget_state = saved["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    assert widget_state.get("state"), "widget state was not saved with the notebook"
