"""A root reply as the step reads it: whole, or streamed as it is written.

A step (``step.take_step``) reads a reply through one of two sources with the
same surface: :class:`WholeReply` (the reply came at once) and
:class:`ReplyStream` (the reply streams; its code blocks may run before it
ends). ``segments()`` gives the reply's segments in order, each once it is
*settled*; ``reply`` is the whole reply read by ``protocol.parse_reply``
once ``segments()`` is over.

When a streamed segment settles (docs/guide/notebook.md, "Streaming"): a code block once its
closing fence has arrived, and everything before it with it, unless the
reply may still turn it into thinking or each block waits for a person's
approval (``--approve``: then nothing settles before the reply's text is
whole). The rest settles once the provider says the text is whole (its
finish reason), before the usage that may follow. A reply may turn into thinking when a
bare ``</think>`` may still come (``ParsedReply.thinking_may_close``: no
reasoning field, no tag so far), which models whose chat template opens
thinking write in every reply: so a model's replies run early only once
this process has seen a whole reply of that model without one. The protocol's rules are applied to the
whole reply exactly as without streaming: a prefix's closed code blocks are
the whole reply's (``protocol.py``), and that is checked again at the end.

Meanwhile the cells the reply has started but that have not settled are
*drafts*: the sinks hear of them (``Sink.reply_progress``) so the page can
show prose and code as they are written. A draft keeps its id when it
becomes a cell. A reply that breaks off before anything settled is retried
and its drafts are dropped; once something settled (its code may have run)
the reply is kept as far as it came and the model is told where it broke.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from ..model.model_client import Completion, StreamListener
from ..protocol.reply import ParsedReply, Segment, parse_reply
from ..trajectory.progress import DraftCell, ReplyProgress
from ..trajectory.writing import new_cell_id, thought_source

if TYPE_CHECKING:
    from ..trajectory.reporter import Reporter

DRAFT_INTERVAL_S = 0.05  # the longest a written token waits before the sinks hear of it

_PLAIN_MODELS: set[str] = set()  # models seen to write a whole reply without a bare </think>
_THINKING_MODELS: set[str] = set()  # ... and models seen to write one with it: never trusted again


def learn(model: str, reply: ParsedReply) -> None:
    """Remember whether ``model`` starts its replies inside thinking (a bare
    ``</think>`` closes it): such a model's code never runs before its reply ends."""
    if any(s.how == "bare-close" for s in reply.segments):
        _THINKING_MODELS.add(model)
    else:
        _PLAIN_MODELS.add(model)


def runs_early(model: str) -> bool:
    """Whether a closed code block of ``model``'s may run before the reply
    ends even though a bare ``</think>`` could still come."""
    return model in _PLAIN_MODELS and model not in _THINKING_MODELS


def plan_cells(segments: Sequence[Segment]) -> list[tuple[str, str, str | None]]:
    """The cells ``segments`` make, as the step writes them: (kind, text,
    thinking). Thinking is folded into the prose after it, or stands alone
    before a code block or at the end."""
    cells: list[tuple[str, str, str | None]] = []
    thinking: list[str] = []

    def thought(text: str) -> None:
        joined = "\n\n".join(t for t in thinking if t) or None
        thinking.clear()
        if text or joined:
            cells.append(("thought", text, joined))

    for segment in segments:
        if segment.kind == "thinking":
            thinking.append(segment.text)
        elif segment.kind == "prose":
            thought(segment.text)
        else:
            if thinking:
                thought("")
            cells.append(("code", segment.text, None))
    if thinking:
        thought("")
    return cells


class WholeReply:
    """A reply that came whole."""

    def __init__(self, reply: ParsedReply) -> None:
        self.reply = reply
        self.notes: list[str] = []

    async def segments(self) -> AsyncIterator[Segment]:
        for segment in self.reply.segments:
            yield segment

    def cell_id(self, index: int, kind: str) -> str | None:
        return None

    def close(self) -> None:
        pass


class ReplyStream(StreamListener):
    """A streaming reply: hears the deltas (engine loop), hands the step each
    segment once settled, and tells the sinks about its drafts (through
    ``report``, the run's reporter). ``model``: the root model writing it."""

    def __init__(self, model: str, step: int, report: Reporter, *, early: bool = True) -> None:
        self.model, self.step, self.report, self.early = model, step, report, early
        self.notes: list[str] = []
        self.reply: ParsedReply | None = None
        self.completion: Completion | None = None
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._started = time.monotonic()
        self._first_token: float | None = None
        self._settled: list[Segment] = []
        self._ids: list[tuple[str, str]] = []  # the planned cells' (kind, id), drafts and cells alike
        self._made = 0  # cells the step has made
        self._dropped: list[str] = []
        self._wake = asyncio.Event()
        self._call: asyncio.Future[Completion] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._whole = False  # the provider said the content is complete
        self._parsed_upto = -1  # deltas read when _ready last parsed the prefix (-1: never)
        self._settled_at = 0  # segments settled then

    def attach(self, call: asyncio.Future[Completion]) -> None:
        """The root call whose reply this is."""
        self._call = call
        call.add_done_callback(lambda _: self._wake.set())

    # -- what the model client calls ---------------------------------------------
    def delta(self, content: str, reasoning: str) -> None:
        if self._first_token is None:
            self._first_token = time.monotonic()
        self._content.append(content)
        self._reasoning.append(reasoning)
        self._wake.set()
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(DRAFT_INTERVAL_S, self._publish)

    def finished(self) -> None:
        self._whole = True  # the text is whole: everything in it settles now, before the usage comes
        self._wake.set()

    def broken(self, message: str) -> bool:
        self._whole = False
        if self._settled:
            return False  # cells of it are in the trajectory, maybe run: keep it as far as it came
        self._content.clear()
        self._reasoning.clear()
        self._first_token = None
        self._dropped += [cell_id for _, cell_id in self._ids]
        self._ids.clear()
        self._publish()
        return True

    # -- what the step calls -------------------------------------------------------
    async def segments(self) -> AsyncIterator[Segment]:
        call = self._call
        assert call is not None, "attach() the root call first"
        while True:
            self._wake.clear()
            if call.done():
                break
            ready = self._ready()
            if ready is not None:
                self._settled.append(ready)
                yield ready
                continue
            await self._wake.wait()
        completion = call.result()  # the call's failure ends the step here
        self.completion = completion
        reply = parse_reply(completion.text, completion.reasoning, completion.thinking_blocks)
        self.reply = reply
        learn(self.model, reply)
        self._check(reply)
        if completion.broken_off:
            self.notes.append(f"Your reply broke off after {len(completion.text):,} characters ({completion.broken_off}); "
                              "the code above it ran as shown. Go on from there.")
        for segment in reply.segments[len(self._settled):]:
            self._settled.append(segment)
            yield segment

    def cell_id(self, index: int, kind: str) -> str:
        """The id of the step's cell number ``index``: its draft's, when a
        draft of that kind was shown."""
        self._made = max(self._made, index + 1)
        while len(self._ids) <= index:
            self._ids.append(("", new_cell_id()))
        draft_kind, cell_id = self._ids[index]
        if draft_kind and draft_kind != kind:
            self._dropped.append(cell_id)
            cell_id = new_cell_id()
        self._ids[index] = (kind, cell_id)
        return cell_id

    def close(self) -> None:
        """The step is over (or failed): stop the call if it still runs, take
        back the drafts that never became cells."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._call is not None:
            self._call.cancel()
            # once the step is over nobody reads the call's outcome: a failure
            # it ends with (the run's time limit, say) is the run's to report
            self._call.add_done_callback(lambda call: call.cancelled() or call.exception())
        self._dropped += [cell_id for kind, cell_id in self._ids[self._made:] if kind]
        del self._ids[self._made:]
        self.report.reply_progress(self.progress("done"))

    # -- the figures ----------------------------------------------------------------
    def phase(self) -> str:
        return "thinking" if self._first_token is None else "writing"

    @property
    def call_ended(self) -> bool:
        """The root call is over (its reply whole, or it failed), though the
        step may still be running the reply's code."""
        return self._call is not None and self._call.done()

    def figures(self) -> dict[str, object]:
        """The status's view of the call: phase, seconds since it began, tokens so far."""
        chars = sum(len(c) for c in self._content) + sum(len(r) for r in self._reasoning)
        return {"phase": self.phase(), "elapsed_s": round(time.monotonic() - self._started, 1),
                "tokens": (chars + 3) // 4}

    def progress(self, phase: str | None = None, drafts: list[DraftCell] | None = None) -> ReplyProgress:
        dropped, self._dropped = self._dropped, []
        text = "".join(self._content)
        return ReplyProgress(
            step=self.step, phase=phase or self.phase(), elapsed_s=time.monotonic() - self._started,
            first_token_s=None if self._first_token is None else self._first_token - self._started,
            chars=len(text), reasoning_chars=sum(len(r) for r in self._reasoning),
            drafts=drafts or [], dropped=dropped, text=text,
        )

    # -- inside ---------------------------------------------------------------------
    def _prefix(self, drafts: bool = False) -> ParsedReply:
        text = "".join(self._content)
        if drafts:  # a last line that may still become a fence is held back, not shown as prose
            line = text[text.rfind("\n") + 1:]
            if line.lstrip().startswith(("`", "~")):
                text = text[:len(text) - len(line)]
        return parse_reply(text, "".join(self._reasoning) or None, partial=True)

    def _ready(self) -> Segment | None:
        """The next segment that has settled, if any."""
        if self._whole:  # read whole, as the end of the call will read it
            whole = parse_reply("".join(self._content), "".join(self._reasoning) or None).segments
            return whole[len(self._settled)] if len(self._settled) < len(whole) else None
        if not self.early:
            return None
        if not self._may_settle():
            return None
        prefix = self._prefix()
        if prefix.thinking_may_close and not runs_early(self.model):
            return None
        segments = prefix.segments
        last = max((i + 1 for i, s in enumerate(segments) if s.kind == "code" and s.closed), default=0)
        done = len(self._settled)
        return segments[done] if done < last else None

    def _may_settle(self) -> bool:
        """Whether the deltas since the last parse could settle a segment: a
        code block closes only at a newline after its fence line, and thinking
        changes only at a tag (or a reasoning delta); other deltas (most
        tokens) leave the answer as it was, so the prefix is not parsed again."""
        seen, self._parsed_upto = self._parsed_upto, len(self._content)
        if not 0 <= seen <= len(self._content) or len(self._settled) != self._settled_at:
            self._settled_at = len(self._settled)
            return True
        return any(r or "\n" in c or "<" in c or ">" in c
                   for c, r in zip(self._content[seen:], self._reasoning[seen:], strict=True))

    def _publish(self) -> None:
        """Tell the sinks what the reply has written so far."""
        self._timer = None
        if self._call is not None and self._call.done():
            return
        drafts: list[DraftCell] = []
        plan = plan_cells(self._prefix(drafts=True).segments)
        for index, (kind, text, thinking) in enumerate(plan):
            if index < self._made:
                continue
            if index >= len(self._ids):
                self._ids.append((kind, new_cell_id()))
            elif self._ids[index][0] != kind:
                if self._ids[index][0]:
                    self._dropped.append(self._ids[index][1])
                self._ids[index] = (kind, new_cell_id())
            source = thought_source(text, thinking) if kind == "thought" else text
            drafts.append(DraftCell(self._ids[index][1], kind, source))
        gone = self._ids[max(len(plan), self._made):]
        self._dropped += [cell_id for kind, cell_id in gone if kind]
        del self._ids[max(len(plan), self._made):]
        self.report.reply_progress(self.progress(drafts=drafts))
        self.report.status()

    def _check(self, reply: ParsedReply) -> None:
        """The segments handed out early are the whole reply's first ones."""
        early = [(s.kind, s.text, s.closed) for s in self._settled]
        whole = [(s.kind, s.text, s.closed) for s in reply.segments[:len(early)]]
        if early != whole:  # never expected: protocol.py promises it; said rather than hidden
            self.notes.append("Note: your streamed reply read differently once it was whole; the cells above "
                              "follow the reply as it came. Check their outputs before you answer.")


__all__ = ["ReplyStream", "WholeReply", "learn", "plan_cells", "runs_early"]
