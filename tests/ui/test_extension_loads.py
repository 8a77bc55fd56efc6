"""The labextension loads, and drives the live protocol end to end.

The kernel side here is a plain python3 kernel whose cells speak `rlm/1` by
hand (docs/live-protocol.md), so these tests exercise the extension alone,
without the RLM engine.
"""

from __future__ import annotations

import json
import re
import textwrap
import urllib.parse

import pytest
from _helpers import wait_for
from labdriver import (
    PLUGIN_ID,
    LabServer,
    cell_by_id,
    cell_output_text,
    notebook_cell_ids,
    open_in_notebook7,
    open_notebook,
    run_cell,
    save_notebook,
    screenshot,
    wait_notebook_ready,
)
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.ui

EMPTY_CODE_CELL = {
    "cell_type": "code",
    "source": "",
    "metadata": {},
    "outputs": [],
    "execution_count": None,
}

# Defines `op(...)`, `agent_cell(...)` and `as_step(cell_id, n)` in the
# kernel: a hand-written stand-in for the RLM kernel's live sink.
PROTOCOL_HELPERS = textwrap.dedent(
    """
    import contextlib, sys
    from comm import create_comm
    kernel = get_ipython().kernel
    request = kernel.get_parent("shell")
    ident = kernel._parent_ident["shell"]
    anchor = request["metadata"]["cellId"]
    RUN = "run-ui"

    def op(name, **fields):
        return {"protocol": "rlm/1", "op": name, "run_id": RUN, **fields}

    def agent_cell(cell_id, cell_type, source, role, step):
        return {"id": cell_id, "cell_type": cell_type, "source": source,
                "metadata": {"rlm": {"run_id": RUN, "step": step, "role": role}}}

    @contextlib.contextmanager
    def as_step(cell_id, n=1):
        # Publish under a synthetic parent whose msg_id names the cell.
        header = dict(request["header"], msg_id=f"rlm-{cell_id}-{n}")
        kernel.set_parent(ident, dict(request, header=header), "shell")
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            kernel.set_parent(ident, request, "shell")
    """
)


def new_notebook(lab: LabServer, name: str) -> str:
    return lab.write_notebook(f"{name}.ipynb", [dict(EMPTY_CODE_CELL, id=f"{name}-first")])


def status_text(page: Page) -> str:
    return page.locator(".rlm-status").inner_text()


def test_extension_activates(
    page: Page, console: list[str], lab_server: LabServer, request
) -> None:
    open_notebook(page, lab_server, new_notebook(lab_server, "activation"))

    installed = page.evaluate(f"() => window.jupyterapp.hasPlugin('{PLUGIN_ID}')")
    assert installed, (
        f"The rlm-kernel labextension is not installed in the environment running the tests "
        f"(plugin {PLUGIN_ID} unknown). Build it with `jlpm build:prod` in labextension/ and "
        "install the package (pip install -e .)."
    )
    assert page.evaluate(f"() => window.jupyterapp.isPluginActivated('{PLUGIN_ID}')")
    assert any("rlm-kernel: extension activated" in line for line in console), console

    # No run yet: the status item stays out of the status bar.
    expect(page.locator(".rlm-status")).to_be_hidden()

    # Saved notebooks keep widget state: the extension turned saveState on.
    plugin = urllib.parse.quote("@jupyter-widgets/jupyterlab-manager:plugin")
    page.wait_for_function(
        """async (url) => {
          const reply = await fetch(url);
          const body = await reply.json();
          return body.settings && body.settings.saveState === true;
        }""",
        arg=f"{lab_server.url}/lab/api/settings/{plugin}",
        timeout=15_000,
    )
    screenshot(page, request)


def test_live_cells_from_comm_ops(page: Page, lab_server: LabServer, request) -> None:
    open_notebook(page, lab_server, new_notebook(lab_server, "live"))

    first = PROTOCOL_HELPERS + textwrap.dedent(
        """
        link = create_comm(target_name="rlm", data=op(
            "run_started", anchor_cell_id=anchor, parent_msg_id=request["header"]["msg_id"],
            query="What is the answer?", max_iterations=5, depth=0))
        link.send(op("insert_cell", after_cell_id=anchor, cell=agent_cell(
            "ui-thought-1", "markdown", "Let me look at **the context** first.", "thought", 1)))
        link.send(op("insert_cell", after_cell_id="ui-thought-1", cell=agent_cell(
            "ui-code-1", "code", "print('hello from step 1')", "code", 1)))
        link.send(op("cell_started", cell_id="ui-code-1", msg_id="rlm-ui-code-1-1"))
        with as_step("ui-code-1"):
            print("hello from step 1")
        link.send(op("cell_finished", cell_id="ui-code-1", execution_count=101, status="ok",
                     metadata={"usage": {"tokens": 42}}))
        link.send(op("status", state="running", iteration=1, max_iterations=5, depth=0,
                     subcalls=1, tokens=950, cost_usd=0.0123, elapsed_s=3))
        print("driver: step 1 sent")
        """
    )
    anchor = run_cell(page, first)

    thought = cell_by_id(page, "ui-thought-1")
    code = cell_by_id(page, "ui-code-1")
    expect(code.locator(".jp-OutputArea")).to_contain_text("hello from step 1")
    assert "hello from step 1" not in cell_output_text(page, anchor)
    assert "driver: step 1 sent" in cell_output_text(page, anchor)
    expect(code.locator(".jp-InputPrompt")).to_contain_text("[101]")
    expect(page.locator(".rlm-status")).to_have_text(
        # The clock keeps ticking between status messages.
        re.compile(r"RLM step 1/5 · 1 sub-call · 950 tok · \$0\.012 · 0:0\d")
    )
    # Inserted right below the anchor, in order, markdown rendered.
    ids = notebook_cell_ids(page)
    assert ids[ids.index(anchor) + 1 : ids.index(anchor) + 3] == ["ui-thought-1", "ui-code-1"]
    expect(thought.locator(".jp-RenderedMarkdown strong")).to_have_text("the context")
    for cell in (thought, code):
        expect(cell).to_have_class(re.compile(r"\brlm-agent-cell\b"))
        expect(cell.locator(".rlm-badge")).to_have_text("RLM")
    # The merged metadata keeps the role and adds the usage.
    meta = page.evaluate(
        """() => {
          const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
          for (let i = 0; i < cells.length; i++) {
            if (cells.get(i).id === 'ui-code-1') return cells.get(i).getMetadata('rlm');
          }
        }"""
    )
    assert meta == {"run_id": "run-ui", "step": 1, "role": "code", "usage": {"tokens": 42}}
    screenshot(page, request, "-running")

    second = textwrap.dedent(
        """
        link.send(op("insert_cell", after_cell_id="ui-code-1", cell=agent_cell(
            "ui-answer-1", "markdown", "The answer is **42**.", "answer", 2)))
        link.send(op("status", state="ended", iteration=2, max_iterations=5, depth=0,
                     subcalls=3, tokens=1234, cost_usd=None, elapsed_s=65, reason="final"))
        link.send(op("run_ended", reason="final", answer_cell_id="ui-answer-1"))
        """
    )
    human = run_cell(page, second)
    answer = cell_by_id(page, "ui-answer-1")
    expect(answer).to_have_class(re.compile(r"\brlm-answer-cell\b"))
    expect(answer.locator(".rlm-badge")).to_have_text("RLM answer")
    expect(page.locator(".rlm-status")).to_have_text(
        "RLM step 2/5 · 3 sub-calls · 1.2k tok · price unknown · 1:05 · ended: final"
    )
    ids = notebook_cell_ids(page)
    start = ids.index(anchor)
    assert ids[start : start + 4] == [anchor, "ui-thought-1", "ui-code-1", "ui-answer-1"]
    assert ids.index(human) > ids.index("ui-answer-1")
    # Human cells carry no marker.
    expect(cell_by_id(page, human)).not_to_have_class(re.compile(r"rlm-agent-cell"))
    expect(cell_by_id(page, human).locator(".rlm-badge")).to_have_count(0)
    screenshot(page, request)

    # The saved .ipynb is the trajectory: ids, counts, metadata and outputs.
    save_notebook(page)
    saved = {c["id"]: c for c in lab_server.read_notebook("live.ipynb")["cells"]}
    step = saved["ui-code-1"]
    assert step["execution_count"] == 101
    assert step["metadata"]["rlm"]["role"] == "code"
    assert "".join(step["outputs"][0]["text"]) == "hello from step 1\n"
    assert saved["ui-answer-1"]["metadata"]["rlm"]["role"] == "answer"


def test_each_inserted_cell_is_one_undo_item(page: Page, lab_server: LabServer, request) -> None:
    """A burst of inserts must not become one undo item that deletes a whole run."""
    open_notebook(page, lab_server, new_notebook(lab_server, "undo"))
    burst = PROTOCOL_HELPERS + textwrap.dedent(
        """
        link = create_comm(target_name="rlm", data=op(
            "run_started", anchor_cell_id=anchor, parent_msg_id=request["header"]["msg_id"],
            query="q", max_iterations=5, depth=0))
        after = anchor
        for n in range(1, 5):
            cell = agent_cell(f"u-{n}", "markdown", f"step {n}", "thought", n)
            link.send(op("insert_cell", after_cell_id=after, cell=cell))
            after = cell["id"]
        """
    )
    anchor = run_cell(page, burst)
    ids = notebook_cell_ids(page)
    start = ids.index(anchor)
    assert ids[start : start + 5] == [anchor, "u-1", "u-2", "u-3", "u-4"]

    page.keyboard.press("Escape")
    for last in (4, 3, 2, 1):
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:undo-cell-action')")
        page.wait_for_function(
            """(id) => {
              const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
              return !Array.from({length: cells.length}, (_, i) => cells.get(i).id).includes(id);
            }""",
            arg=f"u-{last}",
        )
        remaining = [i for i in notebook_cell_ids(page) if i.startswith("u-")]
        assert remaining == [f"u-{n}" for n in range(1, last)]
    screenshot(page, request)


def test_outputs_route_by_parent(page: Page, lab_server: LabServer, request) -> None:
    """Display updates, waiting clears, errors and widgets land in the agent cell."""
    open_notebook(page, lab_server, new_notebook(lab_server, "outputs"))
    code = PROTOCOL_HELPERS + textwrap.dedent(
        """
        import ipywidgets
        from IPython.display import clear_output, display
        link = create_comm(target_name="rlm", data=op(
            "run_started", anchor_cell_id=anchor, parent_msg_id=request["header"]["msg_id"],
            query="q", max_iterations=3, depth=0))
        link.send(op("insert_cell", after_cell_id=anchor, cell=agent_cell(
            "ui-out-1", "code", "# outputs", "code", 1)))
        # No cell_started: routing by the msg_id's form alone.
        with as_step("ui-out-1", 3):
            print("gone soon")
            clear_output(wait=True)
            print("kept line")
            handle = display("display v1", display_id=True)
            handle.update("display v2")
            display(ipywidgets.IntSlider(value=7, description="slider"))
            try:
                1 / 0
            except ZeroDivisionError:
                get_ipython().showtraceback()
        """
    )
    anchor = run_cell(page, code)
    out = cell_by_id(page, "ui-out-1").locator(".jp-OutputArea")
    expect(out).to_contain_text("kept line")
    expect(out).to_contain_text("display v2")
    expect(out).to_contain_text("ZeroDivisionError")
    expect(out.locator(".widget-slider")).to_have_count(1)
    text = out.inner_text()
    assert "gone soon" not in text
    assert "display v1" not in text
    assert "kept line" not in cell_output_text(page, anchor)
    screenshot(page, request)


def test_saved_notebook_keeps_markers(page: Page, lab_server: LabServer, request) -> None:
    def cell(cell_id: str, cell_type: str, source: str, role: str) -> dict:
        base = {
            "id": cell_id,
            "cell_type": cell_type,
            "source": source,
            "metadata": {"rlm": {"run_id": "r0", "step": 1, "role": role}},
        }
        if cell_type == "code":
            base.update(outputs=[], execution_count=None)
        return base

    path = lab_server.write_notebook(
        "saved.ipynb",
        [
            cell("s-query", "code", "%%rlm\nHow many essays?", "query"),
            cell("s-thought", "markdown", "Count the headings.", "thought"),
            cell("s-code", "code", "len(context)", "code"),
            cell("s-answer", "markdown", "There are **49** essays.", "answer"),
            cell("s-human", "code", "1 + 1", "human"),
        ],
    )
    open_notebook(page, lab_server, path)
    expect(page.locator(".rlm-agent-cell")).to_have_count(3)
    expect(page.locator(".rlm-answer-cell")).to_have_count(1)
    expect(cell_by_id(page, "s-answer").locator(".rlm-badge")).to_have_text("RLM answer")
    for plain in ("s-query", "s-human"):
        expect(cell_by_id(page, plain).locator(".rlm-badge")).to_have_count(0)
    screenshot(page, request)


def test_reload_mid_run_resyncs(page: Page, lab_server_no_rtc: LabServer, request) -> None:
    """A reloaded page says hello; the kernel's resync puts the run's cells back
    (its own copy: without collaboration; with it, the document keeps them)."""
    lab_server = lab_server_no_rtc
    open_notebook(page, lab_server, new_notebook(lab_server, "resync"))
    setup = textwrap.dedent(
        """
        kernel = get_ipython().kernel
        request = kernel.get_parent("shell")
        ident = kernel._parent_ident["shell"]
        anchor = request["metadata"]["cellId"]
        hellos = []
        cells = [
            {"id": "r-thought", "cell_type": "markdown", "source": "Resynced thought",
             "metadata": {"rlm": {"run_id": "run-r", "step": 1, "role": "thought"}}},
            {"id": "r-code", "cell_type": "code", "source": "print('restored output')",
             "execution_count": 7, "outputs": [
                 {"output_type": "stream", "name": "stdout", "text": "restored output\\n"}],
             "metadata": {"rlm": {"run_id": "run-r", "step": 1, "role": "code"}}},
        ]

        def on_hello(comm, msg):
            data = msg["content"]["data"]
            hellos.append(data)
            comm.send({"protocol": "rlm/1", "op": "resync", "run_id": "run-r",
                       "anchor_cell_id": anchor, "cells": cells})

        kernel.comm_manager.register_target("rlm", on_hello)
        print("target ready")
        """
    )
    anchor = run_cell(page, setup)
    assert "target ready" in cell_output_text(page, anchor)
    save_notebook(page)

    page.reload()
    wait_notebook_ready(page)
    expect(cell_by_id(page, "r-code").locator(".jp-OutputArea")).to_contain_text("restored output")
    ids = notebook_cell_ids(page)
    assert ids[ids.index(anchor) : ids.index(anchor) + 3] == [anchor, "r-thought", "r-code"]
    expect(cell_by_id(page, "r-code").locator(".rlm-badge")).to_have_text("RLM")

    # Later steps of the run still stream into their cell, found by msg_id form.
    late = textwrap.dedent(
        """
        import sys
        current, current_ident = kernel.get_parent("shell"), kernel._parent_ident["shell"]
        kernel.set_parent(current_ident, dict(current, header=dict(current["header"], msg_id="rlm-r-code-2")), "shell")
        print("late line")
        sys.stdout.flush()
        kernel.set_parent(current_ident, current, "shell")
        print("late step sent")
        """
    )
    late_cell = run_cell(page, late)
    expect(cell_by_id(page, "r-code").locator(".jp-OutputArea")).to_contain_text("late line")
    assert cell_output_text(page, late_cell).strip() == "late step sent"

    probe = run_cell(page, "import json; print(json.dumps(hellos[-1]))")
    hello = json.loads(cell_output_text(page, probe).strip().splitlines()[-1])
    assert hello["protocol"] == "rlm/1"
    assert hello["op"] == "hello"
    assert hello["notebook_path"] == "resync.ipynb"
    assert hello["client_id"]
    screenshot(page, request)


def test_hello_on_connect_and_restart(page: Page, lab_server: LabServer, request) -> None:
    """Every kernel (re)connect opens a comm carrying `hello` (test kernels log it)."""
    path = new_notebook(lab_server, "hello")
    open_notebook(page, lab_server, path)
    wait_for(lambda: len(lab_server.hellos(path)) >= 1, what="hello on connect")
    page.wait_for_timeout(500)
    (first,) = lab_server.hellos(path)
    assert first["protocol"] == "rlm/1"
    assert first["op"] == "hello"
    assert first["client_id"]

    page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()"
    )
    wait_notebook_ready(page)
    wait_for(lambda: len(lab_server.hellos(path)) == 2, what="hello after restart")
    assert lab_server.hellos(path)[1]["client_id"] == first["client_id"]
    screenshot(page, request)


def test_notebook7_live_cells(page: Page, lab_server: LabServer, request) -> None:
    """The same extension works in Notebook 7 (no status bar there)."""
    pytest.importorskip("notebook", minversion="7", reason="Notebook 7 is not installed here")
    open_in_notebook7(page, lab_server, new_notebook(lab_server, "nb7"))
    code = PROTOCOL_HELPERS + textwrap.dedent(
        """
        link = create_comm(target_name="rlm", data=op(
            "run_started", anchor_cell_id=anchor, parent_msg_id=request["header"]["msg_id"],
            query="q", max_iterations=5, depth=0))
        link.send(op("insert_cell", after_cell_id=anchor, cell=agent_cell(
            "nb7-code", "code", "print('step')", "code", 1)))
        link.send(op("cell_started", cell_id="nb7-code", msg_id="rlm-nb7-code-1"))
        with as_step("nb7-code"):
            print("hello from Notebook 7")
        link.send(op("cell_finished", cell_id="nb7-code", execution_count=9, status="ok"))
        link.send(op("insert_cell", after_cell_id="nb7-code", cell=agent_cell(
            "nb7-answer", "markdown", "Answer: **42**", "answer", 2)))
        link.send(op("run_ended", reason="final", answer_cell_id="nb7-answer"))
        """
    )
    anchor = run_cell(page, code)
    code_cell = cell_by_id(page, "nb7-code")
    expect(code_cell.locator(".jp-OutputArea")).to_contain_text("hello from Notebook 7")
    expect(code_cell.locator(".rlm-badge")).to_have_text("RLM")
    expect(cell_by_id(page, "nb7-answer").locator(".rlm-badge")).to_have_text("RLM answer")
    ids = notebook_cell_ids(page)
    assert ids[ids.index(anchor) : ids.index(anchor) + 3] == [anchor, "nb7-code", "nb7-answer"]
    cell_by_id(page, "nb7-answer").scroll_into_view_if_needed()
    screenshot(page, request)
