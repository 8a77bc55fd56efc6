"""OOLONG-style records shared by ``oolong`` and ``oolong-pairs``: one line
per record with a date, a user id and an instance, a verse of the King James
Bible whose label (the part of the Bible it comes from, 6 labels) is known by
construction but not written in the context."""

from __future__ import annotations

import datetime as dt
import functools
import random
from collections import Counter
from dataclasses import dataclass

from .texts import Verse, kjv_verses

LABELS = ("law", "history", "wisdom", "prophets", "gospels", "letters")

# (testament, first book id, last book id) of each label
_SPANS = {
    "law": (1, 1, 5), "history": (1, 6, 17), "wisdom": (1, 18, 22),
    "prophets": (1, 23, 39), "gospels": (2, 1, 5), "letters": (2, 6, 27),
}

LABEL_RULE = (
    "Each instance is a verse of the King James Bible and should be labelled by the part of the Bible it "
    "comes from, one of 6 labels: 'law' (Genesis to Deuteronomy), 'history' (Joshua to Esther), "
    "'wisdom' (Job to the Song of Solomon), 'prophets' (Isaiah to Malachi), 'gospels' (Matthew to Acts) "
    "or 'letters' (Romans to Revelation). The labels are not written in the context."
)

HEADER = ("The following lines are records, one per line, each with a date, a user id and an instance "
          "(a verse of the King James Bible).")

DATE_FORMAT = "%b %d, %Y"
_FIRST_DAY = dt.date(2022, 1, 1)
_DAYS = 3 * 365


def label_of(verse: Verse) -> str:
    for label, (testament, first, last) in _SPANS.items():
        if verse.testament == testament and first <= verse.book_id <= last:
            return label
    raise ValueError(f"no label for {verse.book}")


@functools.lru_cache(maxsize=1)
def labelled_texts() -> dict[str, str]:
    """Verse text -> label, keeping only texts that occur once in the Bible
    (a repeated line such as "And the LORD spake unto Moses, saying," could
    belong to two labels)."""
    counts = Counter(v.text for v in kjv_verses())
    return {v.text: label_of(v) for v in kjv_verses() if counts[v.text] == 1 and "||" not in v.text}


@functools.lru_cache(maxsize=1)
def _pools() -> dict[str, list[str]]:
    pools: dict[str, list[str]] = {label: [] for label in LABELS}
    for text, label in labelled_texts().items():
        pools[label].append(text)
    return pools


@dataclass(frozen=True)
class Record:
    date: dt.date
    user: int
    text: str
    label: str

    def line(self) -> str:
        return f"Date: {self.date.strftime(DATE_FORMAT)} || User: {self.user} || Instance: {self.text}"


def make_records(rng: random.Random, chars: int) -> tuple[str, list[Record]]:
    """A context of about ``chars`` characters and its records. Each user
    posts only 2-4 of the labels, so per-user questions discriminate."""
    pools = _pools()
    estimate = max(1, chars // 210)  # ~165 characters of verse + ~45 of date and user
    users = rng.sample(range(10_000, 100_000), min(40, max(6, estimate // 20)))
    habits = {user: rng.sample(LABELS, rng.randint(2, 4)) for user in users}
    records: list[Record] = []
    lines: list[str] = []
    total = len(HEADER) + 1
    misses = 0
    while chars - total > 100 and misses < 30:
        user = rng.choice(users)
        label = rng.choice(habits[user])
        record = Record(_FIRST_DAY + dt.timedelta(days=rng.randrange(_DAYS)), user, rng.choice(pools[label]), label)
        line = record.line()
        if total + len(line) + 1 > chars:
            misses += 1  # a shorter verse may still fit
            continue
        records.append(record)
        lines.append(line)
        total += len(line) + 1
    return HEADER + "\n" + "\n".join(lines), records


def cutoff_date(rng: random.Random) -> dt.date:
    """A month end inside the records' span, for "dated after" questions."""
    month = rng.randrange(6, 30)  # leave some records on each side
    year, month0 = divmod(month, 12)
    first_next = dt.date(_FIRST_DAY.year + year + (month0 + 1) // 12, (month0 + 1) % 12 + 1, 1)
    return first_next - dt.timedelta(days=1)


def format_date(day: dt.date) -> str:
    return day.strftime(DATE_FORMAT)
