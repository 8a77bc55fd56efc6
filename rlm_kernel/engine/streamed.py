"""A streamed reply read chunk by chunk: each delta goes to the
:class:`~.model_client.StreamListener` as it comes, and the chunks are put
back together into one response (litellm's ``stream_chunk_builder``), usage
and hidden parameters included, as if the reply had come whole."""

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

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning(self) -> str:
        return "".join(self.thoughts)

    async def collect(self, litellm: Any, stream: Any, messages: list[dict[str, Any]],
                      deadline: float | None) -> Any:
        """Read ``stream`` to its end (within ``deadline``); the whole response."""
        begun = time.monotonic()
        chunks: list[Any] = []
        try:
            if deadline is None:
                await self._read(stream, chunks, begun)
            else:
                try:
                    await asyncio.wait_for(self._read(stream, chunks, begun), max(0.0, deadline - time.monotonic()))
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
        response = litellm.stream_chunk_builder(chunks, messages=messages)
        if response is None:
            raise MalformedReply("the provider's stream ended before any chunk")
        hidden = dict(getattr(stream, "_hidden_params", None) or {})
        hidden.update({k: v for k, v in (getattr(response, "_hidden_params", None) or {}).items() if v is not None})
        response._hidden_params = hidden
        return response

    async def _read(self, stream: Any, chunks: list[Any], begun: float) -> None:
        async for chunk in stream:
            chunks.append(chunk)
            if getattr(chunk, "usage", None) is not None:
                self.usage_seen = True
            choices = getattr(chunk, "choices", None)
            if not choices:
                continue
            if getattr(choices[0], "finish_reason", None) and self.listener is not None and not self.finished:
                self.finished = True
                self.listener.finished()
            delta = getattr(choices[0], "delta", None)
            content = getattr(delta, "content", None) or ""
            reasoning = getattr(delta, "reasoning_content", None) or ""
            if not (content or reasoning):
                continue
            if not self.started:
                self.started = True
                self.first_token_s = time.monotonic() - begun
            self.content.append(content)
            self.thoughts.append(reasoning)
            if self.listener is not None:
                self.listener.delta(content, reasoning)


__all__ = ["Streamed"]
