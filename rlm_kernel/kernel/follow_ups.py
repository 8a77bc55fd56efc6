"""Follow-up questions in a kernel: the runs of this session that a later
``%%rlm`` cell builds on (``engine/runs/follow_up.py`` says what its root model is
told). ``%%rlm --new`` starts a new chain: that run, and the ones after it,
build on nothing before it. A run that Run All replays from the notebook
(its ``%%rlm`` cell found it below) counts as a run of this session."""

from __future__ import annotations

from typing import Any

from ..engine.runs.follow_up import EarlierRun, FollowUp, earlier_runs_in, from_run


class SessionRuns:
    def __init__(self) -> None:
        self.runs: list[EarlierRun] = []  # oldest first

    def follow_up(self, new: bool) -> FollowUp | None:
        """What a new run builds on (None: nothing, or ``--new``)."""
        return FollowUp(list(self.runs)) if self.runs and not new else None

    def add(self, run: EarlierRun) -> None:
        """Keep a run (a continued one replaces its earlier entry, keeping the names its earlier cells bound)."""
        before = [n for r in self.runs if r.run_id == run.run_id for n in r.names]
        run.names = [*before, *(n for n in run.names if n not in before)]
        self.runs = [r for r in self.runs if r.run_id != run.run_id] + [run]

    def ended(self, run: Any, result: Any, new: bool = False) -> None:
        """A run of this session ended; after a ``--new`` one, the runs before it are forgotten."""
        if new:
            self.runs = []
        self.add(from_run(run, result))

    def replayed(self, cells: list[Any], run_id: str) -> None:
        """A recorded run below its ``%%rlm`` cell, which Run All re-runs."""
        found = [r for r in earlier_runs_in(cells) if r.run_id == run_id]
        if found:
            self.add(found[0])


__all__ = ["SessionRuns"]
