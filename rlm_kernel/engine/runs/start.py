"""How a run begins: one value, built by a named constructor and read by the run.

A run begins in one of six ways (``RunStart.kind``):

- ``fresh``: a new question (``%%rlm``, ``RLM.completion``, ``rlm-kernel run``);
  ``follow_up`` set when it builds on earlier runs of the same kernel session.
- ``resumed``: a saved notebook's run goes on after one of its cells
  (``rlm-kernel run --resume``, ``RLM.resume``): its cells re-run first, their
  sub-calls replayed, to rebuild the namespace; its history is rebuilt from them.
- ``continued``: a live run goes on from a cell (``%rlm continue``); the
  namespace is already there.
- ``follow_up``: a new question on a saved notebook (``RLM.completion(...,
  follow_up=...)``, ``--resume NB --query``): its code cells re-run first.
- ``person_cell``: a person's own cell calling ``llm_query``: no root model,
  nothing installed in the namespace.
- ``child``: ``rlm_query``'s run, one level down, on the sub-model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..model.model_client import ModelEndpoint
    from ..trajectory.replay import ReplayBook
    from .follow_up import FollowUp

# The messages a run goes on from, or a function of the context giving them
# (called once the re-run cells have rebuilt the namespace).
History = list[dict[str, Any]] | Callable[[Any], list[dict[str, Any]]]

KINDS = ("fresh", "resumed", "continued", "follow_up", "person_cell", "child")


@dataclass(frozen=True)
class RunStart:
    kind: str
    run_id: str | None = None  # a resumed or continued run keeps its id
    sources: tuple[str, ...] | None = None  # the files the context was loaded from
    cells_before: tuple[NotebookNode, ...] = ()  # the notebook's cells the run's own go after
    cells_after: tuple[NotebookNode, ...] = ()  # kept after the run's own cells (an old continuation)
    rerun: tuple[NotebookNode, ...] = ()  # code cells run again first, to rebuild the namespace
    replay: ReplayBook | None = None  # recorded sub-call responses, used instead of model calls
    history: History | None = None  # the messages the run goes on from
    first_step: int = 1
    earlier_runs: tuple[dict[str, Any], ...] = ()  # a resumed notebook's runs, kept in its metadata
    follow_up: FollowUp | None = None  # the earlier runs this one builds on
    depth: int = 0
    endpoint: ModelEndpoint | None = None  # a child run's model (else the tree's root model)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown run start {self.kind!r}; one of {', '.join(KINDS)}")

    @property
    def owns_namespace(self) -> bool:
        """Whether the run installs its entries (context, helpers, FINAL...) in the namespace."""
        return self.kind != "person_cell"

    @property
    def continues(self) -> bool:
        """The run goes on from a history rather than a first message."""
        return self.history is not None

    # -- the named constructors --------------------------------------------------------
    @classmethod
    def fresh(cls, *, sources: Sequence[str] | None = None, cells_before: Sequence[NotebookNode] = (),
              follow_up: FollowUp | None = None, run_id: str | None = None) -> RunStart:
        return cls("fresh", run_id=run_id, sources=_tuple(sources), cells_before=tuple(cells_before),
                   follow_up=follow_up)

    @classmethod
    def resumed(cls, *, run_id: str | None, cells_before: Sequence[NotebookNode], rerun: Sequence[NotebookNode],
                cells_after: Sequence[NotebookNode], replay: ReplayBook | None, history: History, first_step: int,
                earlier_runs: Sequence[dict[str, Any]] = (), follow_up: FollowUp | None = None,
                sources: Sequence[str] | None = None) -> RunStart:
        return cls("resumed", run_id=run_id, sources=_tuple(sources), cells_before=tuple(cells_before),
                   cells_after=tuple(cells_after), rerun=tuple(rerun), replay=replay, history=history,
                   first_step=first_step, earlier_runs=tuple(earlier_runs), follow_up=follow_up)

    @classmethod
    def continued(cls, *, run_id: str, history: History, first_step: int, follow_up: FollowUp | None = None,
                  sources: Sequence[str] | None = None) -> RunStart:
        return cls("continued", run_id=run_id, sources=_tuple(sources), history=history, first_step=first_step,
                   follow_up=follow_up)

    @classmethod
    def follow_up_on(cls, *, run_id: str, cells_before: Sequence[NotebookNode], rerun: Sequence[NotebookNode],
                     replay: ReplayBook | None, history: History, follow_up: FollowUp,
                     earlier_runs: Sequence[dict[str, Any]] = (), sources: Sequence[str] | None = None) -> RunStart:
        """A new question on a saved notebook's runs."""
        return cls("follow_up", run_id=run_id, sources=_tuple(sources), cells_before=tuple(cells_before),
                   rerun=tuple(rerun), replay=replay, history=history, earlier_runs=tuple(earlier_runs),
                   follow_up=follow_up)

    @classmethod
    def person_cell(cls, replay: ReplayBook | None = None) -> RunStart:
        return cls("person_cell", replay=replay)

    @classmethod
    def child(cls, depth: int, endpoint: ModelEndpoint) -> RunStart:
        return cls("child", depth=depth, endpoint=endpoint)


def _tuple(sources: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(sources) if sources else None


__all__ = ["History", "KINDS", "RunStart"]
