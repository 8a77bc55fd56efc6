"""A scripted OpenAI-compatible chat server on 127.0.0.1.

Tests and benchmarks talk to it over real HTTP through litellm, so every
layer of ours (retries, concurrency, ledger, parsing) runs for real. A
*responder* decides each reply from the request body; it may script root
replies, compute sub-call answers from the prompt, add latency, or inject
faults (429 with or without Retry-After, 5xx, malformed JSON, dropped
connections, empty choices). :class:`Faults` injects such faults at random,
with a fixed seed, into a given share of the requests, before the responder
sees them; the server counts what it injected and every completion it sent,
so a test can check the client's ledger against it.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server sends back for one request. ``text`` None sends a null
    ``content`` (as reasoning models do when all they wrote was thinking);
    ``reasoning`` is sent as the message's ``reasoning_content``."""

    text: str | None = ""
    reasoning: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None  # sent as-is (malformed or truncated JSON)
    delay: float = 0.0
    drop: bool = False  # close the connection without answering
    empty_choices: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


Responder = Callable[[dict[str, Any]], "Reply | str"]

FAULT_KINDS = (
    "429",  # rate-limited, no Retry-After
    "429-retry-after",  # rate-limited with Retry-After: Faults.retry_after
    "500",
    "503",
    "timeout",  # holds the request for Faults.hang seconds, then closes without an answer
    "reset",  # closes the connection with a TCP reset, no answer
    "truncated",  # a 200 whose body stops half-way (the connection closes early)
    "malformed",  # a 200 whose body is cut JSON (Content-Length matches it)
    "empty-choices",  # a 200 completion with "choices": [] (usage still sent)
)


@dataclass
class Faults:
    """Inject ``kinds`` of faults into a ``rate`` share of requests, drawn
    from a generator seeded with ``seed`` (the same seed gives the same
    sequence of draws; which request gets which draw follows arrival order).
    ``models`` limits the faults to requests for those model names."""

    rate: float = 0.1
    seed: int = 0
    kinds: Sequence[str] = FAULT_KINDS
    models: Collection[str] | None = None
    retry_after: float = 0.05
    hang: float = 5.0

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"unknown fault kinds {unknown}; choose from {', '.join(FAULT_KINDS)}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"the fault rate must be between 0 and 1, got {self.rate!r}")
        self.kinds = tuple(self.kinds)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self, model: str | None) -> str | None:
        """The fault for the next request for ``model`` (None: answer it)."""
        if self.models is not None and model not in self.models:
            return None
        with self._lock:
            if self._rng.random() >= self.rate:
                return None
            return self._rng.choice(self.kinds)


def prompt_text(body: dict[str, Any]) -> str:
    """The last user message of a request (the sub-call prompt)."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content)
            return content or ""
    return ""


def all_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            parts.extend(part.get("text", "") for part in content)
        elif content:
            parts.append(content)
    return "\n".join(parts)


class Script:
    """Routes by model name: root models get scripted replies in order, the
    rest get ``sub(prompt)``. ``root`` items may be strings, Replies, or
    callables taking the request body."""

    def __init__(
        self,
        root: Iterable[Any] = (),
        sub: Callable[[str], Reply | str] | None = None,
        root_models: tuple[str, ...] = ("root-model",),
        default_root: str = "FINAL(no more scripted replies)",
    ) -> None:
        self._root = list(root)
        self._lock = threading.Lock()
        self.sub = sub or (lambda prompt: f"echo: {prompt[:80]}")
        self.root_models = root_models
        self.default_root = default_root

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        if body.get("model") in self.root_models:
            with self._lock:
                item = self._root.pop(0) if self._root else self.default_root
            return item(body) if callable(item) else item
        return self.sub(prompt_text(body))


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; without TCP_NODELAY every
    # response waits ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # /v1/models, handy for health checks
        self._send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        owner._enter(body)
        try:
            fault = owner.faults.draw(body.get("model")) if owner.faults is not None else None
            if fault is not None:
                if owner.latency:
                    time.sleep(owner.latency)
                owner._injected(body, fault)
                self._inject(fault, body, owner.faults)
                return
            reply = owner.responder(body)
            if isinstance(reply, str) or reply is None:
                reply = Reply(text=reply or "")
            delay = reply.delay or owner.latency
            if delay:
                time.sleep(delay)
            if reply.drop:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if reply.raw_body is not None:
                self._send_raw(reply.status, reply.raw_body, reply.headers)
                return
            if reply.status != 200:
                error = {"error": {"message": reply.text or "scripted error", "type": "scripted"}}
                self._send_json(reply.status, error, reply.headers)
                return
            completion = self._completion(body, reply)
            if body.get("stream"):
                self._send_stream(body, reply)
            else:
                self._send_json(200, completion, reply.headers)
            if not reply.empty_choices:
                owner._answered(body, completion["usage"])
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up on this request
        finally:
            owner._leave()

    def _inject(self, fault: str, body: dict[str, Any], faults: Faults) -> None:
        if fault in ("429", "429-retry-after", "500", "503"):
            status = int(fault[:3])
            headers = {"Retry-After": f"{faults.retry_after:g}"} if fault == "429-retry-after" else None
            error = {"error": {"message": f"injected fault {fault}", "type": "injected"}}
            self._send_json(status, error, headers)
        elif fault == "timeout":
            self.server.owner._stopped.wait(faults.hang)
            self._hang_up()
        elif fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._hang_up()
        elif fault in ("truncated", "malformed"):
            data = json.dumps(self._completion(body, Reply(text="an answer that never arrives whole"))).encode()
            cut = data[: len(data) // 2]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data) if fault == "truncated" else len(cut)))
            self.end_headers()
            self.wfile.write(cut)
            if fault == "truncated":
                self._hang_up()
        else:  # empty-choices
            self._send_json(200, self._completion(body, Reply(text="", empty_choices=True)))

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.connection.close()  # with SO_LINGER 0 (reset) this sends an RST
        except OSError:
            pass

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        text = reply.text or ""
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = max(1, len(all_text(body)) // 4)
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = max(1, (len(text) + len(reply.reasoning or "")) // 4)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        choices = [] if reply.empty_choices else [{"index": 0, "message": message, "finish_reason": "stop"}]
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:12],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _send_stream(self, body: dict[str, Any], reply: Reply) -> None:
        full = self._completion(body, reply)
        delta: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
        if reply.reasoning is not None:
            delta["reasoning_content"] = reply.reasoning
        chunks = [
            {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"],
             "model": full["model"], "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"],
             "model": full["model"], "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": full["usage"]},
        ]
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        data += b"data: [DONE]\n\n"
        self._send_raw(200, data, {"Content-Type": "text/event-stream"})

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), headers)

    def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        merged = {"Content-Type": "application/json", **(headers or {})}
        for key, value in merged.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    owner: ScriptedServer


class ScriptedServer:
    """``with ScriptedServer(Script(root=[...])) as server: server.url``"""

    def __init__(self, responder: Responder | None = None, latency: float = 0.0, *,
                 faults: Faults | None = None) -> None:
        self.responder: Responder = responder or Script()
        self.latency = latency
        self.faults = faults
        self.requests: list[dict[str, Any]] = []
        self.injected: list[tuple[str, str]] = []  # (model, fault kind), in order
        self.answers: list[tuple[str, int, int]] = []  # (model, prompt tokens, completion tokens) sent
        self._stopped = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _enter(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _injected(self, body: dict[str, Any], fault: str) -> None:
        with self._lock:
            self.injected.append((body.get("model", ""), fault))

    def _answered(self, body: dict[str, Any], usage: dict[str, int]) -> None:
        with self._lock:
            self.answers.append((body.get("model", ""), usage["prompt_tokens"], usage["completion_tokens"]))

    def fault_counts(self, model: str | None = None) -> Counter[str]:
        """How many faults of each kind were injected (for ``model``, or all)."""
        with self._lock:
            return Counter(kind for name, kind in self.injected if model is None or name == model)

    def answered(self, model: str | None = None) -> dict[str, int]:
        """Completions with an answer that the server sent in full, and the
        usage they reported: what a client's ledger should add up to."""
        with self._lock:
            rows = [a for a in self.answers if model is None or a[0] == model]
        return {"calls": len(rows), "prompt_tokens": sum(r[1] for r in rows),
                "completion_tokens": sum(r[2] for r in rows)}

    def calls(self, model: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if model is None or r.get("model") == model]

