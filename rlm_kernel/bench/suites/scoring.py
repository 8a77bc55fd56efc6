"""Scoring as in the Recursive Language Models paper: exact match for
needles, names, labels, comparisons and choices; 0.75^|error| for numeric
answers (OOLONG); F1 over the set of pairs (OOLONG-Pairs).

Answers are read leniently where the form is unambiguous (``Answer: 42``,
``"B"``, a trailing period) but never by guessing among candidates: two
different numbers, labels or letters where one is asked for score 0."""

from __future__ import annotations

import re
from typing import Any

from .oolong import COMPARISONS
from .records import LABELS

_ANSWER_PREFIX = re.compile(r"^\s*(?:final\s+)?answer\s*(?:is)?\s*[:=-]?\s*", re.I)


def _clean(answer: Any) -> str:
    text = "" if answer is None else str(answer)
    text = _ANSWER_PREFIX.sub("", text.strip())
    return text.strip().strip("`*\"' ").rstrip(".").strip()


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def needle(answer: Any, gold: str) -> float:
    """1 if the answer names exactly one 7-digit number and it is the gold one."""
    found = set(re.findall(r"(?<!\d)\d{7}(?!\d)", _clean(answer)))
    return 1.0 if found == {gold} else 0.0


def exact(answer: Any, gold: str) -> float:
    return 1.0 if _normal(_clean(answer)) == _normal(gold) else 0.0


def number(answer: Any, gold: int) -> float:
    """0.75 ** |answer - gold| for the answer's number (0 if none or several)."""
    text = _clean(answer).replace(",", "")
    found = re.findall(r"-?\d+(?:\.\d+)?", text)
    if len(set(found)) != 1:
        return 0.0
    return 0.75 ** abs(float(found[0]) - gold)


def _only_one(answer: Any, choices: tuple[str, ...] | list[str]) -> str | None:
    text = f" {_normal(_clean(answer))} "
    hits = {c for c in choices if f" {_normal(c)} " in text}
    return hits.pop() if len(hits) == 1 else None


def label(answer: Any, gold: str) -> float:
    return 1.0 if _only_one(answer, LABELS) == gold else 0.0


def comparison(answer: Any, gold: str) -> float:
    # "more common" alone is understood; "as" / "than" are not required
    text = _normal(_clean(answer))
    hits = {c for c in COMPARISONS if " ".join(c.split()[:2]) in text}
    return 1.0 if hits == {gold} else 0.0


def choice(answer: Any, gold: str) -> float:
    text = _clean(answer)
    letters = set(re.findall(r"(?<![A-Za-z])([ABCD])(?![A-Za-z])", text.upper() if len(text) == 1 else text))
    return 1.0 if letters == {gold} else 0.0


def parse_pairs(answer: Any) -> set[tuple[int, int]]:
    text = "" if answer is None else str(answer)
    pairs = set()
    for a, b in re.findall(r"(\d+)\s*,\s*(\d+)", text):
        x, y = int(a), int(b)
        if x != y:
            pairs.add((min(x, y), max(x, y)))
    return pairs


def pairs_f1(answer: Any, gold: list[list[int]]) -> float:
    expected = {(min(a, b), max(a, b)) for a, b in gold}
    found = parse_pairs(answer)
    if not expected and not found:
        return 1.0
    hit = len(expected & found)
    if hit == 0:
        return 0.0
    precision, recall = hit / len(found), hit / len(expected)
    return 2 * precision * recall / (precision + recall)


SCORERS = {"needle": needle, "exact": exact, "number": number, "label": label, "comparison": comparison,
           "choice": choice, "pairs": pairs_f1}


def score(metric: str, answer: Any, gold: Any) -> float:
    return float(SCORERS[metric](answer, gold))
