"""A chat-completion request read as an RLM run, as the paper frames it:
the prompt is the context. The last user message is the query; every other
message is the context (its text when there is one, else a list of their
texts, in order). Run options a request may set are budgets, given in an
``rlm`` object of the body (the OpenAI client's
``extra_body={"rlm": {"max_iterations": 5}}``); each may only tighten what
the server allows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..callers import CALLER_OPTIONS, LimitError, keep_context, tightened
from ..engine.runs.options import BY_NAME
from ..errors import RLMError

# A request may set these (the run's limits); models, servers and keys stay the server's.
REQUEST_OPTIONS = CALLER_OPTIONS

# Body fields of an OpenAI chat request that an RLM run has no use for; they
# are accepted and ignored (the server's options decide the models' settings).
# litellm (and the proxy) add some of their own, such as max_retries.
IGNORED_FIELDS = frozenset({
    "functions", "function_call", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "max_completion_tokens", "modalities", "prediction", "audio", "max_tokens", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "request_timeout", "timeout", "response_format", "seed",
    "tools", "tool_choice", "max_retries", "parallel_tool_calls", "logprobs", "top_logprobs",
    "reasoning_effort", "extra_headers", "thinking", "web_search_options", "service_tier", "prompt_cache_key",
    "prompt_cache_retention", "safety_identifier", "verbosity", "store", "metadata",
    "include_server_side_tool_invocations",
})


class BadRequest(RLMError):
    """The request cannot be run (HTTP 400); the message says why."""


@dataclass
class RunRequest:
    query: str
    context: str | list[str]
    options: dict[str, Any] = field(default_factory=dict)  # the request's own limits


def message_text(message: Any, number: int) -> str:
    if not isinstance(message, Mapping):
        raise BadRequest(f"Message {number} is not an object with a role and content.")
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise BadRequest(f"Message {number} has a {kind!r} part; the RLM reads text only.")
        return "".join(texts)
    raise BadRequest(f"Message {number} has content that is neither text nor a list of text parts.")


def read_request(messages: Any, params: Mapping[str, Any] | None, server: Any) -> RunRequest:
    """The run a request asks for; ``server`` is the server's RunOptions,
    which the request's options may tighten but not loosen."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("The request has no messages; send at least one user message (the query).")
    texts = [message_text(m, n) for n, m in enumerate(messages, 1)]
    users = [n for n, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise BadRequest("The request has no user message; the last user message is the query.")
    last = users[-1]
    query = texts[last]
    if not query.strip():
        raise BadRequest("The last user message (the query) is empty.")
    rest = [t for n, t in enumerate(texts) if n != last]
    context: str | list[str] = rest[0] if len(rest) == 1 else rest
    return RunRequest(query=query, context=context, options=request_options(params or {}, server))


def request_options(params: Mapping[str, Any], server: Any) -> dict[str, Any]:
    extra = params.get("extra_body") if isinstance(params.get("extra_body"), Mapping) else {}
    unknown = sorted(k for k in {*params, *extra} if k not in IGNORED_FIELDS and k not in ("rlm", "extra_body"))
    if unknown:
        raise BadRequest(f"Unknown request field {unknown[0]!r}; run options go in an `rlm` object "
                         f"(extra_body={{\"rlm\": {{\"max_iterations\": 5}}}}): {', '.join(REQUEST_OPTIONS)}.")
    given = params.get("rlm", extra.get("rlm"))
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise BadRequest("`rlm` must be an object of run options, e.g. {\"max_iterations\": 5}.")
    chosen: dict[str, Any] = {}
    for name, value in given.items():
        if name not in REQUEST_OPTIONS:
            why = "is set by the server" if name in BY_NAME else "is not a run option"
            raise BadRequest(f"Unknown option {name!r} in `rlm` ({name!r} {why}); a request may set "
                             f"{', '.join(REQUEST_OPTIONS)}.")
        try:
            chosen[name] = tightened(name, value, server)
        except LimitError as error:
            raise BadRequest(f"rlm.{name} {error}.") from None
    return chosen


__all__ = ["BadRequest", "REQUEST_OPTIONS", "RunRequest", "keep_context", "message_text", "read_request",
           "request_options"]
