"""The batch's progress on the terminal: a bar redrawn in place on a
terminal, one line per finished task otherwise (a log, CI)."""

from __future__ import annotations

import time
from typing import IO, Any

from .._words import plural

WIDTH = 30


class ProgressBar:
    def __init__(self, total: int, *, skipped: int = 0, stream: IO[str] | None = None) -> None:
        self.total, self.skipped, self.stream = total, skipped, stream
        self.final = self.failed = 0
        self.started = time.monotonic()
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        if skipped:
            self._line(f"{skipped} of {total} tasks already have a final answer; skipping them")
        self._draw()

    def done(self, line: dict[str, Any]) -> None:
        if line.get("reason") == "final":
            self.final += 1
        else:
            self.failed += 1
        if not self.tty:
            why = f": {line['error']}" if line.get("error") and line.get("reason") != "final" else ""
            self._line(f"task {line['id']}: {line.get('reason')} ({plural(line.get('iterations') or 0, 'step')}, "
                       f"{plural(line.get('subcalls') or 0, 'sub-call')}){why} [{self._counts()}]")
        self._draw()

    def close(self) -> None:
        if self.tty and self.stream is not None:
            self._write("\n")

    def _counts(self) -> str:
        finished = self.skipped + self.final + self.failed
        seconds = int(time.monotonic() - self.started)
        return (f"{finished}/{self.total} done, {self.final} answered, {self.failed} without an answer, "
                f"{self.skipped} skipped, {seconds // 60}:{seconds % 60:02d}")

    def _draw(self) -> None:
        if not self.tty:
            return
        finished = self.skipped + self.final + self.failed
        filled = WIDTH * finished // max(1, self.total)
        self._write(f"\r[{'#' * filled}{'.' * (WIDTH - filled)}] {self._counts()}\033[K")

    def _line(self, text: str) -> None:
        if self.stream is not None:
            self._write(("\r\033[K" if self.tty else "") + f"rlm-kernel batch: {text}\n")

    def _write(self, text: str) -> None:
        assert self.stream is not None
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass
