"""Taking over in the sandboxed kernel ("RLM (Python 3, sandboxed)"), as in
an ordinary RLM notebook: ``%%rlm --approve`` asks before each generated cell
runs (confined), and ``%rlm continue`` rebuilds the history from the
notebook and goes on with the confined namespace the run left."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
from _helpers import Router, repl, require_bubblewrap
from _kernel import Frontend, texts

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.kernel


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()


@pytest.fixture
def frontend(tmp_path):
    frontend = Frontend(tmp_path, name="rlm-sandboxed")
    try:
        frontend.import_litellm()
        frontend.hello([])
        yield frontend
    finally:
        frontend.shutdown()


def _flags(srv: ScriptedServer) -> str:
    # a person's cells run confined, so os.environ there is not the RLM kernel's: the settings go in the flags
    return f"--model openai/root-model --sub-model openai/sub-model --api-base {srv.url}"


def _page_cells(frontend: Frontend, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``before`` and the run's cells as the page has them (final metadata, in order)."""
    finished = {o["cell_id"]: o for o in frontend.ops_named("cell_finished")}
    cells = [dict(c) for c in before]
    for op in frontend.ops_named("insert_cell"):
        cell = dict(op["cell"], outputs=[])
        if cell["id"] in finished:
            cell["metadata"] = {"rlm": finished[cell["id"]]["metadata"]}
            cell["execution_count"] = finished[cell["id"]]["execution_count"]
        cells = [c for c in cells if c["id"] != cell["id"]] + [cell]
    return cells


def test_approve_asks_before_each_confined_cell(frontend):
    with ScriptedServer(Router({"root-model": [
        repl("import os\nprint('approved, pid', os.getpid())"),
        repl("print('never')"),
        "FINAL(done)",
    ]})) as srv:
        frontend.execute("context = 'c'")
        asked: list[str] = []
        answers = ["", "s"]
        stop = threading.Event()

        def answer() -> None:
            while not stop.is_set() and answers:
                try:
                    msg = frontend.kc.stdin_channel.get_msg(timeout=0.2)
                except queue.Empty:
                    continue
                if msg["msg_type"] == "input_request":
                    asked.append(msg["content"]["prompt"])
                    frontend.kc.input(answers.pop(0))

        helper = threading.Thread(target=answer, daemon=True)
        helper.start()
        try:
            reply, messages = frontend.run_cell(f"%%rlm --approve {_flags(srv)}\nGo.", "ask", timeout=60, allow_stdin=True)
        finally:
            stop.set()
            helper.join(5)
    assert reply["status"] == "ok", texts(messages, "stream", "error")
    assert sum("Run this code?" in a for a in asked) == 2, asked
    assert "approved, pid 2" in texts(messages, "stream")  # it ran confined (pid 2: the sandbox's own pid namespace)
    assert "never" not in texts(messages, "stream")
    finished = [o for o in frontend.ops_named("cell_finished")]
    assert [o["status"] for o in finished] == ["ok", "skipped"], finished


def test_continue_rebuilds_the_history_and_goes_on_in_the_confined_namespace(frontend):
    seen: list[str] = []

    def root(body: dict[str, Any]) -> str:
        seen.append(str(body["messages"]))
        return next(script)

    script = iter([repl("import os\nx = 21\nprint('x is', x, 'pid', os.getpid())"), repl("print('old step')"),
                   "FINAL(old)", repl("print('doubled', x * 2, 'pid', os.getpid())"), "FINAL(after continue)"])
    with ScriptedServer(Router({"root-model": [root] * 5})) as srv:
        frontend.execute("context = 'numbers'")
        query = {"id": "q1", "cell_type": "code", "source": f"%%rlm {_flags(srv)}\nWhat is x?", "metadata": {},
                 "outputs": []}
        reply, _ = frontend.run_cell(query["source"], "q1")
        assert reply["status"] == "ok"
        cells = _page_cells(frontend, [query])
        first_code = next(c for c in cells if c.get("metadata", {}).get("rlm", {}).get("role") == "code")
        first_code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x is 21 pid 2\n"}]  # as shown
        cells.insert(cells.index(first_code) + 1, {"id": "cont", "cell_type": "code", "source": f"%rlm continue {_flags(srv)}",
                                                    "metadata": {}, "outputs": []})
        frontend.ops.clear()

        def on_op(op: dict[str, Any]) -> None:
            if op.get("op") == "get_cells":
                frontend.send_op("cells", request_id=op["request_id"], cells=cells)

        reply, messages = frontend.run_cell(f"%rlm continue {_flags(srv)}", "cont", on_op=on_op)
    assert reply["status"] == "ok", texts(messages, "stream", "error")
    assert "doubled 42 pid 2" in texts(messages, "stream")  # the confined namespace still held x
    assert "x is 21" in seen[-2] and "old step" not in seen[-2]  # the rebuilt history, up to the chosen cell
    assert frontend.value("rlm_result.answer") == repr("after continue")


def test_a_run_whose_cell_kills_the_confined_kernel_goes_on_in_a_new_one_the_persons_cells_share(frontend):
    frontend.execute("context = 'gone with the kernel'")
    with ScriptedServer(Router({"root-model": [
        repl("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        repl("print('next step, context:', context)\nleft = 'made after'"),
        "FINAL(went on)",
    ]})) as srv:
        reply, messages = frontend.run_cell(f"%%rlm {_flags(srv)}\ngo", "query-died", timeout=60)
    assert reply["status"] == "ok", reply
    assert frontend.value("rlm_result.answer") == "'went on'"
    shown = texts(messages, "stream", "error")
    # the run's context is handed to the new kernel again; what the person's cells made before is gone
    assert "SandboxKernelDied" in shown and "next step, context: gone with the kernel" in shown, shown
    reply, messages = frontend.execute("print(left)")  # the person's cells run in the new confined kernel the run used
    assert reply["status"] == "ok" and "made after" in texts(messages, "stream"), messages
