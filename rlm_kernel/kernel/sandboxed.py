"""``%%rlm --sandbox`` (or ``--executor gateway``) in the RLM kernel: the
generated cells run in another kernel (a confined one, ``sandbox/``, or one a
Jupyter gateway started, ``gateway/``), and what they print, display or
raise is published again on this kernel's iopub under the cell's synthetic
parent header, so the page shows it live in the cell as for a local step.
Sub-call views are this kernel's own widgets (the sub-calls run here)."""

from __future__ import annotations

from typing import Any

from ..engine.execution.executors import CellResult, install_shell_hooks
from ..remote.executor import RemoteExecutor
from ..sandbox.outputs import ask_person, republish
from ..sinks.live import LiveChannel
from .executor import step_parent


class KernelRemoteExecutor(RemoteExecutor):
    passthrough = True

    def __init__(self, kernel: Any, channel: LiveChannel | None, run_id: str, spec: Any,
                 shared: RemoteExecutor | None = None, **kwargs: Any) -> None:
        super().__init__(shared.spec if shared is not None else spec, **kwargs)
        self.shared = shared
        if shared is not None:  # the kernel's one kernel behind it, where the person's cells run too
            self.start()
            self.jobs = shared.jobs  # a handle a run's cell made still answers in a person's cell
            self.context_inside = True
        self.kernel = kernel
        self.channel = channel
        self.run_id = run_id
        self._synthetic: dict[str, Any] | None = None
        self._count = 0
        install_shell_hooks(kernel.shell)  # the sub-call views, displayed here, also go into the cell's capture

    def start(self) -> None:
        if self.shared is None:
            return super().start()
        self.shared.start()  # a new one after a death, which the person's cells then share too
        self.manager, self.client, self.limits = self.shared.manager, self.shared.client, self.shared.limits
        return None

    def forget_kernel(self) -> None:
        super().forget_kernel()
        if self.shared is not None:
            self.shared.forget_kernel()

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        kernel, channel = self.kernel, self.channel
        announce = None if channel is None else lambda msg_id: channel.cell_started(self.run_id, cell_id, msg_id)
        self._count = count = kernel.shell.execution_count  # the page numbers cells by this kernel's count, as for any step
        try:
            with step_parent(kernel, cell_id, code, count, announce) as synthetic:
                self._synthetic = synthetic
                result = super().execute(code, cell_id=cell_id, view_limit=view_limit)
                result.execution_count = count
                return result
        finally:
            kernel.shell.execution_count = count + 1
            self._synthetic = None

    def cell_number(self) -> int | None:
        return self._count

    def close(self) -> None:
        if self.shared is None:
            super().close()

    def forward(self, msg: dict[str, Any]) -> None:
        if self._synthetic is not None:
            republish(self.kernel, msg, self._synthetic, self._count)

    def person_input(self, prompt: str, password: bool) -> str:
        return ask_person(self.kernel, prompt, password)


__all__ = ["KernelRemoteExecutor"]
