"""Root replies as JSON steps, for small local models that cannot keep to the
protocol's text format. A llama.cpp server holds the reply to ``STEP_SCHEMA``
with a grammar; ``step_text`` turns it back into protocol text (prose, one
```repl block, a FINAL line), so the rest of the loop is unchanged.

Only llama.cpp servers understand ``response_format`` with a ``schema``;
turn it on per root model with ``RLM_JSON_STEPS=openai/smollm2`` (a
comma-separated list of litellm model names)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

STEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "thought": {"type": "string"},
        "code": {"type": "string"},
        "final": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["thought", "code", "final"],
}

_FENCE_LINE = re.compile(r"^\s*(`{3,}|~{3,})")


def response_format() -> dict[str, Any]:
    """The request option a llama.cpp server enforces with a grammar."""
    return {"type": "json_object", "schema": STEP_SCHEMA}


def wanted_for(model: str) -> bool:
    """Whether ``RLM_JSON_STEPS`` names this root model."""
    names = os.environ.get("RLM_JSON_STEPS", "")
    return bool(model) and model in {name.strip() for name in names.split(",")}


def step_text(raw: str) -> str:
    """A JSON step as protocol text; anything that is not one is kept as it is."""
    try:
        step = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(step, dict):
        return raw
    parts: list[str] = []
    thought, code, final = step.get("thought"), step.get("code"), step.get("final")
    if isinstance(thought, str) and thought.strip():
        parts.append(thought.strip())
    if isinstance(code, str) and code.strip():
        # the model often wraps its code in fences of its own
        lines = [line for line in code.splitlines() if not _FENCE_LINE.match(line)]
        body = "\n".join(lines).strip("\n")
        if body.strip():
            parts.append(f"```repl\n{body}\n```")
    if isinstance(final, str) and final.strip():
        parts.append(f"FINAL({final.strip()})")
    return "\n\n".join(parts)
