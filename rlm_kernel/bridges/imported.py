"""Another library's run as a trajectory notebook in our format.

An importer (``rlms_log.py``, ``dspy_trajectory.py``) reads its library's
log into an :class:`ImportedRun`: steps of prose and code blocks, each
block with what it printed and the sub-calls it made (a child run nested
in its record). :func:`notebook` writes it as ``rlm-kernel run`` would
have: the context cell, the query cell (with the models and limits, so
``rlm-kernel run --resume`` and ``%rlm continue`` take them up), a thought
cell and code cells per step with their outputs and ``metadata.rlm``
(status, sub-call records with the prompt's hash, so a re-run replays
them), the answer cell, and the run's record (usage per model, cost,
``imported_from``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from nbformat import NotebookNode, v4

from ..engine.runs.options import query_cell_source, resolve
from ..engine.trajectory import writing
from ..engine.trajectory.records import PREVIEW_CHARS, prompt_hash
from ..redaction import redact

CHILD_QUERY = "`context` holds a task and the text it needs."


@dataclass
class ImportedCall:
    """One sub-call as a library logged it (a child run: ``child`` set)."""

    model: str
    prompt: str
    response: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float = 0.0
    error: str | None = None
    child: ImportedRun | None = None
    hash_model: str | None = None  # the model a re-run's helper will name (default: model)
    recorded_hash: str | None = None  # the prompt's hash as our export wrote it (its prompt may be a preview)


@dataclass
class ImportedBlock:
    code: str
    stdout: str = ""
    stderr: str = ""
    error: bool = False  # the block raised (its traceback is in stderr)
    duration_s: float = 0.0
    calls: list[ImportedCall] = field(default_factory=list)


@dataclass
class ImportedStep:
    prose: str
    blocks: list[ImportedBlock] = field(default_factory=list)
    latency_s: float | None = None  # the root call's, when known


@dataclass
class ImportedRun:
    query: str
    model: str
    steps: list[ImportedStep]
    answer: str | None  # None: the run ended without one
    reason: str = "final"
    sub_model: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)  # max_iterations, max_depth...
    library: str = ""
    source: str = ""  # the log's path
    started: str | None = None
    elapsed_s: float | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


def notebook(run: ImportedRun, context_note: str) -> NotebookNode:
    """The run as a trajectory notebook; ``context_note``: what the context cell says."""
    options = resolve({"model": run.model, "sub_model": run.sub_model, **run.limits})
    cells = [v4.new_markdown_cell(context_note, id=writing.new_cell_id(),
                                  metadata={"rlm": {"role": "context", "sources": None}}),
             writing.query_cell(run.run_id, query_cell_source(options, run.query))]
    cells += run_cells(run)
    usage = usage_of(run)
    costs = [u["cost_usd"] for u in usage.values()]
    record = {
        "run_id": run.run_id, "query": run.query, "model": run.model, "sub_model": options.sub_model,
        "reason": run.reason, "error": None, "iterations": len(run.steps), "subcalls": count_calls(run),
        "replayed_subcalls": 0, "answer_var": None, "limits": options.limits(), "usage": usage,
        "cost_usd": None if not costs or None in costs else sum(costs), "elapsed_s": run.elapsed_s,
        "started": run.started, "context": {"description": None, "sources": None},
        "imported_from": {"library": run.library, "log": run.source},
    }
    return writing.new_notebook(cells, record)


def run_cells(run: ImportedRun) -> list[NotebookNode]:
    """The run's step cells and its answer (or ended) cell."""
    cells: list[NotebookNode] = []
    count = 0
    for number, step in enumerate(run.steps, 1):
        root_call = {"model": run.model, "latency_s": round(step.latency_s, 4)} if step.latency_s is not None else None
        if step.prose.strip() or not step.blocks:
            cells.append(writing.thought_cell(run.run_id, number, step.prose.strip() or "*(no prose)*",
                                              root_call=root_call))
            root_call = None
        for block in step.blocks:
            count += 1
            cells.append(_code_cell(run, number, block, count, root_call))
            root_call = None
    last = len(run.steps)
    if run.answer is not None:
        cells.append(writing.answer_cell(run.run_id, last, run.answer, None, "final"))
    else:
        cells.append(writing.ended_cell(run.run_id, last, run.reason, None))
    return cells


def _code_cell(run: ImportedRun, step: int, block: ImportedBlock, count: int,
               root_call: dict[str, Any] | None) -> NotebookNode:
    cell = writing.code_cell(run.run_id, step, block.code, root_call=root_call)
    outputs = []
    if block.stdout:
        outputs.append(v4.new_output("stream", name="stdout", text=redact(block.stdout)))
    if block.stderr:
        outputs.append(v4.new_output("stream", name="stderr", text=redact(block.stderr)))
    cell.outputs = outputs
    cell.execution_count = count
    meta = cell.metadata["rlm"]
    meta["status"] = "error" if block.error else "ok"
    meta["duration_s"] = round(block.duration_s, 4)
    if block.calls:
        meta["subcalls"] = [_record(call, str(n)) for n, call in enumerate(block.calls, 1)]
    return cell


def _record(call: ImportedCall, record_id: str) -> dict[str, Any]:
    """A sub-call record as ``SubcallRecord.as_metadata`` writes it."""
    record: dict[str, Any] = {
        "id": record_id, "model": call.model,
        "prompt_hash": call.recorded_hash or prompt_hash(call.hash_model or call.model, call.prompt),
        "prompt_preview": call.prompt[:PREVIEW_CHARS], "prompt_chars": len(call.prompt),
        "status": "error" if call.error else "done", "response": redact(call.response),
        "usage": {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens},
        "latency_s": round(call.latency_s, 3),
    }
    if call.cost_usd is not None:
        record["cost_usd"] = call.cost_usd
    if call.error:
        record["error"] = redact(call.error)
    if call.child is not None:
        child = call.child
        record["kind"] = "rlm"
        query = writing.query_cell(child.run_id, f"%%rlm\n{CHILD_QUERY}")
        record["child"] = {"cells": [query, *run_cells(child)], "run_id": child.run_id, "depth": 1,
                           "model": child.model, "reason": child.reason, "iterations": len(child.steps),
                           "error": None}
    return record


def usage_of(run: ImportedRun, totals: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Calls, tokens and cost per model, over the run's sub-calls (a child run's: its whole run's, as its record
    says; root calls are not in the logs)."""
    totals = {} if totals is None else totals
    for step in run.steps:
        for block in step.blocks:
            for call in block.calls:
                entry = totals.setdefault(call.model, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                                       "cost_usd": 0.0})
                entry["calls"] += 1
                entry["prompt_tokens"] += call.prompt_tokens
                entry["completion_tokens"] += call.completion_tokens
                entry["cost_usd"] = (None if call.cost_usd is None or entry["cost_usd"] is None
                                     else entry["cost_usd"] + call.cost_usd)
    return totals


def count_calls(run: ImportedRun) -> int:
    return sum(1 + (count_calls(c.child) if c.child else 0) for s in run.steps for b in s.blocks for c in b.calls)


__all__ = ["CHILD_QUERY", "ImportedBlock", "ImportedCall", "ImportedRun", "ImportedStep", "notebook", "run_cells"]
