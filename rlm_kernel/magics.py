"""``%rlm`` and ``%%rlm``: load a context, ask a question, in any IPython."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from .errors import RLMError
from .options import add_run_options, new_parser, rlm_kwargs

USAGE = """\
%rlm context PATH [PATH ...] [--encoding ENC]   load files (a file, several, a directory, a glob) as `context`
%rlm context                                    describe the current `context`
%%rlm [--model M] [--sub-model M] [...]         ask the question in the cell body (see %rlm help run)
"""


def _context_parser() -> Any:
    parser = new_parser("%rlm context", "Load files as the context.")
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--encoding", default="utf-8")
    return parser


def _run_parser() -> Any:
    parser = new_parser("%%rlm", "Run the RLM on `context` with the cell body as the query.")
    add_run_options(parser)
    parser.add_argument("--output", help="where to write the trajectory notebook (default: rlm-runs/ next to the notebook)")
    return parser


def trajectory_path(run_id: str, output: str | None) -> Path:
    """Where a kernel run writes its trajectory notebook: ``rlm-runs/`` next
    to the open notebook (Jupyter tells kernels its path in JPY_SESSION_NAME)."""
    if output:
        return Path(output)
    session = os.environ.get("JPY_SESSION_NAME")
    stem = Path(session).stem if session else "notebook"
    folder = Path(session).parent if session and Path(session).parent.is_dir() else Path.cwd()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return folder / "rlm-runs" / f"{stem}-{stamp}-{run_id[:6]}.ipynb"


@magics_class
class RLMMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.context_sources: list[str] | None = None

    @line_magic
    def rlm(self, line: str) -> Any:
        """%rlm context PATH ... | %rlm context | %rlm help"""
        words = shlex.split(line)
        if not words or words[0] in ("help", "-h", "--help"):
            if len(words) > 1 and words[1] == "run":
                print(_run_parser().format_help())
            else:
                print(USAGE)
            return None
        command, rest = words[0], words[1:]
        try:
            if command == "context":
                return self._context(rest)
        except RLMError as error:
            raise UsageError(str(error)) from None
        raise UsageError(f"Unknown %rlm command {command!r}; try %rlm help.")

    def _context(self, words: list[str]) -> None:
        from .engine.context import load_context
        from .engine.prompts import describe_context

        args = _context_parser().parse_args(words)
        if not args.paths:
            if "context" not in self.shell.user_ns:
                raise RLMError("No context yet: use %rlm context PATH, or assign `context = ...` in a cell.")
            print(describe_context(self.shell.user_ns["context"], self._sources()))
            return
        started = time.perf_counter()
        loaded = load_context(args.paths, encoding=args.encoding)
        self.shell.user_ns["context"] = loaded.value
        self.context_sources = loaded.sources
        self._loaded_value = loaded.value
        elapsed = time.perf_counter() - started
        print(f"{describe_context(loaded.value, loaded.sources)} ({elapsed:.2f} s)")

    def _sources(self) -> list[str] | None:
        # Sources describe `context` only while it is still the object we loaded.
        if self.context_sources and self.shell.user_ns.get("context") is getattr(self, "_loaded_value", None):
            return self.context_sources
        return None

    @cell_magic("rlm")
    def rlm_cell(self, line: str, cell: str) -> None:
        """%%rlm [options]: the cell body is the query about `context`."""
        from .engine.driver import run_here

        try:
            run, finish = self._prepare(line, cell)
        except RLMError as error:
            raise UsageError(str(error)) from None
        finish(run_here(run))

    async def run_cell_async(self, line: str, cell: str) -> None:
        """The RLM kernel runs ``%%rlm`` cells through this coroutine, so the
        kernel keeps handling comm messages (a reloaded page) during the run."""
        from .engine.driver import run_here_async

        try:
            run, finish = self._prepare(line, cell)
        except RLMError as error:
            raise UsageError(str(error)) from None
        # IPython already counted this cell, so generated cells take the
        # numbers after its own; the kernel's reply keeps this cell's number.
        finish(await run_here_async(run))

    def _prepare(self, line: str, cell: str) -> tuple[Any, Any]:
        from .api import RLM, context_cell
        from .engine.dispatch import CallerThread
        from .engine.execution import ShellExecutor
        from .sinks.base import MultiSink
        from .sinks.display import DisplaySink
        from .sinks.notebook import NotebookSink
        from .sinks.subcall_views import SubcallViewSink

        args = _run_parser().parse_args(shlex.split(line))
        query = cell.strip()
        if "context" not in self.shell.user_ns:
            raise RLMError("No context yet: use %rlm context PATH, or assign `context = ...` in a cell first.")
        rlm = RLM(**rlm_kwargs(args))
        thread = CallerThread()
        kernel = getattr(self.shell, "kernel", None)
        channel = getattr(kernel, "rlm_channel", None)
        live = channel is not None and channel.attached
        sinks: list[Any] = [SubcallViewSink(thread, widgets=kernel is not None and _have_widgets())]
        if kernel is not None:
            from .kernel_exec import KernelExecutor

            executor: Any = KernelExecutor(kernel, channel if live else None, run_id="")
        else:
            executor = ShellExecutor(self.shell, passthrough=True)
        run = rlm.new_run(
            self.shell.user_ns["context"], query, executor=executor, code_thread=thread,
            sources=self._sources(), lead_cells=[context_cell(self._sources())],
        )
        if kernel is not None:
            executor.run_id = run.run_id
        display_sink = DisplaySink(thread, status_only=live)
        sinks.append(display_sink)
        path = None
        if live:
            from .sinks.live import LiveSink

            parent = kernel.get_parent("shell") or {}
            anchor = (parent.get("metadata") or {}).get("cellId")
            sinks.append(LiveSink(channel, thread, anchor, (parent.get("header") or {}).get("msg_id")))
        else:
            path = trajectory_path(run.run_id, args.output)
            sinks.append(NotebookSink(path))
        run.sink = MultiSink(*sinks)

        def finish(result: Any) -> None:
            result.notebook = run.notebook(result)
            result.notebook_path = str(path) if path else None
            self.shell.user_ns["rlm_result"] = result
            display_sink.show_end(result)

        return run, finish


def _have_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(RLMMagics(ipython))


def unload_ipython_extension(ipython: Any) -> None:
    pass
