"""Loading the context from files (and URLs): the entry point every caller
uses (``load_context``), the expansion of paths, folders and globs, and the
memory free for it. One plain file gives its entry (a str, a document, a
table); anything more gives a list in path order. ``loader.py`` does the work.
"""

from __future__ import annotations

import os
from typing import Any

from .loader import LoadedContext, Progress, load
from .paths import available_memory, expand_paths
from .urls import TIMEOUT_S


def load_context(patterns: list[str] | str, encoding: str = "utf-8", skip_binary: bool | None = None, *,
                 progress: Progress | None = None, workers: int | None = None, cache: Any = True,
                 url_timeout: float = TIMEOUT_S) -> LoadedContext:
    """Load files, folders, globs, archives and URLs as the context.

    Each input becomes one entry (``document.py``); a bad one is skipped
    with one sentence (``.skipped``, and the value's ``.skipped``) and the
    rest loads. ``progress(done, total, source)`` is called as inputs are
    done; ``workers`` (default: the CPUs, when there is enough to convert)
    sets the worker processes, 0 converts here; ``cache`` False converts
    again, a str is the cache's folder. ``skip_binary`` False refuses the
    load at the first input that cannot be loaded."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [os.fspath(patterns)]
    return load([os.fspath(p) for p in patterns], encoding=encoding, skip_binary=skip_binary, progress=progress,
                workers=workers, cache=cache, url_timeout=url_timeout)


def load_documents(*paths: str | os.PathLike[str], encoding: str = "utf-8", progress: bool = True,
                   workers: int | None = None, cache: Any = True, url_timeout: float = TIMEOUT_S) -> Any:
    """``rlm_kernel.load_context``: load paths, folders, globs, archives and
    URLs; the value to use as ``context`` (a list, or the one entry a plain
    file gives), which remembers where it came from (``sources_of``). With
    ``progress``, a progress line on stderr (a notebook shows it in the cell)
    and a summary line after."""
    import sys

    from .progress import ProgressBar

    if len(paths) == 1 and isinstance(paths[0], (list, tuple)):
        paths = tuple(paths[0])
    bar = ProgressBar() if progress else None
    try:
        loaded = load_context([os.fspath(p) for p in paths], encoding, progress=bar, workers=workers, cache=cache,
                              url_timeout=url_timeout)
    finally:
        if bar is not None:
            bar.close()
    if progress:
        print(loaded.summary, file=sys.stderr)
    return loaded.value


def sources_of(value: Any) -> list[str] | None:
    """The files and URLs a loaded value came from (to load it again), or None."""
    from .document import Documents, source_of

    if isinstance(value, Documents):
        return list(getattr(value, "inputs", None) or []) or None
    source = source_of(value)
    return [source] if source and (os.path.isfile(source) or source.startswith(("http://", "https://"))) else None


__all__ = ["LoadedContext", "available_memory", "expand_paths", "load_context", "load_documents", "sources_of"]
