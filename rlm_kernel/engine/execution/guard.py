"""``--no-network-in-code``: while a generated cell runs, its thread (and any
thread it starts) may not open network connections, resolve host names,
listen on a port or start processes. Sub-calls are not affected: they run on
the engine loop's thread.

Built on ``sys.addaudithook``: CPython raises an audit event before each of
those operations, and the hook refuses the ones raised from a guarded thread
with a PermissionError. It is a guard against code that reaches out by the
usual routes (socket, urllib, requests, httpx, subprocess, os.system), not a
sandbox: code that loads C libraries through ctypes, or a C extension doing
its own I/O, raises no audit event. An audit hook cannot be removed, so it is
installed once, the first time a guarded cell runs, and costs a set lookup per
audited event after that.
"""

from __future__ import annotations

import _thread
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

OPTION = "--no-network-in-code"

_NETWORK = {
    "socket.connect": "opening a network connection",
    "socket.getaddrinfo": "looking up a host name",
    "socket.gethostbyname": "looking up a host name",
    "socket.gethostbyaddr": "looking up a host name",
    "socket.bind": "listening on a port",
    "socket.sendto": "sending network packets",
    "socket.sendmsg": "sending network packets",
}
_PROCESSES = {
    "subprocess.Popen": "starting a process",
    "os.system": "running a shell command",
    "os.exec": "replacing the process with a program",
    "os.posix_spawn": "starting a process",
    "os.spawn": "starting a process",
}
_BLOCKED = {**_NETWORK, **_PROCESSES}

_state = threading.local()
_install_lock = threading.Lock()
_installed = False


def active() -> bool:
    """Whether the calling thread runs guarded code now."""
    return getattr(_state, "depth", 0) > 0


def run_guarded(enabled: bool, fn: Callable[[], T]) -> T:
    """Call ``fn`` on this thread, guarded when ``enabled``."""
    if not enabled:
        return fn()
    install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        return fn()
    finally:
        _state.depth -= 1


def install() -> None:
    """Add the audit hook and make threads started by guarded code guarded
    for their whole life (once per process)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        sys.addaudithook(_audit)
        original = threading._start_new_thread  # type: ignore[attr-defined]

        def start_new_thread(function: Callable[..., Any], args: tuple[Any, ...], kwargs: Any = None) -> int:
            if active():
                function = _guarded_thread(function)
            if kwargs is None:
                return original(function, args)
            return original(function, args, kwargs)

        threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]
        _thread.start_new_thread = start_new_thread
        _thread.start_new = start_new_thread  # type: ignore[attr-defined]
        _installed = True


def _guarded_thread(function: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        _state.depth = 1
        return function(*args, **kwargs)

    return run


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in _BLOCKED and getattr(_state, "depth", 0) > 0:
        what = _BLOCKED[event]
        hint = "use llm_query for model calls" if event in _NETWORK else "do the work in Python"
        raise PermissionError(f"{what[0].upper()}{what[1:]} ({event}) is blocked in generated code by {OPTION}; {hint}.")


__all__ = ["OPTION", "active", "install", "run_guarded"]
