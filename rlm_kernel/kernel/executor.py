"""Running generated cells in the kernel so their outputs stream into the
cells the labextension inserted: each cell runs under a synthetic parent
header whose msg_id names it, and announces that msg_id first."""

from __future__ import annotations

import sys
from typing import Any

from ..engine.execution import CellResult, ShellExecutor
from ..sinks.live import LiveChannel, step_msg_id


class KernelExecutor(ShellExecutor):
    def __init__(self, kernel: Any, channel: LiveChannel | None, run_id: str, **kwargs: Any) -> None:
        super().__init__(kernel.shell, passthrough=True, **kwargs)
        self.kernel = kernel
        self.channel = channel
        self.run_id = run_id

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        if self.channel is None:
            return super().execute(code, cell_id=cell_id, view_limit=view_limit)
        kernel = self.kernel
        parent = kernel.get_parent("shell") or {}
        ident = kernel._shell_parent_ident.get() if hasattr(kernel, "_shell_parent_ident") else b""
        msg_id = step_msg_id(cell_id)
        header = {**(parent.get("header") or {}), "msg_id": msg_id, "msg_type": "execute_request"}
        synthetic = {**parent, "header": header, "msg_id": msg_id,
                     "metadata": {**(parent.get("metadata") or {}), "cellId": cell_id}}
        count = self.shell.execution_count
        self.channel.cell_started(self.run_id, cell_id, msg_id)
        kernel.set_parent(ident, synthetic, "shell")
        try:
            kernel._publish_execute_input(code, synthetic, count)
            return super().execute(code, cell_id=cell_id, view_limit=view_limit)
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
