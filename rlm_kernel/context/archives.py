"""Zip and tar archives expanded into a scratch folder, their folders kept
in each member's source (``papers.zip/2024/q1.pdf``), with the expansion
bounded by size and by count (a zip bomb stops at the limit, said in one
sentence) and member names never used as paths (no writing outside)."""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from ..errors import ContextError
from .kinds import ARCHIVES, kind_of_name

MAX_DEPTH = 3  # an archive in an archive in an archive
_CHUNK = 1 << 20


@dataclass
class Budget:
    """What all the archives of one load may expand to, together."""

    max_bytes: int
    max_members: int
    used_bytes: int = 0
    used_members: int = 0
    notes: list[tuple[str, str]] = field(default_factory=list)  # (source, sentence) of what was cut


@dataclass(frozen=True)
class Member:
    source: str  # archive source + "/" + the member's name
    path: str  # where it was expanded
    size: int


def _hidden(name: str) -> bool:
    return any(part.startswith(".") or part == "__MACOSX" for part in name.split("/") if part)


def expand(path: str, source: str, kind: str, scratch: str, budget: Budget, depth: int = 1) -> list[Member]:
    """The files of the archive at ``path``, expanded under ``scratch``, sorted
    by name; nested archives expanded too (up to ``MAX_DEPTH``)."""
    try:
        entries = list(_entries(path, kind))
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
        raise ContextError(f"{source!r} is not a readable {kind} archive (corrupt or truncated: "
                           f"{type(error).__name__}).") from None
    members: list[Member] = []
    for name, opener in sorted(entries, key=lambda e: e[0]):
        if _hidden(name):
            continue
        member_source = f"{source}/{name}"
        if budget.used_members >= budget.max_members:
            budget.notes.append((source, f"{source!r} has more than {budget.max_members:,} files; the rest were not expanded "
                                         "(the limit on an archive's files)."))
            break
        target = os.path.join(scratch, f"{budget.used_members:06d}-{os.path.basename(name)[-80:]}")
        budget.used_members += 1
        try:
            written = _copy_bounded(opener, target, budget)
        except _TooBig:
            budget.notes.append((source, f"{source!r} expands past {budget.max_bytes / 2**30:.1f} GiB (a zip bomb?); "
                                         f"expansion stopped at {name!r}, the files before it are loaded."))
            break
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, RuntimeError) as error:
            budget.notes.append((member_source, f"{member_source!r} could not be expanded ({type(error).__name__}: {error})."))
            continue
        inner = kind_of_name(name)
        if inner in ARCHIVES and depth < MAX_DEPTH:
            nested = os.path.join(scratch, f"{budget.used_members:06d}-x")
            os.mkdir(nested)
            try:
                members.extend(expand(target, member_source, inner, nested, budget, depth + 1))
            except ContextError as error:
                budget.notes.append((member_source, str(error)))
            os.unlink(target)
            continue
        members.append(Member(member_source, target, written))
    return members


def _entries(path: str, kind: str) -> Iterator[tuple[str, object]]:
    if kind == "zip":
        archive = zipfile.ZipFile(path)
        for info in archive.infolist():
            if not info.is_dir():
                yield info.filename.lstrip("/"), (archive, info)
    else:
        archive_t = tarfile.open(path, "r:*")
        for info in archive_t.getmembers():
            if info.isfile():
                yield info.name.lstrip("/"), (archive_t, info)


class _TooBig(Exception):
    pass


def _copy_bounded(opener: object, target: str, budget: Budget) -> int:
    archive, info = opener  # type: ignore[misc]
    source: IO[bytes] | None = archive.open(info) if isinstance(archive, zipfile.ZipFile) else archive.extractfile(info)
    if source is None:
        return 0
    written = 0
    with source, open(target, "wb") as out:
        while True:
            room = budget.max_bytes - budget.used_bytes
            chunk = source.read(min(_CHUNK, room + 1))
            if not chunk:
                return written
            if len(chunk) > room:
                out.close()
                os.unlink(target)
                raise _TooBig
            out.write(chunk)
            written += len(chunk)
            budget.used_bytes += len(chunk)


def remove(scratch: str) -> None:
    shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["Budget", "MAX_DEPTH", "Member", "expand", "remove"]
