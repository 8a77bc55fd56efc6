"""Stopping a run stops its whole tree: the code of a child run
(``rlm_query``) stops too, whether it loops, sleeps, or waits on a sub-call
of its own, when the root run is interrupted (the kernel's Interrupt,
Ctrl-C on the command line) or times out.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_args, start_cli
from _helpers import STOP_BOUND, Held, Router, cell_text, cells_by_role, clean_env, repl, wait_for
from _kernel import Kernel

from rlm_kernel.testing.server import ScriptedServer

FAKE_KEY = "sk-test-interrupt-0000"


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
    kernel = Kernel("rlm", tmp_path_factory.mktemp("interrupt-children"))
    try:
        kernel.import_litellm()
        kernel.execute("context = 'abc'")
        yield kernel
    finally:
        kernel.shutdown()


def _start(kernel: Any, server: ScriptedServer, out: Path) -> str:
    return kernel.kc.execute(f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {server.url} "
                             f"--output {out}\nq")


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
        took = kernel.interrupt(msg_id, within=20)
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
        took = kernel.interrupt(msg_id, within=20)
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
        proc = start_cli([*run_args(srv.url, out), "--json", "--quiet"], tmp_path,
                         env=clean_env(OPENAI_API_KEY=FAKE_KEY))
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
