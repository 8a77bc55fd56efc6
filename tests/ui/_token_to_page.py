"""Token to page: how long a word the root model writes takes to reach the
live notebook (issue 14: prose in its markdown cell within ~150 ms of the
token leaving the server).

The scripted server streams root replies token by token (``Reply.ttft``,
``tokens_per_s``) with a unique *marker* word (``q<step>x<nnn>``) about every
ten tokens, in the prose and in comments of the code block between, and
notes the wall-clock time it wrote each piece (``Reply.on_piece``). The page,
hooked before the run starts, notes for each marker (``Date.now()``, the same
machine clock) when it first

- arrived: the first kernel message carrying it reached the page's websocket
  (``kernel.anyMessage``), with that message's own ``header.date``, stamped in
  the kernel when it was published;
- was in the notebook model (the notebook's Y document, after each transaction);
- was in the DOM: a rendered markdown cell's text, or a code cell's editor.

A marker is sent when the piece that completes it was written. The deltas
split the way: kernel (litellm reading the stream, the draft interval, the
live sink's batch window, the main thread) -> transport (ZMQ, the Jupyter
server, the websocket) -> page (our extension putting it into the model) ->
rendering.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from _live_cells import open_warmed_notebook
from labdriver import (
    LabServer,
    rlm_magic,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

MARKER = r"q\d+x\d{3}"
_WORDS = ("the model reads this part of the text and notes what it has seen so far then goes on to the next "
          "one with care").split()


@dataclass
class StreamedStep:
    """One streamed root reply: prose, a code block, prose; markers throughout."""

    step: int
    tokens_per_s: float
    ttft: float
    tokens: int  # about how many
    text: str = ""
    markers: list[str] = field(default_factory=list)
    pieces: list[tuple[float, str]] = field(default_factory=list)  # (time.time(), content piece) as written

    def __post_init__(self) -> None:
        count = [0]

        def prose(n: int) -> str:
            words = []
            for i in range(n):
                if i % 9 == 4:  # a marker (two tokens) after every ~8 words
                    words.append(self._marker(count))
                else:
                    words.append(_WORDS[(i + self.step) % len(_WORDS)])
            return " ".join(words).capitalize() + "."

        head = prose(int(self.tokens * 0.4))
        code_lines = [f"# {self._marker(count)} {self._marker(count)}", "n = len(context)",
                      f"# {self._marker(count)}", f"print('step {self.step}', n)"]
        code = "```repl\n" + "\n".join(code_lines) + "\n```"
        self.text = f"{head}\n\n{code}\n\n{prose(int(self.tokens * 0.5))}"
        self.markers = re.findall(MARKER, self.text)
        assert len(set(self.markers)) == len(self.markers)

    def _marker(self, count: list[int]) -> str:
        count[0] += 1
        return f"q{self.step}x{count[0]:03d}"

    def reply(self) -> Reply:
        def written(name: str, piece: str) -> None:
            if name == "content":
                self.pieces.append((time.time(), piece))

        return Reply(text=self.text, ttft=self.ttft, tokens_per_s=self.tokens_per_s, on_piece=written)

    def sent_at(self) -> dict[str, float]:
        """Each marker: when the piece that completed it was written."""
        assert "".join(p for _, p in self.pieces) == self.text, "the reply was not streamed whole"
        ends, at = [], 0
        for written, piece in self.pieces:
            at += len(piece)
            ends.append((at, written))
        sent = {}
        for match in re.finditer(MARKER, self.text):
            sent[match.group()] = next(t for end, t in ends if end >= match.end())
        return sent

    def in_code(self) -> set[str]:
        block = self.text[self.text.index("```repl"):self.text.rindex("```")]
        return set(re.findall(MARKER, block))


# Hooks the current notebook (before the run): window.__rlmMarkers gets, per
# marker, the first time it arrived / was in the model / in the DOM.
_HOOK = """(pattern) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const notebook = panel.content;
  const shared = notebook.model.sharedModel;
  const kernel = panel.sessionContext.session.kernel;
  const re = new RegExp(pattern, 'g');
  const seen = {arrived: {}, kernel_date: {}, model: {}, dom_markdown: {}, dom_code: {}};
  const scan = (text, into, t) => {
    for (const m of (text || '').matchAll(re)) if (!(m[0] in into)) into[m[0]] = t;
  };
  kernel.anyMessage.connect((_, {msg, direction}) => {
    if (direction !== 'recv' || msg.channel !== 'iopub') return;
    const data = msg.content && msg.content.data;
    if (!data || data.protocol !== 'rlm/1') return;
    const t = Date.now();
    for (const m of JSON.stringify(data).matchAll(re)) {
      if (!(m[0] in seen.arrived)) { seen.arrived[m[0]] = t; seen.kernel_date[m[0]] = msg.header.date; }
    }
  });
  shared.ydoc.on('afterTransaction', () => {
    const t = Date.now();
    for (const cell of shared.cells) scan(cell.getSource(), seen.model, t);
  });
  const observer = new MutationObserver(() => {
    const t = Date.now();
    for (const node of notebook.node.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown')) {
      scan(node.textContent, seen.dom_markdown, t);
    }
    for (const node of notebook.node.querySelectorAll('.jp-CodeCell .cm-content')) scan(node.textContent, seen.dom_code, t);
  });
  observer.observe(notebook.node, {childList: true, subtree: true, characterData: true});
  window.__rlmMarkers = seen;
}"""


def plan(quick: bool, seed_ttft: float = 0.6) -> list[StreamedStep]:
    """The streamed steps: a few hundred tokens each at 40, 60 and 80 tokens/s
    (one step of about a hundred at 80 in quick mode)."""
    if quick:
        return [StreamedStep(1, 80.0, seed_ttft, 100)]
    return [StreamedStep(i + 1, speed, seed_ttft + 0.2 * i, 300) for i, speed in enumerate((40.0, 60.0, 80.0))]


def run_streaming(page: Page, lab: LabServer, steps: list[StreamedStep], shot_prefix: str) -> dict[str, Any]:
    """One run of ``steps`` (then FINAL) in a notebook of its own, after a
    warm-up run (litellm imported, the comm open); returns the marker times."""
    script = Script(root=["FINAL(warm)", *(s.reply() for s in steps), "FINAL(done)"])
    with ScriptedServer(script) as server:
        magic = rlm_magic(server.url, f"--max-iterations {len(steps) + 2}", "--fresh", "--new", sub_model=False)
        open_warmed_notebook(page, lab, "token-to-page.ipynb", "context = 'word ' * 2000", magic,
                             {"ask": f"{magic}\nWrite as you go."})
        page.evaluate(_HOOK, MARKER)
        start_cell(page, "ask")
        total = sum(s.ttft + s.tokens / s.tokens_per_s for s in steps)
        page.wait_for_function("() => Object.keys(window.__rlmMarkers.model).length >= 3", timeout=60_000)
        page.screenshot(path=shot_prefix + "-writing.png")
        wait_cell_idle(page, "ask", timeout=60_000 + 3_000 * total)
        page.wait_for_timeout(300)
        page.screenshot(path=shot_prefix + "-done.png")
        seen = page.evaluate("() => window.__rlmMarkers")
    return _figures(steps, seen)


def _ms(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else later - earlier


def _figures(steps: list[StreamedStep], seen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for step in steps:
        code = step.in_code()
        for marker, sent in step.sent_at().items():
            date = seen["kernel_date"].get(marker)
            kernel = datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp() * 1000 if date else None
            dom = seen["dom_code" if marker in code else "dom_markdown"].get(marker)
            rows.append({"marker": marker, "step": step.step, "in_code": marker in code, "sent": sent * 1000,
                         "kernel": kernel, "arrived": seen["arrived"].get(marker),
                         "model": seen["model"].get(marker), "dom": dom})
    prose = [r for r in rows if not r["in_code"]]
    return {
        "steps": [{"tokens_per_s": s.tokens_per_s, "ttft_s": s.ttft, "markers": len(s.markers),
                   "tokens": len(s.pieces)} for s in steps],
        "markers": len(rows),
        "missing_in_model": [r["marker"] for r in rows if r["model"] is None],
        "missing_in_dom": [r["marker"] for r in prose if r["dom"] is None],
        "to_model_ms": percentiles([_ms(r["model"], r["sent"]) for r in rows]),
        "to_rendered_markdown_ms": percentiles([_ms(r["dom"], r["sent"]) for r in prose]),
        "to_code_editor_ms": percentiles([_ms(r["dom"], r["sent"]) for r in rows if r["in_code"]]),
        "split_ms": {
            "kernel (sent -> published)": percentiles([_ms(r["kernel"], r["sent"]) for r in rows]),
            "transport (published -> arrived)": percentiles([_ms(r["arrived"], r["kernel"]) for r in rows]),
            "page (arrived -> model)": percentiles([_ms(r["model"], r["arrived"]) for r in rows]),
            "rendering (model -> markdown DOM)": percentiles([_ms(r["dom"], r["model"]) for r in prose]),
        },
        "rows": rows,
    }


def percentiles(values: list[float | None]) -> dict[str, float] | None:
    """p50, p95 (nearest rank) and max of the values present; None when there are none."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return None

    def rank(q: float) -> float:
        return present[max(0, math.ceil(q * len(present)) - 1)]

    return {"n": len(present), "p50": rank(0.50), "p95": rank(0.95), "max": present[-1]}
