"""One RLM run (root or child): messages -> root call -> step -> feedback -> stop.

One implementation behind ``%%rlm``, the command line, the Python API and
the benchmarks. It knows nothing about Jupyter: code runs through an
:class:`~..execution.executors.Executor` on a :class:`~..execution.threads.CodeThread`,
the root model through the tree's model client, and what happens is reported
to a :class:`~..trajectory.sink.Sink`. How it begins is a
:class:`~.start.RunStart`; a step itself (a reply's cells, their code, the
feedback) is in ``steps/step.py``. The parts a run hands work to see it
through narrow views: ``StepHost``, ``SubcallHost``, ``CompactionHost``,
``RunView`` (for sinks), ``Installs`` (for the namespace's entries).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from nbformat import NotebookNode

from ..._words import plural
from ..execution.engine_loop import submit
from ..execution.executors import Executor
from ..execution.namespace import Installs
from ..execution.threads import CallerThread, CodeThread, WorkerThread
from ..model.model_client import Completion, ModelCallError
from ..model.tree import RunTree
from ..protocol import prompts
from ..protocol.reply import parse_reply
from ..steps import vision
from ..steps.approval import Approver
from ..steps.reply_stream import ReplyStream, WholeReply, learn
from ..steps.step import Stop, run_cell, take_step
from ..subcalls.background import Jobs
from ..subcalls.helpers import SubcallHelpers
from ..subcalls.host import CellScope
from ..trajectory import writing as trajectory
from ..trajectory.records import SubcallRecord
from ..trajectory.reporter import Reporter
from ..trajectory.result import RunResult
from ..trajectory.sink import Sink
from .briefing import brief
from .compaction import Compactor, ContextWindowFull
from .options import query_cell_source
from .start import RunStart


class Run:
    def __init__(self, tree: RunTree, start: RunStart, *, query: str, context: Any, executor: Executor,
                 code_thread: CodeThread, sink: Sink | None = None, approver: Approver | None = None) -> None:
        """``start`` says how the run begins (``start.py``); ``approver``
        asks a person before each generated code cell runs."""
        self.tree = tree
        self.start = start
        self.query = query
        self.context = context
        self.executor = executor
        self.code_thread = code_thread
        self.approver = approver
        self.depth = start.depth
        self.endpoint = start.endpoint or tree.root_endpoint
        self.run_id = start.run_id or uuid.uuid4().hex[:12]
        self.sources = list(start.sources) if start.sources else None
        self.owns_namespace = start.owns_namespace
        self.follow_up = start.follow_up
        self.cells: list[NotebookNode] = list(start.cells_before)
        self.report = Reporter(self, sink)
        self.scope = CellScope(start.replay)  # the cell running now: its sub-calls, its recorded ones
        self.iteration = start.first_step - 1
        self.own_tokens = [0, 0]  # prompt, completion: this run's calls and its children's (not its siblings')
        self.subcalls_made = 0
        self.started = time.monotonic()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.helpers = SubcallHelpers(self)
        self.entries = executor.make_entries(Installs(
            self.helpers, context=lambda: self.context, tools=tree.tools.entries, continued=start.continues,
            rerun=bool(start.rerun), sources=self.sources))
        self.root_usage: dict[str, Any] | None = None  # the step's root call's, for its first cell
        self.waiting: str | None = None  # "approval" while a step's code waits for a person's answer
        self.compactor = Compactor(self.endpoint, tree, self)  # keeps the history inside the root model's window
        self.reply_source: WholeReply | ReplyStream | None = None  # the step's reply, while it is read
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def sink(self) -> Sink:
        return self.report.sink

    @property
    def jobs(self) -> Jobs:
        return self.helpers.jobs

    @property
    def namespace(self) -> Mapping[str, Any]:
        return self.executor.namespace

    # -- what the sub-call helpers use ------------------------------------------
    def wait(self, future: concurrent.futures.Future[Any]) -> Any:
        """Block the code thread on an engine-loop future (a sub-call); an
        interrupt of the code (Ctrl-C, a timeout, the run stopping) cancels it."""
        __tracebackhide__ = True
        return self.code_thread.wait(future)

    def add_tokens(self, prompt: int, completion: int) -> None:
        with self.tree.lock:
            self.own_tokens[0] += prompt
            self.own_tokens[1] += completion

    def record_subcall(self, record: SubcallRecord) -> None:
        self.subcalls_made += 1
        if self.scope.records is not None:
            self.scope.records.append(record)
        self.report.subcall(record)

    def subcall_changed(self, record: SubcallRecord) -> None:
        self.report.subcall(record)
        self.report.status()

    def spawn_child(self, *, prompt: str, context: Any, model: str, sink: Sink | None = None) -> Run:
        if context is None:
            context, query = prompt, (
                "`context` holds a task and the text it needs. Carry out the task and answer with FINAL or FINAL_VAR."
            )
        else:
            query = prompt
        return Run(self.tree, RunStart.child(self.depth + 1, self.tree.sub_endpoint_for(model)), query=query,
                   context=context, executor=self.executor.child_executor(),
                   code_thread=WorkerThread(f"rlm-child-{self.depth + 1}"), sink=sink)

    def close(self) -> None:
        """Let go of the namespace (a sandboxed child's confined kernel ends)."""
        self.executor.close()

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
            "waiting": self.waiting if state == "running" else None,
        }

    def add_cell(self, cell: NotebookNode) -> None:
        if self.follow_up is not None and "rlm" in cell.metadata:
            cell.metadata["rlm"]["follows"] = self.follow_up.follows
        after = self.cells[-1].id if self.cells else None
        self.cells.append(cell)
        self.report.cell_added(cell, after)

    # -- the loop ----------------------------------------------------------------
    async def run(self) -> RunResult:
        options = self.tree.options
        reason, error, answer, answer_var = "max_iterations", None, None, None
        self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
        start = self.start
        self.sink.run_started(self)
        if start.history is not None and not callable(start.history):
            messages = [dict(m) for m in start.history]
        elif start.history is not None:
            messages = []  # built from the notebook once the prelude has rebuilt `context`
        else:
            if self.depth == 0 or not self.cells:
                source = query_cell_source(options, self.query) if self.depth == 0 else f"%%rlm\n{self.query}"
                self.add_cell(trajectory.query_cell(self.run_id, source))
            messages = [
                {"role": "system", "content": prompts.system_prompt(self.context)},
                {"role": "user", "content": prompts.first_message(self.context, self.query, self.sources)},
            ]
        try:
            if start.rerun:
                await self._rerun()
            if callable(start.history):
                messages = [dict(m) for m in start.history(self.context)]
            messages = await brief(start, messages, tools=self.tree.tools, entries=self.entries,
                                   namespace=self.executor.namespace, on_code_thread=self.code_thread.run,
                                   vision_note=vision.briefing(options, self.endpoint.model))
            await self.code_thread.run(self.entries.restore)
            if start.first_step > options.max_iterations:
                raise Stop("max_iterations", f"The run already used its {plural(options.max_iterations, 'step')}; "
                           "raise --max-iterations to continue it.")
            for iteration in range(start.first_step, options.max_iterations + 1):
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
            # The run's own interrupt (its time limit reached while code ran)
            # may land just after the cell, in the next job of the code
            # thread: the run then ends for that reason, not as interrupted.
            reason = self.tree.stopping or "interrupted"
            problem = self.tree.budget.exhausted()
            error = "The run was interrupted." if reason == "interrupted" else str(problem) if problem else None
        finally:
            await self.helpers.jobs.stop_all()  # background sub-calls still running: cancelled, reported
            if self.depth:  # a cancelled child (its parent stopped) may still run code: close() interrupts it
                self.code_thread.close()
        return self._end(reason, error, answer, answer_var)

    async def _rerun(self) -> None:
        """Rebuild the namespace of a resumed run: re-run its recorded cells
        (sub-calls replayed), then take `context` from it if none was given."""
        for cell in self.start.rerun:
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
        self.reply_source = source = ReplyStream(self.endpoint.model, step, self.report, early=self.approver is None)
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
            self.report.status(force=True)
            await asyncio.sleep(1.0)

    def root_phase(self) -> dict[str, Any] | None:
        """While the root call of the step runs: "thinking" (no token yet) or
        "writing", since when, how much."""
        source = self.reply_source
        if not isinstance(source, ReplyStream) or source.completion is not None or source.call_ended:
            return None  # (the step may still run the reply's code: the model is no longer at work)
        return source.figures()

    async def _root_call(self, messages: list[dict[str, Any]], listener: ReplyStream | None = None) -> Completion:
        tree = self.tree
        try:
            async with tree.slots():
                completion = await tree.charged_call(self.endpoint, messages, listener=listener)
        except ModelCallError as failure:
            problem = tree.budget.exhausted()
            if problem is not None:
                raise Stop(problem.reason, str(problem)) from None
            if failure.context_window:
                raise ContextWindowFull(self.endpoint.model) from None
            raise Stop("error", f"The root model call failed: {failure}.") from None
        self.add_tokens(completion.prompt_tokens, completion.completion_tokens)
        self.root_usage = {
            "model": completion.model, "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens, "cost_usd": completion.cost_usd,
            "latency_s": round(completion.latency_s, 4),
        }
        if completion.deployment:
            self.root_usage["deployment"] = completion.deployment
        if completion.cache_read_tokens or completion.cache_write_tokens:
            self.root_usage.update(cache_read_tokens=completion.cache_read_tokens,
                                   cache_write_tokens=completion.cache_write_tokens)
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
        self.report.ended(self.status("ended", reason), result)
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
            **({"tools": self.tree.tools.names()} if self.tree.tools.tools else {}),
            **({"follows": self.follow_up.follows} if self.follow_up is not None else {}),
        }

    def notebook(self, result: RunResult | None = None) -> NotebookNode:
        nb = trajectory.new_notebook(self.cells + list(self.start.cells_after), self.record(result))
        if self.start.earlier_runs:
            nb.metadata["rlm"]["runs"] = [*self.start.earlier_runs, *nb.metadata["rlm"]["runs"]]
        return nb

    def interrupt(self) -> None:
        """Stop the run from any thread (Ctrl-C, the Interrupt button, a
        served caller that went away). Called from another thread than the
        code's, it also interrupts the code running now (a SIGINT does that
        on the code's own thread)."""
        self.tree.stopping = self.tree.stopping or "interrupted"
        code = self.code_thread
        if isinstance(code, CallerThread) and code.thread_id not in (None, threading.get_ident(),
                                                                     threading.main_thread().ident):
            if code.interrupt():
                return  # the interrupted cell ends its step, and the step the run, as at Ctrl-C
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
