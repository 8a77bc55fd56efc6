"""Runs made for a caller of a server (a request to ``rlm-kernel serve``, a
tool call to ``rlm-kernel mcp``): what a caller may set, and the context
kept beside the trajectory so the run can be continued.

A caller may set the run's limits (the options declared with
``limit=True``), each only as tight as the server's or tighter: a number
at most the server's (any, where the server has none), a guard the server
turned on stays on. Models, servers and keys stay the server's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .engine.runs.options import BY_NAME, OPTIONS
from .errors import RLMError

CALLER_OPTIONS = tuple(o.name for o in OPTIONS if o.limit)


class LimitError(RLMError):
    """A value a caller may not set; the message follows the option's name
    (``"50 is above the server's limit of 10"``)."""


def tightened(name: str, value: Any, server: Any) -> Any:
    """The value of limit ``name`` a caller asked for, checked against the
    server's options ``server``: refused when it is of the wrong kind or
    looser than the server's."""
    option = BY_NAME[name]
    if option.kind == "real" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    problem = option.problem(value)
    if problem is not None:
        raise LimitError(problem)
    ceiling = getattr(server, name)
    if option.kind == "flag":
        return bool(value) or bool(ceiling)  # a guard the server turned on stays on
    if value is not None and ceiling is not None and value > ceiling:
        raise LimitError(f"{option.text(value)} is above the server's limit of {option.text(ceiling)}")
    return value


def keep_context(context: str | list[str], stem: Path) -> list[str] | None:
    """Write the context beside the trajectory notebook (a file for a str, a
    folder of numbered files for a list), so that the notebook reloads it
    with ``%rlm context`` and the run can be continued. None: nothing to keep."""
    if isinstance(context, str):
        path = stem.with_suffix(".context.txt")
        path.write_text(context, encoding="utf-8")
        return [os.path.abspath(path)]
    if not context:
        return None
    folder = stem.with_suffix(".context")
    folder.mkdir()
    width = max(3, len(str(len(context))))
    for number, text in enumerate(context, 1):
        (folder / f"{number:0{width}d}.txt").write_text(text, encoding="utf-8")
    return [os.path.abspath(folder)]


__all__ = ["CALLER_OPTIONS", "LimitError", "keep_context", "tightened"]
