"""The model client every entry point uses: litellm, with our own retries
(honouring Retry-After, backoff with jitter), clear errors, usage and cost."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from ..protocol import json_steps
from .litellm_setup import load_litellm
from .model_client import Completion, ModelCallError, ModelClient, ModelEndpoint, StreamListener
from .providers import MalformedReply, classify, provider_key_present
from .streamed import Streamed


def call_kwargs(endpoint: ModelEndpoint) -> dict[str, Any]:
    """litellm's keyword arguments for a call to ``endpoint``."""
    kwargs: dict[str, Any] = {"model": endpoint.model}
    if endpoint.api_base:
        kwargs["api_base"] = endpoint.api_base
    if endpoint.json_steps:
        kwargs["response_format"] = json_steps.response_format()
    key = endpoint.api_key
    if key is None and endpoint.api_base and not provider_key_present(endpoint.model):
        # Local OpenAI-compatible servers ignore the key, but litellm insists on one.
        key = "no-key-needed"
    if key is not None:
        kwargs["api_key"] = key
    return kwargs


class LiteLLMClient(ModelClient):
    """Async model calls through litellm with retries. One instance serves a whole run tree."""

    def __init__(
        self,
        *,
        max_retries: int = 4,
        request_timeout: float = 600.0,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        extra_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.max_retries = max_retries
        self.request_timeout = request_timeout
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.extra_kwargs = extra_kwargs or {}

    async def complete(self, endpoint: ModelEndpoint, messages: list[dict[str, Any]], *,
                       deadline: float | None = None, listener: StreamListener | None = None,
                       **kwargs: Any) -> Completion:
        litellm = load_litellm()
        call = {
            **self._call_kwargs(endpoint),
            "messages": messages,
            "timeout": self.request_timeout,
            "max_retries": 0,
            **self.extra_kwargs,
            **kwargs,
        }
        streaming = listener is not None and not endpoint.json_steps  # a JSON step is read whole
        if streaming:
            call.update(stream=True, stream_options={"include_usage": True})
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ModelCallError("the run's time limit was reached during a model call", False, attempt)
                call["timeout"] = min(self.request_timeout, remaining)
            streamed = Streamed(listener) if streaming else None
            try:
                response = await self._attempt(call, deadline)
                if streamed is not None:
                    response = await streamed.collect(litellm, response, messages, deadline)
                text, reasoning, blocks = _reply_parts(response)
                if endpoint.json_steps:
                    text = json_steps.step_text(text)
            except (asyncio.CancelledError, ModelCallError):
                raise
            except Exception as error:  # noqa: BLE001 - classified below
                retryable, message, wait = self._classify(error, endpoint)
                if streamed is not None and streamed.started and listener is not None:
                    if not listener.broken(message):  # what came is kept: the reply ends where it broke
                        return self._partial(litellm, endpoint, messages, streamed, message, started, attempt)
                if not retryable or attempt > self.max_retries:
                    suffix = f" after {attempt} attempts" if attempt > 1 else ""
                    raise ModelCallError(f"{message}{suffix}", retryable, attempt,
                                         context_window=isinstance(error, litellm.ContextWindowExceededError)) from None
                delay = wait if wait is not None else self._backoff(attempt)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise ModelCallError(f"{message} (no time left to retry)", retryable, attempt) from None
                await asyncio.sleep(delay)
                continue
            return Completion(
                text=text,
                model=endpoint.model,
                **usage_counts(getattr(response, "usage", None)),
                cost_usd=self._cost(litellm, response, endpoint),
                latency_s=time.monotonic() - started,
                attempts=self._attempts(response, attempt),
                reasoning=reasoning,
                thinking_blocks=blocks,
                deployment=self._deployment(response),
                first_token_s=streamed.first_token_s if streamed is not None else None,
            )

    def _partial(self, litellm: Any, endpoint: ModelEndpoint, messages: list[dict[str, Any]],
                 streamed: Streamed, message: str, started: float, attempt: int) -> Completion:
        """A reply kept as far as it came: the server sent no usage, so the
        tokens are counted here (litellm's counter) and the price is unknown."""
        text, reasoning = streamed.text, streamed.reasoning
        return Completion(
            text=text, model=endpoint.model,
            prompt_tokens=_count(litellm, endpoint.model, messages=messages),
            completion_tokens=_count(litellm, endpoint.model, text=text + reasoning),
            cost_usd=None, latency_s=time.monotonic() - started, attempts=attempt,
            reasoning=reasoning or None, broken_off=message, first_token_s=streamed.first_token_s,
        )

    # -- what a client that sends calls elsewhere (a Router) changes ---------------
    def _call_kwargs(self, endpoint: ModelEndpoint) -> dict[str, Any]:
        return call_kwargs(endpoint)

    async def _attempt(self, call: dict[str, Any], deadline: float | None) -> Any:
        """One try of the call (litellm's response, or an exception to classify)."""
        return await load_litellm().acompletion(**call)

    def _classify(self, error: Exception, endpoint: ModelEndpoint) -> tuple[bool, str, float | None]:
        return classify(error, endpoint)

    def _cost(self, litellm: Any, response: Any, endpoint: ModelEndpoint) -> float | None:
        return _cost(litellm, response, endpoint.model)

    def _attempts(self, response: Any, attempt: int) -> int:
        return attempt

    def _deployment(self, response: Any) -> dict[str, str] | None:
        return None

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.retry_max_delay, self.retry_base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)  # jitter keeps a burst of retries apart


def _reply_parts(response: Any) -> tuple[str, str | None, list[dict[str, Any]] | None]:
    """The reply's content, and apart from it the provider's reasoning and
    thinking blocks. The content alone is the reply: a server that sends only
    reasoning (or only tool calls) sent an empty reply, whose thinking must
    never be read as code or as an answer."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedReply("the provider returned no choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    reasoning = getattr(message, "reasoning_content", None)
    blocks = getattr(message, "thinking_blocks", None)
    plain = [dict(b) if isinstance(b, dict) else dict(getattr(b, "__dict__", {})) for b in blocks or []]
    return content or "", reasoning if isinstance(reasoning, str) else None, plain or None


def usage_counts(usage: Any) -> dict[str, int]:
    """The token counts of a response's ``usage`` (an object or a dict, of a
    whole or a streamed reply), as :class:`Completion` fields. Cache reads and
    writes are parts of ``prompt_tokens``: litellm reports them as Anthropic
    does (``cache_read_input_tokens``, ``cache_creation_input_tokens``;
    Anthropic, Bedrock, Gemini) or in ``prompt_tokens_details``
    (``cached_tokens``, ``cache_write_tokens``; every provider, OpenAI's
    automatic cache too)."""
    details = _field(usage, "prompt_tokens_details")
    read = _field(usage, "cache_read_input_tokens") or _field(details, "cached_tokens")
    write = (_field(usage, "cache_creation_input_tokens") or _field(details, "cache_write_tokens")
             or _field(details, "cache_creation_tokens"))
    return {"prompt_tokens": _whole(_field(usage, "prompt_tokens")),
            "completion_tokens": _whole(_field(usage, "completion_tokens")),
            "cache_read_tokens": _whole(read), "cache_write_tokens": _whole(write)}


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _whole(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _count(litellm: Any, model: str, **what: Any) -> int:
    try:
        return int(litellm.token_counter(model=model, **what))
    except Exception:
        text = what.get("text") or "".join(str(m.get("content", "")) for m in what.get("messages") or [])
        return len(text) // 4


_UNPRICED: set[str] = set()


def _cost(litellm: Any, response: Any, model: str) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is None and model not in _UNPRICED:
        try:
            cost = litellm.completion_cost(completion_response=response, model=model)
        except Exception:
            _UNPRICED.add(model)  # looked up once: the lookup is slow
    if cost is None:
        return None  # unknown price: never a made-up 0
    if float(cost) == 0.0 and not has_price(litellm, model):
        # litellm says 0 for a model it holds no price for (a Router registers
        # its deployments so, for the whole process): unknown, not free.
        return None
    return float(cost)


_PRICED: dict[str, bool] = {}


def has_price(litellm: Any, model: str) -> bool:
    """Whether litellm holds a price above zero for ``model``."""
    if model not in _PRICED:
        try:
            info = litellm.get_model_info(model=model)
        except Exception:
            info = {}
        _PRICED[model] = bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))
    return _PRICED[model]


__all__ = ["LiteLLMClient", "call_kwargs", "usage_counts"]
