"""``rlm_kernel._local_server``: waiting for a server we started to answer,
written once for the offline model and ``rlm-kernel serve``."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlm_kernel._local_server import free_port, wait_until_serving
from rlm_kernel.testing.server import ScriptedServer

PACKAGE = Path(__file__).resolve().parent.parent / "rlm_kernel"


def sleeper(seconds: float = 60) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_it_waits_until_the_server_answers():
    process = sleeper()
    server = ScriptedServer()  # its port is bound now; it answers once started
    try:
        threading.Timer(1.0, server.start).start()
        started = time.monotonic()
        assert wait_until_serving(f"{server.url}/models", process, timeout=30)
        assert 0.9 < time.monotonic() - started < 20
    finally:
        server.stop()
        process.kill()
        process.wait()


def test_it_gives_up_when_the_process_exits_or_the_time_is_up():
    url = f"http://127.0.0.1:{free_port()}/v1/models"  # nothing listens there
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    assert not wait_until_serving(url, exited, timeout=60)
    assert time.monotonic() - started < 20 and exited.returncode == 3
    process = sleeper()
    try:
        started = time.monotonic()
        assert not wait_until_serving(url, process, timeout=1.0)
        assert time.monotonic() - started < 10
    finally:
        process.kill()
        process.wait()


def test_no_other_module_polls_a_url_or_picks_a_port_itself():
    """The helpers are the only copies: a module that waits for a server (a
    URL opened in a loop) or picks a free port calls them. A client that
    makes a request (the gateway's REST client) is not waiting for a server."""
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_local_server.py" or "labextension" in path.parts or "testing" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for loop in ast.walk(tree):
            if isinstance(loop, (ast.While, ast.For, ast.AsyncFor)):
                for node in ast.walk(loop):
                    if isinstance(node, ast.Attribute) and node.attr == "urlopen":
                        raise AssertionError(f"{path.relative_to(PACKAGE)}:{node.lineno} polls a URL itself")
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and len(node.elts) == 2 and all(
                    isinstance(e, ast.Constant) for e in node.elts) and [e.value for e in node.elts] == ["127.0.0.1", 0]:
                raise AssertionError(f"{path.relative_to(PACKAGE)}:{node.lineno} picks a free port itself")
