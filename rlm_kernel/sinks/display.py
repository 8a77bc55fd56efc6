"""Shows a run inside the ``%%rlm`` cell's own output: each thought, each
code cell (its outputs follow as they are produced), a status line, and the
answer. This is what a frontend without the labextension shows.

The status line is redrawn at most ``STATUS_INTERVAL_S`` apart (the newest
figures win, and a redraw is always scheduled for the last ones): each redraw
is a message through the Jupyter server to the page, and a fast run asks for
several per step.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from .._words import cached_text, compactions_text, plural, price_text, tokens_text
from ..engine.trajectory.sink import Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.execution.threads import CallerThread
    from ..engine.trajectory.result import RunResult
    from ..engine.trajectory.sink import RunView


def status_line(status: dict[str, Any]) -> str:
    """``RLM step 3/30 · 66 sub-calls: 12 done, 50 running, 4 queued · 48.2k tok (31.0k cached) ·
    history compacted · $0.021 · 1:07``"""
    elapsed = int(status.get("elapsed_s") or 0)
    state = status.get("state", "running")
    head = "RLM" if state == "running" else f"RLM {status.get('reason') or state}"
    compactions = status.get("compactions") or 0
    return " · ".join([
        f"{head} · step {status.get('iteration', 0)}/{status.get('max_iterations', '?')}",
        *([root] if (root := root_text(status)) else []),
        subcalls_text(status),
        tokens_text(status.get("tokens") or 0) + cached_text(status.get("cache_read_tokens") or 0),
        *([compactions_text(compactions)] if compactions else []),
        price_text(status.get("cost_usd"), status.get("known_cost_usd") or 0.0),
        f"{elapsed // 60}:{elapsed % 60:02d}",
    ])


def root_text(status: dict[str, Any]) -> str | None:
    """``root model thinking · 12 s`` until its first token, then ``root model writing · 240 tok``;
    ``waiting for approval`` while a step's code waits for a person's answer (``--approve``)."""
    if status.get("state", "running") != "running":
        return None
    if status.get("waiting") == "approval":
        return "waiting for approval"
    root = status.get("root")
    if not root:
        return None
    if root.get("phase") == "thinking":
        return f"root model thinking · {int(root.get('elapsed_s') or 0)} s"
    return f"root model writing · {tokens_text(root.get('tokens') or 0)}"


def subcalls_text(status: dict[str, Any]) -> str:
    """``66 sub-calls: 12 done, 50 running, 4 queued`` while some are not done, else ``66 sub-calls``."""
    total = status.get("subcalls", 0)
    running, queued = status.get("subcalls_running", 0), status.get("subcalls_queued", 0)
    if not running and not queued:
        return plural(total, "sub-call")
    parts = [f"{max(0, total - running - queued):,} done"]
    parts += [f"{running:,} running"] if running else []
    parts += [f"{queued:,} queued"] if queued else []
    return f"{plural(total, 'sub-call')}: {', '.join(parts)}"


def model_note(model: str) -> str | None:
    """``RLM_MODEL_NOTE``, shown above runs of ``RLM_MODEL`` (the bundled
    offline model says there that it is tiny)."""
    if model and model == os.environ.get("RLM_MODEL"):
        return os.environ.get("RLM_MODEL_NOTE") or None
    return None


STATUS_INTERVAL_S = 0.25


class DisplaySink(Sink):
    """Renders on the code thread (the kernel's main thread), in order with
    the code's own outputs."""

    def __init__(self, thread: CallerThread, status_only: bool = False) -> None:
        self.thread = thread
        self.status_only = status_only  # the labextension shows the steps as cells
        self._status_handle: Any = None
        self._shown: list[dict[str, Any]] = []  # what the cell shows now (main thread)
        self._status_index: int | None = None
        self._status_lock = threading.Lock()
        self._status_text: str | None = None  # newest line not shown yet
        self._status_shown_at = 0.0
        self._status_timer = False

    def _post(self, fn: Any) -> None:
        self.thread.post(fn)

    def run_started(self, run: RunView) -> None:
        if run.depth:
            return
        note = model_note(run.model)

        def show() -> None:
            from IPython.display import display

            if note:
                self._display({"text/markdown": f"*{note}*", "text/plain": note})
            line = {"text/plain": status_line(run.status())}
            self._status_handle = display(line, raw=True, display_id=True)
            self._status_index = len(self._shown)
            self._shown.append({"output_type": "display_data", "data": line, "metadata": {},
                                "transient": {"display_id": self._status_handle.display_id}})

        self._post(show)

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        if run.depth or self.status_only:
            return
        role = cell.metadata.get("rlm", {}).get("role")
        if role in ("query", "context"):
            return
        if cell.cell_type == "markdown":
            text = cell.source
        else:
            text = f"```python\n{cell.source}\n```"
        step = cell.metadata["rlm"].get("step")
        label = {"thought": "thought", "code": "code", "answer": "answer"}.get(role or "", role)
        if cell.metadata["rlm"].get("compaction"):
            label = "history compacted"
        header = f"**[step {step} · {label}]**\n\n" if role != "answer" else ""
        data = {"text/markdown": header + text, "text/plain": text}
        self._post(lambda: self._display(data))

    def run_ended(self, run: RunView, result: RunResult) -> None:
        """With the page showing the steps as cells, the answer (or how the
        run ended) shows in the %%rlm cell too, under its status line."""
        if run.depth or not self.status_only or not run.cells:
            return
        closing = run.cells[-1]
        data = {"text/markdown": closing.source, "text/plain": result.answer_text or closing.source}
        self._post(lambda: self._display(data))

    def note(self, run: RunView, text: str) -> None:
        if not run.depth:
            self._post(lambda: self._display({"text/markdown": f"*{text}*", "text/plain": text}))

    def status(self, run: RunView, status: dict[str, Any]) -> None:
        if run.depth:
            return
        with self._status_lock:
            self._status_text = status_line(status)
            now = time.monotonic()
            wait = self._status_shown_at + STATUS_INTERVAL_S - now
            if status.get("state", "running") != "running" or wait <= 0:
                self._status_shown_at = now
                self._post(self._show_status)
            elif not self._status_timer:
                from ..engine.execution.engine_loop import engine_loop

                self._status_timer = True
                loop = engine_loop()
                loop.call_soon_threadsafe(loop.call_later, wait, self._status_due)

    def _status_due(self) -> None:
        with self._status_lock:
            self._status_timer = False
            self._status_shown_at = time.monotonic()
        self._post(self._show_status)

    def _show_status(self) -> None:
        """Main thread: draw the newest status line, if one is waiting."""
        with self._status_lock:
            text, self._status_text = self._status_text, None
        if text is not None and self._status_handle is not None:
            self._status_handle.update({"text/plain": text}, raw=True)
            if self._status_index is not None:
                self._shown[self._status_index]["data"] = {"text/plain": text}

    def _display(self, data: dict[str, Any]) -> None:
        from IPython.display import display

        display(data, raw=True)
        self._shown.append({"output_type": "display_data", "data": data, "metadata": {}})

    def outputs(self) -> list[dict[str, Any]]:
        """What the run has shown in its cell so far, as nbformat outputs (the
        status line's display id in ``transient``), for a page reloaded
        mid-run. Main thread."""
        return [{**o, "data": dict(o["data"])} for o in self._shown]
