"""The live run status moves step by step, in JupyterLab's status bar and in
the %%rlm cell's own output; a generated cell looks busy while it runs."""

from __future__ import annotations

import re
import time

import pytest
from labdriver import (
    CELLS,
    all_cells,
    cell_by_id,
    open_run_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

MAX_ITERATIONS = 6


def _step(n: int) -> Reply:
    return Reply(text=f"Step {n}.\n```repl\nimport time\nprint('step {n}')\ntime.sleep(0.6)\n"
                      f"tally = llm_query('count {n}')\n```", delay=0.6)


STEPS = [_step(1), _step(2), _step(3), _step(4), "FINAL(four steps)"]
# step, max, sub-calls, (done / running / queued while some are not done), tokens, cost, clock
STATUS = re.compile(r"RLM step (\d+)/(\d+)(?: · root model (?:thinking · \d+ s|writing · [\d.]+[kM]? tok))?"
                    r" · (\d+) sub-calls?(: [\d,]+ done(?:, [\d,]+ running)?(?:, [\d,]+ queued)?)?"
                    r" · ([\d.]+[kM]?) tok · (.*?) · (\d+:\d\d)")


RECORD = """() => {
  const record = window.__rlmRecord = {bar: [], cell: []};
  const model = window.jupyterapp.shell.currentWidget.content.model;
  const keep = (list, text) => { if (text && list[list.length - 1] !== text) list.push(text); };
  const sample = () => {
    const item = document.querySelector('#jp-main-statusbar .rlm-status');
    keep(record.bar, item ? item.innerText : '');
    for (let i = 0; i < model.cells.length; i++) {
      const c = model.cells.get(i);
      if (c.id === 'ask') keep(record.cell, c.outputs.toJSON().map(o => o.data ? o.data['text/plain'] : '').join(''));
    }
  };
  new MutationObserver(sample).observe(document.body, {subtree: true, childList: true, characterData: true});
  setInterval(sample, 50);
}"""


def _open_run(page: Page, lab_server, name: str, steps: list, *options: str) -> tuple[ScriptedServer, str]:
    server = ScriptedServer(Script(root=steps, sub=lambda p: Reply(text=f"ok {p}", delay=0.2))).start()
    path = open_run_notebook(page, lab_server, f"{name}.ipynb", "context = 'word ' * 1000",
                             f"{rlm_magic(server.url, *options)}\nWalk four steps.")
    return server, path


def _tokens(text: str) -> float:
    scale = {"k": 1000, "M": 1_000_000}.get(text[-1:], 1)
    return float(text.rstrip("kM")) * scale


def test_status_bar_updates_step_by_step(page: Page, lab_server, request) -> None:
    server, _ = _open_run(page, lab_server, "status", STEPS, f"--max-iterations {MAX_ITERATIONS}")
    try:
        # The page records every text the status bar and the cell's status
        # line show, as they change: a poll from here, slowed by a loaded
        # machine, could miss a step that lasted a second.
        page.evaluate(RECORD)
        start_cell(page, "ask")
        shot_at_2 = False
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            bar = page.evaluate("() => window.__rlmRecord.bar")
            if not shot_at_2 and any("step 2/" in t for t in bar):
                shot_at_2 = True
                screenshot(page, request, "-step2")
            if bar and "ended" in bar[-1]:
                break
            time.sleep(0.1)
        wait_cell_idle(page, "ask", timeout=10_000)
        screenshot(page, request, "-ended")
        bar, cell = page.evaluate("() => [window.__rlmRecord.bar, window.__rlmRecord.cell]")
    finally:
        server.stop()

    parsed = [STATUS.match(t) for t in bar]
    assert all(parsed), [t for t, m in zip(bar, parsed, strict=True) if not m]
    steps = [int(m.group(1)) for m in parsed]
    assert {1, 2, 3, 4} <= set(steps), bar
    assert steps == sorted(steps), f"the step went backwards: {bar}"
    assert all(int(m.group(2)) == MAX_ITERATIONS for m in parsed), bar
    assert not any("depth" in t for t in bar), bar  # "depth 0" meant nothing to a newcomer
    assert any("root model thinking" in t for t in bar), bar  # each step's model call takes 0.6 s
    subcalls = [int(m.group(3)) for m in parsed]
    assert subcalls == sorted(subcalls) and subcalls[-1] == 4, bar
    # A sub-call in flight shows as running, not as done (each takes 0.2 s here).
    assert any(m.group(4) and "1 running" in m.group(4) for m in parsed), bar
    assert parsed[-1].group(4) is None, bar  # all done at the end: just the count
    assert all(m.group(6) == "price unknown" for m in parsed), bar  # the scripted models have no price
    tokens = [_tokens(m.group(5)) for m in parsed]
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0], bar
    assert len({m.group(7) for m in parsed}) >= 3, f"the clock did not tick: {bar}"
    assert "ended: final" in bar[-1], bar
    running = [t for t in bar if "ended" not in t]
    assert len(running) >= 5, bar

    # The %%rlm cell's status line moved through the same steps.
    cell_steps = [int(m.group(1)) for m in (re.search(r"step (\d+)/", t) for t in cell) if m]
    assert {1, 2, 3, 4} <= set(cell_steps), cell
    assert cell[-1].startswith("RLM final · step 5/6"), cell
    # one status line in the %%rlm cell, drawn again in place (not one more per redraw)
    assert len(re.findall(r"RLM (?:·|final|ended|interrupted)", cell[-1])) == 1, cell[-1]
    print("\n".join(bar))


def test_running_agent_cell_shows_busy_prompt(page: Page, lab_server, request) -> None:
    """Like a cell a human runs: [*] while the code runs, its number after."""
    steps = ["Sleep a while.\n```repl\nimport time\nprint('started', flush=True)\ntime.sleep(3)\n"
             "print('finished')\n```", "FINAL(done)"]
    server, _ = _open_run(page, lab_server, "busy-prompt", steps)
    try:
        start_cell(page, "ask")
        page.wait_for_selector(f"{CELLS} .jp-OutputArea-output:has-text('started')", timeout=60_000)
        code = next(c for c in all_cells(page) if c["role"] == "code")
        prompt = cell_by_id(page, code["id"]).locator(".jp-InputPrompt")
        during = prompt.inner_text()
        screenshot(page, request, "-running")
        state_during = code["state"]
        expect(cell_by_id(page, code["id"]).locator(".jp-OutputArea")).to_contain_text("finished", timeout=10_000)
        wait_cell_idle(page, "ask", timeout=15_000)
        after = prompt.inner_text()
    finally:
        server.stop()
    assert re.fullmatch(r"\[\d+\]:", after.strip()), after
    assert during.strip() == "[*]:" and state_during == "running", (
        f"a generated cell that is still running shows {during.strip()!r} (executionState {state_during!r})")
