"""A run's sink, bound to the run: how the engine's parts (a step, the
sub-call helpers, compaction) say what happened without holding the run.

Each method passes the run (as a :class:`~.sink.RunView`) to the sink's
method of the same name; :meth:`Reporter.status` sends the run's figures at
most every 0.1 s unless forced."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .sink import RunView, Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from .progress import ReplyProgress
    from .records import SubcallRecord

STATUS_INTERVAL_S = 0.1


class Reporter:
    def __init__(self, run: RunView, sink: Sink | None = None) -> None:
        self.run = run
        self.sink = sink or Sink()
        self._last_status = 0.0

    def cell_added(self, cell: NotebookNode, after: str | None) -> None:
        self.sink.cell_added(self.run, cell, after)

    def cell_started(self, cell: NotebookNode) -> None:
        self.sink.cell_started(self.run, cell)

    def cell_finished(self, cell: NotebookNode) -> None:
        self.sink.cell_finished(self.run, cell)

    def cell_edited(self, cell: NotebookNode) -> None:
        self.sink.cell_edited(self.run, cell)

    def cell_updated(self, cell: NotebookNode) -> None:
        self.sink.cell_updated(self.run, cell)

    def reply_progress(self, progress: ReplyProgress) -> None:
        self.sink.reply_progress(self.run, progress)

    def subcall(self, record: SubcallRecord) -> None:
        self.sink.subcall(self.run, record)

    def subcalls_started(self, records: list[SubcallRecord]) -> None:
        self.sink.subcalls_started(self.run, records)

    def subcalls_finished(self, records: list[SubcallRecord]) -> None:
        self.sink.subcalls_finished(self.run, records)

    def subcalls_settled(self, cell: NotebookNode) -> None:
        self.sink.subcalls_settled(self.run, cell)

    def child_sink(self, record: SubcallRecord) -> Sink | None:
        return self.sink.child_sink(self.run, record)

    def note(self, text: str) -> None:
        self.sink.note(self.run, text)

    def status(self, force: bool = False) -> None:
        """Tell the sink the run's figures, at most every 0.1 s unless ``force``."""
        now = time.monotonic()
        if force or now - self._last_status > STATUS_INTERVAL_S:
            self._last_status = now
            self.sink.status(self.run, self.run.status())

    def ended(self, state: dict[str, Any], result: Any) -> None:
        """The run's last figures, then its end."""
        self.sink.status(self.run, state)
        self.sink.run_ended(self.run, result)


__all__ = ["Reporter"]
