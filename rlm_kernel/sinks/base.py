"""The interface between the run loop and whoever shows or stores a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.loop import Run, RunResult
    from ..engine.subcalls import SubcallRecord


class Sink:
    """Receives a run's events. Every method is optional (no-op here).

    Called from the engine loop, except ``cell_started`` / ``cell_finished``
    / ``subcall`` which may also come from the thread running the code.
    """

    def run_started(self, run: Run) -> None: ...

    def cell_added(self, run: Run, cell: NotebookNode, after: str | None) -> None: ...

    def cell_started(self, run: Run, cell: NotebookNode) -> None: ...

    def cell_finished(self, run: Run, cell: NotebookNode) -> None: ...

    def cell_edited(self, run: Run, cell: NotebookNode) -> None:
        """A person changed the cell's source before it ran (an approval edit)."""

    def subcall(self, run: Run, record: SubcallRecord) -> None: ...

    def subcalls_started(self, run: Run, records: list[SubcallRecord]) -> None:
        """On the code thread, right before it waits for these sub-calls."""

    def subcalls_finished(self, run: Run, records: list[SubcallRecord]) -> None:
        """On the code thread, once they are all done or failed."""

    def child_sink(self, run: Run, record: SubcallRecord) -> Sink | None:
        """Where the child run started for ``record`` reports (None: nowhere)."""
        return None

    def status(self, run: Run, status: dict[str, Any]) -> None: ...

    def run_ended(self, run: Run, result: RunResult) -> None: ...


class MultiSink(Sink):
    def __init__(self, *sinks: Sink) -> None:
        self.sinks = [s for s in sinks if s is not None]

    def run_started(self, run: Run) -> None:
        for sink in self.sinks:
            sink.run_started(run)

    def cell_added(self, run: Run, cell: NotebookNode, after: str | None) -> None:
        for sink in self.sinks:
            sink.cell_added(run, cell, after)

    def cell_started(self, run: Run, cell: NotebookNode) -> None:
        for sink in self.sinks:
            sink.cell_started(run, cell)

    def cell_finished(self, run: Run, cell: NotebookNode) -> None:
        for sink in self.sinks:
            sink.cell_finished(run, cell)

    def cell_edited(self, run: Run, cell: NotebookNode) -> None:
        for sink in self.sinks:
            sink.cell_edited(run, cell)

    def subcall(self, run: Run, record: SubcallRecord) -> None:
        for sink in self.sinks:
            sink.subcall(run, record)

    def subcalls_started(self, run: Run, records: list[SubcallRecord]) -> None:
        for sink in self.sinks:
            sink.subcalls_started(run, records)

    def subcalls_finished(self, run: Run, records: list[SubcallRecord]) -> None:
        for sink in self.sinks:
            sink.subcalls_finished(run, records)

    def child_sink(self, run: Run, record: SubcallRecord) -> Sink | None:
        children = [c for c in (s.child_sink(run, record) for s in self.sinks) if c is not None]
        return MultiSink(*children) if children else None

    def status(self, run: Run, status: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.status(run, status)

    def run_ended(self, run: Run, result: RunResult) -> None:
        for sink in self.sinks:
            sink.run_ended(run, result)
