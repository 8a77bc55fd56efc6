"""The sub-call views outside a kernel (widgets on a dummy comm): a batch's
rows travel whole once, then only the rows that changed; each row's edit
action opens the editor on that call; a long prompt is folded and never put
whole in a text box unasked; the sink coalesces and spaces its refreshes."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from rlm_kernel.engine.trajectory.records import SubcallRecord
from rlm_kernel.sinks.subcall_views import SubcallViewSink
from rlm_kernel.widgets.editor import EDIT_CHARS
from rlm_kernel.widgets.rows import PAGE_CHARS, RowMaker
from rlm_kernel.widgets.subcall import REFRESH_S, SubcallView
from rlm_kernel.widgets.text_fold import shared_parts

pytest.importorskip("ipywidgets")

INSTRUCTIONS = "Read this part of a long document and say what it is about in one line. " * 5


def _batch(prompts: list[str]) -> list[SubcallRecord]:
    return [SubcallRecord(id=str(i + 1), kind="llm", model="openai/sub", prompt=p, batch="b1")
            for i, p in enumerate(prompts)]


def _done(record: SubcallRecord, response: str) -> None:
    record.status, record.response, record.latency_s = "done", response, 0.1


class Pins:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def __call__(self, record: SubcallRecord, response: str, prompt: str | None) -> None:
        self.calls.append((record.id, response, prompt))
        record.response, record.pinned = response, True
        record.edited_prompt = None if prompt == record.prompt else prompt


def _view(records: list[SubcallRecord], pins: Pins | None = None) -> tuple[SubcallView, list[dict[str, Any]]]:
    view = SubcallView(records, "llm", widgets=True, pinner=pins or Pins())
    sent: list[dict[str, Any]] = []
    if view._list is not None:
        view._list.send = lambda content, buffers=None: sent.append(content)
    return view, sent


def _edit(view: SubcallView, index: int) -> None:
    """What the page sends when a person clicks row ``index``'s edit action."""
    view._list._handle_custom_msg({"type": "edit", "index": index}, [])


def _editor(view: SubcallView) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def walk(widget: Any) -> None:
        for name in getattr(widget, "_dom_classes", ()):
            found[name] = widget
        for child in getattr(widget, "children", ()):
            walk(child)

    walk(view._editor.box)
    return found


def test_a_batch_sends_its_rows_once_then_only_the_changed_ones() -> None:
    records = _batch([f"item {i}" for i in range(300)])
    view, sent = _view(records)
    state = view._list.get_state()
    assert [row["s"] for row in state["rows"]] == ["queued"] * 300
    assert "rows" not in view._list.get_state("editing")
    for index in (5, 7):
        records[index].status = "running"
        view.mark(records[index])
    view.refresh()
    _done(records[7], "seven")
    view.mark(records[7])
    view.refresh()
    view.refresh()  # nothing changed: nothing sent
    assert [[i for i, _ in message["rows"]] for message in sent] == [[5, 7], [7]]
    assert sent[1]["rows"][0][1]["r"] == "seven" and sent[1]["rows"][0][1]["s"] == "done"
    assert view._progress.value == 1 and view._progress.description == "1 of 300"


def test_the_page_keeps_a_bounded_amount_of_text_however_big_the_batch() -> None:
    for count in (66, 5_000):
        records = _batch([f"{INSTRUCTIONS}\n\nPart {i}: " + f"{i:05d} " * 8_000 for i in range(count)])
        for record in records:
            _done(record, "y" * 30_000)
        maker = RowMaker(shared_parts([r.prompt for r in records]), count)
        size = sum(len(json.dumps(maker.row(r))) for r in records)
        assert size < PAGE_CHARS * 1.5, (count, size)
        row = maker.row(records[42])
        assert row["p"].startswith("Part 42: 00042 ") and row["n"] == len(records[42].prompt)
        assert row["rn"] == 30_000 and len(row["r"]) < 30_000
        assert row["v"][0][0] == "head" and any(isinstance(p, list) and p[0] == "own" for p in row["v"])


def test_each_rows_edit_action_opens_the_editor_on_that_call() -> None:
    records = _batch([f"question {i}" for i in range(66)])
    for i, record in enumerate(records):
        _done(record, f"answer {i}")
    pins = Pins()
    view, _ = _view(records, pins)
    assert view._list.editable and view._list.editing == -1
    _edit(view, 40)
    shown = _editor(view)
    assert "#41 of 66" in view._editor.box.children[0].value
    assert shown["rlm-sc-edit-prompt"].value == "question 40"
    assert shown["rlm-sc-edit-text"].value == "answer 40"
    assert view._list.editing == 40
    _edit(view, 2)
    shown = _editor(view)
    assert shown["rlm-sc-edit-text"].value == "answer 2" and view._list.editing == 2
    shown["rlm-sc-edit-text"].value = "a person's answer"
    shown["rlm-sc-pin"].click()
    assert pins.calls == [("3", "a person's answer", "question 2")]
    assert view._list._rows.row(records[2])["g"] == ["pinned"]
    shown["rlm-sc-edit-close"].click()
    assert view._editor.box.children == () and view._list.editing == -1
    _edit(view, 999)  # out of range: ignored
    assert view._editor.box.children == ()


def test_a_long_prompt_is_folded_and_its_own_part_is_what_the_text_box_holds() -> None:
    books = {"Genesis": "In the beginning. " * 4_000, "Psalms": "Blessed is the man. " * 12_000,
             "Ruth": "In the days when the judges ruled. " * 300}
    records = _batch([f"{INSTRUCTIONS}\n=== {name} ===\n{text}" for name, text in books.items()])
    for record in records:
        _done(record, "a summary")
    pins = Pins()
    view, _ = _view(records, pins)

    # Ruth's own part is short enough for a text box; the instructions stay as they are.
    _edit(view, 2)
    shown = _editor(view)
    assert "=== Ruth ===" in shown["rlm-sc-edit-prompt-view"].value
    own = shown["rlm-sc-edit-prompt"].value
    assert own.startswith("Ruth ===") and INSTRUCTIONS[:40] not in own
    shown["rlm-sc-edit-prompt"].value = own.replace("judges", "kings")
    shown["rlm-sc-pin"].click()
    assert pins.calls[-1][2] == records[2].prompt.replace("judges", "kings")

    # Psalms' own part (240,000 characters) goes into a text box only when asked.
    _edit(view, 1)
    shown = _editor(view)
    assert "rlm-sc-edit-prompt" not in shown
    assert all(len(getattr(w, "value", "")) <= max(EDIT_CHARS, 30_000) for w in shown.values())
    assert "details class='rlm-sc-fold' data-kind='own'" in shown["rlm-sc-edit-prompt-view"].value
    shown["rlm-sc-pin"].click()  # pinned without touching the prompt: the code's prompt
    assert pins.calls[-1] == ("2", "a summary", records[1].prompt)
    shown["rlm-sc-edit-prompt-open"].click()
    shown = _editor(view)
    shared = view._list.shared
    assert shared.head == len(INSTRUCTIONS) + len("\n=== ") and shared.tail == len(". ")
    assert shown["rlm-sc-edit-prompt"].value == records[1].prompt[shared.head:-shared.tail]


def test_a_single_call_keeps_its_edit_response_button_and_folds_a_long_prompt() -> None:
    [record] = [SubcallRecord(id="1", kind="llm", model="openai/sub", prompt="z" * 231_000)]
    _done(record, "short")
    pins = Pins()
    view = SubcallView([record], "llm", widgets=True, pinner=pins)
    row = view._row.value
    assert "rlm-sc-prompt" in row and "data-kind='middle'" in row and len(row) < 40_000
    [edit] = [c for c in view.widget.children if getattr(c, "description", "") == "Edit response…"]
    edit.click()
    shown = _editor(view)
    assert "rlm-sc-edit-prompt" not in shown and shown["rlm-sc-edit-text"].value == "short"
    assert "Edit all 231,000 characters" in shown["rlm-sc-edit-prompt-open"].description


class Posts:
    """A CallerThread that only records what is posted to it."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def post(self, fn: Any) -> None:
        self.jobs.append(fn)

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            job()


class FakeRun:
    depth = 0
    replay_cursor = None


def test_the_sink_coalesces_and_spaces_refreshes() -> None:
    thread = Posts()
    sink = SubcallViewSink(thread, widgets=True)  # type: ignore[arg-type]
    records = _batch([f"item {i}" for i in range(1000)])
    run = FakeRun()

    async def engine() -> None:
        sink.subcalls_started(run, records)  # type: ignore[arg-type]
        view = sink._views["1"]
        refreshes = []
        view.refresh = lambda: (refreshes.append(time.monotonic()), SubcallView.refresh(view))
        for record in records[:500]:
            _done(record, "ok")
            sink.subcall(run, record)  # type: ignore[arg-type]
        assert len(thread.jobs) == 1  # coalesced: one refresh for 500 changes
        thread.run()
        _done(records[500], "ok")
        changed_after = time.monotonic() - refreshes[-1]
        sink.subcall(run, records[500])  # type: ignore[arg-type]
        if changed_after < REFRESH_S * 0.9:  # (a loaded machine may stall this thread past the spacing)
            assert thread.jobs == []  # spaced: a change soon after a refresh is booked for later
        for record in records[501:]:
            _done(record, "ok")
            sink.subcall(run, record)  # type: ignore[arg-type]
        assert len(thread.jobs) <= 1  # coalesced, whenever it is drawn
        await asyncio.sleep(REFRESH_S * 1.5)
        assert len(thread.jobs) == 1
        thread.run()
        assert len(refreshes) == 2 and refreshes[1] - refreshes[0] >= REFRESH_S * 0.9
        sink.subcalls_finished(run, records)  # type: ignore[arg-type]

    asyncio.run(engine())
