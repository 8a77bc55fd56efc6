"""The sandboxed RLM kernel ("RLM (Python 3, sandboxed)"): the kernel the
page talks to holds the engine; every cell, the person's and the agent's,
runs in one confined execution kernel behind it.

A person's cell is forwarded whole: its outputs, displays and widget comms
come back on this kernel's iopub under the cell's own request, its
``input()`` asks the page through this kernel's stdin, Interrupt interrupts
the confined kernel, and a restart of this kernel ends that one too (it
dies with its parent). A widget's messages from the page reach the confined
kernel through :class:`Comms`. ``%rlm`` / ``%%rlm`` cells run here, with a
sandboxed executor on the same confined kernel (``kernel/sandboxed.py``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

from .._deferred_grammar import defer_iri_grammar
from ..errors import RLMError
from ..kernel.ipkernel import RLMKernel, _rlm_cell_to_await, _rlm_continue_to_await
from ..remote.executor import SUBCALLS, RemoteExecutor
from . import launcher
from .outputs import ask_person, republish


def is_rlm_cell(code: str) -> bool:
    stripped = code.lstrip()
    return (_rlm_cell_to_await([code]) != [code] or _rlm_continue_to_await([code]) != [code]
            or stripped.startswith("%rlm ") or stripped == "%rlm")


def result_summary(result: Any) -> SimpleNamespace:
    """A run's result as the confined namespace gets it: plain values only."""
    from .inside import encode

    answer = encode(getattr(result, "answer", None))
    fields = {name: getattr(result, name, None) for name in
              ("reason", "iterations", "subcalls", "error", "answer_var", "notebook_path", "cost_usd")}
    return SimpleNamespace(answer=answer.get("json", answer.get("text")), **fields)


class ConfinedKernel(RemoteExecutor):
    """The kernel's one confined kernel; a person's cells run in it as they are."""

    passthrough = True

    def __init__(self, kernel: Any, spec: Any) -> None:
        super().__init__(spec)
        self.kernel = kernel
        self.parent: dict[str, Any] | None = None  # the request whose outputs are being forwarded
        self.comms: Comms | None = None

    def start(self) -> None:
        if self.client is None:
            super().start()
            self.comms = Comms(self)
            self.call("person_helpers", list(SUBCALLS))

    def helper(self, name: str) -> Any:
        """A person's cell called a sub-call helper: the RLM kernel's own
        helpers for a person's cells make it (widget, replay, pins, records)."""
        if name not in SUBCALLS:
            raise RLMError(f"{name} cannot be called from a person's cell.")
        return self.kernel.rlm_session.person_cells._helper(name)

    def run_person_cell(self, code: str, silent: bool, store_history: bool, expressions: dict[str, str],
                        allow_stdin: bool) -> dict[str, Any]:
        self.parent = self.kernel.get_parent("shell")
        cells = self.kernel.rlm_session.person_cells
        # the person's-cell helpers keep a scope per cell (its sub-calls recorded in
        # its metadata, replayed when it runs again), opened by the shell's events,
        # which a forwarded cell does not fire here
        metadata = (self.parent or {}).get("metadata") or {}
        if not silent:
            cells._pre_run_cell(SimpleNamespace(raw_cell=code, cell_id=metadata.get("cellId")))
            if store_history:  # numbered as the page numbers it (the confined kernel's tracebacks say In[n])
                self.call("number", self.kernel.shell.execution_count)
        saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # Interrupt reaches the wait below
        try:
            reply = self._run(code, silent=silent, expressions=expressions, capture=None,
                              store_history=store_history)
        finally:
            signal.signal(signal.SIGINT, saved)
            if not silent:
                cells._post_run_cell(None)
            self.parent = None
        return reply["content"]

    def forward(self, msg: dict[str, Any]) -> None:
        if self.parent is not None:
            republish(self.kernel, msg, self.parent, self.kernel.execution_count)

    def person_input(self, prompt: str, password: bool) -> str:
        return ask_person(self.kernel, prompt, password)


class Comms:
    """Widget comms between the page and the confined kernel, when no cell
    is running: the page's comm messages go in on a second client's shell
    channel (with their own header, so the replies name them), and what the
    confined kernel publishes in answer comes back out, read on a thread.

    A page header's ``subshell_id`` names a subshell of this kernel (JupyterLab
    gives each comm target one); it is left out of the header sent in. The
    confined kernel has no such subshell: it answers a message addressed to
    one with an error and drops it, and ipykernel 7.4 addresses a comm's next
    message to the subshell its last echo went out under, so every change
    after a widget's first was lost."""

    def __init__(self, confined: ConfinedKernel) -> None:
        self.confined = confined
        # a session of its own: manager.client() would share the first client's, whose
        # socket identity the confined kernel's router then sends every reply to
        self.client = confined.spec.second_client(confined.manager)
        self.sent: dict[str, dict[str, Any]] = {}  # msg_id -> header, of the messages forwarded in
        self._lock = threading.Lock()
        # the shell socket is used from the main thread and from the page's comm subshell's thread
        self._shell_lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._pump, name="rlm-sandbox-comms", daemon=True).start()

    def send_in(self, msg: dict[str, Any]) -> None:
        header = {k: v for k, v in msg["header"].items() if k != "subshell_id"}
        with self._lock:
            self.sent[header["msg_id"]] = header
            while len(self.sent) > 1000:
                self.sent.pop(next(iter(self.sent)))
        inner = self.client.session.msg(header["msg_type"], msg["content"], metadata=msg.get("metadata") or {})
        inner["header"] = header
        inner["msg_id"] = header["msg_id"]
        with self._shell_lock:
            self.client.shell_channel.send(inner)

    def comm_ids(self) -> dict[str, dict[str, str]]:
        with self._shell_lock:
            msg_id = self.client.comm_info()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._shell_lock:
                try:
                    reply = self.client.get_shell_msg(timeout=0.05)
                except Exception:  # noqa: BLE001 - queue.Empty: not yet
                    continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return dict(reply["content"].get("comms") or {})
        return {}  # a busy or gone confined kernel: no comms to add

    def _pump(self) -> None:
        kernel = self.confined.kernel
        while not self._stop.is_set():
            try:
                msg = self.client.get_iopub_msg(timeout=0.2)
            except Exception:  # noqa: BLE001 - queue.Empty, or channels closing
                continue
            parent = msg.get("parent_header") or {}
            with self._lock:
                ours = parent.get("msg_id") in self.sent
            if ours:
                republish(kernel, msg, parent)

    def close(self) -> None:
        self._stop.set()
        self.client.stop_channels()


class SandboxedRLMKernel(RLMKernel):
    implementation = "rlm_kernel_sandboxed"
    banner = ("RLM (Python 3, sandboxed): every cell runs in a confined execution kernel (bubblewrap: no network, "
              "read-only files but this folder, no secrets in its environment).")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from ..engine.runs.options import resolve

        self.rlm_sandbox = ConfinedKernel(self, self.confined_spec(resolve({})))
        for kind in ("comm_open", "comm_msg", "comm_close"):
            self.shell_handlers[kind] = self._comm_handler(kind, self.shell_handlers[kind])

    def confined_spec(self, options: Any) -> Any:
        """Where the kernel behind this one lives (the gateway's kernel overrides it)."""
        return launcher.SandboxSpec(folder=launcher.Path(os.getcwd()), memory_mb=options.sandbox_memory,
                                    cpu_seconds=options.sandbox_cpu)

    async def do_execute(self, code: str, silent: bool, store_history: bool = True,
                         user_expressions: dict[str, Any] | None = None, allow_stdin: bool = False,
                         **kwargs: Any) -> dict[str, Any]:
        if is_rlm_cell(code):
            reply = await super().do_execute(code, silent, store_history, user_expressions, allow_stdin, **kwargs)
            namespace, confined = self.shell.user_ns, self.rlm_sandbox
            if "context" in namespace:  # `%rlm context PATH` loaded it here: it belongs inside, read there again
                value, magics = namespace.pop("context"), self.shell.rlm_magics
                confined.context_encoding = magics.context_encoding
                confined.call("set", "context", confined.hand_over("context", value, magics.context_sources))
            if "rlm_result" in namespace:  # a run's result, for the person's cells: its figures as plain data
                confined.call("set", "rlm_result", confined.context_file(result_summary(namespace.pop("rlm_result"))))
            return reply
        shell = self.shell
        count = shell.execution_count
        self._allow_stdin = allow_stdin  # the confined code's input() asks the page through this kernel
        try:
            content = self.rlm_sandbox.run_person_cell(code, silent, store_history, user_expressions or {},
                                                       allow_stdin)
        except Exception as error:  # noqa: BLE001 - bwrap missing, the confined kernel gone: said in the cell
            message = f"{type(error).__name__}: {error}"
            self.session.send(self.iopub_socket, "stream", {"name": "stderr", "text": message + "\n"},
                              parent=self.get_parent("shell"), ident=self._topic("stream"))
            content = {"status": "error", "ename": type(error).__name__, "evalue": str(error), "traceback": []}
        if store_history and not silent:
            shell.execution_count = count + 1
        content = {k: v for k, v in content.items() if k != "execution_count"}
        content.setdefault("user_expressions", {})
        content.setdefault("payload", [])
        return {**content, "execution_count": count}

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        return self._ask_inside("complete", code, cursor_pos) or await super().do_complete(code, cursor_pos)

    async def do_inspect(self, code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()) -> Any:
        return self._ask_inside("inspect", code, cursor_pos, detail_level) or await super().do_inspect(
            code, cursor_pos, detail_level, omit_sections)

    def _ask_inside(self, what: str, *args: Any) -> dict[str, Any] | None:
        confined = self.rlm_sandbox
        if confined.client is None:
            return None
        msg_id = getattr(confined.client, what)(*args)
        try:
            while True:
                reply = confined.client.get_shell_msg(timeout=5)
                if reply["parent_header"].get("msg_id") == msg_id:
                    return reply["content"]
        except Exception:  # noqa: BLE001 - no answer in time: the outer kernel answers
            return None

    def _comm_handler(self, kind: str, handler: Any) -> Any:
        manager = self.comm_manager

        async def forward(stream: Any, ident: Any, msg: dict[str, Any]) -> Any:
            content = msg.get("content") or {}
            here = (content.get("target_name") in manager.targets if kind == "comm_open"
                    else manager.get_comm(content.get("comm_id")) is not None)
            comms = self.rlm_sandbox.comms
            if here or comms is None:
                result = handler(stream, ident, msg)
                if hasattr(result, "__await__"):
                    result = await result
                return result
            comms.send_in(msg)
            return None

        return forward

    async def comm_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        content = parent["content"]
        target = content.get("target_name")
        comms = self._comms_of(target)
        if self.rlm_sandbox.comms is not None:
            comms.update({k: v for k, v in self.rlm_sandbox.comms.comm_ids().items()
                          if target is None or v.get("target_name") == target})
        self.session.send(stream, "comm_info_reply", {"status": "ok", "comms": comms}, parent, ident)

    def do_shutdown(self, restart: bool) -> dict[str, Any]:
        if self.rlm_sandbox.comms is not None:
            self.rlm_sandbox.comms.close()
        self.rlm_sandbox.close()
        return super().do_shutdown(restart)


def main() -> None:
    from ipykernel.kernelapp import IPKernelApp

    defer_iri_grammar()
    IPKernelApp.launch_instance(kernel_class=SandboxedRLMKernel)


if __name__ == "__main__":
    main()
