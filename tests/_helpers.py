"""Small helpers shared by the test modules (plain functions; fixtures live in conftest.py).

Test modules share code through this module and the other ``tests/_*.py``
helpers (``_kernel.py``, ``_cli.py``, ``_examples.py``), never by importing
one another (tests/test_layout.py checks).
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from rlm_kernel.testing.server import Reply, Script, ScriptedServer, prompt_text

ROOT = "openai/root-model"
SUB = "openai/sub-model"
STOP_BOUND = 5.0  # seconds from Interrupt / Ctrl-C / a timeout to the end of a run (the target is about one)


def clean_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this process's environment) without provider keys,
    RLM settings or Jupyter's session name, with litellm's cost map read
    locally; then ``extra``. What a CLI run or a kernel under test sees."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.endswith("_API_KEY") and not k.startswith("RLM_") and k != "JPY_SESSION_NAME"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["RLM_CHECK_TRAJECTORY"] = "1"  # every notebook a test's run writes follows the trajectory schema
    env.update(extra)
    return env


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (just now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float = 20, what: str = "a condition",
             poll: float = 0.02) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def require_bubblewrap() -> None:
    """Fail (not skip) a sandbox test with one sentence when bubblewrap is missing."""
    import shutil

    import pytest

    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: ./dev setup installs it (apt-get install bubblewrap).")


def repl(code: str, prose: str = "") -> str:
    """A root reply: optional prose, then one ```repl block."""
    head = f"{prose}\n\n" if prose else ""
    return f"{head}```repl\n{code.strip()}\n```"


def root_requests(server: ScriptedServer, model: str = "root-model") -> list[dict[str, Any]]:
    return server.calls(model)


def last_user(body: dict[str, Any]) -> str:
    """The last user message of a request: for a root request after step 1,
    the feedback on the previous step."""
    return prompt_text(body)


def feedback_after(server: ScriptedServer, step: int, model: str = "root-model") -> str:
    """What the root model was told after ``step`` (the last user message of
    root request number ``step + 1``)."""
    calls = server.calls(model)
    assert len(calls) > step, f"only {len(calls)} root requests were made"
    return last_user(calls[step])


def cells_by_role(nb: Any, role: str) -> list[Any]:
    return [c for c in nb.cells if c.metadata.get("rlm", {}).get("role") == role]


def cell_text(cell: Any) -> str:
    """What a code cell printed and returned (stdout/stderr, results, errors),
    in order. Display outputs (such as sub-call widgets) are left out."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}\n" + "\n".join(out.traceback))
        elif out.output_type == "execute_result":
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


class Router:
    """A responder that scripts several "root" models at once (a run and its
    child runs each talk to their own model name); any other model gets
    ``sub(prompt)``. Items are strings, Replies or callables taking the body."""

    def __init__(self, scripts: dict[str, list[Any]], sub: Any = None,
                 default: str = "FINAL(no more scripted replies)") -> None:
        self.scripts = {name: list(items) for name, items in scripts.items()}
        self.sub = sub or (lambda prompt: f"echo: {prompt[:80]}")
        self.default = default
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        model = body.get("model")
        if model in self.scripts:
            with self._lock:
                items = self.scripts[model]
                item = items.pop(0) if items else self.default
            return item(body) if callable(item) else item
        return self.sub(prompt_text(body))


class Held:
    """A responder (for a root script item or ``sub=``) that keeps each
    request open up to ``hold`` seconds and notes when its client hangs up
    (a cancelled request closes its connection), so a test can tell a
    cancelled HTTP request from one still waiting."""

    def __init__(self, hold: float = 30.0, text: str = "late") -> None:
        self.hold, self.text = hold, text
        self.started = 0
        self.hung_up: list[float] = []  # time.monotonic() of each hang-up
        self._lock = threading.Lock()

    def __call__(self, *_: Any) -> Reply:
        connection = _request_socket()
        with self._lock:
            self.started += 1
        deadline = time.monotonic() + self.hold
        poller = select.poll()  # not select.select: a long test session holds more than 1024 descriptors
        poller.register(connection, select.POLLIN | select.POLLHUP)
        while time.monotonic() < deadline:
            if not poller.poll(50):
                continue
            try:
                gone = connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                with self._lock:
                    self.hung_up.append(time.monotonic())
                break
            time.sleep(0.05)
        return Reply(text=self.text)

    def wait_hung_up(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.hung_up) >= count:
                return True
            time.sleep(0.02)
        return len(self.hung_up) >= count


def _request_socket() -> socket.socket:
    """The connection of the request being answered (its handler is up the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        handler = frame.f_locals.get("self")
        if isinstance(handler, BaseHTTPRequestHandler):
            return handler.connection
        frame = frame.f_back
    raise RuntimeError("not called from a request handler")


def system_text(body: dict[str, Any]) -> str:
    """A request's system prompt: the first message's (OpenAI) or ``system`` (Anthropic)."""
    system = body.get("system")
    if system is None:
        messages = body.get("messages") or [{}]
        system = messages[0].get("content") if messages[0].get("role") == "system" else ""
    if isinstance(system, list):
        return "".join(part.get("text", "") for part in system if isinstance(part, dict))
    return system or ""


class Summaries(Script):
    """A :class:`Script` whose root model also writes compaction summaries: a
    request with the summarising call's system prompt gets ``summary``
    instead of the next scripted reply (and is kept in ``summary_requests``)."""

    def __init__(self, *args: Any, summary: str = "Steps so far printed long strings kept in s1, s2 and s3.",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.summary = summary
        self.summary_requests: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        from rlm_kernel.engine.runs.compaction import SUMMARY_SYSTEM

        if system_text(body) == SUMMARY_SYSTEM:
            self.summary_requests.append(body)
            return self.summary
        return super().__call__(body)
