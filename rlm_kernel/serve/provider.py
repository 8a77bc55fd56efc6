"""The RLM as a litellm model: a custom provider (litellm's ``CustomLLM``).

Registered under the provider name ``rlm``, ``litellm.completion(model=
"rlm/<root model>", messages=...)`` runs an RLM (see ``request.py`` for how
messages become the context and the query). The reply is the answer; the
usage and cost are the run's totals, and an ``rlm`` object in the response
is the run's ``rlm-kernel run --json`` object without the answer (run id,
reason, error, iterations, sub-calls, usage per model, trajectory notebook).
With ``stream=True``, progress (run start, each step with its sub-calls, a
running count of sub-calls) streams as reasoning content, then the answer.

litellm is imported only when a handler is made (:func:`handler`): the
class derives from ``CustomLLM`` then. The proxy loads the handler as
``rlm_kernel.serve.provider.rlm_handler`` (a module attribute made on first
access) with its settings from the file named by ``$RLM_SERVE_SETTINGS``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._words import plural
from ..engine.runs.options import resolve
from ..engine.trajectory.sink import Sink
from ..errors import ContextError, ModelError, RLMError
from ..redaction import redact
from ..sinks.stopper import RunStopper as _Started  # the run, interrupted from the request's side
from .request import BadRequest, RunRequest, keep_context, read_request

PROVIDER = "rlm"
SETTINGS_ENV = "RLM_SERVE_SETTINGS"
RUN_THREADS = 32  # runs at once in one process; each holds a thread while its code runs


@dataclass
class ServeSettings:
    """What every run of a handler shares: where trajectories go and the run
    options (``model`` comes from each call's model name when not set)."""

    runs_dir: str = "rlm-runs"
    options: dict[str, Any] = field(default_factory=dict)
    call_endpoint: bool = True  # use a call's api_base / api_key (the SDK); behind the proxy: never

    @classmethod
    def from_file(cls, path: str) -> ServeSettings:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
        return cls(runs_dir=saved["runs_dir"], options=saved["options"], call_endpoint=False)


class RLMProvider:
    """The handler's methods; :func:`handler` puts them on a ``CustomLLM``."""

    def __init__(self, settings: ServeSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or ServeSettings()
        resolve(self.settings.options)  # a bad option fails here, not at the first request
        self._threads = concurrent.futures.ThreadPoolExecutor(RUN_THREADS, thread_name_prefix="rlm-serve")
        from ..builder import ModelClients

        self._clients = ModelClients()  # one Router per router file, so its cooldowns span requests

    # -- litellm's entry points (every argument comes as a keyword) --------------------
    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        request, rlm = self._prepare(model, messages, kwargs)
        return self._response(model, self._run(rlm, request))

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        request, rlm = self._prepare(model, messages, kwargs)
        started = _Started()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._threads, self._run, rlm, request, started)
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            started.interrupt()  # the caller was cancelled: stop the run (its notebook says so)
            raise
        return self._response(model, result)

    # Streaming: the request is read before the first chunk, so a bad one is an HTTP error.
    def streaming(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
        request, rlm = self._prepare(model, messages, kwargs)
        return self._stream(model, request, rlm)

    def astreaming(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        request, rlm = self._prepare(model, messages, kwargs)
        return self._astream(model, request, rlm)

    def _stream(self, model: str, request: RunRequest, rlm: Any) -> Iterator[Any]:
        import queue

        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        progress = _Progress(events.put)
        future = self._threads.submit(self._run, rlm, request, progress)
        future.add_done_callback(lambda _: events.put(None))
        try:
            yield _chunk(reasoning=_opening(request))
            while (text := events.get()) is not None:
                yield _chunk(reasoning=text)
            yield self._last_chunk(model, future.result())
        finally:
            if not future.done():
                progress.interrupt()  # the caller stopped reading

    async def _astream(self, model: str, request: RunRequest, rlm: Any) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        progress = _Progress(lambda text: loop.call_soon_threadsafe(events.put_nowait, text))
        future = loop.run_in_executor(self._threads, self._run, rlm, request, progress)
        future.add_done_callback(lambda _: events.put_nowait(None))
        try:
            yield _chunk(reasoning=_opening(request))
            while (text := await events.get()) is not None:
                yield _chunk(reasoning=text)
            yield self._last_chunk(model, future.result())
        finally:
            if not future.done():
                progress.interrupt()  # the client went away

    # -- a run -------------------------------------------------------------------------
    def _prepare(self, model: str, messages: list[Any], kwargs: dict[str, Any]) -> tuple[RunRequest, Any]:
        from ..api import RLM

        options = dict(self.settings.options)
        if not options.get("model"):
            options["model"] = model
        if self.settings.call_endpoint:
            if kwargs.get("api_base") and not options.get("api_base"):
                options["api_base"] = kwargs["api_base"]
            if kwargs.get("api_key") and not options.get("api_key"):
                options["api_key"] = kwargs["api_key"]
        try:
            request = read_request(messages, kwargs.get("optional_params"), resolve(options))
            rlm = RLM(**{**options, **request.options})
        except ModelError as error:
            raise _error(503, str(error)) from None
        except RLMError as error:
            raise _error(400, str(error)) from None
        if rlm.options.router:
            rlm.client = self._clients.get(rlm.options)
        return request, rlm

    def _run(self, rlm: Any, request: RunRequest, sink: Sink | None = None) -> Any:
        folder = Path(self.settings.runs_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            stem = folder / f"rlm-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
            sources = keep_context(request.context, stem)
        except OSError as error:
            raise _error(500, f"Cannot write to the runs folder {str(folder)!r}: {error.strerror or error}.") from None
        try:
            return rlm.completion(request.context, request.query, output=str(stem) + ".ipynb", sources=sources,
                                  sink=sink)
        except (BadRequest, ContextError) as error:
            raise _error(400, str(error)) from None
        except ModelError as error:
            raise _error(503, str(error)) from None
        except RLMError as error:
            raise _error(500, str(error)) from None

    def _response(self, model: str, result: Any) -> Any:
        from litellm import ModelResponse

        _raise_if_failed(result)
        response = ModelResponse(model=model, choices=[{
            "index": 0, "finish_reason": _finish_reason(result),
            "message": {"role": "assistant", "content": _answer(result)}}], usage=_usage(result))
        response.rlm = rlm_object(result)
        if result.cost_usd is not None:
            response._hidden_params["response_cost"] = result.cost_usd
        return response

    def _last_chunk(self, model: str, result: Any) -> Any:
        _raise_if_failed(result)
        last = _chunk(content=_answer(result) or " ", finish_reason=_finish_reason(result), model=model)
        from litellm.types.utils import Usage

        last.usage = Usage(**_usage(result))  # on a chunk with content, or litellm drops it
        last.rlm = rlm_object(result)
        last.provider_specific_fields = {}  # not None: else the proxy's fast path leaves `rlm` out
        if result.cost_usd is not None:
            last._hidden_params["response_cost"] = result.cost_usd
        return last


def rlm_object(result: Any) -> dict[str, Any]:
    """The response's ``rlm`` object: ``run --json`` without the answer."""
    record = result.to_json()
    record.pop("answer", None)
    return record


def _answer(result: Any) -> str:
    return result.answer_text if result.reason == "final" else ""


def _finish_reason(result: Any) -> str:
    return "stop" if result.reason == "final" else "length"


def _usage(result: Any) -> dict[str, int]:
    prompt = sum(u.get("prompt_tokens", 0) for u in result.usage.values())
    completion = sum(u.get("completion_tokens", 0) for u in result.usage.values())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _raise_if_failed(result: Any) -> None:
    """A run whose root model failed has no answer to give: an error, not a reply."""
    if result.reason == "error":
        where = f" (its trajectory: {result.notebook_path})" if result.notebook_path else ""
        raise _error(502, f"The RLM run ended with an error: {result.error}{where}")


def _opening(request: RunRequest) -> str:
    context = request.context
    size = f"{len(context):,} characters" if isinstance(context, str) else plural(len(context), "message")
    return f"RLM run on a context of {size}\n"


def _error(status: int, message: str) -> Exception:
    from litellm.llms.custom_llm import CustomLLMError

    return CustomLLMError(status_code=status, message=redact(message))


def _chunk(*, reasoning: str | None = None, content: str | None = None, finish_reason: str | None = None,
           model: str | None = None) -> Any:
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    delta = Delta(role="assistant", content=content if content is not None else "",
                  **({"reasoning_content": reasoning} if reasoning is not None else {}))
    chunk = ModelResponseStream(choices=[StreamingChoices(index=0, delta=delta, finish_reason=finish_reason)])
    if model:
        chunk.model = model
    return chunk


class _Progress(_Started):
    """Progress of the root run as lines of text: each step and its
    sub-calls, and while sub-calls run, their count at most once a second."""

    def __init__(self, say: Any) -> None:
        super().__init__()
        self.say = say
        self.shown = 0
        self.last = 0.0

    def cell_finished(self, run: Any, cell: Any) -> None:
        if run.depth:
            return
        meta = cell.metadata.get("rlm", {})
        if meta.get("role") != "code":
            return
        calls = len(meta.get("subcalls", []))
        first = next((line for line in cell.source.splitlines() if line.strip()), "")[:70]
        extra = f", {plural(calls, 'sub-call')}" if calls else ""
        self.say(f"step {meta.get('step')}: {meta.get('status')}{extra}: {first}\n")

    def status(self, run: Any, status: dict[str, Any]) -> None:
        now = time.monotonic()
        if run.depth == 0 and status["subcalls"] != self.shown and now - self.last >= 1.0:
            self.shown, self.last = status["subcalls"], now
            self.say(f"  {plural(status['subcalls'], 'sub-call')} so far, {status['tokens']:,} tokens\n")

    def run_ended(self, run: Any, result: Any) -> None:
        if run.depth == 0:
            self.say(f"run {result.run_id} ended ({result.reason}) after {plural(result.iterations, 'step')} "
                     f"and {plural(result.subcalls, 'sub-call')}\n")


def handler(settings: ServeSettings | None = None) -> Any:
    """A handler to register as a litellm custom provider (a ``CustomLLM``)."""
    from litellm import CustomLLM

    cls = type("RLMHandler", (RLMProvider, CustomLLM), {"__module__": __name__})
    return cls(settings)


def __getattr__(name: str) -> Any:
    # The proxy's config names `rlm_kernel.serve.provider.rlm_handler`.
    if name == "rlm_handler":
        path = os.environ.get(SETTINGS_ENV)
        made = handler(ServeSettings.from_file(path) if path else None)
        globals()["rlm_handler"] = made
        return made
    raise AttributeError(name)


__all__ = ["PROVIDER", "SETTINGS_ENV", "RLMProvider", "ServeSettings", "handler", "rlm_object"]
