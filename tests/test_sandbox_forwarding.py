"""The "RLM (Python 3, sandboxed)" kernelspec, driven with jupyter_client:
every cell runs in the confined execution kernel behind the RLM kernel, which
forwards execution, outputs, widget comms both ways, stdin, interrupts and
restarts; ``%%rlm`` runs its agent's cells in the same confined namespace."""

from __future__ import annotations

import errno
import os
import queue
import time

import pytest
from _helpers import STOP_BOUND, Router, repl, require_bubblewrap
from _kernel import Kernel, texts

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.kernel
@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    kernel = Kernel("rlm-sandboxed", tmp_path_factory.mktemp("sandboxed-kernel"))
    try:
        kernel.import_litellm()
        yield kernel
    finally:
        kernel.shutdown()


def test_the_kernelspec_is_installed():
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("rlm-sandboxed")
    assert spec.display_name == "RLM (Python 3, sandboxed)"


def test_a_persons_cells_run_confined_with_outputs_results_and_errors(sandboxed):
    reply, messages = sandboxed.execute("import os\nprint('pid', os.getpid(), 'home', os.environ['HOME'])")
    assert reply["status"] == "ok"
    assert f"pid 2 home {sandboxed.cwd}" in texts(messages, "stream")  # its own pid namespace; home: the folder
    sandboxed.execute("x = 41")
    reply, messages = sandboxed.execute("x + 1")
    results = [m for m in messages if m["msg_type"] == "execute_result"]
    assert results[0]["content"]["data"]["text/plain"] == "42"
    assert results[0]["content"]["execution_count"] == reply["execution_count"]
    reply, messages = sandboxed.execute("open('/etc/escaped', 'w')")
    assert reply["status"] == "error" and reply["ename"] == "OSError"
    assert "Read-only file system" in texts(messages, "error")
    traceback = "".join(line for m in messages if m["msg_type"] == "error" for line in m["content"]["traceback"])
    assert f"In[{reply['execution_count']}]" in traceback  # numbered as the page numbers the cell
    reply, _ = sandboxed.execute("import socket\nsocket.getaddrinfo('pypi.org', 443)")
    assert reply["status"] == "error" and reply["ename"] == "gaierror"


def test_input_is_asked_through_the_rlm_kernel(sandboxed):
    msg_id = sandboxed.kc.execute("name = input('who? ')\nprint('hello', name)", allow_stdin=True)
    request = sandboxed.kc.get_stdin_msg(timeout=20)
    assert request["content"]["prompt"] == "who? "
    sandboxed.kc.input("Ada")
    messages: list[dict] = []
    sandboxed._until_idle(msg_id, messages, 20)
    assert "hello Ada" in texts(messages, "stream")


def test_a_slider_works_through_the_forwarding_both_ways(sandboxed):
    reply, messages = sandboxed.execute(
        "import ipywidgets as w\nseen = []\ns = w.IntSlider(value=1)\n"
        "s.observe(lambda change: seen.append(change['new']), 'value')\ns")
    assert reply["status"] == "ok", reply
    opens = [m for m in messages if m["msg_type"] == "comm_open"
             and m["content"]["data"]["state"].get("_model_name") == "IntSliderModel"]
    assert opens, [m["msg_type"] for m in messages]
    comm_id = opens[0]["content"]["comm_id"]
    # the page moves the slider
    msg = sandboxed.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
        "method": "update", "state": {"value": 7}, "buffer_paths": []}})
    sandboxed.kc.shell_channel.send(msg)
    deadline = time.monotonic() + 10
    while sandboxed.value("seen") != "[7]":
        assert time.monotonic() < deadline, "the slider's move never reached the confined kernel"
        time.sleep(0.1)
    # the confined kernel moves it: the page hears of it
    reply, messages = sandboxed.execute("s.value = 9")
    updates = [m for m in messages if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id]
    assert any(m["content"]["data"].get("state", {}).get("value") == 9 for m in updates)
    # the page's widget manager finds the confined kernel's comms
    sandboxed.kc.comm_info(target_name="jupyter.widget")
    while True:
        info = sandboxed.kc.get_shell_msg(timeout=10)
        if info["msg_type"] == "comm_info_reply":
            break
    assert comm_id in info["content"]["comms"]


ECHO_WAIT = 10  # seconds for a widget change to be echoed back from the confined kernel


def test_every_move_of_a_slider_on_the_pages_comm_subshell_reaches_the_confined_kernel(sandboxed):
    """JupyterLab 4.6 sends a comm target's messages on a subshell of the
    kernel it talks to (commsOverSubshells "perCommTarget"). That subshell is
    the RLM kernel's: forwarded with its id, the first move reached the
    confined kernel and every later one was dropped there (unknown subshell)."""
    kc = sandboxed.kc
    kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
    subshell = kc.get_control_msg(timeout=ECHO_WAIT)["content"]["subshell_id"]
    reply, messages = sandboxed.execute(
        "import ipywidgets as w\nmoved = []\nslider = w.IntSlider(value=3)\n"
        "slider.observe(lambda change: moved.append(change['new']), 'value')\nslider")
    assert reply["status"] == "ok", reply
    comm_id = next(m["content"]["comm_id"] for m in messages if m["msg_type"] == "comm_open"
                   and m["content"]["data"]["state"].get("_model_name") == "IntSliderModel")
    for value in (4, 5, 6):
        move = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
            "method": "update", "state": {"value": value}, "buffer_paths": []}})
        move["header"]["subshell_id"] = subshell
        kc.shell_channel.send(move)
        # the page sends a widget's next change once its last is answered; waiting
        # for the echo also lets the confined kernel file the comm's reply route first
        deadline = time.monotonic() + ECHO_WAIT
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the move to {value} was never echoed: it did not reach the "
                                     f"confined kernel (it saw {sandboxed.value('moved')})") from None
            if (msg["msg_type"] == "comm_msg" and msg["parent_header"].get("msg_id") == move["header"]["msg_id"]
                    and msg["content"]["data"].get("method") == "echo_update"):
                break
    assert sandboxed.value("moved") == "[4, 5, 6]"
    kc.control_channel.send(kc.session.msg("delete_subshell_request", {"subshell_id": subshell}))
    kc.get_control_msg(timeout=ECHO_WAIT)


def test_interrupt_stops_a_persons_confined_cell(sandboxed):
    msg_id = sandboxed.kc.execute("print('waiting', flush=True)\nimport time\ntime.sleep(60)")
    deadline = time.monotonic() + 20
    while True:
        msg = sandboxed.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["msg_type"] == "stream" and "waiting" in msg["content"]["text"]:
            break
    took = sandboxed.interrupt(msg_id, within=15)
    assert took < STOP_BOUND
    assert sandboxed.execute("1 + 1")[0]["status"] == "ok"


def test_rlm_cells_share_the_confined_namespace_with_the_persons_cells(sandboxed):
    sandboxed.execute("context = 'text from a cell'\nmine = 'a variable of the person'")
    srv = ScriptedServer(Router({"root-model": [
        repl("import os\nfound = mine.upper() + ' / ' + context + ' / pid ' + str(os.getpid())\n"
             "r = llm_query('hi')\nFINAL_VAR('found')"),
    ]})).start()
    try:
        reply, messages = sandboxed.execute(
            f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\nq", timeout=60)
    finally:
        srv.stop()
    assert reply["status"] == "ok", reply
    assert sandboxed.value("found") == repr("A VARIABLE OF THE PERSON / text from a cell / pid 2")
    assert sandboxed.value("r").startswith("'echo: hi")
    assert sandboxed.value("(rlm_result.reason, rlm_result.answer)") == repr(
        ("final", "A VARIABLE OF THE PERSON / text from a cell / pid 2"))
    assert "context" not in sandboxed.value("sorted(k for k in dir() if k == 'llm_query_outside')")


def test_rlm_context_loads_a_file_into_the_confined_namespace(sandboxed):
    (sandboxed.cwd / "doc.txt").write_text("a document of thirty letters..")
    reply, _ = sandboxed.execute(f"%rlm context {sandboxed.cwd / 'doc.txt'}")
    assert reply["status"] == "ok", reply
    assert sandboxed.value("len(context)") == "30"
    reply, messages = sandboxed.execute("%rlm context")
    assert reply["status"] == "ok" and "str of 30 characters" in texts(messages, "stream"), texts(messages, "stream")
    srv = ScriptedServer(Router({"root-model": ["FINAL(context was loaded)"]})).start()
    try:
        reply, _ = sandboxed.execute(f"%%rlm --model openai/root-model --api-base {srv.url}\nq", timeout=60)
    finally:
        srv.stop()
    assert reply["status"] == "ok", reply
    assert sandboxed.value("rlm_result.answer") == "'context was loaded'"
    # the run's notebook says where the context came from, so it can be reloaded
    from pathlib import Path

    import nbformat

    # this run's own notebook (names sort by the second, then a random run id: not by age)
    notebook = nbformat.read(Path(sandboxed.cwd, sandboxed.value("rlm_result.notebook_path").strip("'")), as_version=4)
    assert notebook.cells[0].source == f"%rlm context {sandboxed.cwd / 'doc.txt'}"


def test_rlm_context_of_a_hidden_file_reads_it_inside_from_the_read_only_inbox(sandboxed, tmp_path):
    # the confined kernel runs already: a file in /tmp (hidden from it) comes in linked or copied, read-only
    doc = tmp_path / "elsewhere.txt"
    doc.write_text("words from a hidden place")
    reply, _ = sandboxed.execute(f"%rlm context {doc}")
    assert reply["status"] == "ok", reply
    assert sandboxed.value("context") == "'words from a hidden place'"
    assert sandboxed.value("__rlm_sandbox__.context_from") == "'files'"
    assert sandboxed.value(f"__import__('os').path.exists({str(doc)!r})") == "False"  # the file itself stays hidden
    code = ("import glob, os\n"
            "inbox = glob.glob(os.environ['TMPDIR'] + '/../inbox/*elsewhere.txt')\n"
            "try:\n    open(inbox[0], 'a').write('x')\nexcept OSError as error:\n    print('refused', error.errno)")
    reply, messages = sandboxed.execute(code)
    assert reply["status"] == "ok" and f"refused {errno.EROFS}" in texts(messages, "stream"), messages
    assert doc.read_text() == "words from a hidden place"


def test_a_confined_kernel_that_dies_in_a_persons_cell_is_said_and_replaced(sandboxed):
    reply, messages = sandboxed.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert reply["status"] == "error" and reply["ename"] == "SandboxKernelDied", reply
    assert "SandboxKernelDied: the sandboxed execution kernel died" in texts(messages, "error"), messages
    reply, messages = sandboxed.execute("print('alive again', 6 * 7)")
    assert reply["status"] == "ok" and "alive again 42" in texts(messages, "stream"), messages


def _command_lines() -> str:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(found)


def test_a_restart_ends_the_confined_kernel_and_starts_a_new_one(sandboxed):
    old = sandboxed.value("__import__('os').environ['TMPDIR']").strip("'")
    state = old.rsplit("/", 1)[0]
    assert state in _command_lines()
    sandboxed.km.restart_kernel(now=True)
    sandboxed.kc.wait_for_ready(timeout=60)
    deadline = time.monotonic() + 10
    while state in _command_lines():
        assert time.monotonic() < deadline, "the old confined kernel outlived the restart"
        time.sleep(0.1)
    reply, messages = sandboxed.execute("import os\nprint('again', os.getpid())")
    assert "again 2" in texts(messages, "stream")
    try:
        sandboxed.kc.get_iopub_msg(timeout=0.1)
    except queue.Empty:
        pass


def _run_named_cell(kernel: Kernel, code: str, cell_id: str) -> list[dict]:
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
               "stop_on_error": True}
    msg = kernel.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
    kernel.kc.shell_channel.send(msg)
    messages: list[dict] = []
    kernel._until_idle(msg["header"]["msg_id"], messages, 60)
    return messages


def test_a_persons_cell_calls_a_sub_model_and_replays_it_when_run_again(sandboxed):
    srv = ScriptedServer(Router({"root-model": ["FINAL(ready)"]}, sub=lambda prompt: f"sub says <{prompt}>")).start()
    try:
        sandboxed.execute("context = 'c'")
        reply, _ = sandboxed.execute(  # the person's cells use the options of the notebook's last run
            f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\nq", timeout=60)
        assert reply["status"] == "ok", reply
        code = "import os\nr = llm_query('from my cell')\nprint(r, '| pid', os.getpid())"
        shown = texts(_run_named_cell(sandboxed, code, "my-cell"), "stream")
        assert "sub says <from my cell> | pid 2" in shown, shown
        assert "0 sub-calls replayed from the notebook, 1 new" in shown, shown
        assert len(srv.calls("sub-model")) == 1
        shown = texts(_run_named_cell(sandboxed, code, "my-cell"), "stream")
        assert "sub says <from my cell> | pid 2" in shown and "1 sub-call replayed from the notebook, 0 new" in shown
        assert len(srv.calls("sub-model")) == 1  # the second run replayed it
    finally:
        srv.stop()


def test_outputs_that_could_run_script_in_the_page_are_left_out(sandboxed):
    reply, messages = sandboxed.execute(
        "from IPython.display import display\n"
        "display({'application/javascript': 'alert(1)', 'text/html': '<img src=x onerror=alert(1)>',"
        " 'text/plain': 'plain part'}, raw=True)\n"
        "display({'text/html': '<b>bold</b>', 'text/plain': 'bold'}, raw=True)\n"
        "from comm import create_comm\n"
        "forged = create_comm(target_name='rlm', data={'protocol': 'rlm/1', 'op': 'insert_cell'})")
    assert reply["status"] == "ok", reply
    shown = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
    assert shown == [{"text/plain": "plain part"}, {"text/html": "<b>bold</b>", "text/plain": "bold"}]
    assert not [m for m in messages if m["msg_type"] == "comm_open" and m["content"].get("target_name") == "rlm"]
