"""OOLONG-Pairs: over the same records as OOLONG, list every pair of user
ids meeting a condition on their (inferred) labels; scored by F1 over pairs."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter
from collections.abc import Callable

from . import CHARS_PER_TOKEN, Task, task_rng
from .records import LABEL_RULE, LABELS, Record, cutoff_date, format_date, make_records

NAME = "oolong-pairs"
DEFAULT_LENGTHS = (8_000, 32_000, 128_000)
ANSWER_FORMAT = ("List every such pair as (smaller id, larger id), one pair per line, "
                 "and nothing else.")

Profile = dict[int, Counter]


def _profiles(records: list[Record], after: dt.date | None = None) -> Profile:
    out: Profile = {}
    for r in records:
        counter = out.setdefault(r.user, Counter())
        if after is None or r.date > after:
            counter[r.label] += 1
    return out


def _condition(rng: random.Random, records: list[Record]) -> tuple[str, Callable[[Counter, Counter], bool], Profile]:
    a, b = rng.sample(LABELS, 2)
    kind = rng.randrange(6)
    profiles = _profiles(records)
    if kind == 0:
        return (f"both users have at least one instance labelled '{a}' or '{b}'",
                lambda x, y: (x[a] + x[b] > 0) and (y[a] + y[b] > 0), profiles)
    if kind == 1:
        return (f"both users have at least one instance labelled '{a}' and at least one labelled '{b}'",
                lambda x, y: min(x[a], x[b], y[a], y[b]) > 0, profiles)
    if kind == 2:
        return (f"neither user has any instance labelled '{a}'", lambda x, y: x[a] == 0 and y[a] == 0, profiles)
    if kind == 3:
        return (f"both users have more instances labelled '{a}' than labelled '{b}'",
                lambda x, y: x[a] > x[b] and y[a] > y[b], profiles)
    if kind == 4:
        return (f"exactly one of the two users has at least one instance labelled '{a}'",
                lambda x, y: (x[a] > 0) != (y[a] > 0), profiles)
    day = cutoff_date(rng)
    return (f"both users have at least one instance labelled '{a}' dated after {format_date(day)}",
            lambda x, y: x[a] > 0 and y[a] > 0, _profiles(records, after=day))


def generate(length: int, n: int, seed: int = 0) -> list[Task]:
    tasks = []
    for index in range(n):
        rng = task_rng(NAME, seed, length, index)
        context, records = make_records(rng, length * CHARS_PER_TOKEN)
        users = sorted({r.user for r in records})
        while True:
            text, holds, profiles = _condition(rng, records)
            gold = [[x, y] for x, y in itertools.combinations(users, 2)
                    if holds(profiles.get(x, Counter()), profiles.get(y, Counter()))]
            if gold:
                break
        question = f"{LABEL_RULE}\n\nList all pairs of user ids such that {text}. {ANSWER_FORMAT}"
        tasks.append(Task(
            suite=NAME, length=length, index=index, context=context, question=question, gold=gold,
            metric="pairs", meta={"condition": text, "users": len(users), "records": len(records)},
        ))
    return tasks
