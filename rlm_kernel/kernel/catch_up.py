"""Runs a page missed, from their journals on disk: without collaboration,
a run whose page was closed lands nowhere but in the kernel (while it
lives: ``LiveSink.catch_up``) and in its journal (``sinks/journal.py``: a
live run keeps one, ``rlm-runs/<notebook>-<time>-<run>.journal.jsonl``
next to the notebook). When the notebook is opened again with another
kernel, a ``%%rlm`` cell with nothing of its run below it gets the run's
cells from the newest journal of that notebook whose run asked the same
question: the same ``resync`` a kernel that lived sends (``ended``,
``source: "journal"``), with the cell's final status line and answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..engine.trajectory.cells import QUERY_MAGIC, is_query_cell, source
from ..sinks.journal import SUFFIX
from .reruns import recorded_run_below

_HIDDEN_ROLES = ("query", "context")
MAX_JOURNALS = 200  # the newest ones looked at, for a notebook with a long history


def runs_folder(session_name: str | None) -> tuple[Path, str] | None:
    """Where a kernel's live runs keep their journals (``rlm-runs/`` next to
    its notebook, as ``cell_runs.trajectory_path`` puts them) and the
    notebook's stem, from Jupyter's JPY_SESSION_NAME."""
    if not session_name:
        return None
    path = Path(session_name)
    folder = path.parent if path.parent.is_dir() else Path.cwd()
    return folder / "rlm-runs", path.stem


def journal_catch_ups(page: list[dict[str, Any]], folder: Path, stem: str, known: set[str],
                      saved_at: float | None = None) -> list[dict[str, Any]]:
    """The ``resync`` fields of each run the page's notebook lacks: a
    ``%%rlm`` cell (not in ``known``, the anchors of runs this kernel has)
    with no run of its own below it whose question a journal of this
    notebook asked, last written after the notebook was saved (``saved_at``)."""
    wanted = {}
    for cell in page:
        cell_id = cell.get("id")
        if not cell_id or cell_id in known or not is_query_cell(cell) or cell.get("cell_type") != "code":
            continue
        if recorded_run_below(page, cell_id, source(cell)) is not None:
            continue
        text = source(cell)
        if text.startswith(QUERY_MAGIC):
            wanted.setdefault(text.partition("\n")[2].strip(), cell_id)
    if not wanted or not folder.is_dir():
        return []
    have = {c.get("id") for c in page}
    found = []
    journals = sorted(folder.glob(f"{stem}-*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in journals[:MAX_JOURNALS]:
        if saved_at is not None and path.stat().st_mtime < saved_at:
            break  # older journals too: their runs ended before the notebook was saved
        query = _query(path)
        anchor = wanted.get(query or "")
        if anchor is None:
            continue
        fields = _from_journal(path, anchor, have)
        if fields is not None:
            found.append(fields)
            del wanted[query]
        if not wanted:
            break
    return found


def _query(path: Path) -> str | None:
    """The question a journal's run asked (its first line)."""
    try:
        with path.open(encoding="utf-8") as handle:
            record = json.loads(handle.readline())
    except (OSError, ValueError):
        return None
    run = record.get("run") if record.get("kind") == "run" else None
    return str(run.get("query", "")).strip() if isinstance(run, dict) else None


def _from_journal(path: Path, anchor: str, have: set[Any]) -> dict[str, Any] | None:
    from ..sinks.display import status_line
    from ..sinks.journal import read_journal

    try:
        notebook = read_journal(path)
    except (OSError, ValueError):
        return None
    cells = [dict(c) for c in notebook.cells
             if c.get("metadata", {}).get("rlm", {}).get("role") not in _HIDDEN_ROLES]
    if not cells or any(c.get("id") in have for c in cells):
        return None  # nothing, or the page has some of it already: not a run it missed whole
    runs = notebook.metadata.get("rlm", {}).get("runs") or [{}]
    record = runs[-1]
    counts = [c["execution_count"] for c in cells if c.get("cell_type") == "code" and c.get("execution_count")]
    usage = record.get("usage") or {}
    reason = record.get("reason") if record.get("reason") != "running" else "stopped (its kernel ended)"
    status = {"state": "ended", "reason": reason, "iteration": record.get("iterations", 0),
              "max_iterations": (record.get("limits") or {}).get("max_iterations", "?"),
              "subcalls": record.get("subcalls", 0), "cost_usd": record.get("cost_usd"),
              "tokens": sum(int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0))
                            for u in usage.values() if isinstance(u, dict)),
              "elapsed_s": record.get("elapsed_s", 0), "run_id": record.get("run_id")}
    outputs = [{"output_type": "display_data", "data": {"text/plain": status_line(status)}, "metadata": {}}]
    closing = cells[-1]
    if closing.get("metadata", {}).get("rlm", {}).get("role") == "answer":
        text = source(closing)
        outputs.append({"output_type": "display_data", "data": {"text/markdown": text, "text/plain": text},
                        "metadata": {}})
    return {"run_id": record.get("run_id") or path.stem, "anchor_cell_id": anchor, "cells": cells,
            "anchor": {"execution_count": min(counts) - 1 if counts else None, "outputs": outputs},
            "ended": True, "source": "journal", "reason": reason, "status": {**status, "depth": 0}}


__all__ = ["journal_catch_ups", "runs_folder"]
