"""rlm_query from a generated cell starts a child run (another root-model
conversation on the same scripted server); its steps show, as they happen,
in a collapsible section of the sub-call widget, not as notebook cells."""

from __future__ import annotations

from typing import Any

import pytest
from labdriver import (
    CELLS,
    all_cells,
    open_run_notebook,
    rlm_magic,
    save_notebook,
    saved_cells_by_id,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

CHILD_QUERY = "`context` holds a task"  # what spawn_child asks when rlm_query gets no context

PARENT = [
    "Delegating to a child run.\n"
    "```repl\nchild = rlm_query('CHILD TASK: count the needles')\nprint('child said:', child)\n```",
    "The child answered.\nFINAL_VAR(child)",
]
CHILD = [
    Reply(text="Child step one.\n```repl\nprint('child step one sees', len(context), 'chars')\n```", delay=0.3),
    # Slow, so the test can look at the section while the child is still running.
    Reply(text="Child step two.\n```repl\nchild_answer = 'three needles'\nprint('child step two done')\n```\n"
               "FINAL_VAR(child_answer)", delay=3.0),
]


class Conversations:
    """Tells the parent's conversation from the child's by the first user
    message, and answers by the number of assistant turns so far."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        messages = body.get("messages", [])
        first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        who = "child" if CHILD_QUERY in first_user else "parent"
        self.seen.append((who, turn))
        script = CHILD if who == "child" else PARENT
        return script[turn] if turn < len(script) else "FINAL(out of script)"


def test_child_run_steps_show_inside_the_subcall_widget(page: Page, lab_server, request) -> None:
    conversations = Conversations()
    with ScriptedServer(conversations) as server:
        path = open_run_notebook(page, lab_server, "child.ipynb", "context = 'needle ' * 300",
                                 f"{rlm_magic(server.url)}\nHow many needles?")
        start_cell(page, "ask")

        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        widget.wait_for(timeout=60_000)
        expect(widget.locator(".rlm-sc-title")).to_contain_text("rlm_query")
        section = widget.locator(".jupyter-widget-Accordion, .widget-accordion").first
        expect(section).to_be_attached(timeout=15_000)
        header = section.locator(".jupyter-widget-Collapse-header, .lm-AccordionPanel-title, .p-Collapse-header").first
        expect(header).to_contain_text("child run 1", timeout=15_000)
        contents = section.locator(".jupyter-widget-Collapse-contents, .lm-AccordionPanel > .lm-Widget, "
                                   ".p-Collapse-contents").first
        # Collapsed until clicked.
        expect(contents).to_be_hidden()
        header.click()
        expect(contents).to_be_visible()

        # While the child waits for its second reply, its first step is already listed.
        expect(contents).to_contain_text("child step one sees", timeout=15_000)
        expect(contents).to_contain_text("Child step one.")
        expect(contents).to_contain_text("print('child step one sees', len(context), 'chars')")
        assert "child step two done" not in contents.inner_text()
        expect(widget.locator(".rlm-sc-row").first).to_have_attribute("data-status", "running")
        screenshot(page, request, "-child-running")

        expect(contents).to_contain_text("child step two done", timeout=15_000)
        wait_cell_idle(page, "ask", timeout=30_000)
        expect(widget.locator(".rlm-sc-row").first).to_have_attribute("data-status", "done")
        expect(widget.locator(".rlm-sc-title")).to_contain_text("1 of 1 done")
        expect(page.locator(".rlm-answer-cell")).to_contain_text("three needles")
        contents.scroll_into_view_if_needed()
        screenshot(page, request, "-child-done")
        text = contents.inner_text()
        assert text.index("Child step one.") < text.index("child step one sees") < text.index("Child step two.") \
            < text.index("child step two done"), text

        # The child's steps are not notebook cells: only the parent's cells were inserted.
        agent = [c for c in all_cells(page) if c["role"] in ("thought", "code", "answer")]
        assert [(c["role"], c["step"]) for c in agent] == [
            ("thought", 1), ("code", 1), ("thought", 2), ("answer", 2)], agent
        assert "child said: three needles" in agent[1]["output"]
        assert conversations.seen == [("parent", 0), ("child", 0), ("child", 1), ("parent", 1)], conversations.seen

        # Collapsing hides the steps again.
        header.click()
        expect(contents).to_be_hidden()

        save_notebook(page)
        saved = saved_cells_by_id(lab_server.read_notebook(path))
        record = saved[agent[1]["id"]]["metadata"]["rlm"]["subcalls"][0]
        assert record["kind"] == "rlm" and record["status"] == "done" and record["response"] == "three needles"
        child_roles = [c["metadata"]["rlm"]["role"] for c in record["child"]["cells"]]
        assert child_roles.count("code") == 2 and child_roles[-1] == "answer", child_roles
