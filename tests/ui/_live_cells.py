"""The live notebook against JupyterLab itself: a run whose scripted model
replies at once (each step a line of prose and a trivial ```repl cell; then
FINAL), timed headless, in the RLM kernel alone (no page) and in a real
JupyterLab in Chromium from executing the %%rlm cell until every cell of the
run is rendered with its output (root replies streamed, and not:
``--no-stream``); and the very cells of that run inserted again by the page
itself, no kernel involved, in that JupyterLab and, right after each run, in
one open beside it where our extension is disabled (JupyterLab's own cost of
creating and rendering them, under the same load). Part of the live-speed
benchmark (bench_live_speed.py)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from _lab import CHROMIUM, CHROMIUM_ARGS, start_lab
from labdriver import (
    ARTIFACTS,
    LabServer,
    click_interrupt,
    code_cell,
    open_notebook,
    rlm_magic,
    start_cell,
    wait_cell_executed,
    wait_cell_idle,
)

QUERY = "Walk through the steps."
WARM_QUERY = "warm up"


class InstantModel:
    """Steps 1..N of any run are a line of prose and a trivial cell; step
    N + 1 says FINAL (alone: FINAL beside code is not taken, README "Reply
    protocol"). Keyed on the conversation's turn, so every run gets the same
    script."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages", [])
        first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        if WARM_QUERY in first_user:
            return "FINAL(warm)"
        step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        if step > self.steps:
            return "FINAL(all steps done)"
        return f"Step {step}.\n```repl\nx{step} = {step}\nprint('step', x{step})\n```"


# -- headless -------------------------------------------------------------------


def time_headless(url: str, steps: int, repeat: int) -> dict[str, list[float]]:
    """``RLM.completion`` in this process, root replies streamed ('stream',
    the default) and not ('whole', no_stream=True), in turns."""
    from rlm_kernel import RLM

    context = "word " * 1000
    times: dict[str, list[float]] = {"stream": [], "whole": []}
    for _ in range(repeat):
        for mode in times:
            rlm = RLM(model="openai/root-model", api_base=url, api_key="x", max_iterations=steps + 1,
                      no_stream=mode == "whole")
            rlm.completion(context, WARM_QUERY)  # imports litellm, opens connections
            started = time.perf_counter()
            result = rlm.completion(context, QUERY)
            times[mode].append(time.perf_counter() - started)
            assert result.reason == "final" and result.iterations == steps + 1, (result.reason, result.iterations)
    return times


# -- the RLM kernel alone (no browser) ------------------------------------------


def time_kernel_alone(url: str, steps: int, repeat: int) -> list[float]:
    """The same run in the RLM kernel driven by jupyter_client, after a
    hand-made `hello` (so the live ops are sent, to nobody): what the kernel
    costs without a page competing for the CPU."""
    from jupyter_client.manager import start_new_kernel

    workdir = tempfile.mkdtemp(prefix="rlm-bench-kernel-")  # its runs' journals land here, not in the checkout
    manager, client = start_new_kernel(kernel_name="rlm", cwd=workdir)
    try:
        def run(code: str) -> str:
            outputs: list[dict] = []
            client.execute_interactive(code, timeout=120, output_hook=outputs.append)
            return "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")

        run("context = 'word ' * 1000")
        hello = {"protocol": "rlm/1", "op": "hello", "notebook_path": "bench.ipynb", "client_id": "bench",
                 "features": ["ops"]}  # what the labextension says
        client.shell_channel.send(client.session.msg(
            "comm_open", {"comm_id": "bench-hello", "target_name": "rlm", "data": hello}))
        magic = rlm_magic(url, f"--max-iterations {steps + 1}", "--fresh", "--new", sub_model=False)
        run(f"{magic}\n{WARM_QUERY}")
        times = []
        for _ in range(repeat):
            run(f"{magic}\n{QUERY}")
            elapsed, iterations, reason = run(
                "print(rlm_result.elapsed_s, rlm_result.iterations, rlm_result.reason)").split()
            assert (iterations, reason) == (str(steps + 1), "final"), (iterations, reason)
            times.append(float(elapsed))
        return times
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        shutil.rmtree(workdir, ignore_errors=True)


# -- browser --------------------------------------------------------------------


# JavaScript put into the page's functions below, where `notebook`, `model`
# and `steps` are in scope: `rendered()` says whether a run newer than those
# in the notebook now has `steps` code cells with their output, `steps`
# thought cells and its answer cell rendered.
NEW_RUN_RENDERED = """const old = new Set();
  for (let i = 0; i < model.cells.length; i++) {
    const meta = model.cells.get(i).getMetadata('rlm');
    if (meta && meta.run_id) old.add(meta.run_id);
  }
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
  };"""


def open_warmed_notebook(page: Any, lab: LabServer, name: str, context: str, magic: str, cells: dict[str, str],
                         warm: str = WARM_QUERY) -> str:
    """Write and open a notebook of a context cell ('ctx'), a warm-up %%rlm
    cell ('warm': imports litellm in the kernel, the first live run) and
    ``cells`` (id -> source); run the first two and return its path."""
    path = lab.write_notebook(name, [
        code_cell(context, "ctx"),
        code_cell(f"{magic}\n{warm}", "warm"),
        *(code_cell(source, cell) for cell, source in cells.items()),
    ], kernel="rlm")
    open_notebook(page, lab, path)
    start_cell(page, "ctx")
    wait_cell_executed(page, "ctx")
    start_cell(page, "warm")
    wait_cell_idle(page, "warm", timeout=60_000)
    return path


# Runs the %%rlm cell and resolves with the milliseconds until every code cell
# of the new run shows its output and its answer cell is rendered.
_RUN_AND_WAIT = """([cellId, steps]) => new Promise((resolve, reject) => {
  const app = window.jupyterapp;
  const notebook = app.shell.currentWidget.content;
  const model = notebook.model;
  /*NEW_RUN_RENDERED*/
  // When the kernel's ops arrive, to split kernel time from rendering time.
  const kernel = app.shell.currentWidget.sessionContext.session.kernel;
  const marks = {first_insert: null, answer_insert: null, messages: 0, op_messages: 0};
  const onIOPub = (_, msg) => {
    marks.messages++;
    const data = msg.content && msg.content.data;
    if (!data || data.protocol !== 'rlm/1') return;
    marks.op_messages++;
    for (const op of data.op === 'ops' ? data.ops : [data]) {
      if (op.op !== 'insert_cell') continue;
      if (marks.first_insert === null) marks.first_insert = performance.now() - started;
      const meta = op.cell && op.cell.metadata && op.cell.metadata.rlm;
      if (meta && meta.role === 'answer') marks.answer_insert = performance.now() - started;
    }
  };
  kernel.iopubMessage.connect(onIOPub);
  let done = false;
  const finish = () => {
    // Not rendered before the answer's op came: no need to look at every cell until then
    // (each look takes ~0.15 ms, and the page changes some 250 times a run).
    if (done || marks.answer_insert === null || !rendered()) return;
    done = true;
    observer.disconnect();
    clearInterval(timer);
    clearTimeout(limit);
    kernel.iopubMessage.disconnect(onIOPub);
    resolve({total: performance.now() - started, ...marks});
  };
  const observer = new MutationObserver(finish);
  observer.observe(notebook.node, {childList: true, subtree: true, characterData: true});
  const timer = setInterval(finish, 25);
  const limit = setTimeout(() => { observer.disconnect(); clearInterval(timer);
                                   reject(new Error('the run did not render within 20 s')); }, 20000);
  for (let i = 0; i < model.cells.length; i++) {
    if (model.cells.get(i).id === cellId) { notebook.activeCellIndex = i; break; }
  }
  notebook.mode = 'command';
  const started = performance.now();
  marks.wall_start = Date.now();
  void app.commands.execute('notebook:run-cell');
})""".replace("/*NEW_RUN_RENDERED*/", NEW_RUN_RENDERED)

# The notebook alone: takes the newest run's cells (outputs included) out of
# the notebook, then inserts them again below `anchor` from the page itself,
# all in one transaction ('batch') or one cell per task ('stream', as if each
# came in a message of its own), and resolves with the milliseconds until
# they are rendered by the same criterion as a live run.
_NOTEBOOK_ALONE = """async ([anchor, mode]) => {
  const app = window.jupyterapp;
  const notebook = app.shell.currentWidget.content;
  const model = notebook.model;
  const shared = model.sharedModel;
  const cells = [];
  for (let i = model.cells.length - 1; i >= 0; i--) {
    const meta = model.cells.get(i).getMetadata('rlm');
    if (meta && meta.run_id && ['thought', 'code', 'answer'].includes(meta.role)) {
      cells.unshift(model.cells.get(i).toJSON());
      shared.transact(() => shared.deleteCell(i), false);
    }
  }
  await new Promise(resolve => setTimeout(resolve, 300));
  let at = 0;
  while (model.cells.get(at).id !== anchor) at++;
  const rendered = () => {
    let done = 0;
    for (const cell of notebook.widgets) {
      const meta = cell.model.getMetadata('rlm');
      if (!meta || !meta.run_id || !cell.node.isConnected) continue;
      if (meta.role === 'code' && cell.node.querySelector('.jp-OutputArea-output')) done++;
      if (meta.role === 'thought' && cell.node.querySelector('.jp-RenderedMarkdown p')) done++;
      if (meta.role === 'answer' && cell.node.querySelector('.jp-RenderedMarkdown p')) done++;
    }
    return done >= cells.length;
  };
  const trust = (from, n) => { for (let i = from; i < from + n; i++) model.cells.get(i).trusted = true; };
  const started = performance.now();
  if (mode === 'batch') {
    shared.transact(() => shared.insertCells(at + 1, cells), false);
    trust(at + 1, cells.length);
  } else {
    cells.forEach((cell, k) => setTimeout(() => {
      shared.transact(() => shared.insertCell(at + 1 + k, cell), false);
      trust(at + 1 + k, 1);
    }, 0));
  }
  return await new Promise(resolve => {
    const finish = () => {
      if (!rendered()) return;
      observer.disconnect();
      clearInterval(timer);
      resolve(performance.now() - started);
    };
    const observer = new MutationObserver(finish);
    observer.observe(notebook.node, {childList: true, subtree: true, characterData: true});
    const timer = setInterval(finish, 25);
    finish();
  });
}"""

_DROP_OLD_RUNS = """(keep) => {
  const model = window.jupyterapp.shell.currentWidget.content.model;
  model.sharedModel.transact(() => {
    for (let i = model.cells.length - 1; i >= 0; i--) {
      const meta = model.cells.get(i).getMetadata('rlm');
      if (meta && meta.run_id && !keep.includes(model.cells.get(i).id)) model.sharedModel.deleteCell(i);
    }
  });
}"""


def _kernel_elapsed(page: Any, steps: int) -> float:
    """The last run's own elapsed_s, read in the kernel."""
    from labdriver import append_code_cell, cell_state, output_text, run_cell

    append_code_cell(page)
    probe = run_cell(page, "print(rlm_result.elapsed_s, rlm_result.iterations, rlm_result.reason)")
    text = "".join(output_text(o) for o in cell_state(page, probe)["outputs"]).split()
    page.evaluate(_DROP_OLD_RUNS.replace("meta && meta.run_id &&", "true &&"), _KEEP)
    assert text[1:] == [str(steps + 1), "final"], text
    return float(text[0])


class CpuMeter:
    """CPU seconds used by the page's renderer, the Jupyter server and the
    kernel between start() and stop(). The page is the renderers of the first
    Chromium this process started (ours; the peer's comes after it)."""

    def __init__(self, lab: LabServer) -> None:
        import psutil

        self.lab_process = psutil.Process(lab.process.pid)
        # /usr/bin/chromium starts /usr/lib/chromium/chromium: the browser is the one without a --type=
        commands = {p: p.cmdline() or [""] for p in psutil.Process().children(recursive=True)}
        browsers = [p for p, command in commands.items()
                    if Path(command[0]).name == "chromium" and not any(a.startswith("--type=") for a in command)]
        self.browser = min(browsers, key=lambda p: p.create_time())

    def _processes(self) -> dict[str, list[Any]]:
        children = self.lab_process.children(recursive=True)
        return {
            "page": [p for p in self.browser.children(recursive=True) if "--type=renderer" in " ".join(p.cmdline())],
            "server": [self.lab_process],
            "kernel": [p for p in children if "rlm_kernel" in " ".join(p.cmdline())],
        }

    def _now(self) -> dict[str, float]:
        return {name: sum(sum(p.cpu_times()[:2]) for p in procs) for name, procs in self._processes().items()}

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> dict[str, float]:
        end = self._now()
        return {name: end[name] - self._start.get(name, 0.0) for name in end}


_RUN_CELLS_JSON = """() => {
  const model = window.jupyterapp.shell.currentWidget.content.model;
  const cells = [];
  for (let i = 0; i < model.cells.length; i++) cells.push(model.cells.get(i).toJSON());
  return cells;
}"""


def _file_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell from the page's model as the .ipynb format wants it (the model
    gives null where the format wants an empty mapping or no key)."""
    keep = {"markdown": ("id", "cell_type", "metadata", "source"),
            "code": ("id", "cell_type", "metadata", "source", "execution_count", "outputs")}
    out = {k: cell.get(k) for k in keep.get(cell["cell_type"], keep["markdown"])}
    out["metadata"] = out.get("metadata") or {}
    if cell["cell_type"] == "code":
        outputs = []
        for output in cell.get("outputs") or []:
            output = {k: v for k, v in output.items() if v is not None}
            if output.get("output_type") in ("display_data", "execute_result"):
                output.setdefault("metadata", {})
                output.setdefault("data", {})
            outputs.append(output)
        out["outputs"] = outputs
    return out


@contextmanager
def lab_page(log_name: str, without_extension: bool = False, playwright: Any = None,
             collaboration: bool = True) -> Iterator[tuple[LabServer, Any]]:
    """A JupyterLab of its own (in a temporary folder) and a page in a
    Chromium of its own (``playwright``: an instance already started, as for
    a second JupyterLab beside the first); ``collaboration`` False turns
    real-time collaboration off for it."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="rlm-bench-") as tmp:
        lab = start_lab(Path(tmp), log_name, without_extension=without_extension, collaboration=collaboration)
        try:
            with ExitStack() as stack:
                if playwright is None:
                    playwright = stack.enter_context(sync_playwright())
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                stack.callback(browser.close)
                yield lab, browser.new_page(viewport={"width": 1400, "height": 900})
        finally:
            lab.stop()


def insert_again(page: Any) -> dict[str, float]:
    """Seconds for ``page`` to take the run's cells out and insert them
    again, all in one transaction ('batch') and one cell per task ('stream')."""
    times = {}
    for mode in ("batch", "stream"):
        page.wait_for_timeout(300)
        times[mode] = page.evaluate(_NOTEBOOK_ALONE, ["bench", mode]) / 1000
    return times


class JupyterLabAlone:
    """The peer: a JupyterLab where our extension is disabled, in a Chromium
    of its own, open beside ours for the whole measurement. It opens the
    cells of ours' first run (outputs included; every run writes the same
    cells) as a notebook; after each run of ours it takes them out and inserts
    them again, all in one transaction ('batch') and one cell per task
    ('stream'): what JupyterLab itself needs to insert and render them, under
    the same load as the run just before (timed apart, minutes later, the
    machine's drift went into the ratio)."""

    def __init__(self, lab: LabServer, page: Any) -> None:
        self.lab = lab
        self.page = page
        self.opened = False

    def open(self, cells: list[dict[str, Any]]) -> None:
        import nbformat

        cells = [_file_cell(c) for c in cells]
        nbformat.validate(nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
        path = self.lab.write_notebook("plain.ipynb", cells, kernel="python3")
        try:
            open_notebook(self.page, self.lab, path)  # renders them all once: JupyterLab's code is warm
        except Exception:
            self.screenshot()
            raise
        assert not self.page.evaluate("() => window.jupyterapp.hasPlugin('rlm-kernel:plugin')"), \
            "the extension should be disabled in this JupyterLab"
        self.opened = True

    def time(self) -> dict[str, float]:
        """Seconds to insert and render the run's cells ('batch', 'stream')."""
        return insert_again(self.page)

    def screenshot(self) -> None:
        self.page.screenshot(path=str(ARTIFACTS / "bench_live_speed-plain.png"))


# The two %%rlm cells of the browser notebook: root replies streamed (as by
# default) and not (--no-stream), timed in turns so that both see the same load.
BENCH_CELLS = {"bench": "", "bench-whole": "--no-stream"}
_KEEP = ["ctx", "warm", *BENCH_CELLS]


def time_browser(page: Any, lab: LabServer, url: str, steps: int, repeat: int, shot: Path,
                 peer: JupyterLabAlone) -> dict[str, Any]:
    """``repeat`` runs of each %%rlm cell in ``page`` (a JupyterLab with our
    extension); after each streamed run, the notebook-alone timings here and
    the same cells in ``peer``."""
    magic = rlm_magic(url, f"--max-iterations {steps + 1}", "--fresh", "--new", sub_model=False)
    open_warmed_notebook(page, lab, "bench.ipynb", "context = 'word ' * 1000", magic,
                         {cell: f"{magic} {flags}".rstrip() + f"\n{QUERY}" for cell, flags in BENCH_CELLS.items()})
    page.wait_for_timeout(500)
    meter = CpuMeter(lab)
    times: dict[str, list[float]] = {cell: [] for cell in BENCH_CELLS}
    kernel_times: dict[str, list[float]] = {cell: [] for cell in BENCH_CELLS}
    marks, stuck = [], 0
    alone: dict[str, list[float]] = {"batch": [], "stream": []}
    plain: dict[str, list[float]] = {"batch": [], "stream": []}
    cpu: dict[str, list[float]] = {}
    while len(times["bench-whole"]) < repeat:
        cell = "bench" if len(times["bench"]) == len(times["bench-whole"]) else "bench-whole"
        page.evaluate(_DROP_OLD_RUNS, _KEEP)
        page.wait_for_timeout(300)
        try:
            meter.start()
            ms = page.evaluate(_RUN_AND_WAIT, [cell, steps])
            used = meter.stop()
        except Exception as error:  # noqa: BLE001 - a run that never finished
            # See tests/ui/test_live_repeat.py: interrupt it and try again.
            stuck += 1
            print(f"run stuck ({error}); interrupting it and trying again", file=sys.stderr)
            if stuck > 5:
                raise
            click_interrupt(page)
            wait_cell_idle(page, cell, timeout=30_000)
            continue
        times[cell].append(ms["total"] / 1000)
        wait_cell_idle(page, cell, timeout=60_000)
        if cell == "bench":
            marks.append(ms)
            for name, seconds in used.items():
                cpu.setdefault(name, []).append(seconds)
            page.screenshot(path=str(shot))
            for mode, seconds in insert_again(page).items():
                alone[mode].append(seconds)
            if not peer.opened:
                peer.open(page.evaluate(_RUN_CELLS_JSON))
            for mode, seconds in peer.time().items():
                plain[mode].append(seconds)
        kernel_times[cell].append(_kernel_elapsed(page, steps))
    return {"browser": times["bench"], "browser_whole": times["bench-whole"], "kernel": kernel_times["bench"],
            "kernel_whole": kernel_times["bench-whole"], "marks": marks, "stuck": stuck,
            "alone_batch": alone["batch"], "alone_stream": alone["stream"], "cpu": cpu,
            "plain_batch": plain["batch"], "plain_stream": plain["stream"]}
