"""Rebuilding a run's message history from a notebook, as the notebook is
now: edited code and its new outputs, edited or deleted markdown, and cells
a person added (told to the root model as the user's interventions).

This is what "continue from here" and ``rlm-kernel run --resume`` stand on.
A compaction cell replaces the steps it summarised by its summary, as the
run itself did (``compaction.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._words import plural
from ..execution.capture import outputs_view
from ..protocol import prompts
from ..protocol.reply import cell_feedback
from ..steps.vision import StepImages, cell_label, rebuilt_note
from ..trajectory.cells import (
    AGENT_ROLES,
    is_agent_cell,
    is_query_cell,
    reply_text,
    rlm_meta,
    source,
)
from ..trajectory.writing import not_run
from .compaction import cell_summary, compacted
from .follow_up import FollowUp, recorded_follow_up
from .options import parse_query_cell


@dataclass
class Rebuilt:
    run_id: str
    query: str
    options: dict[str, Any]
    messages: list[dict[str, Any]]
    next_step: int
    query_index: int
    interventions: int = 0
    sources: list[str] | None = None
    follow_up: FollowUp | None = None  # a follow-up's earlier runs (its first message is briefed again)


def find_query_cell(cells: list[Any], upto: int) -> int | None:
    """The index of the last ``%%rlm`` query cell at or above ``upto``."""
    for index in range(min(upto, len(cells) - 1), -1, -1):
        if is_query_cell(cells[index]):
            return index
    return None


def rebuild(
    cells: list[Any],
    upto: int,
    context: Any,
    *,
    sources: list[str] | None = None,
    view_limit: int = 10_000,
    images: Callable[[], StepImages] | None = None,
) -> Rebuilt:
    """The messages a root model would have seen had the run reached cell
    ``upto`` (inclusive) with the notebook as it is now. With ``images``
    (a step's images, for a root model that takes them), the images the
    cells displayed go with each step's feedback as in the run; without,
    the feedback names them."""
    if not cells:
        raise ValueError("the notebook has no cells")
    upto = max(0, min(upto, len(cells) - 1))
    query_index = find_query_cell(cells, upto)
    if query_index is None:
        raise ValueError("no %%rlm cell at or above that cell to continue from")
    query_cell = cells[query_index]
    query, options = parse_query_cell(source(query_cell))
    run_id = run_at(cells, upto, query_index)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": prompts.system_prompt(context)},
        {"role": "user", "content": prompts.first_message(context, query, sources)},
    ]
    reply: list[str] = []
    feedback: list[str] = []
    interventions = 0
    step = 0
    current_step = None
    shown = images() if images is not None else None

    def flush() -> None:
        nonlocal shown
        _flush_feedback(messages, feedback, reply, close_step, shown)
        shown = images() if images is not None else None

    def close_step() -> None:
        if reply:
            messages.append({"role": "assistant", "content": "\n\n".join(reply)})
            reply.clear()

    for index in range(query_index + 1, upto + 1):
        cell = cells[index]
        meta = rlm_meta(cell)
        if meta.get("superseded"):
            continue
        if meta.get("role") in AGENT_ROLES and meta.get("run_id") != run_id:
            continue  # another run under the same query (a --fresh one): not this history
        if meta.get("compaction"):  # from here on the run read a summary instead of the older steps
            flush()
            current_step = None
            first, last = meta["compaction"]["steps"]
            messages[:] = compacted(messages, int(meta.get("step") or 1), int(last), cell_summary(source(cell)),
                                    int(first))
            continue
        if is_agent_cell(cell, run_id) and meta.get("role") != "answer":
            cell_step = meta.get("step")
            if cell_step != current_step:
                flush()
                current_step = cell_step
            step = max(step, int(cell_step or 0))
            if cell.get("cell_type") == "markdown":
                text = reply_text(cell)  # without its thinking, which never goes back to the model
                if text.strip():
                    reply.append(text)
            else:
                reply.append(f"```repl\n{source(cell)}\n```")
                if meta.get("status") == "skipped" or cell.get("execution_count") is None and not cell.get("outputs"):
                    feedback.append(not_run(meta.get("skipped")))
                else:
                    view, chars = outputs_view(cell.get("outputs") or [], view_limit)
                    status = "error" if any(o.get("output_type") == "error" for o in cell.get("outputs") or []) else "ok"
                    feedback.append(cell_feedback(cell.get("execution_count"), status, view, chars))
                    count, outputs = cell.get("execution_count"), cell.get("outputs") or []
                    said = rebuilt_note(count, outputs) if shown is None else shown.add(cell_label(count), outputs)
                    if said:
                        feedback.append(said)
                pins = [r for r in meta.get("subcalls") or [] if r.get("pinned")]
                if pins:
                    prompts_edited = sum(1 for r in pins if r.get("edited_prompt") is not None)
                    also = (f" (and rewrote the prompt of {prompts_edited})" if prompts_edited else "")
                    feedback.append(f"(The user edited and pinned the response of {len(pins)} sub-call"
                                    f"{'s' if len(pins) != 1 else ''}{also} in that block; "
                                    "the output above uses it.)")
            continue
        if meta.get("role") in ("answer", "context", "query"):
            continue
        text = _intervention(cell, view_limit)
        if text:
            interventions += 1
            close_step()
            feedback.append(text)
            current_step = None
    flush()
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "Continue."})
    return Rebuilt(run_id=run_id, query=query, options=options, messages=messages, next_step=step + 1,
                   query_index=query_index, interventions=interventions, sources=sources,
                   follow_up=recorded_follow_up(cells, query_index))


def _flush_feedback(messages: list[dict[str, Any]], feedback: list[str], reply: list[str],
                    close_step: Any, shown: StepImages | None) -> None:
    close_step()
    if feedback:
        text = "\n\n".join(feedback)
        content = shown.content(text) if shown is not None else text
        if messages[-1]["role"] == "user":
            messages[-1]["content"] = _joined(messages[-1]["content"], content)
        else:
            messages.append({"role": "user", "content": content})
        feedback.clear()


def _joined(first: Any, then: Any) -> Any:
    """Two user messages' contents as one (text, or text and image parts)."""
    if isinstance(first, str) and isinstance(then, str):
        return f"{first}\n\n{then}"
    if isinstance(first, str):
        return [{"type": "text", "text": f"{first}\n\n{then[0]['text']}"}, *then[1:]]
    return [*first, *([{"type": "text", "text": then}] if isinstance(then, str) else then)]


def _intervention(cell: Any, view_limit: int) -> str:
    text = source(cell).strip()
    if text.startswith("%rlm continue"):
        return ""
    if cell.get("cell_type") == "markdown":
        return f"The user wrote a note:\n{text}" if text else ""
    if cell.get("cell_type") != "code" or not text:
        return ""
    view, chars = outputs_view(cell.get("outputs") or [], view_limit)
    out = f"\nIts output ({plural(chars, 'character')}):\n{view.rstrip()}" if view.strip() else "\nIt printed nothing."
    return f"The user stepped in and ran this cell in the same session:\n```python\n{text}\n```{out}"


def run_at(cells: list[Any], upto: int, query_index: int) -> str:
    """The run that cell ``upto`` belongs to: its own run id, else that of
    the nearest agent cell above it (below its query cell); on the query cell
    itself, or with no agent cell in between, the query cell's recorded run,
    else the run of the first agent cell below the query (the newest one, as
    a run's cells are inserted right below its query). The labextension's
    ``runIdAt`` picks the same run."""
    for index in range(upto, query_index, -1):
        meta = rlm_meta(cells[index])
        if meta.get("role") in AGENT_ROLES and meta.get("run_id"):
            return str(meta["run_id"])
    recorded = rlm_meta(cells[query_index]).get("run_id")
    if recorded:
        return str(recorded)
    for cell in cells[query_index + 1:]:
        meta = rlm_meta(cell)
        if meta.get("role") in AGENT_ROLES and meta.get("run_id"):
            return str(meta["run_id"])
        if is_query_cell(cell):
            break
    return ""

