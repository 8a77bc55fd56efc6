"""A root model that takes seconds, in real JupyterLab: while it thinks,
the status bar and the %%rlm cell say so with the seconds ticking; its reply
streams into draft cells as it is written; a code block runs once its fence
closes while the model still writes; the page follows the run, and a person
who scrolls away gets a "Jump to the latest step" control."""

from __future__ import annotations

import re
import time

import pytest
from labdriver import (
    all_cells,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    status_bar_text,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

PROSE = ("I will look at the start of the context first, then count the words in it, and only then decide "
         "how to split it for the sub-calls. ") * 4
STEP = Reply(
    text=PROSE + "\n```repl\nprint('first block ran')\n```\n\n" + PROSE
    + "\n```repl\nprint('second block ran')\n```",
    reasoning="Look before counting.", ttft=3.0, tokens_per_s=40)
ROOT = [STEP, "FINAL(done)"]
TALL = "\n".join(f"# line {i} of a person's notes above the run" for i in range(80))


def _ask_output(page: Page) -> str:
    return page.evaluate(
        "() => { const m = window.jupyterapp.shell.currentWidget.content.model;"
        " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);"
        " if (c.id === 'ask') return c.outputs.toJSON().map(o => o.data ? o.data['text/plain'] : '')"
        ".join(''); } return ''; }")


def _drafts(page: Page) -> list[dict]:
    return page.evaluate(
        "() => { const m = window.jupyterapp.shell.currentWidget.content.model; const out = [];"
        " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i); const r = c.getMetadata('rlm');"
        " if (r && r.draft) out.push({id: c.id, role: r.role, source: c.sharedModel.getSource()}); }"
        " return out; }")


def _thinking_seconds(text: str) -> int | None:
    match = re.search(r"root model thinking · (\d+) s", text)
    return int(match.group(1)) if match else None


def test_a_slow_streaming_model_in_the_live_notebook(page: Page, lab_server, request) -> None:
    with ScriptedServer(Script(root=list(ROOT))) as server:
        open_run_notebook(page, lab_server, "streaming.ipynb", TALL + "\ncontext = 'word ' * 2000",
                          f"{rlm_magic(server.url)}\nCount the words.")
        start_cell(page, "ask")

        # Thinking: no token for 3 s; the status bar and the cell tick every second.
        seen: set[int] = set()
        cell_seen: set[int] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(seen) < 3:
            bar = _thinking_seconds(status_bar_text(page))
            if bar is not None:
                seen.add(bar)
            here = _thinking_seconds(_ask_output(page))
            if here is not None:
                cell_seen.add(here)
            if len(seen) == 2:
                screenshot(page, request, "-thinking")
            time.sleep(0.1)
        assert len(seen) >= 2, f"the status bar's seconds did not tick while the model thought: {seen}"
        assert len(cell_seen) >= 2, f"the %%rlm cell's seconds did not tick: {cell_seen}"

        # Writing: a draft thought cell grows as the tokens come.
        page.wait_for_function(
            "() => { const m = window.jupyterapp.shell.currentWidget.content.model;"
            " for (let i = 0; i < m.cells.length; i++) { const r = m.cells.get(i).getMetadata('rlm');"
            " if (r && r.draft && r.role === 'thought') return true; } return false; }", timeout=20_000)
        first = _drafts(page)[0]
        page.wait_for_function(  # the same cell's source grows (a draft still, or its final text)
            "([id, n]) => { const m = window.jupyterapp.shell.currentWidget.content.model;"
            " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);"
            " if (c.id === id) return c.sharedModel.getSource().length > n; } return false; }",
            arg=[first["id"], len(first["source"])], timeout=20_000)
        later = next((d for d in _drafts(page) if d["id"] == first["id"]), None)
        grown = later["source"] if later else next(c["source"] for c in all_cells(page) if c["id"] == first["id"])
        assert len(grown) > len(first["source"]) and grown.startswith(first["source"][:20]), (first, later)
        expect(page.locator(".rlm-draft-cell").first).to_be_visible()
        assert "root model writing" in status_bar_text(page)
        screenshot(page, request, "-writing")

        # The first block runs at its closing fence while the model still writes the rest.
        page.wait_for_function(
            "() => { const m = window.jupyterapp.shell.currentWidget.content.model;"
            " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);"
            " if (c.type === 'code' && JSON.stringify(c.outputs.toJSON()).includes('first block ran')) return true; }"
            " return false; }", timeout=30_000)
        assert "root model writing" in status_bar_text(page), "the block waited for the whole reply"
        assert "second block ran" not in "".join(c["output"] for c in all_cells(page))
        # The prose streams on below it, rendered as it comes.
        page.wait_for_function(
            "() => { const m = window.jupyterapp.shell.currentWidget.content.model; let ran = false;"
            " for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i); const r = c.getMetadata('rlm');"
            " if (c.type === 'code' && JSON.stringify(c.outputs.toJSON()).includes('first block ran')) ran = true;"
            " else if (ran && r && r.draft && c.sharedModel.getSource().length > 40) return true; }"
            " return false; }", timeout=20_000)
        draft = page.locator(".rlm-draft-cell .jp-RenderedMarkdown").last
        try:
            expect(draft).to_contain_text("look at the start", timeout=10_000)
        except AssertionError:
            raise AssertionError(f"the draft's prose is not rendered as it streams: {draft.inner_text()!r}") from None
        screenshot(page, request, "-ran-while-writing")

        # Following: the newest cell is in view; scrolling away shows the jump control.
        notebook = page.locator(".jp-NotebookPanel .jp-Notebook").first
        box = notebook.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        for _ in range(12):
            page.mouse.wheel(0, -1500)
            time.sleep(0.05)  # the scenario: a person's wheel turns, not a wait
        jump = page.locator(".rlm-jump-latest")
        expect(jump).to_be_visible(timeout=5_000)
        screenshot(page, request, "-scrolled-away")
        jump.click()
        expect(jump).to_be_hidden(timeout=5_000)

        wait_cell_idle(page, "ask", timeout=60_000)
        page.wait_for_selector(".rlm-answer-cell", timeout=20_000)
        # The newest cells are in view again: the page followed after the jump.
        expect(page.locator(".rlm-answer-cell")).to_be_in_viewport(timeout=10_000)
        screenshot(page, request, "-ended")

        cells = all_cells(page)
        assert not _drafts(page), "a draft stayed a draft"
        assert first["id"] in [c["id"] for c in cells if c["role"] == "thought"], "the draft did not become its cell"
        outputs = "".join(c["output"] for c in cells if c["role"] == "code")
        assert "first block ran" in outputs and "second block ran" in outputs
        assert len(server.calls("root-model")) == 2
