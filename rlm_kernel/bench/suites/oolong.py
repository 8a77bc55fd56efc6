"""OOLONG: questions about label counts and comparisons over records whose
labels must first be inferred. Counts are scored 0.75^|error|, labels and
comparisons by exact match."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from . import CHARS_PER_TOKEN, Task, task_rng
from .records import LABEL_RULE, LABELS, Record, cutoff_date, format_date, make_records

NAME = "oolong"
DEFAULT_LENGTHS = (8_000, 32_000, 128_000, 512_000)
KINDS = ("count", "count_user", "count_after", "most_common", "least_common", "compare")
COMPARISONS = ("more common than", "less common than", "same frequency as")


def _question(kind: str, rng: random.Random, records: list[Record]) -> tuple[str, Any, str, dict[str, Any]] | None:
    counts = Counter(r.label for r in records)
    if kind == "count":
        label = rng.choice(LABELS)
        return (f"How many instances should be labelled '{label}'? Answer with a number only.",
                counts[label], "number", {"label": label})
    if kind == "count_user":
        user = rng.choice(sorted({r.user for r in records}))
        label = rng.choice(LABELS)
        gold = sum(1 for r in records if r.user == user and r.label == label)
        return (f"How many instances from user {user} should be labelled '{label}'? Answer with a number only.",
                gold, "number", {"label": label, "user": user})
    if kind == "count_after":
        day = cutoff_date(rng)
        label = rng.choice(LABELS)
        gold = sum(1 for r in records if r.date > day and r.label == label)
        return (f"How many instances dated after {format_date(day)} should be labelled '{label}'? "
                "Answer with a number only.", gold, "number", {"label": label, "after": day.isoformat()})
    if kind in ("most_common", "least_common"):
        ranked = sorted(LABELS, key=lambda label: counts[label], reverse=kind == "most_common")
        if counts[ranked[0]] == counts[ranked[1]]:
            return None  # no single answer
        word = "most" if kind == "most_common" else "least"
        return (f"Which label is the {word} common among all instances? Answer with the label only.",
                ranked[0], "label", {})
    first, second = rng.sample(LABELS, 2)
    difference = counts[first] - counts[second]
    gold = COMPARISONS[0] if difference > 0 else COMPARISONS[1] if difference < 0 else COMPARISONS[2]
    return (f"Is label '{first}' more common than, less common than, or the same frequency as label "
            f"'{second}'? Answer with exactly one of: 'more common than', 'less common than', "
            "'same frequency as'.", gold, "comparison", {"labels": [first, second]})


def generate(length: int, n: int, seed: int = 0) -> list[Task]:
    tasks = []
    for index in range(n):
        rng = task_rng(NAME, seed, length, index)
        context, records = make_records(rng, length * CHARS_PER_TOKEN)
        kind = KINDS[(index + seed) % len(KINDS)]
        made = None
        while made is None:
            made = _question(kind, rng, records)
            kind = "compare" if made is None else kind
        question, gold, metric, meta = made
        tasks.append(Task(
            suite=NAME, length=length, index=index, context=context, question=f"{LABEL_RULE}\n\n{question}",
            gold=gold, metric=metric, meta={"kind": kind, "records": len(records), **meta},
        ))
    return tasks
