"""The RLM loop: messages -> root call -> parse -> run code -> feedback -> stop.

One implementation behind ``%%rlm``, the command line, the Python API and
the benchmarks. It knows nothing about Jupyter: code runs through an
:class:`Executor` on a :class:`CodeThread`, and what happens is reported to a
:class:`Sink`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from nbformat import NotebookNode

from .._words import plural
from ..errors import BudgetExceeded
from ..sinks.base import Sink
from . import prompts, trajectory
from .approval import Approver
from .budget import Budget, Limits
from .dispatch import CodeThread, WorkerThread
from .execution import CellResult, Executor, PlainExecutor
from .guard import run_guarded
from .llm import LLMClient, ModelCallError, ModelEndpoint
from .protocol import cell_feedback, find_final, split_reply
from .replay import ReplayBook, ReplayCursor
from .subcalls import SubcallHelpers, SubcallRecord

REASONS = ("final", "max_iterations", "budget", "timeout", "error", "interrupted")
HELPER_NAMES = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "SHOW_VARS", "FINAL", "FINAL_VAR")


@dataclass
class RunResult:
    run_id: str
    answer: Any
    reason: str
    iterations: int
    subcalls: int
    usage: dict[str, dict[str, Any]]
    cost_usd: float | None
    elapsed_s: float
    answer_var: str | None = None
    error: str | None = None
    replayed_subcalls: int = 0  # answered from the notebook (a resumed run's re-run cells), not counted in subcalls
    notebook: NotebookNode | None = None
    notebook_path: str | None = None

    @property
    def answer_text(self) -> str:
        return trajectory.answer_text(self.answer)

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": None if self.answer is None else self.answer_text,
            "reason": self.reason,
            "error": self.error,
            "iterations": self.iterations,
            "subcalls": self.subcalls,
            "replayed_subcalls": self.replayed_subcalls,
            "usage": {m: {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
                          "calls": u["calls"], "cost_usd": u["cost_usd"]} for m, u in self.usage.items()},
            "cost_usd": self.cost_usd,
            "elapsed_s": round(self.elapsed_s, 3),
            "run_id": self.run_id,
            "answer_var": self.answer_var,
            "notebook": self.notebook_path,
        }


class RunTree:
    """What a run shares with its child runs: the model client, the budget,
    the concurrency limit and the stop flag."""

    def __init__(self, llm: LLMClient, limits: Limits, root: ModelEndpoint, sub: ModelEndpoint) -> None:
        self.llm = llm
        self.limits = limits
        self.budget = Budget(limits)
        self.root_endpoint = root
        self.sub_endpoint = sub
        self.stopping: str | None = None  # reason, once someone asked the run to stop
        self.replayed = 0  # sub-calls answered from the notebook instead of a model
        self._semaphore: asyncio.Semaphore | None = None
        self.lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def slots(self) -> AsyncIterator[None]:
        if self._semaphore is None:  # created on the engine loop, where it is used
            self._semaphore = asyncio.Semaphore(self.limits.concurrency)
        async with self._semaphore:
            yield


class _Stop(Exception):  # noqa: N818
    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


class Run:
    """One RLM run (root or child)."""

    def __init__(
        self,
        tree: RunTree,
        *,
        query: str,
        context: Any,
        executor: Executor,
        code_thread: CodeThread,
        sink: Sink | None = None,
        sources: list[str] | None = None,
        depth: int = 0,
        endpoint: ModelEndpoint | None = None,
        options: dict[str, Any] | None = None,
        run_id: str | None = None,
        lead_cells: list[NotebookNode] | None = None,
        replay: ReplayBook | None = None,
        history: list[dict[str, Any]] | Callable[[Any], list[dict[str, Any]]] | None = None,
        first_step: int = 1,
        approver: Approver | None = None,
        prelude: list[NotebookNode] | None = None,
    ) -> None:
        self.tree = tree
        self.query = query
        self.context = context
        self.sources = sources
        self.executor = executor
        self.code_thread = code_thread
        self.sink = sink or Sink()
        self.depth = depth
        self.endpoint = endpoint or tree.root_endpoint
        self.options = options or {}
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.cells: list[NotebookNode] = list(lead_cells or [])
        self.replay = replay
        self.replay_cursor: ReplayCursor | None = None  # the recorded sub-calls of the cell running now
        self.current_cell_id: str | None = None
        self.history = history  # a continued run starts from these messages
        self.first_step = first_step
        self.approver = approver
        self.prelude = prelude or []  # recorded cells to re-run (replaying sub-calls) before the first step
        self.trailing_cells: list[NotebookNode] = []  # kept after the run's own cells (an old continuation)
        self.earlier_runs: list[dict[str, Any]] = []  # records of the runs a resumed notebook already had
        self.iteration = first_step - 1
        self.own_tokens = [0, 0]  # prompt, completion: this run's calls and its children's (not its siblings')
        self.subcalls_made = 0
        self.started = time.monotonic()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.helpers = SubcallHelpers(self)
        self._cell_subcalls: list[SubcallRecord] | None = None
        self._final: tuple[str | None, Any] | None = None
        self._answer_dict: dict[str, Any] = {"content": "", "ready": False}
        self._last_status = 0.0
        self._installed = False
        self._entries: dict[str, Any] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- namespace -------------------------------------------------------------
    def _namespace_entries(self) -> dict[str, Any]:
        # Built once: bound methods are new objects on every access, and the
        # restore check compares identities.
        if self._entries is None:
            self._entries = self._make_entries()
        return self._entries

    def _make_entries(self) -> dict[str, Any]:
        entries = {
            "context": self.context,
            "llm_query": self.helpers.llm_query,
            "llm_query_batched": self.helpers.llm_query_batched,
            "rlm_query": self.helpers.rlm_query,
            "rlm_query_batched": self.helpers.rlm_query_batched,
            "SHOW_VARS": self._show_vars,
            "FINAL": self._final_call,
            "FINAL_VAR": self._final_var_call,
            "answer": self._answer_dict,
        }
        if self.context is None and self.prelude:
            del entries["context"]  # a resumed run's own cells define it
        return entries

    def _restore_namespace(self) -> list[str]:
        """Put back any helper or ``context`` the code rebound or deleted;
        return their names (none on the first call, which installs them)."""
        namespace = self.executor.namespace
        current_answer = namespace.get("answer")
        if isinstance(current_answer, dict) and current_answer is not self._answer_dict and current_answer.get("ready"):
            self._answer_dict = current_answer  # the code rebuilt the answer dict wholesale
            self._namespace_entries()["answer"] = current_answer
        restored = []
        for name, value in self._namespace_entries().items():
            if namespace.get(name, _MISSING) is not value:
                namespace[name] = value
                restored.append(name)
        first, self._installed = not self._installed, True
        return [] if first else [n for n in restored if n != "answer"]

    def _show_vars(self) -> None:
        skip = set(self._namespace_entries()) | {"In", "Out", "exit", "quit", "get_ipython"}
        rows = []
        for name, value in list(self.executor.namespace.items()):
            if name.startswith("_") or name in skip or callable(value) and getattr(value, "__module__", "") == "builtins":
                continue
            if type(value).__name__ == "module":
                continue
            size = len(value) if hasattr(value, "__len__") and not isinstance(value, type) else None
            rows.append(f"{name}: {type(value).__name__}" + (f" (len {size:,})" if size is not None else ""))
        print("\n".join(rows) if rows else "(no variables yet)")

    def _final_call(self, value: Any = None) -> None:
        self._final = (None, value)

    def _final_var_call(self, name: Any) -> None:
        if isinstance(name, str) and name.isidentifier():
            namespace = self.executor.namespace
            if name not in namespace:
                raise NameError(f"FINAL_VAR: there is no variable named {name!r}; create it first or use FINAL(value).")
            self._final = (name, namespace[name])
        else:
            self._final = (None, name)

    # -- bookkeeping used by the helpers ----------------------------------------
    def sub_endpoint(self, model: str | None) -> ModelEndpoint:
        base = self.tree.sub_endpoint
        if model is None or model == base.model:
            return base
        return ModelEndpoint(model, base.api_base, base.api_key)

    def wait(self, future: concurrent.futures.Future[Any]) -> Any:
        """Block the code thread on an engine-loop future (a sub-call); an
        interrupt of the code (Ctrl-C, a timeout, the run stopping) cancels it."""
        __tracebackhide__ = True
        return self.code_thread.wait(future)

    def add_tokens(self, prompt: int, completion: int) -> None:
        with self.tree.lock:
            self.own_tokens[0] += prompt
            self.own_tokens[1] += completion

    def open_cell(self, cell_id: str | None, source: str | None = None) -> list[SubcallRecord]:
        """Start collecting the sub-calls of a cell (replaying its recorded ones)."""
        records: list[SubcallRecord] = []
        self._cell_subcalls = records
        book = self.replay
        if book is not None and cell_id is None and source is not None:
            cell_id = book.cell_for_source(source)
        self.replay_cursor = book.cursor(cell_id) if book is not None else None
        self.current_cell_id = cell_id
        return records

    def close_cell(self) -> None:
        self._cell_subcalls = None
        self.replay_cursor = None
        self.current_cell_id = None

    def record_subcall(self, record: SubcallRecord) -> None:
        self.subcalls_made += 1
        if self._cell_subcalls is not None:
            self._cell_subcalls.append(record)
        self.sink.subcall(self, record)

    def subcall_changed(self, record: SubcallRecord) -> None:
        self.sink.subcall(self, record)
        self._status()

    def spawn_child(self, *, prompt: str, context: Any, model: str, sink: Sink | None = None) -> Run:
        endpoint = self.sub_endpoint(model)
        if context is None:
            context, query = prompt, (
                "`context` holds a task and the text it needs. Carry out the task and answer with FINAL or FINAL_VAR."
            )
        else:
            query = prompt
        return Run(
            self.tree, query=query, context=context, executor=PlainExecutor(),
            code_thread=WorkerThread(f"rlm-child-{self.depth + 1}"), depth=self.depth + 1, endpoint=endpoint,
            sink=sink,
        )

    def child_record(self, result: RunResult) -> dict[str, Any]:
        """How a child run is kept in its parent's sub-call record."""
        return {
            "run_id": self.run_id, "depth": self.depth, "model": self.endpoint.model,
            "reason": result.reason, "iterations": result.iterations, "error": result.error,
            "cells": [dict(c) for c in self.cells],
        }

    # -- status ----------------------------------------------------------------
    def status(self, state: str = "running", reason: str | None = None) -> dict[str, Any]:
        budget = self.tree.budget
        return {
            "run_id": self.run_id, "state": state, "reason": reason,
            "iteration": self.iteration, "max_iterations": self.tree.limits.max_iterations,
            "depth": self.depth, "subcalls": budget.subcalls, "tokens": budget.ledger.tokens,
            "cost_usd": budget.ledger.cost_usd, "elapsed_s": round(time.monotonic() - self.started, 2),
        }

    def _status(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_status > 0.1:
            self._last_status = now
            self.sink.status(self, self.status())

    def _add_cell(self, cell: NotebookNode) -> None:
        after = self.cells[-1].id if self.cells else None
        self.cells.append(cell)
        self.sink.cell_added(self, cell, after)

    # -- the loop ----------------------------------------------------------------
    async def run(self) -> RunResult:
        limits = self.tree.limits
        reason, error, answer, answer_var = "max_iterations", None, None, None
        self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
        self.sink.run_started(self)
        if self.history is not None and not callable(self.history):
            messages = [dict(m) for m in self.history]
        elif self.history is not None:
            messages = []  # built from the notebook once the prelude has rebuilt `context`
        else:
            if self.depth == 0 or not self.cells:
                self._add_cell(trajectory.query_cell(self.run_id, self.query, self.options))
            messages = [
                {"role": "system", "content": prompts.SYSTEM_PROMPT},
                {"role": "user", "content": prompts.first_message(self.context, self.query, self.sources)},
            ]
        try:
            if self.prelude:
                await self._run_prelude()
            if callable(self.history):
                messages = [dict(m) for m in self.history(self.context)]
            await self.code_thread.run(self._restore_namespace)
            if self.first_step > limits.max_iterations:
                raise _Stop("max_iterations", f"The run already used its {plural(limits.max_iterations, 'step')}; "
                            "raise --max-iterations to continue it.")
            for iteration in range(self.first_step, limits.max_iterations + 1):
                self._check_stop()  # before counting the step: a budget hit here means it never started
                self.iteration = iteration
                self._status(force=True)
                reply = await self._root_call(messages)
                feedback, final = await self._step(iteration, reply)
                if final is not None:
                    answer_var, answer = final
                    reason = "final"
                    break
                left = limits.max_iterations - iteration
                if left and left <= 2:
                    feedback += f"\n\n(You have {left} step{'s' if left > 1 else ''} left; answer soon.)"
                messages.append({"role": "assistant", "content": reply})
                messages.append({"role": "user", "content": feedback})
        except _Stop as stop:
            reason, error = stop.reason, stop.message
        except (asyncio.CancelledError, KeyboardInterrupt):
            reason, error = "interrupted", "The run was interrupted."
        finally:
            if self.depth:
                # A cancelled child (its parent was interrupted or timed out) may
                # still be running code: close() interrupts it.
                self.code_thread.close()
        return self._end(reason, error, answer, answer_var)

    async def _run_prelude(self) -> None:
        """Rebuild the namespace of a resumed run: re-run its recorded cells
        (sub-calls replayed), then take `context` from it if none was given."""
        for cell in self.prelude:
            self._check_stop()
            result = await self._run_cell(cell)
            if result.status == "interrupted":
                raise _Stop(self.tree.stopping or "interrupted", "The run was interrupted.")
        if self.context is None:
            self.context = self.executor.namespace.get("context")
            self._entries = None

    def _check_stop(self) -> None:
        if self.tree.stopping:
            raise _Stop(self.tree.stopping, "The run was interrupted." if self.tree.stopping == "interrupted" else None)
        problem = self.tree.budget.exhausted()
        if problem is not None:
            raise _Stop(problem.reason, str(problem))

    async def _root_call(self, messages: list[dict[str, Any]]) -> str:
        tree = self.tree
        try:
            async with tree.slots():
                completion = await tree.llm.complete(self.endpoint, messages, deadline=tree.budget.deadline)
        except ModelCallError as failure:
            problem = tree.budget.exhausted()
            if problem is not None:
                raise _Stop(problem.reason, str(problem)) from None
            raise _Stop("error", f"The root model call failed: {failure}.") from None
        tree.budget.charge(completion)
        self.add_tokens(completion.prompt_tokens, completion.completion_tokens)
        self._root_usage = {
            "model": completion.model, "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens, "cost_usd": completion.cost_usd,
            "latency_s": round(completion.latency_s, 4),
        }
        return completion.text

    async def _step(self, step: int, reply: str) -> tuple[str, tuple[str | None, Any] | None]:
        """Write the reply's cells, run its code; return feedback and the answer if final."""
        segments = split_reply(reply)
        limits = self.tree.limits
        usage: dict[str, Any] | None = self._root_usage
        feedback: list[str] = []
        marker = None
        ran = 0
        self._final = None
        for segment in segments:
            if segment.kind == "prose":
                self._add_cell(trajectory.thought_cell(self.run_id, step, segment.text, root_call=usage))
                usage = None
                marker = marker or find_final(segment.text)
                continue
            cell = trajectory.code_cell(self.run_id, step, segment.text, root_call=usage)
            usage = None
            if not segment.closed or self._final is not None:
                why = "its ``` fence was never closed" if not segment.closed else "FINAL was already called"
                cell.metadata["rlm"]["status"] = "skipped"
                self._add_cell(cell)
                self.sink.cell_finished(self, cell)
                feedback.append(f"A code block was not run: {why}.")
                continue
            self._add_cell(cell)
            if self.approver is not None:
                decision = await self.approver.decide(self, cell)
                if decision.action == "stop":
                    cell.metadata["rlm"]["status"] = "skipped"
                    self.sink.cell_finished(self, cell)
                    raise _Stop("interrupted", "The run was stopped at an approval prompt.")
                if decision.action == "skip":
                    cell.metadata["rlm"].update(status="skipped", approved=False)
                    self.sink.cell_finished(self, cell)
                    feedback.append("The user chose not to run that code block.")
                    continue
                if decision.source is not None and decision.source != cell.source:
                    cell.source = decision.source
                    cell.metadata["rlm"]["edited"] = True
                    self.sink.cell_edited(self, cell)
                cell.metadata["rlm"]["approved"] = True
            ran += 1
            result = await self._run_cell(cell)
            feedback.append(self._feedback(result))
            if result.status == "interrupted":
                self.tree.stopping = self.tree.stopping or "interrupted"
                if self.tree.stopping == "timeout":
                    raise _Stop("timeout", f"The run's time limit of {limits.timeout:g} s was reached during a cell.")
                raise _Stop(self.tree.stopping, "The run was interrupted.")
            problem = self.tree.budget.exhausted()
            if result.error_name == "BudgetExceeded" or problem is not None:
                problem = problem or BudgetExceeded("A budget was used up during the cell.")
                raise _Stop(problem.reason, str(problem))
            answer_now = self.executor.namespace.get("answer")
            if isinstance(answer_now, dict) and answer_now.get("ready") and self._final is None:
                self._final = (None, answer_now.get("content"))
        if not segments:
            self._add_cell(trajectory.thought_cell(self.run_id, step, "*(empty reply)*", root_call=usage))
        final = self._final
        if final is None and marker is not None:
            final, problem_note = self._resolve_marker(marker)
            if problem_note:
                feedback.append(problem_note)
        notes = self._restore_note(await self.code_thread.run(self._restore_namespace))
        if notes:
            feedback.append(notes)
        if final is None and not ran and marker is None:
            feedback.append(
                "Your reply had no ```repl code block and no FINAL(...) or FINAL_VAR(...) line. "
                "Write code in a ```repl block to continue, or give the final answer."
            )
        return "\n\n".join(feedback), final

    def _resolve_marker(self, marker: Any) -> tuple[tuple[str | None, Any] | None, str | None]:
        if marker.kind == "text":
            return (None, marker.value), None
        name = marker.value
        namespace = self.executor.namespace
        if name.isidentifier() and name in namespace:
            return (name, namespace[name]), None
        return None, f"FINAL_VAR({name}) failed: there is no variable named {name!r}. Create it in code first."

    @staticmethod
    def _restore_note(restored: list[str]) -> str:
        if not restored:
            return ""
        names = ", ".join(f"`{n}`" for n in restored)
        return f"Note: your code rebound or deleted {names}; restored before the next step."

    async def _run_cell(self, cell: NotebookNode) -> CellResult:
        limits = self.tree.limits
        subcalls = self.open_cell(cell.id)
        self.sink.cell_started(self, cell)
        timer = None
        timed_out = threading.Event()
        deadline = self.tree.budget.deadline
        run_left = None if deadline is None else max(0.0, deadline - time.monotonic())
        waits = [w for w in (limits.cell_timeout, run_left) if w is not None]
        if waits:
            ends_run = run_left is not None and run_left <= (limits.cell_timeout or run_left)

            def expire() -> None:
                if ends_run:
                    self.tree.stopping = self.tree.stopping or "timeout"
                else:
                    timed_out.set()
                self.code_thread.interrupt()

            timer = asyncio.get_running_loop().call_later(min(waits), expire)
        try:
            result = await self.code_thread.run(
                lambda: (self._restore_namespace(), run_guarded(limits.no_network_in_code, lambda: self.executor.execute(
                    cell.source, cell_id=cell.id, view_limit=limits.max_output_chars)))[1]
            )
        except KeyboardInterrupt:
            result = CellResult([], "interrupted", None, "KeyboardInterrupt", 0, 0.0, "KeyboardInterrupt")
        finally:
            if timer is not None:
                timer.cancel()
            self.close_cell()
        if result.status == "interrupted" and timed_out.is_set() and not self.tree.stopping:
            result.status = "error"
            result.error_name = "TimeoutError"
            result.model_view += f"\nTimeoutError: the cell ran longer than {limits.cell_timeout:g} s and was interrupted."
        cell.outputs = [_as_output(o) for o in result.outputs]
        cell.outputs = [o for o in cell.outputs if o.get("data") != {}]
        cell.execution_count = result.execution_count
        meta = cell.metadata["rlm"]
        meta["status"] = result.status
        meta["duration_s"] = round(result.duration_s, 4)
        if subcalls:
            meta["subcalls"] = [s.as_metadata() for s in subcalls]
        self.sink.cell_finished(self, cell)
        self._status(force=True)
        return result

    def _feedback(self, result: CellResult) -> str:
        return cell_feedback(result.execution_count, result.status, result.model_view, result.output_chars)

    def _end(self, reason: str, error: str | None, answer: Any, answer_var: str | None) -> RunResult:
        step = self.iteration
        if reason == "final":
            self._add_cell(trajectory.answer_cell(self.run_id, step, answer, answer_var, reason))
        else:
            self._add_cell(trajectory.ended_cell(self.run_id, step, reason, error))
        budget = self.tree.budget
        result = RunResult(
            run_id=self.run_id, answer=answer if reason == "final" else None, reason=reason,
            iterations=self.iteration, subcalls=budget.subcalls if self.depth == 0 else self.subcalls_made,
            usage=budget.ledger.as_dict(), cost_usd=budget.ledger.cost_usd,
            elapsed_s=time.monotonic() - self.started, answer_var=answer_var, error=error,
            replayed_subcalls=self.tree.replayed if self.depth == 0 else 0,
        )
        self.sink.status(self, self.status("ended", reason))
        self.sink.run_ended(self, result)
        return result

    def record(self, result: RunResult | None = None) -> dict[str, Any]:
        """The run's entry in the notebook's ``metadata.rlm.runs`` (so far,
        while ``result`` is None)."""
        budget = self.tree.budget
        entry: dict[str, Any] = {
            "run_id": self.run_id, "query": self.query, "model": self.endpoint.model,
            "sub_model": self.tree.sub_endpoint.model, "started": self.started_at,
            "reason": result.reason if result else "running", "error": result.error if result else None,
            "iterations": self.iteration, "subcalls": budget.subcalls, "replayed_subcalls": self.tree.replayed,
            "usage": budget.ledger.as_dict(), "cost_usd": budget.ledger.cost_usd,
            "elapsed_s": round(time.monotonic() - self.started, 3),
            "answer_var": result.answer_var if result else None,
            "limits": dict(vars(self.tree.limits)),
            "context": {"sources": self.sources, "description": prompts.describe_context(self.context)},
        }
        return entry

    def notebook(self, result: RunResult | None = None) -> NotebookNode:
        nb = trajectory.new_notebook(self.cells + self.trailing_cells, self.record(result))
        if self.earlier_runs:
            nb.metadata["rlm"]["runs"] = [*self.earlier_runs, *nb.metadata["rlm"]["runs"]]
        return nb

    def interrupt(self) -> None:
        """Stop the run from any thread (Ctrl-C, the Interrupt button)."""
        self.tree.stopping = self.tree.stopping or "interrupted"
        task, loop = self._task, self._loop
        if task is not None and loop is not None:
            loop.call_soon_threadsafe(task.cancel)


_MISSING = object()


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _as_output(output: dict[str, Any]) -> NotebookNode:
    """An nbformat output for the trajectory file. Widget views are left out:
    their state lives in the frontend; the markdown form stays."""
    from nbformat import from_dict

    data = output.get("data")
    if data and _WIDGET_VIEW in data:
        output = {**output, "data": {k: v for k, v in data.items() if k != _WIDGET_VIEW}}
    return from_dict(output)


__all__ = ["Run", "RunTree", "RunResult", "REASONS", "HELPER_NAMES"]
