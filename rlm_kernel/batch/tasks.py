"""A batch's tasks (one JSON object per line of TASKS.jsonl) and its
results (DIR/results.jsonl, one line per task: the ``run --json`` object
plus the task's ``id``).

A task has an ``id`` (its notebook is DIR/<id>.ipynb), a ``query``, and
either ``context`` (a path or a list of paths, loaded as ``%rlm context``
loads them; relative paths are relative to the tasks file) or
``context_text`` (the context itself: a str, or any JSON value)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.trajectory.writing import answer_from_markdown
from ..errors import RLMError

RESULTS = "results.jsonl"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@dataclass
class Task:
    id: str
    query: str
    paths: list[str] | None  # absolute paths to load as the context
    context_text: Any = None
    line: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "query": self.query, "paths": self.paths, "context_text": self.context_text}


def read_tasks(path: str) -> list[Task]:
    """Every task of the file, or one sentence about the first line that is
    not a task (nothing runs then)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RLMError(f"Cannot read the tasks file {path!r}: {error.strerror or error}.") from None
    except UnicodeDecodeError:
        raise RLMError(f"The tasks file {path!r} is not UTF-8 text.") from None
    base = Path(path).resolve().parent
    tasks: list[Task] = []
    seen: set[str] = set()
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        where = f"Line {number} of {path}"
        try:
            item = json.loads(text)
        except ValueError as error:
            raise RLMError(f"{where} is not JSON ({error.msg}).") from None
        if not isinstance(item, dict):
            raise RLMError(f"{where} is not a JSON object with an id and a query.")
        task_id = item.get("id")
        if isinstance(task_id, int) and not isinstance(task_id, bool):
            task_id = str(task_id)
        if not isinstance(task_id, str) or not _SAFE_ID.match(task_id):
            raise RLMError(f"{where} needs an `id` usable as a file name (letters, digits, '.', '_', '-'), "
                           f"got {item.get('id')!r}.")
        if task_id in seen:
            raise RLMError(f"{where} repeats the id {task_id!r}; each task needs its own.")
        seen.add(task_id)
        query = item.get("query")
        if not isinstance(query, str) or not query.strip():
            raise RLMError(f"{where} (task {task_id!r}) needs a `query`, the question to ask.")
        if ("context" in item) == ("context_text" in item):
            raise RLMError(f"{where} (task {task_id!r}) needs either `context` (a path or a list of paths) "
                           "or `context_text` (the context itself).")
        paths = None
        if "context" in item:
            given = item["context"]
            given = [given] if isinstance(given, str) else given
            if not isinstance(given, list) or not given or not all(isinstance(p, str) and p for p in given):
                raise RLMError(f"{where} (task {task_id!r}): `context` must be a path or a list of paths.")
            paths = [str(base / os.path.expanduser(p)) for p in given]
        tasks.append(Task(task_id, query, paths, item.get("context_text"), number))
    if not tasks:
        raise RLMError(f"The tasks file {path!r} has no tasks.")
    return tasks


def notebook_path(out: Path, task_id: str) -> Path:
    return out / f"{task_id}.ipynb"


def last_run(path: Path) -> dict[str, Any] | None:
    """The record of the last run in a trajectory notebook (None: no usable notebook)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        return nb["metadata"]["rlm"]["runs"][-1]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def finished(out: Path, task_id: str) -> bool:
    """Whether the task's notebook ended with a final answer (a re-run skips it)."""
    record = last_run(notebook_path(out, task_id))
    return record is not None and record.get("reason") == "final"


def read_results(out: Path) -> dict[str, dict[str, Any]]:
    """The results already written, by task id (a later line wins)."""
    found: dict[str, dict[str, Any]] = {}
    try:
        text = (out / RESULTS).read_text(encoding="utf-8")
    except OSError:
        return found
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue  # a line cut short by an interrupted batch
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            found[item["id"]] = item
    return found


def line_from_notebook(out: Path, task_id: str) -> dict[str, Any]:
    """A finished task's results line rebuilt from its notebook (when
    results.jsonl lost it); the answer is there only if the answer cell holds
    it whole."""
    path = notebook_path(out, task_id)
    record = last_run(path) or {}
    answer = None
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cell = next(c for c in reversed(nb["cells"]) if c["metadata"].get("rlm", {}).get("role") == "answer")
        meta = cell["metadata"]["rlm"]
        body = "".join(cell["source"]).split("\n\n", 1)[1]
        text = answer_from_markdown(body, meta.get("answer_format"), meta.get("answer_chars"))
        if len(text) == meta.get("answer_chars"):
            answer = text
    except (OSError, ValueError, KeyError, IndexError, StopIteration):
        pass
    return {"id": task_id, "answer": answer, "reason": record.get("reason"), "error": record.get("error"),
            "iterations": record.get("iterations"), "subcalls": record.get("subcalls"),
            "replayed_subcalls": record.get("replayed_subcalls", 0), "usage": record.get("usage", {}),
            "cost_usd": record.get("cost_usd"), "elapsed_s": record.get("elapsed_s"),
            "run_id": record.get("run_id"), "answer_var": record.get("answer_var"), "notebook": str(path)}


def failed_line(task_id: str, error: str) -> dict[str, Any]:
    """The results line of a task that could not run (its context failed to load...)."""
    return {"id": task_id, "answer": None, "reason": "error", "error": error, "iterations": 0, "subcalls": 0,
            "replayed_subcalls": 0, "usage": {}, "cost_usd": None, "elapsed_s": 0.0, "run_id": None,
            "answer_var": None, "notebook": None}


class Results:
    """DIR/results.jsonl: lines appended as tasks end (an interrupted batch
    keeps them), then rewritten with one line per task in the tasks' order."""

    def __init__(self, out: Path) -> None:
        self.path = out / RESULTS
        self.lines = read_results(out)

    def add(self, line: dict[str, Any]) -> None:
        self.lines[line["id"]] = line
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")

    def rewrite(self, tasks: list[Task]) -> None:
        partial = self.path.with_name(RESULTS + ".partial")
        with partial.open("w", encoding="utf-8") as handle:
            for task in tasks:
                if task.id in self.lines:
                    handle.write(json.dumps(self.lines[task.id], ensure_ascii=False) + "\n")
        os.replace(partial, self.path)


__all__ = ["RESULTS", "Results", "Task", "failed_line", "finished", "line_from_notebook", "notebook_path",
           "read_results", "read_tasks"]
