"""Stopping a run from its caller's side: a server whose caller went away
(a dropped request, a cancelled tool call) stops the run as an interrupt
does, and the notebook written so far says where it stopped."""

from __future__ import annotations

from ..engine.trajectory.sink import RunView, Sink


class RunStopper(Sink):
    """Keeps the root run once it starts, so that :meth:`interrupt` can stop
    it from any thread (before it starts: as soon as it does)."""

    def __init__(self) -> None:
        self.run: RunView | None = None
        self.stop = False

    def run_started(self, run: RunView) -> None:
        if run.depth == 0:
            self.run = run
            if self.stop:
                run.interrupt()

    def interrupt(self) -> None:
        self.stop = True
        if self.run is not None:
            self.run.interrupt()


__all__ = ["RunStopper"]
