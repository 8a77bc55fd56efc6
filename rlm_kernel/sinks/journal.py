"""The run journal: an append-only record of every finished step on disk.

One JSON line per event, flushed as it happens, so a killed process (or a
crashed kernel) loses nothing it had finished, and synced to the disk (fsync)
once per step, so a machine that dies keeps every finished step: the first
line describes the run, then each cell follows once it is final (markdown cells when written,
code cells when they finish running). ``read_journal`` turns a journal back
into a notebook, which ``rlm-kernel run --resume`` continues.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

from ..engine.trajectory.sink import Sink
from ..redaction import redact
from .notebook import check_writable, file_cell, plain

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.trajectory.result import RunResult
    from ..engine.trajectory.sink import RunView

SUFFIX = ".journal.jsonl"


def journal_path(notebook_path: str | os.PathLike[str]) -> Path:
    """``run.ipynb`` -> ``run.journal.jsonl`` beside it."""
    path = Path(notebook_path)
    return path.with_name(path.stem + SUFFIX)


class JournalSink(Sink):
    """Appends to ``path``; removes it when the run ends cleanly and
    ``keep`` is false (the finished notebook then holds everything)."""

    def __init__(self, path: str | os.PathLike[str], keep: bool = False) -> None:
        check_writable(path, "run journal")
        self.path = Path(path)
        self.keep = keep
        self._handle: Any = None
        self._lock = threading.Lock()
        self._unsynced = False
        self._new_file = False
        self._step = 0

    def _write(self, record: dict[str, Any], sync: bool = False) -> None:
        """Append a line; ``sync`` also asks the disk to keep it (fsync):
        once per finished step, so a machine that dies keeps it too."""
        line = redact(json.dumps(record, ensure_ascii=False, default=str))
        with self._lock:
            if self._handle is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
                self._new_file = True
            self._handle.write(line + "\n")
            self._handle.flush()
            self._unsynced = True
            if sync:
                self._sync()

    def _sync(self) -> None:
        if self._unsynced and self._handle is not None:
            os.fsync(self._handle.fileno())
            self._unsynced = False
            if self._new_file:  # the folder's entry for a new file, once
                self._new_file = False
                with contextlib.suppress(OSError):
                    folder = os.open(self.path.parent, os.O_RDONLY)
                    try:
                        os.fsync(folder)
                    finally:
                        os.close(folder)

    def run_started(self, run: RunView) -> None:
        if run.depth == 0:
            self._write({"kind": "run", "run": plain(run.record())})

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        if run.depth == 0 and cell.cell_type != "code":
            self._write({"kind": "cell", "cell": plain(dict(file_cell(cell)))})
        elif run.depth == 0 and cell.metadata.get("rlm", {}).get("role") in ("query", "context"):
            self._write({"kind": "cell", "cell": plain(dict(file_cell(cell)))})

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth == 0:
            self._write({"kind": "cell", "cell": plain(dict(file_cell(cell)))})

    def subcalls_settled(self, run: RunView, cell: NotebookNode) -> None:
        self.cell_finished(run, cell)  # a later line of the same cell wins

    def status(self, run: RunView, status: dict[str, Any]) -> None:
        # A new step begins: the lines of the step before are final, keep them on disk.
        if run.depth == 0 and status.get("iteration", 0) > self._step:
            self._step = status["iteration"]
            with self._lock:
                self._sync()

    def run_ended(self, run: RunView, result: RunResult) -> None:
        if run.depth:
            return
        self._write({"kind": "end", "run": plain(run.record(result))}, sync=self.keep)
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
        if not self.keep:
            self.path.unlink(missing_ok=True)


def read_journal(path: str | os.PathLike[str]) -> NotebookNode:
    """The notebook a journal describes (a torn last line is ignored)."""
    from ..engine.trajectory.writing import new_notebook

    cells: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the process died mid-write
            if record.get("kind") == "cell":
                cell = record["cell"]
                cells[cell["id"]] = cell  # a later line of the same cell wins, in its first place
            elif record.get("kind") in ("run", "end"):
                if runs and runs[-1].get("run_id") == record["run"].get("run_id"):
                    runs[-1] = record["run"]
                else:
                    runs.append(record["run"])
    nb = new_notebook([nbformat.from_dict(c) for c in cells.values()], runs[-1] if runs else {})
    nb.metadata["rlm"]["runs"] = runs
    return nb


__all__ = ["JournalSink", "journal_path", "read_journal", "SUFFIX"]
