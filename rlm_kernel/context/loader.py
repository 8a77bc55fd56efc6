"""The one loader: paths, folders, globs, archives and URLs to the value
the root model's code reads as ``context``.

Text files are read here; every other kind is converted (``convert.py``)
in worker processes when there is enough of it (``pool.py``), else here,
with conversions cached by content hash (``cache.py``). A bad input is
skipped with one sentence and the rest loads; the sentences travel with the
value (``Documents.skipped``) so the root model is told them too. Nothing is
loaded at all only when nothing could be (the sentences then make the error).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._words import plural
from ..errors import ContextError
from . import archives, kinds
from .cache import Cache
from .convert import read_text
from .document import Documents, Skipped, retag
from .paths import available_memory, expand_paths
from .pool import Task, convert_all, cpu_count, run_task
from .urls import TIMEOUT_S, is_url

Progress = Callable[[int, int, str], None]  # (done, total, the input just done)
# Converting in worker processes pays off past this much work; less is converted here.
POOL_MIN_FILES, POOL_MIN_BYTES = 4, 1 << 20
# A conversion holds a few times its input while it runs.
GROWTH = {"pdf": 4, "docx": 6, "pptx": 6, "xlsx": 12, "epub": 6, "html": 4, "csv": 6, "tsv": 6, "parquet": 10,
          "sqlite": 6, "image": 2}


@dataclass
class LoadedContext:
    value: Any
    sources: list[str] = field(default_factory=list)  # the files and URLs loaded from (to load them again)
    encoding: str = "utf-8"
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0
    cached: int = 0

    @property
    def chars(self) -> int:
        entries = self.value if isinstance(self.value, list) else [self.value]
        return sum(len(e) for e in entries if isinstance(e, str))

    @property
    def summary(self) -> str:
        """The line a person reads after the load."""
        entries = self.value if isinstance(self.value, list) else [self.value]
        said = f"Loaded {plural(len(entries), 'document')} ({self.chars:,} characters of text)"
        if self.cached:
            said += f", {self.cached:,} from the cache"
        if self.skipped:
            said += f"; skipped {len(self.skipped):,}: " + "; ".join(str(s) for s in self.skipped[:5])
            if len(self.skipped) > 5:
                said += f"; and {len(self.skipped) - 5:,} more (listed in `context.skipped`)"
        return said + "."


@dataclass
class _Input:
    source: str
    kind: str | None
    path: str | None = None
    url: str | None = None
    origin: str = ""  # the file or URL it came from (an archive's member: the archive)
    size: int = 0


def load(patterns: list[str], *, encoding: str = "utf-8", skip_binary: bool | None = None,
         progress: Progress | None = None, workers: int | None = None, cache: Any = True,
         url_timeout: float = TIMEOUT_S) -> LoadedContext:
    """``files.load_context`` does its arguments' checking and says them; this is the work."""
    if not patterns:
        raise ContextError("Give at least one path to load as the context.")
    started = time.perf_counter()
    store = Cache(cache) if isinstance(cache, str) else Cache() if cache else None
    scratch = tempfile.mkdtemp(prefix="rlm-context-")
    try:
        inputs, skipped, single = _inputs(patterns, scratch)
        entries: dict[int, Any] = {}
        cached = _take(inputs, entries, skipped, encoding, store, progress, workers, url_timeout,
                       available_memory())
    finally:  # an interrupt too: the workers are ended (pool.py), the scratch folder removed
        archives.remove(scratch)
        if store is not None:
            store.save_index()
    order = sorted(entries)
    values = [entries[i] for i in order]
    skips = [s for _, s in sorted(skipped, key=lambda pair: pair[0])]
    if skip_binary is False and skips:
        raise ContextError(str(skips[0]))
    if not values:
        raise ContextError(_nothing_loaded(patterns, skips))
    if all(isinstance(v, str) and not v for v in values):
        names = ", ".join(v.source for v in values[:3])
        raise ContextError(f"The context would be empty: {names} {'is' if len(values) == 1 else 'are'} empty.")
    sources = list(dict.fromkeys(inputs[i].origin for i in order))
    value: Any = values[0] if single and len(values) == 1 and not skips else Documents(values, skips, sources)
    return LoadedContext(value, sources, encoding, skips, time.perf_counter() - started, cached)


def _nothing_loaded(patterns: list[str], skips: list[Skipped]) -> str:
    if len(skips) == 1:
        return str(skips[0])
    where = ", ".join(repr(p) for p in patterns[:3])
    binary = sum("binary" in s.reason for s in skips)
    if binary == len(skips):
        return (f"{where} {'holds' if len(patterns) == 1 else 'hold'} no text files: all {len(skips):,} "
                f"{'file looks' if len(skips) == 1 else 'files look'} binary; give text files or documents "
                "(or a folder of them).")
    return f"Nothing in {where} could be loaded: " + "; ".join(str(s) for s in skips[:3]) + (
        f"; and {len(skips) - 3:,} more." if len(skips) > 3 else "")


def _inputs(patterns: list[str], scratch: str) -> tuple[list[_Input], list[tuple[int, Skipped]], bool]:
    """The inputs in order: files (folders walked, globs expanded), archives'
    members, URLs; and whether one plain file was given (its entry is then
    the context itself, not a list)."""
    found: list[_Input] = []
    skipped: list[tuple[int, Skipped]] = []
    budget = archives.Budget(max_bytes=_archive_limit(), max_members=10_000)
    single = len(patterns) == 1 and not is_url(patterns[0]) and not glob.has_magic(patterns[0]) and \
        not os.path.isdir(os.path.expanduser(patterns[0]))
    for pattern in patterns:
        if is_url(pattern):
            found.append(_Input(pattern, None, url=pattern, origin=pattern))
            continue
        for path in expand_paths([pattern]):
            name = str(path)
            kind = kinds.kind_of_name(name) or _sniff(path)
            if kind in kinds.ARCHIVES:
                single = False
                try:
                    members = archives.expand(name, name, kind, scratch, budget)
                except ContextError as error:
                    skipped.append((len(found), Skipped(name, str(error))))
                    continue
                for member in members:
                    found.append(_Input(member.source, kinds.kind_of_name(member.source) or _sniff(Path(member.path)),
                                        path=member.path, origin=name, size=member.size))
                for source, sentence in budget.notes:
                    skipped.append((len(found), Skipped(source, sentence)))
                budget.notes.clear()
                continue
            found.append(_Input(name, kind, path=name, origin=name, size=path.stat().st_size))
    return found, skipped, single


def _sniff(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return kinds.sniff(handle.read(512))
    except OSError:
        return None


def _archive_limit() -> int:
    free = available_memory() or 8 * 2**30
    return int(os.environ.get("RLM_ARCHIVE_MAX_BYTES") or min(8 * 2**30, free // 2))


def _take(inputs: list[_Input], entries: dict[int, Any], skipped: list[tuple[int, Skipped]], encoding: str,
          store: Any, progress: Progress | None, workers: int | None, url_timeout: float,
          free: int | None) -> int:
    """Fill ``entries`` (by input index) and ``skipped``; the count taken from the cache."""
    total, done, cached = len(inputs), 0, 0
    budget = free
    tasks: list[Task] = []

    def finished(index: int, result: tuple[str, Any]) -> None:
        nonlocal done
        item = inputs[index]
        if result[0] == "ok":
            entries[index] = retag(result[1], item.source)
        else:
            skipped.append((index, Skipped(item.source, result[1])))
        done += 1
        if progress is not None:
            progress(done, total, item.source)

    for index, item in enumerate(inputs):
        if item.url is not None:
            tasks.append(Task(index, "url", item.source, 0, url=item.url, encoding=encoding, url_timeout=url_timeout))
            continue
        if budget is not None and item.size * GROWTH.get(item.kind or "", 1.3) > budget:
            finished(index, ("error", f"{item.source!r} is {item.size / 1e9:.1f} GB but only {budget / 1e9:.1f} GB "
                                      "of memory is free for it; load a part of it or free memory first."))
            continue
        if budget is not None:
            budget -= int(item.size * (1.3 if item.kind in kinds.TEXT or item.kind is None else 1))
        kind = item.kind
        if kind is None or kind in kinds.TEXT or (kind in kinds.TEXT_WITHOUT_EXTRA and not kinds.installed(kind)):
            try:
                finished(index, ("ok", read_text(item.path or "", item.source, kind or "text", encoding)))
            except ContextError as error:
                finished(index, ("error", str(error)))
            continue
        key = None
        if store is not None:
            key = store.key(store.file_hash(item.path or "", remember=item.source == item.origin), kind, encoding)
            hit, value = store.get(key)
            if hit:
                cached += 1
                finished(index, value)
                continue
        tasks.append(Task(index, kind, item.source, item.size, path=item.path, encoding=encoding, cache_key=key,
                          cache_folder=store.folder if store is not None else None, url_timeout=url_timeout))
    if not tasks:
        return cached
    count = workers if workers is not None else (
        cpu_count() if len(tasks) >= POOL_MIN_FILES or sum(t.size for t in tasks) >= POOL_MIN_BYTES else 0)
    count = min(count, len(tasks))
    if count >= 2 or (workers is not None and count >= 1):
        convert_all(tasks, count, lambda task, result: finished(task.index, result))
    else:
        for task in tasks:
            finished(task.index, run_task(task))
    return cached


__all__ = ["LoadedContext", "Progress", "load"]
