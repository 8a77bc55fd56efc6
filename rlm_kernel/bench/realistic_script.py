"""The script of ``rlm-kernel bench realistic``: a root model that writes like
a real one, and sub-calls that take seconds, fixed by a seed before anything
is measured.

Each root step's reply is prose followed by one ```` ```repl ```` block that
ends the reply (nothing after the closing fence), ``tokens`` long at
``tokens_per_s`` after ``ttft`` (token as the scripted server cuts them:
``testing.server.tokens``). ``batches`` of the steps (never the first or the
last) send ``llm_query_batched`` over ``prompts`` slices of the context; each
sub-call's latency and answer are drawn per prompt, so both libraries get the
same latency for the same prompt. The last step adds up every batch's answers
and answers through the ``answer`` dict, the ending both libraries read
(``rlms`` 0.1.3 dropped ``FINAL``/``FINAL_VAR``).

The critical-path ideal is what no client can beat on this script: the root
replies' own writing time (time to first token plus the tokens) and, per
batch, its slowest sub-call. It leaves out the code's own execution (slicing a
200 kB string, a few ms), request round trips, and process start and imports
(the wall time is taken around ``completion()`` in a warmed-up process).
"""

from __future__ import annotations

import heapq
import random
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..testing.server import Reply, prompt_text, tokens
from .common import BenchError
from .filler import make_text
from .servers import root_step

ROOT_MODEL, SUB_MODEL = "realistic-root", "realistic-sub"
QUERY = "How many place names does the context mention in all?"
_HEADER = re.compile(r"^\[batch (\d+) part (\d+)\]")


@dataclass(frozen=True)
class Params:
    """The script's parameters (the issue's defaults)."""

    seed: int = 7
    steps: int = 10
    batches: int = 3
    prompts: int = 100
    tokens: tuple[int, int] = (300, 600)
    tokens_per_s: tuple[float, float] = (40.0, 80.0)
    ttft_s: tuple[float, float] = (0.5, 1.0)
    sub_latency_s: tuple[float, float] = (1.0, 3.0)
    chunk_chars: int = 2000
    time_scale: float = 1.0  # < 1 runs the same script faster (every time multiplied by it)

    def check(self) -> None:
        if self.steps < 1 or self.prompts < 1 or self.batches < 0 or self.chunk_chars < 1:
            raise BenchError("steps and prompts must be at least 1, batches at least 0")
        if self.batches > max(0, self.steps - 2):
            raise BenchError(f"{self.batches} batches need at least {self.batches + 2} steps "
                             "(the first step reads the context, the last one answers)")
        if self.time_scale <= 0:
            raise BenchError("the time scale must be above 0")
        for low, high in (self.tokens, self.tokens_per_s, self.ttft_s, self.sub_latency_s):
            if not 0 <= low <= high:
                raise BenchError(f"a range must run from low to high, got {low}-{high}")
        if self.tokens[0] < 150:
            raise BenchError("replies need at least 150 tokens (a batch step's code and first sentence take ~140)")


@dataclass
class StepPlan:
    step: int
    text: str
    tokens: int
    ttft_s: float
    tokens_per_s: float
    batch: int | None = None  # the batch this step's code sends (1, 2, ...)

    def reply(self) -> Reply:
        return Reply(text=self.text, ttft=self.ttft_s, tokens_per_s=self.tokens_per_s)

    @property
    def generation_s(self) -> float:
        return self.reply().generation_s()


@dataclass
class RealisticScript:
    params: Params
    steps: list[StepPlan]
    latencies: dict[int, list[float]]  # batch -> seconds per part
    counts: dict[int, list[int]]  # batch -> the number each part's answer gives
    context_chars: int

    @property
    def expected_answer(self) -> str:
        return f"total: {sum(sum(c) for c in self.counts.values())}"

    def context(self) -> str:
        return make_text(self.context_chars, seed=self.params.seed)

    def root_reply(self, step: int) -> Reply:
        if 1 <= step <= len(self.steps):
            return self.steps[step - 1].reply()
        return Reply(text=f"(the script has {len(self.steps)} steps; this is request {step})")

    def sub_reply(self, prompt: str) -> Reply:
        found = _HEADER.match(prompt)
        if not found or int(found[1]) not in self.latencies:
            return Reply(text=f"not a prompt of this script: {prompt[:60]!r}")
        batch, part = int(found[1]), int(found[2])
        return Reply(text=f"count: {self.counts[batch][part]}", delay=self.latencies[batch][part])

    def batch_bound(self, batch: int, concurrency: int) -> float:
        """How long ``batch`` takes at best with ``concurrency`` calls in flight,
        queued in prompt order, each taking exactly its latency."""
        slots = [0.0] * max(1, min(concurrency, len(self.latencies[batch])))
        end = 0.0
        for latency in self.latencies[batch]:
            start = heapq.heappop(slots)
            heapq.heappush(slots, start + latency)
            end = max(end, start + latency)
        return end

    def ideal(self) -> dict[str, Any]:
        """The critical path: every root reply's writing time plus each batch's slowest sub-call."""
        root = [s.generation_s for s in self.steps]
        slowest = {b: max(lat) for b, lat in self.latencies.items()}
        return {"root_s": root, "root_total_s": sum(root), "slowest_subcall_s": slowest,
                "ideal_s": sum(root) + sum(slowest.values())}

    def describe(self) -> dict[str, Any]:
        counts = [s.tokens for s in self.steps]
        return {
            **asdict(self.params),
            "batch_steps": [s.step for s in self.steps if s.batch is not None],
            "reply_tokens": counts, "reply_tokens_total": sum(counts),
            "reply_tokens_per_s": [round(s.tokens_per_s, 1) for s in self.steps],
            "reply_ttft_s": [round(s.ttft_s, 3) for s in self.steps],
            "context_chars": self.context_chars, "expected_answer": self.expected_answer,
            "subcalls": sum(len(v) for v in self.latencies.values()),
            "ideal": self.ideal(),
        }


# -- writing the script -----------------------------------------------------------

_OPENERS = (
    "Let me look at what the last output tells me before going on.",
    "The output so far is consistent with what I expected.",
    "I will keep the intermediate results in variables so that nothing has to be recomputed.",
    "Before counting anything I want to be sure of the shape of the context.",
    "The plan is to split the context into equal parts and ask a sub-model about each part.",
    "Each part is small enough for a sub-model to read in one call.",
)
_WORDS = (
    "context part parts count counts answer answers variable output line lines place places name names "
    "sub-model batch slice slices total check result results print length characters words first last "
    "each every then next because so that which while before after careful exact simple quick whole "
    "sum list index prompt prompts read reading split splitting plan step steps verify looks seems"
).split()


def _prose(rng: random.Random) -> str:
    words = rng.choices(_WORDS, k=rng.randint(9, 20))
    return " ".join(words).capitalize() + "."


def _batch_code(batch: int, prompts: int, chunk: int) -> str:
    return "\n".join([
        f"parts = [context[i * {chunk}:(i + 1) * {chunk}] for i in range({prompts})]",
        f"prompts = [f\"[batch {batch} part {{i}}] How many place names does this part mention? "
        "Reply as 'count: N'.\\n\\n{part}\" for i, part in enumerate(parts)]",
        f"answers_{batch} = llm_query_batched(prompts)",
        f"counts_{batch} = [int(a.rsplit(':', 1)[-1]) for a in answers_{batch}]",
        f"print(len(answers_{batch}), 'answers,', sum(counts_{batch}), 'in all; first:', answers_{batch}[:2])",
    ])


_LOOKS = (
    "words = context.split()\nprint(len(words), 'words,', len(set(words)), 'distinct')",
    "lines = context.splitlines()\nprint(len(lines), 'lines')\nprint(lines[:3])",
    "import re\ncaps = re.findall(r'\\b[A-Z][a-z]+\\b', context)\nprint(len(caps), sorted(set(caps))[:20])",
    "print(context.count(' river '), context.count(' harbour '), context.count(' market '))",
)


def _code(step: int, steps: int, batch: int | None, done: list[int], rng: random.Random, p: Params) -> str:
    if step == 1:
        return "print(len(context))\nprint(context[:400])"
    if batch is not None:
        return _batch_code(batch, p.prompts, p.chunk_chars)
    if step == steps:
        total = " + ".join(f"sum(counts_{b})" for b in done) or "0"
        return (f"total = {total}\nprint('total:', total)\n"
                "answer[\"content\"] = f\"total: {total}\"\nanswer[\"ready\"] = True")
    if done:
        last = done[-1]
        return f"print(sorted(counts_{last})[-10:], sum(counts_{last}) / len(counts_{last}))"
    return rng.choice(_LOOKS)


def _reply(step: int, code: str, target: int, rng: random.Random) -> tuple[str, int]:
    """Prose, then the code block that ends the reply: ``target`` tokens, or
    up to three over (the last word and its full stop)."""
    fence = f"\n\n```repl\n{code}\n```"
    words = [f"Step {step}.", *rng.choice(_OPENERS).split()]
    pending: list[str] = []
    while len(tokens(" ".join(words) + fence)) < target:
        if not pending:
            pending = _prose(rng).split()
        words.append(pending.pop(0))
    if not words[-1].endswith("."):
        words[-1] += "."
    text = " ".join(words) + fence
    return text, len(tokens(text))


def make_script(params: Params) -> RealisticScript:
    """The script for ``params``: the same every time for the same parameters."""
    params.check()
    rng = random.Random(f"realistic/{params.seed}")
    middle = list(range(2, params.steps))
    batch_steps = sorted(rng.sample(middle, params.batches))
    scale = params.time_scale
    steps: list[StepPlan] = []
    done: list[int] = []
    for step in range(1, params.steps + 1):
        batch = batch_steps.index(step) + 1 if step in batch_steps else None
        code = _code(step, params.steps, batch, done, rng, params)
        target = rng.randint(params.tokens[0], max(params.tokens[0], params.tokens[1] - 3))
        text, count = _reply(step, code, target, rng)
        if count > params.tokens[1]:
            raise BenchError(f"step {step}'s reply needs {count} tokens, more than {params.tokens[1]}")
        steps.append(StepPlan(step, text, count, rng.uniform(*params.ttft_s) * scale,
                              rng.uniform(*params.tokens_per_s) / scale, batch))
        if batch is not None:
            done.append(batch)
    latencies: dict[int, list[float]] = {}
    counts: dict[int, list[int]] = {}
    for batch in range(1, params.batches + 1):
        per_part = [random.Random(f"realistic/{params.seed}/batch {batch} part {i}") for i in range(params.prompts)]
        latencies[batch] = [r.uniform(*params.sub_latency_s) * scale for r in per_part]
        counts[batch] = [r.randint(0, 9) for r in per_part]
    return RealisticScript(params, steps, latencies, counts, params.prompts * params.chunk_chars)


# -- the server's side ----------------------------------------------------------------


@dataclass
class ScriptResponder:
    """The scripted server's responder for one library's run: root requests by
    step, sub-calls by prompt, each logged with its arrival time
    (CLOCK_MONOTONIC, which the child processes share)."""

    script: RealisticScript
    roots: list[dict[str, Any]] = field(default_factory=list)
    subs: list[dict[str, Any]] = field(default_factory=list)
    others: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        model = str(body.get("model", ""))
        now = time.monotonic()
        if model == ROOT_MODEL:
            step = root_step(body)
            reply = self.script.root_reply(step)
            with self._lock:
                self.roots.append({"t": now, "step": step, "stream": bool(body.get("stream")),
                                   "generation_s": reply.generation_s()})
            return reply
        if model == SUB_MODEL:
            prompt = prompt_text(body)
            reply = self.script.sub_reply(prompt)
            found = _HEADER.match(prompt)
            with self._lock:
                self.subs.append({"t": now, "batch": int(found[1]) if found else None,
                                  "part": int(found[2]) if found else None, "latency_s": reply.delay})
            return reply
        with self._lock:
            self.others += 1
        return Reply(text=f"unknown model {model!r}", status=404)
