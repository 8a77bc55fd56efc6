"""The sub-call view: one widget per llm_query / rlm_query call or batch.

It shows model, status (queued / running / done / error), prompt (preview,
more on expand), response, tokens, latency and cost; a batch adds a progress
bar and one expandable row per call; a child run (rlm_query) lists its steps
in a collapsible section. Every view also carries a markdown form, so a saved
notebook reads well where widgets don't render.
"""

from __future__ import annotations

import concurrent.futures
import html
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.subcalls import SubcallRecord

VIEW_CHARS = 20_000  # text shown when a single call is expanded; cell metadata keeps the whole response
ROW_CHARS = 1_500  # per row of a batch, so a 256-call batch stays light to update
CHUNK = 16  # rows per HTML widget
MAX_ROWS = 512
MD_ROWS = 6  # rows in the markdown form (the cell metadata has every call)
MIME_WIDGET = "application/vnd.jupyter.widget-view+json"
_STATUS_COLOURS = {"queued": "#888", "running": "#1a73e8", "done": "#188038", "error": "#d93025",
                   "cancelled": "#b06000"}


def shown_status(record: SubcallRecord) -> str:
    """The status as a person reads it: a call the run's stop cancelled is
    'cancelled' (its record keeps status 'error', error 'cancelled')."""
    return "cancelled" if record.status == "error" and record.error == "cancelled" else record.status


def _cost(value: float | None) -> str:
    return "cost ?" if value is None else f"${value:.5f}"


def _clip(text: str | None, limit: int) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters)"


def _one_line(text: str | None, limit: int = 90) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def record_html(record: SubcallRecord, open_: bool = False, limit: int = VIEW_CHARS) -> str:
    """One call as an expandable HTML row (all text escaped: model output is untrusted)."""
    status = shown_status(record)
    colour = _STATUS_COLOURS.get(status, "#888")
    edited = getattr(record, "edited_prompt", None)
    latency = f"{record.latency_s:.2f} s" if record.latency_s is not None else "…"
    tokens = f"{record.prompt_tokens:,}+{record.completion_tokens:,} tok"
    flags = "".join(
        f" <span class='rlm-sc-flag rlm-sc-{name}' title='{tip}' style='font-size:85%;border:1px solid;"
        f"border-radius:3px;padding:0 3px'>{name}</span>"
        for name, tip, on in (("pinned", "a person edited this response and pinned it", record.pinned),
                              ("prompt-edited", "a person rewrote this prompt", edited is not None),
                              ("replayed", "answered from the notebook, no model call", record.replayed))
        if on
    )
    summary = (
        f"<span class='rlm-sc-status' style='color:{colour};font-weight:600'>{status}</span>{flags} "
        f"<code>{html.escape(record.model)}</code> · {tokens} · {latency} · {_cost(record.cost_usd)} · "
        f"<span class='rlm-sc-preview'>{html.escape(_one_line(edited if edited is not None else record.prompt))}</span>"
    )
    answer = record.response if record.status != "error" else f"ERROR: {record.error}"
    prompt = edited if edited is not None else record.prompt
    said = (f"edited by a person, {len(prompt):,} characters; the code's prompt has {len(record.prompt):,}"
            if edited is not None else f"{len(prompt):,} characters")
    body = (
        f"<div><b>Prompt</b> ({said})</div>"
        f"<pre class='rlm-sc-prompt' style='white-space:pre-wrap;max-height:16em;overflow:auto'>"
        f"{html.escape(_clip(prompt, limit))}</pre>"
        f"<div><b>Response</b></div>"
        f"<pre class='rlm-sc-response' style='white-space:pre-wrap;max-height:16em;overflow:auto'>"
        f"{html.escape(_clip(answer, limit))}</pre>"
    )
    state = " open" if open_ else ""
    return f"<details class='rlm-sc-row' data-status='{status}'{state}><summary>{summary}</summary>{body}</details>"


def record_markdown(record: SubcallRecord) -> str:
    answer = record.response if record.status != "error" else f"ERROR: {record.error}"
    status = shown_status(record) + (" (pinned)" if record.pinned else "") + (" (replayed)" if record.replayed else "")
    return (
        f"| {status} | `{record.model}` | {record.prompt_tokens}+{record.completion_tokens} | "
        f"{'' if record.latency_s is None else f'{record.latency_s:.2f} s'} | "
        f"{_md_cell(_one_line(record.prompt, 60))} | {_md_cell(_one_line(answer, 80))} |"
    )


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


class SubcallView:
    """A live view of a group of sub-calls made by one helper call."""

    def __init__(self, records: list[SubcallRecord], kind: str, widgets: bool,
                 pinner: Callable[[SubcallRecord, str, str | None], None] | None = None,
                 asker: Callable[[SubcallRecord, str], concurrent.futures.Future[Any]] | None = None) -> None:
        self.records = records
        self.pinner = pinner  # (record, response, prompt): pin a person's response, for their prompt
        self.asker = asker  # (record, prompt): send a person's prompt to the record's sub-model now
        self.kind = kind  # llm | rlm
        self.batched = len(records) > 1 or bool(records and records[0].batch)
        self.display_id = uuid.uuid4().hex
        self.widget: Any = None
        self._child_outputs: dict[str, Any] = {}
        if widgets:
            self._build_widget()

    # -- text forms ----------------------------------------------------------
    def title(self) -> str:
        shown = [shown_status(r) for r in self.records]
        done = sum(s in ("done", "error") for s in shown)
        errors, cancelled = shown.count("error"), shown.count("cancelled")
        name = ("rlm_query" if self.kind == "rlm" else "llm_query") + ("_batched" if self.batched else "")
        model = self.records[0].model if self.records else ""
        cost = None if any(r.cost_usd is None for r in self.records) else sum(r.cost_usd or 0 for r in self.records)
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in self.records)
        failed = (f", {errors} failed" if errors else "") + (f", {cancelled} cancelled" if cancelled else "")
        return f"{name} → {model}: {done} of {len(self.records)} done{failed} · {tokens:,} tok · {_cost(cost)}"

    def markdown(self) -> str:
        rows = "\n".join(record_markdown(r) for r in self.records[:MD_ROWS])
        extra = len(self.records) - MD_ROWS
        more = f"\n\n*… {extra:,} more sub-calls in the cell metadata*" if extra > 0 else ""
        return (
            f"**{self.title()}**\n\n| status | model | tokens | time | prompt | response |\n"
            f"|---|---|---|---|---|---|\n{rows}{more}"
        )

    def bundle(self) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": self.title(), "text/markdown": self.markdown()}
        if self.widget is not None:
            data[MIME_WIDGET] = {"model_id": self.widget.model_id, "version_major": 2, "version_minor": 0}
        return data

    # -- widget --------------------------------------------------------------
    def _build_widget(self) -> None:
        import ipywidgets as w

        self._header = w.HTML(value=self._header_html())
        children: list[Any] = [self._header]
        if self.batched:
            self._progress = w.IntProgress(value=0, min=0, max=max(1, len(self.records)),
                                           description=f"0 of {len(self.records)}",
                                           style={"description_width": "initial"},
                                           layout=w.Layout(width="60%"))
            children.append(self._progress)
        # Rows in chunks, so a status change re-sends one chunk, not the batch.
        shown = self.records[:MAX_ROWS]
        self._index = {r.id: i for i, r in enumerate(shown)}
        self._chunks = [w.HTML(value=self._chunk_html(i)) for i in range(0, len(shown), CHUNK)]
        children.extend(self._chunks)
        if len(self.records) > MAX_ROWS:
            children.append(w.HTML(value=f"<div>… {len(self.records) - MAX_ROWS:,} more sub-calls "
                                         "(in the cell metadata)</div>"))
        if self.kind == "rlm":
            self._steps = w.Accordion(children=[], layout=w.Layout(width="100%"))
            children.append(self._steps)
        if self.pinner is not None:
            self._edit_button = w.Button(description="Edit response…", icon="pencil",
                                         tooltip="Edit a response (and, if you like, its prompt) and pin it: "
                                                 "re-running the cell returns it",
                                         layout=w.Layout(width="auto", align_self="flex-start"))
            self._edit_button.add_class("rlm-sc-edit")
            self._edit_button.on_click(lambda _: self._open_editor())
            self._editor = w.VBox([])
            children.extend([self._edit_button, self._editor])
        self._dirty: set[int] = set()
        self.widget = w.VBox(children, layout=w.Layout(border="1px solid var(--jp-border-color2, #ddd)",
                                                      padding="4px 8px", margin="2px 0"))
        self.widget.add_class("rlm-subcall-widget")

    def _header_html(self) -> str:
        return f"<div class='rlm-sc-title' style='font-weight:600'>{html.escape(self.title())}</div>"

    def _chunk_html(self, start: int) -> str:
        single = len(self.records) == 1
        limit = VIEW_CHARS if single else ROW_CHARS
        rows = self.records[start : start + CHUNK]
        return "".join(record_html(r, open_=single and r.status in ("done", "error"), limit=limit) for r in rows)

    def mark(self, record: SubcallRecord) -> None:
        """Note that ``record`` changed (any thread); :meth:`refresh` redraws it."""
        index = getattr(self, "_index", {}).get(record.id)
        if index is not None:
            self._dirty.add(index // CHUNK)

    def refresh(self) -> None:
        """Update the widget from the records (on the kernel's main thread)."""
        if self.widget is None:
            return
        self._header.value = self._header_html()
        if self.batched:
            done = sum(r.status in ("done", "error") for r in self.records)
            self._progress.value = done
            self._progress.description = f"{done} of {len(self.records)}"
            self._progress.bar_style = "danger" if any(r.status == "error" for r in self.records) else (
                "success" if done == len(self.records) else "info")
        dirty, self._dirty = self._dirty, set()
        for chunk in sorted(dirty):
            self._chunks[chunk].value = self._chunk_html(chunk * CHUNK)

    # -- editing and pinning ---------------------------------------------------
    def _open_editor(self) -> None:
        """Show the editor (built on first use: a big batch stays light): the
        prompt and the response of one call, "Ask the model" (sends the
        prompt as it is in the box to the sub-model now and puts its answer
        in the response box) and "Pin response"."""
        import ipywidgets as w

        if self._editor.children:
            return
        done = [r for r in self.records if r.status in ("done", "error")]
        if not done:
            return
        self._choice = w.Dropdown(options=[(f"#{i + 1}: {_one_line(r.prompt, 60)}", r.id) for i, r in enumerate(done)],
                                  description="sub-call", layout=w.Layout(width="95%"))
        # classes given at creation travel in the widget's first message
        first_edit = getattr(done[0], "edited_prompt", None)
        self._prompt = w.Textarea(value=done[0].prompt if first_edit is None else first_edit,
                                  layout=w.Layout(width="95%", height="6em"), _dom_classes=("rlm-sc-edit-prompt",))
        self._text = w.Textarea(value=done[0].response or "", layout=w.Layout(width="95%", height="8em"),
                                _dom_classes=("rlm-sc-edit-text",))
        self._pin_button = w.Button(description="Pin response", icon="thumb-tack", button_style="warning",
                                    tooltip="Keep this response (and your prompt): re-running the cell returns it "
                                            "instead of a model call", _dom_classes=("rlm-sc-pin",))
        self._pin_note = w.HTML()
        by_id = {r.id: r for r in done}

        def show(_: Any = None) -> None:
            record = by_id[self._choice.value]
            edited = getattr(record, "edited_prompt", None)
            self._prompt.value = edited if edited is not None else record.prompt
            self._text.value = record.response or ""

        self._choice.observe(show, names="value")
        self._pin_button.on_click(lambda _: self._pin(by_id[self._choice.value]))
        self._choice.value = done[0].id
        buttons = [self._pin_button]
        if self.asker is not None:
            self._ask_button = w.Button(description="Ask the model", icon="paper-plane",
                                        tooltip="Send the prompt above to the sub-model now; its answer fills the "
                                                "response box (pin it to keep it)", _dom_classes=("rlm-sc-ask",))
            self._ask_button.on_click(lambda _: self._ask(by_id[self._choice.value]))
            buttons.insert(0, self._ask_button)
        rows = [w.HTML("<b>Prompt</b>"), self._prompt, w.HTML("<b>Response</b>"), self._text,
                w.HBox([*buttons, self._pin_note])]
        self._editor.children = ([self._choice] if len(done) > 1 else []) + rows

    def _ask(self, record: SubcallRecord) -> None:
        if self.asker is None:
            return
        prompt = self._prompt.value
        self._ask_button.disabled = True
        self._pin_note.value = f"<span class='rlm-sc-asking'>Asking {html.escape(record.model)}…</span>"
        try:
            future = self.asker(record, prompt)
        except Exception as error:  # noqa: BLE001 - shown in the editor, like a failed call
            self._asked(None, error)
            return
        future.add_done_callback(lambda done: self._asked(done, None))

    def _asked(self, future: concurrent.futures.Future[Any] | None, error: BaseException | None) -> None:
        """The model's answer to an edited prompt (on the engine's thread:
        widget updates go out through the kernel's thread-safe iopub)."""
        from ..redaction import redact

        if future is not None:
            error = future.exception() if not future.cancelled() else RuntimeError("cancelled")
        self._ask_button.disabled = False
        if error is not None:
            self._pin_note.value = (f"<span class='rlm-sc-ask-error'>The model call failed: "
                                    f"{html.escape(redact(str(error)))}</span>")
            return
        assert future is not None
        self._text.value = future.result().text
        self._pin_note.value = ("<span class='rlm-sc-answered'>The model answered your prompt: "
                                "check the response, then pin it.</span>")

    def _pin(self, record: SubcallRecord) -> None:
        if self.pinner is None:
            return
        prompt = self._prompt.value
        self.pinner(record, self._text.value, prompt)
        self.mark(record)
        self.refresh()
        edited = getattr(record, "edited_prompt", None) is not None
        self._pin_note.value = (
            "<span class='rlm-sc-pinned-note'>Pinned"
            + (" with your prompt" if edited else "")
            + ": re-run the cell to use it (saved in the cell's metadata).</span>"
        )

    def child_output(self, record_id: str) -> Any:
        """The Output widget that shows a child run's steps."""
        if self.widget is None or self.kind != "rlm":
            return None
        if record_id not in self._child_outputs:
            import ipywidgets as w

            out = w.Output()
            self._child_outputs[record_id] = out
            self._steps.children = (*self._steps.children, out)
            index = len(self._steps.children) - 1
            self._steps.set_title(index, f"child run {index + 1}: steps")
        return self._child_outputs[record_id]
