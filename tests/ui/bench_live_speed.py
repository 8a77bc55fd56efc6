"""Benchmark: does the live notebook keep up with the engine?

A 30-step run whose scripted model replies instantly (each step a trivial
```repl cell, the 30th also says FINAL) is timed twice:

- headless: ``RLM(...).completion(context, query)`` in this process;
- in the browser: a real JupyterLab (started by _lab.start_lab, as for the
  UI tests) with the RLM kernel and the labextension, driven by Debian's
  Chromium; timed in the page from the moment the %%rlm cell is executed
  until all 30 steps' code cells (with their outputs) and the answer cell are
  rendered in the DOM.

Issue 3's target is browser <= 2x headless. This prints the numbers and the
ratio; it asserts nothing (not a pytest file: run it directly).

To show what bounds the browser time it also times the notebook alone: the
very cells (outputs included) of the last run, deleted and inserted again
from the page itself, no kernel involved, all in one go and one cell per
task; and it reports the CPU seconds the page, the Jupyter server and the
kernel used during the timed runs (this machine has few cores, so they
compete), and the load average (other work on the machine slows every
number here).

    .venv/bin/python tests/ui/bench_live_speed.py [--steps 30] [--repeat 3] [--json]

The last line is the summary (``live speed: headless X s, browser Y s,
ratio Z (target <= 2)``); with ``--json`` stdout is one JSON document with
every measurement and the summary line goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the UI tests' helpers (_lab, labdriver) and tests/_helpers
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from _lab import CHROMIUM, CHROMIUM_ARGS, start_lab  # noqa: E402 - after the sys.path line
from labdriver import (  # noqa: E402
    ARTIFACTS,
    LabServer,
    click_interrupt,
    code_cell,
    rlm_magic,
    start_cell,
    wait_cell_idle,
)

from rlm_kernel.testing.server import ScriptedServer  # noqa: E402

QUERY = "Walk through the steps."
WARM_QUERY = "warm up"


class InstantModel:
    """Step n of any run is a trivial cell; the last step also says FINAL.
    Keyed on the conversation's turn, so every run gets the same script."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages", [])
        first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        if WARM_QUERY in first_user:
            return "FINAL(warm)"
        step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        code = f"Step {step}.\n```repl\nx{step} = {step}\nprint('step', x{step})\n```"
        return code + ("\nFINAL(all steps done)" if step >= self.steps else "")


# -- headless -------------------------------------------------------------------


def time_headless(url: str, steps: int, repeat: int) -> list[float]:
    from rlm_kernel import RLM

    rlm = RLM(model="openai/root-model", api_base=url, api_key="x", max_iterations=steps)
    context = "word " * 1000
    rlm.completion(context, WARM_QUERY)  # imports litellm, opens connections
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = rlm.completion(context, QUERY)
        times.append(time.perf_counter() - started)
        assert result.reason == "final" and result.iterations == steps, (result.reason, result.iterations)
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
        magic = rlm_magic(url, f"--max-iterations {steps}", "--fresh", sub_model=False)
        run(f"{magic}\n{WARM_QUERY}")
        times = []
        for _ in range(repeat):
            run(f"{magic}\n{QUERY}")
            elapsed, iterations, reason = run(
                "print(rlm_result.elapsed_s, rlm_result.iterations, rlm_result.reason)").split()
            assert (iterations, reason) == (str(steps), "final"), (iterations, reason)
            times.append(float(elapsed))
        return times
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        shutil.rmtree(workdir, ignore_errors=True)


# -- browser --------------------------------------------------------------------


# Runs the %%rlm cell and resolves with the milliseconds until every code cell
# of the new run shows its output and its answer cell is rendered.
_RUN_AND_WAIT = """([cellId, steps]) => new Promise((resolve, reject) => {
  const app = window.jupyterapp;
  const notebook = app.shell.currentWidget.content;
  const model = notebook.model;
  const old = new Set();
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
  };
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
    if (done || !rendered()) return;
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
  void app.commands.execute('notebook:run-cell');
})"""

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


def _kernel_elapsed(page: Any) -> float:
    """The last run's own elapsed_s, read in the kernel."""
    from labdriver import append_code_cell, cell_state, output_text, run_cell

    append_code_cell(page)
    probe = run_cell(page, "print(rlm_result.elapsed_s, rlm_result.iterations, rlm_result.reason)")
    text = "".join(output_text(o) for o in cell_state(page, probe)["outputs"]).split()
    page.evaluate(_DROP_OLD_RUNS.replace("meta && meta.run_id &&", "true &&"), ["ctx", "warm", "bench"])
    assert text[1:] == [str(STEPS_SEEN[0]), "final"], text
    return float(text[0])


STEPS_SEEN = [0]


class CpuMeter:
    """CPU seconds used by the page's renderer, the Jupyter server and the
    kernel between start() and stop()."""

    def __init__(self, lab: LabServer) -> None:
        import psutil

        self.lab_process = psutil.Process(lab.process.pid)
        self.me = psutil.Process()

    def _processes(self) -> dict[str, list[Any]]:
        children = self.lab_process.children(recursive=True)
        return {
            "page": [p for p in self.me.children(recursive=True) if "--type=renderer" in " ".join(p.cmdline())],
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


def time_jupyterlab_alone(cells: list[dict[str, Any]], repeat: int) -> list[float]:
    """The notebook alone again, in a JupyterLab where our extension is
    disabled: what JupyterLab itself needs to insert and render the cells."""
    import nbformat
    from labdriver import open_notebook
    from playwright.sync_api import sync_playwright

    cells = [_file_cell(c) for c in cells]
    nbformat.validate(nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))

    with tempfile.TemporaryDirectory(prefix="rlm-bench-plain-") as tmp:
        lab = start_lab(Path(tmp), "bench-jupyter-lab.log", without_extension=True)
        try:
            path = lab.write_notebook("plain.ipynb", cells, kernel="python3")
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                try:
                    open_notebook(page, lab, path)
                except Exception:
                    page.screenshot(path=str(ARTIFACTS / "bench_live_speed-plain.png"))
                    raise
                assert not page.evaluate("() => window.jupyterapp.hasPlugin('rlm-kernel:plugin')"), \
                    "the extension should be disabled in this JupyterLab"
                times = []
                for _ in range(repeat):
                    page.wait_for_timeout(300)
                    times.append(page.evaluate(_NOTEBOOK_ALONE, ["bench", "batch"]) / 1000)
                browser.close()
        finally:
            lab.stop()
    return times


def time_browser(url: str, steps: int, repeat: int, shot: Path) -> dict[str, Any]:
    from labdriver import open_notebook, wait_cell_executed
    from playwright.sync_api import sync_playwright

    STEPS_SEEN[0] = steps
    with tempfile.TemporaryDirectory(prefix="rlm-bench-") as tmp:
        lab = start_lab(Path(tmp), "bench-jupyter-lab.log")
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                magic = rlm_magic(url, f"--max-iterations {steps}", "--fresh", sub_model=False)
                path = lab.write_notebook("bench.ipynb", [
                    code_cell("context = 'word ' * 1000", "ctx"),
                    code_cell(f"{magic}\n{WARM_QUERY}", "warm"),
                    code_cell(f"{magic}\n{QUERY}", "bench"),
                ], kernel="rlm")
                open_notebook(page, lab, path)
                start_cell(page, "ctx")
                wait_cell_executed(page, "ctx")
                start_cell(page, "warm")  # imports litellm in the kernel, first live run
                wait_cell_idle(page, "warm", timeout=60_000)
                page.wait_for_timeout(500)
                meter = CpuMeter(lab)
                times, kernel_times, marks, stuck = [], [], [], 0
                alone: dict[str, list[float]] = {"batch": [], "stream": []}
                cpu: dict[str, list[float]] = {}
                while len(times) < repeat:
                    page.evaluate(_DROP_OLD_RUNS, ["ctx", "warm", "bench"])
                    page.wait_for_timeout(300)
                    try:
                        meter.start()
                        ms = page.evaluate(_RUN_AND_WAIT, ["bench", steps])
                        for name, seconds in meter.stop().items():
                            cpu.setdefault(name, []).append(seconds)
                    except Exception as error:  # noqa: BLE001 - a run that never finished
                        # See tests/ui/test_live_repeat.py: interrupt it and try again.
                        stuck += 1
                        print(f"run stuck ({error}); interrupting it and trying again", file=sys.stderr)
                        if stuck > 5:
                            raise
                        click_interrupt(page)
                        wait_cell_idle(page, "bench", timeout=30_000)
                        continue
                    times.append(ms["total"] / 1000)
                    marks.append(ms)
                    wait_cell_idle(page, "bench", timeout=60_000)
                    page.screenshot(path=str(shot))
                    for mode in alone:
                        page.wait_for_timeout(300)
                        alone[mode].append(page.evaluate(_NOTEBOOK_ALONE, ["bench", mode]) / 1000)
                    run_cells = page.evaluate(_RUN_CELLS_JSON)
                    kernel_times.append(_kernel_elapsed(page))
                browser.close()
        finally:
            lab.stop()
    return {"browser": times, "kernel": kernel_times, "marks": marks, "stuck": stuck,
            "alone_batch": alone["batch"], "alone_stream": alone["stream"], "cpu": cpu, "run_cells": run_cells}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the measurements as one JSON object")
    parser.add_argument("--write-md", metavar="PATH", help="also write the 'live' section of BENCHMARKS.md")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium; never `playwright install`).")
    shot = ARTIFACTS / "bench_live_speed.png"
    load_before = os.getloadavg()
    with ScriptedServer(InstantModel(args.steps)) as server:
        headless = time_headless(server.url, args.steps, args.repeat)
        alone = time_kernel_alone(server.url, args.steps, args.repeat)
        page = time_browser(server.url, args.steps, args.repeat, shot)
    plain = time_jupyterlab_alone(page.pop("run_cells"), args.repeat)
    load_after = os.getloadavg()
    browser, marks = page["browser"], page["marks"]
    median = statistics.median
    ratio = median(browser) / median(headless)
    summary = (f"live speed: headless {median(headless):.3f} s, browser {median(browser):.3f} s, "
               f"ratio {ratio:.2f} (target <= 2)")
    if args.json:
        print(json.dumps({
            "steps": args.steps, "repeat": args.repeat, "headless_s": headless, "kernel_alone_s": alone,
            "browser_s": browser, "kernel_in_browser_run_s": page["kernel"],
            "notebook_alone_batch_s": page["alone_batch"], "notebook_alone_stream_s": page["alone_stream"],
            "jupyterlab_alone_batch_s": plain,
            "cpu_s": page["cpu"], "marks_ms": marks, "stuck_runs": page["stuck"], "ratio": ratio, "target": 2.0,
            "load_average": [load_before[0], load_after[0]], "summary": summary,
        }, indent=1))
        print(summary, file=sys.stderr)  # stdout stays one JSON document
        return

    def show(times: list[float]) -> str:
        return f"median {median(times):.3f} s  (runs: {', '.join(f'{t:.3f}' for t in times)})"

    print(f"{args.steps}-step run, model replies instantly, {args.repeat} runs each")
    print(f"headless (RLM.completion)             : {show(headless)}")
    print(f"RLM kernel alone (live ops, no page)  : {show(alone)}")
    print(f"browser (execute -> all cells in DOM) : {show(browser)}")
    print(f"  the kernel's own run time meanwhile : {show(page['kernel'])}")
    print(f"  per step in the browser             : {1000 * median(browser) / args.steps:.1f} ms")
    first = median(m["first_insert"] for m in marks)
    answer = median(m["answer_insert"] for m in marks)
    lag = median(m["total"] - m["answer_insert"] for m in marks)
    print(f"  page handled the first insert_cell  : at {first:.0f} ms (median)")
    print(f"  page handled the answer insert_cell : at {answer:.0f} ms; all rendered {lag:.0f} ms later (medians)")
    print(f"  iopub messages per run (rlm ops)    : {median(m['messages'] for m in marks):.0f}"
          f" ({median(m['op_messages'] for m in marks):.0f})")
    cpu = "  ".join(f"{name} {median(seconds):.3f} s" for name, seconds in page["cpu"].items())
    print(f"  CPU used during a run (medians)     : {cpu}")
    print("the notebook alone, same cells re-inserted by the page, no kernel:")
    print(f"  all in one transaction              : {show(page['alone_batch'])}")
    print(f"  one cell per task                   : {show(page['alone_stream'])}")
    print(f"  its ratio to headless (batch)       : {median(page['alone_batch']) / median(headless):.2f}")
    print(f"  again with our extension disabled   : {show(plain)}")
    print(f"  JupyterLab alone / headless         : {median(plain) / median(headless):.2f}")
    print(f"load average (1 min) before / after   : {load_before[0]:.2f} / {load_after[0]:.2f}")
    if page["stuck"]:
        print(f"runs that never finished and were interrupted (not timed): {page['stuck']}")
    print(f"screenshot: {shot}")
    print(summary)
    if args.write_md:
        write_markdown(args.write_md, args.steps, headless, alone, page, plain, ratio, load_before)


def write_markdown(path: str, steps: int, headless: list[float], alone: list[float], page: dict[str, Any],
                   plain: list[float], ratio: float, load: tuple[float, float, float]) -> None:
    from rlm_kernel.bench import machine_info, md_table, update_markdown

    median = statistics.median
    head = median(headless)

    def row(label: str, times: list[float]) -> list[str]:
        return [label, f"{median(times):.3f} s", f"{median(times) / head:.2f}x"]

    cpu = page["cpu"]
    floor = median(plain) / head
    extra = median(page["browser"]) - median(plain)
    floor_note = (
        f"JupyterLab alone needs {floor:.2f}x the headless time to create and render these cells (mostly a "
        "CodeMirror editor per cell and the page's layout), so no extension that puts a run's steps into real "
        f"notebook cells can reach 2x on this machine; ours adds {extra:.2f} s to that floor (receiving the "
        "ops and outputs, badges, the runs panel)."
        if floor > 2 else
        f"JupyterLab alone needs {floor:.2f}x the headless time to create and render these cells; ours adds "
        f"{extra:.2f} s to that (receiving the ops and outputs, badges, the runs panel).")
    rows = [
        row("headless: `RLM.completion` in one process", headless),
        row("the RLM kernel alone (live ops sent, no page)", alone),
        row("browser: execute the %%rlm cell until every cell is rendered", page["browser"]),
        row("JupyterLab inserting the same cells itself (no kernel; our extension loaded)", page["alone_batch"]),
        row("the same with our extension disabled", plain),
    ]
    body = "\n".join([
        "## Live notebook speed",
        "",
        f"`tests/ui/bench_live_speed.py`: a {steps}-step run whose scripted model answers at once (each step a "
        "markdown cell and a code cell that prints; {steps} + 1 cells more with the answer), timed headless "
        "and in a real JupyterLab in Debian's Chromium, from executing the `%%rlm` cell until every cell of "
        "the run is in the page with its output. Then the page re-inserts those very cells itself, with no "
        "kernel involved, in this JupyterLab and in one where our extension is disabled: JupyterLab's own "
        "cost of creating and rendering them. Medians of "
        f"{len(headless)} runs each.".replace("{steps}", str(steps)),
        "",
        md_table(rows, ["", "time", "/ headless"]),
        "",
        f"CPU seconds during one browser run (medians): page {median(cpu['page']):.2f}, Jupyter server "
        f"{median(cpu['server']):.2f}, kernel {median(cpu['kernel']):.2f}.",
        "",
        "Targets:",
        "",
        f"- browser / headless: {ratio:.2f} (target <= 2): {'met' if ratio <= 2 else 'MISSED'}",
        "",
        floor_note,
    ])
    machine = machine_info()
    machine["load_average"] = tuple(round(x, 2) for x in load)
    update_markdown(path, "live", body, machine)
    print(f"wrote the live section of {path}")


if __name__ == "__main__":
    main()
