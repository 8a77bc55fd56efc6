"""The live notebook: the kernel's end of the comm with the labextension.

The extension inserts the cells this sink announces and routes the iopub
messages of each generated cell into it (see docs/live-protocol.md). Every
op is sent from the kernel's main thread (posted through the run's code
thread), so ops and the cells' own outputs reach the frontend in order.

Ops wait in the sink's outbox until a generated cell is about to run (its
outputs must follow its insert), the run ends, or ``BATCH_WINDOW_S`` has
passed, and leave together as one ``ops`` message when the frontend's
``hello`` said it reads them: every message costs the kernel, the Jupyter
server and the page a round of work, and a fast run emits a dozen ops per
step. Only the newest queued ``status`` is kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.trajectory.sink import Sink
from ..live_protocol import PROTOCOL, step_msg_id
from .notebook import plain

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.execution.threads import CallerThread
    from ..engine.trajectory.progress import ReplyProgress
    from ..engine.trajectory.result import RunResult
    from ..engine.trajectory.sink import RunView

_HIDDEN_ROLES = ("context", "query")
BATCH_WINDOW_S = 0.02  # the longest an op waits for company; too short for a person to notice
ENDED_KEPT = 20  # finished runs kept for a page that missed them (their cells, outputs included)
ANCHOR_ACK_S = 1.0  # the longest a %%rlm cell's reply waits for the server's writer to set its count


class LiveChannel:
    """Registers the ``rlm`` comm target and remembers who said hello: pages
    with the extension, and the Jupyter server's writer (``role: "writer"``),
    which, with real-time collaboration, writes every run into the shared
    document itself; the pages then only show it."""

    def __init__(self) -> None:
        from comm import get_comm_manager

        self.attached = False
        self.writer: str | None = None  # the client id of the server's writer, once it said hello
        self.notebook_path: str | None = None
        self.batches = False  # the last hello said the frontend reads `ops` messages
        self.comm: Any = None
        self.active: LiveSink | None = None
        self.ended: list[LiveSink] = []  # the last runs that ended, newest last (a page that missed them)
        self._written: dict[str, Any] = {}  # %%rlm cells waiting for the writer's anchor_written: their futures
        self.listeners: list[Any] = []  # called with every frontend op (take-over requests and replies)
        self.lock = threading.RLock()  # held while sending, so queued and direct ops stay in order
        get_comm_manager().register_target("rlm", self._on_open)

    def _on_open(self, comm: Any, msg: dict[str, Any]) -> None:
        comm.on_msg(lambda m: self._handle(m["content"].get("data") or {}))
        self._handle(msg["content"].get("data") or {})

    def _handle(self, data: dict[str, Any]) -> None:
        if data.get("protocol") != PROTOCOL:
            return
        if data.get("op") == "anchor_written":
            future = self._written.pop(str(data.get("cell_id")), None)
            if future is not None and not future.done():
                future.get_loop().call_soon_threadsafe(lambda: None if future.done() else future.set_result(None))
            return
        for listener in list(self.listeners):
            listener(data)
        if data.get("op") == "hello":
            self.attached = True
            from_writer = data.get("role") == "writer"
            if from_writer:
                self.writer = str(data.get("client_id") or "server")
            self.notebook_path = data.get("notebook_path") or self.notebook_path
            self.batches = "ops" in (data.get("features") or ())
            # Every page learns who writes the run's cells: itself, or the server.
            self.send("writer", writer="server" if self.writer else "page")
            if self.active is not None:
                # With the server writing, a page only needs the run's status.
                self.active.resync(light=self.writer is not None and not from_writer)
            elif self.ended and self.writer is not None and not from_writer:
                self.ended[-1].resync(light=True)  # the last run's final status

    def catch_up(self, page: list[dict[str, Any]], saved_at: float | None = None) -> None:
        """A page answered the ``get_cells`` of its hello: the runs that ended
        here and that it lacks cells of come to it (without collaboration; with
        it, the server wrote them into the shared document), unless the
        notebook was saved after a run ended (``saved_at``): then what it
        lacks, a person took out."""
        if self.writer is not None:
            return
        for sink in list(self.ended):
            if saved_at is not None and sink.ended_at is not None and saved_at > sink.ended_at:
                continue
            fields = sink.catch_up(page)
            if fields is not None:
                self.send("resync", **fields)

    def send(self, op: str, **fields: Any) -> None:
        """Send one op now, after whatever the active run still has queued."""
        with self.lock:
            if self.active is not None:
                self.active.flush()
            self.publish({"protocol": PROTOCOL, "op": op, **fields})

    def cell_started(self, run_id: str, cell_id: str, msg_id: str) -> None:
        """Right before a generated cell runs: make sure the frontend knows
        which msg_id to route into it (the sink usually queued it already)."""
        with self.lock:
            sink = self.active
            if sink is not None and msg_id in sink.started:
                sink.flush()
            else:
                self.send("cell_started", run_id=run_id, cell_id=cell_id, msg_id=msg_id)

    async def anchor_finished(self, cell_id: str, count: int | None) -> None:
        """A ``%%rlm`` cell's request is about to be answered, while the server
        writes the notebook: the writer sets the cell's count and idle state
        first, so the page that ran it finds them set when its reply comes
        (and sets nothing itself); at most ``ANCHOR_ACK_S`` is waited."""
        import asyncio

        future = asyncio.get_running_loop().create_future()
        self._written[cell_id] = future
        self.send("anchor_finished", cell_id=cell_id, execution_count=count)
        try:
            await asyncio.wait_for(future, ANCHOR_ACK_S)
        except asyncio.TimeoutError:
            pass
        finally:
            self._written.pop(cell_id, None)

    def keep_ended(self, sink: LiveSink) -> None:
        self.ended = [s for s in self.ended if s is not sink][-(ENDED_KEPT - 1):] + [sink]

    def publish(self, message: dict[str, Any]) -> None:
        from comm import create_comm

        with self.lock:
            if self.comm is None:
                self.comm = create_comm(target_name="rlm", data={"protocol": PROTOCOL, "op": "open"})
            self.comm.send(message)


@dataclass
class Anchor:
    """The cell a run's cells go below (the ``%%rlm`` or ``%rlm continue``
    cell): its id, its execute request's msg_id, its own execution count and
    what its output shows now (a callable, from the cell's display sink)."""

    cell_id: str | None
    parent_msg_id: str | None = None
    execution_count: int | None = None
    outputs: Callable[[], list[dict[str, Any]]] | None = None


class LiveSink(Sink):
    def __init__(self, channel: LiveChannel, thread: CallerThread, anchor: Anchor,
                 page_cells: list[dict[str, Any]] | None = None) -> None:
        self.channel = channel
        self.thread = thread
        self.anchor = anchor.cell_id
        self.parent_msg_id = anchor.parent_msg_id
        self._anchor = anchor
        self._page_cells = _shown_cells(page_cells or [], anchor.cell_id)
        self.last_cell_id = anchor.cell_id
        self.run: RunView | None = None
        self.started: set[str] = set()  # msg_ids of the cell_started ops queued so far
        self.last_status: dict[str, Any] | None = None
        self.reason: str | None = None  # how the run ended, once it has
        self.ended_at: float | None = None  # when (time.time())
        self.drafts: dict[str, str] = {}  # the page's draft cells of a streaming reply: id -> source sent
        self._outbox: list[dict[str, Any]] = []
        self._outbox_lock = threading.Lock()

    def _send(self, op: str, **fields: Any) -> None:
        """Queue an op (any thread). The first op of a batch arranges its flush
        on the code thread; the executor flushes before each cell it runs."""
        message = {"protocol": PROTOCOL, "op": op, **fields}
        with self._outbox_lock:
            first = not self._outbox
            if op == "status":
                self._outbox = [m for m in self._outbox if m["op"] != "status"]
            self._outbox.append(message)
        if op == "run_ended":
            self.thread.post(self.flush)
        elif first:
            from ..engine.execution.engine_loop import engine_loop

            loop = engine_loop()
            loop.call_soon_threadsafe(loop.call_later, BATCH_WINDOW_S, self._flush_later)

    def _flush_later(self) -> None:
        if self._outbox:  # else a cell start or the run's end has sent it already
            self.thread.post(self.flush)

    def flush(self) -> None:
        """Send the queued ops as one message (main thread)."""
        with self.channel.lock:
            with self._outbox_lock:
                ops, self._outbox = self._outbox, []
            if len(ops) > 1 and self.channel.batches:
                self.channel.publish({"protocol": PROTOCOL, "op": "ops", "ops": ops})
                return
            for message in ops:
                self.channel.publish(message)

    def run_started(self, run: RunView) -> None:
        if run.depth:
            return
        self.run = run
        self.channel.active = self
        self._send("run_started", run_id=run.run_id, anchor_cell_id=self.anchor, parent_msg_id=self.parent_msg_id,
                   query=run.query, max_iterations=run.max_iterations, depth=run.depth,
                   follows=run.follows)

    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        if run.depth or cell.metadata.get("rlm", {}).get("role") in _HIDDEN_ROLES:
            return
        after_id, self.last_cell_id = self.last_cell_id, cell.id
        self.drafts.pop(cell.id, None)  # a draft becomes its cell: the page updates it in place
        self._send("insert_cell", run_id=run.run_id, after_cell_id=after_id, cell=_cell_json(cell, outputs=False))

    def cell_updated(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth:
            return
        index = next((i for i, c in enumerate(run.cells) if c.id == cell.id), 0)
        after = run.cells[index - 1].id if index > 0 else self.anchor
        self._send("insert_cell", run_id=run.run_id, after_cell_id=after, cell=_cell_json(cell, outputs=False))

    def reply_progress(self, run: RunView, progress: ReplyProgress) -> None:
        """Draft cells of a streaming reply: inserted, written into, taken back."""
        if run.depth:
            return
        gone = [cell_id for cell_id in progress.dropped if self.drafts.pop(cell_id, None) is not None]
        if gone:
            self._send("remove_cells", run_id=run.run_id, cell_ids=gone)
        after = self.last_cell_id
        for draft in progress.drafts:
            sent = self.drafts.get(draft.id)
            if sent is None:
                cell = {"id": draft.id, "cell_type": "markdown" if draft.kind == "thought" else "code",
                        "source": draft.source,
                        "metadata": {"rlm": {"run_id": run.run_id, "step": progress.step, "role": draft.kind,
                                             "draft": True}}}
                self._send("insert_cell", run_id=run.run_id, after_cell_id=after, cell=cell)
            elif sent != draft.source:
                self._send("cell_text", run_id=run.run_id, cell_id=draft.id, source=draft.source)
            self.drafts[draft.id] = draft.source
            after = draft.id

    def cell_started(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth:
            return
        msg_id = step_msg_id(cell.id)
        self.started.add(msg_id)
        self._send("cell_started", run_id=run.run_id, cell_id=cell.id, msg_id=msg_id)

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        if run.depth:
            return
        meta = cell.metadata.get("rlm", {})
        status = meta.get("status", "ok")
        # A cell that did not run has no iopub outputs: its note comes with the op.
        outputs = {"outputs": plain(cell.get("outputs", []))} if status == "skipped" else {}
        self._send("cell_finished", run_id=run.run_id, cell_id=cell.id, execution_count=cell.get("execution_count"),
                   status=status, metadata=plain(meta), **outputs)

    def subcalls_settled(self, run: RunView, cell: NotebookNode) -> None:
        """A finished cell's background sub-calls are over: its metadata again."""
        if run.depth:
            return
        self._send("cell_finished", run_id=run.run_id, cell_id=cell.id, execution_count=cell.get("execution_count"),
                   status=cell.metadata.get("rlm", {}).get("status", "ok"), metadata=plain(cell.metadata.get("rlm", {})))

    def status(self, run: RunView, status: dict[str, Any]) -> None:
        if run.depth:
            return
        self.last_status = status
        self._send("status", **status)

    def run_ended(self, run: RunView, result: RunResult) -> None:
        if run.depth:
            return
        answer_cell = run.cells[-1].id if run.cells else None
        self.reason, self.ended_at = result.reason, time.time()
        self._send("run_ended", run_id=run.run_id, reason=result.reason, answer_cell_id=answer_cell)

        def detach() -> None:
            if self.channel.active is self:
                self.channel.active = None
            self.channel.keep_ended(self)

        self.thread.post(detach)

    def resync(self, light: bool = False) -> None:
        """A page (re)connected during the run: send what it may have lost by
        a reload (runs on the main thread, where comm messages are handled):
        every cell of the run so far; the anchor cell's own output and count,
        with the msg_id its later outputs come under; and the page's other
        code cells as they were when the run started (nothing else runs while
        it goes on), so the outputs of cells run before it come back too.
        ``light``: the server writes the shared document, the page only
        needs the run and its status."""
        run = self.run
        if run is None:
            return
        cells = [] if light else self.cells()
        self.drafts.clear()  # the reloaded page has none: the next progress inserts them again
        ours = {c["id"] for c in cells}
        anchor = self._anchor
        shown = anchor.outputs() if anchor.outputs is not None and not light else None
        self.channel.send("resync", run_id=run.run_id, anchor_cell_id=self.anchor, cells=cells,
                          parent_msg_id=self.parent_msg_id,
                          anchor=None if light else {"execution_count": anchor.execution_count, "outputs": shown},
                          page_cells=[c for c in self._page_cells if c["id"] not in ours], status=self.last_status,
                          **({"ended": True, "reason": self.reason} if self.reason is not None else {}))

    def cells(self) -> list[dict[str, Any]]:
        """The run's cells the page shows, as nbformat JSON with their outputs."""
        run = self.run
        return [_cell_json(c, outputs=True) for c in (run.cells if run is not None else [])
                if c.metadata.get("rlm", {}).get("role") not in _HIDDEN_ROLES]

    def catch_up(self, page: list[dict[str, Any]]) -> dict[str, Any] | None:
        """This run ended; a page that said hello since lacks some of its
        cells (it was closed mid-run, or opened after): the ``resync``
        fields that bring them in (the page adds those it lacks, and the
        anchor's final output and count), else None. A page whose notebook
        has no anchor cell of this run is not its notebook."""
        run = self.run
        have = {c.get("id"): c for c in page}
        anchor = have.get(self.anchor)
        if run is None or anchor is None:
            return None
        cells = self.cells()
        unfinished = [c for c in cells if c["id"] not in have or (
            c["cell_type"] == "code" and have[c["id"]].get("execution_count") is None
            and c.get("execution_count") is not None)]
        if not unfinished and anchor.get("execution_count") is not None:
            return None
        shown = self._anchor.outputs() if self._anchor.outputs is not None else []
        ours = {c["id"] for c in cells}
        return {"run_id": run.run_id, "anchor_cell_id": self.anchor, "cells": cells,
                "anchor": {"execution_count": self._anchor.execution_count, "outputs": shown},
                "page_cells": [c for c in self._page_cells if c["id"] not in ours],
                "ended": True, "source": "kernel", "reason": self.reason, "status": self.last_status}


def _shown_cells(cells: list[dict[str, Any]], anchor: str | None) -> list[dict[str, Any]]:
    """The code cells of the page's notebook that show a run's result (an
    execution count or outputs), but the anchor: what a reload would lose."""
    shown = []
    for cell in cells:
        if cell.get("cell_type") != "code" or not cell.get("id") or cell.get("id") == anchor:
            continue
        if cell.get("execution_count") is None and not cell.get("outputs"):
            continue
        source = cell.get("source", "")
        shown.append({"id": cell["id"], "source": "".join(source) if isinstance(source, list) else source,
                      "execution_count": cell.get("execution_count"), "outputs": cell.get("outputs") or []})
    return shown


def _cell_json(cell: NotebookNode, outputs: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"id": cell.id, "cell_type": cell.cell_type, "source": cell.source,
                            "metadata": plain(cell.metadata)}
    if cell.cell_type == "code":
        data["execution_count"] = cell.get("execution_count")
        data["outputs"] = plain(cell.get("outputs", [])) if outputs else []
    return data
