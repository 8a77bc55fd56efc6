"""Stopping a run stops its whole tree: the code of a child run
(``rlm_query``) stops too, whether it loops, sleeps, or waits on a sub-call
of its own, when the root run is interrupted (the kernel's Interrupt,
Ctrl-C on the command line) or times out.

Also home of :class:`Held`, a responder that holds each request and records
whether the client hung up, so a test can tell a cancelled HTTP request from
one still waiting.
"""

from __future__ import annotations

import json
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _helpers import Router, cell_text, cells_by_role, repl
from test_cli import CLI, clean_env

from rlm_kernel.testing.server import Reply, ScriptedServer

FAKE_KEY = "sk-test-interrupt-0000"
STOP_BOUND = 5.0  # seconds; the target is well under one


class Held:
    """A responder (for a root script item or ``sub=``) that keeps each
    request open up to ``hold`` seconds and notes when its client hangs up
    (a cancelled request closes its connection)."""

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
        while time.monotonic() < deadline:
            readable, _, _ = select.select([connection], [], [], 0.05)
            if not readable:
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


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def child_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("rlm-child")]


def grows(path: Path, seconds: float = 0.6) -> bool:
    size = path.stat().st_size
    time.sleep(seconds)
    return path.stat().st_size != size


def looping(path: Path, pause: str = "time.sleep(0.05)") -> str:
    """A child's code: append to ``path`` forever."""
    return f"import time\nwhile True:\n    with open({str(path)!r}, 'a') as f:\n        f.write('x')\n    {pause}"


def sleeping(path: Path) -> str:
    """A child's code: say it is there, then sleep a long time in one call."""
    return (f"import time\nwith open({str(path)!r}, 'a') as f:\n    f.write('asleep')\ntime.sleep(120)\n"
            f"with open({str(path)!r}, 'a') as f:\n    f.write(' and awake')")


def busy(path: Path) -> str:
    """A child's code: a pure Python loop (no sleep), appending now and then."""
    return (f"n = 0\nwhile True:\n    n += 1\n    if n % 20000 == 0:\n"
            f"        with open({str(path)!r}, 'a') as f:\n            f.write('x')")


# -- the Python API: a root timeout while a child's code runs -------------------------


@pytest.mark.parametrize("kind", ["sleeping", "looping"])
def test_a_root_cell_timeout_stops_the_childs_code(run_rlm, tmp_path, kind):
    trace = tmp_path / "child.txt"
    trace.touch()
    child = sleeping(trace) if kind == "sleeping" else looping(trace)
    root = [repl("r = rlm_query('work')\nprint('child said', r)"), repl("print('next step')"), "FINAL(done)"]
    # The child's cell starts after the root's, so the root's 3 s timer fires first.
    result, _ = run_rlm(responder=Router({"root-model": root, "sub-model": [repl(child)]}), cell_timeout=3.0)
    assert result.reason == "final"
    first, second = cells_by_role(result.notebook, "code")
    assert first.metadata.rlm.status == "error" and cell_text(second) == "next step\n"
    wait_for(lambda: not child_threads(), STOP_BOUND, "the child's code thread to end")
    assert not grows(trace)
    assert "awake" not in trace.read_text()


def test_the_run_timeout_stops_a_sleeping_childs_code(run_rlm, tmp_path):
    trace = tmp_path / "child.txt"
    trace.touch()
    root = [repl("r = rlm_query('work')")]
    result, _ = run_rlm(responder=Router({"root-model": root, "sub-model": [repl(sleeping(trace))]}), timeout=4.0)
    assert result.reason == "timeout"
    wait_for(lambda: not child_threads(), STOP_BOUND, "the child's code thread to end")
    assert trace.read_text() == "asleep"


# -- the kernel: Interrupt while a child's code runs --------------------------------------


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    from test_kernel import Kernel

    kernel = Kernel("rlm", tmp_path_factory.mktemp("interrupt-children"))
    try:
        reply, _ = kernel.execute("from rlm_kernel.engine.litellm_setup import load_litellm as _m; _m(); del _m")
        assert reply["status"] == "ok", reply
        kernel.execute("context = 'abc'")
        yield kernel
    finally:
        kernel.shutdown()


def _start(kernel: Any, server: ScriptedServer, out: Path) -> str:
    return kernel.kc.execute(f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {server.url} "
                             f"--output {out}\nq")


def _interrupt(kernel: Any, msg_id: str) -> float:
    """Interrupt; return how long the kernel took to finish the cell."""
    started = time.monotonic()
    kernel.km.interrupt_kernel()
    try:
        kernel._until_idle(msg_id, [], 20)
    except queue.Empty:
        kernel._recover(msg_id)
        raise AssertionError("Interrupt did not stop the run within 20 s") from None
    return time.monotonic() - started


def _kernel_child_threads(kernel: Any) -> str:
    return kernel.value("[t.name for t in __import__('threading').enumerate() if t.name.startswith('rlm-child')]")


@pytest.mark.kernel
@pytest.mark.parametrize("kind", ["looping", "sleeping", "busy"])
def test_kernel_interrupt_stops_a_childs_code(kernel, tmp_path, kind):
    trace = tmp_path / "child.txt"
    trace.touch()
    child = {"looping": looping, "sleeping": sleeping, "busy": busy}[kind](trace)
    out = tmp_path / "run.ipynb"
    with ScriptedServer(Router({"root-model": [repl("r = rlm_query('work')")], "sub-model": [repl(child)]})) as srv:
        msg_id = _start(kernel, srv, out)
        try:
            wait_for(lambda: trace.stat().st_size > 0, 30, "the child's code to start")
        except AssertionError:
            kernel._recover(msg_id)
            raise
        took = _interrupt(kernel, msg_id)
    assert took < STOP_BOUND, f"the kernel took {took:.1f} s to stop the run"
    assert kernel.value("rlm_result.reason") == "'interrupted'"
    deadline = time.monotonic() + STOP_BOUND
    while _kernel_child_threads(kernel) != "[]" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _kernel_child_threads(kernel) == "[]", "the child's code is still running"
    assert not grows(trace)
    assert "awake" not in trace.read_text()
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    assert nb.cells[-1].metadata.rlm.reason == "interrupted"
    reply, _ = kernel.execute("1 + 1")
    assert reply["status"] == "ok"


@pytest.mark.kernel
def test_kernel_interrupt_cancels_a_childs_own_sub_call(kernel, tmp_path):
    # The child's code waits on llm_query (held 30 s by the server): Interrupt
    # must cancel that HTTP request too, while the kernel lives on.
    held = Held()
    child = [repl("answer = llm_query('slow question')"), held]  # the child's root call, then its sub-call
    with ScriptedServer(Router({"root-model": [repl("r = rlm_query('work')")], "sub-model": child})) as srv:
        msg_id = _start(kernel, srv, tmp_path / "run.ipynb")
        try:
            wait_for(lambda: held.started == 1, 30, "the child's sub-call to reach the server")
        except AssertionError:
            kernel._recover(msg_id)
            raise
        took = _interrupt(kernel, msg_id)
        assert held.wait_hung_up(1, STOP_BOUND), "the child's sub-call was left running"
    assert took < STOP_BOUND
    assert _kernel_child_threads(kernel) == "[]"


# -- the command line: Ctrl-C while a child's code sleeps ----------------------------------


def test_ctrl_c_during_a_childs_code_exits_130_at_once(tmp_path):
    (tmp_path / "doc.txt").write_text("some text\n", encoding="utf-8")
    trace = tmp_path / "child.txt"
    trace.touch()
    root = [repl("print('root step one', flush=True)"), repl("r = rlm_query('work')")]
    with ScriptedServer(Router({"root-model": root, "sub-model": [repl(sleeping(trace))]})) as srv:
        out = tmp_path / "run.ipynb"
        proc = subprocess.Popen([CLI, "run", "--context", "doc.txt", "--query", "q", "--model", "openai/root-model",
                                 "--sub-model", "openai/sub-model", "--api-base", srv.url, "-o", str(out), "--json",
                                 "--quiet"], cwd=tmp_path, env=clean_env(OPENAI_API_KEY=FAKE_KEY),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: trace.read_text() == "asleep" or proc.poll() is not None, 60, "the child's code")
            assert proc.poll() is None, proc.communicate()
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            try:
                stdout, stderr = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                raise AssertionError("the process was still running 30 s after Ctrl-C") from None
            took = time.monotonic() - started
        finally:
            proc.kill()
            proc.wait()
    assert took < STOP_BOUND, f"the process took {took:.1f} s to exit after Ctrl-C"
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert "Traceback" not in stderr and stderr.strip() == "", stderr
    result = json.loads(stdout)
    assert result["reason"] == "interrupted" and result["answer"] is None
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    assert "root step one" in json.dumps([c.get("outputs") for c in nb.cells])
    assert nb.cells[-1].metadata.rlm.reason == "interrupted"
    assert trace.read_text() == "asleep"
