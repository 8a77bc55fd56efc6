"""What the RLM kernel keeps between cells: the replay book of every cell's
recorded sub-calls (from runs in this kernel, from the notebook the page
sends, or from the saved file), the options of the last run, the page's
copy of the notebook, pins, and requests to the page.

Ops to the page (docs/live-protocol.md, "Take-over ops"): ``cell_metadata``
merges ``rlm`` metadata into a cell, ``cell_source`` replaces a cell's
source, ``delete_cells`` removes cells, ``move_cells`` moves cells (in
order) to right after ``after_cell_id``, ``get_cells`` asks for the
notebook's cells (answered by a ``cells`` op with the same ``request_id``).
A ``cell_metadata`` op of a cell's recorded sub-calls also carries the
session's ``replay`` totals (``replayed``, ``fresh``) for the status bar.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.execution.engine_loop import submit
from ..engine.model.model_client import ModelEndpoint
from ..engine.model.tree import endpoints
from ..engine.trajectory.records import message_content
from ..engine.trajectory.replay import ReplayBook, record_metadata
from .catch_up import journal_catch_ups, runs_folder
from .person_cells import PersonCells
from .reruns import recorded_run_below

if TYPE_CHECKING:
    from ..engine.runs.run import Run
    from ..engine.trajectory.records import SubcallRecord

CELLS_TIMEOUT_S = 5.0
RERUN_CHECK_TIMEOUT_S = 2.0  # the extension answers in milliseconds; this only bounds a silent frontend
_ENV = ("RLM_MODEL", "RLM_SUB_MODEL", "RLM_API_BASE", "RLM_SUB_API_BASE")


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


class KernelSession:
    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.shell = kernel.shell
        self.channel = kernel.rlm_channel
        self.book = ReplayBook()
        self.cells: list[dict[str, Any]] | None = None  # the notebook as the page last sent it
        self.frontend_sends_cells = False  # the page has sent its cells (it has the take-over side)
        self.given_options: dict[str, Any] = {}  # the options the last %%rlm run was given
        self.active_run: Run | None = None
        self.ran_here: set[str] = set()  # %%rlm cells (ids, else sources) this kernel started runs for
        self.kernel_loop: asyncio.AbstractEventLoop | None = None
        self._rlm: Any = None
        self._rlm_key: Any = None
        self._requests: dict[str, asyncio.Future[Any]] = {}
        self._request_ids = itertools.count(1)
        self.channel.listeners.append(self._on_op)
        self.person_cells = PersonCells(self)

    # -- the page ---------------------------------------------------------------
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
                if data.get("request_id") == "hello":
                    self._catch_up(cells)
            future = self._requests.pop(str(data.get("request_id")), None)
            if future is not None and not future.done():
                future.get_loop().call_soon_threadsafe(
                    lambda: None if future.done() else future.set_result(cells))

    def _catch_up(self, cells: list[dict[str, Any]]) -> None:
        """A page answered its hello's ``get_cells``: the runs it missed come
        to it, from this kernel while it has them, else from their journals
        (without collaboration only: with it, the server wrote them); not
        those that ended before the notebook was last saved (what it lacks of
        them, a person took out)."""
        channel = self.channel
        if channel.writer is not None:
            return
        saved = saved_notebook_path()
        saved_at = saved.stat().st_mtime if saved is not None else None
        channel.catch_up(cells, saved_at)
        where = runs_folder(os.environ.get("JPY_SESSION_NAME"))
        if where is None:
            return
        known = {sink.anchor for sink in channel.ended if sink.anchor}
        if channel.active is not None and channel.active.anchor:
            known.add(channel.active.anchor)
        for fields in journal_catch_ups(cells, *where, known, saved_at=saved_at):
            channel.send("resync", **fields)

    def _take_cells(self, cells: list[dict[str, Any]]) -> None:
        self.cells = cells
        self.frontend_sends_cells = True
        self.book.load_cells(cells)

    async def ask_page(self, timeout: float = CELLS_TIMEOUT_S) -> list[dict[str, Any]] | None:
        """The notebook's cells as the page has them now (outputs included);
        None without a page that has the extension, or when it does not answer."""
        if not self.channel.attached:
            return None
        request_id = str(next(self._request_ids))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = future
        self.channel.send("get_cells", request_id=request_id)
        try:
            cells = await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            self._requests.pop(request_id, None)
            return None
        return cells if isinstance(cells, list) else None

    def saved_cells(self) -> list[dict[str, Any]] | None:
        """The saved file's cells (their recorded sub-calls go into the replay book)."""
        cells = read_saved_cells()
        if cells is not None:
            self.book.load_cells(cells)
        return cells

    async def request_cells(self, timeout: float = CELLS_TIMEOUT_S) -> list[dict[str, Any]] | None:
        """The notebook's cells as they are now: from the page when it has
        the extension, else the saved file."""
        cells = await self.ask_page(timeout)
        return cells if cells is not None else self.saved_cells()

    async def page_at_run_start(self) -> list[dict[str, Any]] | None:
        """The page's notebook as a run starts, when the page sends its cells:
        what a reload mid-run would lose (the outputs of cells run before it,
        unsaved) and the run's ``resync`` brings back."""
        if not (self.channel.attached and self.frontend_sends_cells):
            return None
        return await self.ask_page(RERUN_CHECK_TIMEOUT_S)

    def known_cells(self) -> list[dict[str, Any]] | None:
        """The page's last copy of the notebook, else the saved file."""
        if self.cells is not None:
            return self.cells
        cells = read_saved_cells()
        if cells is not None:
            self.cells = cells
            self.book.load_cells(cells)
        return cells

    async def cells_for_rerun(self, cell_id: str | None, source: str) -> list[dict[str, Any]] | None:
        """The notebook's cells as they are now, when a run of this ``%%rlm``
        cell may be below it (this kernel ran it, or the notebook as last
        seen has one); None, without asking the page, when there is none."""
        ran = (cell_id or source.strip()) in self.ran_here
        if not ran and recorded_run_below(self.known_cells(), cell_id, source) is None:
            return None
        if self.channel.attached and not self.frontend_sends_cells:
            return read_saved_cells()  # a page that never sent its cells won't now
        return await self.request_cells(RERUN_CHECK_TIMEOUT_S)

    async def cell_source(self, cell_id: str) -> str | None:
        """A cell's current source, asked of the page (from any loop)."""
        kernel_loop = self.kernel_loop
        if kernel_loop is None:
            return None
        future = asyncio.run_coroutine_threadsafe(self.request_cells(), kernel_loop)
        cells = await asyncio.wrap_future(future)
        for cell in cells or []:
            if cell.get("id") == cell_id:
                source = cell.get("source", "")
                return "".join(source) if isinstance(source, list) else source
        return None

    # -- the options of the last run ------------------------------------------------
    def remember(self, given: dict[str, Any]) -> None:
        self.given_options = dict(given)

    def rlm(self) -> Any:
        """The RLM configured like the last run (else from the environment)."""
        from ..api import RLM

        key = (repr(sorted(self.given_options.items())), tuple(os.environ.get(k) for k in _ENV))
        if self._rlm is None or key != self._rlm_key:
            self._rlm = RLM(**self.given_options, check=False)
            self._rlm_key = key
        return self._rlm

    # -- pins ---------------------------------------------------------------------
    def pin(self, run: Run, record: SubcallRecord, response: str, prompt: str | None = None) -> None:
        """A person edited ``record``'s response (and perhaps its prompt) in
        its widget and pinned it. The record keeps matching the prompt the
        code sends; a rewritten prompt is kept beside it as ``edited_prompt``."""
        cell_id = record.cell_id
        edited = None if prompt is None or prompt == record.prompt else prompt
        record.response, record.pinned, record.status, record.error = response, True, "done", None
        record.edited_prompt = edited
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
        rlm = self.rlm()
        sub = endpoints(rlm.options)[1]
        endpoint = sub if record.model in ("", sub.model) else ModelEndpoint(record.model, sub.api_base, sub.api_key)
        message = {"role": "user", "content": message_content(prompt, record.images)}
        return submit(rlm.client.complete(endpoint, [message]))


__all__ = ["KernelSession", "read_saved_cells", "saved_notebook_path"]
