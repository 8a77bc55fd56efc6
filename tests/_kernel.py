"""Driving a real kernel with jupyter_client, for the tests that start one:
:class:`Kernel` runs cells and collects their iopub messages, :class:`Frontend`
also speaks the labextension's side of the ``rlm`` comm (``docs/live-protocol.md``)."""

from __future__ import annotations

import queue
import time
import uuid
from pathlib import Path
from typing import IO, Any

from _helpers import clean_env
from jupyter_client.manager import start_new_kernel

TIMEOUT = 90  # kernel start, plain cells
PROTOCOL = "rlm/1"
# litellm takes seconds to import: a test does it before anything it times
IMPORT_LITELLM = "from rlm_kernel.engine.model.litellm_setup import load_litellm as _m; _m(); del _m"


class Kernel:
    """An installed kernelspec (``rlm`` or ``python3``) started in ``cwd``
    with ``env`` (default: :func:`_helpers.clean_env`); with ``log``, the
    kernel process's stdout and stderr go to that file. ``messages`` keeps
    every iopub message its cells published, for tests that scan them all."""

    def __init__(self, name: str, cwd: Path, *, env: dict[str, str] | None = None, log: Path | None = None,
                 start_timeout: float = TIMEOUT) -> None:
        self.cwd = cwd
        self.name = name
        self.messages: list[dict] = []
        self._log: IO[str] | None = open(log, "w") if log else None  # noqa: SIM115 - closed in shutdown
        streams = {"stdout": self._log, "stderr": self._log} if self._log else {}
        self.km, self.kc = start_new_kernel(kernel_name=name, cwd=str(cwd), env=clean_env() if env is None else env,
                                            startup_timeout=start_timeout, **streams)

    def import_litellm(self) -> None:
        reply, _ = self.execute(IMPORT_LITELLM)
        assert reply["status"] == "ok", reply

    def execute(self, code: str, timeout: float = TIMEOUT, **kwargs: Any) -> tuple[dict, list[dict]]:
        """Run code; return its execute_reply content and every iopub message
        published until the kernel went idle for it (whatever their parent).
        A cell that does not finish in ``timeout`` seconds fails the test; the
        kernel is interrupted (or restarted) so that later tests can go on."""
        msg_id = self.kc.execute(code, **kwargs)
        messages: list[dict] = []
        try:
            self._until_idle(msg_id, messages, timeout)
        except queue.Empty:
            self._recover(msg_id)
            raise AssertionError(
                f"the kernel did not finish the cell within {timeout:g} s (it hung; "
                f"{len(messages)} iopub messages, last: {[m['msg_type'] for m in messages[-3:]]}):\n{code}"
            ) from None
        finally:
            self.messages.extend(messages)
        return self._reply(msg_id, timeout), messages

    def _reply(self, msg_id: str, timeout: float) -> dict:
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]

    def _until_idle(self, msg_id: str, messages: list[dict], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            messages.append(msg)
            self._seen(msg)
            if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"):
                return

    def _seen(self, msg: dict) -> None:
        """Each iopub message as it comes (Frontend collects the ops)."""

    def _recover(self, msg_id: str) -> None:
        self.km.interrupt_kernel()
        try:
            self._until_idle(msg_id, [], 20)
        except queue.Empty:
            self.km.restart_kernel(now=True)
            self.kc.wait_for_ready(timeout=TIMEOUT)
            self.execute("%load_ext rlm_kernel" if self.name == "python3" else "pass")

    def interrupt(self, msg_id: str, within: float) -> float:
        """Interrupt the kernel while it runs ``msg_id``; return how many
        seconds it took to finish that cell (failing after ``within``)."""
        started = time.monotonic()
        self.km.interrupt_kernel()
        try:
            self._until_idle(msg_id, [], within)
        except queue.Empty:
            self._recover(msg_id)
            raise AssertionError(f"Interrupt did not stop the run within {within:g} s") from None
        return time.monotonic() - started

    def value(self, expression: str) -> Any:
        """The repr (text/plain) of ``expression`` in the kernel's namespace."""
        reply, _ = self.execute("", user_expressions={"v": expression})
        result = reply["user_expressions"]["v"]
        assert result["status"] == "ok", result
        return result["data"]["text/plain"]

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        if self._log is not None:
            self._log.close()


class Frontend(Kernel):
    """An ``rlm`` kernel client that also speaks the labextension's side of
    the comm: ``hello``, ops to the kernel, cells run as JupyterLab runs them
    (the request names its cell); ``ops`` keeps every op the kernel sent."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None, name: str = "rlm") -> None:
        super().__init__(name, cwd, env=env)
        self.comm_id = uuid.uuid4().hex
        self.ops: list[dict[str, Any]] = []
        self.cells: list[dict[str, Any]] = []

    def _seen(self, msg: dict) -> None:
        if msg["msg_type"] in ("comm_open", "comm_msg"):
            data = msg["content"].get("data") or {}
            if data.get("protocol") == PROTOCOL:
                self.ops.append(data)

    def hello(self, cells: list[dict[str, Any]] | None = None, features: list[str] | None = None) -> None:
        """Open a comm (a new one each time, as a page does on every connect) with a ``hello``."""
        self.comm_id = uuid.uuid4().hex
        data: dict[str, Any] = {"protocol": PROTOCOL, "op": "hello", "notebook_path": "t.ipynb", "client_id": "test"}
        if cells is not None:
            data["cells"] = cells
        if features is not None:
            data["features"] = features
        msg = self.kc.session.msg("comm_open", {"comm_id": self.comm_id, "target_name": "rlm", "data": data})
        self.kc.shell_channel.send(msg)
        self.execute("pass")  # the comm_open is handled before this

    def send_op(self, op: str, **fields: Any) -> None:
        msg = self.kc.session.msg("comm_msg", {"comm_id": self.comm_id,
                                               "data": {"protocol": PROTOCOL, "op": op, **fields}})
        self.kc.shell_channel.send(msg)

    def send_cell(self, code: str, cell_id: str, allow_stdin: bool = False) -> str:
        """Send an execute_request that names its cell, as JupyterLab does; its msg_id."""
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": allow_stdin, "stop_on_error": True}
        msg = self.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def run_cell(self, code: str, cell_id: str, timeout: float = TIMEOUT, on_op: Any = None,
                 allow_stdin: bool = False) -> tuple[dict, list[dict]]:
        """Run a cell as JupyterLab does, collecting our ops (each also to ``on_op``)."""
        msg_id = self.send_cell(code, cell_id, allow_stdin)
        messages: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                iopub = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"cell {cell_id} did not finish in {timeout} s") from None
            messages.append(iopub)
            count = len(self.ops)
            self._seen(iopub)
            if on_op is not None and len(self.ops) > count:
                on_op(self.ops[-1])
            if (iopub["parent_header"].get("msg_id") == msg_id and iopub["msg_type"] == "status"
                    and iopub["content"]["execution_state"] == "idle"):
                break
        self.messages.extend(messages)
        return self._reply(msg_id, timeout), messages

    def ops_named(self, name: str) -> list[dict[str, Any]]:
        return [o for o in self.ops if o.get("op") == name]


def texts(messages: list[dict], *types: str) -> str:
    """All text in iopub messages of the given types."""
    out = []
    for msg in messages:
        if msg["msg_type"] not in types:
            continue
        content = msg["content"]
        if msg["msg_type"] == "stream":
            out.append(content["text"])
        elif msg["msg_type"] == "error":
            out.append(f"{content['ename']}: {content['evalue']}")
        else:
            data = content.get("data", {})
            out.append(str(data.get("text/markdown", "")) + "\n" + str(data.get("text/plain", "")))
    return "\n".join(out)
