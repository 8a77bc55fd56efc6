"""Long-context suites built from real text (``rlm-kernel bench suite``).

Each suite module has ``generate(length, n, seed) -> list[Task]`` that builds
``n`` tasks whose context is about ``length`` tokens (estimated as
characters / 4), deterministically from ``seed``, and ``DEFAULT_LENGTHS``.
The tasks follow the Recursive Language Models paper's evaluation: S-NIAH,
OOLONG, OOLONG-Pairs, multi-hop questions over a document collection
(BrowseComp-Plus style) and multiple-choice questions about code (CodeQA).
"""

from __future__ import annotations

import importlib
import random
import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ...errors import RLMError

CHARS_PER_TOKEN = 4  # the token estimate used everywhere in the suites

SUITES = {
    "sniah": "sniah",
    "oolong": "oolong",
    "oolong-pairs": "oolong_pairs",
    "multihop": "multihop",
    "codeqa": "codeqa",
}


class SuiteError(RLMError):
    """A suite cannot run: bad lengths, missing text package, unknown suite."""


@dataclass
class Task:
    """One question over one context, with its gold answer.

    ``metric`` names the scorer (see :mod:`.scoring`): ``needle``, ``exact``,
    ``number``, ``comparison``, ``label``, ``pairs`` or ``choice``."""

    suite: str
    length: int  # target context length in estimated tokens
    index: int
    context: str
    question: str
    gold: Any
    metric: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return len(self.context) // CHARS_PER_TOKEN

    def describe(self) -> dict[str, Any]:
        """Everything but the context (for reports and JSON)."""
        return {"suite": self.suite, "length": self.length, "index": self.index, "tokens": self.tokens,
                "question": self.question, "gold": self.gold, "metric": self.metric, "meta": self.meta}


def suite_module(name: str) -> ModuleType:
    if name not in SUITES:
        raise SuiteError(f"Unknown suite {name!r}; choose one of: {', '.join(SUITES)}.")
    return importlib.import_module(f"{__name__}.{SUITES[name]}")


def generate(name: str, length: int, n: int, seed: int = 0, **options: Any) -> list[Task]:
    """``n`` tasks of suite ``name`` at ``length`` estimated tokens
    (``options``: suite-specific, e.g. codeqa's ``package``)."""
    if n < 1:
        raise SuiteError("The number of tasks per length must be at least 1.")
    if length < 1000:
        raise SuiteError(f"A context length of {length} tokens is too short; use at least 1k.")
    return suite_module(name).generate(length, n, seed, **options)


def task_rng(suite: str, seed: int, length: int, index: int) -> random.Random:
    """The random source of one task: the same (suite, seed, length, index)
    always gives the same task, and tasks never share a stream."""
    return random.Random(f"{suite}/{seed}/{length}/{index}")


_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)([km]?)$")


def parse_length(text: str) -> int:
    """'8k' -> 8000, '1m' -> 1_000_000, '32000' -> 32000 (tokens)."""
    match = _LENGTH.match(text.strip().lower())
    if not match:
        raise SuiteError(f"Not a context length: {text!r}; use e.g. 8k, 128k, 1m or 32000.")
    value = float(match.group(1)) * {"": 1, "k": 1000, "m": 1_000_000}[match.group(2)]
    return int(value)


def parse_lengths(text: str) -> list[int]:
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    if not parts:
        raise SuiteError("No context lengths given; use e.g. --lengths 8k,32k,128k.")
    return [parse_length(p) for p in parts]


def length_label(tokens: int) -> str:
    if tokens >= 1_000_000 and tokens % 100_000 == 0:
        return f"{tokens / 1_000_000:g}M"
    if tokens >= 1000 and tokens % 100 == 0:
        return f"{tokens / 1000:g}K"
    return str(tokens)


def evenly_spaced(n: int) -> list[float]:
    """n depths from 0 to 1 inclusive (0.5 for a single one)."""
    if n == 1:
        return [0.5]
    return [i / (n - 1) for i in range(n)]


__all__ = ["CHARS_PER_TOKEN", "SUITES", "SuiteError", "Task", "generate", "suite_module", "task_rng",
           "parse_length", "parse_lengths", "length_label", "evenly_spaced"]
