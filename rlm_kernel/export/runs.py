"""A trajectory notebook read as runs and steps: what every export walks.

Runs are found from the cells themselves (``cell.metadata.rlm``: run id,
step, role), so a notebook written live in JupyterLab (no
``metadata.rlm.runs`` record, a plain ``%%rlm`` cell as the query) reads
like one written by ``rlm-kernel run``. The run record, when there is one,
adds the exact query, models, usage and timing. A child run (``rlm_query``)
is read from its parent's sub-call record (``subcalls[i].child.cells``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from ..engine.execution.capture import outputs_view
from ..engine.protocol import prompts
from ..engine.runs.history import find_query_cell, rebuild
from ..engine.runs.options import OPTIONS, parse_query_cell
from ..engine.trajectory.cells import AGENT_ROLES, reply_text, rlm_meta, source
from ..engine.trajectory.writing import answer_from_markdown

# Any metadata key that looks like a credential is never copied into an export.
_SECRET_KEY = re.compile(
    r"(^|[_-])(api[_-]?key|key|token|secret|password|passwd|authori[sz]ation|credentials?)$", re.I)
_CHILD_QUERY = "`context` holds a task and the text it needs."


def scrub(value: Any) -> Any:
    """A deep copy of ``value`` without keys that name credentials."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return copy.deepcopy(value)


def output_texts(cell: Any) -> tuple[str, str]:
    """A code cell's outputs as (stdout, stderr) text: printed text and
    results, then stderr and errors. Sub-call views are left out (the cell's
    sub-call records hold them)."""
    out, err = [], []
    for output in cell.get("outputs") or []:
        text = outputs_view([output], 1 << 62)[0]
        is_err = output.get("output_type") == "error" or output.get("name") == "stderr"
        (err if is_err else out).append(text)
    return "".join(out), "".join(err)


@dataclass
class Step:
    """One root reply: its prose and code cells, in notebook order."""

    number: int
    cells: list[Any] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)  # of the cells, in the run's cell list

    @property
    def code_cells(self) -> list[Any]:
        return [c for c in self.cells if c.get("cell_type") == "code"]

    @property
    def root_call(self) -> dict[str, Any] | None:
        for cell in self.cells:
            usage = rlm_meta(cell).get("root_call")
            if usage:
                return usage
        return None

    @property
    def approved(self) -> bool:
        """A person approved the step: every code cell has ``approved: true``."""
        code = self.code_cells
        return bool(code) and all(rlm_meta(c).get("approved") is True for c in code)

    def reply(self) -> str:
        """The reply as the root model's history shows it (history.rebuild's form)."""
        parts = []
        for cell in self.cells:
            if cell.get("cell_type") == "markdown":
                text = reply_text(cell)  # the thinking block is not the reply
                if text.strip():
                    parts.append(text)
            else:
                parts.append(f"```repl\n{source(cell)}\n```")
        return "\n\n".join(parts)

    def subcalls(self) -> list[dict[str, Any]]:
        return [s for c in self.code_cells for s in rlm_meta(c).get("subcalls") or []]

    def elapsed_s(self) -> float:
        root = (self.root_call or {}).get("latency_s") or 0.0
        return float(root) + sum(float(rlm_meta(c).get("duration_s") or 0.0) for c in self.code_cells)


@dataclass
class RunView:
    """One run (root or child) as its cells tell it."""

    run_id: str
    cells: list[Any]  # the cells it lives among (the notebook's, or a child's own)
    query_index: int | None
    steps: list[Step]
    answer_cell: Any | None
    record: dict[str, Any]  # the scrubbed metadata.rlm.runs entry, or {}
    notebook: str
    depth: int = 0
    subcall: dict[str, Any] | None = None  # the parent's sub-call record, for a child run
    context_description: str | None = None
    first_message_source: str = "exact"  # exact | reconstructed | unknown
    inherited_limits: dict[str, Any] = field(default_factory=dict)  # a child's: its root run's

    # -- what the run was --------------------------------------------------------
    @property
    def query(self) -> str:
        if self.record.get("query"):
            return self.record["query"]
        if self.query_index is None:
            return ""
        return parse_query_cell(source(self.cells[self.query_index]))[0]

    @property
    def options(self) -> dict[str, Any]:
        if self.query_index is None:
            return {}
        return scrub(parse_query_cell(source(self.cells[self.query_index]))[1])

    @property
    def limits(self) -> dict[str, Any]:
        """The run's limits (``max_iterations``, ``max_depth``, ...), defaults filled in."""
        limits = {o.name: o.default for o in OPTIONS if o.limit}
        if self.record.get("limits"):
            limits.update(self.record["limits"])
        elif self.inherited_limits:
            limits.update(self.inherited_limits)
        else:
            limits.update({key: value for key, value in self.options.items() if key in limits})
        return limits

    @property
    def model(self) -> str | None:
        if self.record.get("model"):
            return self.record["model"]
        if self.subcall:
            return (self.subcall.get("child") or {}).get("model") or self.subcall.get("model")
        for step in self.steps:
            if (step.root_call or {}).get("model"):
                return step.root_call["model"]
        return self.options.get("model")

    @property
    def sub_model(self) -> str | None:
        return self.record.get("sub_model") or self.options.get("sub_model")

    @property
    def sources(self) -> list[str] | None:
        return (self.record.get("context") or {}).get("sources")

    @property
    def reason(self) -> str:
        meta = rlm_meta(self.answer_cell) if self.answer_cell is not None else {}
        if meta.get("reason"):
            return meta["reason"]
        if self.subcall and (self.subcall.get("child") or {}).get("reason"):
            return self.subcall["child"]["reason"]
        return self.record.get("reason") or "unfinished"

    @property
    def error(self) -> str | None:
        return self.record.get("error") or (self.subcall or {}).get("child", {}).get("error")

    @property
    def answer(self) -> str | None:
        """The final answer (for a root run, the notebook's preview of it)."""
        if self.reason != "final":
            return None
        if self.subcall and self.subcall.get("response") is not None:
            return self.subcall["response"]
        if self.answer_cell is None:
            return None
        _, _, body = source(self.answer_cell).partition("\n\n")
        meta = rlm_meta(self.answer_cell)
        return answer_from_markdown(body, meta.get("answer_format"), meta.get("answer_chars"))

    @property
    def answer_var(self) -> str | None:
        return rlm_meta(self.answer_cell).get("answer_var") if self.answer_cell is not None else None

    @property
    def approved(self) -> bool:
        """Every step with code was approved, and there was code to approve."""
        with_code = [s for s in self.steps if s.code_cells]
        return bool(with_code) and all(s.approved for s in with_code)

    # -- what the root model saw --------------------------------------------------
    def first_message(self) -> str:
        """The first user message: the context described, then the query."""
        described = self.context_description or "`context` was not described in this notebook."
        template = prompts.first_message("", self.query, self.sources)
        return described + template[len(prompts.describe_context("")):]

    def messages_before(self, index: int | None = None) -> list[dict[str, Any]]:
        """The root model's messages as the notebook now rebuilds them, from
        the query up to cell ``index`` (inclusive; default: the run's last
        step), with the user's edits and interventions."""
        query_cell = self.cells[self.query_index] if self.query_index is not None else {
            "cell_type": "code", "source": f"%%rlm\n{self.query}",
            "metadata": {"rlm": {"run_id": self.run_id, "step": 0, "role": "query"}}}
        start = (self.query_index + 1) if self.query_index is not None else self._first_cell_index()
        end = self.last_step_index() if index is None else index
        cells = [query_cell, *self.cells[start:end + 1]] if end >= start else [query_cell]
        rebuilt = rebuild(cells, len(cells) - 1, "", view_limit=int(self.limits["max_output_chars"]))
        messages = rebuilt.messages
        messages[1] = {"role": "user", "content": self.first_message()}
        return messages

    def conversation(self) -> list[dict[str, Any]]:
        """The whole run as a chat: up to the last reply (trailing feedback the
        model never answered is left out)."""
        messages = self.messages_before()
        while messages and messages[-1]["role"] == "user" and len(messages) > 2:
            messages.pop()
        return messages

    def step_prompt(self, step: Step) -> list[dict[str, Any]]:
        """The messages the root model had when it wrote ``step``."""
        return self.messages_before(step.indexes[0] - 1)

    def last_step_index(self) -> int:
        indexes = [i for s in self.steps for i in s.indexes]
        if indexes:
            return max(indexes)
        return self.query_index if self.query_index is not None else -1

    def _first_cell_index(self) -> int:
        indexes = [i for s in self.steps for i in s.indexes]
        return min(indexes) if indexes else len(self.cells)

    # -- sub-calls and child runs ----------------------------------------------------
    def subcalls(self) -> list[tuple[Step, dict[str, Any]]]:
        return [(step, record) for step in self.steps for record in step.subcalls()]

    def child(self, record: dict[str, Any]) -> RunView | None:
        """The child run an ``rlm_query`` sub-call record holds, if any."""
        child = record.get("child")
        if isinstance(child, dict) and child.get("cells"):
            return _child_view(record, self)
        return None

    def children(self) -> list[RunView]:
        return [c for c in (self.child(r) for _, r in self.subcalls()) if c is not None]

    def usage(self) -> dict[str, dict[str, Any]]:
        """Tokens, calls and cost per model: the run record's ledger, else summed
        from the cells (root calls, sub-calls and child runs)."""
        if self.record.get("usage"):
            return scrub(self.record["usage"])
        totals: dict[str, dict[str, Any]] = {}
        self._add_usage(totals)
        return totals

    def _add_usage(self, totals: dict[str, dict[str, Any]]) -> None:
        for step in self.steps:
            call = step.root_call
            if call:
                _add(totals, call.get("model") or self.model or "?", call.get("prompt_tokens"),
                     call.get("completion_tokens"), call.get("cost_usd"))
        for _, record in self.subcalls():
            child = self.child(record)
            if child is not None:
                child._add_usage(totals)
            elif record.get("status") in ("done", "error"):
                usage = record.get("usage") or {}
                _add(totals, record.get("model") or "?", usage.get("prompt_tokens"), usage.get("completion_tokens"),
                     record.get("cost_usd"))

    def elapsed_s(self) -> float:
        if self.record.get("elapsed_s") is not None:
            return float(self.record["elapsed_s"])
        if self.subcall and self.subcall.get("latency_s") is not None:
            return float(self.subcall["latency_s"])
        return sum(s.elapsed_s() for s in self.steps)


def _add(totals: dict[str, dict[str, Any]], model: str, prompt: Any, completion: Any, cost: Any) -> None:
    entry = totals.setdefault(model, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0})
    entry["calls"] += 1
    entry["prompt_tokens"] += int(prompt or 0)
    entry["completion_tokens"] += int(completion or 0)
    entry["cost_usd"] = None if cost is None or entry["cost_usd"] is None else entry["cost_usd"] + float(cost)


def prompt_of(record: dict[str, Any]) -> str | None:
    """A sub-call's whole prompt when the notebook holds it, else None (it
    keeps a preview and a hash, not prompts of any length)."""
    if isinstance(record.get("prompt"), str):
        return record["prompt"]
    preview = record.get("prompt_preview") or ""
    chars = record.get("prompt_chars")
    return preview if chars is not None and chars <= len(preview) else None


def count(number: int, noun: str) -> str:
    """``1 step``, ``2 steps``, ``1,000 sub-calls``."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def prompt_shown(record: dict[str, Any]) -> str:
    """The prompt, or its preview saying how much the notebook did not keep."""
    whole = prompt_of(record)
    if whole is not None:
        return whole
    preview = record.get("prompt_preview") or ""
    rest = int(record.get("prompt_chars") or 0) - len(preview)
    return f"{preview}… [{count(rest, 'more character')}; the notebook keeps a preview of each sub-call prompt]"


def read_runs(nb: Any, notebook: str) -> list[RunView]:
    """The notebook's root runs, in notebook order."""
    cells = list(nb.get("cells") or [])
    records = {r.get("run_id"): scrub(r) for r in (nb.get("metadata") or {}).get("rlm", {}).get("runs") or []
               if isinstance(r, dict)}
    return [_view(cells, run_id, records.get(run_id, {}), notebook) for run_id in _run_ids(cells)]


def _run_ids(cells: list[Any]) -> list[str]:
    seen: list[str] = []
    for cell in cells:
        meta = rlm_meta(cell)
        run_id = meta.get("run_id")
        if run_id and meta.get("role") in (*AGENT_ROLES, "query") and run_id not in seen:
            seen.append(run_id)
    return seen


def _view(cells: list[Any], run_id: str, record: dict[str, Any], notebook: str, depth: int = 0,
          subcall: dict[str, Any] | None = None) -> RunView:
    steps: dict[Any, Step] = {}
    answer_cell = None
    query_index = None
    first_agent = None
    for index, cell in enumerate(cells):
        meta = rlm_meta(cell)
        if meta.get("run_id") != run_id or meta.get("superseded"):
            continue
        role = meta.get("role")
        if role == "query":
            query_index = index
        elif role == "answer":
            answer_cell = cell
        elif role in ("thought", "code") and not meta.get("compaction"):  # a compaction is no part of a reply
            first_agent = index if first_agent is None else first_agent
            number = meta.get("step")
            step = steps.setdefault(number, Step(int(number or 0)))
            step.cells.append(cell)
            step.indexes.append(index)
    if query_index is None and first_agent is not None:
        found = find_query_cell(cells, first_agent)
        if found is not None and rlm_meta(cells[found]).get("run_id") in (None, run_id):
            query_index = found
    view = RunView(run_id=run_id, cells=cells, query_index=query_index, steps=list(steps.values()),
                   answer_cell=answer_cell, record=record, notebook=notebook, depth=depth, subcall=subcall)
    _describe(view)
    return view


def _describe(view: RunView) -> None:
    """Find how the root model was told about ``context``."""
    recorded = (view.record.get("context") or {}).get("description")
    if recorded:
        view.context_description = recorded
        return
    if view.subcall is not None:
        if view.query.startswith(_CHILD_QUERY) and view.subcall.get("prompt_chars") is not None:
            # rlm_query(prompt) without a context: the child's context is the prompt.
            view.context_description = prompts.describe_context(" " * int(view.subcall["prompt_chars"]))
            return
    else:
        # A live notebook: the `%rlm context` cell printed the description.
        for cell in reversed(view.cells[:view.query_index or 0]):
            for output in cell.get("outputs") or []:
                text = output.get("text", "") if output.get("output_type") == "stream" else ""
                text = "".join(text) if isinstance(text, list) else text
                if text.startswith("`context` is "):
                    view.context_description = re.sub(r"\s*\(\d+(\.\d+)? s\)\s*$", "", text.strip())
                    view.first_message_source = "reconstructed"
                    return
    view.first_message_source = "unknown"


def _child_view(record: dict[str, Any], parent: RunView) -> RunView:
    child = record["child"]
    cells = list(child.get("cells") or [])
    run_id = child.get("run_id") or next((rlm_meta(c).get("run_id") for c in cells if rlm_meta(c).get("run_id")), "")
    view = _view(cells, run_id, {}, parent.notebook, depth=int(child.get("depth") or parent.depth + 1), subcall=record)
    view.inherited_limits = parent.limits
    return view


def select_runs(runs: list[RunView], *, run_id: str | None = None, only_final: bool = False,
                only_approved: bool = False) -> tuple[list[RunView], list[str]]:
    """The runs the filters keep, and one note per run they drop."""
    kept, dropped = [], []
    for run in runs:
        if run_id and run.run_id != run_id:
            continue
        if only_final and run.reason != "final":
            dropped.append(f"run {run.run_id} (it ended without a final answer: {run.reason})")
        elif only_approved and not run.approved:
            dropped.append(f"run {run.run_id} (not every step of it was approved by a person)")
        else:
            kept.append(run)
    return kept, dropped


__all__ = ["RunView", "Step", "count", "read_runs", "select_runs", "scrub", "prompt_of", "prompt_shown", "source"]
