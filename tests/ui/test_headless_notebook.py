"""A notebook written by a headless run opens in JupyterLab showing the run."""

from __future__ import annotations

from labdriver import CELLS, open_notebook, screenshot
from playwright.sync_api import Page

from rlm_kernel import RLM
from rlm_kernel.testing.server import Script, ScriptedServer

STEPS = [
    "Let me measure the context.\n```repl\nprint(len(context))\n```",
    "```repl\nparts = llm_query_batched(['summarise: ' + context[:20], 'summarise: ' + context[20:40]])\nprint(parts)\n```",
    "```repl\nsummary = ' / '.join(parts)\n```\nFINAL_VAR(summary)",
]


def test_headless_notebook_opens_with_the_whole_run(page: Page, lab_server, request) -> None:
    with ScriptedServer(Script(root=STEPS)) as server:
        rlm = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=server.url)
        result = rlm.completion("a haystack of words " * 100, "Summarise the context.",
                                output=lab_server.root_dir / "headless.ipynb")
    assert result.reason == "final"
    open_notebook(page, lab_server, "headless.ipynb")
    page.locator(f"{CELLS}").first.wait_for()
    # A thought, three code cells, the FINAL_VAR line and the answer: all badged.
    assert page.locator(".rlm-agent-cell").count() == 6
    assert page.locator(".rlm-answer-cell").count() == 1
    text = page.locator(".jp-NotebookPanel:visible .jp-Notebook").inner_text()
    assert "Let me measure the context." in text
    assert "2000" in text  # the first cell's output
    assert "llm_query_batched" in text and "2 of 2 done" in text  # the sub-call view's markdown form
    assert "Final answer" in text and "summary" in text
    screenshot(page, request)
