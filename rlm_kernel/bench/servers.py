"""A scripted server tuned for timing (TCP_NODELAY, a real listen backlog), and
reading the step timings it records."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..testing.server import Reply, ScriptedServer, prompt_text


def _bench_handler_class(nodelay: bool) -> type:
    from ..testing import server as server_module

    base = server_module._Handler

    class _BenchHandler(base):  # type: ignore[misc, valid-type]
        # The stock handler answers with two writes (headers, then body); with
        # Nagle's algorithm on, the body waits for the client's delayed ACK,
        # which adds ~40 ms to every request. "Replies instantly" means no such
        # wait, so the benchmarks switch Nagle off (TCP_NODELAY) unless asked
        # to reproduce the stock server.
        disable_nagle_algorithm = nodelay

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            _request_local.length = int(self.headers.get("Content-Length") or 0)
            try:
                super().do_POST()
            finally:
                _request_local.length = None

    return _BenchHandler


_request_local = threading.local()


class BenchServer(ScriptedServer):
    """The project's scripted OpenAI-compatible server with TCP_NODELAY (unless
    ``nodelay=False``) and the wire size of each request body available to
    the responder."""

    def __init__(self, responder: Any = None, latency: float = 0.0, *, nodelay: bool = True) -> None:
        super().__init__(responder, latency)
        self.nodelay = nodelay
        httpd = getattr(self, "_httpd", None)
        if httpd is not None:
            httpd.RequestHandlerClass = _bench_handler_class(nodelay)


def request_length() -> int | None:
    """Content-Length of the request being answered (call from a responder)."""
    return getattr(_request_local, "length", None)


def root_step(body: dict[str, Any]) -> int:
    """Which root step a request is: 1 + the assistant turns it carries.
    Both harnesses send [system, user, (assistant, user)*] so this holds for
    either, and it keeps the responder stateless across repeated runs."""
    return 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def last_user_text(body: dict[str, Any]) -> str:
    return prompt_text(body)


class Router:
    """A stateless responder: root models map to ``fn(step, body) -> str``,
    sub-models to ``fn(prompt) -> Reply | str``. Every root request is logged
    with its arrival time (CLOCK_MONOTONIC, shared with the children), step
    and wire size."""

    def __init__(self) -> None:
        self.roots: dict[str, Callable[[int, dict[str, Any]], Any]] = {}
        self.subs: dict[str, Callable[[str], Any]] = {}
        self.log: list[dict[str, Any]] = []
        self.sub_counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        model = body.get("model", "")
        now = time.monotonic()
        if model in self.roots:
            step = root_step(body)
            entry = {
                "t": now, "model": model, "step": step, "bytes": request_length(),
                "last_user_chars": len(last_user_text(body)), "messages": len(body.get("messages", [])),
            }
            with self._lock:
                self.log.append(entry)
            return self.roots[model](step, body)
        if model in self.subs:
            with self._lock:
                self.sub_counts[model] = self.sub_counts.get(model, 0) + 1
            return self.subs[model](prompt_text(body))
        return Reply(text=f"unknown model {model!r}", status=404)

    def requests(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self.log if e["model"] == model]


def split_runs(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group one model's root requests into runs (a run starts at step 1)."""
    runs: list[list[dict[str, Any]]] = []
    for entry in sorted(entries, key=lambda e: e["t"]):
        if entry["step"] == 1 or not runs:
            runs.append([])
        runs[-1].append(entry)
    return runs


def step_gaps_ms(run: list[dict[str, Any]]) -> list[float]:
    """Time between consecutive root requests of one run: the harness's own
    work per step (parse, execute, feedback, bookkeeping) plus the server's
    ~1 ms, with no model time in it."""
    return [(b["t"] - a["t"]) * 1000 for a, b in zip(run, run[1:], strict=False)]
