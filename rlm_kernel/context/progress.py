"""The progress of a long load, as one line redrawn in place (tqdm): on a
terminal's stderr, and in a notebook in the cell's own output (a kernel's
stderr is the cell's stream, and the page redraws a carriage return). It
shows only once a load has taken a moment, and is closed by the summary."""

from __future__ import annotations

import sys
from typing import IO, Any


class ProgressBar:
    """A ``progress(done, total, source)`` callback for ``load_context``."""

    def __init__(self, stream: IO[str] | None = None, delay: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self._bar: Any = None

    def __call__(self, done: int, total: int, source: str) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="file", desc="loading the context", file=self.stream,
                             delay=self.delay, mininterval=0.2, dynamic_ncols=False, ncols=100, leave=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ProgressBar"]
