"""A run watched by two tabs against one: the instant run of the live-speed
benchmark (_live_cells.InstantModel), timed from executing its %%rlm cell
until every cell of the run is rendered with its output, in one tab, then
with a second tab open on the same notebook (until both have it all). Part
of the live-speed benchmark (bench_live_speed.py): a ratio printed, never
asserted."""

from __future__ import annotations

from typing import Any

from _live_cells import _DROP_OLD_RUNS, _RUN_AND_WAIT, NEW_RUN_RENDERED, QUERY, open_warmed_notebook
from labdriver import LabServer, open_notebook, rlm_magic, wait_cell_idle

# In a second tab: resolves (with Date.now()) once a run newer than those in
# the notebook now has every cell rendered, as _RUN_AND_WAIT judges it.
_WAIT_RENDERED = """(steps) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const model = notebook.model;
  /*NEW_RUN_RENDERED*/
  window.__rlmRendered = new Promise((resolve, reject) => {
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
}""".replace("/*NEW_RUN_RENDERED*/", NEW_RUN_RENDERED)


def time_two_tabs(page: Any, lab: LabServer, url: str, steps: int, repeat: int, name: str) -> dict[str, list[float]]:
    """Seconds of ``repeat`` runs with one tab ('one'), then ``repeat`` with a
    second tab open on the same notebook ('two': until both tabs show it all)."""
    magic = rlm_magic(url, f"--max-iterations {steps + 1}", "--fresh", "--new", sub_model=False)
    keep = ["ctx", "warm", "bench"]
    path = open_warmed_notebook(page, lab, name, "context = 'word ' * 1000", magic, {"bench": f"{magic}\n{QUERY}"})
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
