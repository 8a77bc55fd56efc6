"""Root replies as JSON steps, for small local models that cannot keep to the
protocol's text format. A llama.cpp server holds the reply to ``STEP_SCHEMA``
with a grammar; ``step_text`` turns it back into protocol text (prose, one
```repl block, a FINAL line), so the rest of the loop is unchanged.

Only llama.cpp servers understand ``response_format`` with a ``schema``;
turn it on per root model with ``RLM_JSON_STEPS=openai/smollm2`` (a
comma-separated list of litellm model names).

What SmolLM2-135M sends under the grammar (collected from the bundled model):
objects whose strings hold raw line breaks (JSON forbids them; the grammar
lets them through), fences and half-written code inside ``thought``, code
written as prose, finals with unbalanced parentheses, and, when a reply runs
out of tokens, a cut-off object. None of it may reach the thought cell as
raw JSON, and only ``code`` may run: the thought is shown as written, with
any line that would read as a code fence or a FINAL escaped.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from .reply import parse_reply

STEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "thought": {"type": "string"},
        "code": {"type": "string"},
        "final": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["thought", "code", "final"],
}
FIELDS = frozenset(STEP_SCHEMA["properties"])

NOT_A_STEP = "*The root model's reply was JSON but not a step (thought, code, final), so nothing in it ran.*"
CUT_OFF = "*The root model's reply ended before its JSON step was complete, so nothing in it ran.*"
NOT_JSON = "*The root model's reply was not valid JSON, so nothing in it ran.*"

_FENCE_LINE = re.compile(r"^\s*(`{3,}|~{3,})")
# A line of prose that the reply protocol would read as a fence or an answer.
_PROTOCOL_LINE = re.compile(r"^([ \t]*)(`{3,}|~{3,}|FINAL_VAR\(|FINAL\()", re.M)
# Where the thought's text starts in a cut-off object.
_THOUGHT_START = re.compile(r'"thought"\s*:\s*"')


def response_format() -> dict[str, Any]:
    """The request option a llama.cpp server enforces with a grammar."""
    return {"type": "json_object", "schema": STEP_SCHEMA}


def wanted_for(model: str) -> bool:
    """Whether ``RLM_JSON_STEPS`` names this root model."""
    names = os.environ.get("RLM_JSON_STEPS", "")
    return bool(model) and model in {name.strip() for name in names.split(",")}


def step_text(raw: str, *, partial: bool = False) -> str:
    """A JSON step as protocol text. A reply that is not JSON at all (a
    server that ignored the schema) is kept as it is; JSON that cannot be read
    as a step becomes one sentence saying so. With ``partial`` (a streamed
    prefix: more may follow) a step not yet complete shows its thought so
    far, and nothing that could run."""
    text = raw.strip()
    if not text.startswith(("{", "[")):
        return raw
    try:
        # strict=False: the grammar lets raw line breaks and tabs into strings
        step = json.loads(text, strict=False)
    except ValueError:
        return _unfinished(text, partial)
    if not isinstance(step, dict) or not FIELDS & step.keys():
        return NOT_A_STEP
    return _protocol_text(step)


def _protocol_text(step: dict[str, Any]) -> str:
    parts: list[str] = []
    thought, code, final = step.get("thought"), step.get("code"), step.get("final")
    if isinstance(thought, str) and thought.strip():
        parts.append(_prose(thought.strip()))
    body = ""
    if isinstance(code, str) and code.strip():
        # the model often wraps its code in fences of its own
        lines = [line for line in code.splitlines() if not _FENCE_LINE.match(line)]
        body = "\n".join(lines).strip("\n")
        if body.strip():
            parts.append(_repl(body))
    if isinstance(final, str) and final.strip():
        parts.append(_final(final.strip(), with_code=bool(body.strip())))
    return "\n\n".join(parts)


def _prose(text: str) -> str:
    """The thought as prose that only shows: a line that would open a fence
    (whose code would run) or give an answer gets a backslash, which Markdown
    hides before a backtick or a tilde."""
    return _PROTOCOL_LINE.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", text)


def _repl(code: str) -> str:
    longest = max((len(run) for run in re.findall(r"^[ \t]*(`{3,})", code, re.M)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}repl\n{code}\n{fence}"


def _final(answer: str, *, with_code: bool) -> str:
    """The final as the protocol reads it back exactly: a FINAL line when its
    text survives the line's rule (the answer ends at the parenthesis that
    closes FINAL), else, in a step without code, FINAL called in a repl
    block with the text as a string. Beside code a FINAL line is not taken
    (the model has not seen that code's output), as for any reply."""
    line = f"FINAL({answer})"
    read = parse_reply(line).final
    if with_code or (read is not None and read.value == answer):
        return line
    return _repl(f"FINAL({answer!r})")


def _unfinished(text: str, partial: bool) -> str:
    """A reply that is not a whole JSON value: cut off (out of tokens, or a
    stream still arriving), or not JSON. Only its thought so far is shown."""
    if not _could_be_a_step(text):
        return NOT_JSON
    found = _THOUGHT_START.search(text)
    thought = _string_so_far(text, found.end()) if found else ""
    shown = _prose(thought.strip()) if thought.strip() else ""
    if partial:
        return shown
    return f"{shown}\n\n{CUT_OFF}" if shown else CUT_OFF


def _could_be_a_step(text: str) -> bool:
    """Whether ``text`` reads as the start of a JSON object (a cut-off step)."""
    return text.startswith("{") and text[1:].lstrip()[:1] in ('"', "")


def _string_so_far(text: str, start: int) -> str:
    """The JSON string value that starts at ``start`` (after its quote), up to
    its closing quote or the end of ``text``, escapes decoded."""
    out: list[str] = []
    i = start
    while i < len(text):
        char = text[i]
        if char == '"':
            break
        if char != "\\":
            out.append(char)
            i += 1
            continue
        escape = text[i:i + 2]
        if escape == "\\u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
            continue
        if len(escape) < 2:
            break  # cut off inside an escape
        out.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(escape[1], escape[1]))
        i += 2
    return "".join(out)
