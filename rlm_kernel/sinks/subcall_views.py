"""Shows each llm_query / rlm_query call (or batch) in the output of the
cell that made it: a live widget in a kernel, markdown everywhere."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engine.trajectory.replay import note_edited_prompts
from ..engine.trajectory.sink import Sink
from ..widgets.subcall import REFRESH_S, SubcallView

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.execution.threads import CallerThread
    from ..engine.trajectory.records import SubcallRecord
    from ..engine.trajectory.sink import RunView


def _display(bundle: dict[str, Any], display_id: str, update: bool = False) -> None:
    from IPython.display import display, update_display

    # The metadata flag keeps this view out of what the root model reads back.
    metadata = {"rlm": {"subcall_view": True}}
    if update:
        update_display(bundle, metadata=metadata, display_id=display_id, raw=True)
    else:
        display(bundle, metadata=metadata, display_id=display_id, raw=True)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class SubcallViewSink(Sink):
    """``widgets``: draw ipywidgets (only in a kernel with a frontend); updates
    are posted to ``thread`` (the kernel's main thread), coalesced (one
    pending refresh per view) and spaced (one per view every REFRESH_S)."""

    def __init__(self, thread: CallerThread | None = None, widgets: bool = False,
                 pinner: Callable[[RunView, SubcallRecord, str, str | None], None] | None = None,
                 asker: Callable[[SubcallRecord, str], concurrent.futures.Future[Any]] | None = None) -> None:
        self.thread = thread
        self.widgets = widgets and thread is not None
        self.pinner = pinner  # lets a person edit and pin a response (and its prompt) in the widget
        self.asker = asker  # lets them send an edited prompt to the sub-model from the widget
        self._views: dict[str, SubcallView] = {}
        self._lock = threading.Lock()

    def subcalls_started(self, run: RunView, records: list[SubcallRecord]) -> None:
        if not records:
            return
        note_edited_prompts(getattr(run, "replay_cursor", None), records)
        pin = self.pinner
        view = SubcallView(records, records[0].kind, widgets=self.widgets and run.depth == 0,
                           pinner=None if pin is None else (lambda record, text, prompt: pin(run, record, text, prompt)),
                           asker=self.asker)
        with self._lock:
            for record in records:
                self._views[record.id] = view
        _display(view.bundle(), view.display_id)

    def subcall(self, run: RunView, record: SubcallRecord) -> None:
        view = self._views.get(record.id)
        if view is None or view.widget is None or self.thread is None:
            return
        view.mark(record)
        with self._lock:
            if view.refresh_pending:
                return
            view.refresh_pending = True
        # At most one refresh per view every REFRESH_S: a fast batch of
        # thousands then costs the page a few messages a second.
        wait = view.drawn_at + REFRESH_S - time.monotonic()
        loop = _running_loop()
        if wait > 0 and loop is not None:
            loop.call_later(wait, self._post_refresh, view)
        else:
            self._post_refresh(view)

    def _post_refresh(self, view: SubcallView) -> None:
        def refresh() -> None:
            with self._lock:
                view.refresh_pending = False
            view.refresh()

        assert self.thread is not None
        if view.finished:
            with self._lock:
                view.refresh_pending = False
            return
        self.thread.post(refresh)

    def subcalls_finished(self, run: RunView, records: list[SubcallRecord]) -> None:
        if not records:
            return
        view = self._views.get(records[0].id)
        if view is None:
            return
        view.finished = True
        for record in records:
            view.mark(record)
        if view.widget is not None:
            view.refresh()
        _display(view.bundle(), view.display_id, update=True)
        with self._lock:
            for record in records:
                self._views.pop(record.id, None)

    def child_sink(self, run: RunView, record: SubcallRecord) -> Sink | None:
        view = self._views.get(record.id)
        if view is None or view.widget is None or self.thread is None:
            return None
        return ChildStepsSink(view, record.id, self.thread)


class ChildStepsSink(Sink):
    """Appends a child run's steps to its sub-call widget, as they happen."""

    def __init__(self, view: SubcallView, record_id: str, thread: CallerThread) -> None:
        self.view = view
        self.record_id = record_id
        self.thread = thread

    def _append(self, outputs: list[dict[str, Any]]) -> None:
        def add() -> None:
            out = self.view.child_output(self.record_id)
            if out is not None:
                out.outputs = (*out.outputs, *outputs)

        self.thread.post(add)

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        role = cell.metadata.get("rlm", {}).get("role")
        if cell.cell_type == "markdown" and role != "query":
            self._append([_markdown(cell.source)])

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        if cell.cell_type != "code":
            return
        outputs = [_markdown(f"```python\n{cell.source}\n```")]
        for output in cell.get("outputs", []):
            item = dict(output)
            if "data" in item:
                item["data"] = {k: v for k, v in item["data"].items() if "widget" not in k}
            outputs.append(item)
        self._append(outputs)


def _markdown(text: str) -> dict[str, Any]:
    return {"output_type": "display_data", "data": {"text/markdown": text, "text/plain": text}, "metadata": {}}
