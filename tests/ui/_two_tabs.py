"""A run watched by two tabs against one: the instant run of the live-speed
benchmark (_live_cells.InstantModel), timed from executing its %%rlm cell
until every cell of the run is rendered with its output, in one tab, then
with a second tab open on the same notebook (until both have it all). Part
of the live-speed benchmark (bench_live_speed.py): a ratio printed, never
asserted."""

from __future__ import annotations

from typing import Any

from _live_cells import _DROP_OLD_RUNS, _RUN_AND_WAIT, QUERY, WARM_QUERY
from labdriver import (
    LabServer,
    code_cell,
    open_notebook,
    rlm_magic,
    start_cell,
    wait_cell_executed,
    wait_cell_idle,
)

# In a second tab: resolves (with Date.now()) once a run newer than those in
# the notebook now has every cell rendered, as _RUN_AND_WAIT judges it.
_WAIT_RENDERED = """(steps) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const model = notebook.model;
  const old = new Set();
  for (let i = 0; i < model.cells.length; i++) {
    const meta = model.cells.get(i).getMetadata('rlm');
    if (meta && meta.run_id) old.add(meta.run_id);
  }
  window.__rlmRendered = new Promise((resolve, reject) => {
    const rendered = () => {
      let code = 0, thought = 0, answer = false;
      for (const cell of notebook.widgets) {
        const meta = cell.model.getMetadata('rlm');
        if (!meta || old.has(meta.run_id) || !cell.node.isConnected) continue;
        if (meta.role === 'code' && cell.node.querySelector('.jp-OutputArea-output')) code++;
        if (meta.role === 'thought' && cell.node.querySelector('.jp-RenderedMarkdown p')) thought++;
        if (meta.role === 'answer' && cell.node.textContent.includes('all steps done')) answer = true;
      }
      return code >= steps && thought >= steps && answer;
    };
    const finish = () => {
      if (!rendered()) return;
      observer.disconnect(); clearInterval(timer); clearTimeout(limit);
      resolve(Date.now());
    };
    const observer = new MutationObserver(finish);
    observer.observe(notebook.node, {childList: true, subtree: true, characterData: true});
    const timer = setInterval(finish, 25);
    const limit = setTimeout(() => { observer.disconnect(); clearInterval(timer);
                                     reject(new Error('the run did not render in the second tab within 30 s')); },
                             30000);
  });
}"""


def time_two_tabs(page: Any, lab: LabServer, url: str, steps: int, repeat: int, name: str) -> dict[str, list[float]]:
    """Seconds of ``repeat`` runs with one tab ('one'), then ``repeat`` with a
    second tab open on the same notebook ('two': until both tabs show it all)."""
    magic = rlm_magic(url, f"--max-iterations {steps + 1}", "--fresh", "--new", sub_model=False)
    keep = ["ctx", "warm", "bench"]
    path = lab.write_notebook(name, [
        code_cell("context = 'word ' * 1000", "ctx"),
        code_cell(f"{magic}\n{WARM_QUERY}", "warm"),
        code_cell(f"{magic}\n{QUERY}", "bench"),
    ], kernel="rlm")
    open_notebook(page, lab, path)
    start_cell(page, "ctx")
    wait_cell_executed(page, "ctx")
    start_cell(page, "warm")
    wait_cell_idle(page, "warm", timeout=60_000)
    times: dict[str, list[float]] = {"one": [], "two": []}
    second = None
    try:
        for tabs in ("one", "two"):
            if tabs == "two":
                # (a page of its own context: the bench's page was made by browser.new_page)
                second = page.context.browser.new_page(viewport={"width": 1400, "height": 900})
                second.on("dialog", lambda dialog: dialog.accept())
                open_notebook(second, lab, path)
            for _ in range(repeat):
                page.evaluate(_DROP_OLD_RUNS, keep)
                page.wait_for_timeout(300)
                if second is not None:
                    second.evaluate(_WAIT_RENDERED, steps)
                marks = page.evaluate(_RUN_AND_WAIT, ["bench", steps])
                total = marks["total"] / 1000
                if second is not None:
                    total = max(total, (second.evaluate("() => window.__rlmRendered") - marks["wall_start"]) / 1000)
                times[tabs].append(total)
                wait_cell_idle(page, "bench", timeout=60_000)
    finally:
        if second is not None:
            second.close()
    return times


__all__ = ["time_two_tabs"]
