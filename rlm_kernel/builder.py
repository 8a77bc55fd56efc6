"""The run builder: every entry point (``%%rlm``, ``%rlm continue``, a
person's cell, ``RLM.completion`` / ``RLM.resume`` and so the command line)
makes its run here, from options, a context, an executor and the frontends
it wants (:class:`Frontends`)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .engine.execution.threads import CodeThread
from .engine.model.model_client import ModelClient
from .engine.model.tree import RunTree
from .engine.runs.run import Run
from .engine.runs.start import RunStart
from .engine.trajectory.sink import MultiSink, Sink
from .errors import RLMError


@dataclass
class LivePage:
    """The live notebook in JupyterLab: the kernel's channel to the page, the
    ``%%rlm`` cell the run's cells go below and that cell's request."""

    channel: Any  # sinks.live.LiveChannel
    anchor_cell_id: str | None
    parent_msg_id: str | None
    page_cells: list[dict[str, Any]] | None = None  # the page's notebook as the run started
    execution_count: int | None = None  # the %%rlm cell's own number


@dataclass
class Frontends:
    """Where a run shows or keeps what happens; each part is optional."""

    notebook: str | os.PathLike[str] | None = None  # the trajectory file, rewritten as the run goes
    journal: str | os.PathLike[str] | None = None  # the crash journal of finished steps
    keep_journal: bool = False  # keep it after a clean end (a live notebook may be unsaved)
    console: IO[str] | None = None  # progress lines on a terminal
    subcall_views: bool = True  # each sub-call shown in the output of the cell that made it
    widgets: bool = False  # ... as live widgets (a kernel with a page)
    cell_output: bool = False  # the %%rlm cell's own output: a status line, and the steps unless `live`
    live: LivePage | None = None
    session: Any = None  # the kernel session: replay book, pins, "ask the model", page ops
    continue_cell: str | None = None  # the %rlm continue cell, marked with the continuation it made
    sinks: Sequence[Sink] = field(default_factory=tuple)  # any more, after ours
    trace: bool | None = None  # OpenTelemetry spans (sinks/traces.py); None: when $OTEL_EXPORTER_OTLP_ENDPOINT is set


def model_client(options: Any) -> ModelClient:
    """The model client for these options: through a litellm Router when
    ``options.router`` names its config, else litellm directly."""
    if options.router:
        from .engine.model.router_client import RouterClient

        return RouterClient(options.router, max_retries=options.max_retries,
                            retry_base_delay=options.retry_base_delay, request_timeout=options.request_timeout)
    from .engine.model.litellm_client import LiteLLMClient

    return LiteLLMClient(max_retries=options.max_retries, retry_base_delay=options.retry_base_delay,
                         request_timeout=options.request_timeout)


class ModelClients:
    """The model clients of a session that makes many runs (a kernel, a
    server, a batch worker): with ``--router``, one client (so one
    ``litellm.Router``) per router file and settings, kept, so that the
    Router's cooldowns and rate counts carry over from run to run. A file
    whose text changed gets a new Router. Without a router each run gets a
    new client: a plain client keeps nothing between calls."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Any, ...], ModelClient] = {}
        self._lock = threading.Lock()

    def get(self, options: Any) -> ModelClient:
        if not options.router:
            return model_client(options)
        path = Path(options.router).expanduser()
        try:
            text = path.read_bytes()
        except OSError:
            return model_client(options)  # which says why the file cannot be read
        where = str(path.resolve())
        key = (where, hashlib.sha256(text).hexdigest(), options.max_retries, options.retry_base_delay,
               options.request_timeout)
        with self._lock:
            client = self._kept.get(key)
            if client is None:
                self._kept = {k: v for k, v in self._kept.items() if k[0] != where}  # an older text of the file
                client = self._kept[key] = model_client(options)
        return client


def check_models(options: Any, client: ModelClient | None = None) -> None:
    """Refuse, in one sentence, a model that cannot be used (name, key,
    server; with a Router, a name its config does not serve)."""
    from .engine.model.providers import check_endpoint
    from .engine.model.tree import endpoints

    root, sub = endpoints(options)
    if options.router:
        from .engine.model.router_client import RouterClient

        router = client if isinstance(client, RouterClient) else RouterClient(options.router)
        if not root.model:
            check_endpoint(root)  # says how to name one
        router.check(root)
        router.check(sub)
        return
    check_endpoint(root)
    if sub.model != root.model or sub.api_base != root.api_base:
        check_endpoint(sub)


def build_run(
    options: Any,
    start: RunStart,
    *,
    query: str,
    context: Any,
    executor: Any,
    code_thread: CodeThread,
    frontends: Frontends,
    client: ModelClient | None = None,
    check: bool = True,
    approver: Any = None,
) -> Run:
    """A run ready to start, with its sinks; ``start`` says how it begins
    (``RunStart.fresh(...)``, ``.resumed(...)``...). File sinks are made
    first: they refuse a path that cannot be written before anything else is
    set up or any model called."""
    if start.owns_namespace and (not isinstance(query, str) or not query.strip()):
        raise RLMError("The query is empty; say what you want to know about the context.")
    file_sinks = _file_sinks(frontends)
    tools = _tools(options, executor, later=bool(start.rerun)) if start.owns_namespace else None
    client = client or model_client(options)
    if check:
        check_models(options, client)
    tree = RunTree(client, options, tools)
    return Run(tree, start, query=query, context=context, executor=executor, code_thread=code_thread,
               sink=MultiSink(*_sinks(frontends, code_thread), *file_sinks), approver=approver)


def _tools(options: Any, executor: Any, later: bool) -> Any:
    """The person's tools, found now (a name not defined yet may wait for a
    resumed run's re-run cells): a bad one is refused before any model call."""
    from .engine.execution.tools import Toolbox

    toolbox = Toolbox(options.tools)
    toolbox.bind(executor.namespace, later=later)
    return toolbox


def _file_sinks(frontends: Frontends) -> list[Sink]:
    from .sinks.journal import JournalSink
    from .sinks.notebook import NotebookSink

    sinks: list[Sink] = []
    if frontends.notebook is not None:
        sinks.append(NotebookSink(frontends.notebook))
    if frontends.journal is not None:
        sinks.append(JournalSink(frontends.journal, keep=frontends.keep_journal))
    return sinks


def _sinks(frontends: Frontends, thread: Any) -> list[Sink]:
    sinks: list[Sink] = []
    session = frontends.session
    if frontends.subcall_views:
        from .sinks.subcall_views import SubcallViewSink

        sinks.append(SubcallViewSink(thread, widgets=frontends.widgets,
                                     pinner=None if session is None else session.pin,
                                     asker=None if session is None else session.ask))
    if session is not None:
        from .sinks.session import SessionSink

        sinks.append(SessionSink(session, thread, continue_cell=frontends.continue_cell))
    sinks.extend(frontends.sinks)
    traced = _trace_sink(frontends)
    if traced is not None:
        sinks.append(traced)
    if frontends.console is not None:
        from .sinks.console import ConsoleSink

        sinks.append(ConsoleSink(frontends.console))
    display = None
    if frontends.cell_output:
        from .sinks.display import DisplaySink

        display = DisplaySink(thread, status_only=frontends.live is not None)
        sinks.append(display)
    if frontends.live is not None:
        from .sinks.live import Anchor, LiveSink

        live = frontends.live
        anchor = Anchor(live.anchor_cell_id, live.parent_msg_id, live.execution_count,
                        display.outputs if display is not None else None)
        sinks.append(LiveSink(live.channel, thread, anchor, page_cells=live.page_cells))
    return sinks


def _trace_sink(frontends: Frontends) -> Sink | None:
    """The run's spans when tracing is on (``--trace``, or an OTLP endpoint in
    the environment, which the kernel, ``serve`` and ``batch`` honour too).
    Asked for and not installed: refused in one sentence; set in the
    environment and not installed: said once on stderr, the run goes on."""
    from .sinks import otlp

    if frontends.trace is False or (frontends.trace is None and not otlp.tracing_on()):
        return None
    if not otlp.installed():
        if frontends.trace:
            otlp.check_installed()
        _say_once(f"rlm-kernel: {otlp.ENDPOINT_ENV} is set but runs are not traced: {otlp.INSTALL_HINT}.")
        return None
    from .sinks.traces import trace_sink

    notebook = frontends.notebook if frontends.notebook is not None else os.environ.get("JPY_SESSION_NAME")
    return trace_sink(os.path.abspath(notebook) if notebook else None)


_SAID: set[str] = set()


def _say_once(text: str) -> None:
    import sys

    if text not in _SAID:
        _SAID.add(text)
        print(text, file=sys.stderr)


__all__ = ["Frontends", "LivePage", "ModelClients", "build_run", "check_models", "model_client"]
