"""How far a streamed root reply has got: its draft cells (started, not yet
cells of the trajectory) and its size, as the sinks are told of it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DraftCell:
    """A cell a streaming reply has started: ``kind`` "thought" or "code"."""

    id: str
    kind: str
    source: str


@dataclass
class ReplyProgress:
    """How far the root model has got with a step's reply."""

    step: int
    phase: str  # "thinking" (no token yet), "writing", "done"
    elapsed_s: float
    first_token_s: float | None = None
    chars: int = 0  # content written so far
    reasoning_chars: int = 0  # in the provider's reasoning field
    drafts: list[DraftCell] = field(default_factory=list)  # started, not yet cells of the trajectory
    dropped: list[str] = field(default_factory=list)  # ids of drafts taken back since the last progress
    text: str = ""  # the content so far (for a terminal that shows it whole)

    @property
    def tokens(self) -> int:
        """About how many tokens were written (4 characters a token)."""
        return (self.chars + self.reasoning_chars + 3) // 4


__all__ = ["DraftCell", "ReplyProgress"]
