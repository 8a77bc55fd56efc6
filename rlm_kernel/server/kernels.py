"""The kernel end of the live protocol, held by the Jupyter server: one tap
per RLM kernel the server runs, reading everything the kernel publishes
(its own iopub connection, as a page's websocket has one) and speaking to it
on a shell connection of its own (``hello`` with ``role: "writer"``, the
``cells`` answers). Its ``NotebookWriter`` writes the runs into the
notebook's shared document; pages then only show them.

Taps exist only while real-time collaboration is on: without it each page
has a copy of its own, and each page writes its copy (docs/live-protocol.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ..live_protocol import COMM_TARGET, PROTOCOL
from .documents import SharedNotebooks
from .writer import ORIGIN, NotebookWriter

SCAN_EVERY_MS = 500  # how often the server's kernels are looked at (a new kernel, one gone)
HELLO_AGAIN_S = 1.0  # the least time between two hellos to one kernel


class KernelWatch:
    """Follows the server's kernels: a tap for each RLM kernel while
    collaboration is on."""

    def __init__(self, serverapp: Any) -> None:
        self.serverapp = serverapp
        self.notebooks = SharedNotebooks(serverapp)
        self.taps: dict[str, KernelTap] = {}
        self._timer: Any = None

    def start(self) -> None:
        from tornado.ioloop import PeriodicCallback

        self._timer = PeriodicCallback(self.scan, SCAN_EVERY_MS)
        self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        for tap in self.taps.values():
            tap.close()
        self.taps.clear()

    def scan(self) -> None:
        kernels = self.serverapp.kernel_manager
        running = set(kernels.list_kernel_ids())
        for kernel_id in set(self.taps) - running:
            self.taps.pop(kernel_id).close()
        if self.notebooks.collaboration() is None:
            return
        for kernel_id in running - set(self.taps):
            manager = kernels.get_kernel(kernel_id)
            if str(getattr(manager, "kernel_name", "")).startswith("rlm"):
                self.taps[kernel_id] = KernelTap(self, kernel_id, manager)


class KernelTap:
    """One RLM kernel, read and written to by the server."""

    def __init__(self, watch: KernelWatch, kernel_id: str, manager: Any) -> None:
        self.watch = watch
        self.kernel_id = kernel_id
        self.log = watch.serverapp.log
        self.session = manager.session
        self.client_id = f"server-{uuid.uuid4().hex[:12]}"
        self.writer = NotebookWriter()
        self.path: str | None = None
        self.queue: list[tuple[Any, ...]] = []
        self.wakeup = asyncio.Event()
        self.closed = False
        self.said_hello_at = 0.0
        self.iopub = manager.connect_iopub()
        self.iopub.on_recv(self._on_iopub)
        self.shell = manager.connect_shell()
        self.shell.on_recv(lambda frames: None)  # comm messages get no reply worth reading
        self.task = asyncio.ensure_future(self._serve())
        self.hello()

    def close(self) -> None:
        self.closed = True
        self.wakeup.set()
        for stream in (self.iopub, self.shell):
            if not stream.closed():
                stream.close()

    # -- to the kernel ------------------------------------------------------------
    def send(self, data: dict[str, Any]) -> None:
        """An op to the kernel, as a page sends one: the data of a comm opened and closed at once."""
        comm_id = uuid.uuid4().hex
        self.session.send(self.shell, "comm_open",
                          {"comm_id": comm_id, "target_name": COMM_TARGET, "data": {"protocol": PROTOCOL, **data}})
        self.session.send(self.shell, "comm_close", {"comm_id": comm_id, "data": {}})

    def hello(self) -> None:
        self.said_hello_at = time.monotonic()
        self.send({"op": "hello", "role": "writer", "client_id": self.client_id,
                   "notebook_path": self.path or "", "features": ["ops"]})

    # -- from the kernel ----------------------------------------------------------
    def _on_iopub(self, frames: list[Any]) -> None:
        try:
            _, frames = self.session.feed_identities(frames)
            msg = self.session.deserialize(frames)
        except Exception:  # noqa: BLE001 - not ours to judge; the pages' connections report it
            return
        msg_type = msg["header"]["msg_type"]
        content = msg.get("content") or {}
        parent = (msg.get("parent_header") or {}).get("msg_id") or ""
        if msg_type in ("comm_open", "comm_msg"):
            data = content.get("data") or {}
            if data.get("protocol") != PROTOCOL:
                return
            if data.get("op") == "writer":
                if data.get("writer") != "server" and time.monotonic() - self.said_hello_at > HELLO_AGAIN_S:
                    # A page said hello to a kernel that does not know this writer: it restarted.
                    self.queue.append(("reset",))
                    self.hello()
                return
            self.queue.append(("op", data))
        elif parent.startswith("rlm-") or (msg_type == "status" and content.get("execution_state") == "idle"):
            self.queue.append(("msg", msg_type, parent, content))
        else:
            return
        self.wakeup.set()

    async def _serve(self) -> None:
        """Apply what came, in order, one transaction per batch (a page gets
        one update for it)."""
        while not self.closed:
            await self.wakeup.wait()
            self.wakeup.clear()
            items, self.queue = self.queue, []
            if not items or self.closed:
                continue
            try:
                await self._apply(items)
            except Exception:  # noqa: BLE001 - one bad batch must not end the tap
                self.log.exception("rlm-kernel: could not write a run's ops into the notebook")

    async def _apply(self, items: list[tuple[Any, ...]]) -> None:
        if self.path is None or any(i[0] == "op" and i[1].get("op") == "run_started" for i in items):
            self.path = await self._notebook_path() or self.path
        notebook = await self.watch.notebooks.notebook(self.path) if self.path else None
        if notebook is None:
            return
        answers = []
        with notebook.ydoc.transaction(origin=ORIGIN):
            for item in items:
                if item[0] == "reset":
                    self.writer = NotebookWriter()
                elif item[0] == "op":
                    answer = self.writer.apply(notebook, item[1])
                    if answer is not None:
                        answers.append(answer)
                elif self.writer.concerns(item[1], item[2]):
                    self.writer.route(notebook, item[1], item[2], item[3])
        for answer in answers:
            self.send(answer)
        if self.writer.live_cells or self.writer.anchors:
            self.watch.notebooks.keep(self.path)

    async def _notebook_path(self) -> str | None:
        sessions = await self.watch.serverapp.session_manager.list_sessions()
        for session in sessions:
            if (session.get("kernel") or {}).get("id") == self.kernel_id and session.get("type") == "notebook":
                return session.get("path")
        return None


__all__ = ["KernelTap", "KernelWatch"]
