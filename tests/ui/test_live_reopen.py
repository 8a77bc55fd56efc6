"""Save a finished %%rlm run, close it, shut its kernel down and open it
again: the agent cells, their badges, outputs and the batched sub-call
widget (from the widget state saved in the notebook) all render again."""

from __future__ import annotations

import pytest
from labdriver import (
    CELLS,
    all_cells,
    cell_by_id,
    open_notebook,
    open_run_notebook,
    rlm_magic,
    save_notebook,
    screenshot,
    shutdown_session,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

BATCH = 6
CONTEXT = "context = 'alpha beta gamma ' * 300"
QUESTION = "Summarise each section."
STEPS = [
    "I will ask about each section.\n"
    f"```repl\nparts = [f'section {{i}}' for i in range({BATCH})]\n"
    "notes = llm_query_batched(parts)\nprint('got', len(notes), 'notes')\n```",
    "```repl\nsummary = '; '.join(notes)\nprint(summary[:60])\n```\nFINAL_VAR(summary)",
]
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SHOWN_MS = 30_000  # for a reopened notebook's widget view to render: ipywidgets restores its model from the file


def _sub(prompt: str) -> Reply:
    return Reply(text=f"note on {prompt}", delay=0.2)


# The batch cell's widget view in the state ipywidgets' restore race leaves it.
_LOSE_THE_MODEL = """async (cellId) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const cell = notebook.widgets.find(c => c.model.id === cellId);
  const item = cell.outputArea.widgets.find(w => (w.widgets || []).some(r => r._manager));
  const renderer = item.widgets.find(r => r._manager);
  const model = cell.outputArea.model.get(cell.outputArea.widgets.indexOf(item));
  const manager = await renderer._manager.promise;
  const id = model.data['application/vnd.jupyter.widget-view+json'].model_id;
  const kept = manager._models[id];
  delete manager._models[id];
  await renderer.renderModel(model);
  setTimeout(() => { manager._models[id] = kept; }, 700);
  return renderer.node.textContent;
}"""


def test_saved_run_reopens_with_widgets(page: Page, lab_server, request) -> None:
    with ScriptedServer(Script(root=STEPS, sub=_sub)) as server:
        path = open_run_notebook(page, lab_server, "reopen.ipynb", CONTEXT, f"{rlm_magic(server.url)}\n{QUESTION}")
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_have_count(1, timeout=10_000)
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        expect(widget).to_contain_text(f"{BATCH} of {BATCH} done")
        before = all_cells(page)
        agent_before = [c for c in before if c["role"] in ("thought", "code", "answer")]
        badges_before = page.locator(".rlm-badge").count()
        screenshot(page, request, "-before")
        save_notebook(page)

    # The file: agent cells with metadata and outputs, the widget view in the
    # batch cell's outputs and its model in metadata.widgets.
    saved = lab_server.read_notebook(path)
    state = saved["metadata"].get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    assert state, f"no widget state saved: {saved['metadata'].keys()}"
    batch_cell = next(c for c in saved["cells"] if "llm_query_batched" in "".join(c["source"]))
    views = [o["data"][WIDGET_VIEW]["model_id"] for o in batch_cell["outputs"]
             if o.get("data", {}).get(WIDGET_VIEW)]
    assert views, f"the batch cell saved no widget view: {batch_cell['outputs']}"
    assert all(v in state for v in views), (views, list(state))
    assert any("text/markdown" in o.get("data", {}) for o in batch_cell["outputs"]), "no markdown fallback"
    vbox = state[views[0]]
    assert vbox["model_name"] == "VBoxModel", vbox
    children = [ref.removeprefix("IPY_MODEL_") for ref in vbox["state"]["children"]]
    assert all(child in state for child in children), "a child model of the widget was not saved"
    # The batch's rows are saved in its list's state (the page keeps them current).
    [rows] = [state[c]["state"].get("rows") for c in children if state[c]["model_name"] == "SubcallListModel"]
    assert [row["s"] for row in rows] == ["done"] * BATCH, rows
    assert rows[0]["r"] == "note on section 0", rows[0]
    saved_roles = [c["metadata"].get("rlm", {}).get("role") for c in saved["cells"]]
    assert [r for r in saved_roles if r in ("thought", "code", "answer")] == [c["role"] for c in agent_before]

    # Close the tab, shut the kernel down, leave the page; then open the notebook again.
    page.evaluate("() => window.jupyterapp.commands.execute('application:close-all')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget"
                           " || !window.jupyterapp.shell.currentWidget.context")
    assert shutdown_session(page, path) == 1
    page.goto("about:blank")
    said: list[str] = []
    page.on("console", lambda message: said.append(message.text))
    open_notebook(page, lab_server, path)

    after = all_cells(page)
    assert [(c["id"], c["role"], c["count"]) for c in after] == [(c["id"], c["role"], c["count"]) for c in before]
    for old, new in zip(before, after, strict=True):
        assert new["output"] == old["output"], (old, new)
    expect(page.locator(".rlm-agent-cell")).to_have_count(len(agent_before))
    expect(page.locator(".rlm-answer-cell")).to_have_count(1)
    expect(page.locator(".rlm-badge")).to_have_count(badges_before)
    batch_id = next(c["id"] for c in after if "llm_query_batched" in c["source"])
    batch = cell_by_id(page, batch_id)
    expect(batch.locator(".rlm-badge")).to_have_text("RLM")
    reopened = batch.locator(".rlm-subcall-widget")
    batch.scroll_into_view_if_needed()  # a windowed notebook renders a cell's outputs once it is in view
    try:
        expect(reopened).to_have_count(1, timeout=SHOWN_MS)
    except AssertionError:
        screenshot(page, request, "-no-widget")
        raise AssertionError(f"the reopened batch cell shows no widget: {batch.inner_text()!r}") from None
    expect(reopened).to_contain_text(f"{BATCH} of {BATCH} done")
    expect(reopened.locator(".rlm-sc-row[data-status='done']")).to_have_count(BATCH)
    expect(reopened.locator(".widget-progress, progress, .progress-bar").first).to_be_attached()
    # A row still opens to show its prompt and its response.
    reopened.locator(".rlm-sc-row .rlm-sc-preview").first.click()
    expect(reopened.locator(".rlm-sc-detail .rlm-sc-prompt")).to_contain_text("section 0")
    expect(reopened.locator(".rlm-sc-detail .rlm-sc-response")).to_contain_text("note on section 0")
    # Without its kernel side the view says it is a saved one, shows no dead edit
    # action and no broken-link icon on each part.
    expect(reopened.locator(".widget-button", has_text="Edit response")).to_be_hidden()
    expect(reopened.locator(".rlm-sc-row-edit")).to_have_count(BATCH)
    for edit in reopened.locator(".rlm-sc-row-edit").all():
        expect(edit).to_be_hidden()
    note = reopened.evaluate("el => getComputedStyle(el.closest('.rlm-subcall-widget'), '::after').content")
    assert "Saved view" in note, note
    icons = reopened.evaluate("el => [...el.querySelectorAll('.jupyter-widgets-disconnected')]"
                              ".filter(n => getComputedStyle(n, '::before').display !== 'none').length")
    assert icons == 0, icons
    # A model-less frontend would show the markdown form instead: nothing says "Error" or "Loading".
    assert "Error displaying widget" not in batch.inner_text()
    answer = page.locator(".rlm-answer-cell")
    expect(answer).to_contain_text("note on section 0")
    screenshot(page, request, "-reopened")
    print("\n".join(line for line in said if "widget view" in line) or "(ipywidgets found the saved models itself)")

    # The race of ipywidgets' two restores (widgetviews.ts), made to happen: the
    # view's model is taken out of the manager, the view rendered again (it then
    # shows "model not found" for good), and the model put back 0.7 s later. The
    # page renders the view again once the model is there.
    lost = page.evaluate(_LOSE_THE_MODEL, batch_id)
    assert lost == "Error displaying widget: model not found", lost
    expect(reopened).to_contain_text(f"{BATCH} of {BATCH} done", timeout=20_000)
    expect(reopened.locator(".rlm-sc-row[data-status='done']")).to_have_count(BATCH)
    assert any("rendered the saved widget view" in line for line in said), said
    screenshot(page, request, "-rendered-again")


def test_reopened_run_keeps_widgets_through_another_save(page: Page, lab_server, request) -> None:
    """Open a saved run (fresh kernel), save it again, reopen: the sub-call
    widget must still be there, in the file and on screen."""
    with ScriptedServer(Script(root=STEPS, sub=_sub)) as server:
        path = open_run_notebook(page, lab_server, "resave.ipynb", CONTEXT, f"{rlm_magic(server.url)}\n{QUESTION}")
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_have_count(1, timeout=10_000)
        save_notebook(page)
    first_state = lab_server.read_notebook(path)["metadata"]["widgets"][WIDGET_STATE]["state"]
    assert first_state

    resaved_state = None
    for cycle in (1, 2):
        page.evaluate("() => window.jupyterapp.commands.execute('application:close-all')")
        assert shutdown_session(page, path) == 1
        page.goto("about:blank")
        open_notebook(page, lab_server, path)
        batch_id = next(c["id"] for c in all_cells(page) if "llm_query_batched" in c["source"])
        batch = cell_by_id(page, batch_id)
        batch.scroll_into_view_if_needed()
        widget = batch.locator(".rlm-subcall-widget")
        try:
            expect(widget).to_have_count(1, timeout=SHOWN_MS)
        except AssertionError:
            screenshot(page, request, f"-reopen-{cycle}-no-widget")
            raise AssertionError(f"reopen #{cycle}: the sub-call widget is not shown: {batch.inner_text()!r}") from None
        expect(widget).to_contain_text(f"{BATCH} of {BATCH} done")
        screenshot(page, request, f"-reopen-{cycle}")
        if cycle == 1:
            # A human looks at the run, changes nothing, and saves.
            save_notebook(page)
            resaved_state = lab_server.read_notebook(path)["metadata"].get("widgets", {}).get(
                WIDGET_STATE, {}).get("state")
    assert resaved_state and set(first_state) <= set(resaved_state), (
        f"saving the reopened notebook dropped the widget state: {len(first_state)} models -> "
        f"{len(resaved_state or {})}")
