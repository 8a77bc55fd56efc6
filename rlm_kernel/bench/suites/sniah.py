"""S-NIAH: one needle (a key and a 7-digit value) hidden at evenly spaced
depths in Paul Graham's essays; the answer is the value, scored by exact match."""

from __future__ import annotations

import re

from . import CHARS_PER_TOKEN, Task, evenly_spaced, task_rng
from .haystack import essay_haystack, sentence_boundary
from .texts import essays

NAME = "sniah"
DEFAULT_LENGTHS = (8_000, 32_000, 128_000, 512_000, 1_000_000)
QUESTION = ("What is the special magic number for {key} mentioned in the provided text? "
            "Answer with the 7-digit number only.")


def _vocabulary() -> list[str]:
    words = set()
    for _, text in essays():
        words.update(re.findall(r"\b[a-z]{5,10}\b", text))
    return sorted(words)


def generate(length: int, n: int, seed: int = 0) -> list[Task]:
    vocabulary = _vocabulary()
    tasks = []
    for index, depth in enumerate(evenly_spaced(n)):
        rng = task_rng(NAME, seed, length, index)
        haystack = essay_haystack(rng, length * CHARS_PER_TOKEN)
        while True:
            key = f"{rng.choice(vocabulary)}-{rng.choice(vocabulary)}"
            value = str(rng.randint(1_000_000, 9_999_999))
            if key not in haystack and value not in haystack:
                break
        needle = f"One of the special magic numbers for {key} is: {value}."
        haystack = haystack[:max(0, len(haystack) - len(needle) - 2)]
        position = sentence_boundary(haystack, int(depth * len(haystack)))
        context = f"{haystack[:position]}{needle} {haystack[position:]}".rstrip() if position < len(haystack) \
            else f"{haystack.rstrip()} {needle}"
        tasks.append(Task(
            suite=NAME, length=length, index=index, context=context, question=QUESTION.format(key=key),
            gold=value, metric="needle",
            meta={"key": key, "depth": round(depth, 3), "position": context.index(needle)},
        ))
    return tasks
