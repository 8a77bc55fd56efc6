"""The sub-call view: one widget per llm_query / rlm_query call or batch.

A title (model, how many done, tokens, cost) heads it. A single call shows
its row: status, tags, prompt (long ones folded), response, and "Edit
response…". A batch adds a progress bar and its rows as a windowed,
filterable list (``batch_view.py``), each row with its own edit action. A
child run (rlm_query) lists its steps in a collapsible section. The editor
(``editor.py``) opens below on the chosen call. Every view also carries a
markdown form, so a saved notebook reads well where widgets don't render.
"""

from __future__ import annotations

import concurrent.futures
import html
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._words import price_text, tokens_text
from .rows import flags, shown_status, thumbnail
from .text_fold import fold, fold_html

if TYPE_CHECKING:
    from ..engine.trajectory.records import SubcallRecord

VIEW_CHARS = 20_000  # response text shown in a single call's row; cell metadata keeps the whole response
MD_ROWS = 6  # rows in the markdown form (the cell metadata has every call)
REFRESH_S = 0.1  # a view redraws at most this often while its calls run
MIME_WIDGET = "application/vnd.jupyter.widget-view+json"
_STATUS_COLOURS = {"queued": "#888", "running": "#1a73e8", "done": "#188038", "error": "#d93025",
                   "cancelled": "#b06000"}
_TEXT_STYLE = "white-space:pre-wrap;max-height:16em;overflow:auto;margin:2px 0"
_FLAG_TIPS = {"pinned": "a person edited this response and pinned it",
              "prompt-edited": "a person rewrote this prompt",
              "replayed": "answered from the notebook, no model call"}


def _cost(value: float | None, known: float = 0.0) -> str:
    return price_text(value, known)


def _clip(text: str | None, limit: int) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters)"


def _one_line(text: str | None, limit: int = 90) -> str:
    flat = " ".join((text or "")[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def record_html(record: SubcallRecord, open_: bool = False) -> str:
    """A single call as an expandable HTML row (all text escaped: model
    output is untrusted); a long prompt is folded."""
    status = shown_status(record)
    colour = _STATUS_COLOURS.get(status, "#888")
    edited = record.edited_prompt
    latency = f"{record.latency_s:.2f} s" if record.latency_s is not None else "…"
    tokens = tokens_text(record.prompt_tokens + record.completion_tokens)
    tags = "".join(f" <span class='rlm-sc-flag rlm-sc-{name}' title='{_FLAG_TIPS[name]}' style='font-size:85%;"
                   f"border:1px solid;border-radius:3px;padding:0 3px;white-space:nowrap'>{name}</span>"
                   for name in flags(record))
    prompt = edited if edited is not None else record.prompt
    summary = (
        f"<span class='rlm-sc-status' style='color:{colour};font-weight:600'>{status}</span>{tags} "
        f"<code>{html.escape(record.model)}</code> · {tokens} · {latency} · {_cost(record.cost_usd)} · "
        f"<span class='rlm-sc-preview'>{_images_tag(record)}{html.escape(_one_line(prompt))}</span>"
    )
    answer = record.response if record.status != "error" else f"ERROR: {record.error}"
    said = (f"edited by a person, {len(prompt):,} characters; the code's prompt has {len(record.prompt):,}"
            if edited is not None else f"{len(prompt):,} characters")
    body = (
        f"{images_html(record)}<div><b>Prompt</b> ({said})</div>"
        f"<div class='rlm-sc-prompt' style='{_TEXT_STYLE}'>{fold_html(prompt, fold(prompt))}</div>"
        f"<div><b>Response</b></div>"
        f"<pre class='rlm-sc-response' style='{_TEXT_STYLE}'>{html.escape(_clip(answer, VIEW_CHARS))}</pre>"
    )
    state = " open" if open_ else ""
    # one line, however narrow the cell: the tags never push the row onto a second line
    line = "white-space:nowrap;overflow:hidden;text-overflow:ellipsis"
    return (f"<details class='rlm-sc-row' data-status='{status}'{state}><summary style='{line}'>{summary}</summary>"
            f"{body}</details>")


def _images_tag(record: SubcallRecord) -> str:
    count = len(record.images)
    return f"[{count} image{'s' if count != 1 else ''}] " if count else ""


def images_html(record: SubcallRecord) -> str:
    """The call's images as thumbnails (nothing when it sent none)."""
    if not record.images:
        return ""
    thumbs = "".join(
        f"<img class='rlm-sc-thumb' src='{thumbnail(image)}' alt='image {image.hash}' "
        f"title='{image.width}x{image.height} {image.mime}' style='max-height:96px;max-width:96px;"
        f"border:1px solid var(--jp-border-color2, #ddd);margin-right:4px'>"
        for image in record.images)
    return (f"<div><b>Images</b> ({len(record.images)})</div>"
            f"<div class='rlm-sc-images' style='margin:2px 0'>{thumbs}</div>")


def record_markdown(record: SubcallRecord) -> str:
    answer = record.response if record.status != "error" else f"ERROR: {record.error}"
    status = shown_status(record) + (" (pinned)" if record.pinned else "") + (" (replayed)" if record.replayed else "")
    return (
        f"| {status} | `{record.model}` | {tokens_text(record.prompt_tokens + record.completion_tokens)} | "
        f"{'' if record.latency_s is None else f'{record.latency_s:.2f} s'} | "
        f"{_images_tag(record)}{_md_cell(_one_line(record.prompt, 60))} | {_md_cell(_one_line(answer, 80))} |"
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
        self.drawn_at = 0.0  # when refresh() last ran (time.monotonic)
        self.refresh_pending = False  # a refresh is posted or booked (the sink's lock guards it)
        self.finished = False  # its helper call returned: no more live refreshes
        self._list: Any = None  # a batch's rows
        self._editor: Any = None
        self._row_dirty = threading.Event()  # a single call's row changed
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
        known = sum(r.cost_usd or 0 for r in self.records)
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in self.records)
        failed = (f", {errors} failed" if errors else "") + (f", {cancelled} cancelled" if cancelled else "")
        return f"{name} → {model}: {done} of {len(self.records)} done{failed} · {tokens_text(tokens)} · {_cost(cost, known)}"

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
        if self.pinner is not None:
            from .editor import SubcallEditor

            self._editor = SubcallEditor(self.pinner, self.asker, self._edited)
        if self.batched:
            from .batch_view import SubcallList

            self._progress = w.IntProgress(value=0, min=0, max=max(1, len(self.records)),
                                           description=f"0 of {len(self.records)}",
                                           style={"description_width": "initial"},
                                           layout=w.Layout(width="60%"))
            self._list = SubcallList(self.records, on_edit=self._edit_row if self._editor else None,
                                     layout=w.Layout(width="100%"))
            children += [self._progress, self._list]
        else:
            self._row = w.HTML(value=self._row_html())
            children.append(self._row)
        if self.kind == "rlm":
            self._steps = w.Accordion(children=[], layout=w.Layout(width="100%"))
            children.append(self._steps)
        if self._editor is not None:
            if not self.batched:
                edit = w.Button(description="Edit response…", icon="pencil",
                                tooltip="Edit the response (and, if you like, the prompt) and pin it: "
                                        "re-running the cell returns it",
                                layout=w.Layout(width="auto", align_self="flex-start"))
                edit.add_class("rlm-sc-edit")
                edit.on_click(lambda _: self._edit_row(0))
                children.append(edit)
            children.append(self._editor.box)
        self.widget = w.VBox(children, layout=w.Layout(border="1px solid var(--jp-border-color2, #ddd)",
                                                      padding="4px 8px", margin="2px 0"))
        self.widget.add_class("rlm-subcall-widget")

    def _header_html(self) -> str:
        return f"<div class='rlm-sc-title' style='font-weight:600'>{html.escape(self.title())}</div>"

    def _row_html(self) -> str:
        record = self.records[0]
        return record_html(record, open_=record.status in ("done", "error"))

    def mark(self, record: SubcallRecord) -> None:
        """Note that ``record`` changed (any thread); :meth:`refresh` redraws it."""
        if self._list is not None:
            self._list.mark(record)
        else:
            self._row_dirty.set()

    def refresh(self) -> None:
        """Update the widget from the records (on the kernel's main thread)."""
        self.drawn_at = time.monotonic()
        if self.widget is None:
            return
        self._header.value = self._header_html()
        if self._list is not None:
            done = sum(r.status in ("done", "error") for r in self.records)
            with self._progress.hold_sync():
                self._progress.value = done
                self._progress.description = f"{done} of {len(self.records)}"
                self._progress.bar_style = "danger" if any(r.status == "error" for r in self.records) else (
                    "success" if done == len(self.records) else "info")
            self._list.flush()
        elif self._row_dirty.is_set():
            self._row_dirty.clear()
            self._row.value = self._row_html()

    # -- editing -------------------------------------------------------------
    def _edit_row(self, index: int) -> None:
        """A row's edit action: the editor opens on that call."""
        if self._editor is None:
            return
        record = self.records[index]
        shared = self._list.shared if self._list is not None else None
        self._editor.open(record, index + 1, len(self.records), shared)
        if self._list is not None:
            self._list.editing = index

    def _edited(self, record: SubcallRecord | None) -> None:
        """The editor pinned ``record`` (or closed, with None)."""
        if record is None:
            if self._list is not None:
                self._list.editing = -1
            return
        self.mark(record)
        self.refresh()

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
