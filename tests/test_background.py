"""Background sub-calls: ``llm_query(..., wait=False)`` and friends return a
handle at once; the run goes on (later cells, later root steps) while the
calls are in flight; a later step collects them; the run's end cancels what
still runs. Headless, against the scripted server over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import nbformat
import pytest
from _helpers import Router, cells_by_role, feedback_after, repl

from rlm_kernel.engine.trajectory.sink import Sink
from rlm_kernel.testing.server import Reply, prompt_text


def _slow_sub(seconds: float, arrivals: list[float] | None = None) -> Any:
    def sub(prompt: str) -> Reply:
        if arrivals is not None:
            arrivals.append(time.monotonic())
        return Reply(text=f"answer to {prompt}", delay=seconds)

    return sub


class _Notes(Sink):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, run: Any, text: str) -> None:
        self.notes.append(text)


def _printed(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def _code_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("rlm", {}).get("role") == "code"]


def test_a_background_batch_lets_the_next_root_request_through_and_a_later_step_collects_it(server, make_rlm):
    seen: dict[str, Any] = {}
    srv_box: list[Any] = []

    def second_step(body: dict[str, Any]) -> str:
        srv = srv_box[0]
        # the root request arrives: how many sub-calls are at the server right now, how many answered
        seen["subs_in_flight"] = srv.in_flight - 1
        seen["subs_answered"] = srv.answered("sub-model")["calls"]
        seen["at"] = time.monotonic()
        return repl("print('still exploring while the batch runs:', pending.progress)")

    root = [
        repl("started = __import__('time').monotonic()\n"
             "pending = llm_query_batched([f'item {i}' for i in range(20)], wait=False)\n"
             "print('returned after', round(__import__('time').monotonic() - started, 2), 's')"),
        second_step,
        repl("answers = pending.result()\nprint(len(answers), answers[0], answers[-1])"),
        "FINAL_VAR(answers)",
    ]
    arrivals: list[float] = []
    srv = server(root=root, sub=_slow_sub(1.0, arrivals))
    srv_box.append(srv)
    result = make_rlm(srv).completion("some context", "Summarise the items.")
    assert result.reason == "final", result.error
    assert result.answer == [f"answer to item {i}" for i in range(20)], "all 20 answers, in order"
    # the second root request reached the server while the batch was still in flight
    assert seen["subs_in_flight"] >= 1 and seen["subs_answered"] < 20, seen
    assert len(arrivals) == 20 and seen["at"] - min(arrivals) < 1.0, "the next root request waited for the batch"
    first = _code_cells(result.notebook)[0]
    returned = float(_printed(first).split("after ")[1].split(" s")[0])
    assert returned < 0.5, "wait=False returned at once"
    # the root model was told which job still runs, by the name that holds it
    told = feedback_after(srv, 1)
    assert "Background jobs still running: `pending` (llm_query_batched, " in told
    assert "/20 done)" in told
    # the records belong to the cell that started the batch, final although it finished first
    records = first.metadata["rlm"]["subcalls"]
    assert [r["status"] for r in records] == ["done"] * 20
    assert [r["response"] for r in records] == [f"answer to item {i}" for i in range(20)]
    assert "subcalls" not in _code_cells(result.notebook)[2].metadata["rlm"]
    assert result.subcalls == 20


def test_the_handle_waits_with_a_timeout_cancels_and_reports_progress(run_rlm):
    code = """
h = llm_query('slow one', wait=False)
print(repr(h))
try:
    h.result(timeout=0.2)
except TimeoutError as error:
    print('timeout:', error)
print('progress', h.progress, 'done', h.done())
print('cancelled', h.cancel(), 'done', h.done(), 'again', h.cancel())
try:
    h.result()
except Exception as error:
    print(type(error).__name__, error)
quick = llm_query_batched(['a', 'b'], wait=False)
print('quick', quick.result(), quick.progress, quick.done())
"""
    result, srv = run_rlm(root=[repl(code), "FINAL(ok)"],
                          sub=lambda p: Reply(text=f"re {p}", delay=10.0 if p == "slow one" else 0.0))
    assert result.reason == "final", result.error
    text = _printed(_code_cells(result.notebook)[0])
    assert "<background llm_query: running, 0/1 calls finished>" in text
    assert "timeout: The background llm_query was not done after 0.2 s (0/1 calls finished)" in text
    assert "progress (0, 1) done False" in text
    assert "cancelled True done True again False" in text
    assert "SubcallError Sub-call to openai/sub-model failed: cancelled." in text
    assert "quick ['re a', 're b'] (2, 2) True" in text
    records = _code_cells(result.notebook)[0].metadata["rlm"]["subcalls"]
    assert (records[0]["status"], records[0]["error"]) == ("error", "cancelled")


def test_jobs_still_running_when_the_run_ends_are_cancelled_and_reported(run_rlm, server, make_rlm):
    srv = server(root=[repl("slow = llm_query_batched(['x', 'y', 'z'], wait=False)"), "FINAL(done early)"],
                 sub=_slow_sub(30.0))
    notes = _Notes()
    started = time.monotonic()
    result = make_rlm(srv).completion("ctx", "q", sink=notes)
    assert result.reason == "final" and result.answer == "done early"
    assert time.monotonic() - started < 10, "the run did not wait for its background calls"
    assert [n for n in notes.notes if "background" in n] == [
        "1 background job still running when the run ended was cancelled: `slow` (llm_query_batched, 0/3 done)."]
    records = _code_cells(result.notebook)[0].metadata["rlm"]["subcalls"]
    assert {r["status"] for r in records} == {"error"}
    assert {r["error"] for r in records} == {"cancelled: the run ended while it was still running"}


def test_background_calls_take_the_budget_before_they_start(run_rlm):
    code = "try:\n    llm_query_batched(['p'] * 5, wait=False)\nexcept Exception as e:\n    print(type(e).__name__)"
    result, srv = run_rlm(root=[repl(code), "FINAL(ok)"], max_subcalls=3)
    text = _printed(_code_cells(result.notebook)[0])
    assert "BudgetExceeded" in text
    assert srv.calls("sub-model") == []


def test_wait_must_be_true_or_false(run_rlm):
    result, _ = run_rlm(root=[repl("try:\n    llm_query('p', wait='no')\nexcept TypeError as e:\n    print(e)"),
                              "FINAL(ok)"])
    text = _printed(_code_cells(result.notebook)[0])
    assert "wait takes True (wait for the answer) or False (return a background job at once), not 'no'." in text


def test_background_rlm_query_runs_a_child_while_the_parent_goes_on(run_rlm):
    root = {
        "root-model": [
            repl("child = rlm_query('count the words in: a b c', model='openai/child-model', wait=False)\n"
                 "print('parent goes on')"),
            repl("print('child says', child.result())"),
            "FINAL(ok)",
        ],
        "child-model": [repl("import time\ntime.sleep(0.5)\nn = len(context.split(':')[1].split())"),
                             "FINAL_VAR(n)"],
    }
    result, srv = run_rlm(responder=Router(root), max_depth=1)
    assert result.reason == "final", result.error
    cells = _code_cells(result.notebook)
    assert "parent goes on" in _printed(cells[0])
    assert "child says 3" in _printed(cells[1])
    record = cells[0].metadata["rlm"]["subcalls"][0]
    assert (record["kind"], record["status"], record["response"]) == ("rlm", "done", "3")


def test_a_resumed_run_replays_the_background_calls(tmp_path, make_rlm, server):
    root = [repl("bg = llm_query_batched(['one', 'two'], wait=False)"), repl("print(bg.result())"), "FINAL(first)"]
    srv = server(root=root, sub=_slow_sub(0.2))
    path = tmp_path / "run.ipynb"
    (tmp_path / "doc.txt").write_text("one two\n", encoding="utf-8")
    from rlm_kernel.context.files import load_context

    loaded = load_context([str(tmp_path / "doc.txt")])
    make_rlm(srv).completion(loaded.value, "q", output=path, sources=loaded.sources)
    assert len(srv.calls("sub-model")) == 2
    again = server(root=["FINAL(second)"], sub=_slow_sub(0.0))
    nb = nbformat.read(path, as_version=4)
    last_code = max(i for i, c in enumerate(nb.cells) if c.metadata.get("rlm", {}).get("role") == "code")
    result = make_rlm(again).resume(path, from_cell=last_code, output=tmp_path / "resumed.ipynb")
    assert result.reason == "final"
    assert again.calls("sub-model") == [], "the background calls were replayed from the notebook"
    assert result.replayed_subcalls == 2
    printed = _printed(_code_cells(result.notebook)[1])
    assert "['answer to one', 'answer to two']" in printed
    assert cells_by_role(result.notebook, "answer")


@pytest.mark.parametrize("helper", ["llm_query_batched", "rlm_query_batched"])
def test_an_empty_background_batch_is_done_at_once(run_rlm, helper):
    result, _ = run_rlm(root=[repl(f"e = {helper}([], wait=False)\nprint(e.done(), e.result(), e.progress)"),
                              "FINAL(ok)"], max_depth=1)
    text = _printed(_code_cells(result.notebook)[0])
    assert "True [] (0, 0)" in text


def test_a_handle_is_never_taken_as_the_answer(run_rlm):
    root = [repl("h = llm_query('p', wait=False)\nFINAL_VAR('h')"), repl("x = h.result()\nFINAL_VAR('x')")]
    result, srv = run_rlm(root=root, sub=lambda p: "the real answer")
    assert (result.reason, result.answer, result.iterations) == ("final", "the real answer", 2)
    told = feedback_after(srv, 1)
    assert ("The answer was not taken: `h` is the handle of a background llm_query, not its answer. "
            "Collect it first (`x = handle.result()`), then answer with FINAL_VAR(x).") in told


def test_background_calls_share_the_runs_concurrency_limit_with_the_root_model(run_rlm):
    root = [repl("bg = llm_query_batched([f'p {i}' for i in range(6)], wait=False)"),
            repl("print(len(bg.result()))"), "FINAL(ok)"]
    result, srv = run_rlm(root=root, sub=_slow_sub(0.3), concurrency=2)
    assert result.reason == "final", result.error
    assert len(srv.calls("sub-model")) == 6
    assert srv.max_in_flight == 2, "at most --concurrency model calls at once, the root model's included"


def test_a_pinned_background_call_holds_when_replay_is_off(tmp_path, make_rlm, server):
    root = [repl("bg = llm_query_batched(['one', 'two'], wait=False)"), repl("print(bg.result())"), "FINAL(first)"]
    srv = server(root=root, sub=_slow_sub(0.2))
    path = tmp_path / "run.ipynb"
    (tmp_path / "doc.txt").write_text("one two\n", encoding="utf-8")
    from rlm_kernel.context.files import load_context

    loaded = load_context([str(tmp_path / "doc.txt")])
    make_rlm(srv).completion(loaded.value, "q", output=path, sources=loaded.sources)
    nb = nbformat.read(path, as_version=4)
    first = _code_cells(nb)[0]
    first.metadata["rlm"]["subcalls"][0].update(response="a person's answer", pinned=True)
    nbformat.write(nb, path)
    again = server(root=["FINAL(second)"], sub=_slow_sub(0.0))
    last_code = max(i for i, c in enumerate(nb.cells) if c.metadata.get("rlm", {}).get("role") == "code")
    result = make_rlm(again).resume(path, from_cell=last_code, output=tmp_path / "resumed.ipynb", replay=False)
    assert result.reason == "final"
    assert [prompt_text(c) for c in again.calls("sub-model")] == ["two"], "the pinned call was not made again"
    assert "[\"a person's answer\", 'answer to two']" in _printed(_code_cells(result.notebook)[1])
