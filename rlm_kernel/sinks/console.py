"""Progress lines on stderr for headless runs."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

from .._words import plural
from ..engine.sink import Sink
from .display import status_line

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.result import RunResult
    from ..engine.run import Run


class ConsoleSink(Sink):
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def _say(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def cell_finished(self, run: Run, cell: NotebookNode) -> None:
        if run.depth:
            return
        meta = cell.metadata.get("rlm", {})
        first = cell.source.strip().splitlines()[0][:70] if cell.source.strip() else ""
        calls = len(meta.get("subcalls", []))
        extra = f", {plural(calls, 'sub-call')}" if calls else ""
        self._say(f"  step {meta.get('step')}: [{meta.get('status')}{extra}] {first}")

    def run_ended(self, run: Run, result: RunResult) -> None:
        if run.depth:
            return
        self._say(status_line(run.status("ended", result.reason)))

    def status(self, run: Run, status: dict[str, Any]) -> None:
        pass
