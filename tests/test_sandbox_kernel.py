"""``%%rlm --sandbox`` in the RLM kernel and ``rlm-kernel run --sandbox``:
the generated cells run in a confined execution kernel, their outputs reach
the page live under each cell's synthetic parent, sub-calls are made and
shown by the RLM kernel, and Interrupt stops a confined cell."""

from __future__ import annotations

import json
import os
import queue
import time

import nbformat
import pytest
from _cli import run_args, run_cli
from _helpers import STOP_BOUND, Router, cells_by_role, repl, require_bubblewrap
from _kernel import Frontend, texts

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.kernel
@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()
RUN_TIMEOUT = 30


@pytest.fixture(scope="module")
def frontend(tmp_path_factory):
    frontend = Frontend(tmp_path_factory.mktemp("sandbox-kernel"))
    try:
        frontend.import_litellm()
        frontend.hello(cells=[])
        yield frontend
    finally:
        frontend.shutdown()


@pytest.fixture
def scripted():
    servers = []

    def start(**scripts):
        srv = ScriptedServer(Router(scripts, sub=lambda p: f"sub answer to <{p}>")).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


def test_a_sandboxed_rlm_cell_streams_its_cells_outputs_and_sub_calls_live(frontend, scripted):
    frontend.execute("context = 'the context, made in a cell'")
    srv = scripted(**{"root-model": [
        repl("import os, socket\nprint('inside pid', os.getpid(), 'sees', context)\n"
             "try:\n    socket.create_connection(('127.0.0.1', 1), timeout=2)\nexcept OSError as e:\n"
             "    print('network:', type(e).__name__)\nr = llm_query('hello')\nprint('got', r)"),
        "FINAL_VAR(r)",
    ]})
    cell = (f"%%rlm --sandbox --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\n"
            "Say hello.")
    reply, messages = frontend.run_cell(cell, "query-cell", timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok", reply
    inserted = [o for o in frontend.ops_named("insert_cell") if o["cell"]["metadata"]["rlm"]["role"] == "code"]
    assert inserted, frontend.ops
    msg_id = f"rlm-{inserted[0]['cell']['id']}-1"
    mine = [m for m in frontend.messages if m["parent_header"].get("msg_id") == msg_id]
    shown = texts(mine, "stream")
    assert "inside pid 2 sees the context, made in a cell" in shown  # pid 2: the confined kernel
    assert "network: OSError" in shown or "network: ConnectionRefusedError" in shown
    assert "got sub answer to <hello>" in shown
    assert any(m["msg_type"] == "execute_input" for m in mine)
    count = next(m["content"]["execution_count"] for m in mine if m["msg_type"] == "execute_input")
    assert frontend.value("__import__('json').dumps([c.execution_count for c in rlm_result.notebook.cells "
                      "if c.metadata.get('rlm', {}).get('role') == 'code'])") == repr(f"[{count}]")
    # the sub-call's view is a widget of the RLM kernel, in the cell
    assert any(m["msg_type"] == "comm_open" for m in mine) or any(
        m["msg_type"] == "display_data" and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
        for m in mine)
    assert frontend.value("rlm_result.answer") == repr("sub answer to <hello>")
    assert frontend.value("rlm_result.reason") == "'final'"
    # the person's namespace is untouched: the run's variables stayed in the confined kernel
    assert frontend.value("'r' in dir()") == "False"


def test_interrupt_stops_a_sandboxed_cell(frontend, scripted):
    frontend.execute("context = 'abc'")
    srv = scripted(**{"root-model": [repl("print('before the wait', flush=True)\nimport time\ntime.sleep(60)")]})
    msg_id = frontend.kc.execute(f"%%rlm --sandbox --model openai/root-model --api-base {srv.url}\nq")
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while True:
            msg = frontend.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["msg_type"] == "stream" and "before the wait" in msg["content"]["text"]:
                break
    except queue.Empty:
        frontend._recover(msg_id)
        raise AssertionError("the sandboxed cell never started") from None
    time.sleep(0.3)
    took = frontend.interrupt(msg_id, within=15)
    assert took < STOP_BOUND, f"Interrupt took {took:.1f} s"
    assert frontend.value("rlm_result.reason") == "'interrupted'"
    statuses = frontend.value("[c.metadata.rlm.status for c in rlm_result.notebook.cells "
                          "if c.metadata.get('rlm', {}).get('role') == 'code']")
    assert statuses == "['interrupted']"
    assert frontend.execute("1 + 1")[0]["status"] == "ok"


def test_rlm_kernel_run_sandbox(tmp_path):
    (tmp_path / "doc.txt").write_text("a document")
    srv = ScriptedServer(Router({"root-model": [
        repl("import os\nprint(sorted(os.environ))\nnote = llm_query('x')"), "FINAL_VAR(note)"]})).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="sk-outside-only-1234567890abcdef")
        run = run_cli([*run_args(srv.url, tmp_path / "out.ipynb"), "--sandbox", "--json"], tmp_path, env=env)
    finally:
        srv.stop()
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["reason"] == "final" and data["answer"].startswith("echo: x")
    nb = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    listed = "".join(o.get("text", "") for o in cells_by_role(nb, "code")[0].outputs)
    assert "PATH" in listed and "OPENAI_API_KEY" not in listed  # the key worked outside, never entered inside
    assert "--sandbox" in cells_by_role(nb, "query")[0].source


def test_a_sandboxed_steps_traceback_names_the_count_the_page_shows(frontend, scripted):
    frontend.execute("context = 'c'")
    srv = scripted(**{"root-model": [repl("1 / 0"), repl("x = 1\n1 / 0"), "FINAL(x)"]})
    reply, _ = frontend.run_cell(f"%%rlm --sandbox --model openai/root-model --api-base {srv.url}\nq", "query-2",
                             timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok", reply
    codes = [o["cell"]["id"] for o in frontend.ops_named("insert_cell") if o["cell"]["metadata"]["rlm"]["role"] == "code"]
    for cell_id in codes[-2:]:
        mine = [m for m in frontend.messages if m["parent_header"].get("msg_id") == f"rlm-{cell_id}-1"]
        count = next(m["content"]["execution_count"] for m in mine if m["msg_type"] == "execute_input")
        traceback = "".join(line for m in mine if m["msg_type"] == "error" for line in m["content"]["traceback"])
        assert "ZeroDivisionError" in traceback and f"In[{count}]" in traceback, (count, traceback)


def test_input_in_a_headless_sandboxed_run_reads_the_commands_stdin_as_unconfined_code_does(tmp_path):
    (tmp_path / "doc.txt").write_text("a document")
    code = ("first = input('name? ')\nprint('got', repr(first))\n"
            "try:\n    input('more? ')\nexcept EOFError:\n    print('then EOFError')")
    srv = ScriptedServer(Router({"root-model": [repl(code), "FINAL_VAR(first)"]})).start()
    try:
        run = run_cli([*run_args(srv.url, tmp_path / "out.ipynb"), "--sandbox", "--json"], tmp_path,
                      input="a typed line\n")
    finally:
        srv.stop()
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["answer"] == "a typed line"
    nb = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    printed = "".join(o.get("text", "") for o in cells_by_role(nb, "code")[0].outputs)
    assert "got 'a typed line'" in printed and "then EOFError" in printed, printed
