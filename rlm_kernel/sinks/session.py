"""Keeps the kernel session in step with a ``%%rlm`` run: records each
finished cell's sub-calls in the session's replay book, tells the page about
cells a person edited at an approval and, for ``%rlm continue``, marks the
continue cell with the continuation it made (so running it again, as Run All
does, finds it and asks no model)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.trajectory.cells import AGENT_ROLES
from ..engine.trajectory.sink import Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.trajectory.sink import RunView


class SessionSink(Sink):
    """``session``: the kernel session (its ``book`` and ``send``); ``thread``:
    the run's code thread, on which page ops are sent."""

    def __init__(self, session: Any, thread: Any, continue_cell: str | None = None) -> None:
        self.session = session
        self.thread = thread
        self.continue_cell = continue_cell

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        if run.depth or not self.continue_cell or cell.metadata.get("rlm", {}).get("role") not in AGENT_ROLES:
            return
        mark = {"role": "continue", "run_id": run.run_id, "continuation": cell.id}
        continue_cell, self.continue_cell = self.continue_cell, None
        self.thread.post(lambda: self.session.send("cell_metadata", cell_id=continue_cell, rlm=mark))

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth:
            return
        records = cell.metadata.get("rlm", {}).get("subcalls")
        if records:
            self.session.book.set_cell(cell.id, records, cell.source)

    def subcalls_settled(self, run: RunView, cell: NotebookNode) -> None:
        self.cell_finished(run, cell)  # the replay book gets the background calls' answers

    def cell_edited(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth:
            return
        self.thread.post(lambda: self.session.send("cell_source", cell_id=cell.id, source=cell.source,
                                                   metadata=dict(cell.metadata.get("rlm", {}))))


__all__ = ["SessionSink"]
