"""One RLM run (root or child): messages -> root call -> step -> feedback -> stop.

One implementation behind ``%%rlm``, the command line, the Python API and
the benchmarks. It knows nothing about Jupyter: code runs through an
:class:`~.execution.Executor` on a :class:`~.threads.CodeThread`, the root
model through the tree's :class:`~.model_client.ModelClient`, and what
happens is reported to a :class:`~.sink.Sink`. A step itself (a reply's
cells, their code, the feedback) is in ``step.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import Callable
from typing import Any

from nbformat import NotebookNode

from ..._words import plural
from ..execution.engine_loop import submit
from ..execution.executors import Executor
from ..execution.threads import CallerThread, CodeThread, WorkerThread
from ..execution.tools import Toolbox
from ..model.model_client import Completion, ModelCallError, ModelEndpoint
from ..protocol import prompts
from ..protocol.reply import parse_reply
from ..steps.approval import Approver
from ..steps.reply_stream import ReplyStream, WholeReply, learn
from ..steps.step import Stop, run_cell, take_step
from ..subcalls.helpers import SubcallHelpers
from ..trajectory import writing as trajectory
from ..trajectory.records import SubcallRecord
from ..trajectory.replay import ReplayBook, ReplayCursor
from ..trajectory.result import RunResult
from ..trajectory.sink import Sink
from .briefing import brief
from .compaction import Compactor, ContextWindowFull
from .follow_up import FollowUp
from .options import query_cell_source
from .tree import RunTree

History = list[dict[str, Any]] | Callable[[Any], list[dict[str, Any]]]


class Run:
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
        run_id: str | None = None,
        lead_cells: list[NotebookNode] | None = None,
        replay: ReplayBook | None = None,
        history: History | None = None,
        first_step: int = 1,
        approver: Approver | None = None,
        prelude: list[NotebookNode] | None = None,
        trailing_cells: list[NotebookNode] | None = None,
        earlier_runs: list[dict[str, Any]] | None = None,
        owns_namespace: bool = True,
        tools: Toolbox | None = None,
        follow_up: FollowUp | None = None,
    ) -> None:
        """``history`` (messages, or a function of the context giving them)
        makes a continued run start from there at ``first_step``; ``prelude``
        cells re-run first (their sub-calls replayed from ``replay``) to
        rebuild a resumed run's namespace. With ``owns_namespace`` False (a
        person's cell) the run installs nothing in the namespace."""
        self.tree = tree
        self.query = query
        self.context = context
        self.sources = sources
        self.executor = executor
        self.code_thread = code_thread
        self.sink = sink or Sink()
        self.depth = depth
        self.endpoint = endpoint or tree.root_endpoint
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.cells: list[NotebookNode] = list(lead_cells or [])
        self.replay = replay
        self.replay_cursor: ReplayCursor | None = None  # the recorded sub-calls of the cell running now
        self.current_cell_id: str | None = None
        self.history = history
        self.first_step = first_step
        self.approver = approver
        self.prelude = prelude or []
        self.trailing_cells = list(trailing_cells or [])  # kept after the run's own cells (an old continuation)
        self.earlier_runs = list(earlier_runs or [])  # records of the runs a resumed notebook already had
        self.owns_namespace = owns_namespace
        self.tools = tools or Toolbox()  # a person's own functions the root model may call
        self.follow_up = follow_up  # the earlier runs this one builds on
        self.iteration = first_step - 1
        self.own_tokens = [0, 0]  # prompt, completion: this run's calls and its children's (not its siblings')
        self.subcalls_made = 0
        self.started = time.monotonic()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.helpers = SubcallHelpers(self)
        self.entries = executor.make_entries(self)
        self.root_usage: dict[str, Any] | None = None  # the step's root call's, for its first cell
        self.compactor = Compactor(self)  # keeps the history inside the root model's window
        self.reply_source: WholeReply | ReplyStream | None = None  # the step's reply, while it is read
        self.cell_subcalls: list[SubcallRecord] | None = None
        self._last_status = 0.0
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- what the sub-call helpers use ------------------------------------------
    def sub_endpoint(self, model: str | None) -> ModelEndpoint:
        return self.tree.sub_endpoint_for(model)

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
        self.cell_subcalls = records
        book = self.replay
        if book is not None and cell_id is None and source is not None:
            cell_id = book.cell_for_source(source)
        self.replay_cursor = book.cursor(cell_id) if book is not None else None
        self.current_cell_id = cell_id
        return records

    def close_cell(self) -> None:
        self.cell_subcalls = None
        self.replay_cursor = None
        self.current_cell_id = None

    def record_subcall(self, record: SubcallRecord) -> None:
        self.subcalls_made += 1
        if self.cell_subcalls is not None:
            self.cell_subcalls.append(record)
        self.sink.subcall(self, record)

    def subcall_changed(self, record: SubcallRecord) -> None:
        self.sink.subcall(self, record)
        self.report_status()

    def spawn_child(self, *, prompt: str, context: Any, model: str, sink: Sink | None = None) -> Run:
        if context is None:
            context, query = prompt, (
                "`context` holds a task and the text it needs. Carry out the task and answer with FINAL or FINAL_VAR."
            )
        else:
            query = prompt
        return Run(
            self.tree, query=query, context=context, executor=self.executor.child_executor(),
            code_thread=WorkerThread(f"rlm-child-{self.depth + 1}"), depth=self.depth + 1,
            endpoint=self.sub_endpoint(model), sink=sink, tools=self.tools,  # a child may call the person's tools too
        )

    def child_record(self, result: RunResult) -> dict[str, Any]:
        """How a child run is kept in its parent's sub-call record."""
        return {
            "run_id": self.run_id, "depth": self.depth, "model": self.endpoint.model,
            "reason": result.reason, "iterations": result.iterations, "error": result.error,
            "cells": [dict(c) for c in self.cells],
        }

    # -- what a sink reads (trajectory.sink.RunView) ------------------------------
    @property
    def model(self) -> str:
        return self.endpoint.model

    @property
    def max_iterations(self) -> int:
        return int(self.tree.options.max_iterations)

    @property
    def follows(self) -> str | None:
        return self.follow_up.follows if self.follow_up is not None else None

    # -- status ----------------------------------------------------------------
    def status(self, state: str = "running", reason: str | None = None) -> dict[str, Any]:
        budget = self.tree.budget
        return {
            "run_id": self.run_id, "state": state, "reason": reason,
            "iteration": self.iteration, "max_iterations": self.tree.options.max_iterations,
            "depth": self.depth, "subcalls": budget.subcalls,
            "subcalls_running": self.tree.subcalls_running, "subcalls_queued": self.tree.subcalls_queued,
            "tokens": budget.ledger.tokens, "cost_usd": budget.ledger.cost_usd,
            "cache_read_tokens": budget.ledger.cache_read_tokens, "cache_write_tokens": budget.ledger.cache_write_tokens,
            "compactions": self.compactor.count,
            "known_cost_usd": budget.ledger.known_cost, "elapsed_s": round(time.monotonic() - self.started, 2),
            "root": self.root_phase() if state == "running" else None,
        }

    def report_status(self, force: bool = False) -> None:
        """Tell the sink the figures, at most every 0.1 s unless ``force``."""
        now = time.monotonic()
        if force or now - self._last_status > 0.1:
            self._last_status = now
            self.sink.status(self, self.status())

    def add_cell(self, cell: NotebookNode) -> None:
        if self.follow_up is not None and "rlm" in cell.metadata:
            cell.metadata["rlm"]["follows"] = self.follow_up.follows
        after = self.cells[-1].id if self.cells else None
        self.cells.append(cell)
        self.sink.cell_added(self, cell, after)

    # -- the loop ----------------------------------------------------------------
    async def run(self) -> RunResult:
        options = self.tree.options
        reason, error, answer, answer_var = "max_iterations", None, None, None
        self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
        self.sink.run_started(self)
        if self.history is not None and not callable(self.history):
            messages = [dict(m) for m in self.history]
        elif self.history is not None:
            messages = []  # built from the notebook once the prelude has rebuilt `context`
        else:
            if self.depth == 0 or not self.cells:
                source = query_cell_source(options, self.query) if self.depth == 0 else f"%%rlm\n{self.query}"
                self.add_cell(trajectory.query_cell(self.run_id, source))
            messages = [
                {"role": "system", "content": prompts.SYSTEM_PROMPT},
                {"role": "user", "content": prompts.first_message(self.context, self.query, self.sources)},
            ]
        try:
            if self.prelude:
                await self._run_prelude()
            if callable(self.history):
                messages = [dict(m) for m in self.history(self.context)]
            messages = await brief(self, messages)
            await self.code_thread.run(self.entries.restore)
            if self.first_step > options.max_iterations:
                raise Stop("max_iterations", f"The run already used its {plural(options.max_iterations, 'step')}; "
                           "raise --max-iterations to continue it.")
            for iteration in range(self.first_step, options.max_iterations + 1):
                self.check_stop()  # before counting the step: a budget hit here means it never started
                self.iteration = iteration
                self.root_usage = None
                source = await self._ask(messages, iteration)
                try:
                    feedback, final = await take_step(self, iteration, source)
                finally:
                    source.close()
                    self.reply_source = None
                reply = source.reply
                assert reply is not None
                if final is not None:
                    answer_var, answer = final
                    reason = "final"
                    break
                messages.append({"role": "assistant", "content": reply.visible})  # never its thinking
                messages.append({"role": "user", "content": feedback})
        except Stop as stop:
            reason, error = stop.reason, stop.message
        except (asyncio.CancelledError, KeyboardInterrupt):
            reason, error = "interrupted", "The run was interrupted."
        finally:
            await self.helpers.jobs.stop_all()  # background sub-calls still running: cancelled, reported
            if self.depth:  # a cancelled child (its parent stopped) may still run code: close() interrupts it
                self.code_thread.close()
        return self._end(reason, error, answer, answer_var)

    async def _run_prelude(self) -> None:
        """Rebuild the namespace of a resumed run: re-run its recorded cells
        (sub-calls replayed), then take `context` from it if none was given."""
        for cell in self.prelude:
            self.check_stop()
            result = await run_cell(self, cell)
            if result.status == "interrupted":
                raise Stop(self.tree.stopping or "interrupted", "The run was interrupted.")
        if self.context is None:
            self.context = self.executor.namespace.get("context")
            self.entries.forget()
        self.entries.check_answer()  # the re-run cells may have made `answer` the model's own

    def check_stop(self) -> None:
        """Raise :class:`Stop` when someone asked the run to stop or a budget is used up."""
        if self.tree.stopping:
            raise Stop(self.tree.stopping, "The run was interrupted." if self.tree.stopping == "interrupted" else None)
        problem = self.tree.budget.exhausted()
        if problem is not None:
            raise Stop(problem.reason, str(problem))

    async def _ask(self, messages: list[dict[str, Any]], step: int) -> WholeReply | ReplyStream:
        """Start the step's root call: streamed (its reply read as it comes,
        the call going on while the step runs its code) or whole. The status
        ticks every second until the reply has ended."""
        self.reply_source = source = ReplyStream(self, step, early=self.approver is None)
        ticker = asyncio.ensure_future(self._tick())
        if not self.tree.options.no_stream and not self.endpoint.json_steps:
            call = asyncio.ensure_future(self.compactor.call(messages, lambda sent: self._root_call(sent, source)))
            call.add_done_callback(lambda _: ticker.cancel())
            source.attach(call)
            return source
        try:
            completion = await self.compactor.call(messages, self._root_call)
        finally:
            ticker.cancel()
        whole = WholeReply(parse_reply(completion.text, completion.reasoning, completion.thinking_blocks))
        learn(self.endpoint.model, whole.reply)
        self.reply_source = whole
        return whole

    async def _tick(self) -> None:
        while True:
            self.report_status(force=True)
            await asyncio.sleep(1.0)

    def root_phase(self) -> dict[str, Any] | None:
        """While the root call of the step runs: "thinking" (no token yet) or
        "writing", since when, how much."""
        source = self.reply_source
        if not isinstance(source, ReplyStream) or (source.completion is not None):
            return None
        return source.figures()

    async def _root_call(self, messages: list[dict[str, Any]], listener: ReplyStream | None = None) -> Completion:
        tree = self.tree
        try:
            async with tree.slots():
                completion = await tree.client.complete(self.endpoint, messages, deadline=tree.budget.deadline,
                                                        listener=listener)
        except ModelCallError as failure:
            problem = tree.budget.exhausted()
            if problem is not None:
                raise Stop(problem.reason, str(problem)) from None
            if failure.context_window:
                raise ContextWindowFull(self.endpoint.model) from None
            raise Stop("error", f"The root model call failed: {failure}.") from None
        tree.budget.charge(completion)
        self.add_tokens(completion.prompt_tokens, completion.completion_tokens)
        self.root_usage = {
            "model": completion.model, "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens, "cost_usd": completion.cost_usd,
            "latency_s": round(completion.latency_s, 4),
        }
        if completion.deployment:
            self.root_usage["deployment"] = completion.deployment
        return completion

    def _end(self, reason: str, error: str | None, answer: Any, answer_var: str | None) -> RunResult:
        step = self.iteration
        if reason == "final":
            self.add_cell(trajectory.answer_cell(self.run_id, step, answer, answer_var, reason))
        else:
            self.add_cell(trajectory.ended_cell(self.run_id, step, reason, error))
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
        return {
            "run_id": self.run_id, "query": self.query, "model": self.endpoint.model,
            "sub_model": self.tree.sub_endpoint.model, "started": self.started_at,
            "reason": result.reason if result else "running", "error": result.error if result else None,
            "iterations": self.iteration, "subcalls": budget.subcalls, "replayed_subcalls": self.tree.replayed,
            "usage": budget.ledger.as_dict(), "cost_usd": budget.ledger.cost_usd,
            "elapsed_s": round(time.monotonic() - self.started, 3),
            "answer_var": result.answer_var if result else None,
            "limits": self.tree.options.limits(),
            "context": {"sources": self.sources, "description": prompts.describe_context(self.context)},
            **({"tools": self.tools.names()} if self.tools.tools else {}),
            **({"follows": self.follow_up.follows} if self.follow_up is not None else {}),
        }

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

    # -- running a root run on this thread -------------------------------------------
    def run_here(self) -> RunResult:
        """Run to the end; the code executes on the calling thread, which is
        where Ctrl-C / the kernel's Interrupt lands."""
        thread = self._caller_thread()
        future = submit(self.run())
        future.add_done_callback(lambda _: thread.close())
        thread.serve(on_interrupt=self.interrupt)
        return future.result()

    async def run_here_async(self) -> RunResult:
        """:meth:`run_here` for a caller that is itself a coroutine on an
        asyncio loop (the kernel's): the loop stays responsive between cells."""
        thread = self._caller_thread()
        future = submit(self.run())
        future.add_done_callback(lambda _: thread.close())
        await thread.serve_async(on_interrupt=self.interrupt)
        return future.result()

    def _caller_thread(self) -> CallerThread:
        if not isinstance(self.code_thread, CallerThread):
            raise TypeError("a run served on the calling thread needs a CallerThread")
        return self.code_thread


__all__ = ["Run"]
