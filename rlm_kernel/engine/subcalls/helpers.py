"""The helpers generated code calls: llm_query, llm_query_batched,
rlm_query, rlm_query_batched. They run on the code thread, block it while the
engine loop does the calls, and record every sub-call on the current cell."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any

from ...errors import RecursionLimitError, SubcallError
from ..execution.engine_loop import submit
from ..model.model_client import ModelCallError
from ..protocol.images import Image, load_all
from ..trajectory.records import SubcallFailure, SubcallRecord, message_content
from .background import Jobs

if TYPE_CHECKING:
    from .host import SubcallHost

_batch_ids = itertools.count(1)


class SubcallHelpers:
    """Bound to one run; its methods become the namespace helpers."""

    def __init__(self, host: SubcallHost) -> None:
        self.run = host
        self._ids = itertools.count(1)
        self.jobs = Jobs(host)  # the calls started with wait=False

    # -- plain sub-calls ---------------------------------------------------------
    def llm_query(self, prompt: str, model: str | None = None, wait: bool = True, images: Any = None) -> Any:
        """Ask the sub-model about ``prompt`` (and ``images``: matplotlib figures,
        PIL images, PNG/JPEG bytes, file paths or data URLs); returns its reply as a str
        (with ``wait=False``, at once a background Job whose .result() is that str)."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        _check_wait(wait)
        prompt = _as_prompt(prompt)
        record = self._new_records("llm", [(prompt, load_all(images))], model)[0]
        return self._finish("llm_query", [record], self._call(record), wait, lambda: self._answer(record))

    def llm_query_batched(self, prompts: list[str], model: str | None = None, wait: bool = True) -> Any:
        """llm_query over many prompts at once; answers in order. A prompt may
        be a ``(text, images)`` pair. A failed prompt gives a SubcallFailure in
        its slot and fails nothing else."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        _check_wait(wait)
        prompts = [_with_images(p) for p in _as_list(prompts)]
        records = self._new_records("llm", prompts, model, batch=f"b{next(_batch_ids)}") if prompts else []

        async def all_calls() -> None:
            await asyncio.gather(*(self._call(r) for r in records if not r.replayed))

        return self._finish("llm_query_batched", records, all_calls(), wait, lambda: self._answers(records))

    # -- recursive sub-calls -------------------------------------------------------
    def rlm_query(self, prompt: str, model: str | None = None, context: Any = None, wait: bool = True) -> Any:
        """Hand ``prompt`` to a child RLM with a namespace of its own; its
        ``context`` is the prompt (or the ``context`` you pass)."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        _check_wait(wait)
        self._check_depth()
        prompt = _as_prompt(prompt)
        record = self._new_records("rlm", [prompt], model)[0]
        return self._finish("rlm_query", [record], self._child(record, context), wait, lambda: self._answer(record))

    def rlm_query_batched(self, prompts: list[str], model: str | None = None, wait: bool = True) -> Any:
        """rlm_query over many prompts concurrently; answers in order."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        _check_wait(wait)
        self._check_depth()
        prompts = [_as_prompt(p) for p in _as_list(prompts)]
        records = self._new_records("rlm", prompts, model, batch=f"b{next(_batch_ids)}") if prompts else []

        async def all_children() -> None:
            await asyncio.gather(*(self._child(r, None) for r in records if not r.replayed))

        return self._finish("rlm_query_batched", records, all_children(), wait, lambda: self._answers(records))

    # -- internals -------------------------------------------------------------
    def _finish(self, helper: str, records: list[SubcallRecord], work: Any, wait: bool, collect: Any) -> Any:
        """Wait for ``work`` and return ``collect()``, or (``wait`` False) start
        it in the background and return its Job. In a person's own cell (and
        when Run All replays a run's cells) a background call waits too, so
        the cell's records are complete when it ends; its Job is then done."""
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        if not records and wait:
            work.close()
            return collect()
        if wait:
            self._wait(records, work)
            return collect()
        job = self.jobs.start(helper, records, work, collect)
        if not self.run.owns_namespace:
            job.result()
        return job

    def _answer(self, record: SubcallRecord) -> str:
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        if record.status == "error":
            what = f"Sub-call to {record.model} failed" if record.kind == "llm" else "Child run failed"
            raise SubcallError(f"{what}: {record.error}.")
        return record.response or ""

    def _answers(self, records: list[SubcallRecord]) -> list[str]:
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        self._raise_if_budget_ended(records)
        return [(r.response or "") if r.status == "done" else SubcallFailure(r.error or "failed") for r in records]

    def _wait(self, records: list[SubcallRecord], work: Any) -> None:
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        report = self.run.report
        report.subcalls_started(records)
        try:
            self.run.wait(submit(work))
        finally:
            for record in records:
                if record.status in ("queued", "running"):
                    record.status, record.error = "error", "cancelled"
            report.subcalls_finished(records)

    def _check_depth(self) -> None:
        __tracebackhide__ = True  # IPython shows the caller's line, not ours
        limit = self.run.tree.options.max_depth
        if self.run.depth + 1 > limit:
            raise RecursionLimitError(
                f"rlm_query from depth {self.run.depth} would exceed --max-depth {limit}; "
                "use llm_query here instead."
            )

    def _new_records(self, kind: str, prompts: list[str] | list[tuple[str, list[Image]]], model: str | None,
                     batch: str | None = None) -> list[SubcallRecord]:
        """Records for these prompts: replayed ones filled from the notebook,
        the rest claimed from the sub-call budget (all or none)."""
        endpoint = self.run.tree.sub_endpoint_for(model)
        cursor = self.run.scope.cursor
        records, fresh = [], 0
        for given in prompts:
            prompt, images = given if isinstance(given, tuple) else (given, [])
            record = SubcallRecord(id="", kind=kind, model=endpoint.model, prompt=prompt, batch=batch, images=images)
            recorded = cursor.take(endpoint.model, prompt, images) if cursor is not None else None
            if recorded is not None:
                record.replay(recorded)
            else:
                fresh += 1
            records.append(record)
        if fresh:
            self.run.tree.budget.reserve_subcalls(fresh)
        self.run.tree.replayed += len(records) - fresh
        for record in records:
            record.id = str(next(self._ids))  # unique in its run (the cell carries the run id)
            record.cell_id = self.run.scope.cell_id
            self.run.record_subcall(record)
        return records

    async def _call(self, record: SubcallRecord) -> None:
        if record.replayed:
            return
        tree = self.run.tree
        endpoint = tree.sub_endpoint_for(record.model)
        async with tree.subcall_slot():
            if tree.stopping:
                record.status, record.error = "error", "the run is stopping"
                self.run.subcall_changed(record)
                return
            record.status = "running"
            record.started = time.monotonic()
            self.run.subcall_changed(record)
            try:
                completion = await tree.charged_call(
                    endpoint, [{"role": "user", "content": message_content(record.prompt, record.images)}])
            except ModelCallError as error:
                record.status, record.error, record.attempts = "error", str(error), error.attempts
            else:
                self.run.add_tokens(completion.prompt_tokens, completion.completion_tokens)
                # A sub-call's answer is data for the code, never run: a reply that is all
                # reasoning (no content) still answers with it, as before the root's reply
                # became content only.
                record.status, record.response = "done", completion.text or completion.reasoning or ""
                record.prompt_tokens, record.completion_tokens = completion.prompt_tokens, completion.completion_tokens
                record.cost_usd, record.attempts = completion.cost_usd, completion.attempts
                record.deployment = completion.deployment
            finally:
                record.latency_s = time.monotonic() - record.started
        self.run.subcall_changed(record)

    async def _child(self, record: SubcallRecord, context: Any) -> None:
        if record.replayed:
            return
        record.status = "running"
        self.run.subcall_changed(record)
        started = time.monotonic()
        child = self.run.spawn_child(prompt=record.prompt, context=context, model=record.model,
                                     sink=self.run.report.child_sink(record))
        try:
            with self.run.tree.running_child():
                result = await child.run()
        finally:
            child.close()
        record.latency_s = time.monotonic() - started
        record.child = child.child_record(result)
        # the child's own calls (the ledger is shared with its siblings)
        record.prompt_tokens, record.completion_tokens = child.own_tokens
        self.run.add_tokens(*child.own_tokens)
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


def _with_images(prompt: Any) -> tuple[str, list[Image]]:
    """A batch's prompt: text, or a ``(text, images)`` pair."""
    if isinstance(prompt, tuple) and len(prompt) == 2 and isinstance(prompt[0], str):
        return prompt[0], load_all(prompt[1])
    return _as_prompt(prompt), []


def _check_wait(wait: Any) -> None:
    if not isinstance(wait, bool):
        raise TypeError(f"wait takes True (wait for the answer) or False (return a background job at once), not {wait!r}.")


def _as_list(prompts: Any) -> list[Any]:
    if isinstance(prompts, str):
        raise TypeError("llm_query_batched takes a list of prompts, not a single str; use llm_query for one prompt.")
    return list(prompts)


__all__ = ["SubcallHelpers"]
