"""Errors a user can cause or meet. Each carries one sentence saying what
happened and what to do; the CLI and the magics print only that sentence."""

from __future__ import annotations

import os
import re


class RLMError(Exception):
    """A problem the user can act on (bad path, bad model, missing key...)."""


class ContextError(RLMError):
    """The context could not be loaded."""


class ModelError(RLMError):
    """A model cannot be used: unknown name, missing or rejected key, unreachable server."""


class BudgetExceeded(RLMError):  # noqa: N818 - reads better at the call site
    """A budget (sub-calls, tokens, cost, time) is used up; the run ends with reason "budget"."""

    def __init__(self, message: str, reason: str = "budget") -> None:
        super().__init__(message)
        self.reason = reason


class SubcallError(RLMError):
    """A sub-call failed after its retries; raised into the generated code."""


class RecursionLimitError(RLMError):
    """rlm_query was called deeper than --max-depth allows."""


_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)
_REMEMBERED: set[str] = set()


def remember_secret(value: str | None) -> None:
    """Treat ``value`` (a key given in code, not in the environment) as a secret from now on."""
    if value and len(value) >= 8:
        _REMEMBERED.add(value)


def secret_values() -> list[tuple[str, str]]:
    """(secret, placeholder) for every key or token in the environment and
    every remembered one, longest first."""
    found = {value: f"<{name}>" for name, value in os.environ.items()
             if value and len(value) >= 8 and _SECRET_ENV.search(name)}
    for value in list(_REMEMBERED):
        found.setdefault(value, "<api_key>")
    return sorted(found.items(), key=lambda item: -len(item[0]))


def redact_secrets(text: str, secrets: list[tuple[str, str]] | None = None) -> str:
    """Replace every known secret (see :func:`secret_values`) found in text."""
    for value, placeholder in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, placeholder)
    return text


def redact(text: str) -> str:
    """Replace any secret from the environment (API keys, tokens) found in text."""
    text = redact_secrets(text)
    # Bearer headers or sk-... keys that did not come from our environment.
    text = re.sub(r"(Bearer\s+)[A-Za-z0-9._\-]{8,}", r"\1<redacted>", text)
    return re.sub(r"\bsk-[A-Za-z0-9_\-]{12,}", "sk-<redacted>", text)
