"""``SandboxExecutor``: the engine's executor for a confined execution kernel.

Each generated cell is one ``execute_request``; its iopub messages become
the cell's capture (and, through :meth:`SandboxExecutor.forward`, the outer
kernel's own iopub). A sub-call the code makes arrives as an
``input_request`` (``inside.MARK``) and runs here, on the code thread, with
the run's budgets, keys and sinks, exactly as an unconfined helper call.
The run's entries live inside (``entries.py``); only JSON comes out.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from ..engine.execution.capture import CellCapture, capturing
from ..engine.execution.executors import CellResult, Executor
from ..engine.execution.namespace import Entries, Installs
from ..engine.subcalls.background import Job
from ..errors import RLMError
from . import launcher
from .calls import JOB, Jobs, native
from .context_files import Inbox, fingerprint
from .entries import AFTER, SUBCALLS, SandboxEntries, SandboxNamespace
from .inside import EOF, MARK

DEATH_CHECK_S = 0.5  # how often a request with nothing to read asks whether the confined kernel still lives


class SandboxExecutor(Executor):
    passthrough = False

    def __init__(self, spec: launcher.SandboxSpec, *, max_stored_chars: int = 200_000) -> None:
        self.spec = spec
        self.max_stored_chars = max_stored_chars
        launcher.check_available()  # a missing bwrap is said before any model call
        self.manager: Any = None
        self.client: Any = None
        self.start_s: float | None = None
        self.namespace = SandboxNamespace(self)  # type: ignore[assignment]
        self.jobs = Jobs()  # background jobs started from inside
        self.entries: SandboxEntries | None = None
        self.context_inside = False  # True: the run's `context` is the confined namespace's own
        self._inside_next: int | None = None  # the confined kernel's next execution count, when set from here
        self.restored_last = False  # the last thing the confined kernel did was the entries' restore
        self.announced: list[str] | None = None  # restored before the next cell, as the last cell's report said
        self._files = 0
        self.inbox = Inbox(spec.inbox, launcher.hidden_roots(), [str(spec.folder.resolve()), str(spec.state.resolve())])
        self.context_encoding = "utf-8"  # what the files a context came from are read with
        self.limits = launcher.CPULimit(None, spec.cpu_seconds)

    def start(self) -> None:
        """Start the confined kernel (on the code thread, which alone talks to it)."""
        if self.client is None:
            started = time.monotonic()
            self.manager, self.client = launcher.start_kernel(self.spec)
            self.limits = launcher.CPULimit(self.manager, self.spec.cpu_seconds)
            self.silent("import rlm_kernel.sandbox.inside as _rlm_inside\n_rlm_inside.install(get_ipython())\n"
                        "del _rlm_inside")
            self.start_s = time.monotonic() - started

    def child_executor(self) -> Executor:
        spec = launcher.SandboxSpec(folder=self.spec.folder, memory_mb=self.spec.memory_mb,
                                    cpu_seconds=self.spec.cpu_seconds)
        return SandboxExecutor(spec, max_stored_chars=self.max_stored_chars)  # a kernel of its own, never shown live

    def make_entries(self, installs: Installs) -> Entries:
        self.entries = SandboxEntries(installs, self)
        return self.entries

    def close(self) -> None:
        if self.client is not None:
            launcher.stop_kernel(self.manager, self.client, self.spec)
            self.client = self.manager = None
        else:
            launcher.shutil.rmtree(self.spec.state, ignore_errors=True)

    def bind_context_files(self, sources: list[str] | None) -> None:
        """Before the start: the files a run's context came from, bound read-only at their own paths."""
        if self.client is None:
            for source in sources or []:
                try:
                    self.inbox.inside_path(source, can_bind=self.spec.bound)
                except OSError:
                    pass  # not a file: nothing to bind (the value is handed in through a file)

    def hand_over(self, name: str, value: Any, sources: list[str] | None) -> str | None:
        """Have the inside hold ``value`` as ``name``: read there from the
        files it was loaded from (None: it did, ``set`` and the setup take it
        from there) or, for a value made in code or files that no longer hold
        it, passed through a file (its path). See ``context_files``."""
        expected = fingerprint(value) if sources else None
        if expected is not None:
            bind = None if self.client is not None else self.spec.bound  # before the start: bound at launch
            try:
                paths = [self.inbox.inside_path(source, can_bind=bind) for source in sources or []]
            except OSError:
                paths = []
            if paths and self.call("read", name, paths, self.context_encoding, expected) is None:
                return None
        return self.context_file(value)

    def context_file(self, value: Any) -> str:
        """``value`` for the inside to load: a pickle in the sandbox's state folder
        (written here, read there; nothing is ever unpickled on this side)."""
        self._files += 1
        path = Path(self.spec.state) / f"context-{self._files}.pickle"
        with open(path, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(path, 0o600)
        return str(path)

    # -- talking to the kernel ---------------------------------------------
    def silent(self, code: str, expressions: dict[str, str] | None = None) -> dict[str, Any]:
        reply = self._run(code, silent=True, expressions=expressions or {}, capture=None)
        content = reply["content"]
        if content.get("status") != "ok":
            raise RLMError(f"The sandboxed kernel refused a setup step: {content.get('ename')}: {content.get('evalue')}")
        return content

    def call(self, method: str, *args: Any) -> Any:
        """A method of the inside's ``__rlm_sandbox__``; its JSON result."""
        self.start()
        if self.entries is not None and method not in ("get", "names", "set", "read", "loaded", "number"):
            self.entries.boot()
        content = self.silent("", {"r": f"__rlm_sandbox__.call(*{[method, *args]!r})"})
        value = content["user_expressions"]["r"]
        if value.get("status") != "ok":
            raise RLMError(f"The sandboxed kernel could not answer {method}: {value.get('ename')}: {value.get('evalue')}")
        return json.loads(value["data"]["text/plain"])

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        capture = CellCapture(passthrough=self.passthrough, max_stored_chars=self.max_stored_chars)
        started = time.monotonic()
        if self.entries is not None:
            self.entries.boot()
        else:
            self.start()
        expressions = {"after": AFTER} if self.entries is not None else {}
        number = self.cell_number()
        if number is not None:  # the confined kernel numbers the cell as the page does (its tracebacks say In[n])
            if number != self._inside_next:
                self.call("number", number)
            expressions["next"] = f"__rlm_sandbox__.number({number + 1})"
            self._inside_next = number + 1
        with capturing(capture):
            reply = self._run(code, silent=False, expressions=expressions, capture=capture)
        content = reply["content"]
        status, error_name = "ok", None
        if content.get("status") != "ok":
            error_name = content.get("ename") or "Error"
            status = "interrupted" if error_name == "KeyboardInterrupt" else "error"
        after = (content.get("user_expressions") or {}).get("after")
        if self.entries is not None:
            if after and after.get("status") == "ok":
                self.entries.after(json.loads(after["data"]["text/plain"]))
            else:  # a cell that raised gets no user expressions: FINAL may still have been called in it
                self.entries.after(self.call("after"))
        view, chars = capture.model_view(view_limit)
        return CellResult(outputs=capture.outputs(), status=status, execution_count=content.get("execution_count"),
                          model_view=view, output_chars=chars, duration_s=time.monotonic() - started,
                          error_name=error_name)

    def _run(self, code: str, *, silent: bool, expressions: dict[str, str], capture: CellCapture | None,
             store_history: bool | None = None) -> dict[str, Any]:
        import zmq

        self.start()
        self.restored_last = False
        self.announced = None  # anything the confined kernel runs may change what a restore finds
        if not silent:
            self.limits.before_cell()
        client = self.client
        msg_id = client.execute(code, silent=silent, store_history=not silent if store_history is None else store_history,
                                allow_stdin=True, user_expressions=expressions)
        poller = zmq.Poller()
        sockets = {client.iopub_channel.socket: client.iopub_channel, client.stdin_channel.socket: client.stdin_channel,
                   client.shell_channel.socket: client.shell_channel}
        for socket in sockets:
            poller.register(socket, zmq.POLLIN)
        reply: dict[str, Any] | None = None
        idle = False
        interrupted_at: float | None = None
        checked = time.monotonic()
        while reply is None or not idle:
            try:
                ready = dict(poller.poll(50))
                if not ready and time.monotonic() - checked > DEATH_CHECK_S:
                    checked = time.monotonic()
                    if not launcher.alive(self.manager):
                        return self._died(capture)
                for socket, channel in sockets.items():
                    if socket not in ready:
                        continue
                    msg = channel.get_msg(timeout=0)
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    kind = msg["msg_type"]
                    if channel is client.shell_channel:
                        reply = msg
                    elif channel is client.stdin_channel:
                        self._answer_input(msg["content"])
                    elif kind == "status":
                        idle = msg["content"].get("execution_state") == "idle"
                    elif not silent:
                        self._output(kind, msg, capture)
                if interrupted_at is not None and time.monotonic() - interrupted_at > 10:
                    raise RLMError("The sandboxed kernel did not stop after an interrupt.")
            except KeyboardInterrupt:
                if interrupted_at is None:
                    interrupted_at = time.monotonic()
                    self.manager.interrupt_kernel()
        return reply

    def _died(self, capture: CellCapture | None) -> dict[str, Any]:
        """The confined kernel died during a request (killed at its CPU or
        memory limit, or crashed): said as the cell's error; the next request
        starts a new one (its variables are gone; a run's setup is sent again)."""
        why = ("the sandboxed execution kernel died during this cell (killed at its CPU or memory limit, or it "
               "crashed); its variables are gone, and the next cell starts a new one")
        content = {"status": "error", "ename": "SandboxKernelDied", "evalue": why, "traceback": [f"SandboxKernelDied: {why}"],
                   "execution_count": None}
        self._output("error", {"msg_type": "error", "content": content, "metadata": {}}, capture)
        self.forget_kernel()
        return {"content": content}

    def forget_kernel(self) -> None:
        """The confined kernel is dead: let it go; the next request starts a new one."""
        if self.client is not None:
            try:
                self.client.stop_channels()
                self.manager.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - it is gone already
                pass
        self.client = self.manager = None
        self._inside_next = None
        self.context_inside = False  # the run's context went with it: handed to the next one from here
        if self.entries is not None:
            self.entries.booted = False

    def _output(self, kind: str, msg: dict[str, Any], capture: CellCapture | None) -> None:
        content = msg["content"]
        if capture is None:
            pass
        elif kind == "stream":
            capture.stream(content["name"], content["text"])
        elif kind in ("display_data", "update_display_data"):
            capture.display(content["data"], content.get("metadata"), transient=content.get("transient"),
                            update=kind == "update_display_data")
        elif kind == "execute_result":
            capture.result(content["data"], content.get("metadata"), content.get("execution_count"))
        elif kind == "error":
            capture.error(content["ename"], content["evalue"], content["traceback"])
        elif kind == "clear_output":
            capture.clear()
        self.forward(msg)

    def forward(self, msg: dict[str, Any]) -> None:
        """Hook: the RLM kernel re-publishes the cell's messages on its own iopub."""

    def cell_number(self) -> int | None:
        """Hook: the execution count the page shows for the cell about to run
        (None: the confined kernel's own count will do)."""
        return None

    # -- sub-calls and input() from inside -------------------------------------
    def _answer_input(self, content: dict[str, Any]) -> None:
        prompt = content.get("prompt", "")
        if not prompt.startswith(MARK):
            self.client.input(self.person_input(prompt, bool(content.get("password"))))
            return
        try:
            request = json.loads(prompt[len(MARK):])
            name, args, kwargs = request["name"], list(request["args"]), dict(request["kwargs"])
            if name == JOB:  # a background job's handle inside asks about the job here
                answer = {"value": self.jobs.ask(*args)}
            else:
                args, kwargs = native(name, args, kwargs)
                value = self.helper(name)(*args, **kwargs)
                answer = self.jobs.keep(value) if isinstance(value, Job) else {"value": value}
            text = json.dumps(answer, default=str)
        except KeyboardInterrupt:
            raise
        except Exception as error:  # noqa: BLE001 - the helper's error goes back to the code that called it
            text = json.dumps({"error": [type(error).__name__, str(error)]})
        self.client.input(text)

    def helper(self, name: str) -> Any:
        """The function a call out of the sandbox named ``name`` runs: the run's
        sub-call helpers and tools, nothing else."""
        values = self.entries.values() if self.entries is not None else {}
        if name not in values or not (name in SUBCALLS or name in self.entries.installs.tools()):
            raise RLMError(f"{name} cannot be called from the sandbox.")
        return values[name]

    def person_input(self, prompt: str, password: bool) -> str:
        """What ``input()`` in the confined code gets: headless, a line of this
        process's stdin, as unconfined code reads it (EOFError inside when it
        has ended); the kernels ask the page instead."""
        try:
            if sys.stdin is None:
                return EOF
            sys.stderr.write(prompt)
            sys.stderr.flush()
            line = sys.stdin.readline()
        except (OSError, ValueError):  # closed
            return EOF
        return line.rstrip("\n") if line else EOF


def sandbox_spec(options: Any, folder: str | os.PathLike[str] | None = None) -> launcher.SandboxSpec:
    where = options.sandbox_dir or folder or os.getcwd()
    return launcher.SandboxSpec(folder=Path(where).expanduser().resolve(), memory_mb=options.sandbox_memory,
                                cpu_seconds=options.sandbox_cpu)


__all__ = ["SUBCALLS", "SandboxEntries", "SandboxExecutor", "SandboxNamespace", "sandbox_spec"]
