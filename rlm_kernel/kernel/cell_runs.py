"""Starting a run from a ``%%rlm`` cell (and, with a rebuilt history, from
``%rlm continue``): its options, where its code runs, what shows it (the live
page, the cell's own output, widgets), its files and its end."""

from __future__ import annotations

import argparse
import os
import shlex
import time
import uuid
from pathlib import Path
from typing import Any

from .._words import plural
from ..engine.runs import options
from ..engine.runs.options import new_parser
from ..errors import RLMError
from ..redaction import redact


def run_parser() -> argparse.ArgumentParser:
    parser = new_parser("%%rlm", "Run the RLM on `context` with the cell body as the query.")
    options.add_arguments(parser)
    parser.add_argument("--output", help="where to write the trajectory notebook (default: rlm-runs/ next to the notebook)")
    parser.add_argument("--approve", action="store_true", help="ask before each generated code cell runs")
    parser.add_argument("--fresh", action="store_true",
                        help="start a new run even when this cell's recorded run is in the notebook below")
    parser.add_argument("--new", action="store_true",
                        help="do not build on this session's earlier runs (a follow-up is the default)")
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


def query_source(line: str, body: str) -> str:
    """The ``%%rlm`` cell's source as the page has it."""
    return f"%%rlm {line}".rstrip() + "\n" + body


class CellRun:
    """A run started from a cell of this kernel (or of any IPython with
    ``%load_ext rlm_kernel``), ready to go; :meth:`finish` once it ended."""

    def __init__(self, shell: Any, line: str, body: str, *, sources: list[str] | None,
                 given: dict[str, Any] | None = None, approve: bool = False, continued: Any = None,
                 anchor: str | None = None, clients: Any = None,
                 page_cells: list[dict[str, Any]] | None = None, earlier: Any = None) -> None:
        from ..api import context_cell
        from ..builder import Frontends, LivePage, build_run
        from ..engine.execution.executors import ShellExecutor
        from ..engine.execution.threads import CallerThread
        from ..engine.runs.start import RunStart
        from ..sinks.journal import journal_path

        args = run_parser().parse_args(shlex.split(line))
        kernel = getattr(shell, "kernel", None)
        shared = getattr(kernel, "rlm_sandbox", None)  # the sandboxed kernel: the person's namespace is confined
        namespace = person_namespace(shell)
        if "context" not in namespace:
            raise RLMError("No context yet: use %rlm context PATH, or assign `context = ...` in a cell first.")
        self.shell = shell
        self.session = session = getattr(kernel, "rlm_session", None)
        parent = (kernel.get_parent("shell") or {}) if kernel is not None else {}
        anchor = anchor or (parent.get("metadata") or {}).get("cellId")
        given = given if given is not None else options.given(args)
        # the sandboxed or gateway-backed kernel: its runs are what it is, whatever the cell says
        run_options = options.resolve({**given, **shared.spec.forced_options()} if shared is not None else given)
        channel = getattr(kernel, "rlm_channel", None)
        live = channel is not None and channel.attached
        from ..api import remote_home

        home = remote_home(run_options) if shared is None else shared.spec
        if home is not None:
            if kernel is not None:
                from .sandboxed import KernelRemoteExecutor

                executor: Any = KernelRemoteExecutor(kernel, channel if live else None, run_id="",
                                                     spec=home if shared is None else None, shared=shared)
            else:
                from ..remote.executor import RemoteExecutor

                executor = RemoteExecutor(home)
            if shared is None:
                executor.bind_context_files(sources)
                executor.context_encoding = getattr(getattr(shell, "rlm_magics", None), "context_encoding", "utf-8")
        elif kernel is not None:
            from .executor import KernelExecutor

            executor = KernelExecutor(kernel, channel if live else None, run_id="")
        else:
            executor = ShellExecutor(shell, passthrough=True)
        run_id = (continued.run_id if continued is not None else None) or uuid.uuid4().hex[:12]
        path = trajectory_path(run_id, args.output)
        # A live notebook may be unsaved: its finished steps go to a journal on disk.
        self.path = None if live else path
        frontends = Frontends(
            notebook=self.path, journal=journal_path(path), keep_journal=live, subcall_views=True,
            widgets=kernel is not None and _have_widgets(), cell_output=True, session=session,
            continue_cell=anchor if continued is not None else None,
            live=LivePage(channel, anchor, (parent.get("header") or {}).get("msg_id"), page_cells=page_cells,
                          execution_count=_own_number(kernel)) if live else None,
        )
        if continued is not None:  # a continued follow-up is one still
            start = RunStart.continued(run_id=run_id, history=continued.messages, first_step=continued.next_step,
                                       follow_up=continued.follow_up, sources=sources)
        else:
            start = RunStart.fresh(run_id=run_id, sources=sources, cells_before=[context_cell(sources)],
                                   follow_up=earlier.follow_up(new=args.new) if earlier is not None else None)
        self.earlier, self.new = earlier, args.new
        self.run = build_run(
            run_options, start, query=body.strip(), context=_run_context(namespace, shared, sources), executor=executor,
            code_thread=CallerThread(), frontends=frontends, client=None if clients is None else clients.get(run_options),
            approver=self._approver(approve or args.approve, live),
        )
        executor.run_id = run_id
        if session is not None:
            session.remember(given)
            session.active_run = self.run
            if continued is None:
                session.ran_here.add(anchor or query_source(line, body).strip())

    def _approver(self, wanted: bool, live: bool) -> Any:
        if not wanted:
            return None
        from ..engine.steps.approval import PromptApprover, notebook_approver

        kernel = getattr(self.shell, "kernel", None)
        if live and self.session is not None and getattr(self.session.channel, "writer", None):
            from .approval import WidgetApprover  # a shared notebook: any of its pages answers

            return WidgetApprover(self.session.cell_source)
        if kernel is not None and not (kernel.get_parent("shell") or {}).get("content", {}).get("allow_stdin", True):
            raise RLMError("--approve asks on stdin, which this frontend does not allow.")
        if live and self.session is not None:
            return notebook_approver(self.session.cell_source)
        return PromptApprover()

    def finish(self, result: Any) -> None:
        """The run ended: keep its result in ``rlm_result`` and put the
        person's helpers back; a run that could not start says why."""
        from IPython.core.error import UsageError

        from ..sinks.notebook import trajectory_notebook

        self.run.executor.close()  # a sandboxed or gateway run's kernel ends with it
        if self.session is not None:
            self.session.active_run = None
            self.session.person_cells.install_helpers()
        if self.earlier is not None:
            self.earlier.ended(self.run, result, new=self.new)
        result.notebook = trajectory_notebook(self.run, result)
        result.notebook_path = str(self.path) if self.path else None
        self.shell.user_ns["rlm_result"] = result
        if result.notebook_path:
            print(f"Trajectory saved to {result.notebook_path}")
        if result.reason == "error" and result.error:  # a rejected key, an unreachable server...
            raise UsageError(redact(result.error))


def recorded_run_note(session: Any, cells: list[Any] | None, anchor: str | None, line: str, body: str,
                      given: dict[str, Any]) -> str | None:
    """When this ``%%rlm`` cell's run is already in the notebook below it,
    say so (and remember its options for the helpers); its run id then."""
    from .reruns import recorded_run_below

    recorded = recorded_run_below(cells, anchor, query_source(line, body))
    if recorded is None:
        return None
    session.remember(given)
    print(f"The run of this cell ({recorded[0]}, {plural(recorded[1], 'cell')}) is already in the notebook below: "
          "run those cells to replay it with its recorded sub-calls (Run All does). "
          "Add --fresh to ask the model again.")
    return recorded[0]


def person_namespace(shell: Any) -> Any:
    """Where the person's variables (``context`` among them) are: the shell's
    namespace, or in the sandboxed kernel the confined one (read as plain data)."""
    shared = getattr(getattr(shell, "kernel", None), "rlm_sandbox", None)
    return shared.namespace if shared is not None else shell.user_ns


def _run_context(namespace: Any, shared: Any, sources: list[str] | None) -> Any:
    """The run's `context`: the person's; in the gateway-backed kernel it stays in the gateway's kernel (it
    may be larger than this machine's memory) and the run is told its description, computed there. The
    sandboxed kernel keeps a copy, handed to a new confined kernel when one dies mid-run."""
    if shared is not None and shared.spec.death_ends_run:
        return namespace.held("context", sources)
    return namespace["context"]


def _own_number(kernel: Any) -> int | None:
    """The execution count of the cell running now (a %%rlm or %rlm continue cell)."""
    requests = getattr(kernel, "rlm_requests", None)
    return requests[-1][1] if requests else None


def _have_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["CellRun", "person_namespace", "query_source", "recorded_run_note", "run_parser", "trajectory_path"]
