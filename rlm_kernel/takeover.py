"""Taking over in the RLM kernel: a person's cells between and after runs.

The kernel keeps a :class:`~rlm_kernel.engine.replay.ReplayBook` of every
cell's recorded sub-calls (from runs in this kernel, from the notebook the
frontend sends, or from the saved file), so that

- re-running a cell, or Run All on a saved RLM notebook, replays recorded
  sub-call responses instead of calling models;
- a response a person edits and pins in a sub-call widget is returned to the
  code from then on, and written into the cell's metadata (with the prompt,
  when they rewrote that too; "Ask the model" sends the rewritten prompt to
  the sub-model at once, to fill the response box);
- the sub-call helpers work in any cell a person runs, with widgets, and the
  sub-calls are recorded in that cell's metadata too.

Ops to the frontend (see docs/live-protocol.md): ``cell_metadata`` merges
``rlm`` metadata into a cell, ``cell_source`` replaces a cell's source,
``delete_cells`` removes cells, ``move_cells`` moves cells (in order) to
right after ``after_cell_id``, ``get_cells`` asks for the notebook's cells
(answered by a ``cells`` op with the same ``request_id``). A
``cell_metadata`` op of a cell's recorded sub-calls also carries the
session's ``replay`` totals (``replayed``, ``fresh``) for the status bar.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .engine.replay import ReplayBook, record_metadata
from .sinks.base import Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from .engine.loop import Run
    from .engine.subcalls import SubcallRecord

HELPERS = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "SHOW_VARS", "FINAL", "FINAL_VAR")
AGENT_ROLES = ("thought", "code", "answer")
CELLS_TIMEOUT_S = 5.0
RERUN_CHECK_TIMEOUT_S = 2.0  # the extension answers in milliseconds; this only bounds a silent frontend


def _meta(cell: Any) -> dict[str, Any]:
    return (cell.get("metadata") or {}).get("rlm") or {}


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def saved_notebook_path() -> Path | None:
    """The notebook this kernel serves, as Jupyter told it (JPY_SESSION_NAME)."""
    session = os.environ.get("JPY_SESSION_NAME")
    if not session:
        return None
    for candidate in (Path(session), Path.cwd() / Path(session).name):
        if candidate.suffix == ".ipynb" and candidate.is_file():
            return candidate
    return None


def read_saved_cells(path: Path | None = None) -> list[dict[str, Any]] | None:
    import nbformat

    path = path or saved_notebook_path()
    if path is None:
        return None
    try:
        return [dict(c) for c in nbformat.read(path, as_version=4).cells]
    except Exception:  # noqa: BLE001 - an unreadable file is just no record
        return None


class _CellScope:
    """One cell a person runs; its sub-call run is made on first use."""

    def __init__(self, cell_id: str | None, source: str) -> None:
        self.run: Run | None = None
        self.cell_id = cell_id
        self.source = source
        self.records: list[SubcallRecord] = []

    def start(self, run: Run) -> Run:
        self.run = run
        self.records = run.open_cell(self.cell_id, source=self.source)
        return run


class TakeoverSink(Sink):
    """Added to every ``%%rlm`` run in the kernel: keeps the book up to date,
    tells the frontend about cells a person edited at an approval and, for
    ``%rlm continue``, notes on the continue cell which continuation it made
    (so running it again, as Run All does, finds it and asks no model)."""

    def __init__(self, session: KernelSession, thread: Any, continue_cell: str | None = None) -> None:
        self.session = session
        self.thread = thread
        self.continue_cell = continue_cell

    def cell_added(self, run: Run, cell: NotebookNode, after: str | None) -> None:
        if run.depth or not self.continue_cell or cell.metadata.get("rlm", {}).get("role") not in AGENT_ROLES:
            return
        mark = {"role": "continue", "run_id": run.run_id, "continuation": cell.id}
        continue_cell, self.continue_cell = self.continue_cell, None
        self.thread.post(lambda: self.session.send("cell_metadata", cell_id=continue_cell, rlm=mark))

    def cell_finished(self, run: Run, cell: NotebookNode) -> None:
        if run.depth:
            return
        records = cell.metadata.get("rlm", {}).get("subcalls")
        if records:
            self.session.book.set_cell(cell.id, records, cell.source)

    def cell_edited(self, run: Run, cell: NotebookNode) -> None:
        if run.depth:
            return
        self.thread.post(lambda: self.session.send("cell_source", cell_id=cell.id, source=cell.source,
                                                   metadata=dict(cell.metadata.get("rlm", {}))))


class KernelSession:
    """What the RLM kernel keeps between cells."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.shell = kernel.shell
        self.channel = kernel.rlm_channel
        self.book = ReplayBook()
        self.cells: list[dict[str, Any]] | None = None  # the notebook as the frontend last sent it
        self.frontend_sends_cells = False  # the page has sent its cells (it has the take-over side)
        self.settings: dict[str, Any] = {}  # the options of the last %%rlm run
        self.active_run: Run | None = None
        self.ran_here: set[str] = set()  # %%rlm cells (ids, else sources) this kernel started runs for
        self.last_final: Any = None
        self._scope: _CellScope | None = None
        self._rlm: Any = None
        self._rlm_key: Any = None
        self._requests: dict[str, asyncio.Future[Any]] = {}
        self._request_ids = itertools.count(1)
        self._main_thread = threading.get_ident()
        self.channel.listeners.append(self._on_op)
        self.shell.events.register("pre_run_cell", self._pre_run_cell)
        self.shell.events.register("post_run_cell", self._post_run_cell)
        self.install_helpers()

    # -- frontend ---------------------------------------------------------------
    def send(self, op: str, **fields: Any) -> None:
        if self.channel.attached:
            self.channel.send(op, **fields)

    def _on_op(self, data: dict[str, Any]) -> None:
        op = data.get("op")
        if op == "hello":
            # a page (re)connected: learn the notebook's recorded sub-calls
            if isinstance(data.get("cells"), list):
                self._take_cells(data["cells"])
            else:
                self.channel.send("get_cells", request_id="hello")
        elif op == "cells":
            cells = data.get("cells")
            if isinstance(cells, list):
                self._take_cells(cells)
            future = self._requests.pop(str(data.get("request_id")), None)
            if future is not None and not future.done():
                future.get_loop().call_soon_threadsafe(
                    lambda: None if future.done() else future.set_result(cells))

    def _take_cells(self, cells: list[dict[str, Any]]) -> None:
        self.cells = cells
        self.frontend_sends_cells = True
        self.book.load_cells(cells)

    async def request_cells(self, timeout: float = CELLS_TIMEOUT_S) -> list[dict[str, Any]] | None:
        """The notebook's cells as they are now: from the frontend when it has
        the extension, else the saved file."""
        if self.channel.attached:
            request_id = str(next(self._request_ids))
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._requests[request_id] = future
            self.channel.send("get_cells", request_id=request_id)
            try:
                return await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError:
                self._requests.pop(request_id, None)
        cells = read_saved_cells()
        if cells is not None:
            self.book.load_cells(cells)
        return cells

    def known_cells(self) -> list[dict[str, Any]] | None:
        """The frontend's last copy of the notebook, else the saved file."""
        if self.cells is not None:
            return self.cells
        cells = read_saved_cells()
        if cells is not None:
            self.cells = cells
            self.book.load_cells(cells)
        return cells

    # -- settings -----------------------------------------------------------------
    def remember(self, settings: dict[str, Any]) -> None:
        self.settings = dict(settings)

    def rlm(self) -> Any:
        """The RLM configured like the last run (else from the environment)."""
        from .api import RLM

        env = tuple(os.environ.get(k) for k in ("RLM_MODEL", "RLM_SUB_MODEL", "RLM_API_BASE", "RLM_SUB_API_BASE"))
        key = (tuple(sorted(self.settings.items())), env)
        if self._rlm is None or key != self._rlm_key:
            self._rlm = RLM(**self.settings, check=False)
            self._rlm_key = key
        return self._rlm

    # -- helpers in a person's cells ---------------------------------------------
    def install_helpers(self) -> None:
        ns = self.shell.user_ns
        for name in HELPERS:
            ns[name] = getattr(self, f"_proxy_{name}", None) or self._make_proxy(name)
        ns.setdefault("answer", {"content": "", "ready": False})

    def _make_proxy(self, name: str) -> Any:
        session = self

        def proxy(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            return getattr(session._helpers_for_cell(), name)(*args, **kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        proxy.__doc__ = f"{name} for cells a person runs (same as in a run; sub-calls are recorded in this cell)."
        setattr(self, f"_proxy_{name}", proxy)
        return proxy

    def _helpers_for_cell(self) -> Any:
        scope = self._scope
        if scope is None:
            raise RuntimeError("The RLM helpers work in cells run by this kernel's main thread.")
        run = scope.run or scope.start(self._new_cell_run())
        return _CellHelpers(run)

    def _pre_run_cell(self, info: Any) -> None:
        self._scope = None
        if self.active_run is not None or threading.get_ident() != self._main_thread:
            return
        source = getattr(info, "raw_cell", "") or ""
        if source.lstrip().startswith(("%%rlm", "%rlm")):
            return
        cell_id = getattr(info, "cell_id", None) or _parent_cell_id(self.kernel)
        self._scope = _CellScope(cell_id, source)

    def _new_cell_run(self) -> Run:
        from .engine.dispatch import CallerThread
        from .engine.execution import ShellExecutor
        from .engine.loop import Run, RunTree
        from .sinks.base import MultiSink
        from .sinks.subcall_views import SubcallViewSink

        rlm = self.rlm()
        thread = CallerThread()
        thread.thread_id = threading.get_ident()
        tree = RunTree(rlm.llm, rlm.limits, rlm.root_endpoint, rlm.sub_endpoint)
        views = SubcallViewSink(thread, widgets=True, pinner=self.pin, asker=self.ask)
        run = Run(tree, query="", context=self.shell.user_ns.get("context"),
                  executor=ShellExecutor(self.shell, passthrough=True), code_thread=thread,
                  sink=MultiSink(views), replay=self.book)
        run._installed = True  # the person's namespace keeps its own bindings
        return run

    def _post_run_cell(self, result: Any) -> None:
        scope, self._scope = self._scope, None
        if scope is None or scope.run is None:
            return
        run = scope.run
        run.close_cell()
        thread = run.code_thread
        _drain(thread)
        thread.thread_id = None
        if not scope.records:
            return
        records = [record_metadata(r) for r in scope.records]
        replayed = sum(1 for r in scope.records if r.replayed)
        fresh = len(records) - replayed
        self.book.count(replayed, fresh)
        if scope.cell_id:
            self.book.set_cell(scope.cell_id, records, scope.source)
            self.send("cell_metadata", cell_id=scope.cell_id, rlm={"subcalls": records},
                      replay={"replayed": self.book.replayed, "fresh": self.book.fresh})
        off = "" if self.book.enabled else " (replay is off)"
        print(f"rlm: {replayed} sub-call{'s' if replayed != 1 else ''} replayed from the notebook, "
              f"{fresh} new{off} (session: {self.book.replayed} replayed, {self.book.fresh} new)")

    # -- pins ---------------------------------------------------------------------
    def pin(self, run: Run, record: SubcallRecord, response: str, prompt: str | None = None) -> None:
        """A person edited ``record``'s response (and perhaps its prompt) in
        its widget and pinned it. The record keeps matching the prompt the
        code sends; a rewritten prompt is kept beside it as ``edited_prompt``."""
        cell_id = getattr(record, "cell_id", None)
        edited = None if prompt is None or prompt == record.prompt else prompt
        record.response, record.pinned, record.status, record.error = response, True, "done", None
        record.edited_prompt = edited  # type: ignore[attr-defined]
        if not cell_id:
            return
        records = self.book.cells.get(cell_id)
        if records is None or self.book.pin(cell_id, record.id, response, edited) is None:
            records = (records or []) + [record_metadata(record)]
            self.book.set_cell(cell_id, records)
        self.send("cell_metadata", cell_id=cell_id, rlm={"subcalls": self.book.cells[cell_id]})

    def ask(self, record: SubcallRecord, prompt: str) -> concurrent.futures.Future[Any]:
        """Send a prompt a person wrote in a sub-call's editor to that call's
        sub-model, now, outside any run (its answer fills the editor; nothing
        is pinned until they pin it). A future of the completion."""
        from .engine.dispatch import submit
        from .engine.llm import ModelEndpoint

        rlm = self.rlm()
        base = rlm.sub_endpoint
        endpoint = base if record.model in ("", base.model) else ModelEndpoint(record.model, base.api_base,
                                                                               base.api_key)
        return submit(rlm.llm.complete(endpoint, [{"role": "user", "content": prompt}]))

    # -- %%rlm re-run of a recorded run ---------------------------------------------
    async def cells_for_rerun(self, cell_id: str | None, source: str) -> list[dict[str, Any]] | None:
        """The notebook's cells as they are now, when a run of this ``%%rlm``
        cell may be below it (this kernel ran it, or the notebook as last
        seen has one); None, without asking the page, when there is none."""
        ran = (cell_id or source.strip()) in self.ran_here
        if not ran and self.recorded_run_below(self.known_cells(), cell_id, source) is None:
            return None
        if self.channel.attached and not self.frontend_sends_cells:
            return read_saved_cells()  # a page that never sent its cells won't now
        return await self.request_cells(RERUN_CHECK_TIMEOUT_S)

    def recorded_run_below(self, cells: list[dict[str, Any]] | None, cell_id: str | None,
                           source: str) -> tuple[str, int] | None:
        """(run id, number of cells) when the notebook (``cells``, as it is
        now) holds a run of this ``%%rlm`` cell right below it: the newest
        one, as a run's cells go right below its query cell."""
        if not cells:
            return None
        index = _find(cells, cell_id, source)
        if index is None:
            return None
        run_id, count = None, 0
        for cell in cells[index + 1:]:
            meta = _meta(cell)
            if meta.get("role") not in AGENT_ROLES:
                break
            if run_id is None:
                run_id = meta.get("run_id")
            if meta.get("run_id") != run_id:
                break
            count += 1
        return (run_id, count) if run_id and count else None


def continuation_below(cells: list[dict[str, Any]], cell_id: str | None) -> tuple[str, int, bool] | None:
    """(run id, number of cells, superseded) when the continuation that the
    ``%rlm continue`` cell ``cell_id`` made is in the notebook below it."""
    index = _find(cells, cell_id, "") if cell_id else None
    if index is None:
        return None
    mark = _meta(cells[index])
    first, run_id = mark.get("continuation"), mark.get("run_id")
    if not first or not run_id:
        return None
    for start in range(index + 1, len(cells)):
        if cells[start].get("id") == first:
            break
    else:
        return None
    count = 0
    for cell in cells[start:]:
        meta = _meta(cell)
        if meta.get("role") not in AGENT_ROLES or meta.get("run_id") != run_id:
            break
        count += 1
    return run_id, count, bool(_meta(cells[start]).get("superseded"))


class _CellHelpers:
    """The helpers of a cell run, tagging each sub-call with its cell."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.helpers = run.helpers

    def __getattr__(self, name: str) -> Any:
        if name == "SHOW_VARS":
            return self.run._show_vars
        if name == "FINAL":
            return self.run._final_call
        if name == "FINAL_VAR":
            return self.run._final_var_call
        return getattr(self.helpers, name)


def _drain(thread: Any) -> None:
    """Run what was posted to a cell's thread after its last wait (widget updates)."""
    import queue

    while True:
        try:
            item = thread._queue.get_nowait()
        except queue.Empty:
            return
        try:
            thread._run_item(item)
        except Exception:  # noqa: BLE001 - a late widget update must not fail the cell
            pass


def _parent_cell_id(kernel: Any) -> str | None:
    parent = kernel.get_parent("shell") or {}
    return (parent.get("metadata") or {}).get("cellId")


def _find(cells: list[dict[str, Any]], cell_id: str | None, source: str) -> int | None:
    if cell_id:
        for index, cell in enumerate(cells):
            if cell.get("id") == cell_id:
                return index
    wanted = source.strip()
    if not wanted:
        return None
    for index, cell in enumerate(cells):
        if _source(cell).strip() == wanted:
            return index
    return None


def cell_with_source(cells: list[dict[str, Any]], source: str) -> str | None:
    """The id of the one cell with this source (for clients that don't say
    which cell they run, like nbclient); None when there are none or several."""
    wanted = source.strip()
    found = [c.get("id") for c in cells if _source(c).strip() == wanted]
    return found[0] if len(found) == 1 else None


__all__ = ["KernelSession", "TakeoverSink", "cell_with_source", "continuation_below", "read_saved_cells",
           "saved_notebook_path"]
