"""The ops the RLM kernel sends the labextension during a run (jupyter_client,
real HTTP to the scripted server): batched into ``ops`` messages only for a
frontend whose ``hello`` lists the feature, and always in an order the
frontend can apply as they come (a cell is inserted before it starts, its
code's outputs follow its ``cell_started``, ``run_ended`` comes last)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from _helpers import Router, repl
from _kernel import PROTOCOL, Frontend

from rlm_kernel.testing.server import Reply, ScriptedServer

pytestmark = pytest.mark.kernel
STEPS = 4


def _script() -> list[str]:
    replies = [repl(f"print('out', {n})", f"Step {n}.") for n in range(1, STEPS)]
    # the last step answers in its code (a FINAL line beside code is not taken)
    return [*replies, repl(f"print('out', {STEPS})\nFINAL('done')", f"Step {STEPS}.")]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    kernel = Frontend(tmp_path_factory.mktemp("live-ops"))
    try:
        kernel.import_litellm()
        reply, _ = kernel.execute("import os; os.environ['OPENAI_API_KEY'] = 'sk-test-not-a-key'\ncontext = 'some text'")
        assert reply["status"] == "ok", reply
        yield kernel
    finally:
        kernel.shutdown()


def _run(kernel: Frontend, url: str) -> list[dict]:
    """Run a %%rlm cell the way JupyterLab does (the request names its cell);
    every iopub message until the kernel is idle again."""
    code = f"%%rlm --model openai/root-model --api-base {url} --max-iterations {STEPS}\nq"
    _, messages = kernel.run_cell(code, "anchor")
    return messages


def _ops_messages(messages: list[dict]) -> list[dict]:
    out = []
    for msg in messages:
        data = msg["content"].get("data") if msg["msg_type"] in ("comm_open", "comm_msg") else None
        if isinstance(data, dict) and data.get("protocol") == PROTOCOL and data.get("op") != "open":
            out.append(data)
    return out


def _events(messages: list[dict]) -> list[tuple[str, dict]]:
    """Ops (``ops`` unpacked) and generated cells' stream outputs, in wire order."""
    events: list[tuple[str, dict]] = []
    for msg in messages:
        data = msg["content"].get("data") if msg["msg_type"] in ("comm_open", "comm_msg") else None
        if isinstance(data, dict) and data.get("protocol") == PROTOCOL:
            for op in data["ops"] if data.get("op") == "ops" else [data]:
                events.append(("op", op))
        elif msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id", "").startswith("rlm-"):
            events.append(("output", msg))
    return events


def _assert_applicable(events: list[tuple[str, dict]]) -> None:
    ops = [op for kind, op in events if kind == "op" and op.get("op") != "open"]
    names = [op["op"] for op in ops]
    assert names[0] == "run_started" and names[-1] == "run_ended", names
    inserted = [op["cell"] for op in ops if op["op"] == "insert_cell"]
    roles = [c["metadata"]["rlm"]["role"] for c in inserted]
    assert roles.count("thought") >= STEPS and roles.count("code") == STEPS and roles[-1] == "answer", roles
    statuses = [op for op in ops if op["op"] == "status"]
    assert statuses and statuses[-1]["state"] == "ended"

    for cell in (c for c in inserted if c["cell_type"] == "code"):
        at = _positions(events, cell["id"])
        assert at["insert_cell"] < at["cell_started"] < at["output"] < at["cell_finished"], (cell["id"], at)


def _positions(events: list[tuple[str, dict]], cell_id: str) -> dict[str, int]:
    """Where a code cell's insert, start, first output and finish are among the events."""
    at: dict[str, int] = {}
    for i, (kind, event) in enumerate(events):
        if kind == "output":
            if event["parent_header"]["msg_id"].startswith(f"rlm-{cell_id}-"):
                at.setdefault("output", i)
        elif event["op"] == "insert_cell" and event["cell"]["id"] == cell_id:
            at.setdefault("insert_cell", i)
        elif event["op"] in ("cell_started", "cell_finished") and event["cell_id"] == cell_id:
            at.setdefault(event["op"], i)
    assert len(at) == 4, (cell_id, at)
    return at


def test_batches_ops_for_a_frontend_that_reads_them(kernel: Frontend) -> None:
    with ScriptedServer(Router({"root-model": _script()})) as server:
        kernel.hello(features=["ops"])
        messages = _run(kernel, server.url)
    sent = _ops_messages(messages)
    batches = [m for m in sent if m["op"] == "ops"]
    assert batches, [m["op"] for m in sent]
    for batch in batches:
        assert len(batch["ops"]) > 1 and all(op["protocol"] == PROTOCOL and op["run_id"] for op in batch["ops"])
    events = _events(messages)
    assert len(sent) < sum(1 for kind, _ in events if kind == "op")
    _assert_applicable(events)


def test_sends_ops_one_by_one_to_a_frontend_without_the_feature(kernel: Frontend) -> None:
    with ScriptedServer(Router({"root-model": _script()})) as server:
        kernel.hello()
        messages = _run(kernel, server.url)
    sent = _ops_messages(messages)
    assert sent and all(m["op"] != "ops" for m in sent), [m["op"] for m in sent]
    _assert_applicable(_events(messages))


def test_a_page_that_says_hello_mid_run_gets_back_what_a_reload_lost(tmp_path) -> None:
    """The resync answering a hello mid-run carries, besides the run's cells,
    what the reload took from the cells a person ran: the %%rlm cell's own
    output (its status line, with the display id later updates name), its
    count and request, and the page's other cells as the run found them."""
    kernel = Frontend(tmp_path)
    try:
        kernel.import_litellm()
        kernel.hello([], features=["ops"])
        kernel.execute("import os; os.environ['OPENAI_API_KEY'] = 'sk-test-not-a-key'")
        _, messages = kernel.run_cell("context = 'some text'\nprint('context loaded')", "ctx")
        ctx_count = next(m["content"]["execution_count"] for m in messages if m["msg_type"] == "execute_input")
        ctx = {"cell_type": "code", "id": "ctx", "source": "context = 'some text'\nprint('context loaded')",
               "metadata": {}, "execution_count": ctx_count,
               "outputs": [{"output_type": "stream", "name": "stdout", "text": "context loaded\n"}]}
        note = {"cell_type": "markdown", "id": "note", "source": "a note", "metadata": {}}
        script = [repl("print('step one')", "One."), Reply(text="FINAL(done)", delay=3.0)]
        with ScriptedServer(Router({"root-model": script})) as server:
            code = f"%%rlm --model openai/root-model --api-base {server.url}\nq"
            ask = {"cell_type": "code", "id": "ask", "source": code, "metadata": {}, "execution_count": None,
                   "outputs": []}
            run_id = kernel.send_cell(code, "ask")
            resync = None
            count = None
            deadline = time.monotonic() + 60
            while True:
                msg = kernel.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
                kernel._seen(msg)
                data = msg["content"].get("data") if msg["msg_type"] in ("comm_open", "comm_msg") else None
                if isinstance(data, dict) and data.get("op") == "get_cells":
                    kernel.send_op("cells", request_id=data["request_id"], cells=[ctx, ask, note])
                if isinstance(data, dict) and data.get("op") == "resync":
                    resync = data
                if msg["msg_type"] == "execute_input" and msg["parent_header"].get("msg_id") == run_id:
                    count = msg["content"]["execution_count"]
                if msg["msg_type"] == "stream" and "step one" in msg["content"]["text"]:
                    # step two's model call is in flight: a reloaded page says hello on a new comm
                    hello = {"protocol": PROTOCOL, "op": "hello", "notebook_path": "t.ipynb", "client_id": "again",
                             "features": ["ops"]}
                    kernel.kc.shell_channel.send(kernel.kc.session.msg(
                        "comm_open", {"comm_id": "reloaded", "target_name": "rlm", "data": hello}))
                if (msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == run_id
                        and msg["content"]["execution_state"] == "idle"):
                    break
        assert resync is not None, "no resync after the hello"
        assert resync["anchor_cell_id"] == "ask" and resync["parent_msg_id"] == run_id
        assert resync["anchor"]["execution_count"] == count is not None
        shown = resync["anchor"]["outputs"]
        status = [o for o in shown if o["data"].get("text/plain", "").startswith("RLM · step")]
        assert len(status) == 1 and status[0]["transient"]["display_id"], shown
        assert resync["page_cells"] == [{"id": "ctx", "source": ctx["source"], "execution_count": ctx_count,
                                         "outputs": ctx["outputs"]}]
        assert [c["metadata"]["rlm"]["role"] for c in resync["cells"]] == ["thought", "code"]
    finally:
        kernel.shutdown()
