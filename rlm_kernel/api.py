"""The Python API: ``RLM(model=...).completion(context, query)``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import nbformat
from nbformat import NotebookNode

from .engine import json_steps
from .engine.approval import Approver
from .engine.budget import Limits
from .engine.dispatch import CallerThread
from .engine.driver import run_here
from .engine.execution import Executor, ShellExecutor, new_headless_shell
from .engine.history import Rebuilt
from .engine.llm import LLMClient, ModelEndpoint, check_endpoint
from .engine.loop import Run, RunResult, RunTree
from .engine.replay import ReplayBook
from .engine.trajectory import new_cell_id
from .errors import RLMError, remember_secret
from .sinks.base import MultiSink, Sink
from .sinks.journal import JournalSink, journal_path
from .sinks.notebook import NotebookSink, write_notebook

RLMResult = RunResult


class RLM:
    """A configured Recursive Language Model. Keyword names mirror the
    command line's options (``max_iterations`` is ``--max-iterations``)."""

    def __init__(
        self,
        model: str | None = None,
        sub_model: str | None = None,
        *,
        api_base: str | None = None,
        sub_api_base: str | None = None,
        api_key: str | None = None,
        sub_api_key: str | None = None,
        max_iterations: int = 30,
        max_depth: int = 1,
        max_cost: float | None = None,
        max_subcalls: int | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        cell_timeout: float | None = 600.0,
        concurrency: int = 64,
        max_output_chars: int = 10_000,
        no_network_in_code: bool = False,
        max_retries: int = 4,
        retry_base_delay: float = 0.5,
        request_timeout: float = 600.0,
        check: bool = True,
    ) -> None:
        self.model = model or os.environ.get("RLM_MODEL") or ""
        self.sub_model = sub_model or os.environ.get("RLM_SUB_MODEL") or self.model
        self.api_base = api_base or os.environ.get("RLM_API_BASE") or None
        self.sub_api_base = sub_api_base or os.environ.get("RLM_SUB_API_BASE") or self.api_base
        self._api_key = api_key
        remember_secret(api_key)
        remember_secret(sub_api_key)
        self._sub_api_key = sub_api_key if sub_api_key is not None else (
            api_key if self.sub_api_base == self.api_base else None
        )
        self.limits = Limits(
            max_iterations=max_iterations, max_depth=max_depth, max_cost=max_cost, max_subcalls=max_subcalls,
            max_tokens=max_tokens, timeout=timeout, cell_timeout=cell_timeout, concurrency=concurrency,
            max_output_chars=max_output_chars, no_network_in_code=no_network_in_code,
        )
        self.limits.validate()
        self.llm = LLMClient(max_retries=max_retries, retry_base_delay=retry_base_delay, request_timeout=request_timeout)
        self.check = check

    def __repr__(self) -> str:  # never shows keys
        return f"RLM(model={self.model!r}, sub_model={self.sub_model!r}, api_base={self.api_base!r})"

    @property
    def root_endpoint(self) -> ModelEndpoint:
        return ModelEndpoint(self.model, self.api_base, self._api_key, json_steps=json_steps.wanted_for(self.model))

    @property
    def sub_endpoint(self) -> ModelEndpoint:
        return ModelEndpoint(self.sub_model, self.sub_api_base, self._sub_api_key)

    def options(self) -> dict[str, Any]:
        """The non-default settings, as ``%%rlm`` flags would spell them."""
        defaults = Limits()
        opts: dict[str, Any] = {"model": self.model}
        if self.sub_model != self.model:
            opts["sub_model"] = self.sub_model
        if self.api_base:
            opts["api_base"] = self.api_base
        for key, value in vars(self.limits).items():
            if value != getattr(defaults, key):
                opts[key] = value
        return opts

    def new_run(
        self,
        context: Any,
        query: str,
        *,
        executor: Executor,
        code_thread: CallerThread,
        sink: Sink | None = None,
        sources: Sequence[str] | None = None,
        lead_cells: list[NotebookNode] | None = None,
        approver: Approver | None = None,
        continued: Rebuilt | None = None,
        replay: ReplayBook | None = None,
        prelude: list[NotebookNode] | None = None,
    ) -> Run:
        """A run ready to start; ``continued`` (a rebuilt history) makes it go
        on from a notebook's cell instead of starting with the query."""
        if not isinstance(query, str) or not query.strip():
            raise RLMError("The query is empty; say what you want to know about the context.")
        if self.check:
            check_endpoint(self.root_endpoint)
            if self.sub_model != self.model or self.sub_api_base != self.api_base:
                check_endpoint(self.sub_endpoint)
        tree = RunTree(self.llm, self.limits, self.root_endpoint, self.sub_endpoint)
        history = {} if continued is None else {
            "history": continued.messages, "first_step": continued.next_step, "run_id": continued.run_id or None,
        }
        return Run(
            tree, query=query, context=context, executor=executor, code_thread=code_thread, sink=sink,
            sources=list(sources) if sources else None, options=self.options(), lead_cells=lead_cells,
            approver=approver, replay=replay, prelude=prelude, **history,
        )

    def completion(
        self,
        context: Any,
        query: str,
        *,
        output: str | os.PathLike[str] | None = None,
        sources: Sequence[str] | None = None,
        sink: Sink | None = None,
        approver: Approver | None = None,
    ) -> RunResult:
        """Run the RLM on ``context`` (any str / list / dict) headless.

        Generated code runs in a fresh namespace on this thread. Returns a
        result with ``.answer``, ``.reason``, usage, cost and ``.notebook``
        (the trajectory, an nbformat notebook; also written to ``output``).
        """
        executor = ShellExecutor(new_headless_shell(), passthrough=False)
        from .sinks.subcall_views import SubcallViewSink

        sinks: list[Sink] = [SubcallViewSink(), *(s for s in (sink,) if s is not None)]
        if output is not None:
            sinks += [NotebookSink(output), JournalSink(journal_path(output))]
        run = self.new_run(
            context, query, executor=executor, code_thread=CallerThread(), sink=MultiSink(*sinks),
            sources=sources, lead_cells=[context_cell(sources)], approver=approver,
        )
        try:
            result = run_here(run)
            result.notebook = run.notebook(result)
        finally:
            executor.close()
        result.notebook_path = str(output) if output is not None else None
        return result


    def resume(
        self,
        notebook: str | os.PathLike[str],
        *,
        from_cell: int | None = None,
        output: str | os.PathLike[str] | None = None,
        context: Sequence[str] | None = None,
        encoding: str = "utf-8",
        replay: bool = True,
        drop_old: bool = False,
        sink: Sink | None = None,
        approver: Approver | None = None,
    ) -> RunResult:
        """Continue the run saved in ``notebook`` after cell ``from_cell``
        (default: its last step), as ``rlm-kernel run --resume`` does."""
        from .engine.replay import ReplayBook
        from .resume import history_for, next_step, plan
        from .sinks.subcall_views import SubcallViewSink

        resumed = plan(str(notebook), from_cell, list(context) if context else None, encoding, drop_old)
        if self.check:
            check_endpoint(self.root_endpoint)
        executor = ShellExecutor(new_headless_shell(), passthrough=False)
        sinks: list[Sink] = [SubcallViewSink(), *(s for s in (sink,) if s is not None)]
        if output is not None:
            sinks += [NotebookSink(output), JournalSink(journal_path(output))]
        tree = RunTree(self.llm, self.limits, self.root_endpoint, self.sub_endpoint)
        loaded = resumed.context
        run = Run(
            tree, query=resumed.query, context=loaded.value if loaded else None, executor=executor,
            code_thread=CallerThread(), sink=MultiSink(*sinks), sources=loaded.sources if loaded else None,
            options=self.options(), run_id=resumed.run_id or None, lead_cells=resumed.cells,
            replay=ReplayBook.from_cells(resumed.cells, enabled=replay),
            history=history_for(resumed, self.limits.max_output_chars), first_step=next_step(resumed),
            prelude=resumed.prelude, approver=approver,
        )
        run.trailing_cells = resumed.trailing
        run.earlier_runs = resumed.earlier_runs
        try:
            result = run_here(run)
            result.notebook = run.notebook(result)
        finally:
            executor.close()
        result.notebook_path = str(output) if output is not None else None
        return result


def context_cell(sources: Sequence[str] | None) -> NotebookNode:
    """The cell that says how the context was loaded (reloaded on resume)."""
    if sources:
        import shlex

        source = "%rlm context " + " ".join(shlex.quote(s) for s in sources)
        meta = {"rlm": {"role": "context", "sources": list(sources)}}
        return nbformat.v4.new_code_cell(source, id=new_cell_id(), metadata=meta)
    return nbformat.v4.new_markdown_cell(
        "*The context was passed in from Python code; set `context` before re-running this notebook.*",
        id=new_cell_id(), metadata={"rlm": {"role": "context", "sources": None}},
    )


__all__ = ["RLM", "RLMResult", "write_notebook"]
