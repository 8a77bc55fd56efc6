"""``RemoteExecutor``: the engine's executor for a namespace in another kernel.

Each generated cell is one ``execute_request``; its iopub messages become
the cell's capture (and, through :meth:`RemoteExecutor.forward`, the outer
kernel's own iopub). A sub-call the code makes arrives as an
``input_request`` (``inside.MARK``) and runs here, on the code thread, with
the run's budgets, keys and sinks, exactly as a local helper call. The run's
entries live in the other kernel (``entries.py``); only JSON comes out.

Where that kernel lives is its *home* (:class:`KernelHome`): a confined
kernel on this machine (``sandbox/``) or one a Jupyter gateway starts
(``gateway/``). The home starts, watches and stops it and carries a context
there; everything else is here, the same for both.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Protocol

from ..engine.execution.capture import CellCapture, capturing
from ..engine.execution.executors import CellResult, Executor
from ..engine.execution.namespace import Entries, Installs
from ..engine.subcalls.background import Job
from ..errors import RLMError
from .calls import JOB, Jobs, native
from .entries import AFTER, SUBCALLS, RemoteEntries, RemoteNamespace
from .inside import EOF, MARK

DEATH_CHECK_S = 0.5  # how often a request with nothing to read asks whether the other kernel still lives
STOP_WAIT_S = 10  # after an interrupt, how long the cell may take to stop before the run is told it did not


class Courier(Protocol):
    """How a run's context reaches the other kernel."""

    def bind(self, sources: list[str] | None) -> None: ...
    def hand_over(self, name: str, value: Any, sources: list[str] | None) -> str | None: ...
    def context_file(self, value: Any) -> str: ...


class KernelHome(Protocol):
    """Where the other kernel lives: what starts, watches and stops it."""

    label: str  # "sandboxed" | "gateway's": how messages name the kernel
    death_ends_run: bool  # a kernel that dies mid-cell ends the run (else the next cell starts a new one)
    cpu_seconds: float

    def check(self) -> None: ...  # before any model call: one sentence when the kernel cannot be had
    def start_kernel(self) -> tuple[Any, Any]: ...  # (manager, client), ready, our inside installed
    def stop_kernel(self, manager: Any, client: Any) -> None: ...
    def discard(self) -> None: ...  # closed before it ever started
    def alive(self, manager: Any) -> bool: ...
    def poll(self, client: Any, timeout_ms: int) -> list[Any]: ...  # the client's channels with a message waiting
    def limits(self, manager: Any) -> Any: ...  # before_cell() before each generated cell
    def courier(self, executor: RemoteExecutor) -> Courier: ...
    def child(self) -> KernelHome: ...  # a child run's kernel: one of its own, never shown live
    def died(self) -> str: ...  # the sentence a death mid-cell is


class RemoteExecutor(Executor):
    passthrough = False

    def __init__(self, spec: Any, *, max_stored_chars: int = 200_000) -> None:
        self.spec: KernelHome = spec
        self.max_stored_chars = max_stored_chars
        spec.check()  # a missing bwrap or an unreachable gateway is said before any model call
        self.manager: Any = None
        self.client: Any = None
        self.start_s: float | None = None
        self.namespace = RemoteNamespace(self)  # type: ignore[assignment]
        self.jobs = Jobs()  # background jobs started from inside
        self.entries: RemoteEntries | None = None
        self.context_inside = False  # True: the run's `context` is the other namespace's own
        self._inside_next: int | None = None  # the other kernel's next execution count, when set from here
        self.restored_last = False  # the last thing the other kernel did was the entries' restore
        self.announced: list[str] | None = None  # restored before the next cell, as the last cell's report said
        self.dead: str | None = None  # the kernel died mid-cell and that ends the run: the sentence
        self.courier = spec.courier(self)
        self.context_encoding = "utf-8"  # what the files a context came from are read with
        self.limits = spec.limits(None)

    def start(self) -> None:
        """Start the other kernel (on the code thread, which alone talks to it)."""
        if self.dead is not None:
            from ..engine.steps.step import Stop

            raise Stop("error", self.dead)
        if self.client is None:
            started = time.monotonic()
            self.manager, self.client = self.spec.start_kernel()
            self.limits = self.spec.limits(self.manager)
            self.start_s = time.monotonic() - started

    def child_executor(self) -> Executor:
        return RemoteExecutor(self.spec.child(), max_stored_chars=self.max_stored_chars)

    def make_entries(self, installs: Installs) -> Entries:
        self.entries = RemoteEntries(installs, self)
        return self.entries

    def close(self) -> None:
        if self.client is not None:
            self.spec.stop_kernel(self.manager, self.client)
            self.client = self.manager = None
        else:
            self.spec.discard()

    def bind_context_files(self, sources: list[str] | None) -> None:
        """Before the start: the files a run's context came from, made readable there."""
        if self.client is None:
            self.courier.bind(sources)

    def hand_over(self, name: str, value: Any, sources: list[str] | None) -> str | None:
        """Have the inside hold ``value`` as ``name``: None when it read it
        there itself (``set`` and the setup take it from there), else the
        path of a file there that holds it."""
        return self.courier.hand_over(name, value, sources)

    def context_file(self, value: Any) -> str:
        return self.courier.context_file(value)

    # -- talking to the kernel ---------------------------------------------
    def silent(self, code: str, expressions: dict[str, str] | None = None) -> dict[str, Any]:
        reply = self._run(code, silent=True, expressions=expressions or {}, capture=None)
        content = reply["content"]
        if content.get("status") != "ok":
            raise RLMError(f"The {self.spec.label} kernel refused a setup step: {content.get('ename')}: "
                           f"{content.get('evalue')}")
        return content

    def call(self, method: str, *args: Any) -> Any:
        """A method of the inside's ``__rlm_sandbox__``; its JSON result."""
        self.start()
        if self.entries is not None and method not in ("get", "names", "set", "read", "loaded", "number", "load",
                                                       "has", "describe"):
            self.entries.boot()
        content = self.silent("", {"r": f"__rlm_sandbox__.call(*{[method, *args]!r})"})
        value = content["user_expressions"]["r"]
        if value.get("status") != "ok":
            raise RLMError(f"The {self.spec.label} kernel could not answer {method}: {value.get('ename')}: "
                           f"{value.get('evalue')}")
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
        if number is not None:  # the other kernel numbers the cell as the page does (its tracebacks say In[n])
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
        if self.entries is not None and self.client is not None:
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
        self.start()
        self.restored_last = False
        self.announced = None  # anything the other kernel runs may change what a restore finds
        if not silent:
            self.limits.before_cell()
        client = self.client
        msg_id = client.execute(code, silent=silent, store_history=not silent if store_history is None else store_history,
                                allow_stdin=True, user_expressions=expressions)
        shell, stdin = client.shell_channel, client.stdin_channel
        reply: dict[str, Any] | None = None
        idle = False
        interrupted_at: float | None = None
        checked = time.monotonic()
        while reply is None or not idle:
            try:
                ready = self.spec.poll(client, 50)
                if not ready and time.monotonic() - checked > DEATH_CHECK_S:
                    checked = time.monotonic()
                    if not self.spec.alive(self.manager):
                        return self._died(capture)
                for channel in ready:
                    msg = channel.get_msg(timeout=0)
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    kind = msg["msg_type"]
                    if channel is shell:
                        reply = msg
                    elif channel is stdin:
                        self._answer_input(msg["content"])
                    elif kind == "status":
                        idle = msg["content"].get("execution_state") == "idle"
                    elif not silent:
                        self._output(kind, msg, capture)
                if interrupted_at is not None and time.monotonic() - interrupted_at > STOP_WAIT_S:
                    raise RLMError(f"The {self.spec.label} kernel did not stop after an interrupt.")
            except KeyboardInterrupt:
                if interrupted_at is None:
                    interrupted_at = time.monotonic()
                    self.manager.interrupt_kernel()
        return reply

    def _died(self, capture: CellCapture | None) -> dict[str, Any]:
        """The other kernel died during a request: said as the cell's error.
        Then either the next request starts a new one (its variables are gone;
        a run's setup is sent again), or, when its home says so, the run ends
        at its next touch of the namespace with that sentence."""
        why = self.spec.died()
        name = "SandboxKernelDied" if self.spec.label == "sandboxed" else "GatewayKernelDied"
        content = {"status": "error", "ename": name, "evalue": why, "traceback": [f"{name}: {why}"],
                   "execution_count": None}
        self._output("error", {"msg_type": "error", "content": content, "metadata": {}}, capture)
        self.forget_kernel()
        if self.spec.death_ends_run:
            self.dead = why
        return {"content": content}

    def forget_kernel(self) -> None:
        """The other kernel is dead: let it go; the next request starts a new one."""
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
        (None: the other kernel's own count will do)."""
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
        """The function a call out of the other kernel named ``name`` runs: the
        run's sub-call helpers and tools, nothing else."""
        values = self.entries.values() if self.entries is not None else {}
        if name not in values or not (name in SUBCALLS or name in self.entries.installs.tools()):
            raise RLMError(f"{name} cannot be called from the {self.spec.label} kernel.")
        return values[name]

    def person_input(self, prompt: str, password: bool) -> str:
        """What ``input()`` in the other kernel's code gets: headless, a line
        of this process's stdin, as local code reads it (EOFError inside when
        it has ended); the kernels ask the page instead."""
        try:
            if sys.stdin is None:
                return EOF
            sys.stderr.write(prompt)
            sys.stderr.flush()
            line = sys.stdin.readline()
        except (OSError, ValueError):  # closed
            return EOF
        return line.rstrip("\n") if line else EOF


__all__ = ["SUBCALLS", "Courier", "KernelHome", "RemoteEntries", "RemoteExecutor", "RemoteNamespace"]
