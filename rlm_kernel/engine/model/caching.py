"""Prompt caching: cache breakpoints on the root model's messages for the
providers that need them.

A root model reads the same, ever longer prefix at every step (the system
prompt, the first message, the steps so far). OpenAI, DeepSeek and Gemini 2.5
cache repeated prefixes by themselves; Anthropic's API (direct, on Bedrock,
on Vertex AI, on Azure AI) caches only up to a block marked with
``cache_control``. For those we mark, on a copy of the messages (the run's
own history stays plain text):

- the system prompt and the first user message (the query and the context's
  description): a prefix that never changes, still a hit after a compaction;
- the last two user messages: the newest marks where this call's prefix is
  written; the one before is where the previous call wrote it, so this call
  reads it.

That is Anthropic's limit of four breakpoints. litellm 1.106.2 sends them
as they are to Anthropic (``system`` blocks and message blocks keep
``cache_control``) and turns them into ``cachePoint`` blocks for Bedrock
Converse; it drops them for Bedrock models its cost map says cannot cache.

Gemini and Vertex AI's Gemini models get no marks: litellm turns marks into
a ``cachedContents`` resource holding the first run of marked messages,
which for a prefix that grows every step means a new resource (billed per
hour of storage) per step, or caching only the stable first ~1k tokens;
Gemini's implicit caching already covers the whole repeated prefix, and its
cached tokens are counted and priced like everyone's (``usage_counts``).
"""

from __future__ import annotations

from typing import Any

from .litellm_setup import load_litellm

EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # Anthropic's limit per request

# Providers whose Claude (and, on Bedrock, Nova) models cache only at marked blocks.
_MARKED_PROVIDERS = {"anthropic": "", "bedrock": "", "vertex_ai": "claude", "azure_ai": "claude"}
_WANTED: dict[str, bool] = {}


def wants_breakpoints(model: str) -> bool:
    """Whether calls to ``model`` (a litellm name) should carry cache breakpoints."""
    if model not in _WANTED:
        try:
            provider = load_litellm().get_llm_provider(model=model)[1]
        except Exception:
            provider = ""  # not a litellm name (a Router's model group): left alone
        needs = _MARKED_PROVIDERS.get(provider)
        _WANTED[model] = needs is not None and needs in model.lower()
    return _WANTED[model]


def breakpoint_indexes(messages: list[dict[str, Any]]) -> list[int]:
    """The messages to mark: the system prompt, the first user message and
    the last two user messages (at most four, each once)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    wanted = [i for i, m in enumerate(messages[:1]) if m.get("role") == "system"]
    wanted += users[:1] + users[-2:]
    chosen: list[int] = []
    for index in wanted:
        if index not in chosen and _text_of(messages[index]).strip():
            chosen.append(index)
    return sorted(chosen)[:MAX_BREAKPOINTS]


def with_breakpoints(model: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as they go to ``model``: unchanged, or a copy with cache
    breakpoints where the provider needs them."""
    if not messages or not wants_breakpoints(model):
        return messages
    marked = list(messages)
    for index in breakpoint_indexes(messages):
        marked[index] = _marked(messages[index])
    return marked


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        parts = [dict(p) if isinstance(p, dict) else {"type": "text", "text": str(p)} for p in content]
        parts[-1]["cache_control"] = dict(EPHEMERAL)
    else:
        parts = [{"type": "text", "text": content or "", "cache_control": dict(EPHEMERAL)}]
    return {**message, "content": parts}


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content or ""


__all__ = ["breakpoint_indexes", "wants_breakpoints", "with_breakpoints"]
