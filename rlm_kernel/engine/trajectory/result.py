"""How a run ended: the answer, the reason and what it spent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbformat import NotebookNode

from .writing import answer_text

REASONS = ("final", "max_iterations", "budget", "timeout", "error", "interrupted")


@dataclass
class RunResult:
    run_id: str
    answer: Any
    reason: str  # one of REASONS
    iterations: int
    subcalls: int
    usage: dict[str, dict[str, Any]]
    cost_usd: float | None
    elapsed_s: float
    answer_var: str | None = None
    error: str | None = None
    replayed_subcalls: int = 0  # answered from the notebook (a resumed run's re-run cells), not counted in subcalls
    notebook: NotebookNode | None = None
    notebook_path: str | None = None

    @property
    def answer_text(self) -> str:
        return answer_text(self.answer)

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": None if self.answer is None else self.answer_text,
            "reason": self.reason,
            "error": self.error,
            "iterations": self.iterations,
            "subcalls": self.subcalls,
            "replayed_subcalls": self.replayed_subcalls,
            "usage": {m: {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
                          "calls": u["calls"], "cost_usd": u["cost_usd"],
                          "cache_read_tokens": u.get("cache_read_tokens", 0),
                          "cache_write_tokens": u.get("cache_write_tokens", 0),
                          **({"deployments": u["deployments"]} if u.get("deployments") else {})}
                      for m, u in self.usage.items()},
            "cost_usd": self.cost_usd,
            "elapsed_s": round(self.elapsed_s, 3),
            "run_id": self.run_id,
            "answer_var": self.answer_var,
            "notebook": self.notebook_path,
        }


__all__ = ["REASONS", "RunResult"]
