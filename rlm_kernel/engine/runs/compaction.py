"""Compaction: keeping the root model's history inside its context window.

Before each root call the history is measured (``litellm.token_counter``
for the root model) against its limit: ``--max-history-tokens``, else 85% of
the model's input window as litellm's model map gives it
(``max_input_tokens``); the rest is room for the reply and for the counter
not being the provider's own tokenizer. A model litellm does not know, with
no ``--max-history-tokens``, is not compacted by guesswork: the run says so
once and compacts only when the provider answers that the prompt is too long.

Compacting replaces the older steps by a summary, written by the root model
or the sub-model (``--compact-with``). The system prompt and the first user
message (the query and the context's description) stay verbatim, and so do
the latest steps (two, or one when two are too long); the summary comes
between them as a user message that says which steps it covers and that
the variables in the session are the real state. An earlier summary is
part of what the next compaction summarises, so there is at most one.

A root call the provider refuses as too long for the window
(``ContextWindowExceededError``) is compacted and tried once more; a second
refusal ends the run with a sentence saying so.

The notebook keeps every cell: a compaction adds a thought cell with
``metadata.rlm.compaction`` (``steps: [N, M]``, ``tokens_before``,
``tokens_after``, ``by``, ``trigger``, the call's ``usage``) whose text is the
summary; ``history.rebuild`` reads it back, so a resumed or continued run
starts from the compacted history, not the full one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import nbformat
from nbformat import NotebookNode

from ..._words import tokens_text
from ..model.caching import with_breakpoints
from ..model.litellm_setup import load_litellm
from ..model.model_client import Completion, ModelCallError, ModelEndpoint
from ..steps.step import Stop
from ..steps.vision import shed_old_images
from ..trajectory.writing import new_cell_id

if TYPE_CHECKING:
    from ..model.tree import RunTree
    from ..trajectory.reporter import Reporter

COMPACT_AT = 0.85  # of the model's input window, when --max-history-tokens is not given
KEEP_STEPS = 2  # the latest steps kept verbatim (one when two are too long)
TRANSCRIPT_SHARE = 0.6  # of the summarising model's limit that the steps to summarise may fill

SUMMARY_HEAD = "[History compacted: "
_SUMMARY = re.compile(r"^\[History compacted: steps? (\d+)(?:-(\d+))?\b")


class ContextWindowFull(Stop):
    """The provider refused a root call as longer than the model's window."""

    def __init__(self, model: str) -> None:
        self.said = f"The root model's prompt is longer than {model}'s context window"
        super().__init__("error", self.said + ".")


class CompactionFailed(Exception):
    """The summary could not be made (the summarising call failed or said nothing)."""


@dataclass
class Limit:
    tokens: int | None  # what the history may reach; None: unknown (compacted only when refused)
    window: int | None  # the model's input window per litellm, when it knows it
    source: str  # "option" | "litellm" | "unknown"


# -- the history's shape ------------------------------------------------------------


def steps_range(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def summary_message(first: int, last: int, summary: str) -> dict[str, Any]:
    """The user message that stands for steps ``first``..``last``."""
    what = steps_range(first, last)
    return {"role": "user", "content": (
        f"{SUMMARY_HEAD}{what} are replaced by the summary below to keep this conversation within your "
        "context window. Their full text stays in the notebook. The variables they made are still in the "
        "session and are the real state: check them (SHOW_VARS(), print) rather than trusting the summary "
        "where it matters. The latest steps follow verbatim.]\n\n"
        f"Summary of {what}:\n{summary.strip()}")}


def read_summary(message: dict[str, Any]) -> tuple[int, int, str] | None:
    """(first step, last step, summary) of a summary message, else None."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str):
        return None
    found = _SUMMARY.match(content)
    if not found:
        return None
    first = int(found.group(1))
    last = int(found.group(2) or first)
    text = content.split("]\n\n", 1)[1] if "]\n\n" in content else ""
    text = text.split(":\n", 1)[1] if text.startswith("Summary of ") and ":\n" in text else text
    return first, last, text


@dataclass
class Split:
    """The history cut for a compaction: head, earlier summary, steps."""

    head: list[dict[str, Any]]  # system prompt and first user message, verbatim
    earlier: tuple[int, int, str] | None  # an earlier summary (first, last, text)
    steps: list[list[dict[str, Any]]]  # one group per step: its reply and what followed it
    numbers: list[int]  # each group's step number


def split(messages: list[dict[str, Any]], next_step: int) -> Split:
    """Cut ``messages`` into head, earlier summary and steps. Step numbers are
    counted back from ``next_step`` (the step the coming root call starts)."""
    earlier = read_summary(messages[2]) if len(messages) > 2 else None
    start = 3 if earlier else 2
    groups: list[list[dict[str, Any]]] = []
    for message in messages[start:]:
        if message.get("role") == "assistant" or not groups:
            groups.append([message])
        else:
            groups[-1].append(message)
    numbers = [max(1, next_step - len(groups) + i) for i in range(len(groups))]
    return Split(messages[:2], earlier, groups, numbers)


def compacted(messages: list[dict[str, Any]], next_step: int, last: int, summary: str,
              first: int | None = None) -> list[dict[str, Any]]:
    """The history with its steps up to ``last`` (and any earlier summary)
    replaced by ``summary``; what ``history.rebuild`` does at a compaction cell."""
    cut = split(messages, next_step)
    kept = [m for group, number in zip(cut.steps, cut.numbers, strict=True) if number > last for m in group]
    if first is None:
        first = cut.earlier[0] if cut.earlier else min(cut.numbers, default=last)
    return [*cut.head, summary_message(first, last, summary), *kept]


# -- the compaction cell ----------------------------------------------------------------


def compaction_cell(run_id: str, step: int, summary: str, facts: dict[str, Any]) -> NotebookNode:
    """A thought cell saying what was summarised, with the summary as its text."""
    first, last = facts["steps"]
    head = (f"**History compacted**: {steps_range(first, last)} summarised by `{facts['by']}` "
            f"({tokens_text(facts['tokens_before'])} → {tokens_text(facts['tokens_after'])}).")
    meta = {"rlm": {"run_id": run_id, "step": step, "role": "thought", "compaction": facts}}
    return nbformat.v4.new_markdown_cell(f"{head}\n\n{summary.strip()}", id=new_cell_id(), metadata=meta)


def cell_summary(source: str) -> str:
    """The summary a compaction cell holds (its text after the first line;
    a person may have edited it)."""
    return source.split("\n\n", 1)[1].strip() if "\n\n" in source else ""


# -- the run's side ----------------------------------------------------------------------


class CompactionHost(Protocol):
    """What compaction uses of its run (``runs.run.Run`` is one)."""

    run_id: str
    iteration: int  # the step the run is at
    report: Reporter

    def add_cell(self, cell: NotebookNode) -> None: ...

    def add_tokens(self, prompt: int, completion: int) -> None: ...

    def check_stop(self) -> None:
        """Raise ``Stop`` when the run was asked to stop or a budget is used up."""


class Compactor:
    """Keeps one run's history inside its root model's window: ``endpoint``,
    the root model's; ``tree``, the calls' budget, client and options."""

    def __init__(self, endpoint: ModelEndpoint, tree: RunTree, host: CompactionHost) -> None:
        self.endpoint, self.tree, self.run = endpoint, tree, host
        self.count = 0  # compactions in this run
        self._limit: Limit | None = None

    @property
    def model(self) -> str:
        return self.endpoint.model

    def limit(self) -> Limit:
        if self._limit is None:
            given = self.tree.options.max_history_tokens
            window = input_window(self.model)
            if given:
                self._limit = Limit(int(given), window, "option")
            elif window:
                self._limit = Limit(int(window * COMPACT_AT), window, "litellm")
            else:
                self._limit = Limit(None, None, "unknown")
                self.run.report.note(
                    f"litellm does not know the input window of {self.model}: its history is compacted only "
                    "if the provider says it is too long. Give --max-history-tokens to compact before that.")
        return self._limit

    async def call(self, messages: list[dict[str, Any]],
                   root_call: Callable[[list[dict[str, Any]]], Awaitable[Completion]]) -> Completion:
        """The root call for ``messages`` (compacted in place first when they
        reach the limit, the oldest of many images shed; compacted and sent
        once more when the provider refuses them as too long)."""
        limit = self.limit()
        shed_old_images(messages)
        if limit.tokens is not None and upper_bound(messages) > limit.tokens:
            before = await count_tokens(self.model, messages)
            if before > limit.tokens:
                try:
                    await self.compact(messages, "limit", before)
                except CompactionFailed as failed:
                    self.run.report.note(f"The history could not be compacted ({failed}); it was sent whole.")
        try:
            completion = await root_call(with_breakpoints(self.model, messages))
        except ContextWindowFull as full:
            try:
                done = await self.compact(messages, "context_window", await count_tokens(self.model, messages))
            except CompactionFailed as failed:
                raise Stop("error", f"{full.said}, and compacting the history failed ({failed}).") from None
            if done is None:
                raise Stop("error", f"{full.said}, and the history has no earlier steps to compact "
                                    "(only the latest step is left).") from None
            try:
                completion = await root_call(with_breakpoints(self.model, messages))
            except ContextWindowFull:
                raise Stop("error", f"The root model's context window was exceeded again after {done} were "
                                    "compacted into a summary: the latest step alone is too long for "
                                    f"{self.model} (lower --max-output-chars, or use a model with a larger "
                                    "window).") from None
        return completion

    async def compact(self, messages: list[dict[str, Any]], trigger: str, before: int) -> str | None:
        """Replace the older steps of ``messages`` (in place) by a summary and
        add the compaction cell; the steps summarised ("steps 1-5"), or None
        when there is nothing to compact. Raises :class:`CompactionFailed`."""
        run = self.run
        next_step = max(1, run.iteration)
        cut = split(messages, next_step)
        if len(cut.steps) < 2:
            return None
        keep = KEEP_STEPS if len(cut.steps) > KEEP_STEPS else 1
        limit = self.limit().tokens or before
        if keep > 1:
            tail = [m for group in cut.steps[-keep:] for m in group]
            if await count_tokens(self.model, [*cut.head, *tail]) > limit * 0.7:
                keep = 1
        last = cut.numbers[-keep - 1]
        first = cut.earlier[0] if cut.earlier else cut.numbers[0]
        run.check_stop()
        endpoint = self.endpoint if self.tree.options.compact_with == "root" else self.tree.sub_endpoint
        endpoint = dataclasses.replace(endpoint, json_steps=False)  # a summary is prose, not a JSON step
        completion = await self._summarise(endpoint, cut, len(cut.steps) - keep, first, last, limit)
        summary = completion.text.strip()
        new = compacted(messages, next_step, last, summary, first)
        after = await count_tokens(self.model, new)
        messages[:] = new
        self.count += 1
        usage = {"model": completion.model, "prompt_tokens": completion.prompt_tokens,
                 "completion_tokens": completion.completion_tokens, "cost_usd": completion.cost_usd,
                 "latency_s": round(completion.latency_s, 4)}
        facts = {"steps": [first, last], "tokens_before": before, "tokens_after": after, "by": endpoint.model,
                 "trigger": trigger, "limit": self.limit().tokens, "usage": usage}
        run.add_cell(compaction_cell(run.run_id, next_step, summary, facts))
        run.report.status(force=True)
        return steps_range(first, last)

    async def _summarise(self, endpoint: ModelEndpoint, cut: Split, upto: int, first: int, last: int,
                         limit: int) -> Completion:
        tree = self.tree
        own = input_window(endpoint.model)
        room = int(min(limit, int(own * COMPACT_AT) if own else limit) * TRANSCRIPT_SHARE)
        prompt = summary_prompt(cut, upto, first, last, max_chars=max(4000, room * 3))
        try:
            async with tree.slots():
                completion = await tree.charged_call(endpoint, prompt)
        except ModelCallError as failure:
            raise CompactionFailed(f"the summary call failed: {failure}") from None
        self.run.add_tokens(completion.prompt_tokens, completion.completion_tokens)
        if not completion.text.strip():
            raise CompactionFailed(f"{endpoint.model} wrote an empty summary")
        return completion


SUMMARY_SYSTEM = """\
You keep the working notes of a Recursive Language Model run: a model that answers a query \
about a large `context` by writing Python in a live session, one step at a time, and calling \
sub-models from that code. Its history is outgrowing its context window, so some of its \
earlier steps are replaced by your summary. The model reads your summary instead of those steps."""

SUMMARY_ASK = """\
Write the summary of {what} that the model will continue from. Keep: what it found (exact \
figures, names, short quotes that matter), which variables hold which results (their names, \
what they hold, their sizes), what it tried that failed and why, and what is left to do. \
Leave out code that only looked around. At most about 400 words, plain text or short lists."""


def summary_prompt(cut: Split, upto: int, first: int, last: int, max_chars: int) -> list[dict[str, Any]]:
    """The summarising call's messages: the query, the earlier summary and
    steps ``cut.steps[:upto]``, each message cut to its share of ``max_chars``."""
    parts = [f"The query and how `context` was described:\n{_text(cut.head[1])}"]
    if cut.earlier:
        parts.append(f"Summary of {steps_range(cut.earlier[0], cut.earlier[1])} (written earlier):\n"
                     f"{cut.earlier[2]}")
    messages = [m for group in cut.steps[:upto] for m in group]
    share = max(500, max_chars // max(1, len(messages) + len(parts)))
    parts = [_cut(p, share * 2) for p in parts]
    for group, number in zip(cut.steps[:upto], cut.numbers[:upto], strict=True):
        lines = [f"### Step {number}"]
        for message in group:
            label = "The model wrote:" if message.get("role") == "assistant" else "It was told:"
            lines.append(f"{label}\n{_cut(_text(message), share)}")
        parts.append("\n\n".join(lines))
    what = steps_range(first, last)
    parts.append(SUMMARY_ASK.format(what=what))
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content or ""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters left out ...]\n{text[-half:]}"


# -- measuring -----------------------------------------------------------------------------

_WINDOWS: dict[str, int | None] = {}


def input_window(model: str) -> int | None:
    """The model's input window in tokens per litellm's model map (None: unknown)."""
    if model not in _WINDOWS:
        try:
            window = load_litellm().get_model_info(model=model).get("max_input_tokens")
        except Exception:
            window = None
        _WINDOWS[model] = int(window) if window else None
    return _WINDOWS[model]


IMAGE_TOKENS = 3000  # more than a provider counts for one image of at most 1,024 px (vision.py)


def upper_bound(messages: list[dict[str, Any]]) -> int:
    """More tokens than any tokenizer makes of ``messages`` (a token is at
    least one UTF-8 byte; an image part at most ``IMAGE_TOKENS``), so the
    exact count can be skipped while far below."""
    return sum(len(_text(m).encode("utf-8")) + 8 + IMAGE_TOKENS * _images(m) for m in messages) + 16


def _images(message: dict[str, Any]) -> int:
    content = message.get("content")
    return sum(isinstance(p, dict) and p.get("type") == "image_url" for p in content) if isinstance(content, list) else 0


async def count_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """``messages`` in tokens as litellm counts them for ``model`` (off the engine loop)."""
    def count() -> int:
        try:
            return int(load_litellm().token_counter(model=model, messages=messages))
        except Exception:
            return upper_bound(messages) // 3
    return await asyncio.to_thread(count)


__all__ = ["COMPACT_AT", "KEEP_STEPS", "CompactionFailed", "Compactor", "ContextWindowFull", "Limit",
           "cell_summary", "compacted", "compaction_cell", "read_summary", "split", "summary_message"]
