"""Run a suite: generate each length's tasks, let every system answer them,
score the answers and sum up per length (mean score, cost, tokens, time)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import SuiteError, generate, length_label, suite_module
from .scoring import score
from .systems import SYSTEMS, Models, Outcome, make_system

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


def run_suite(
    suite: str,
    models: Models,
    *,
    lengths: Sequence[int] | None = None,
    n: int = 5,
    seed: int = 0,
    compare: Sequence[str] = (),
    out_dir: str | None = None,
    progress: Progress = _quiet,
    codeqa_package: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Run ``suite`` with our RLM and each system in ``compare`` ("base",
    "rlms"); ``options`` go to the systems (max_iterations, max_cost,
    base_max_tokens, ...). Returns the JSON-ready results."""
    module = suite_module(suite)
    lengths = list(lengths or module.DEFAULT_LENGTHS)
    names = ["ours", *(c for c in dict.fromkeys(compare) if c != "ours")]
    for name in names:
        if name not in SYSTEMS:
            raise SuiteError(f"Cannot compare with {name!r}; use --compare base, rlms or base,rlms.")
    if not models.model:
        raise SuiteError("No model given; pass --model (or set RLM_MODEL) to a litellm model name "
                         "such as openai/gpt-4o-mini.")
    suite_options = {"package": codeqa_package} if suite == "codeqa" and codeqa_package else {}
    systems = [make_system(name, models, out_dir=out_dir, **options) for name in names]
    results: dict[str, Any] = {
        "benchmark": "suite", "suite": suite,
        "config": {"model": models.model, "sub_model": models.sub_model or models.model, "lengths": lengths,
                   "n": n, "seed": seed, "systems": names,
                   **({"codeqa_package": codeqa_package} if suite_options else {}),
                   **{k: v for k, v in options.items() if k in ("max_iterations", "max_cost", "base_max_tokens")}},
        "token_estimate": "tokens are estimated as characters / 4",
        "lengths": [], "tasks": [],
    }
    try:
        for length in lengths:
            tasks = generate(suite, length, n, seed, **suite_options)
            per_system: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for task in tasks:
                record = {k: v for k, v in task.describe().items() if k != "meta"}
                record["meta"] = {k: v for k, v in task.meta.items() if k not in ("options",)}
                record["systems"] = {}
                line = []
                for system in systems:
                    outcome = system.answer(task)
                    entry = _entry(outcome, task.metric, task.gold)
                    record["systems"][system.name] = entry
                    per_system[system.name].append(entry)
                    line.append(f"{system.name} {entry['score']:.2f} ({outcome.elapsed_s:.1f} s)")
                results["tasks"].append(record)
                progress(f"{suite} {length_label(length)} task {task.index + 1}/{len(tasks)}: " + ", ".join(line))
            results["lengths"].append({
                "length": length, "label": length_label(length),
                "context_tokens": round(statistics.mean(t.tokens for t in tasks)),
                "systems": {name: summarize(entries) for name, entries in per_system.items()},
            })
    finally:
        for system in systems:
            system.close()
    if out_dir:
        path = Path(out_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / f"{suite}.json").write_text(json.dumps(results, default=str, indent=1), encoding="utf-8")
    return results


def _entry(outcome: Outcome, metric: str, gold: Any) -> dict[str, Any]:
    return {
        "answer": outcome.answer, "score": score(metric, outcome.answer, gold), "tokens": outcome.tokens,
        "cost_usd": outcome.cost_usd, "time_s": round(outcome.elapsed_s, 3), "error": outcome.error,
        **outcome.extra,
    }


def summarize(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Means per task; cost is null unless every task's cost is known."""
    costs = [e["cost_usd"] for e in entries]
    return {
        "score": statistics.mean(e["score"] for e in entries),
        "cost_usd": None if any(c is None for c in costs) else statistics.mean(costs),
        "tokens": statistics.mean(e["tokens"] for e in entries),
        "time_s": statistics.mean(e["time_s"] for e in entries),
        "errors": sum(1 for e in entries if e["error"]),
        "tasks": len(entries),
    }
