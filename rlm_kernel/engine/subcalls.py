"""The helpers generated code calls: llm_query, llm_query_batched,
rlm_query, rlm_query_batched. They run on the code thread, block it while the
engine loop does the calls, and record every sub-call on the current cell."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BudgetExceeded, RecursionLimitError, SubcallError
from .dispatch import submit
from .llm import ModelCallError

if TYPE_CHECKING:
    from .loop import Run

PREVIEW_CHARS = 160


class SubcallFailure(str):
    """The slot of a failed prompt in a batch: a str (so code that joins or
    slices answers keeps working) that says what went wrong, with
    ``.error`` holding the message."""

    error: str

    def __new__(cls, error: str) -> SubcallFailure:
        text = super().__new__(cls, f"[sub-call error: {error}]")
        text.error = error
        return text


@dataclass
class SubcallRecord:
    id: str
    kind: str  # llm | rlm
    model: str
    prompt: str
    status: str = "queued"  # queued | running | done | error
    response: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_s: float | None = None
    attempts: int = 0
    batch: str | None = None
    child: dict[str, Any] | None = None
    started: float = field(default_factory=time.monotonic)

    def as_metadata(self) -> dict[str, Any]:
        """Compact form for cell metadata: the prompt by hash and preview."""
        record: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "model": self.model,
            "prompt_hash": prompt_hash(self.model, self.prompt),
            "prompt_preview": self.prompt[:PREVIEW_CHARS],
            "prompt_chars": len(self.prompt),
            "status": self.status,
            "response": self.response,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "cost_usd": self.cost_usd,
            "latency_s": None if self.latency_s is None else round(self.latency_s, 4),
        }
        if self.error:
            record["error"] = self.error
        if self.attempts > 1:
            record["attempts"] = self.attempts
        if self.batch:
            record["batch"] = self.batch
        if self.child is not None:
            record["child"] = self.child
        return record


def prompt_hash(model: str, prompt: str) -> str:
    return hashlib.sha256(f"{model}\x00{prompt}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


_batch_ids = itertools.count(1)


class SubcallHelpers:
    """Bound to one run; its methods become the namespace helpers."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._ids = itertools.count(1)

    # -- plain sub-calls ---------------------------------------------------------
    def llm_query(self, prompt: str, model: str | None = None) -> str:
        """Ask the sub-model about ``prompt``; returns its reply as a str."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        prompt = _as_prompt(prompt)
        self.run.tree.budget.reserve_subcalls(1)
        record = self._new_record("llm", prompt, model)
        self._wait([record], self._call(record))
        if record.status == "error":
            raise SubcallError(f"Sub-call to {record.model} failed: {record.error}.")
        return record.response or ""

    def llm_query_batched(self, prompts: list[str], model: str | None = None) -> list[str]:
        """llm_query over many prompts at once; answers in order. A failed
        prompt gives a SubcallFailure in its slot and fails nothing else."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        prompts = [_as_prompt(p) for p in _as_list(prompts)]
        if not prompts:
            return []
        self.run.tree.budget.reserve_subcalls(len(prompts))
        batch = f"b{next(_batch_ids)}"
        records = [self._new_record("llm", p, model, batch=batch) for p in prompts]

        async def all_calls() -> None:
            await asyncio.gather(*(self._call(r) for r in records))

        self._wait(records, all_calls())
        self._raise_if_budget_ended(records)
        return [(r.response or "") if r.status == "done" else SubcallFailure(r.error or "failed") for r in records]

    # -- recursive sub-calls -------------------------------------------------------
    def rlm_query(self, prompt: str, model: str | None = None, context: Any = None) -> str:
        """Hand ``prompt`` to a child RLM with a namespace of its own; its
        ``context`` is the prompt (or the ``context`` you pass)."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        self._check_depth()
        prompt = _as_prompt(prompt)
        self.run.tree.budget.reserve_subcalls(1)
        record = self._new_record("rlm", prompt, model)
        self._wait([record], self._child(record, context))
        if record.status == "error":
            raise SubcallError(f"Child run failed: {record.error}.")
        return record.response or ""

    def rlm_query_batched(self, prompts: list[str], model: str | None = None) -> list[str]:
        """rlm_query over many prompts concurrently; answers in order."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        self._check_depth()
        prompts = [_as_prompt(p) for p in _as_list(prompts)]
        if not prompts:
            return []
        self.run.tree.budget.reserve_subcalls(len(prompts))
        batch = f"b{next(_batch_ids)}"
        records = [self._new_record("rlm", p, model, batch=batch) for p in prompts]

        async def all_children() -> None:
            await asyncio.gather(*(self._child(r, None) for r in records))

        self._wait(records, all_children())
        self._raise_if_budget_ended(records)
        return [(r.response or "") if r.status == "done" else SubcallFailure(r.error or "failed") for r in records]

    # -- internals -------------------------------------------------------------
    def _wait(self, records: list[SubcallRecord], work: Any) -> None:
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        sink = self.run.sink
        sink.subcalls_started(self.run, records)
        try:
            self.run.wait(submit(work))
        finally:
            for record in records:
                if record.status in ("queued", "running"):
                    record.status, record.error = "error", "cancelled"
            sink.subcalls_finished(self.run, records)

    def _check_depth(self) -> None:
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        limit = self.run.tree.limits.max_depth
        if self.run.depth + 1 > limit:
            raise RecursionLimitError(
                f"rlm_query from depth {self.run.depth} would exceed --max-depth {limit}; "
                "use llm_query here instead."
            )

    def _new_record(self, kind: str, prompt: str, model: str | None, batch: str | None = None) -> SubcallRecord:
        endpoint = self.run.sub_endpoint(model)
        record = SubcallRecord(
            id=f"{self.run.run_id}-{next(self._ids)}", kind=kind, model=endpoint.model, prompt=prompt, batch=batch
        )
        self.run.record_subcall(record)
        return record

    async def _call(self, record: SubcallRecord) -> None:
        tree = self.run.tree
        endpoint = self.run.sub_endpoint(record.model)
        async with tree.slots():
            if tree.stopping:
                record.status, record.error = "error", "the run is stopping"
                self.run.subcall_changed(record)
                return
            record.status = "running"
            record.started = time.monotonic()
            self.run.subcall_changed(record)
            try:
                completion = await tree.llm.complete(
                    endpoint, [{"role": "user", "content": record.prompt}], deadline=tree.budget.deadline
                )
            except ModelCallError as error:
                record.status, record.error, record.attempts = "error", str(error), error.attempts
            else:
                tree.budget.charge(completion)
                record.status, record.response = "done", completion.text
                record.prompt_tokens, record.completion_tokens = completion.prompt_tokens, completion.completion_tokens
                record.cost_usd, record.attempts = completion.cost_usd, completion.attempts
            finally:
                record.latency_s = time.monotonic() - record.started
        self.run.subcall_changed(record)

    async def _child(self, record: SubcallRecord, context: Any) -> None:
        record.status = "running"
        self.run.subcall_changed(record)
        started = time.monotonic()
        child = self.run.spawn_child(prompt=record.prompt, context=context, model=record.model,
                                     sink=self.run.sink.child_sink(self.run, record))
        result = await child.run()
        record.latency_s = time.monotonic() - started
        record.child = child.child_record(result)
        usage = result.usage.get(record.model, {})
        record.prompt_tokens = usage.get("prompt_tokens", 0)
        record.completion_tokens = usage.get("completion_tokens", 0)
        if result.reason == "final":
            record.status, record.response = "done", result.answer_text
        else:
            record.status = "error"
            record.error = f"the child run ended with reason {result.reason!r}" + (
                f" ({result.error})" if result.error else ""
            )
        self.run.subcall_changed(record)

    def _raise_if_budget_ended(self, records: list[SubcallRecord]) -> None:
        problem = self.run.tree.budget.exhausted()
        if problem is not None and any(r.status == "error" for r in records):
            raise problem


def _as_prompt(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) for m in prompt):
        raise TypeError("Pass the prompt as a str; chat message lists are not supported here.")
    return str(prompt)


def _as_list(prompts: Any) -> list[Any]:
    if isinstance(prompts, str):
        raise TypeError("llm_query_batched takes a list of prompts, not a single str; use llm_query for one prompt.")
    return list(prompts)


__all__ = ["SubcallHelpers", "SubcallFailure", "SubcallRecord", "BudgetExceeded", "prompt_hash"]
