"""A streamed reply read chunk by chunk: each delta goes to the
:class:`~.model_client.StreamListener` as it comes, and the chunks are put
back together into one response, usage and hidden parameters included, as if
the reply had come whole: from the text, reasoning and usage already read
(litellm puts the usage on the stream's last chunk, counting it itself when
the provider sent none), or, when a chunk carried more than those (thinking
blocks, tool calls), by litellm's ``stream_chunk_builder``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .model_client import ModelCallError, StreamListener
from .providers import MalformedReply


class Streamed:
    """One attempt's stream: what came so far, and when the first token did."""

    def __init__(self, listener: StreamListener | None) -> None:
        self.listener = listener
        self.content: list[str] = []
        self.thoughts: list[str] = []
        self.first_token_s: float | None = None
        self.started = False  # any content or reasoning came
        self.usage_seen = False  # the provider sent its usage
        self.finished = False  # the provider sent its finish reason
        self.finish_reason: str | None = None
        self.usage: Any = None  # the last chunk's usage
        self.rich = False  # a chunk carried more than text and reasoning: litellm's builder puts it together

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning(self) -> str:
        return "".join(self.thoughts)

    async def collect(self, litellm: Any, stream: Any, messages: list[dict[str, Any]],
                      deadline: float | None) -> Any:
        """Read ``stream`` to its end (within ``deadline``), or to the usage
        that follows the finish reason when litellm has no callbacks to call;
        the whole response."""
        begun = time.monotonic()
        chunks: list[Any] = []
        read = self._read(stream, chunks, begun, stop_at_usage=not _listened(litellm))
        try:
            if deadline is None:
                await read
            else:
                try:
                    await asyncio.wait_for(read, max(0.0, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    raise ModelCallError("the run's time limit was reached during a model call", False) from None
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # noqa: BLE001 - the connection is gone either way
                    pass
        if not (self.started or self.usage_seen):
            # litellm reads a body that is no event stream at all (cut JSON, an
            # error page) as an empty reply: none came, so the call is retried.
            raise MalformedReply("the provider's stream carried no reply")
        if self.started and not self.finished:
            # The stream ended, cleanly, before the provider said the reply was
            # complete (a proxy whose upstream dropped): the reply broke off.
            raise MalformedReply("its stream ended with no finish reason")
        response = (litellm.stream_chunk_builder(chunks, messages=messages) if self.rich
                    else self._assemble(litellm, chunks))
        if response is None:
            raise MalformedReply("the provider's stream ended before any chunk")
        hidden = dict(getattr(stream, "_hidden_params", None) or {})
        if not self.rich:
            hidden.pop("response_cost", None)  # the stream's is a chunk's: the whole reply is priced from its usage
        hidden.update({k: v for k, v in (getattr(response, "_hidden_params", None) or {}).items() if v is not None})
        response._hidden_params = hidden
        return response

    def _assemble(self, litellm: Any, chunks: list[Any]) -> Any:
        """The whole response from what was read: the reply's text and
        reasoning, the finish reason and the usage."""
        if not chunks:
            return None
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        first = chunks[0]
        response = litellm.ModelResponse(
            id=getattr(first, "id", None), created=getattr(first, "created", None),
            model=getattr(first, "model", None),
            choices=[{"index": 0, "message": message, "finish_reason": self.finish_reason or "stop"}])
        if self.usage is not None:
            response.usage = self.usage
        return response

    async def _read(self, stream: Any, chunks: list[Any], begun: float, stop_at_usage: bool) -> None:
        async for chunk in stream:
            chunks.append(chunk)
            usage = getattr(chunk, "usage", None)
            if usage is not None:
                self.usage_seen = True
                self.usage = usage
            self._take(chunk, begun, _provider_finished(stream))
            if stop_at_usage and usage is not None and self.finished:
                # The reply is whole. Asking for the next chunk would only
                # have litellm put the whole reply together and price it
                # again for its success callbacks, which nobody set.
                break

    def _take(self, chunk: Any, begun: float, provider_finished: bool) -> None:
        choices = getattr(chunk, "choices", None)
        if not choices:
            return
        finish = getattr(choices[0], "finish_reason", None)
        if finish and provider_finished:
            self.finish_reason = finish
            if not self.finished:
                self.finished = True
                if self.listener is not None:
                    self.listener.finished()
        delta = getattr(choices[0], "delta", None)
        if not self.rich and _rich(delta):
            self.rich = True
        content = getattr(delta, "content", None) or ""
        reasoning = getattr(delta, "reasoning_content", None) or ""
        if not (content or reasoning):
            return
        if not self.started:
            self.started = True
            self.first_token_s = time.monotonic() - begun
        self.content.append(content)
        self.thoughts.append(reasoning)
        if self.listener is not None:
            self.listener.delta(content, reasoning)


def _provider_finished(stream: Any) -> bool:
    """Whether the provider has said its reply is complete: at the end of a
    stream that said nothing, litellm's stream wrapper yields a made-up "stop"
    (``finish_reason_handler``). What the provider said (a finish reason, or
    ``data: [DONE]``, which litellm's OpenAI-compatible reader takes as one)
    it keeps in ``received_finish_reason`` and ``intermittent_finish_reason``.
    Only the wrapper that reads the provider itself keeps them: a Router's
    stream wraps another and keeps neither, so its chunks are taken as sent."""
    if type(stream).__name__ != "CustomStreamWrapper" or not hasattr(stream, "received_finish_reason"):
        return True
    return bool(stream.received_finish_reason or getattr(stream, "intermittent_finish_reason", None))


def _listened(litellm: Any) -> bool:
    """Whether litellm has callbacks to tell when a stream ends."""
    return any(getattr(litellm, name, None) for name in
               ("success_callback", "_async_success_callback", "callbacks", "service_callback"))


def _rich(delta: Any) -> bool:
    """Whether a delta carries more than text and reasoning."""
    return bool(getattr(delta, "thinking_blocks", None) or getattr(delta, "tool_calls", None)
                or getattr(delta, "function_call", None) or getattr(delta, "audio", None))


__all__ = ["Streamed"]
