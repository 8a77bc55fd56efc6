"""Running generated cells in the kernel so their outputs stream into the
cells the labextension inserted: each cell runs under a synthetic parent
header whose msg_id names it, and announces that msg_id first."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..engine.execution.executors import CellResult, ShellExecutor
from ..live_protocol import anchor_msg_id, step_msg_id
from ..sinks.live import LiveChannel


@contextmanager
def step_parent(kernel: Any, cell_id: str, code: str, count: int | None, announce: Any = None) -> Iterator[dict[str, Any]]:
    """Run a step's cell under a synthetic parent header whose msg_id names
    it (``step_msg_id``): ``announce(msg_id)`` first (the page learns which
    cell the msg_id is), then its ``execute_input``; afterwards the streams
    flushed under it and the shell's own parent back. Yields the parent."""
    parent = kernel.get_parent("shell") or {}
    ident = kernel._shell_parent_ident.get() if hasattr(kernel, "_shell_parent_ident") else b""
    msg_id = step_msg_id(cell_id)
    header = {**(parent.get("header") or {}), "msg_id": msg_id, "msg_type": "execute_request"}
    synthetic = {**parent, "header": header, "msg_id": msg_id,
                 "metadata": {**(parent.get("metadata") or {}), "cellId": cell_id}}
    if announce is not None:
        announce(msg_id)
    kernel.set_parent(ident, synthetic, "shell")
    try:
        kernel._publish_execute_input(code, synthetic, count)
        yield synthetic
    finally:
        for stream in (sys.stdout, sys.stderr):
            # flush() waits for a round trip through ipykernel's IO thread;
            # a stream with nothing written since its last flush (ipykernel's
            # OutStream says so) has nothing to put before the next ops.
            if not getattr(stream, "_flush_pending", True):
                continue
            try:
                stream.flush()
            except Exception:
                pass
        kernel.set_parent(ident, parent, "shell")


@contextmanager
def anchor_parent(kernel: Any, cell_id: str, count: int, channel: LiveChannel) -> Iterator[None]:
    """Run a ``%%rlm`` cell under a synthetic parent (``anchor_msg_id``),
    announced first with ``anchor_started`` (its request's msg_id and its own
    count: the server's writer sets that count when the request ends). Its
    steps' parents are made from this one; the request's own parent is back
    before ipykernel publishes its reply and its 'idle'."""
    parent = kernel.get_parent("shell") or {}
    ident = kernel._shell_parent_ident.get() if hasattr(kernel, "_shell_parent_ident") else b""
    msg_id = anchor_msg_id(cell_id)
    synthetic = {**parent, "header": {**(parent.get("header") or {}), "msg_id": msg_id}, "msg_id": msg_id}
    channel.send("anchor_started", cell_id=cell_id, msg_id=msg_id,
                 request_msg_id=(parent.get("header") or {}).get("msg_id"), execution_count=count)
    kernel.set_parent(ident, synthetic, "shell")
    try:
        yield
    finally:
        kernel.set_parent(ident, parent, "shell")


class KernelExecutor(ShellExecutor):
    def __init__(self, kernel: Any, channel: LiveChannel | None, run_id: str, **kwargs: Any) -> None:
        super().__init__(kernel.shell, passthrough=True, **kwargs)
        self.kernel = kernel
        self.channel = channel
        self.run_id = run_id

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        if self.channel is None:
            return super().execute(code, cell_id=cell_id, view_limit=view_limit)
        channel = self.channel
        with step_parent(self.kernel, cell_id, code, self.shell.execution_count,
                         lambda msg_id: channel.cell_started(self.run_id, cell_id, msg_id)):
            return super().execute(code, cell_id=cell_id, view_limit=view_limit)
