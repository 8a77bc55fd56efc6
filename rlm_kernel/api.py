"""The Python API: ``RLM(model=...).completion(context, query)``."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

import nbformat
from nbformat import NotebookNode

from .builder import Frontends, build_run, model_client
from .engine.execution.executors import Executor, ShellExecutor, new_headless_shell
from .engine.execution.threads import CallerThread
from .engine.runs.options import OPTIONS, non_defaults, resolve
from .engine.runs.start import RunStart
from .engine.steps.approval import Approver
from .engine.trajectory.result import RunResult
from .engine.trajectory.sink import Sink
from .engine.trajectory.writing import new_cell_id
from .errors import RLMError
from .gateway.context import read_there  # paths for a gateway's kernel, read there (rlm-kernel run)
from .redaction import remember_secret
from .sinks.journal import journal_path
from .sinks.notebook import trajectory_notebook, write_notebook

RLMResult = RunResult


class RLM:
    """A configured Recursive Language Model. The keywords are the run
    options (``rlm_kernel.engine.runs.options.OPTIONS``), named as the command
    line's flags are (``max_iterations`` is ``--max-iterations``);
    ``check=False`` skips checking the models before a run."""

    def __init__(self, model: str | None = None, sub_model: str | None = None, *, check: bool = True,
                 **options: Any) -> None:
        self.options = resolve({"model": model, "sub_model": sub_model, **options})
        remember_secret(self.options.api_key)
        remember_secret(self.options.sub_api_key)
        remember_secret(self.options.gateway_token)
        self.client = model_client(self.options)
        self.check = check

    @property
    def model(self) -> str:
        return self.options.model or ""

    @property
    def sub_model(self) -> str:
        return self.options.sub_model or ""

    @property
    def api_base(self) -> str | None:
        return self.options.api_base

    def __repr__(self) -> str:  # never shows keys
        return f"RLM(model={self.model!r}, sub_model={self.sub_model!r}, api_base={self.options.api_base!r})"

    def settings(self) -> dict[str, Any]:
        """The options not at their defaults, as a query cell writes them."""
        return non_defaults(self.options)

    def completion(
        self,
        context: Any,
        query: str,
        *,
        output: str | os.PathLike[str] | None = None,
        sources: Sequence[str] | None = None,
        sink: Sink | None = None,
        approver: Approver | None = None,
        follow_up: RunResult | NotebookNode | str | os.PathLike[str] | None = None,
    ) -> RunResult:
        """Run the RLM on ``context`` (any str / list / dict) headless.

        ``context`` may also be files to load: a path (``pathlib.Path``), a
        list of paths, or what ``rlm_kernel.load_context`` returned (PDFs,
        Office files, web pages, tables... kept with their pages).

        Generated code runs in a fresh namespace on this thread. Returns a
        result with ``.answer``, ``.reason``, usage, cost and ``.notebook``
        (the trajectory, an nbformat notebook; also written to ``output``).

        ``follow_up``: an earlier result (or its notebook, or a notebook's
        path) this question builds on: its code cells run again first (their
        sub-calls replayed) and the root model is told its runs' queries,
        answers and variables. ``context`` None then reloads the context
        from the paths the notebook recorded.
        """
        context, sources = _loaded(context, sources, there=self.options.executor == "gateway")
        if follow_up is not None:
            return self._follow_up(follow_up, context, query, output=output, sources=sources, sink=sink,
                                   approver=approver)
        start = RunStart.fresh(sources=sources, cells_before=[context_cell(sources)])
        return self._run_headless(output, sink, start, query=query, context=context, approver=approver)

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
        from .engine.trajectory.replay import ReplayBook
        from .resume import history_for, next_step, plan

        resumed = plan(str(notebook), from_cell, list(context) if context else None, encoding, drop_old,
                       load_here=self.options.executor != "gateway")
        loaded = resumed.context
        start = RunStart.resumed(
            run_id=resumed.run_id or None, sources=loaded.sources if loaded else None, cells_before=resumed.cells,
            rerun=resumed.prelude, cells_after=resumed.trailing,
            replay=ReplayBook.from_cells(resumed.cells, enabled=replay),
            history=history_for(resumed, self.options.max_output_chars, self.options), first_step=next_step(resumed),
            earlier_runs=resumed.earlier_runs, follow_up=resumed.follow_up,
        )
        return self._run_headless(output, sink, start, query=resumed.query, context=loaded.value if loaded else None,
                                  approver=approver)

    def _follow_up(self, earlier: Any, context: Any, query: str, *, output: Any, sources: Sequence[str] | None,
                   sink: Sink | None, approver: Approver | None) -> RunResult:
        import uuid

        from .engine.protocol import prompts
        from .engine.runs.follow_up import FollowUp
        from .engine.runs.options import query_cell_source
        from .engine.trajectory import writing as trajectory
        from .engine.trajectory.replay import ReplayBook
        from .resume import plan_follow_up

        notebook = getattr(earlier, "notebook", earlier)
        if notebook is None:
            raise RLMError("follow_up= takes a RunResult with its notebook, a notebook, or a notebook's path.")
        planned = plan_follow_up(os.fspath(notebook) if isinstance(notebook, (str, os.PathLike)) else notebook,
                                 load=context is None)
        if context is None and planned.context is not None:
            context, sources = planned.context.value, planned.context.sources
        follow_up = FollowUp(planned.earlier)
        run_id = uuid.uuid4().hex[:12]
        query_cell = trajectory.query_cell(run_id, query_cell_source(self.options, query))
        query_cell.metadata["rlm"]["follows"] = follow_up.follows
        listed = list(sources or []) or None

        def history(loaded: Any) -> list[dict[str, Any]]:  # once the re-run cells have rebuilt the namespace
            if loaded is None:
                raise RLMError("The notebook does not say how its context was loaded; give it with --context PATH "
                               "(or pass it to completion).")
            return [{"role": "system", "content": prompts.system_prompt(loaded)},
                    {"role": "user", "content": prompts.first_message(loaded, query, listed)}]

        start = RunStart.follow_up_on(
            run_id=run_id, sources=listed, cells_before=[*planned.cells, query_cell], rerun=planned.prelude,
            replay=ReplayBook.from_cells(planned.cells), history=history, earlier_runs=planned.records,
            follow_up=follow_up,
        )
        return self._run_headless(output, sink, start, query=query, context=context, approver=approver)

    def _run_headless(self, output: str | os.PathLike[str] | None, sink: Sink | None, start: RunStart, *,
                      query: str, context: Any, approver: Approver | None) -> RunResult:
        executor = self._executor(output)
        if hasattr(executor, "bind_context_files"):
            executor.bind_context_files(list(start.sources) if start.sources else None)
        try:
            context = _there(executor, context)
        except BaseException:
            executor.close()
            raise
        frontends = Frontends(notebook=output, journal=None if output is None else journal_path(output),
                              sinks=[sink] if sink is not None else [])
        try:
            run = build_run(self.options, start, query=query, context=context, executor=executor,
                            code_thread=CallerThread(), frontends=frontends, client=self.client, check=self.check,
                            approver=approver)
            result = run.run_here()
            result.notebook = trajectory_notebook(run, result)
        finally:
            executor.close()
        result.notebook_path = str(output) if output is not None else None
        return result


    def _executor(self, output: str | os.PathLike[str] | None) -> Executor:
        home = remote_home(self.options, output)
        if home is None:
            return ShellExecutor(new_headless_shell(), passthrough=False)
        from .remote.executor import RemoteExecutor

        return RemoteExecutor(home)


def remote_home(options: Any, output: str | os.PathLike[str] | None = None) -> Any:
    """Where a run's code runs when not here: a sandbox's or a gateway's kernel (None: here)."""
    if options.executor == "gateway":
        from .gateway.home import gateway_spec

        return gateway_spec(options)
    if options.sandbox or options.executor == "sandbox":
        from .sandbox.launcher import sandbox_spec

        return sandbox_spec(options, os.path.dirname(os.path.abspath(output)) if output is not None else None)
    return None


def _signature() -> inspect.Signature:
    """RLM's signature as help() and editors show it: every option a keyword."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
              inspect.Parameter("sub_model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
              inspect.Parameter("check", keyword, default=True)]
    params += [inspect.Parameter(o.name, keyword, default=o.default) for o in OPTIONS
               if o.name not in ("model", "sub_model")]
    return inspect.Signature(params)


RLM.__init__.__signature__ = _signature()  # type: ignore[attr-defined]


def _loaded(context: Any, sources: Sequence[str] | None, there: bool = False) -> tuple[Any, Sequence[str] | None]:
    """``context`` loaded when it names files (paths, never a plain str: that
    is the text itself), and the sources it came from. ``there``: paths are
    read where a gateway's kernel runs, later (``gateway.context.Paths``)."""
    from .context.files import load_context, sources_of

    named = [context] if isinstance(context, os.PathLike) else context
    if there and type(named).__name__ == "Paths":
        return named, sources or list(named)
    if isinstance(named, (list, tuple)) and named and all(isinstance(p, os.PathLike) for p in named):
        if there:
            from .gateway.context import Paths

            paths = Paths([os.fspath(p) for p in named])
            return paths, sources or list(paths)
        loaded = load_context([os.fspath(p) for p in named])
        return loaded.value, sources or loaded.sources
    return context, sources or sources_of(context)


def _there(executor: Any, context: Any) -> Any:
    """Paths for a gateway's kernel: loaded there now (the root model's first
    message says what they hold); any other context is handed over as it is."""
    if type(context).__name__ != "Paths":
        return context
    from .gateway.context import load_there

    return load_there(executor, context)


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


__all__ = ["RLM", "RLMResult", "context_cell", "read_there", "write_notebook"]
