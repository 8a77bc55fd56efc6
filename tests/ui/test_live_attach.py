"""A live run's cells are on the page as they arrive, in real JupyterLab:
every cell a run inserts is attached (its editor made, its outputs shown) in
the frame that inserted it. JupyterLab leaves an inserted cell a blank
placeholder until the page is idle, and a fast run kept the page busy enough
that up to half of a 30-step run's cells were still blank when its answer
came (labextension/src/attach.ts)."""

from __future__ import annotations

import pytest
from labdriver import CELLS, open_run_notebook, rlm_magic, screenshot, start_cell, wait_cell_idle
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

STEPS = 12
SCRIPT = [f"Step {k}.\n```repl\nprint('step', {k})\n```" for k in range(1, STEPS + 1)] + ["FINAL(all steps done)"]

# Right after each frame that adds cells of the run (one microtask, run once
# the frame's work is over), whether the newest of them is still a
# placeholder, and which others are (printed). The frame attaches what it
# inserted; without attach.ts, no cell is attached before the page is idle.
_WATCH = """() => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const seen = window.__rlmAttach = {frames: 0, checked: [], placeholders: [], later: []};
  let added = [];
  const check = () => {
    const batch = added;
    added = [];
    const shown = batch.map(model => [model, notebook.widgets.findIndex(w => w.model === model)])
                       .filter(([, index]) => index >= 0)  // a draft taken back in the same frame
                       .sort((a, b) => a[1] - b[1]);
    if (!shown.length) return;
    seen.frames++;
    shown.forEach(([model, index], k) => {
      const meta = model.getMetadata('rlm');
      const label = `${meta.role} ${meta.step ?? ''}`.trim();
      seen.checked.push(label);
      if (notebook.widgets[index].isPlaceholder()) {
        (k === shown.length - 1 ? seen.placeholders : seen.later).push(label);
      }
    });
  };
  notebook.model.cells.changed.connect((_, change) => {
    if (change.type !== 'add') return;
    for (const model of change.newValues) {
      const meta = model.getMetadata('rlm');
      if (!meta || !meta.run_id) continue;
      if (!added.length) queueMicrotask(check);
      added.push(model);
    }
  });
  return notebook.notebookConfig.windowingMode;
}"""

# Every cell of the run, once it ended: none is left a placeholder.
_RUN_PLACEHOLDERS = """() => window.jupyterapp.shell.currentWidget.content.widgets
  .filter(w => (w.model.getMetadata('rlm') || {}).run_id && w.isPlaceholder()).length"""


def test_each_cell_of_a_fast_run_is_attached_in_the_frame_that_inserted_it(page: Page, lab_server, request) -> None:
    with ScriptedServer(Script(root=SCRIPT)) as server:
        open_run_notebook(page, lab_server, "attach.ipynb", "context = 'word ' * 1000",
                          f"{rlm_magic(server.url, f'--max-iterations {STEPS + 1}', sub_model=False)}\nWalk through.")
        mode = page.evaluate(_WATCH)
        assert mode == "contentVisibility", f"JupyterLab's default windowing mode changed: {mode}"
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=90_000)
    seen = page.evaluate("() => window.__rlmAttach")
    # Every thought and code cell of the run, and its answer, was checked.
    assert len(seen["checked"]) >= 2 * STEPS + 1, seen["checked"]
    assert seen["placeholders"] == [], (
        f"the newest cell of {len(seen['placeholders'])} of {seen['frames']} frames was left a placeholder: "
        f"{seen['placeholders']}")
    print(f"{seen['frames']} frames added the run's cells; cells left to a later frame: {seen['later']}")
    page.wait_for_function(_RUN_PLACEHOLDERS + " === 0", timeout=10_000)
    expect(page.locator(f"{CELLS}.rlm-answer-cell")).to_have_count(1, timeout=10_000)
    outputs = page.locator(f"{CELLS} .jp-OutputArea-output:has-text('step {STEPS}')")
    expect(outputs).to_have_count(1)
    screenshot(page, request)
