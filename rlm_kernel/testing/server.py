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
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import anthropic, vision
from .faults import FAULT_KINDS, Faults  # noqa: F401 - also read from here
from .replies import Reply, Responder, Script, all_text, prompt_text, tokens  # noqa: F401 - also read from here


def _chunk(data: bytes) -> bytes:  # one chunk of a chunked body (empty: the body's end)
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


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
            images, problem = vision.read(body, owner.max_image_side, owner.max_images, owner.blind_models)
            owner.images += images
            if problem is not None:
                self._send_json(400, {"error": {"message": problem, "type": "invalid_request_error"}})
                return
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
            if self.path.endswith("/messages"):  # the Anthropic Messages API: testing/anthropic.py
                sent = anthropic.answer(self, body, reply)
                if sent is not None:
                    owner._answered(body, sent)
                return
            if reply.status != 200:
                error = {"error": {"message": reply.text or "scripted error", "type": "scripted"}}
                self._send_json(reply.status, error, reply.headers)
                return
            completion = self._completion(body, reply)
            if body.get("stream"):
                whole = self._send_stream(body, reply, completion)
            else:
                owner._stopped.wait(reply.generation_s())
                self._send_json(200, completion, reply.headers)
                whole = True
            if whole and not reply.empty_choices:
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

    def _send_stream(self, body: dict[str, Any], reply: Reply, full: dict[str, Any]) -> bool:
        """Server-sent events, chunked, paced like a model writing: reasoning
        deltas, then content deltas, a finish chunk, the usage chunk when the
        request asked for it (``stream_options.include_usage``), ``[DONE]``.
        False when the stream was broken off (``Reply.break_after``)."""
        head = {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"],
                "model": full["model"]}
        self.send_response(200)
        for key, value in {"Content-Type": "text/event-stream", **reply.headers}.items():
            self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        stopped = self.server.owner._stopped
        started = time.monotonic()
        if reply.ttft:
            stopped.wait(reply.ttft)
        pieces = [("reasoning_content", t) for t in tokens(reply.reasoning or "")]
        pieces += [("content", t) for t in tokens(reply.text or "")] or [("content", "")]
        if reply.empty_choices:  # only the usage comes
            self._event({**head, "choices": [], "usage": full["usage"]})
            self._end_stream(done=True)
            return True
        content_sent = 0
        for index, (name, piece) in enumerate(pieces):
            if reply.break_after is not None and name == "content" and content_sent >= reply.break_after:
                return self._break_off(reply)
            delta = {"role": "assistant", name: piece} if index == 0 else {name: piece}
            self._event({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            if reply.on_piece is not None:
                reply.on_piece(name, piece)
            content_sent += len(piece) if name == "content" else 0
            if reply.tokens_per_s:
                wait = started + reply.ttft + (index + 1) / reply.tokens_per_s - time.monotonic()
                if wait > 0:
                    stopped.wait(wait)
        if reply.break_after is not None:
            return self._break_off(reply)
        self._event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            if reply.usage_delay:
                stopped.wait(reply.usage_delay)
            self._event({**head, "choices": [], "usage": full["usage"]})
        self._end_stream(done=not reply.no_done)
        return True

    def _break_off(self, reply: Reply) -> bool:
        if reply.break_cleanly:
            self._end_stream(done=False)
        else:
            self._hang_up()
        return False

    def _event(self, payload: dict[str, Any]) -> None:
        self._write_chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(_chunk(data))
        self.wfile.flush()

    def _end_stream(self, done: bool) -> None:
        """``[DONE]`` (if ``done``) and the body's end in one write, as servers send them (apart, a busy
        process delayed the end past the client's close, and the client lost the connection)."""
        self.wfile.write((_chunk(b"data: [DONE]\n\n") if done else b"") + _chunk(b""))
        self.wfile.flush()

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

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.owner._lock:
            self.owner.connections += 1
        super().process_request(request, client_address)


class ScriptedServer:
    """``with ScriptedServer(Script(root=[...])) as server: server.url``"""

    def __init__(self, responder: Responder | None = None, latency: float = 0.0, *,
                 faults: Faults | None = None, blind_models: tuple[str, ...] = (), max_images: int | None = None,
                 max_image_side: int = 1024) -> None:
        self.responder: Responder = responder or Script()
        self.latency = latency
        self.faults = faults
        # image parts: refused (400) for these models, over this count or size (testing/vision.py)
        self.blind_models, self.max_images, self.max_image_side = blind_models, max_images, max_image_side
        self.images: list[vision.ReceivedImage] = []  # every image part received, in order
        self.requests: list[dict[str, Any]] = []
        self.injected: list[tuple[str, str]] = []  # (model, fault kind), in order
        self.answers: list[tuple[str, int, int]] = []  # (model, prompt tokens, completion tokens) sent
        self._stopped = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted: a client that keeps its connections makes few
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

