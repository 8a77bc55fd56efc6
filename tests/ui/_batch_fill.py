"""A big batch of sub-calls filling its widget in the page, measured: the
script (one ``llm_query_batched`` over N parts of the context, fast scripted
answers, a few refusals), the page's long tasks (a PerformanceObserver of
'longtask' entries installed before the page loads) and a watch of the list
as it fills. Used by tests/ui/test_subcall_batch.py and the live-speed
benchmark (bench_live_speed.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _helpers import repl
from labdriver import (
    ARTIFACTS,
    CELLS,
    LabServer,
    code_cell,
    open_notebook,
    rlm_magic,
    start_cell,
    wait_cell_executed,
    wait_cell_idle,
)
from playwright.sync_api import Locator, Page

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

# Every long task of the page, from its first load: page.add_init_script(LONG_TASKS) before opening it.
LONG_TASKS = """
window.__rlmLongTasks = [];
try {
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) window.__rlmLongTasks.push([e.startTime, e.duration]);
  }).observe({type: 'longtask', buffered: true});
} catch (e) { window.__rlmLongTasksError = String(e); }
// Diagnostics only: which scripts the long frames ran (written to test-artifacts).
window.__rlmLongFrames = [];
try {
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) window.__rlmLongFrames.push({start: e.startTime, duration: e.duration,
      scripts: (e.scripts || []).map(s => [s.invoker, s.sourceFunctionName, Math.round(s.duration)])});
  }).observe({type: 'long-animation-frame', buffered: true});
} catch (e) { /* not every browser has it */ }
"""

# What the list shows right now: row elements, all elements, its title.
PROBE = """(widget) => ({
  now: performance.now(),
  rows: widget.querySelectorAll('.rlm-sc-list .rlm-sc-row').length,
  nodes: widget.querySelectorAll('*').length,
  title: (widget.querySelector('.rlm-sc-title') || {}).textContent || '',
})"""

INSTRUCTIONS = ("You read one part of a long document. Say in one line what this part is about, "
                "and quote its first proper name. Do not explain. ") * 3


def batch_step(n: int) -> str:
    """A root reply whose code sends ``n`` prompts (7 characters of the context each) in one batch."""
    return repl(
        f"prompts = [f'{INSTRUCTIONS}\\n\\nPart {{i}} of {n}: ' + context[i * 7:(i + 1) * 7] for i in range({n})]\n"
        "answers = llm_query_batched(prompts)\n"
        "print(len(answers), 'answers;', sum(a.startswith('[sub-call error') for a in answers), 'failed')",
        prose="One question per part.")


def fast_sub(prompt: str) -> Reply | str:
    """The sub-model of ``batch_step``: answers at once; part 7, 1007, 2007... refuse for good."""
    part = re.search(r"Part (\d+) of", prompt)
    number = int(part.group(1)) if part else -1
    if number % 1000 == 7:
        return Reply(text="scripted refusal", status=400)
    return f"answer to part {number}"


def long_tasks(page: Page, start: float, end: float) -> list[tuple[float, float]]:
    """The page's long tasks (start, duration; page clock, ms) that began between start and end."""
    if page.evaluate("() => window.__rlmLongTasksError || ''"):
        raise RuntimeError("this browser does not report long tasks: "
                           + page.evaluate("() => window.__rlmLongTasksError"))
    tasks = page.evaluate("() => window.__rlmLongTasks || []")
    return [(s, d) for s, d in tasks if start - 50 <= s <= end]


def write_long_tasks(page: Page, name: str, summary: str, tasks: list[tuple[float, float]]) -> None:
    """test-artifacts/ui/NAME: the summary, every long task, and the long
    animation frames over 100 ms with the scripts they ran."""
    frames = page.evaluate("() => window.__rlmLongFrames || []")
    lines = [summary, "long tasks (start ms, duration ms):"] + [f"  {s:.0f} {d:.0f}" for s, d in tasks]
    lines += ["long animation frames over 100 ms, with their scripts:"]
    lines += [f"  {f['start']:.0f} {f['duration']:.0f} {f['scripts']}" for f in frames if f["duration"] > 100]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text("\n".join(lines) + "\n")


@dataclass
class Fill:
    """What the watch saw: the samples of PROBE, from the list's first
    appearance to the sample that read 'N of N done'."""

    n: int
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def start_ms(self) -> float:
        return self.samples[0]["now"]

    @property
    def end_ms(self) -> float:
        return self.samples[-1]["now"]

    def figures(self, tasks: list[tuple[float, float]]) -> dict[str, Any]:
        """The long tasks of a run (``long_tasks`` from the %%rlm cell's start
        to its end) read against this fill."""
        filling = [d for s, d in tasks if self.start_ms <= s <= self.end_ms]
        return {
            "subcalls": self.n,
            "fill_s": (self.end_ms - self.start_ms) / 1000,
            "long_tasks": len(tasks),
            "longest_task_ms": max((d for _, d in tasks), default=0.0),
            "long_tasks_total_ms": sum(d for _, d in tasks),
            "longest_task_while_filling_ms": max(filling, default=0.0),
            "long_tasks_while_filling": len(filling),
            "most_row_elements": max(s["rows"] for s in self.samples),
            "most_widget_elements": max(s["nodes"] for s in self.samples),
            "samples": len(self.samples),
        }


def summary_line(figures: dict[str, Any]) -> str:
    return (f"{figures['subcalls']:,}-row batch: filled in {figures['fill_s']:.1f} s; over the whole run "
            f"{figures['long_tasks']} long tasks, longest {figures['longest_task_ms']:.0f} ms, total "
            f"{figures['long_tasks_total_ms']:.0f} ms; longest while the list filled "
            f"{figures['longest_task_while_filling_ms']:.0f} ms; most row elements {figures['most_row_elements']}, "
            f"most elements in the widget {figures['most_widget_elements']}; {figures['samples']} samples")


def watch_fill(widget: Locator, n: int, during: Callable[[int], None] | None = None,
               timeout: float = 600) -> Fill:
    """Sample the batch's list (every 0.2 s) until its title reads 'N of N
    done'; ``during(done)`` is called after each sample (a test takes its
    screenshot half-way)."""
    widget.locator(".rlm-sc-list").wait_for(state="attached", timeout=30_000)
    fill = Fill(n, [widget.evaluate(PROBE)])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sample = widget.evaluate(PROBE)
        fill.samples.append(sample)
        done = re.search(rf"(\d+) of {n} done", sample["title"])
        count = int(done.group(1)) if done else 0
        if during is not None:
            during(count)
        if count == n:
            return fill
        time.sleep(0.2)
    raise AssertionError(f"the batch did not finish within {timeout:.0f} s: {fill.samples[-1]}")


def run_batch(page: Page, lab: LabServer, n: int, concurrency: int = 128) -> dict[str, Any]:
    """A %%rlm run of one ``batch_step(n)`` (then FINAL) in a notebook of its
    own, opened in ``page`` with LONG_TASKS installed; returns the fill's
    figures (``Fill.figures``) and writes the long tasks to
    test-artifacts/ui/bench_batch_<n>_longtasks.txt."""
    script = Script(root=[batch_step(n), "FINAL(done)"], sub=fast_sub)
    with ScriptedServer(script) as server:
        path = lab.write_notebook(f"batch-{n}.ipynb", [
            code_cell("context = 'abcdefghij' * 5000", "ctx"),
            code_cell(f"{rlm_magic(server.url, f'--concurrency {concurrency}')}\nWhat is each part about?", "ask"),
        ], kernel="rlm")
        page.add_init_script(LONG_TASKS)
        open_notebook(page, lab, path)
        start_cell(page, "ctx")
        wait_cell_executed(page, "ctx", timeout=60_000)
        started = page.evaluate("() => performance.now()")
        start_cell(page, "ask")
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        widget.wait_for(timeout=120_000)
        fill = watch_fill(widget, n)
        wait_cell_idle(page, "ask", timeout=120_000)
        page.wait_for_timeout(500)
        tasks = long_tasks(page, started, page.evaluate("() => performance.now()"))
        figures = fill.figures(tasks)
        write_long_tasks(page, f"bench_batch_{n}_longtasks.txt", summary_line(figures), tasks)
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"bench_batch_{n}.png"))
    return figures
