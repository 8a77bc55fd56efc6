"""Servers we start on this machine as child processes (the offline model's
llama.cpp server, the litellm proxy of ``rlm-kernel serve``): a free port
for one, and waiting until it answers."""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (just now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_serving(url: str, process: Any, timeout: float, poll: float = 0.2,
                       headers: dict[str, str] | None = None) -> bool:
    """Poll ``url`` (with ``headers``: a token) until it answers HTTP 200
    (True), or until ``process`` (a ``subprocess.Popen``) exits or
    ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers=headers or {})
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=2) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(poll)
    return False


__all__ = ["free_port", "wait_until_serving"]
