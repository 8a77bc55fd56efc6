"""Keeping secrets out of everything we write: keys from the environment and
keys given in code, replaced by placeholders, and strings shaped like a key,
whoever's they are. Used for error messages, cell outputs, what the root
model is told, trajectory notebooks, journals and exports."""

from __future__ import annotations

import os
import re
from typing import Any

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)
_REMEMBERED: set[str] = set()


_LAST: tuple[Any, list[tuple[str, str]]] | None = None  # (what it was worked out from, the secrets)


def remember_secret(value: str | None) -> None:
    """Treat ``value`` (a key given in code, not in the environment) as a secret from now on."""
    if value and len(value) >= 8:
        _REMEMBERED.add(value)


def secret_values() -> list[tuple[str, str]]:
    """(secret, placeholder) for every key or token in the environment and
    every remembered one, longest first. Worked out again only when the
    environment or the remembered keys changed (a run asks a few times a step)."""
    global _LAST
    raw = getattr(os.environ, "_data", None)  # the environment as bytes: a snapshot costs a copy, not a decode
    state = (tuple(raw.items()) if isinstance(raw, dict) else None, frozenset(_REMEMBERED))
    if state[0] is not None and _LAST is not None and _LAST[0] == state:
        return list(_LAST[1])
    found = {value: f"<{name}>" for name, value in os.environ.items()
             if value and len(value) >= 8 and _SECRET_ENV.search(name)}
    for value in state[1]:
        found.setdefault(value, "<api_key>")
    secrets = sorted(found.items(), key=lambda item: -len(item[0]))
    _LAST = (state, secrets)
    return list(secrets)


def redact_secrets(text: str, secrets: list[tuple[str, str]] | None = None) -> str:
    """Replace every known secret (see :func:`secret_values`) found in text."""
    for value, placeholder in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, placeholder)
    return text


# Key shapes that give a key away without knowing its value: (prefix, body,
# whether the body must hold a digit). The digit rule keeps identifiers and
# hyphenated words (``hf_hub_download``, ``sk-learn``) out: random keys of
# this length almost always hold one. Prefixes are case-sensitive.
_SHAPES: tuple[tuple[str, str, bool], ...] = (
    ("AIza", r"[0-9A-Za-z_\-]{35}", False),  # Google (Gemini, Maps...)
    ("sk-", r"[A-Za-z0-9_\-]{16,}", True),  # OpenAI (sk-proj-...), Anthropic (sk-ant-...), DeepSeek...
    ("xai-", r"[A-Za-z0-9]{20,}", True),  # xAI
    ("gsk_", r"[A-Za-z0-9]{20,}", True),  # Groq
    ("hf_", r"[A-Za-z0-9]{30,}", True),  # Hugging Face
    ("github_pat_", r"[A-Za-z0-9_]{22,}", False),  # GitHub fine-grained token
    ("gh[pousr]_", r"[A-Za-z0-9]{36,}", False),  # GitHub classic tokens
    ("(?:AKIA|ASIA)", r"[0-9A-Z]{16}", False),  # AWS access key id
    ("r8_", r"[A-Za-z0-9]{30,}", True),  # Replicate
    ("ya29\\.", r"[A-Za-z0-9_\-]{20,}", True),  # Google OAuth access token
    ("xox[abposr]-", r"[A-Za-z0-9\-]{10,}", True),  # Slack
)
# One plain alternation of the prefixes finds candidates fast (named groups
# in it made it 20x slower); each candidate is then checked shape by shape.
_PREFIX_RE = re.compile("(?:" + "|".join(prefix for prefix, _, _ in _SHAPES) + ")")
_SHAPE_RES = tuple((re.compile(f"({prefix})({body})(?![A-Za-z0-9_\\-])"), digit) for prefix, body, digit in _SHAPES)
_BEARER_RE = re.compile(r"(Bearer\s+)([A-Za-z0-9._~+/\-]{12,}=*)")
# name = value, name: value, "name": "value" (also JSON-escaped) where the
# name ends in a credential word: OPENAI_API_KEY=..., "access_token": "...".
# The words are spelled out in three cases, not matched with IGNORECASE:
# that is several times faster on a big notebook.
_WORDS = ("key", "secret", "token", "password", "passwd")
_ASSIGNMENT_RE = re.compile(
    "(?P<word>" + "|".join(w for word in _WORDS for w in (word, word.upper(), word.capitalize())) + ")"
    + r"(?P<sep>\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?)(?P<value>[A-Za-z0-9_\-.+/~]{16,}=*)"
)
# Bare ``key=`` is no credential (``sorted(rows, key=...)``, dictionary keys).
_KEY_NAMES = ("api_key", "api-key", "apikey", "secret_key", "secret-key", "access_key", "access-key",
              "private_key", "private-key")


def _starts_word(text: str, index: int) -> bool:
    """Whether no word goes on before ``text[index]``; in JSON text a key at
    the start of a line follows an escape such as \\n, which counts as a break."""
    if index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_"):
        return True
    if index >= 2 and text[index - 2] == "\\" and text[index - 1] in "ntr":
        return True
    return index >= 6 and text[index - 6: index - 4] == "\\u"


def _random_looking(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _redact_shapes(text: str) -> str:
    parts: list[str] = []
    kept = 0  # text[:kept] is in parts
    search = _PREFIX_RE.search(text)
    while search is not None:
        start, resume = search.start(), search.start() + 1
        if _starts_word(text, start):
            for regex, needs_digit in _SHAPE_RES:
                found = regex.match(text, start)
                if found and (not needs_digit or any(c.isdigit() for c in found.group(2))):
                    parts += [text[kept:start], found.group(1), "<redacted>"]
                    kept = resume = found.end()
                    break
        search = _PREFIX_RE.search(text, resume)
    return "".join(parts) + text[kept:] if parts else text


def _assignment(match: re.Match[str]) -> str:
    text, start = match.string, match.start()
    name_start = start
    while name_start > 0 and (text[name_start - 1].isalnum() or text[name_start - 1] in "_-"):
        name_start -= 1
    name = text[name_start: match.end("word")].lower()
    if match.group("word").lower() == "key" and not name.endswith(_KEY_NAMES):
        return match.group(0)
    if not _random_looking(match.group("value")):
        return match.group(0)
    return match.group("word") + match.group("sep") + "<redacted>"


def redact_key_shapes(text: str) -> str:
    """Replace strings shaped like an API key or token, whoever's they are:
    provider key formats (Google ``AIza...``, OpenAI and Anthropic ``sk-...``,
    xAI ``xai-...``, Groq ``gsk_...``, Hugging Face ``hf_...``, GitHub
    ``ghp_...``/``github_pat_...``, AWS ``AKIA...``, ...), ``Bearer``
    headers, and random-looking values of 16 characters or more assigned to
    a name ending in api_key, secret, token or password. The prefix or name
    is kept (``AIza<redacted>``, ``api_key = "<redacted>"``) so a reader
    sees what was there."""
    text = _redact_shapes(text)
    text = _BEARER_RE.sub(lambda m: m.group(1) + "<redacted>" if _random_looking(m.group(2)) else m.group(0), text)
    return _ASSIGNMENT_RE.sub(_assignment, text)


def redact(text: str) -> str:
    """Replace every secret found in text: the values of secrets from the
    environment and remembered keys (:func:`redact_secrets`), then any string
    shaped like a key (:func:`redact_key_shapes`)."""
    return redact_key_shapes(redact_secrets(text))


class Redactor:
    """The secrets known when it was made, applied to text and MIME bundles
    (a cell's outputs: generated code may print ``os.environ``)."""

    def __init__(self) -> None:
        self.secrets = secret_values()

    def text(self, text: str) -> str:
        return redact_secrets(text, self.secrets) if self.secrets else text

    def bundle(self, data: dict[str, Any]) -> dict[str, Any]:
        """A MIME bundle with its text values redacted."""
        if not self.secrets:
            return dict(data)
        return {kind: self._value(value) for kind, value in data.items()}

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.text(v) if isinstance(v, str) else v for v in value]
        return value


__all__ = ["Redactor", "redact", "redact_key_shapes", "redact_secrets", "remember_secret", "secret_values"]
