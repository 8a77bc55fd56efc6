"""Budgets and the ledger, shared by a run and all its child runs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import BudgetExceeded
from .model_client import Completion


@dataclass
class ModelUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    cache_read_tokens: int = 0  # of prompt_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0  # of prompt_tokens: written to it
    # calls through a Router: per deployment id, its api_base, calls and tokens
    deployments: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add_deployment(self, completion: Completion) -> None:
        where = completion.deployment
        if not where:
            return
        entry = self.deployments.setdefault(where.get("id") or where.get("api_base") or "?", {
            **({"api_base": where["api_base"]} if where.get("api_base") else {}),
            "calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry["calls"] += 1
        entry["prompt_tokens"] += completion.prompt_tokens
        entry["completion_tokens"] += completion.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 8),
        }
        if self.cache_read_tokens or self.cache_write_tokens:
            record.update(cache_read_tokens=self.cache_read_tokens, cache_write_tokens=self.cache_write_tokens)
        if self.deployments:
            record["deployments"] = {name: dict(entry) for name, entry in self.deployments.items()}
        return record


@dataclass
class Ledger:
    """Tokens and cost per model. Cost becomes None (unknown) as soon as one
    call of that model has no known price."""

    models: dict[str, ModelUsage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, completion: Completion) -> None:
        with self._lock:
            usage = self.models.setdefault(completion.model, ModelUsage())
            usage.calls += 1
            usage.prompt_tokens += completion.prompt_tokens
            usage.completion_tokens += completion.completion_tokens
            usage.cache_read_tokens += completion.cache_read_tokens
            usage.cache_write_tokens += completion.cache_write_tokens
            usage.add_deployment(completion)
            if usage.cost_usd is not None:
                usage.cost_usd = None if completion.cost_usd is None else usage.cost_usd + completion.cost_usd

    @property
    def tokens(self) -> int:
        with self._lock:
            return sum(u.prompt_tokens + u.completion_tokens for u in self.models.values())

    @property
    def cache_read_tokens(self) -> int:
        with self._lock:
            return sum(u.cache_read_tokens for u in self.models.values())

    @property
    def cache_write_tokens(self) -> int:
        with self._lock:
            return sum(u.cache_write_tokens for u in self.models.values())

    @property
    def cost_usd(self) -> float | None:
        with self._lock:
            if not self.models:
                return None
            costs = [u.cost_usd for u in self.models.values()]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    @property
    def known_cost(self) -> float:
        with self._lock:
            return sum(u.cost_usd or 0.0 for u in self.models.values())

    def as_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {model: usage.as_dict() for model, usage in self.models.items()}


class Budget:
    """Counts what a run tree has spent against its limits. Thread-safe: the
    generated code reserves sub-calls from its own thread."""

    def __init__(self, limits: Any, ledger: Ledger | None = None) -> None:
        self.limits = limits  # the run's RunOptions
        self.ledger = ledger or Ledger()
        self.started = time.monotonic()
        self.deadline = self.started + limits.timeout if limits.timeout else None
        self.subcalls = 0
        self.tripped: BudgetExceeded | None = None  # the sub-call budget, once code hit it
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def exhausted(self) -> BudgetExceeded | None:
        """The first limit that is used up, if any."""
        limits = self.limits
        if self.tripped is not None:
            return self.tripped
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return BudgetExceeded(f"The run's time limit of {limits.timeout:g} s was reached.", reason="timeout")
        if limits.max_tokens is not None and self.ledger.tokens >= limits.max_tokens:
            return BudgetExceeded(f"The token budget of {limits.max_tokens:,} tokens is used up.")
        if limits.max_cost is not None and self.ledger.known_cost >= limits.max_cost:
            return BudgetExceeded(f"The cost budget of ${limits.max_cost:g} is used up.")
        return None

    def check(self) -> None:
        problem = self.exhausted()
        if problem is not None:
            raise problem

    def reserve_subcalls(self, count: int) -> None:
        """Claim ``count`` sub-calls or raise BudgetExceeded without claiming any."""
        self.check()
        with self._lock:
            limit = self.limits.max_subcalls
            if limit is not None and self.subcalls + count > limit:
                left = limit - self.subcalls
                self.tripped = BudgetExceeded(
                    f"The sub-call budget of {limit:,} is used up ({left:,} left, {count:,} asked for)."
                )
                raise self.tripped
            self.subcalls += count

    def charge(self, completion: Completion) -> None:
        self.ledger.record(completion)
