"""Which recorded sub-call a re-run cell gets back (engine/trajectory/replay.py)."""

from __future__ import annotations

from rlm_kernel.engine.trajectory.records import prompt_hash
from rlm_kernel.engine.trajectory.replay import ReplayBook


def record(rid: str, model: str, prompt: str, response: str, **extra) -> dict:
    return {"id": rid, "model": model, "prompt_hash": prompt_hash(model, prompt),
            "response": response, "status": "done", **extra}


def book_with(records: list[dict], enabled: bool = True) -> ReplayBook:
    return ReplayBook.from_cells([{"id": "c1", "source": "x", "metadata": {"rlm": {"subcalls": records}}}], enabled)


def test_same_model_same_prompt_replays_in_order():
    cursor = book_with([record("1", "m", "p", "first"), record("2", "m", "p", "second")]).cursor("c1")
    assert [cursor.take("m", "p")["response"] for _ in range(2)] == ["first", "second"]
    assert cursor.take("m", "p") is None


def test_a_changed_prompt_or_model_is_a_fresh_call():
    cursor = book_with([record("1", "m", "p", "r")]).cursor("c1")
    assert cursor.take("m", "other prompt") is None
    assert cursor.take("other-model", "p") is None
    assert cursor.take("m", "p")["response"] == "r"


def test_a_pin_holds_when_the_sub_model_changed():
    cursor = book_with([record("1", "old-model", "p", "edited by a person", pinned=True),
                        record("2", "old-model", "q", "recorded")]).cursor("c1")
    assert cursor.take("new-model", "p")["response"] == "edited by a person"
    assert cursor.take("new-model", "q") is None


def test_pins_hold_with_replay_off_and_records_do_not():
    cursor = book_with([record("1", "m", "p", "pinned", pinned=True), record("2", "m", "q", "recorded")],
                       enabled=False).cursor("c1")
    assert cursor.take("m", "p")["response"] == "pinned"
    assert cursor.take("m", "q") is None


def test_no_configured_model_takes_any_recorded_one():
    cursor = book_with([record("1", "m", "p", "r")]).cursor("c1")
    assert cursor.take("", "p")["response"] == "r"


def test_failed_records_are_not_replayed():
    cursor = book_with([record("1", "m", "p", "", status="error")]).cursor("c1")
    assert cursor.take("m", "p") is None


def test_a_pin_with_an_edited_prompt_matches_the_codes_prompt_and_keeps_the_edit():
    book = book_with([record("1", "m", "original prompt", "model answer")])
    pinned = book.pin("c1", "1", "answer to my prompt", edited_prompt="my prompt")
    assert pinned["edited_prompt"] == "my prompt" and pinned["prompt_hash"] == prompt_hash("m", "original prompt")
    book.enabled = False
    cursor = book.cursor("c1")
    assert cursor.take("m", "my prompt") is None  # the code still sends the original prompt
    assert cursor.take("m", "original prompt")["response"] == "answer to my prompt"
    assert cursor.edited_prompt("original prompt") == "my prompt"
    assert cursor.edited_prompt("original prompt") is None
    # pinning again with the code's own prompt drops the edit
    assert "edited_prompt" not in book.pin("c1", "1", "plain", edited_prompt=None)
