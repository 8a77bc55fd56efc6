"""A sink that keeps the trajectory notebook on disk while the run goes on."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from nbformat import NotebookNode

from ..engine.trajectory.schema import check_when_asked
from ..engine.trajectory.sink import Sink
from ..errors import RLMError
from ..redaction import redact

if TYPE_CHECKING:

    from ..engine.trajectory.result import RunResult
    from ..engine.trajectory.sink import RunView


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def without_widget_views(outputs: list[Any]) -> list[Any]:
    """Outputs as a file keeps them: a saved notebook has no widget state, so
    widget views are left out (their other forms, such as markdown, stay)."""
    kept = []
    for output in outputs:
        data = output.get("data")
        if data and WIDGET_VIEW in data:
            output = nbformat.from_dict({**output, "data": {k: v for k, v in data.items() if k != WIDGET_VIEW}})
            if not output["data"]:
                continue
        kept.append(output)
    return kept


def plain(value: Any) -> Any:
    """``value`` with every nbformat node made a plain dict (for JSON lines and comm messages)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def file_cell(cell: NotebookNode) -> NotebookNode:
    """``cell`` as a trajectory file keeps it."""
    if cell.get("cell_type") != "code" or not cell.get("outputs"):
        return cell
    return nbformat.from_dict({**cell, "outputs": without_widget_views(cell["outputs"])})


def trajectory_notebook(run: RunView, result: RunResult | None = None) -> NotebookNode:
    """The run's trajectory as a notebook file keeps it."""
    nb = run.notebook(result)
    nb.cells = [file_cell(c) for c in nb.cells]
    return nb


def write_notebook(nb: NotebookNode, path: str | os.PathLike[str], validate: bool = True) -> None:
    """Write atomically (a reader never sees half a notebook)."""
    if validate:
        nbformat.validate(nb)
        check_when_asked(nb)  # the trajectory schema too, when the test suite asks
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # A key that generated code printed (or a provider echoed, or a person
        # typed) never reaches the file: known secrets and key-shaped strings.
        text = redact(json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, in one sentence, a file path that cannot be written (a folder,
    a path under a file, a folder without write permission), so that a run
    fails before its first model call rather than after its last."""
    given = os.fspath(path)
    target = Path(given).absolute()
    try:
        if target.is_dir():
            raise RLMError(f"Cannot write the {what} to {given!r}: it is a folder; "
                           f"give a file path such as {os.path.join(given, 'run.ipynb')!r}.")
        folder = target.parent
        while not folder.exists():  # the folders still to be made
            folder = folder.parent
        if not folder.is_dir():
            raise RLMError(f"Cannot write the {what} to {given!r}: {str(folder)!r} is a file, not a folder; "
                           "choose another path.")
        if target.exists() and not os.access(target, os.W_OK):
            raise PermissionError(13, "permission denied")
        # os.access() says yes to root even on a read-only file system: try it.
        fd, probe = tempfile.mkstemp(prefix=".rlm-write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        reason = (error.strerror or type(error).__name__).lower()
        raise RLMError(f"Cannot write the {what} to {given!r} ({reason}); "
                       "choose a place you can write to.") from None


class NotebookSink(Sink):
    """Writes the run's notebook after finished cells (at most every
    ``interval`` seconds) and once more, validated, when the run ends."""

    def __init__(self, path: str | os.PathLike[str], interval: float = 1.0) -> None:
        check_writable(path, "trajectory notebook")
        self.path = Path(path).absolute()  # generated code may change the working directory
        self.interval = interval
        self._last = 0.0
        self._gap = interval

    def _write(self, run: RunView, result: RunResult | None = None) -> None:
        started = time.monotonic()
        write_notebook(trajectory_notebook(run, result), self.path, validate=result is not None)
        self._last = time.monotonic()
        # A big notebook takes long to write: write it less often (at most ~10% of the time).
        self._gap = max(self.interval, 10 * (self._last - started))

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth == 0 and time.monotonic() - self._last >= self._gap:
            self._write(run)

    def subcalls_settled(self, run: RunView, cell: NotebookNode) -> None:
        self.cell_finished(run, cell)

    def run_ended(self, run: RunView, result: RunResult) -> None:
        if run.depth == 0:
            self._write(run, result)
