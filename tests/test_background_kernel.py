"""Background sub-calls in the RLM kernel: the batch's widget keeps filling
while the engine waits for the next root reply and while a later cell waits
in ``.result()``; the cell that started the batch ends up with its final
records (the page's ``cell_finished`` op, the replay book, ``rlm_result``)."""

from __future__ import annotations

import json
import queue
import re
import time
from typing import Any

import pytest
from _helpers import STOP_BOUND, repl
from _kernel import PROTOCOL, Frontend

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

PROMPTS = 5


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    kernel = Frontend(tmp_path_factory.mktemp("background"))
    try:
        kernel.import_litellm()
        reply, _ = kernel.execute("import os; os.environ['OPENAI_API_KEY'] = 'sk-test-not-a-key'\ncontext = 'some text'")
        assert reply["status"] == "ok", reply
        kernel.hello(features=["ops"])
        yield kernel
    finally:
        kernel.shutdown()


def _sub(prompt: str) -> Reply:
    index = int(prompt.split()[-1])
    return Reply(text=f"answer {index}", delay=0.6 + 0.6 * index)  # 0.6 s ... 3.0 s


def _events(messages: list[dict]) -> list[tuple[str, Any]]:
    """Our ops (``ops`` unpacked) and the progress bar's "k of 5" updates, in wire order."""
    events: list[tuple[str, Any]] = []
    for msg in messages:
        if msg["msg_type"] not in ("comm_open", "comm_msg"):
            continue
        data = msg["content"].get("data") or {}
        if data.get("protocol") == PROTOCOL:
            events.extend(("op", op) for op in (data["ops"] if data.get("op") == "ops" else [data]))
            continue
        description = (data.get("state") or {}).get("description") or ""
        found = re.fullmatch(rf"(\d+) of {PROMPTS}", description)
        if found:
            events.append(("filled", int(found.group(1))))
    return events


def test_a_person_cell_with_wait_false_waits_so_its_records_are_complete(kernel: Frontend) -> None:
    with ScriptedServer(Script(sub=lambda p: Reply(text=f"re {p}", delay=0.3))) as srv:
        # no %%rlm ran yet in this kernel: the helpers take their settings from the environment
        kernel.execute(f"os.environ.update(RLM_SUB_MODEL='openai/sub-model', RLM_API_BASE={srv.url!r})")
        code = "h = llm_query_batched(['a', 'b'], wait=False)\nprint(h.done(), h.result())"
        reply, messages = kernel.run_cell(code, "person-cell")
        assert reply["status"] == "ok", reply
        printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
        assert "True ['re a', 're b']" in printed
        assert len(srv.calls("sub-model")) == 2
        # run again (as Run All does): the calls are replayed from the cell's records
        reply, messages = kernel.run_cell(code, "person-cell")
        printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
        assert "True ['re a', 're b']" in printed and "2 sub-calls replayed from the notebook, 0 new" in printed
        assert len(srv.calls("sub-model")) == 2
    book = kernel.value("[r['response'] for r in get_ipython().kernel.rlm_session.book.cells['person-cell']]")
    assert book == "['re a', 're b']"


def test_the_widget_fills_between_steps_and_in_a_later_cell_and_the_records_settle(kernel: Frontend) -> None:
    root = [
        repl(f"bg = llm_query_batched([f'item {{i}}' for i in range({PROMPTS})], wait=False)\nprint('started')"),
        Reply(text=repl("print('progress', bg.progress)\nanswers = bg.result()\nprint(answers)"), delay=1.5),
        "FINAL_VAR(answers)",
    ]
    with ScriptedServer(Script(root=root, sub=_sub)) as srv:
        code = f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\nq"
        reply, messages = kernel.run_cell(code, "anchor", timeout=120)
    assert reply["status"] == "ok", reply
    events = _events(messages)
    ops = [e for kind, e in events if kind == "op"]
    code_cells = list(dict.fromkeys(op["cell"]["id"] for op in ops if op.get("op") == "insert_cell"
                                    and op["cell"]["metadata"]["rlm"].get("role") == "code"))
    first, second = code_cells[:2]

    def where(op: str, cell_id: str) -> list[int]:
        return [i for i, (kind, e) in enumerate(events)
                if kind == "op" and e.get("op") == op and e.get("cell_id") == cell_id]

    first_done, second_started, second_done = where("cell_finished", first)[0], where("cell_started", second)[0], \
        where("cell_finished", second)[0]
    between_steps = [n for i, (kind, n) in enumerate(events) if kind == "filled" and first_done < i < second_started]
    in_later_cell = [n for i, (kind, n) in enumerate(events) if kind == "filled" and second_started < i < second_done]
    assert between_steps and max(between_steps) >= 1, events
    assert in_later_cell and max(in_later_cell) == PROMPTS, events

    # the first cell finished before its calls: a later cell_finished op brings its final records to the page
    finished = [events[i][1] for i in where("cell_finished", first)]
    assert [r["status"] for r in finished[0]["metadata"]["subcalls"]] != ["done"] * PROMPTS
    final = finished[-1]["metadata"]["subcalls"]
    assert [(r["status"], r["response"]) for r in final] == [("done", f"answer {i}") for i in range(PROMPTS)]
    # the replay book and the run's notebook have them too
    book = json.loads(kernel.value(
        f"__import__('json').dumps(get_ipython().kernel.rlm_session.book.cells[{first!r}])").strip("'"))
    assert [r["response"] for r in book] == [f"answer {i}" for i in range(PROMPTS)]
    answer = kernel.value("rlm_result.answer")
    assert answer == repr([f"answer {i}" for i in range(PROMPTS)])


def test_interrupt_while_a_later_cell_waits_in_result_ends_the_run_and_cancels_the_job(kernel: Frontend) -> None:
    root = [
        repl("slow = llm_query_batched(['p 1', 'p 2', 'p 3'], wait=False)"),
        repl("print('collecting', flush=True)\nslow.result()"),
    ]
    with ScriptedServer(Script(root=root, sub=lambda p: Reply(text="late", delay=60.0))) as srv:
        msg_id = kernel.send_cell(f"%%rlm --model openai/root-model --sub-model openai/sub-model "
                                  f"--api-base {srv.url}\nq", "interrupted")
        deadline = time.monotonic() + 60
        try:  # until the later cell waits in .result()
            while True:
                msg = kernel.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
                if msg["msg_type"] == "stream" and "collecting" in msg["content"]["text"]:
                    break
        except queue.Empty:
            kernel._recover(msg_id)
            raise AssertionError("the later cell never started") from None
        time.sleep(0.3)
        took = kernel.interrupt(msg_id, within=STOP_BOUND)
    assert took < STOP_BOUND
    assert kernel.value("rlm_result.reason") == "'interrupted'"
    # a live page: the run's notebook is rlm_result.notebook (on disk, its journal)
    records = json.loads(kernel.value(
        "__import__('json').dumps([c.metadata['rlm'].get('subcalls') for c in rlm_result.notebook.cells "
        "if c.metadata.get('rlm', {}).get('role') == 'code'][0])").strip("'"))
    assert [r["status"] for r in records] == ["error"] * 3
    assert {r["error"] for r in records} == {"cancelled: the run ended while it was still running"}
    reply, _ = kernel.execute("print(slow.done(), slow.progress)")
    assert reply["status"] == "ok"
