"""A sink that keeps every event in a list (tests, benchmarks)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .base import Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.loop import Run, RunResult
    from ..engine.subcalls import SubcallRecord


class MemorySink(Sink):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, payload: Any) -> None:
        with self._lock:
            self.events.append((kind, payload))

    def kinds(self) -> list[str]:
        with self._lock:
            return [kind for kind, _ in self.events]

    def run_started(self, run: Run) -> None:
        self._add("run_started", run.run_id)

    def cell_added(self, run: Run, cell: NotebookNode, after: str | None) -> None:
        self._add("cell_added", (cell.id, cell.cell_type, after))

    def cell_started(self, run: Run, cell: NotebookNode) -> None:
        self._add("cell_started", cell.id)

    def cell_finished(self, run: Run, cell: NotebookNode) -> None:
        self._add("cell_finished", cell.id)

    def subcall(self, run: Run, record: SubcallRecord) -> None:
        self._add("subcall", (record.id, record.status))

    def status(self, run: Run, status: dict[str, Any]) -> None:
        self._add("status", dict(status))

    def run_ended(self, run: Run, result: RunResult) -> None:
        self._add("run_ended", result.reason)
