"""The sink: what a run reports to whoever shows or keeps it.

The engine calls a :class:`Sink`; the notebook file, the run journal, the
live page, the ``%%rlm`` cell's own output, the terminal and the sub-call
views implement it (``rlm_kernel.sinks``). Every method is optional. A sink
sees the run through :class:`RunView`, what it may read of it, never the run
itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from .progress import ReplyProgress
    from .records import SubcallRecord
    from .result import RunResult


class RunView(Protocol):
    """What a sink may read of the run it hears about (``runs.run.Run`` is one)."""

    run_id: str
    depth: int  # 0 for a root run, n for a child run n levels down
    query: str
    cells: list[NotebookNode]  # the run's cells so far, in order: read, never change

    @property
    def model(self) -> str:
        """The run's root model (a child run's: the sub-model it was given)."""

    @property
    def max_iterations(self) -> int:
        """The step limit the run works within."""

    @property
    def follows(self) -> str | None:
        """The run id a follow-up builds on (its cells' ``metadata.rlm.follows``)."""

    def status(self, state: str = "running", reason: str | None = None) -> dict[str, Any]:
        """The run's figures now: step, sub-calls, tokens, cost, time."""

    def record(self, result: RunResult | None = None) -> dict[str, Any]:
        """The run's entry in the notebook's ``metadata.rlm.runs`` (so far, while ``result`` is None)."""

    def notebook(self, result: RunResult | None = None) -> NotebookNode:
        """The run's trajectory notebook as it stands."""

    def interrupt(self) -> None:
        """Stop the run, from any thread, as an interrupt does (a sink that
        hears its caller went away may ask)."""


class Sink:
    """Receives a run's events; every method is a no-op here.

    Called from the engine loop, except ``cell_started`` / ``cell_finished``
    / ``subcall`` / ``subcalls_started`` / ``subcalls_finished``, which may
    also come from the thread running the code (``subcalls_finished`` of a
    background job is posted to it).
    """

    def run_started(self, run: RunView) -> None:
        """The run begins (before its first cell)."""

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        """A cell joins the trajectory, after the cell with id ``after``."""

    def cell_started(self, run: RunView, cell: NotebookNode) -> None:
        """A code cell is about to run."""

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        """A code cell ran (or was skipped); its outputs and metadata are final."""

    def cell_edited(self, run: RunView, cell: NotebookNode) -> None:
        """A person changed the cell's source before it ran (an approval edit)."""

    def cell_updated(self, run: RunView, cell: NotebookNode) -> None:
        """The cell's metadata changed after it was added (a streamed step's
        first cell gets the root call's usage once the reply has ended)."""

    def reply_progress(self, run: RunView, progress: ReplyProgress) -> None:
        """A streaming root reply got further: its draft cells, its size."""

    def subcall(self, run: RunView, record: SubcallRecord) -> None:
        """A sub-call was made or changed state."""

    def subcalls_started(self, run: RunView, records: list[SubcallRecord]) -> None:
        """On the code thread, right before it waits for these sub-calls."""

    def subcalls_finished(self, run: RunView, records: list[SubcallRecord]) -> None:
        """On the code thread, once they are all done or failed."""

    def subcalls_settled(self, run: RunView, cell: NotebookNode) -> None:
        """Background sub-calls of a cell that had already finished are over:
        its ``metadata.rlm.subcalls`` now hold their final records."""

    def child_sink(self, run: RunView, record: SubcallRecord) -> Sink | None:
        """Where the child run started for ``record`` reports (None: nowhere)."""
        return None

    def status(self, run: RunView, status: dict[str, Any]) -> None:
        """The run's figures (step, sub-calls, tokens, cost, time) changed."""

    def note(self, run: RunView, text: str) -> None:
        """A sentence for the person watching the run (not for the model), said once."""

    def run_ended(self, run: RunView, result: RunResult) -> None:
        """The run is over; ``result`` says how."""


def _to_each(name: str) -> Any:
    def method(self: MultiSink, *args: Any) -> None:
        for sink in self.sinks:
            getattr(sink, name)(*args)

    method.__name__ = method.__qualname__ = name
    return method


class MultiSink(Sink):
    """Several sinks as one, called in order."""

    def __init__(self, *sinks: Sink | None) -> None:
        self.sinks = [s for s in sinks if s is not None]

    run_started = _to_each("run_started")
    cell_added = _to_each("cell_added")
    cell_started = _to_each("cell_started")
    cell_finished = _to_each("cell_finished")
    cell_edited = _to_each("cell_edited")
    cell_updated = _to_each("cell_updated")
    reply_progress = _to_each("reply_progress")
    subcall = _to_each("subcall")
    subcalls_started = _to_each("subcalls_started")
    subcalls_finished = _to_each("subcalls_finished")
    subcalls_settled = _to_each("subcalls_settled")
    status = _to_each("status")
    note = _to_each("note")
    run_ended = _to_each("run_ended")

    def child_sink(self, run: RunView, record: SubcallRecord) -> Sink | None:
        children = [c for c in (s.child_sink(run, record) for s in self.sinks) if c is not None]
        return MultiSink(*children) if children else None


__all__ = ["MultiSink", "RunView", "Sink"]
