"""Generated filler text of any size, the same for the same seed."""

from __future__ import annotations

import os
import random
import time

from .common import Progress

_WORDS = (
    "the of and to in is was for that on with as by at from his her they this which be are were had "
    "not but have one all their there been has when who will more no if out so said what up its about "
    "into than them can only other new some time could these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three river garden letter "
    "harbour winter engine market silver orchard lantern meadow quarrel ledger voyage cabinet"
).split()

_BLOCK = 1 << 20  # generation block: 1 MiB


def _text_block(seed: int, size: int = _BLOCK) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    line = 0
    while total < size:
        words = rng.choices(_WORDS, k=rng.randint(8, 18))
        sentence = " ".join(words).capitalize() + (".\n" if line % 7 == 6 else ". ")
        parts.append(sentence)
        total += len(sentence)
        line += 1
    return "".join(parts)[:size]


def make_text(chars: int, seed: int = 0) -> str:
    """Deterministic ASCII prose of exactly ``chars`` characters."""
    block = _text_block(seed)
    if chars <= len(block):
        return block[:chars]
    pieces = []
    made = 0
    i = 0
    while made < chars:
        shift = (i * 7919) % len(block)
        piece = block[shift:] + block[:shift]
        take = min(len(piece), chars - made)
        pieces.append(piece[:take])
        made += take
        i += 1
    return "".join(pieces)


def write_text_file(path: str | os.PathLike[str], size: int, seed: int = 0,
                    progress: Progress | None = None) -> float:
    """Write ``size`` bytes of ASCII prose (1 MiB blocks, rotated so no two
    neighbouring blocks are equal); returns the seconds it took."""
    started = time.monotonic()
    block = _text_block(seed).encode("ascii")
    written = 0
    i = 0
    last_report = started
    with open(path, "wb", buffering=0) as handle:
        while written < size:
            shift = (i * 7919) % len(block)
            take = min(len(block), size - written)
            chunk = (block[shift:] + block[:shift])[:take]
            handle.write(chunk)
            written += take
            i += 1
            if progress and time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                progress(f"  writing {path}: {written / size:.0%}")
    return time.monotonic() - started
