"""What the sub-call helpers and background jobs use of their run: the
narrow :class:`SubcallHost` (``runs.run.Run`` is one), the cell whose code
runs now (:class:`CellScope`) and a child run as its parent sees it."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..execution.threads import CodeThread
    from ..model.tree import RunTree
    from ..trajectory.records import SubcallRecord
    from ..trajectory.replay import ReplayBook, ReplayCursor
    from ..trajectory.reporter import Reporter
    from ..trajectory.result import RunResult
    from ..trajectory.sink import Sink


class CellScope:
    """The cell whose code runs now: where its sub-calls are recorded, and
    which recorded sub-calls it replays (from the run's replay book)."""

    def __init__(self, replay: ReplayBook | None = None) -> None:
        self.replay = replay
        self.records: list[SubcallRecord] | None = None
        self.cursor: ReplayCursor | None = None
        self.cell_id: str | None = None

    def open(self, cell_id: str | None, source: str | None = None) -> list[SubcallRecord]:
        """Start collecting the sub-calls of a cell (a person's cell without
        an id is found in the book by its ``source``)."""
        records: list[SubcallRecord] = []
        self.records = records
        book = self.replay
        if book is not None and cell_id is None and source is not None:
            cell_id = book.cell_for_source(source)
        self.cursor = book.cursor(cell_id) if book is not None else None
        self.cell_id = cell_id
        return records

    def close(self) -> None:
        self.records = self.cursor = self.cell_id = None


class ChildRun(Protocol):
    """A child run (``rlm_query``) as the helper that started it sees it."""

    own_tokens: list[int]  # prompt, completion: its calls and its children's

    async def run(self) -> RunResult: ...

    def child_record(self, result: RunResult) -> dict[str, Any]: ...

    def close(self) -> None:
        """Let go of its namespace (and a sandboxed child's confined kernel)."""


class SubcallHost(Protocol):
    """What a run gives the helpers its code calls and their background jobs."""

    tree: RunTree
    depth: int
    scope: CellScope
    report: Reporter
    code_thread: CodeThread
    owns_namespace: bool  # False in a person's own cell: a background call waits there too
    cells: list[NotebookNode]  # the run's cells (a background job rewrites its finished cell's records)

    @property
    def namespace(self) -> Mapping[str, Any]: ...

    def wait(self, future: concurrent.futures.Future[Any]) -> Any:
        """Block the code thread on an engine-loop future; an interrupt cancels it."""

    def add_tokens(self, prompt: int, completion: int) -> None: ...

    def record_subcall(self, record: SubcallRecord) -> None:
        """A new sub-call of the cell running now: counted, kept, told."""

    def subcall_changed(self, record: SubcallRecord) -> None: ...

    def spawn_child(self, *, prompt: str, context: Any, model: str, sink: Sink | None = None) -> ChildRun: ...


__all__ = ["CellScope", "ChildRun", "SubcallHost"]
