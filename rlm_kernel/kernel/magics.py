"""``%rlm`` and ``%%rlm``: load a context, ask a question, in any IPython
(``%load_ext rlm_kernel``); the RLM kernel runs ``%%rlm`` and ``%rlm
continue`` cells as coroutines (``run_cell_async``, ``continue_async``)."""

from __future__ import annotations

import asyncio
import shlex
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ..engine.runs import options
from ..engine.runs.options import new_parser
from ..errors import RLMError
from ..offline_build import refuse_while_building
from .cell_runs import CellRun, person_namespace, query_source, recorded_run_note, run_parser
from .follow_ups import SessionRuns

USAGE = """\
%rlm context PATH [PATH ...] [--encoding ENC]   load files, folders, globs, archives, URLs as `context`
%rlm context                                    describe the current `context`
%%rlm [--model M] [--sub-model M] [...]         ask the question in the cell body (see %rlm help run)
%rlm continue [--from CELL] [--old keep|remove] [--fresh]  continue the run from a cell (default: the cell above)
%rlm replay on|off                              reuse recorded sub-call responses when cells re-run (default on)
"""


def _context_parser() -> Any:
    parser = new_parser("%rlm context", "Load files as the context.")
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--encoding", default="utf-8")
    return parser


@magics_class
class RLMMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.context_sources: list[str] | None = None
        self.context_encoding = "utf-8"
        self._loaded_value: Any = None
        self._clients: Any = None
        self.runs = SessionRuns()  # the runs a later %%rlm builds on

    @line_magic
    def rlm(self, line: str) -> Any:
        """%rlm context PATH ... | %rlm context | %rlm replay on|off | %rlm help"""
        words = shlex.split(line)
        if not words or words[0] in ("help", "-h", "--help"):
            print(run_parser().format_help() if words[1:2] == ["run"] else USAGE)
            return None
        command, rest = words[0], words[1:]
        try:
            if command == "context":
                return self._context(rest)
            if command == "replay":
                return self._replay(rest)
            if command == "continue":
                raise RLMError("%rlm continue runs in the RLM kernel (it waits for the notebook's cells).")
        except RLMError as error:
            raise UsageError(str(error)) from None
        raise UsageError(f"Unknown %rlm command {command!r}; try %rlm help.")

    def _context(self, words: list[str]) -> None:
        from ..context.files import load_context
        from ..engine.protocol.prompts import describe_context

        args = _context_parser().parse_args(words)
        if not args.paths:
            namespace = person_namespace(self.shell)
            if "context" not in namespace:
                raise RLMError("No context yet: use %rlm context PATH, or assign `context = ...` in a cell.")
            print(describe_context(namespace["context"], self.sources()))
            return
        from ..context.describe import structured
        from ..context.progress import ProgressBar

        started = time.perf_counter()
        try:
            with ProgressBar() as bar:  # in the cell's output, redrawn in place
                loaded = load_context(args.paths, encoding=args.encoding, progress=bar)
        except KeyboardInterrupt:
            raise KeyboardInterrupt("loading the context was interrupted; `context` is unchanged") from None
        self.shell.user_ns["context"] = loaded.value
        self.context_sources, self.context_encoding = loaded.sources, loaded.encoding
        self._loaded_value = loaded.value
        elapsed = time.perf_counter() - started
        if loaded.skipped or structured(loaded.value):
            print(loaded.summary)
        print(f"{describe_context(loaded.value, loaded.sources)} ({elapsed:.2f} s)")

    def _replay(self, words: list[str]) -> None:
        session = self._session()
        if words not in (["on"], ["off"], []):
            raise RLMError("Use %rlm replay on or %rlm replay off.")
        if words:
            session.book.enabled = words[0] == "on"
        state = "on" if session.book.enabled else "off (fresh calls; pinned responses still apply)"
        print(f"Replay of recorded sub-calls is {state}; this session replayed {session.book.replayed}, "
              f"made {session.book.fresh} new.")

    def _session(self) -> Any:
        session = getattr(getattr(self.shell, "kernel", None), "rlm_session", None)
        if session is None:
            raise RLMError("Replay, pins and continue need the RLM kernel (choose \"RLM (Python 3)\").")
        return session

    @property
    def clients(self) -> Any:
        """This shell's model clients: one Router per router file, so its
        cooldowns carry over from one run to the next (builder.ModelClients)."""
        if self._clients is None:
            from ..builder import ModelClients

            self._clients = ModelClients()
        return self._clients

    def sources(self) -> list[str] | None:
        """The files `context` was loaded from, while it is still the object loaded."""
        shared = getattr(getattr(self.shell, "kernel", None), "rlm_sandbox", None)
        if shared is not None:  # the sandboxed kernel keeps `context` in its confined namespace
            return self.context_sources if self.context_sources and shared.call("loaded", "context") else None
        if self.context_sources and self.shell.user_ns.get("context") is self._loaded_value:
            return self.context_sources
        return None

    @cell_magic("rlm")
    def rlm_cell(self, line: str, cell: str) -> None:
        """%%rlm [options]: the cell body is the query about `context`."""
        try:
            prepared = CellRun(self.shell, line, cell, sources=self.sources(), clients=self.clients,
                               earlier=self.runs)
        except RLMError as error:
            raise UsageError(str(error)) from None
        prepared.finish(prepared.run.run_here())

    async def run_cell_async(self, line: str, cell: str) -> None:
        """The RLM kernel runs ``%%rlm`` cells through this coroutine, so the
        kernel keeps handling comm messages (a reloaded page) during the run."""
        session = self._session()
        session.kernel_loop = asyncio.get_running_loop()
        await _model_client_ready()
        try:
            args = run_parser().parse_args(shlex.split(line))
            refuse_while_building(args.model, args.api_base)  # a lab still building the offline model says so
            page = await session.page_at_run_start()
            if not args.fresh:
                # the notebook as it is now: is this cell's run already below it?
                here = ((self.shell.kernel.get_parent("shell") or {}).get("metadata") or {}).get("cellId")
                cells = page if page is not None else await session.cells_for_rerun(here, query_source(line, cell))
                recorded = recorded_run_note(session, cells, here, line, cell, options.given(args))
                if recorded:
                    self.runs.replayed(cells or [], recorded)  # Run All re-runs its cells
                    return
            prepared = CellRun(self.shell, line, cell, sources=self.sources(), clients=self.clients,
                               page_cells=page, earlier=self.runs)
        except RLMError as error:
            raise UsageError(str(error)) from None
        # IPython already counted this cell, so generated cells take the
        # numbers after its own; the kernel's reply keeps this cell's number.
        prepared.finish(await prepared.run.run_here_async())

    async def continue_async(self, line: str) -> None:
        """``%rlm continue``: rebuild the root model's history from the
        notebook as it is now and go on below this cell."""
        from .continuing import prepare_continue

        self._session().kernel_loop = asyncio.get_running_loop()
        await _model_client_ready()
        try:
            prepared = await prepare_continue(self.shell, line, self.sources(), self.clients, self.runs)
        except RLMError as error:
            raise UsageError(str(error)) from None
        if prepared is not None:
            prepared.finish(await prepared.run.run_here_async())


async def _model_client_ready() -> None:
    """The first run in a kernel waits for litellm's import (seconds, more on
    a busy machine): wait off the kernel's loop, so it keeps serving the
    page, and say why the cell is quiet. The note goes with the next output."""
    from IPython.display import clear_output

    from ..engine.model.litellm_setup import litellm_loaded, load_litellm

    if litellm_loaded():
        return
    print("Loading litellm (once per kernel, a few seconds)...", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, load_litellm)
    clear_output(wait=True)


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(RLMMagics(ipython))


def unload_ipython_extension(ipython: Any) -> None:
    pass


__all__ = ["RLMMagics", "load_ipython_extension", "unload_ipython_extension"]
