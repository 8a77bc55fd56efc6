"""``--format markdown``: a readable report of each run: the query, the
models, every step (prose, code, output cut to a readable length, sub-calls
summarized), cells a person added, the final answer and the totals."""

from __future__ import annotations

import re
from typing import Any

from ..engine.protocol.reply import truncate_middle
from ..engine.trajectory.cells import rlm_meta
from ..engine.trajectory.writing import not_run
from .runs import RunView, Step, count, output_texts, source

OUTPUT_CHARS = 2_000
PREVIEWS = 3


def render(runs: list[RunView], notebook: str) -> str:
    parts = [f"# RLM trajectory: {notebook}\n"]
    if len(runs) > 1:
        parts.append(f"{count(len(runs), 'run')}.\n")
    for number, run in enumerate(runs, 1):
        parts.append(_run(run, number if len(runs) > 1 else None))
    if len(runs) > 1:
        parts.append("## All runs\n\n" + _totals_line(runs) + "\n")
    return "\n".join(parts).rstrip() + "\n"


def _run(run: RunView, number: int | None) -> str:
    title = run.query.strip().splitlines()[0] if run.query.strip() else "(no query)"
    if len(title) > 80:
        title = title[:77] + "..."
    lines = [f"## {'Run ' + str(number) + ': ' if number else ''}{title}\n"]
    ended = f"`{run.reason}`" + (f" ({run.error})" if run.error and run.reason != "final" else "")
    lines.append(f"- **Run** `{run.run_id}`, ended: {ended}")
    models = f"- **Root model** `{run.model or 'unknown'}`"
    sub_models = sorted({r.get("model") for _, r in _all_subcalls(run) if r.get("model")} | (
        {run.sub_model} if run.sub_model and run.sub_model != run.model else set()))
    if sub_models:
        models += ", **sub-calls** " + ", ".join(f"`{m}`" for m in sub_models)
    lines.append(models)
    if run.context_description:
        lines.append(f"- **Context** {run.context_description}")
    lines.append("\n**Query**\n\n" + _quote(run.query) + "\n")
    lines.extend(_body(run))
    answer = run.answer
    if answer is not None:
        var = run.answer_var
        lines.append("### Final answer" + (f" (the value of `{var}`)" if var else "") + "\n\n" + _quote(answer) + "\n")
    else:
        lines.append(f"### No final answer\n\nThe run ended with reason `{run.reason}`"
                     + (f": {run.error}" if run.error else ".") + "\n")
    lines.append("### Totals\n\n" + _usage_table(run.usage()) + "\n\n" + _totals_line([run]) + "\n")
    return "\n".join(lines)


def _body(run: RunView) -> list[str]:
    """The run's cells in notebook order: steps, and cells a person added among them."""
    by_index: dict[int, Step] = {i: step for step in run.steps for i in step.indexes}
    if not by_index:
        return []
    out: list[str] = []
    current: Step | None = None
    for index in range(min(by_index), max(by_index) + 1):
        cell = run.cells[index]
        step = by_index.get(index)
        if step is not None:
            if step is not current:
                current = step
                out.append(_step_header(step))
            out.append(_agent_cell(run, cell))
        elif rlm_meta(cell).get("compaction") and rlm_meta(cell).get("run_id") == run.run_id:
            out.append(source(cell).strip() + "\n")
        elif not rlm_meta(cell).get("role") or rlm_meta(cell).get("role") == "human":
            out.append(_human_cell(cell))
    return out


def _step_header(step: Step) -> str:
    notes = []
    usage = step.root_call
    if usage:
        notes.append(f"{_int(usage.get('prompt_tokens'))} + {_int(usage.get('completion_tokens'))} tokens")
    if step.approved:
        notes.append("approved by a person")
    return f"### Step {step.number}" + (f" ({', '.join(notes)})" if notes else "") + "\n"


def _agent_cell(run: RunView, cell: Any) -> str:
    meta = rlm_meta(cell)
    text = source(cell)
    if cell.get("cell_type") == "markdown":
        return text.strip() + "\n"
    parts = [_fence(text, "python")]
    if meta.get("edited"):
        parts.append("*(code edited by a person before it ran)*")
    if meta.get("status") == "skipped":
        parts.append(f"*({not_run(meta.get('skipped'))})*")
        return "\n".join(parts) + "\n"
    parts.append(_output(cell))
    subcalls = meta.get("subcalls") or []
    if subcalls:
        parts.append(_subcalls(run, subcalls))
    return "\n".join(p for p in parts if p) + "\n"


def _human_cell(cell: Any) -> str:
    text = source(cell).strip()
    if not text:
        return ""
    if cell.get("cell_type") == "markdown":
        return "*A person added a note:*\n\n" + _quote(text) + "\n"
    return "*A person added a cell:*\n\n" + _fence(text, "python") + "\n" + _output(cell) + "\n"


def _output(cell: Any) -> str:
    stdout, stderr = output_texts(cell)
    text = (stdout + stderr).rstrip()
    if not text:
        return ""
    label = f"Output ({len(text):,} characters, cut to {OUTPUT_CHARS:,}):" if len(text) > OUTPUT_CHARS else "Output:"
    return f"{label}\n\n" + _fence(truncate_middle(text, OUTPUT_CHARS), "text")


def _subcalls(run: RunView, records: list[dict[str, Any]]) -> str:
    kinds: dict[str, int] = {}
    for record in records:
        name = "rlm_query" if record.get("kind") == "rlm" else "llm_query"
        kinds[name] = kinds.get(name, 0) + 1
    models = sorted({r.get("model") or "?" for r in records})
    tokens_in = sum(int((r.get("usage") or {}).get("prompt_tokens") or 0) for r in records)
    tokens_out = sum(int((r.get("usage") or {}).get("completion_tokens") or 0) for r in records)
    failed = sum(1 for r in records if r.get("status") != "done")
    pinned = sum(1 for r in records if r.get("pinned"))
    head = (f"**Sub-calls:** {len(records):,} (" + ", ".join(f"{k} ×{n}" for k, n in kinds.items())
            + f"; {', '.join(f'`{m}`' for m in models)}; {tokens_in:,} + {tokens_out:,} tokens"
            + (f"; {failed} failed" if failed else "") + (f"; {pinned} edited by a person" if pinned else "") + ")")
    lines = [head, ""]
    for record in records[:PREVIEWS]:
        prompt = _one_line(record.get("prompt_preview") or "", 80)
        if record.get("status") == "done":
            answer = _one_line(record.get("response") or "", 120)
        else:
            answer = "failed: " + _one_line(record.get("error") or record.get("status") or "", 100)
        line = f"- `{record.get('model')}`: “{prompt}” → “{answer}”"
        child = run.child(record)
        if child is not None:
            line += f" (child run `{child.run_id}`: {count(len(child.steps), 'step')}, ended `{child.reason}`)"
        lines.append(line)
    if len(records) > PREVIEWS:
        lines.append(f"- ... and {len(records) - PREVIEWS:,} more")
    return "\n".join(lines) + "\n"


def _all_subcalls(run: RunView) -> list[tuple[RunView, dict[str, Any]]]:
    found = []
    for _, record in run.subcalls():
        found.append((run, record))
        child = run.child(record)
        if child is not None:
            found.extend(_all_subcalls(child))
    return found


def _usage_table(usage: dict[str, dict[str, Any]]) -> str:
    rows = ["| model | calls | prompt tokens | completion tokens | cost (USD) |", "|---|---:|---:|---:|---:|"]
    for model, entry in usage.items():
        cost = entry.get("cost_usd")
        rows.append(f"| `{model}` | {_int(entry.get('calls'))} | {_int(entry.get('prompt_tokens'))} | "
                    f"{_int(entry.get('completion_tokens'))} | {'unknown' if cost is None else f'{cost:.6f}'} |")
    return "\n".join(rows)


def _totals_line(runs: list[RunView]) -> str:
    tokens = 0
    cost: float | None = 0.0
    for run in runs:
        for entry in run.usage().values():
            tokens += int(entry.get("prompt_tokens") or 0) + int(entry.get("completion_tokens") or 0)
            cost = None if cost is None or entry.get("cost_usd") is None else cost + float(entry["cost_usd"])
    steps = sum(len(r.steps) for r in runs)
    subcalls = sum(len(_all_subcalls(r)) for r in runs)
    seconds = sum(r.elapsed_s() for r in runs)
    cost_text = "unknown (a price was unknown)" if cost is None else f"${cost:.6f}"
    return (f"**Total:** {count(steps, 'step')}, {count(subcalls, 'sub-call')}, {count(tokens, 'token')}, cost {cost_text}, "
            f"{seconds:,.1f} s.")


def _fence(text: str, lang: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines()) or ">"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _int(value: Any) -> str:
    return f"{int(value or 0):,}"


__all__ = ["render"]
