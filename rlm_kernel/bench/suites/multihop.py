"""Multi-hop questions over a document collection (BrowseComp-Plus style):
documents cut from Paul Graham's essays and the King James Bible carry
relation sentences ("the mentor of X was Y"); a question follows a chain of
2-4 of them, among near-duplicate distractors (the same person under another
relation, people whose name differs in one part). Exact match on the name."""

from __future__ import annotations

import functools
import random
import re
from collections import Counter

from . import CHARS_PER_TOKEN, Task, task_rng
from .haystack import filler_documents, sentence_boundary
from .texts import kjv_verses

NAME = "multihop"
DEFAULT_LENGTHS = (8_000, 32_000, 128_000, 512_000, 1_000_000)
RELATIONS = ("mentor", "patron", "rival", "steward", "physician", "scribe", "envoy", "heir")
_CARRIERS = (
    "According to the old registers, the {r} of {x} was {y}.",
    "It is recorded that the {r} of {x} was {y}.",
    "Few now remember that the {r} of {x} was {y}.",
    "The archives say that the {r} of {x} was {y}.",
)
_FACT_CHARS = 75


@functools.lru_cache(maxsize=1)
def name_parts() -> tuple[str, ...]:
    """Proper names of the King James Bible (capitalized mid-sentence at least
    three times, never written in lower case)."""
    text = "\n".join(v.text for v in kjv_verses())
    lower = set(re.findall(r"\b[a-z]+\b", text))
    counts = Counter(m.group(1) for m in re.finditer(r"[a-z,;] ([A-Z][a-z]{3,8})\b", text))
    return tuple(sorted(w for w, c in counts.items() if c >= 3 and w.lower() not in lower))


class _Names:
    """Fresh full names ("First Last"), never the same twice in a task."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.parts = name_parts()
        self.used: set[str] = set()

    def _take(self, first: str | None = None, last: str | None = None) -> str:
        while True:
            name = f"{first or self.rng.choice(self.parts)} {last or self.rng.choice(self.parts)}"
            if name not in self.used and name.split()[0] != name.split()[1]:
                self.used.add(name)
                return name

    def fresh(self) -> str:
        return self._take()

    def near(self, name: str) -> str:
        """A different person sharing one part of ``name``."""
        first, last = name.split()
        return self._take(first=first) if self.rng.random() < 0.5 else self._take(last=last)


def _fact(rng: random.Random, relation: str, subject: str, obj: str) -> str:
    return rng.choice(_CARRIERS).format(r=relation, x=subject, y=obj)


def _chain(rng: random.Random, names: _Names, hops: int) -> tuple[list[str], list[str], list[str], list[str]]:
    """(people, relations, true facts, distractor facts) of one chain."""
    people = [names.fresh() for _ in range(hops + 1)]
    relations = rng.sample(RELATIONS, hops)
    facts = [_fact(rng, relations[i], people[i], people[i + 1]) for i in range(hops)]
    distractors = []
    for i in range(hops):
        other = rng.choice([r for r in RELATIONS if r != relations[i]])
        distractors.append(_fact(rng, other, people[i], names.near(people[i + 1])))
        distractors.append(_fact(rng, relations[i], names.near(people[i]), names.near(people[i + 1])))
    return people, relations, facts, distractors


def _question(people: list[str], relations: list[str]) -> str:
    path = " of the ".join(reversed(relations))
    return (f"Who was the {path} of {people[0]}? The documents state relations as sentences such as "
            "'the mentor of X was Y'; follow them one at a time. Answer with the full name only.")


def _insert(rng: random.Random, bodies: list[str], sentences: list[str]) -> None:
    by_doc: dict[int, list[str]] = {}
    for sentence in sentences:
        by_doc.setdefault(rng.randrange(len(bodies)), []).append(sentence)
    for doc, extra in by_doc.items():
        body = bodies[doc]
        for sentence in extra:
            at = sentence_boundary(body, rng.randrange(len(body)))
            body = f"{body[:at].rstrip()} {sentence} {body[at:].lstrip()}".strip()
        bodies[doc] = body


def _count(context: str, phrase: str) -> int:
    return len(re.findall(rf"(?<![A-Za-z]){re.escape(phrase)}(?![A-Za-z])", context))


def generate(length: int, n: int, seed: int = 0) -> list[Task]:
    tasks = []
    for index in range(n):
        rng = task_rng(NAME, seed, length, index)
        hops = 2 + (index + seed) % 3
        chars = length * CHARS_PER_TOKEN
        background_count = max(4, chars // 6000)
        docs = filler_documents(rng, chars - _FACT_CHARS * (background_count + 3 * hops) - 200)
        while True:
            names = _Names(rng)
            people, relations, facts, distractors = _chain(rng, names, hops)
            background = [_fact(rng, rng.choice(RELATIONS), names.fresh(), names.fresh())
                          for _ in range(background_count)]
            bodies = [body for _, body in docs]
            _insert(rng, bodies, facts + distractors + background)
            parts = [f"Document {i + 1}: {title}\n{body}"
                     for i, ((title, _), body) in enumerate(zip(docs, bodies, strict=True))]
            context = f"A collection of {len(docs)} documents.\n\n" + "\n\n".join(parts)
            # the gold name once, each true link once (a KJV name pair could occur in the filler)
            if _count(context, people[-1]) == 1 and all(
                _count(context, f"the {r} of {x} was") == 1 for r, x in zip(relations, people[:-1], strict=True)
            ):
                break
        tasks.append(Task(
            suite=NAME, length=length, index=index, context=context, question=_question(people, relations),
            gold=people[-1], metric="exact",
            meta={"hops": hops, "chain": people, "relations": relations, "documents": len(docs)},
        ))
    return tasks
