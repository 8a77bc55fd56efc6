"""``--format rlms-jsonl``: a run in the log format of the official ``rlms``
library (its ``RLMLogger``), so the library's visualizer opens our runs.

One JSON object per line: first ``{"type": "metadata", "timestamp", ...}``
(the fields of ``rlm.core.types.RLMMetadata``), then one
``{"type": "iteration", "iteration": n, "timestamp", ...}`` per root step
(the fields of ``RLMIteration``: ``prompt`` — the message list the root model
had —, ``response``, ``code_blocks``, ``final_answer``, ``iteration_time``).
Each code block's ``result`` has the fields of ``REPLResult`` (``stdout``,
``stderr``, ``locals``, ``execution_time``, ``rlm_calls``, ``final_answer``);
each sub-call is an ``RLMChatCompletion`` (``root_model``, ``prompt``,
``response``, ``usage_summary``, ``execution_time``, and ``error`` when it
failed); an ``rlm_query`` child carries its own trajectory in ``metadata``
(``{"run_metadata", "iterations"}``), as the library's child loggers do.

A superset: each sub-call also has ``prompt_tokens`` and
``completion_tokens`` (for a child run, the sums over all its calls), and
``prompt_hash`` (the notebook's, which ``rlm-kernel import`` takes back, so
an exported run imported again replays its sub-calls). The
official visualizer (``visualizer/src/lib/types.ts``) shows them on every
sub-call, but ``rlms`` 0.1.3 writes only ``usage_summary``, so its own logs
show "undefined in / undefined out" there; the library's types ignore keys
they do not know.

Mapping notes: ``max_depth`` follows the library's meaning (1 = no
recursion), i.e. our ``--max-depth`` plus one; ``backend`` is ``litellm``,
which is what reached the model: ``rlms`` writes the name of its own client
there (``openai``, ``anthropic``, ``gemini``...; ``litellm`` is none of
them), and its visualizer only prints the field in its header, beside the
root model. ``environment_type`` is ``ipython``; ``locals`` is empty (a notebook keeps no
namespace); a sub-call prompt longer than the notebook's preview is the
preview plus a note of how much is missing; a root run's final answer is
the notebook's preview of it (its first 4,000 characters); timestamps are
the run's start plus the recorded durations.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from typing import Any

from .._version import __version__
from ..engine.trajectory.cells import rlm_meta
from ..engine.trajectory.writing import not_run
from .runs import RunView, Step, output_texts, prompt_shown, source


def render_run(run: RunView, started: datetime | None = None) -> str:
    """The run's log file, as text."""
    return "".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in run_entries(run, started))


def run_entries(run: RunView, started: datetime | None = None) -> list[dict[str, Any]]:
    start = started or run_start(run)
    return [{"type": "metadata", "timestamp": start.isoformat(), **run_metadata(run)}, *iterations(run, start)]


def run_start(run: RunView) -> datetime:
    started = run.record.get("started")
    if started:
        try:
            return datetime.fromisoformat(started.replace("Z", "+00:00"))
        except ValueError:
            pass
    return datetime.now(timezone.utc)


def run_metadata(run: RunView) -> dict[str, Any]:
    """``RLMMetadata.to_dict()`` for our run."""
    limits = run.limits
    model = run.model or "unknown"
    sub_model = run.sub_model
    environment: dict[str, Any] = {"harness": "rlm-kernel", "rlm_kernel_version": __version__,
                                   "run_id": run.run_id, "notebook": run.notebook, "depth": run.depth}
    if sub_model:
        environment["sub_model"] = sub_model
    return {
        "root_model": model,
        "max_depth": int(limits["max_depth"]) + 1,
        "max_iterations": int(limits["max_iterations"]),
        "backend": "litellm",
        "backend_kwargs": {"model_name": model},
        "environment_type": "ipython",
        "environment_kwargs": environment,
        "other_backends": ["litellm"] if sub_model and sub_model != model else None,
    }


def iterations(run: RunView, start: datetime) -> list[dict[str, Any]]:
    entries = []
    clock = start
    final_step = _final_step(run)
    for number, step in enumerate(run.steps, 1):
        elapsed = step.elapsed_s()
        step_start = clock
        clock += timedelta(seconds=elapsed)
        entries.append({
            "type": "iteration",
            "iteration": number,
            "timestamp": clock.isoformat(),
            "prompt": run.step_prompt(step),
            "response": step.reply(),
            "code_blocks": [_code_block(run, cell, step_start) for cell in step.code_cells],
            "final_answer": run.answer if step is final_step else None,
            "iteration_time": round(elapsed, 6),
        })
    return entries


def _final_step(run: RunView) -> Step | None:
    if run.reason != "final" or not run.steps:
        return None
    number = rlm_meta(run.answer_cell).get("step") if run.answer_cell is not None else None
    return next((s for s in run.steps if s.number == number), run.steps[-1])


def _code_block(run: RunView, cell: Any, clock: datetime) -> dict[str, Any]:
    meta = rlm_meta(cell)
    stdout, stderr = output_texts(cell)
    if meta.get("status") == "skipped":  # its only output is the note saying why
        stdout, stderr = "", not_run(meta.get("skipped"))
    return {
        "code": source(cell),
        "result": {
            "stdout": stdout,
            "stderr": stderr,
            "locals": {},
            "execution_time": float(meta.get("duration_s") or 0.0),
            "rlm_calls": [_subcall(run, record, clock) for record in meta.get("subcalls") or []],
            "final_answer": None,
        },
    }


def _subcall(run: RunView, record: dict[str, Any], clock: datetime) -> dict[str, Any]:
    """``RLMChatCompletion.to_dict()`` for one sub-call record."""
    model = record.get("model") or "unknown"
    child_view = run.child(record)
    if child_view is not None:
        usage = child_view.usage()
    else:
        tokens = record.get("usage") or {}
        usage = {model: {"calls": 1, "prompt_tokens": int(tokens.get("prompt_tokens") or 0),
                         "completion_tokens": int(tokens.get("completion_tokens") or 0),
                         "cost_usd": record.get("cost_usd")}}
    entry: dict[str, Any] = {
        "root_model": model,
        "prompt": prompt_shown(record),
        "response": record.get("response") or "",
        "usage_summary": usage_summary(usage),
        "execution_time": float(record.get("latency_s") or 0.0),
        # Read by the official visualizer on each sub-call, written by no rlms version.
        "prompt_tokens": sum(int(u.get("prompt_tokens") or 0) for u in usage.values()),
        "completion_tokens": sum(int(u.get("completion_tokens") or 0) for u in usage.values()),
        "prompt_hash": record.get("prompt_hash"),  # ours: `rlm-kernel import` takes it back, so a re-run replays
    }
    if child_view is not None:
        entry["metadata"] = {"run_metadata": run_metadata(child_view), "iterations": iterations(child_view, clock)}
    if record.get("error"):
        entry["error"] = record["error"]
    return entry


def usage_summary(usage: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``UsageSummary.to_dict()`` from our per-model usage."""
    summaries = {}
    costs = []
    for model, entry in usage.items():
        summary: dict[str, Any] = {
            "total_calls": int(entry.get("calls") or 0),
            "total_input_tokens": int(entry.get("prompt_tokens") or 0),
            "total_output_tokens": int(entry.get("completion_tokens") or 0),
        }
        if entry.get("cost_usd") is not None:
            summary["total_cost"] = float(entry["cost_usd"])
            costs.append(summary["total_cost"])
        summaries[model] = summary
    result: dict[str, Any] = {"model_usage_summaries": summaries}
    if costs:
        result["total_cost"] = sum(costs)
    return result


def file_names(output: str, runs: list[RunView]) -> list[str]:
    """One log file per run: ``output`` itself for one run, else
    ``<stem>.<run id><suffix>`` beside it."""
    if len(runs) == 1:
        return [output]
    stem, suffix = os.path.splitext(output)
    return [f"{stem}.{run.run_id}{suffix or '.jsonl'}" for run in runs]


__all__ = ["render_run", "run_entries", "run_metadata", "usage_summary", "file_names"]
