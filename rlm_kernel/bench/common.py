"""What every benchmark module uses: progress callbacks, sizes and the error a
benchmark raises when it cannot run."""

from __future__ import annotations

import sys
from collections.abc import Callable

Progress = Callable[[str], None]

MB = 1_000_000
GB = 1_000_000_000


class BenchError(RuntimeError):
    """A benchmark could not run (a child crashed, a harness is missing)."""


def stderr_progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def quiet(_message: str) -> None:
    pass
