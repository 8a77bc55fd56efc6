"""Capturing what a generated cell outputs, per thread and bounded.

A cell's stdout/stderr, displays, results and errors are recorded as
nbformat outputs. Streams keep their head and a rolling tail, so a cell that
prints gigabytes costs a bounded amount of memory; the root model gets a
smaller head-and-tail view of the whole. With ``passthrough`` (inside a
kernel) everything still reaches the frontend as usual, up to the same bound.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ...redaction import Redactor
from ..protocol.reply import strip_ansi, truncate_middle

_local = threading.local()


def current() -> CellCapture | None:
    return getattr(_local, "capture", None)


def is_subcall_view(output: dict[str, Any]) -> bool:
    """Whether an output is a view of the cell's own sub-calls (marked
    ``metadata.rlm.subcall_view``): the code already holds their results,
    so the root model is not shown it."""
    return bool((output.get("metadata") or {}).get("rlm", {}).get("subcall_view"))


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """This thread's output goes on as if no cell were being captured (UI
    updates run while a cell waits on sub-calls)."""
    previous = current()
    _local.capture = None
    try:
        yield
    finally:
        _local.capture = previous


class BoundedText:
    """Keeps the first ``head_limit`` and last ``tail_limit`` characters of a
    stream and counts the rest."""

    def __init__(self, head_limit: int, tail_limit: int) -> None:
        self.head_limit = head_limit
        self.tail_limit = tail_limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self.total = 0

    def write(self, text: str) -> None:
        self.total += len(text)
        if self._head_len < self.head_limit:
            take = text[: self.head_limit - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            if len(text) - len(take) > self.tail_limit:
                text = text[-self.tail_limit :]
            else:
                text = text[len(take) :]
        if len(text) > self.tail_limit:
            text = text[-self.tail_limit :]  # slice only what the tail keeps (no copy of gigabytes)
        if text:
            self._tail.append(text)
            self._tail_len += len(text)
            if self._tail_len > 2 * self.tail_limit:
                joined = "".join(self._tail)[-self.tail_limit :]
                self._tail = [joined]
                self._tail_len = len(joined)

    @property
    def kept(self) -> int:
        return self._head_len + min(self._tail_len, self.tail_limit)

    @property
    def truncated(self) -> bool:
        return self.total > self._head_len + self._tail_len

    def value(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.truncated:
            return head + tail
        tail = tail[-self.tail_limit :]
        omitted = self.total - len(head) - len(tail)
        return f"{head}\n[... {omitted:,} characters omitted ...]\n{tail}"


MAX_RICH_OUTPUTS = 1000  # displays and results kept per cell; more are counted, not kept
_MIN_SEGMENT = 2000  # a stream segment gets at least this much room


class CellCapture:
    """The outputs of one cell, in order, as nbformat-shaped dicts. All the
    cell's stream segments share ``max_stored_chars``: once it is used up,
    text goes on in the latest segment of its stream (keeping its tail), so a
    cell that alternates stdout and stderr a million times stays bounded too."""

    def __init__(self, *, passthrough: bool = False, max_stored_chars: int = 200_000) -> None:
        self.passthrough = passthrough
        self.max_stored_chars = max_stored_chars
        self._items: list[Any] = []  # dicts, or [name, BoundedText] for streams
        self._displays: dict[str, dict[str, Any]] = {}
        self._forwarded = 0
        self.suppressed = 0
        self._segments: dict[str, BoundedText] = {}  # the latest segment of each stream
        self._closed_kept = 0  # characters kept by segments that other output followed
        self._rich = 0
        self.dropped = 0  # displays and results not kept (over MAX_RICH_OUTPUTS)
        self._redactor = Redactor()
        self.execution_count: int | None = None
        self._lock = threading.Lock()

    def redact(self, text: str) -> str:
        """``text`` with any API key or token replaced (code may print os.environ)."""
        return self._redactor.text(text)

    def redact_bundle(self, data: dict[str, Any]) -> dict[str, Any]:
        """A MIME bundle with its text values redacted, and binary values
        (a PNG formatter's bytes) base64 text, as a notebook keeps them."""
        data = {k: base64.b64encode(v).decode("ascii") if isinstance(v, (bytes, bytearray)) else v
                for k, v in data.items()}
        return self._redactor.bundle(data)

    # -- streams -------------------------------------------------------------
    def stream(self, name: str, text: str) -> bool:
        """Record stream text; True if it may also go to the real stream."""
        with self._lock:
            last = self._items[-1] if self._items else None
            if isinstance(last, list) and last[0] == name:
                buffer = last[1]
            else:
                if isinstance(last, list):
                    self._closed_kept += last[1].kept
                room = self.max_stored_chars - self._closed_kept
                if room < _MIN_SEGMENT and name in self._segments:
                    buffer = self._segments[name]  # out of room: no new segment
                else:
                    half = max(room, _MIN_SEGMENT) // 2
                    buffer = BoundedText(half, half)
                    self._items.append([name, buffer])
                    self._segments[name] = buffer
            buffer.write(text)
            if self._forwarded + len(text) <= self.max_stored_chars:
                self._forwarded += len(text)
                return self.passthrough
            self.suppressed += len(text)
            return False

    # -- rich outputs --------------------------------------------------------
    def display(self, data: dict[str, Any], metadata: dict[str, Any] | None = None,
                transient: dict[str, Any] | None = None, update: bool = False) -> None:
        display_id = (transient or {}).get("display_id")
        with self._lock:
            if update and display_id in self._displays:
                self._displays[display_id]["data"] = self.redact_bundle(data)
                self._displays[display_id]["metadata"] = dict(metadata or {})
                return
            if not self._room_for_rich():
                return
            output = {"output_type": "display_data", "data": self.redact_bundle(data), "metadata": dict(metadata or {})}
            if display_id:
                self._displays[display_id] = output
            self._items.append(output)

    def _room_for_rich(self) -> bool:
        self._rich += 1
        if self._rich <= MAX_RICH_OUTPUTS:
            return True
        self.dropped += 1
        return False

    def result(self, data: dict[str, Any], metadata: dict[str, Any] | None, execution_count: int | None) -> None:
        with self._lock:
            if not self._room_for_rich():
                return
            self._items.append({
                "output_type": "execute_result", "data": self.redact_bundle(data),
                "metadata": dict(metadata or {}), "execution_count": execution_count,
            })

    def error(self, ename: str, evalue: str, traceback: list[str]) -> None:
        with self._lock:
            self._items.append({"output_type": "error", "ename": ename, "evalue": self.redact(evalue),
                                "traceback": [self.redact(line) for line in traceback]})

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._displays.clear()
            self._segments.clear()
            self._closed_kept = 0

    # -- reading -------------------------------------------------------------
    def outputs(self) -> list[dict[str, Any]]:
        result = []
        with self._lock:
            for item in self._items:
                if isinstance(item, list):
                    result.append({"output_type": "stream", "name": item[0], "text": item[1].value()})
                else:
                    result.append(item)
            if self.dropped:
                result.append({"output_type": "stream", "name": "stderr",
                               "text": f"[rlm: {self.dropped:,} more displayed outputs were not kept]\n"})
        return result

    def model_view(self, limit: int) -> tuple[str, int]:
        """(head-and-tail text for the root model, total characters)."""
        parts: list[str] = []
        total = 0
        with self._lock:
            items = list(self._items)
        for item in items:
            if isinstance(item, list):
                parts.append(item[1].value())
                total += item[1].total
                continue
            kind = item["output_type"]
            if is_subcall_view(item):
                continue
            if kind == "error":
                text = _error_text(item)
            else:
                text = _data_text(item.get("data", {}))
                if text and not text.endswith("\n"):
                    text += "\n"
            parts.append(text)
            total += len(text)
        text = self.redact("".join(parts))
        if len(text) <= limit:
            return text, total  # any omission is already marked inside the text
        return truncate_middle(text, limit, total=max(total, len(text))), total


def outputs_view(outputs: list[dict[str, Any]], limit: int) -> tuple[str, int]:
    """The root model's view of a cell's saved nbformat outputs (used when a
    run's history is rebuilt from a notebook)."""
    parts = []
    for item in outputs:
        kind = item.get("output_type")
        if kind == "stream":
            text = item.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else text)
        elif kind == "error":
            parts.append(_error_text(item))
        elif is_subcall_view(item):
            continue
        else:
            text = _data_text(item.get("data", {}))
            parts.append(text + ("\n" if text and not text.endswith("\n") else ""))
    text = "".join(parts)
    return truncate_middle(text, limit), len(text)


def _data_text(data: dict[str, Any]) -> str:
    if "text/plain" in data:
        plain = data["text/plain"]
        return "".join(plain) if isinstance(plain, list) else str(plain)
    kinds = ", ".join(sorted(data))
    return f"[display: {kinds}]"


def _error_text(item: dict[str, Any]) -> str:
    lines = strip_ansi("\n".join(item.get("traceback") or [])).splitlines()
    if len(lines) > 30:
        lines = lines[:5] + ["..."] + lines[-25:]
    body = "\n".join(lines).strip()
    head = f"{item.get('ename')}: {item.get('evalue')}"
    return f"{body}\n" if head in body else f"{body}\n{head}\n".lstrip("\n")


class StreamRouter:
    """Stands in for sys.stdout / sys.stderr: text written by a thread that is
    capturing a cell goes to that cell's capture; other text goes on as usual."""

    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.target = target

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        capture = current()
        if capture is None:
            self.target.write(text)
            return len(text)
        safe = capture.redact(text)
        if capture.stream(self.name, safe):
            self.target.write(safe)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.target.flush()
        except Exception:
            pass

    def close(self) -> None:
        """Generated code may close sys.stdout; the process's stream stays open."""

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.target, attr)


_install_lock = threading.Lock()


def install_stream_routers() -> dict[str, StreamRouter]:
    """Make sys.stdout/sys.stderr routers (wrapping whatever they are now)."""
    routers = {}
    with _install_lock:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, StreamRouter):
                stream = StreamRouter(name, stream)
                setattr(sys, name, stream)
            routers[name] = stream
    return routers


@contextlib.contextmanager
def capturing(capture: CellCapture) -> Iterator[CellCapture]:
    """Route this thread's output to ``capture``; put back sys.stdout and
    sys.stderr if the code replaced them."""
    routers = install_stream_routers()
    previous = current()
    _local.capture = capture
    try:
        yield capture
    finally:
        _local.capture = previous
        with _install_lock:
            for name, router in routers.items():
                if getattr(sys, name) is not router:
                    setattr(sys, name, router)
        if capture.suppressed and capture.passthrough:
            routers["stdout"].target.write(
                f"\n[rlm: {capture.suppressed:,} more characters of output were not shown]\n"
            )
