"""A run watched by several pages, reloaded, or by none (tests/ui/test_live_viewers*.py):
its scripted model, the cells it should leave, and waits on what the
notebook and the server show."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from labdriver import LabServer, all_cells, cell_state, output_text, status_bar_text
from playwright.sync_api import Page

from rlm_kernel.testing.server import Reply, Script

# A 5-step run: two cells of 2 seconds, a batch of 3 sub-calls, then FINAL_VAR.
STEPS = [
    "Step one: look around.\n```repl\nprint('step one output')\n```",
    "Step two: wait.\n```repl\nimport time\ntime.sleep(2)\nprint('slept 2000')\n```",
    "Step three: a batch.\n```repl\nnotes = llm_query_batched(['north', 'south', 'east'])\nprint('notes:', notes)\n```",
    "Step four: wait again.\n```repl\ntime.sleep(2)\nprint('slept again 6000')\n```",
    "Done.\n```repl\nresult = ' / '.join(notes)\n```\nFINAL_VAR(result)",
]
# (role, step) of the cells the run leaves below its %%rlm cell.
EXPECTED = [
    ("thought", 1), ("code", 1), ("thought", 2), ("code", 2), ("thought", 3), ("code", 3),
    ("thought", 4), ("code", 4), ("thought", 5), ("code", 5), ("thought", 5), ("answer", 5),
]
# What each code cell prints, by step (the last one prints nothing).
PRINTED = {1: "step one output\n", 2: "slept 2000\n", 4: "slept again 6000\n"}
ANSWER = "note on north / note on south / note on east"
AGENT_ROLES = ("thought", "code", "answer")
CONTEXT_CELL = "context = 'a map of the four winds ' * 200\nprint('context loaded:', len(context))"


def script(think_s: float = 0.0) -> Script:
    """The run's scripted model; ``think_s``: how long it takes over step
    three's reply (a page reloaded during step two is back before the run ends)."""
    root: list[Any] = list(STEPS)
    root[2] = Reply(text=STEPS[2], delay=think_s)
    return Script(root=root, sub=lambda prompt: Reply(text=f"note on {prompt}", delay=0.4))


def agent_cells(page: Page) -> list[dict[str, Any]]:
    return [c for c in all_cells(page) if c["role"] in AGENT_ROLES]


def run_shape(cells: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(c["role"], c["step"]) for c in cells if c["role"] in AGENT_ROLES]


def describe(cells: list[dict[str, Any]]) -> str:
    """Every cell of a notebook, one line each, for a failing assertion."""
    return "\n".join(
        f"  {c.get('index', i)}: {c['id'][:12]:<12} {c.get('type', ''):<8} role={c['role']} step={c['step']} "
        f"count={c['count']} state={c.get('state')} output={c['output'][:60]!r}"
        for i, c in enumerate(cells))


def wait_for_run(page: Page, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Until the notebook in ``page`` holds the whole run, finished: every
    expected cell, each code cell with its count, the %%rlm cell idle with its
    own count. Returns every cell; fails with them all listed."""
    deadline = time.monotonic() + timeout
    while True:
        cells = all_cells(page)
        ask = next((c for c in cells if c["id"] == "ask"), None)
        codes = [c for c in cells if c["role"] == "code"]
        if (run_shape(cells) == EXPECTED and all(c["count"] is not None and c["state"] != "running" for c in codes)
                and ask is not None and ask["count"] is not None and ask["state"] != "running"):
            return cells
        if time.monotonic() > deadline:
            raise AssertionError(f"the notebook never held the whole finished run:\n{describe(cells)}")
        page.wait_for_timeout(100)


def check_run(cells: list[dict[str, Any]], where: str) -> None:
    """The run as it should be, exactly once: ids unique, the cells in order
    below the %%rlm cell, each output printed once, counts after the %%rlm
    cell's own, the answer in the %%rlm cell and in the answer cell."""
    ids = [c["id"] for c in cells]
    assert len(ids) == len(set(ids)), f"{where}: a cell id is there twice:\n{describe(cells)}"
    assert run_shape(cells) == EXPECTED, f"{where}: not the run's cells, once each:\n{describe(cells)}"
    start = ids.index("ask")
    agent = cells[start + 1:start + 1 + len(EXPECTED)]
    assert run_shape(agent) == EXPECTED, f"{where}: the run's cells are not right below the %%rlm cell:\n{describe(cells)}"
    ask = cells[start]
    codes = [c for c in agent if c["role"] == "code"]
    for cell in codes:
        printed = PRINTED.get(cell["step"], "notes: [" if cell["step"] == 3 else None)
        if printed is not None:
            assert cell["output"].count(printed) == 1, (
                f"{where}: step {cell['step']} should show {printed!r} once:\n{describe(cells)}")
    counts = [c["count"] for c in codes]
    assert counts == list(range(ask["count"] + 1, ask["count"] + 1 + len(codes))), (
        f"{where}: counts {counts} after the %%rlm cell's {ask['count']}:\n{describe(cells)}")
    assert ask["output"].startswith("RLM final · step 5/"), f"{where}: the %%rlm cell shows {ask['output']!r}"
    assert ask["output"].count(ANSWER) == 1, f"{where}: the %%rlm cell shows {ask['output']!r}"
    assert ANSWER in agent[-1]["source"], agent[-1]


def check_saved(saved: dict[str, Any], where: str) -> None:
    """The file on disk holds the run once, with its outputs and counts."""
    cells = [{"id": c["id"], "role": c.get("metadata", {}).get("rlm", {}).get("role"),
              "step": c.get("metadata", {}).get("rlm", {}).get("step"), "count": c.get("execution_count"),
              "state": None, "output": "".join(output_text(o) for o in c.get("outputs", [])),
              "source": "".join(c["source"]) if isinstance(c["source"], list) else c["source"]}
             for c in saved["cells"]]
    check_run(cells, where)


def _answered(saved: dict[str, Any]) -> bool:
    roles = [c.get("metadata", {}).get("rlm", {}).get("role") for c in saved["cells"]]
    ask = next((c for c in saved["cells"] if c["id"] == "ask"), {})
    return "answer" in roles and ask.get("execution_count") is not None


def wait_saved_run(lab: LabServer, path: str, timeout: float = 30.0,
                   done: Callable[[dict[str, Any]], bool] = _answered) -> dict[str, Any]:
    """Until the file on disk holds the run's answer, or what ``done`` looks for
    (the collaboration server saves the shared document itself, a second after
    its last change); as it is then, past the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        saved = lab.read_notebook(path)
        if done(saved):
            return saved
        if time.monotonic() > deadline:
            return saved  # check_saved says what it lacks
        time.sleep(0.2)


def kernel_states(lab: LabServer) -> dict[str, str]:
    """The Jupyter server's view of each notebook's kernel: path -> execution state."""
    with urllib.request.urlopen(f"{lab.url}/api/sessions", timeout=10) as response:
        sessions = json.load(response)
    return {s["path"]: s["kernel"]["execution_state"] for s in sessions if s.get("kernel")}


def wait_kernel_idle(lab: LabServer, path: str, server: Any, timeout: float = 90.0) -> None:
    """With no page open: until the scripted model was asked every step and
    the notebook's kernel is idle again (the run is over)."""
    deadline = time.monotonic() + timeout
    while True:
        if len(server.calls("root-model")) >= len(STEPS) and kernel_states(lab).get(path) == "idle":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the run did not end: {len(server.calls('root-model'))} root calls, "
                                 f"kernels {kernel_states(lab)}")
        time.sleep(0.2)


def wait_output(page: Page, text: str, timeout: float = 60.0) -> None:
    """Until some cell of the notebook in ``page`` shows ``text`` in its outputs (in the model)."""
    page.wait_for_function(
        """(text) => { const m = window.jupyterapp.shell.currentWidget.content.model;
                       for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i);
                         if (c.type === 'code' && JSON.stringify(c.outputs.toJSON()).includes(text)) return true; }
                       return false; }""", arg=text, timeout=timeout * 1000, polling=50)


def ask_state(page: Page) -> dict[str, Any]:
    return cell_state(page, "ask") or {}


def run_status(page: Page) -> str:
    return status_bar_text(page)


__all__ = ["ANSWER", "CONTEXT_CELL", "EXPECTED", "PRINTED", "STEPS", "agent_cells", "ask_state", "check_run",
           "check_saved", "describe", "kernel_states", "run_shape", "run_status", "script", "wait_for_run",
           "wait_kernel_idle", "wait_output", "wait_saved_run"]
