"""A long run on the page: the history is compacted mid-run and the
compaction shows as a marked cell (badge "compacted", its own edge), in the
runs panel's step and in the status bar, with the prompt cache's reads.
The root model is Anthropic's Messages API on the scripted server
(``anthropic/claude-sonnet-4-5``: priced, cache breakpoints sent)."""

from __future__ import annotations

import re

import pytest
from _helpers import Summaries
from labdriver import (
    cell_by_id,
    cell_state,
    notebook_cell_ids,
    open_run_notebook,
    screenshot,
    start_cell,
    status_bar_text,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

PANEL = "#rlm-runs-panel"
SUMMARY = ("The first steps printed 3,000-character strings into s1, s2, ... (600 words each). "
           "Next: print the rest and answer with the word count.")


def _step(n: int) -> str:
    return f"Step {n}: print a long string.\n```repl\ns{n} = 'word ' * 600\nprint(s{n})\n```"


STEPS = [_step(n) for n in range(1, 6)] + ["FINAL(five long strings)"]


def test_a_compacted_history_shows_as_a_marked_cell(page: Page, lab_server, request) -> None:
    server = ScriptedServer(Summaries(root=STEPS, root_models=("claude-sonnet-4-5",), summary=SUMMARY)).start()
    try:
        magic = (f"%%rlm --model anthropic/claude-sonnet-4-5 --sub-model openai/sub-model --api-base {server.url} "
                 "--max-history-tokens 3000")
        open_run_notebook(page, lab_server, "compaction.ipynb", "context = 'word ' * 1000",
                          f"{magic}\nWrite five long strings.")
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=90_000)

        states = [cell_state(page, cell_id) for cell_id in notebook_cell_ids(page)]
        marked = [s for s in states if (s["metadata"] or {}).get("compaction")]
        assert len(marked) == 1, [s["metadata"] for s in states]
        facts = marked[0]["metadata"]["compaction"]
        first, last = facts["steps"]
        assert first == 1 and last in (2, 3) and facts["by"] == "anthropic/claude-sonnet-4-5"
        summarised = f"steps 1-{last} summarised"
        assert marked[0]["source"].startswith(f"**History compacted**: {summarised}")
        assert SUMMARY in marked[0]["source"]

        cell = cell_by_id(page, marked[0]["id"])
        cell.scroll_into_view_if_needed()
        expect(cell).to_have_class(re.compile(r"\brlm-compaction-cell\b"))
        badge = cell.locator(":scope > .rlm-badge")
        expect(badge).to_have_text("RLMcompacted")
        expect(badge.locator(".rlm-badge-state")).to_have_text("compacted")
        assert summarised in (badge.get_attribute("title") or "")
        # the rendered markdown: the header line and the summary
        expect(cell.locator(".jp-RenderedMarkdown")).to_contain_text("History compacted")
        expect(cell.locator(".jp-RenderedMarkdown")).to_contain_text("Next: print the rest")
        # the cells before it are all still there
        sources = "".join(s["source"] for s in states)
        assert all(f"s{n} = 'word ' * 600" in sources for n in range(1, 6))

        bar = status_bar_text(page)
        assert re.search(r"tok \([\d.]+k? cached\) · history compacted · \$", bar), bar
        assert "prompt cache:" in (page.locator("#jp-main-statusbar .rlm-status").first.get_attribute("title") or "")
        screenshot(page, request, "-cell")

        page.evaluate("() => window.jupyterapp.commands.execute('rlm-kernel:show-runs-panel')")
        detail = page.locator(f"{PANEL} .rlm-tree-item[data-kind='step'] .rlm-detail-text",
                              has_text="history compacted")
        expect(detail.first).to_have_text(f"history compacted ({summarised})", timeout=10_000)
        step = page.locator(f"{PANEL} .rlm-tree-item[data-kind='step'] .rlm-label", has_text="compacted")
        expect(step).to_have_text(f"Step {marked[0]['metadata']['step']} · compacted")
        screenshot(page, request, "-panel")
    finally:
        server.stop()
