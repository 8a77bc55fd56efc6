"""Errors a user can cause or meet. Each carries one sentence saying what
happened and what to do; the CLI and the magics print only that sentence."""

from __future__ import annotations


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


class AnswerError(RLMError, LookupError):
    """FINAL / FINAL_VAR called in code gave no answer: no such variable, or
    `answer` is still the answer dict. The model sees the sentence."""
