"""A run as OpenTelemetry spans, after the GenAI semantic conventions.

One tree per root run: the run is an agent invocation (``invoke_agent
rlm``); under it each root call is a chat span (``chat MODEL``) and each
generated code cell a tool execution (``execute_tool repl``), with the
sub-calls its code made as chat spans under the cell and each child run
(``rlm_query``) as an agent invocation of its own there, with the same
shape below it. Spans carry models, tokens (prompt-cache reads and writes
when the call's record has them), cost, the cell's status, the run id and
the notebook's path; prompts, replies, code and outputs only with
``content`` (``--trace-content``), and then with secrets redacted.

The spans are built from the run's events, after the fact: a call's span
starts its recorded latency before the event that says it ended. Sub-calls
answered from the notebook (a replay) made no model call and get no span.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

from ..engine.trajectory.cells import rlm_meta, source
from ..engine.trajectory.sink import Sink
from ..redaction import redact
from . import otlp

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.trajectory.records import SubcallRecord
    from ..engine.trajectory.result import RunResult
    from ..engine.trajectory.sink import RunView

AGENT = "rlm"
TOOL = "repl"  # the fence the root model's code comes in
CONTENT_CHARS = 20_000  # of one prompt, reply, code or output, with --trace-content


def _ns(seconds_ago: float = 0.0) -> int:
    return time.time_ns() - int(max(0.0, seconds_ago) * 1e9)


def provider_of(model: str | None) -> str | None:
    """``openai`` for ``openai/gpt-4o-mini``: litellm's provider prefix."""
    return model.split("/", 1)[0] if model and "/" in model else None


def usage_attributes(usage: dict[str, Any]) -> dict[str, Any]:
    """A call's (or a ledger's) tokens and cost as span attributes."""
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": int(usage.get("prompt_tokens") or 0),
        "gen_ai.usage.output_tokens": int(usage.get("completion_tokens") or 0),
    }
    if usage.get("cache_read_tokens") is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = int(usage["cache_read_tokens"])
    if usage.get("cache_write_tokens") is not None:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = int(usage["cache_write_tokens"])
    if usage.get("cost_usd") is not None:
        attributes["rlm.cost_usd"] = float(usage["cost_usd"])
    return attributes


def _text(value: Any) -> str:
    return redact(str(value))[:CONTENT_CHARS]


def _messages(role: str, text: str) -> str:
    """A GenAI conventions message list of one text part, as JSON."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": _text(text)}]}], ensure_ascii=False)


class TraceSink(Sink):
    """Spans for one run (a child run gets its own, from :meth:`child_sink`)."""

    def __init__(self, tracer: Any, *, content: bool = False, notebook: str | None = None,
                 parent: Any = None) -> None:
        self.tracer, self.content, self.notebook, self.parent = tracer, content, notebook, parent
        self.span: Any = None  # the run's invoke_agent span
        self.cells: dict[str, Any] = {}  # cell id -> its open (or ended) execute_tool span
        self.pending: dict[str, Any] | None = None  # the last root call, drawn once its step's cells are in
        self.seen_calls: set[str] = set()
        self.lock = threading.Lock()

    # -- the run ------------------------------------------------------------------------
    def run_started(self, run: RunView) -> None:
        from opentelemetry import trace

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT, "gen_ai.agent.id": run.run_id,
            "gen_ai.request.model": run.model, "rlm.run_id": run.run_id, "rlm.depth": run.depth,
            "rlm.max_iterations": run.max_iterations,
        }
        if provider_of(run.model):
            attributes["gen_ai.provider.name"] = provider_of(run.model)
        if self.notebook:
            attributes["rlm.notebook"] = self.notebook
        if run.follows:
            attributes["rlm.follows"] = run.follows
        if self.content:
            attributes["gen_ai.input.messages"] = _messages("user", run.query)
        context = trace.set_span_in_context(self.parent) if self.parent is not None else None
        self.span = self.tracer.start_span(f"invoke_agent {AGENT}", context=context, kind=trace.SpanKind.INTERNAL,
                                           attributes=attributes)

    def run_ended(self, run: RunView, result: RunResult) -> None:
        from opentelemetry.trace import Status, StatusCode

        with self.lock:
            self._draw_root_call(run)
            for span in self.cells.values():
                if span.is_recording():
                    span.end()
        span = self.span
        if span is None:
            return
        span.set_attribute("rlm.reason", result.reason)
        span.set_attribute("rlm.steps", result.iterations)
        span.set_attribute("rlm.subcalls", result.subcalls)
        if run.depth == 0:  # the ledger is the whole tree's: said once, on the root run
            totals: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0, "cache_read_tokens": 0,
                                      "cache_write_tokens": 0}
            for usage in result.usage.values():
                for key in totals:
                    totals[key] += int(usage.get(key) or 0)
            span.set_attributes(usage_attributes({**totals, "cost_usd": result.cost_usd}))
        if self.content and result.reason == "final":
            span.set_attribute("gen_ai.output.messages", _messages("assistant", result.answer_text))
        if result.reason == "error":
            span.set_attribute("error.type", "run_error")
            span.set_status(Status(StatusCode.ERROR, redact(result.error or "") if self.content else None))
        span.end()
        if run.depth == 0:
            otlp.flush()

    # -- root calls: the step's first cell carries the call's usage -----------------------
    def cell_added(self, run: RunView, cell: NotebookNode, after: str | None) -> None:
        self._root_call(run, cell)

    def cell_updated(self, run: RunView, cell: NotebookNode) -> None:
        self._root_call(run, cell)

    def _root_call(self, run: RunView, cell: NotebookNode) -> None:
        meta = rlm_meta(cell)
        usage = meta.get("root_call")
        if not usage or meta.get("role") not in ("thought", "code"):
            return
        with self.lock:
            if self.pending is not None and self.pending["cell"] == cell.get("id"):
                return
            self._draw_root_call(run)
            self.pending = {"cell": cell.get("id"), "step": meta.get("step"), "usage": dict(usage),
                            "end": _ns()}

    def _draw_root_call(self, run: RunView) -> None:
        """The pending root call as a span, now that its step's cells are known (its reply, with content)."""
        from opentelemetry import trace

        pending, self.pending = self.pending, None
        if pending is None or self.span is None:
            return
        usage = pending["usage"]
        model = usage.get("model") or run.model
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.model": model,
                      "rlm.call": "root", "rlm.step": pending["step"], "rlm.run_id": run.run_id,
                      **usage_attributes(usage)}
        if provider_of(model):
            attributes["gen_ai.provider.name"] = provider_of(model)
        if self.content:
            reply = "\n\n".join(_cell_reply(c) for c in run.cells if rlm_meta(c).get("step") == pending["step"]
                                and rlm_meta(c).get("role") in ("thought", "code"))
            attributes["gen_ai.output.messages"] = _messages("assistant", reply)
        end = pending["end"]
        start = end - int(float(usage.get("latency_s") or 0.0) * 1e9)
        span = self.tracer.start_span(f"chat {model}", context=trace.set_span_in_context(self.span),
                                      kind=trace.SpanKind.CLIENT, attributes=attributes, start_time=start)
        span.end(end_time=end)

    # -- cells --------------------------------------------------------------------------
    def cell_started(self, run: RunView, cell: NotebookNode) -> None:
        with self.lock:
            self._draw_root_call(run)
            self.cells[cell.id] = self._cell_span(run, cell)

    def _cell_span(self, run: RunView, cell: NotebookNode, start: int | None = None) -> Any:
        from opentelemetry import trace

        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": TOOL,
                      "gen_ai.tool.type": "extension", "gen_ai.tool.call.id": cell.id,
                      "rlm.step": rlm_meta(cell).get("step"), "rlm.run_id": run.run_id}
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = _text(source(cell))
        context = trace.set_span_in_context(self.span) if self.span is not None else None
        return self.tracer.start_span(f"execute_tool {TOOL}", context=context, kind=trace.SpanKind.INTERNAL,
                                      attributes={k: v for k, v in attributes.items() if v is not None},
                                      start_time=start)

    def cell_finished(self, run: RunView, cell: NotebookNode) -> None:
        from opentelemetry.trace import Status, StatusCode

        meta = rlm_meta(cell)
        with self.lock:
            span = self.cells.get(cell.id)
            if span is None or not span.is_recording():  # a cell skipped without running
                self._draw_root_call(run)
                span = self.cells[cell.id] = self._cell_span(run, cell)
        status = meta.get("status") or "ok"
        span.set_attribute("rlm.cell.status", status)
        span.set_attribute("rlm.subcalls", len(meta.get("subcalls") or []))
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", _text(_outputs(cell)))
        if status == "error":
            name = _error_name(cell)
            span.set_attribute("error.type", name or "error")
            span.set_status(Status(StatusCode.ERROR, name))
        span.end()

    # -- sub-calls and child runs --------------------------------------------------------------
    def subcall(self, run: RunView, record: SubcallRecord) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        if record.kind != "llm" or record.replayed or record.status not in ("done", "error"):
            return  # a child run is its own invoke_agent span; a replayed call called nothing
        with self.lock:
            if record.id in self.seen_calls:
                return
            self.seen_calls.add(record.id)
            parent = self.cells.get(record.cell_id or "") or self.span
        if parent is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": record.model,
            "gen_ai.response.model": record.model, "rlm.call": "sub", "rlm.subcall.id": record.id,
            "rlm.run_id": run.run_id,
            **usage_attributes({"prompt_tokens": record.prompt_tokens, "completion_tokens": record.completion_tokens,
                                "cost_usd": record.cost_usd,
                                "cache_read_tokens": getattr(record, "cache_read_tokens", None),
                                "cache_write_tokens": getattr(record, "cache_write_tokens", None)}),
        }
        if provider_of(record.model):
            attributes["gen_ai.provider.name"] = provider_of(record.model)
        if record.batch:
            attributes["rlm.batch"] = record.batch
        if record.attempts > 1:
            attributes["rlm.attempts"] = record.attempts
        if self.content:
            attributes["gen_ai.input.messages"] = _messages("user", record.prompt)
            if record.response is not None:
                attributes["gen_ai.output.messages"] = _messages("assistant", record.response)
        end = _ns()
        span = self.tracer.start_span(f"chat {record.model}", context=trace.set_span_in_context(parent),
                                      kind=trace.SpanKind.CLIENT, attributes=attributes,
                                      start_time=end - int(float(record.latency_s or 0.0) * 1e9))
        if record.status == "error":
            span.set_attribute("error.type", "subcall_error")
            span.set_status(Status(StatusCode.ERROR, redact(record.error or "") if self.content else None))
        span.end(end_time=end)

    def child_sink(self, run: RunView, record: SubcallRecord) -> Sink | None:
        with self.lock:
            parent = self.cells.get(record.cell_id or "") or self.span
        return TraceSink(self.tracer, content=self.content, notebook=self.notebook, parent=parent)


def _cell_reply(cell: Any) -> str:
    return source(cell) if cell.get("cell_type") == "markdown" else f"```repl\n{source(cell)}\n```"


def _outputs(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs") or []:
        if output.get("output_type") == "stream":
            text = output.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else text)
        elif output.get("output_type") == "error":
            parts.append(f"{output.get('ename')}: {output.get('evalue')}")
        elif "text/plain" in (output.get("data") or {}):
            text = output["data"]["text/plain"]
            parts.append("".join(text) if isinstance(text, list) else text)
    return "".join(parts)


def _error_name(cell: Any) -> str | None:
    """The exception's class name (never its message: that may quote the data)."""
    for output in cell.get("outputs") or []:
        if output.get("output_type") == "error":
            return str(output.get("ename") or "") or None
    return None


def trace_sink(notebook: str | None) -> TraceSink:
    """A root run's trace sink, on this process's tracer."""
    return TraceSink(otlp.tracer(), content=otlp.content_on(), notebook=notebook)


__all__ = ["TraceSink", "provider_of", "trace_sink", "usage_attributes"]
