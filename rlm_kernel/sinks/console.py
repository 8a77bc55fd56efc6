"""Progress lines on stderr for headless runs.

While a root reply streams, a terminal shows one line that is redrawn
(``step 3: root model writing · 240 tok · 4.1 s``); a pipe gets no such
line, only the finished cells. ``verbose`` writes the reply's text itself as
it comes, on a terminal or not.
"""

from __future__ import annotations

import time
from typing import IO, TYPE_CHECKING, Any

from .._words import plural, tokens_text
from ..engine.trajectory.sink import Sink
from .display import status_line

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.trajectory.progress import ReplyProgress
    from ..engine.trajectory.result import RunResult
    from ..engine.trajectory.sink import RunView


class ConsoleSink(Sink):
    def __init__(self, stream: IO[str], verbose: bool = False) -> None:
        self.stream = stream
        self.verbose = verbose
        try:
            self.terminal = stream.isatty()
        except (AttributeError, ValueError):
            self.terminal = False
        self._line = False  # a progress line is on screen
        self._drawn = 0.0
        self._written = 0  # of the streaming reply's text, with --verbose
        self._step = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def _say(self, text: str) -> None:
        self._clear()
        self._write(text + "\n")

    def _clear(self) -> None:
        if self._line:
            self._line = False
            self._write("\r\x1b[K")

    def reply_progress(self, run: RunView, progress: ReplyProgress) -> None:
        if run.depth:
            return
        if progress.step != self._step:
            self._step, self._written = progress.step, 0
        if self.verbose:
            if progress.chars < self._written:  # the reply broke off and starts again
                self._say(f"  step {progress.step}: (the reply broke off; asked again)")
                self._written = 0
            new = progress.text[self._written:]
            if new:
                self._clear()
                self._write(new)
                self._written = len(progress.text)
            if progress.phase == "done" and self._written:
                self._write("\n")
            return
        if progress.phase == "done":
            self._clear()

    def status(self, run: RunView, status: dict[str, Any]) -> None:
        """On a terminal, while the root call runs: one line, redrawn."""
        if run.depth or not self.terminal or self.verbose:
            return
        root = status.get("root")
        if not root or status.get("waiting"):  # (a person is asked on this terminal: the prompt says it)
            self._clear()
            return
        now = time.monotonic()
        if now - self._drawn < 0.2:
            return
        self._drawn = now
        what = "thinking" if root.get("phase") == "thinking" else f"writing · {tokens_text(root.get('tokens') or 0)}"
        self._write(f"\r\x1b[K  step {status.get('iteration')}: root model {what} · {root.get('elapsed_s', 0):.0f} s")
        self._line = True

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        if cell.metadata.get("rlm", {}).get("compaction") and not run.depth:
            self._say("  " + cell.source.split("\n", 1)[0].replace("**", ""))

    def note(self, run: RunView, text: str) -> None:
        if not run.depth:
            self._say(f"note: {text}")

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth:
            return
        meta = cell.metadata.get("rlm", {})
        first = cell.source.strip().splitlines()[0][:70] if cell.source.strip() else ""
        calls = len(meta.get("subcalls", []))
        extra = f", {plural(calls, 'sub-call')}" if calls else ""
        self._say(f"  step {meta.get('step')}: [{meta.get('status')}{extra}] {first}")

    def run_ended(self, run: RunView, result: RunResult) -> None:
        if run.depth:
            return
        self._say(status_line(run.status("ended", result.reason)))
