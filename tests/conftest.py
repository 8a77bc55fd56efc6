"""Shared fixtures: a scripted OpenAI-compatible server on 127.0.0.1 (reached
through litellm over real HTTP) and helpers to build and run an RLM on it.

Everything here is a real part: the server is ``rlm_kernel.testing.server``,
the engine is ``rlm_kernel.RLM``; nothing of ours is mocked.
"""

from __future__ import annotations

import os
import threading

# Before anything imports litellm: never fetch the cost map from the internet.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# Every notebook a run in a test writes is checked against the trajectory schema
# (rlm_kernel/engine/trajectory/trajectory.schema.json) before it is written.
os.environ["RLM_CHECK_TRAJECTORY"] = "1"

from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from _helpers import ROOT, SUB  # noqa: E402

from rlm_kernel.testing.server import Script, ScriptedServer  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """A job that a non-interactive shell starts in the background (as CI
    may start this suite) begins with SIGINT ignored, and Python leaves it
    so: a cell timeout, which interrupts the main thread with SIGINT, could
    not stop a cell. Start with Python's own handler."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ./dev test with RLM_STORE_DURATIONS=1: each lane writes every test's time (setup, call
# and teardown) to $TEST_DURATIONS_OUT, merged into tests/durations.json, which
# pytest-split reads to halve the suite into lanes of equal time.
_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("TEST_DURATIONS_OUT"):
        _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("TEST_DURATIONS_OUT")
    if out and _DURATIONS:
        import json
        from pathlib import Path

        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(_DURATIONS, indent=0, sort_keys=True))


@pytest.fixture
def server() -> Iterator[Callable[..., ScriptedServer]]:
    """Factory: ``srv = server(root=[...], sub=fn, latency=0.0)`` or
    ``server(responder)``; every server started is stopped after the test."""
    started: list[ScriptedServer] = []

    def start(responder: Any = None, *, root: Any = (), sub: Callable[[str], Any] | None = None,
              latency: float = 0.0, **script_kwargs: Any) -> ScriptedServer:
        if responder is None:
            responder = Script(root=root, sub=sub, **script_kwargs)
        srv = ScriptedServer(responder, latency=latency).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        # shutdown() waits up to the server's 0.5 s poll interval: do it aside
        threading.Thread(target=srv.stop, daemon=True).start()


@pytest.fixture
def make_rlm() -> Callable[..., Any]:
    """``make_rlm(srv, **kwargs)``: an RLM on the scripted server with fast retries."""
    from rlm_kernel import RLM

    def make(srv: ScriptedServer, **kwargs: Any) -> Any:
        kwargs.setdefault("model", ROOT)
        kwargs.setdefault("sub_model", SUB)
        kwargs.setdefault("api_base", srv.url)
        kwargs.setdefault("retry_base_delay", 0.01)
        return RLM(**kwargs)

    return make


@pytest.fixture
def run_rlm(server: Callable[..., ScriptedServer], make_rlm: Callable[..., Any]) -> Callable[..., Any]:
    """``result, srv = run_rlm(root=[...], sub=fn, context=..., query=..., **rlm_kwargs)``"""

    def run(*, root: Any = (), sub: Any = None, responder: Any = None, context: Any = "some context text",
            query: str = "What is in the context?", latency: float = 0.0, output: Any = None,
            **kwargs: Any) -> tuple[Any, ScriptedServer]:
        srv = server(responder, root=root, sub=sub, latency=latency)
        result = make_rlm(srv, **kwargs).completion(context, query, output=output)
        return result, srv

    return run


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One RLM kernel for a test module (litellm imported in it), shut down after."""
    from _kernel import Kernel

    started = Kernel("rlm", tmp_path_factory.mktemp("rlm-kernel"))
    try:
        started.import_litellm()
        yield started
    finally:
        started.shutdown()


def _watch_loops_marked_running() -> None:
    """Remember where the test thread last had a loop marked running (what
    the guard below says when a test leaves one): asyncio's loops mark
    themselves through ``asyncio.events._set_running_loop``."""
    import asyncio.events
    import threading
    import traceback

    mark = asyncio.events._set_running_loop
    main = threading.main_thread()

    def watched(loop: Any) -> None:
        if loop is not None and threading.current_thread() is main:
            _LOOP_MARKS[:] = [traceback.StackSummary.extract(traceback.walk_stack(None), limit=14, lookup_lines=False)]
        mark(loop)

    asyncio.events._set_running_loop = watched


_LOOP_MARKS: list[Any] = []  # the last stack that marked one, its lines read only when it is shown
_watch_loops_marked_running()


@pytest.fixture(autouse=True)
def _no_event_loop_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Isolation: a test that leaves an asyncio loop marked running on the
    test thread breaks every later test that calls asyncio.run, and one that
    leaves SIGINT handled otherwise breaks every later cell timeout (each
    seen once in CI, not reproduced alone). Put them back and warn, naming
    the test, so the warnings summary says which one did it. (Playwright's
    sync API keeps a loop marked in the UI tests; a non-UI test's fixture
    must not be called ``page``, or pytest-playwright starts it there.)"""
    import asyncio
    import signal
    import warnings

    ui = "/ui/" in str(request.node.path).replace(os.sep, "/")
    if not ui and asyncio.events._get_running_loop() is not None:
        asyncio.events._set_running_loop(None)  # the UI tests' (pytest-playwright keeps it): not this test's doing
    yield
    if ui:
        return
    handler = signal.getsignal(signal.SIGINT)
    if handler is not signal.default_int_handler and threading.current_thread() is threading.main_thread():
        # a cell timeout interrupts code on this thread with SIGINT: a handler left behind swallows it
        signal.signal(signal.SIGINT, signal.default_int_handler)
        warnings.warn(f"{request.node.nodeid} left SIGINT handled by {handler!r}", RuntimeWarning, stacklevel=1)
    if asyncio.events._get_running_loop() is not None:
        asyncio.events._set_running_loop(None)
        where = "".join(reversed(_LOOP_MARKS[0].format())) if _LOOP_MARKS else "(not seen being marked)\n"
        warnings.warn(f"{request.node.nodeid} left an asyncio event loop marked running on its thread; it was "
                      f"marked here:\n{where}", RuntimeWarning, stacklevel=1)
