"""``%rlm`` and ``%%rlm``: load a context, ask a question, in any IPython."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ._words import plural
from .errors import RLMError, redact
from .options import add_run_options, new_parser, rlm_kwargs

USAGE = """\
%rlm context PATH [PATH ...] [--encoding ENC]   load files (a file, several, a directory, a glob) as `context`
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


def _run_parser() -> Any:
    parser = new_parser("%%rlm", "Run the RLM on `context` with the cell body as the query.")
    add_run_options(parser)
    parser.add_argument("--output", help="where to write the trajectory notebook (default: rlm-runs/ next to the notebook)")
    parser.add_argument("--approve", action="store_true", help="ask before each generated code cell runs")
    parser.add_argument("--fresh", action="store_true",
                        help="start a new run even when this cell's recorded run is in the notebook below")
    return parser


def _continue_parser() -> Any:
    parser = new_parser("%rlm continue", "Continue a run from a cell, with the notebook as it is now.")
    parser.add_argument("--from", dest="from_cell", metavar="CELL",
                        help="cell id or index to continue after (default: the cell above this one)")
    parser.add_argument("--old", choices=("keep", "remove"), default="keep",
                        help="the old continuation's agent cells: keep them (marked superseded) or remove them")
    parser.add_argument("--approve", action="store_true", help="ask before each generated code cell runs")
    parser.add_argument("--fresh", action="store_true",
                        help="continue again even when this cell's continuation is in the notebook below")
    add_run_options(parser, defaults=False)
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
            if command == "replay":
                return self._replay(rest)
            if command == "continue":
                raise RLMError("%rlm continue runs in the RLM kernel (it waits for the notebook's cells).")
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
        kernel = getattr(self.shell, "kernel", None)
        session = getattr(kernel, "rlm_session", None)
        if session is None:
            raise RLMError("Replay, pins and continue need the RLM kernel (choose \"RLM (Python 3)\").")
        return session

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
            prepared = self._prepare(line, cell)
        except RLMError as error:
            raise UsageError(str(error)) from None
        if prepared is not None:
            run, finish = prepared
            finish(run_here(run))

    async def run_cell_async(self, line: str, cell: str) -> None:
        """The RLM kernel runs ``%%rlm`` cells through this coroutine, so the
        kernel keeps handling comm messages (a reloaded page) during the run."""
        import asyncio

        from .engine.driver import run_here_async

        session = getattr(getattr(self.shell, "kernel", None), "rlm_session", None)
        if session is not None:
            session.kernel_loop = asyncio.get_running_loop()
        await _model_client_ready()
        # the notebook as it is now: is this cell's run already below it?
        cells = None
        if session is not None and "--fresh" not in line.split():
            here = ((self.shell.kernel.get_parent("shell") or {}).get("metadata") or {}).get("cellId")
            cells = await session.cells_for_rerun(here, f"%%rlm {line}".rstrip() + "\n" + cell)
        try:
            prepared = self._prepare(line, cell, cells=cells)
        except RLMError as error:
            raise UsageError(str(error)) from None
        if prepared is None:
            return
        run, finish = prepared
        # IPython already counted this cell, so generated cells take the
        # numbers after its own; the kernel's reply keeps this cell's number.
        finish(await run_here_async(run))

    async def continue_async(self, line: str) -> None:
        """``%rlm continue``: rebuild the root model's history from the
        notebook as it is now and go on below this cell."""
        import asyncio

        from .engine.driver import run_here_async

        self._session().kernel_loop = asyncio.get_running_loop()
        await _model_client_ready()
        try:
            prepared = await self._prepare_continue(line)
        except RLMError as error:
            raise UsageError(str(error)) from None
        if prepared is None:
            return
        run, finish = prepared
        finish(await run_here_async(run))

    async def _prepare_continue(self, line: str) -> tuple[Any, Any] | None:
        from .engine.history import rebuild
        from .takeover import cell_with_source, continuation_below

        args = _continue_parser().parse_args(shlex.split(line))
        session = self._session()
        kernel = self.shell.kernel
        here = ((kernel.get_parent("shell") or {}).get("metadata") or {}).get("cellId")
        cells = await session.request_cells()
        if not cells:
            raise RLMError("Continue needs the notebook's cells: open it in JupyterLab with the rlm-kernel "
                           "extension, or save it first.")
        here = here or cell_with_source(cells, f"%rlm continue {line}".rstrip())
        if not args.fresh:
            made = continuation_below(cells, here)
            if made is not None:
                run_id, count, superseded = made
                print(f"This cell's continuation of run {run_id} ({count} cell{'s' if count != 1 else ''}"
                      f"{', since superseded' if superseded else ''}) is already in the notebook below: run those "
                      "cells to replay it with its recorded sub-calls (Run All does). "
                      "Add --fresh to ask the model again.")
                return None
        upto = _cell_index(cells, args.from_cell, here)
        if "context" not in self.shell.user_ns:
            raise RLMError("No context yet: run the cell that loads `context` first.")
        rebuilt = rebuild(cells, upto, self.shell.user_ns["context"], sources=self._sources(),
                          view_limit=args.max_output_chars or 10_000)
        old = [c.get("id") for c in cells[upto + 1:]
               if _rlm_meta(c).get("run_id") == rebuilt.run_id and _rlm_meta(c).get("role") in ("thought", "code", "answer")
               and not _rlm_meta(c).get("superseded")]
        if old:
            if args.old == "remove":
                session.send("delete_cells", cell_ids=old)
            else:
                session.send("cell_metadata", cell_ids=old, rlm={"superseded": True})
        # The new steps go right below this cell: move what lies between the
        # chosen cell and this one (the old continuation, kept) below it, so
        # the notebook reads: cells up to the chosen one, this cell, the new
        # steps, then the old continuation.
        between = _between(cells, upto, here, dropped=set(old) if args.old == "remove" else set())
        if between:
            session.send("move_cells", cell_ids=between, after_cell_id=here)
        settings = {**query_settings(rebuilt.options), **rlm_kwargs(args)}
        pins = sum(1 for c in cells[rebuilt.query_index + 1:upto + 1] if not _rlm_meta(c).get("superseded")
                   for r in _rlm_meta(c).get("subcalls") or [] if r.get("pinned"))
        print(f"Continuing run {rebuilt.run_id} from cell {upto} (step {rebuilt.next_step}; "
              f"{rebuilt.interventions} change{'s' if rebuilt.interventions != 1 else ''} by you; "
              + (f"{pins} pinned sub-call response{'s' if pins != 1 else ''}; " if pins else "") +
              f"{len(old)} old cell{'s' if len(old) != 1 else ''} {'removed' if args.old == 'remove' else 'kept, marked superseded'}"
              + (f"; {len(between)} cell{'s' if len(between) != 1 else ''} moved below the new steps" if between else "")
              + ").")
        return self._prepare("", rebuilt.query, settings=settings, approve=args.approve, continued=rebuilt,
                             anchor=here)

    def _prepare(self, line: str, cell: str, *, settings: dict[str, Any] | None = None, approve: bool = False,
                 continued: Any = None, anchor: str | None = None,
                 cells: list[Any] | None = None) -> tuple[Any, Any] | None:
        from .api import RLM, context_cell
        from .engine.dispatch import CallerThread
        from .engine.execution import ShellExecutor
        from .sinks.base import MultiSink
        from .sinks.display import DisplaySink
        from .sinks.journal import JournalSink, journal_path
        from .sinks.notebook import NotebookSink
        from .sinks.subcall_views import SubcallViewSink

        args = _run_parser().parse_args(shlex.split(line))
        query = cell.strip()
        if "context" not in self.shell.user_ns:
            raise RLMError("No context yet: use %rlm context PATH, or assign `context = ...` in a cell first.")
        kernel = getattr(self.shell, "kernel", None)
        session = getattr(kernel, "rlm_session", None)
        parent = (kernel.get_parent("shell") or {}) if kernel is not None else {}
        anchor = anchor or (parent.get("metadata") or {}).get("cellId")
        if session is not None and continued is None and not args.fresh:
            recorded = session.recorded_run_below(cells, anchor, f"%%rlm {line}".rstrip() + "\n" + cell)
            if recorded is not None:
                session.remember(rlm_kwargs(args))
                print(f"The run of this cell ({recorded[0]}, {plural(recorded[1], 'cell')}) is already in the notebook below: "
                      "run those cells to replay it with its recorded sub-calls (Run All does). "
                      "Add --fresh to ask the model again.")
                return None
        settings = settings if settings is not None else rlm_kwargs(args)
        rlm = RLM(**settings)
        thread = CallerThread()
        channel = getattr(kernel, "rlm_channel", None)
        live = channel is not None and channel.attached
        sinks: list[Any] = [SubcallViewSink(thread, widgets=kernel is not None and _have_widgets(),
                                            pinner=None if session is None else session.pin,
                                            asker=None if session is None else session.ask)]
        if kernel is not None:
            from .kernel_exec import KernelExecutor

            executor: Any = KernelExecutor(kernel, channel if live else None, run_id="")
        else:
            executor = ShellExecutor(self.shell, passthrough=True)
        approver = None
        if approve or args.approve:
            approver = self._approver(session, live)
        run = rlm.new_run(
            self.shell.user_ns["context"], query, executor=executor, code_thread=thread,
            sources=self._sources(), lead_cells=[] if continued else [context_cell(self._sources())],
            approver=approver, continued=continued,
        )
        # File sinks first: they refuse an unwritable --output before anything is set up.
        path = None
        if live:
            # the open notebook may be unsaved: finished steps also go to a journal on disk
            file_sinks: list[Any] = [JournalSink(journal_path(trajectory_path(run.run_id, args.output)), keep=True)]
        else:
            path = trajectory_path(run.run_id, args.output)
            file_sinks = [NotebookSink(path), JournalSink(journal_path(path))]
        if session is not None:
            from .takeover import TakeoverSink

            sinks.append(TakeoverSink(session, thread, continue_cell=anchor if continued is not None else None))
            session.remember(settings)
            session.active_run = run
            if continued is None:
                session.ran_here.add(anchor or (f"%%rlm {line}".rstrip() + "\n" + cell).strip())
        if kernel is not None:
            executor.run_id = run.run_id
        display_sink = DisplaySink(thread, status_only=live)
        sinks.append(display_sink)
        if live:
            from .sinks.live import LiveSink

            sinks.append(LiveSink(channel, thread, anchor, (parent.get("header") or {}).get("msg_id")))
        run.sink = MultiSink(*sinks, *file_sinks)

        def finish(result: Any) -> None:
            if session is not None:
                session.active_run = None
                session.install_helpers()
            result.notebook = run.notebook(result)
            result.notebook_path = str(path) if path else None
            self.shell.user_ns["rlm_result"] = result
            display_sink.show_end(result)
            if result.reason == "error" and result.error:  # a rejected key, an unreachable server...
                raise UsageError(redact(result.error))

        return run, finish


    def _approver(self, session: Any, live: bool) -> Any:
        from .engine.approval import PromptApprover, notebook_approver

        kernel = getattr(self.shell, "kernel", None)
        if kernel is not None and not (kernel.get_parent("shell") or {}).get("content", {}).get("allow_stdin", True):
            raise RLMError("--approve asks on stdin, which this frontend does not allow.")
        if live and session is not None:
            async def fetch(cell_id: str) -> str | None:
                return await _fetch_source(session, cell_id)

            return notebook_approver(fetch)
        return PromptApprover()


async def _model_client_ready() -> None:
    """The first run in a kernel waits for litellm's import (seconds, more on
    a busy machine): wait off the kernel's loop, so it keeps serving the
    page, and say why the cell is quiet. The note goes with the next output."""
    import asyncio

    from IPython.display import clear_output

    from .engine.llm import litellm_loaded, litellm_module

    if litellm_loaded():
        return
    print("Loading litellm (once per kernel, a few seconds)...", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, litellm_module)
    clear_output(wait=True)


async def _fetch_source(session: Any, cell_id: str) -> str | None:
    """A cell's current source, asked of the frontend from the engine loop."""
    import asyncio

    kernel_loop = session.kernel_loop
    future = asyncio.run_coroutine_threadsafe(session.request_cells(), kernel_loop)
    cells = await asyncio.wrap_future(future)
    for cell in cells or []:
        if cell.get("id") == cell_id:
            source = cell.get("source", "")
            return "".join(source) if isinstance(source, list) else source
    return None


def _rlm_meta(cell: Any) -> dict[str, Any]:
    return (cell.get("metadata") or {}).get("rlm") or {}


def _between(cells: list[Any], upto: int, here: str | None, dropped: set[str]) -> list[str]:
    """Ids of the cells after cell ``upto`` and before the continue cell
    ``here`` (none when it is not below cell ``upto``), less ``dropped``."""
    ids = [c.get("id") for c in cells]
    if not here or here not in ids or ids.index(here) <= upto:
        return []
    return [i for i in ids[upto + 1:ids.index(here)] if i and i not in dropped]


def _cell_index(cells: list[Any], wanted: str | None, here: str | None) -> int:
    """The index of the cell to continue after: ``wanted`` (an id or an index),
    else the cell above ``here`` (this %rlm continue cell), else the last cell."""
    if wanted is not None:
        if wanted.lstrip("-").isdigit():
            index = int(wanted)
            if not -len(cells) <= index < len(cells):
                raise RLMError(f"There is no cell {index}: the notebook has {plural(len(cells), 'cell')}.")
            return index % len(cells)
        for index, cell in enumerate(cells):
            if cell.get("id") == wanted:
                return index
        raise RLMError(f"There is no cell with id {wanted!r} in this notebook.")
    for index, cell in enumerate(cells):
        if here and cell.get("id") == here:
            if index == 0:
                raise RLMError("There is no cell above this one to continue from.")
            return index - 1
    return len(cells) - 1


def query_settings(options: dict[str, Any]) -> dict[str, Any]:
    """RLM keyword arguments from the flags of a ``%%rlm`` query cell."""
    args = _run_parser().parse_args([w for k, v in options.items() if k not in ("approve", "fresh", "output")
                                     for w in ([f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)]))])
    return rlm_kwargs(args)


def explicit_run_options(args: Any) -> dict[str, Any]:
    """The run options given on a command line (not left at their defaults)."""
    parser = new_parser("defaults")
    add_run_options(parser)
    defaults = vars(parser.parse_args([]))
    return {k: v for k, v in rlm_kwargs(args).items() if v != defaults.get(k)}


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
