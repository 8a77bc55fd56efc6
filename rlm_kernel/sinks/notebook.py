"""A sink that keeps the trajectory notebook on disk while the run goes on."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from ..errors import redact_secrets
from .base import Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.loop import Run, RunResult


def write_notebook(nb: NotebookNode, path: str | os.PathLike[str], validate: bool = True) -> None:
    """Write atomically (a reader never sees half a notebook)."""
    if validate:
        nbformat.validate(nb)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # A key that generated code printed (or a provider echoed) never reaches the file.
        text = redact_secrets(json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class NotebookSink(Sink):
    """Writes the run's notebook after finished cells (at most every
    ``interval`` seconds) and once more, validated, when the run ends."""

    def __init__(self, path: str | os.PathLike[str], interval: float = 1.0) -> None:
        self.path = Path(path).absolute()  # generated code may change the working directory
        self.interval = interval
        self._last = 0.0
        self._gap = interval

    def _write(self, run: Run, result: RunResult | None = None) -> None:
        started = time.monotonic()
        write_notebook(run.notebook(result), self.path, validate=result is not None)
        self._last = time.monotonic()
        # A big notebook takes long to write: write it less often (at most ~10% of the time).
        self._gap = max(self.interval, 10 * (self._last - started))

    def cell_finished(self, run: Run, cell: NotebookNode) -> None:
        if run.depth == 0 and time.monotonic() - self._last >= self._gap:
            self._write(run)

    def run_ended(self, run: Run, result: RunResult) -> None:
        if run.depth == 0:
            self._write(run, result)
