"""The long-context suites through ``rlm-kernel batch``: write a suite's
tasks as a batch tasks file (the context as ``context_text``; the gold
answer and its scorer ride along as fields the batch ignores), run them with
``rlm-kernel batch`` (many workers, or Ray), then score ``results.jsonl``
exactly as ``bench suite`` scores its own runs."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import SuiteError, generate, length_label, suite_module
from .runner import summarize
from .scoring import score


def write_tasks(suite: str, path: str, *, lengths: Sequence[int] | None = None, n: int = 5, seed: int = 0,
                **suite_options: Any) -> int:
    """Write the suite's tasks to ``path`` (JSONL); the number written."""
    lengths = list(lengths or suite_module(suite).DEFAULT_LENGTHS)
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for length in lengths:
            for task in generate(suite, length, n, seed, **suite_options):
                line = {"id": f"{suite}-{length_label(length)}-{task.index}", "query": task.question,
                        "context_text": task.context, "suite": suite, "length": length,
                        "seed": seed, "metric": task.metric, "gold": task.gold}
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
                count += 1
    return count


def _lines(path: str) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SuiteError(f"Cannot read {path!r}: {error.strerror or error}.") from None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def score_batch(tasks_path: str, results_path: str) -> dict[str, Any]:
    """The suite's results (as ``run_suite`` returns them, system ``ours``)
    from a tasks file written by :func:`write_tasks` and the batch's results."""
    tasks = [t for t in _lines(tasks_path) if "metric" in t and "gold" in t]
    if not tasks:
        raise SuiteError(f"{tasks_path!r} has no suite tasks (write them with --write-tasks).")
    results = {r["id"]: r for r in _lines(results_path)}
    suites = sorted({t["suite"] for t in tasks})
    by_length: dict[int, list[dict[str, Any]]] = {}
    records = []
    for task in tasks:
        result = results.get(task["id"])
        answer = result.get("answer") if result else None
        usage = (result or {}).get("usage") or {}
        entry = {
            "answer": answer, "score": score(task["metric"], answer, task["gold"]),
            "tokens": sum(u.get("prompt_tokens", 0) + u.get("completion_tokens", 0) for u in usage.values()),
            "cost_usd": (result or {}).get("cost_usd"), "time_s": (result or {}).get("elapsed_s") or 0.0,
            "error": None if result else "no result in the batch's results.jsonl",
            "reason": (result or {}).get("reason"),
        }
        if result and result.get("reason") != "final":
            entry["error"] = result.get("error") or result.get("reason")
        by_length.setdefault(task["length"], []).append((task, entry))
        records.append({"id": task["id"], "suite": task["suite"], "length": task["length"],
                        "question": task["query"], "gold": task["gold"], "metric": task["metric"],
                        "systems": {"ours": entry}})
    lengths = []
    for length in sorted(by_length):
        pairs = by_length[length]
        lengths.append({"length": length, "label": length_label(length),
                        "context_tokens": round(statistics.mean(len(t["context_text"]) // 4 for t, _ in pairs)),
                        "systems": {"ours": summarize([e for _, e in pairs])}})
    model, sub_model = _models(results.values())
    return {"benchmark": "suite", "suite": ",".join(suites), "source": "rlm-kernel batch",
            "config": {"model": model, "sub_model": sub_model, "lengths": sorted(by_length),
                       "n": max(len(p) for p in by_length.values()), "seed": tasks[0].get("seed", 0),
                       "systems": ["ours"]},
            "token_estimate": "tokens are estimated as characters / 4", "lengths": lengths, "tasks": records}


def _models(results: Any) -> tuple[str, str]:
    """The root and sub-model, from the first run notebook that says."""
    for result in results:
        try:
            run = json.loads(Path(result["notebook"]).read_text(encoding="utf-8"))["metadata"]["rlm"]["runs"][-1]
            return run["model"], run["sub_model"]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
    return "?", "?"


__all__ = ["score_batch", "write_tasks"]
