"""The live notebook: the kernel's end of the comm with the labextension.

The extension inserts the cells this sink announces and routes the iopub
messages of each generated cell into it (see docs/live-protocol.md). Every
op is sent from the kernel's main thread (posted through the run's code
thread), so ops and the cells' own outputs reach the frontend in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Sink

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.dispatch import CallerThread
    from ..engine.loop import Run, RunResult

PROTOCOL = "rlm/1"
_HIDDEN_ROLES = ("context", "query")


class LiveChannel:
    """Registers the ``rlm`` comm target and remembers whether a frontend
    with the extension said hello."""

    def __init__(self) -> None:
        from comm import get_comm_manager

        self.attached = False
        self.notebook_path: str | None = None
        self.comm: Any = None
        self.active: LiveSink | None = None
        get_comm_manager().register_target("rlm", self._on_open)

    def _on_open(self, comm: Any, msg: dict[str, Any]) -> None:
        comm.on_msg(lambda m: self._handle(m["content"].get("data") or {}))
        self._handle(msg["content"].get("data") or {})

    def _handle(self, data: dict[str, Any]) -> None:
        if data.get("protocol") != PROTOCOL:
            return
        if data.get("op") == "hello":
            self.attached = True
            self.notebook_path = data.get("notebook_path") or self.notebook_path
            if self.active is not None:
                self.active.resync()

    def send(self, op: str, **fields: Any) -> None:
        from comm import create_comm

        message = {"protocol": PROTOCOL, "op": op, **fields}
        if self.comm is None:
            self.comm = create_comm(target_name="rlm", data={"protocol": PROTOCOL, "op": "open"})
        self.comm.send(message)


class LiveSink(Sink):
    def __init__(self, channel: LiveChannel, thread: CallerThread, anchor_cell_id: str | None,
                 parent_msg_id: str | None) -> None:
        self.channel = channel
        self.thread = thread
        self.anchor = anchor_cell_id
        self.parent_msg_id = parent_msg_id
        self.last_cell_id = anchor_cell_id
        self.run: Run | None = None

    def _send(self, op: str, **fields: Any) -> None:
        self.thread.post(lambda: self.channel.send(op, **fields))

    def run_started(self, run: Run) -> None:
        if run.depth:
            return
        self.run = run
        self.channel.active = self
        self._send("run_started", run_id=run.run_id, anchor_cell_id=self.anchor, parent_msg_id=self.parent_msg_id,
                   query=run.query, max_iterations=run.tree.limits.max_iterations, depth=run.depth)

    def cell_added(self, run: Run, cell: NotebookNode, after: str | None) -> None:
        if run.depth or cell.metadata.get("rlm", {}).get("role") in _HIDDEN_ROLES:
            return
        after_id, self.last_cell_id = self.last_cell_id, cell.id
        self._send("insert_cell", run_id=run.run_id, after_cell_id=after_id, cell=_cell_json(cell, outputs=False))

    def cell_finished(self, run: Run, cell: NotebookNode) -> None:
        if run.depth:
            return
        meta = cell.metadata.get("rlm", {})
        self._send("cell_finished", run_id=run.run_id, cell_id=cell.id, execution_count=cell.get("execution_count"),
                   status=meta.get("status", "ok"), metadata=_plain(meta))

    def status(self, run: Run, status: dict[str, Any]) -> None:
        if run.depth:
            return
        self._send("status", **status)

    def run_ended(self, run: Run, result: RunResult) -> None:
        if run.depth:
            return
        answer_cell = run.cells[-1].id if run.cells else None
        self._send("run_ended", run_id=run.run_id, reason=result.reason, answer_cell_id=answer_cell)

        def detach() -> None:
            if self.channel.active is self:
                self.channel.active = None

        self.thread.post(detach)

    def resync(self) -> None:
        """A page (re)connected during the run: send every cell so far. Runs on
        the main thread (comm messages are handled there)."""
        run = self.run
        if run is None:
            return
        cells = [_cell_json(c, outputs=True) for c in run.cells
                 if c.metadata.get("rlm", {}).get("role") not in _HIDDEN_ROLES]
        self.channel.send("resync", run_id=run.run_id, anchor_cell_id=self.anchor, cells=cells)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _cell_json(cell: NotebookNode, outputs: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"id": cell.id, "cell_type": cell.cell_type, "source": cell.source,
                            "metadata": _plain(cell.metadata)}
    if cell.cell_type == "code":
        data["execution_count"] = cell.get("execution_count")
        data["outputs"] = _plain(cell.get("outputs", [])) if outputs else []
    return data
