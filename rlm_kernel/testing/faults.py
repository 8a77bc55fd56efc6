"""Faults the scripted server injects at random (seeded) into a share of its
requests: rate limits, server errors, hangs, resets, cut bodies."""

from __future__ import annotations

import random
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

FAULT_KINDS = (
    "429",  # rate-limited, no Retry-After
    "429-retry-after",  # rate-limited with Retry-After: Faults.retry_after
    "500",
    "503",
    "timeout",  # holds the request for Faults.hang seconds, then closes without an answer
    "reset",  # closes the connection with a TCP reset, no answer
    "truncated",  # a 200 whose body stops half-way (the connection closes early)
    "malformed",  # a 200 whose body is cut JSON (Content-Length matches it)
    "empty-choices",  # a 200 completion with "choices": [] (usage still sent)
)


@dataclass
class Faults:
    """Inject ``kinds`` of faults into a ``rate`` share of requests, drawn
    from a generator seeded with ``seed`` (the same seed gives the same
    sequence of draws; which request gets which draw follows arrival order).
    ``models`` limits the faults to requests for those model names."""

    rate: float = 0.1
    seed: int = 0
    kinds: Sequence[str] = FAULT_KINDS
    models: Collection[str] | None = None
    retry_after: float = 0.05
    hang: float = 5.0

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"unknown fault kinds {unknown}; choose from {', '.join(FAULT_KINDS)}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"the fault rate must be between 0 and 1, got {self.rate!r}")
        self.kinds = tuple(self.kinds)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self, model: str | None) -> str | None:
        """The fault for the next request for ``model`` (None: answer it)."""
        if self.models is not None and model not in self.models:
            return None
        with self._lock:
            if self._rng.random() >= self.rate:
                return None
            return self._rng.choice(self.kinds)


__all__ = ["FAULT_KINDS", "Faults"]
