"""The model-client interface: what the engine needs from whoever calls models.

The engine asks a :class:`ModelClient` for completions of chat messages at a
:class:`ModelEndpoint` and gets a :class:`Completion` (text, thinking kept
apart, usage, cost) or a :class:`ModelCallError`. The implementations:
:class:`~.litellm_client.LiteLLMClient`, and :class:`~.router_client.RouterClient`
with ``--router``; ``builder.model_client`` chooses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ModelEndpoint:
    """A model name plus where and how to reach it."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    json_steps: bool = False  # replies held to a JSON step (llama.cpp servers; see json_steps.py)

    def __repr__(self) -> str:  # never shows the key
        return f"ModelEndpoint(model={self.model!r}, api_base={self.api_base!r})"


@dataclass
class Completion:
    text: str  # the reply's content, and only that: thinking is never in it
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None: the price is unknown (never a made-up 0)
    latency_s: float
    attempts: int
    reasoning: str | None = None  # the provider's reasoning field (reasoning_content), apart from the reply
    thinking_blocks: list[dict[str, Any]] | None = None  # Anthropic-style thinking blocks, as plain dicts
    deployment: dict[str, str] | None = None  # which deployment of a Router's answered (id, api_base)
    broken_off: str | None = None  # a streamed reply that broke off and was kept as far as it came: why
    first_token_s: float | None = None  # streamed: seconds from the request to the first token
    cache_read_tokens: int = 0  # of prompt_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0  # of prompt_tokens: written to it (priced higher by some providers)


class StreamListener:
    """Hears a streamed reply as it is written (on the engine loop)."""

    def delta(self, content: str, reasoning: str) -> None:
        """More of the reply: its content, and the provider's reasoning field."""

    def finished(self) -> None:
        """The reply's content is all here (the provider sent its finish
        reason); its usage may still follow."""

    def broken(self, message: str) -> bool:
        """The stream broke off. True: forget what came and let the call be
        retried; False: keep it, and end the reply where it broke."""
        return True


class ModelCallError(Exception):
    """A call failed for good (after retries, or at once for errors retrying cannot fix)."""

    def __init__(self, message: str, retryable: bool, attempts: int = 1, *, context_window: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.attempts = attempts
        self.context_window = context_window  # the provider said the prompt is longer than the model's window


class ModelClient:
    """Completes chat messages. One instance serves a whole run tree, from
    the engine loop; it must allow many calls at once."""

    async def complete(self, endpoint: ModelEndpoint, messages: list[dict[str, Any]], *,
                       deadline: float | None = None, listener: StreamListener | None = None,
                       **kwargs: Any) -> Completion:
        """The model's reply; ``deadline`` (``time.monotonic()``) bounds the
        call and its retries; with a ``listener`` the reply is streamed to it.
        Raises :class:`ModelCallError`."""
        raise NotImplementedError


__all__ = ["Completion", "ModelCallError", "ModelClient", "ModelEndpoint", "StreamListener"]
