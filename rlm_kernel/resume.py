"""``rlm-kernel run --resume NB.ipynb [--from-cell N]``: continue a saved run;
with ``--query TEXT``: ask a follow-up question on it.

The namespace is rebuilt by re-running the notebook's code cells up to cell
N with their recorded sub-calls replayed (no model calls for those); the
root model's history is rebuilt from the notebook as it is (edited code,
notes a person added, pinned responses); the run goes on with new cells
after cell N. The old continuation after N is kept below the new one,
marked superseded (or dropped with ``--drop-old``).

A follow-up (:func:`plan_follow_up`) re-runs all of the notebook's code cells
the same way, then starts a new run below them that builds on the notebook's
runs (``engine/runs/follow_up.py``).
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from .context.files import LoadedContext, load_context
from .engine.runs.follow_up import EarlierRun, FollowUp, earlier_runs_in, recorded_follow_up
from .engine.runs.history import find_query_cell, rebuild, run_at
from .engine.runs.options import parse_query_cell
from .engine.steps.vision import StepImages, takes_images
from .engine.trajectory.cells import is_agent_cell, rlm_meta
from .engine.trajectory.cells import source as cell_source
from .engine.trajectory.schema import check_readable
from .errors import RLMError
from .sinks.journal import SUFFIX, read_journal


@dataclass
class ResumePlan:
    cells: list[NotebookNode]  # the notebook's cells up to and including cell N
    prelude: list[NotebookNode]  # the code cells among them to re-run
    trailing: list[NotebookNode]  # the cells after N, kept after the new ones
    upto: int
    run_id: str
    query: str
    options: dict[str, Any]
    context: LoadedContext | None
    earlier_runs: list[dict[str, Any]] = field(default_factory=list)
    follow_up: FollowUp | None = None  # a follow-up run: the runs above it, which it builds on


def read_notebook(path: str) -> NotebookNode:
    file = Path(path)
    if not file.is_file():
        raise RLMError(f"No such notebook: {path!r}.")
    try:
        nb = read_journal(file) if file.name.endswith(SUFFIX) else nbformat.read(file, as_version=4)
    except Exception as error:  # noqa: BLE001 - any parse problem is the same one-sentence error
        raise RLMError(f"{path!r} is not a readable notebook ({type(error).__name__}).") from None
    check_readable(nb, repr(path))
    return nb


def default_cell(cells: list[Any]) -> int:
    """The last cell of the notebook's last run that is not its answer."""
    for index in range(len(cells) - 1, -1, -1):
        meta = rlm_meta(cells[index])
        if meta.get("role") in ("thought", "code") and not meta.get("superseded"):
            return index
    query = find_query_cell(cells, len(cells) - 1)
    if query is None:
        raise RLMError("This notebook has no RLM run to resume (no %%rlm cell).")
    return query


def context_sources(nb: NotebookNode, upto: int) -> list[str] | None:
    for cell in nb.cells[: upto + 1]:
        meta = rlm_meta(cell)
        if meta.get("role") == "context" and meta.get("sources"):
            return list(meta["sources"])
    for cell in nb.cells[: upto + 1]:
        source = cell_source(cell).strip()
        if cell.get("cell_type") == "code" and source.startswith("%rlm context ") and "\n" not in source:
            words = shlex.split(source[len("%rlm context "):])
            return [w for w in words if not w.startswith("--")] or None
    runs = (nb.metadata.get("rlm") or {}).get("runs") or []
    for run in reversed(runs):
        sources = (run.get("context") or {}).get("sources")
        if sources:
            return list(sources)
    return None


def _resolve(sources: list[str], notebook_dir: Path) -> list[str]:
    """Recorded paths as given; else relative to the notebook's folder."""
    resolved = []
    for source in sources:
        path = Path(source)
        if not path.exists() and not path.is_absolute() and (notebook_dir / path).exists():
            path = notebook_dir / path
        resolved.append(str(path))
    return resolved


def plan(path: str, from_cell: int | None, context: list[str] | None, encoding: str = "utf-8",
         drop_old: bool = False, load_here: bool = True) -> ResumePlan:
    """How to resume the run saved at ``path``. ``load_here=False``: the context's
    paths (given, else recorded) are not read here but where a gateway's kernel
    runs, once it has started (they may exist only there)."""
    nb = read_notebook(path)
    cells = nb.cells
    if not cells:
        raise RLMError(f"{path!r} has no cells.")
    if from_cell is None:
        upto = default_cell(cells)
    elif not 0 <= from_cell < len(cells):
        raise RLMError(f"There is no cell {from_cell}: {path!r} has cells 0 to {len(cells) - 1}.")
    else:
        upto = from_cell
    query_index = find_query_cell(cells, upto)
    if query_index is None:
        raise RLMError(f"There is no %%rlm cell at or above cell {upto} to resume from.")
    query, options = parse_query_cell(cell_source(cells[query_index]))
    run_id = run_at(cells, upto, query_index)
    loaded: Any
    if not load_here:
        from .gateway.context import read_there

        named = context or context_sources(nb, upto)
        loaded = read_there(named, encoding) if named else None
    elif context:
        loaded = load_context(context, encoding=encoding)
    else:
        sources = context_sources(nb, upto)
        loaded = load_context(_resolve(sources, Path(path).parent), encoding=encoding) if sources else None
    head = [copy.deepcopy(c) for c in cells[: upto + 1]]
    # another run under the same query (a --fresh one) is not re-run: its code is not this run's past
    prelude = [c for i, c in enumerate(head) if _rerun(c, i, query_index, loaded is not None)
               and not (i > query_index and is_agent_cell(c) and rlm_meta(c).get("run_id") != run_id)]
    trailing = []
    for cell in cells[upto + 1:]:
        cell = copy.deepcopy(cell)
        if is_agent_cell(cell, run_id) and cell.get("cell_type") in ("code", "markdown"):
            if drop_old:
                continue
            cell.metadata.setdefault("rlm", {})["superseded"] = True
        trailing.append(cell)
    earlier = list((nb.metadata.get("rlm") or {}).get("runs") or [])
    return ResumePlan(cells=head, prelude=prelude, trailing=trailing, upto=upto, run_id=run_id, query=query,
                      options=options, context=loaded, earlier_runs=earlier,
                      follow_up=recorded_follow_up(cells, query_index))


@dataclass
class FollowUpPlan:
    cells: list[NotebookNode]  # the notebook's cells, kept above the new run's
    prelude: list[NotebookNode]  # the code cells among them to re-run
    earlier: list[EarlierRun]  # the notebook's runs, oldest first
    options: dict[str, Any]  # those of its last run's %%rlm cell
    context: LoadedContext | None
    records: list[dict[str, Any]] = field(default_factory=list)


def plan_follow_up(notebook: str | NotebookNode, context: list[str] | None = None, encoding: str = "utf-8",
                   load: bool = True) -> FollowUpPlan:
    """A follow-up question on a saved notebook (a path, or a trajectory
    notebook from ``RunResult.notebook``); ``load`` False: the caller has
    the context (its recorded files are not read)."""
    nb = read_notebook(notebook) if isinstance(notebook, str) else copy.deepcopy(notebook)
    folder = Path(notebook).parent if isinstance(notebook, str) else Path.cwd()
    records = list((nb.metadata.get("rlm") or {}).get("runs") or [])
    earlier = [r for r in earlier_runs_in(nb.cells, records) if r.reason != "running"]
    if not earlier:
        raise RLMError("This notebook has no finished RLM run to ask a follow-up about (no %%rlm run with an "
                       "answer cell).")
    last = len(nb.cells) - 1
    query_index = find_query_cell(nb.cells, last)
    options = parse_query_cell(cell_source(nb.cells[query_index]))[1] if query_index is not None else {}
    if context:
        loaded: LoadedContext | None = load_context(context, encoding=encoding)
    else:
        sources = context_sources(nb, last) if load else None
        loaded = load_context(_resolve(sources, folder), encoding=encoding) if sources else None
    prelude = [c for i, c in enumerate(nb.cells) if _rerun(c, i, -1, loaded is not None)]
    return FollowUpPlan(cells=list(nb.cells), prelude=prelude, earlier=earlier, options=options, context=loaded,
                        records=records)


def _rerun(cell: Any, index: int, query_index: int, context_loaded: bool) -> bool:
    """Which recorded cells rebuild the namespace."""
    if cell.get("cell_type") != "code":
        return False
    source = cell_source(cell).lstrip()
    meta = rlm_meta(cell)
    if source.startswith("%%rlm") or source.startswith("%rlm") or meta.get("role") in ("query", "context"):
        return False  # the run itself, and context loading, which the plan did
    if meta.get("status") == "skipped" or meta.get("superseded"):
        return False
    return bool(source.strip()) or index == query_index


def history_for(plan_: ResumePlan, view_limit: int, options: Any = None) -> Any:
    """The root model's messages, built once the context is known (with the
    images earlier steps displayed, when ``options``' root model takes them)."""
    images = step_images(options)

    def build(context: Any) -> list[dict[str, Any]]:
        if context is None:
            raise RLMError("The notebook does not say how its context was loaded; give it with --context PATH.")
        sources = plan_.context.sources if plan_.context else None
        rebuilt = rebuild(plan_.cells, plan_.upto, context, sources=sources, view_limit=view_limit, images=images)
        return rebuilt.messages

    return build


def step_images(options: Any) -> Callable[[], StepImages] | None:
    """What a rebuilt history's steps show of their images: the images, when
    the root model takes them; else (None) a line naming them."""
    if options is None or not takes_images(options.vision, options.model or "")[0]:
        return None
    return lambda: StepImages(options, options.model or "")


def next_step(plan_: ResumePlan) -> int:
    steps = [int(rlm_meta(c).get("step") or 0) for c in plan_.cells if is_agent_cell(c, plan_.run_id)]
    return max(steps, default=0) + 1


__all__ = ["FollowUpPlan", "ResumePlan", "history_for", "next_step", "plan", "plan_follow_up", "read_notebook",
           "step_images"]
