"""The installed ``rlm`` kernelspec, driven with jupyter_client: ``%rlm
context`` and ``%%rlm`` end to end against the scripted server; errors as a
short UsageError; ``%load_ext rlm_kernel`` in a plain ``python3`` kernel."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _helpers import STOP_BOUND, Held, Router, cells_by_role, repl
from _kernel import TIMEOUT, Kernel, texts

from rlm_kernel.testing.server import Reply, ScriptedServer, prompt_text

pytestmark = pytest.mark.kernel

RUN_TIMEOUT = 15  # one scripted %%rlm run (a second or two when healthy; litellm is warmed up first)


def assert_usage_error(reply: dict, messages: list[dict], *needles: str) -> None:
    assert reply["status"] == "error"
    assert reply["ename"] == "UsageError"
    shown = texts(messages, "stream", "error")
    assert "UsageError" in shown
    assert "Traceback" not in shown
    assert len(reply.get("traceback") or []) <= 1
    for needle in needles:
        assert needle in reply["evalue"]
    # short: one sentence, no dump
    assert len(reply["evalue"]) < 400 and "\n" not in reply["evalue"].strip()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kernel")
    text = "Chapter 1. It was a dark night.\n" * 199 + "The end: BOOK-SENTINEL-4471.\n"
    (path / "book.txt").write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def kernels(workdir):
    """Both kernels, started side by side (each takes a second or two)."""
    (workdir / "rlm").mkdir()
    (workdir / "py").mkdir()
    started: dict[str, Any] = {}
    errors: list[BaseException] = []

    def start(key: str, name: str, cwd: Path) -> None:
        try:
            kernel = Kernel(name, cwd)
            started[key] = kernel
            kernel.import_litellm()  # not inside a timed run
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=start, args=("rlm", "rlm", workdir / "rlm")),
               threading.Thread(target=start, args=("python3", "python3", workdir / "py"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if errors:
            raise errors[0]
        yield started
    finally:
        for kernel in started.values():
            kernel.shutdown()


@pytest.fixture(scope="module")
def rlm_kernel(kernels) -> Kernel:
    return kernels["rlm"]


@pytest.fixture
def scripted():
    servers: list[ScriptedServer] = []

    def start(sub: Any = None, **scripts: Any) -> ScriptedServer:
        srv = ScriptedServer(Router(scripts, sub=sub)).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        threading.Thread(target=srv.stop, daemon=True).start()


def test_rlm_kernelspec_is_installed():
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("rlm")
    assert spec.display_name == "RLM (Python 3)"
    assert spec.language == "python"
    assert "rlm_kernel" in spec.argv


def test_kernel_info(rlm_kernel):
    rlm_kernel.kc.kernel_info()
    reply = rlm_kernel.kc.get_shell_msg(timeout=TIMEOUT)
    assert reply["content"]["implementation"] == "rlm_kernel"


def test_rlm_context_then_rlm_cell_end_to_end(rlm_kernel, scripted, workdir):
    book = workdir / "book.txt"
    reply, messages = rlm_kernel.execute(f"%rlm context {book}")
    assert reply["status"] == "ok"
    said = texts(messages, "stream")
    assert "str of 6,397 characters" in said and str(book) in said

    srv = scripted(**{"root-model": [
        "Let me look.\n" + repl("print('first lines:', context.splitlines()[0])\nnote = llm_query('summarise')"),
        "FINAL_VAR(note)",
    ]})
    cell = (f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\n"
            "What happens in the book?")
    reply, messages = rlm_kernel.execute(cell, timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok", reply
    # the steps were shown in the cell's output as they happened
    shown = texts(messages, "stream", "display_data", "update_display_data", "execute_result")
    assert "Let me look." in shown
    assert "first lines: Chapter 1. It was a dark night." in shown
    assert "step 1" in shown
    # a status line, displayed once and updated in place to the end state
    status_ids = {m["content"].get("transient", {}).get("display_id") for m in messages
                  if m["msg_type"] == "display_data" and "step 0/" in m["content"]["data"].get("text/plain", "")}
    status_ids.discard(None)
    assert len(status_ids) == 1, "no status line display with a display_id"
    final_updates = [m for m in messages if m["msg_type"] == "update_display_data"
                     and "RLM final" in m["content"]["data"].get("text/plain", "")]
    assert final_updates and final_updates[-1]["content"]["transient"]["display_id"] in status_ids
    assert "Trajectory saved to" in shown
    # the result is in the namespace
    assert rlm_kernel.value("rlm_result.reason") == "'final'"
    assert rlm_kernel.value("rlm_result.answer") == repr("echo: summarise")
    assert rlm_kernel.value("note") == repr("echo: summarise")  # agent cells share the namespace
    # the trajectory notebook, under rlm-runs/ in the kernel's working directory
    written = sorted((rlm_kernel.cwd / "rlm-runs").glob("*.ipynb"))
    assert written, "no trajectory notebook under rlm-runs/"
    path = written[-1]
    assert rlm_kernel.value("rlm_result.notebook_path") == repr(str(path))
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    roles = [c.metadata.rlm.role for c in nb.cells]
    assert roles == ["context", "query", "thought", "code", "thought", "answer"]
    assert nb.cells[0].source == f"%rlm context {book}"
    code = cells_by_role(nb, "code")[0]
    assert any("first lines:" in o.get("text", "") for o in code.outputs)
    assert code.metadata.rlm.subcalls[0]["response"] == "echo: summarise"
    # the context never went to the root model
    for body in srv.calls("root-model"):
        assert "BOOK-SENTINEL-4471" not in json.dumps(body)


def test_status_line_and_subcall_views_stay_out_of_the_model_view(rlm_kernel, scripted):
    # The status line and sub-call views are for the human; the model must be
    # told what the code printed, and the trajectory must hold the code's outputs.
    rlm_kernel.execute("context = 'abc'")
    # slow sub-calls, so that the status line is updated while the cell waits on them
    srv = scripted(sub=lambda p: Reply(text=f"echo {p}", delay=0.4),
                   **{"root-model": [repl("r = [llm_query(f'q{i}') for i in range(3)]\nprint('printed by code')"),
                                     "FINAL(ok)"]})
    reply, _ = rlm_kernel.execute(
        f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\nq", timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok"
    told = prompt_text(srv.calls("root-model")[1])
    assert "printed by code" in told
    assert "RLM \u00b7" not in told and "step 1/" not in told, told
    assert "llm_query \u2192" not in told, told


def test_status_line_is_redrawn_a_few_times_a_second_and_ends_current(rlm_kernel, scripted):
    # Twenty instant steps ask for a status redraw several times per step; the
    # display sink draws at most four a second and always draws the last one.
    rlm_kernel.execute("context = 'abc'")
    steps = [repl(f"x = {i}") for i in range(20)] + ["FINAL(done)"]
    srv = scripted(**{"root-model": steps})
    started = time.monotonic()
    reply, messages = rlm_kernel.execute(
        f"%%rlm --model openai/root-model --api-base {srv.url} --max-iterations 30\nq", timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    assert reply["status"] == "ok"
    updates = [m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] == "update_display_data"
               and m["content"]["data"].get("text/plain", "").startswith("RLM")]
    assert updates, "the status line was never redrawn"
    assert updates[-1].startswith("RLM final") and "step 21/30" in updates[-1], updates[-1]
    assert len(updates) <= elapsed / 0.25 + 3, (len(updates), elapsed)


def test_rlm_cells_in_a_row_never_hang(rlm_kernel, scripted):
    # Quick runs back to back: each must finish (a healthy one takes well
    # under a second against the scripted server). Thirty, because a hang that
    # depends on thread timing may spare a few runs.
    rlm_kernel.execute("context = 'abc'")
    for attempt in range(30):
        srv = scripted(**{"root-model": [f"FINAL(run {attempt})"]})
        started = time.monotonic()
        reply, _ = rlm_kernel.execute(f"%%rlm --model openai/root-model --api-base {srv.url}\nq", timeout=10)
        assert reply["status"] == "ok", reply
        assert rlm_kernel.value("rlm_result.answer") == repr(f"run {attempt}")
        assert time.monotonic() - started < 10


def test_rlm_cell_with_output_option(rlm_kernel, scripted, workdir):
    rlm_kernel.execute("context = ['alpha', 'beta', 'gamma']")
    srv = scripted(**{"root-model": [repl("FINAL(str(len(context)))")]})
    out = workdir / "chosen" / "run.ipynb"
    reply, _ = rlm_kernel.execute(
        f"%%rlm --model openai/root-model --api-base {srv.url} --output {out}\nHow many?", timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok"
    assert rlm_kernel.value("rlm_result.answer") == "'3'"
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].metadata.rlm.role == "context" and nb.cells[0].cell_type == "markdown"


def test_rlm_context_directory_gives_a_list(rlm_kernel, workdir):
    folder = workdir / "parts"
    folder.mkdir(exist_ok=True)
    for i, text in enumerate(["one", "two two", "three three three"]):
        (folder / f"{i}.txt").write_text(text)
    reply, messages = rlm_kernel.execute(f"%rlm context {folder}")
    assert reply["status"] == "ok"
    assert "list of 3 items" in texts(messages, "stream")
    assert rlm_kernel.value("context") == repr(["one", "two two", "three three three"])
    reply, messages = rlm_kernel.execute("%rlm context")
    assert "list of 3 items" in texts(messages, "stream")


def test_interrupt_stops_a_run_and_keeps_its_trajectory(rlm_kernel, scripted, workdir):
    rlm_kernel.execute("context = 'abc'")
    srv = scripted(**{"root-model": [repl("print('before the wait', flush=True)\nimport time\ntime.sleep(60)")]})
    out = workdir / "interrupted" / "run.ipynb"
    msg_id = rlm_kernel.kc.execute(f"%%rlm --model openai/root-model --api-base {srv.url} --output {out}\nq")
    deadline = time.monotonic() + RUN_TIMEOUT
    try:  # wait until the generated cell is running
        while True:
            msg = rlm_kernel.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["msg_type"] == "stream" and "before the wait" in msg["content"]["text"]:
                break
    except queue.Empty:
        rlm_kernel._recover(msg_id)
        raise AssertionError(f"the generated cell never started within {RUN_TIMEOUT} s (the run hung)") from None
    time.sleep(0.3)
    took = rlm_kernel.interrupt(msg_id, within=15)
    assert took < STOP_BOUND, f"Interrupt took {took:.1f} s to stop the run"
    assert rlm_kernel.value("rlm_result.reason") == "'interrupted'"
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    code = cells_by_role(nb, "code")
    assert code and any("before the wait" in o.get("text", "") for o in code[0].outputs)
    assert nb.cells[-1].metadata.rlm.reason == "interrupted"
    # the kernel is still usable
    reply, _ = rlm_kernel.execute("1 + 1")
    assert reply["status"] == "ok"


def test_interrupt_during_a_root_call_stops_the_run_at_once(rlm_kernel, scripted, workdir):
    # The root model takes 30 s to answer its second request: Interrupt while it
    # waits must cancel that call (the server sees the client hang up), end the
    # run as interrupted and keep step 1.
    rlm_kernel.execute("context = 'abc'")
    held = Held(text="FINAL(late)")
    srv = scripted(**{"root-model": [repl("print('step one ran')"), held]})
    out = workdir / "interrupted-root" / "run.ipynb"
    msg_id = rlm_kernel.kc.execute(f"%%rlm --model openai/root-model --api-base {srv.url} --output {out}\nq")
    deadline = time.monotonic() + RUN_TIMEOUT
    while len(srv.calls("root-model")) < 2:
        if time.monotonic() > deadline:
            rlm_kernel._recover(msg_id)
            raise AssertionError(f"the second root call never started within {RUN_TIMEOUT} s")
        time.sleep(0.05)
    time.sleep(0.3)
    took = rlm_kernel.interrupt(msg_id, within=15)
    assert took < STOP_BOUND, f"Interrupt took {took:.1f} s to stop the run"
    assert held.wait_hung_up(1, STOP_BOUND), "the root call's HTTP request was left running"
    assert rlm_kernel.value("rlm_result.reason") == "'interrupted'"
    assert rlm_kernel.value("rlm_result.answer") == "None"
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    code = cells_by_role(nb, "code")
    assert len(code) == 1 and any("step one ran" in o.get("text", "") for o in code[0].outputs)
    assert nb.cells[-1].metadata.rlm.reason == "interrupted"
    reply, _ = rlm_kernel.execute("1 + 1")
    assert reply["status"] == "ok"


def test_interrupt_during_a_sub_call_batch_cancels_its_requests(rlm_kernel, scripted, workdir):
    # Eight sub-calls held open by the server: Interrupt must end the run and
    # cancel all eight HTTP requests while the kernel lives on.
    rlm_kernel.execute("context = 'abc'")
    held = Held()
    srv = scripted(sub=held, **{"root-model": [repl("answers = llm_query_batched([f'p{i}' for i in range(8)])")]})
    out = workdir / "interrupted-batch" / "run.ipynb"
    msg_id = rlm_kernel.kc.execute(f"%%rlm --model openai/root-model --sub-model openai/sub-model "
                                   f"--api-base {srv.url} --output {out}\nq")
    deadline = time.monotonic() + RUN_TIMEOUT
    while held.started < 8:
        if time.monotonic() > deadline:
            rlm_kernel._recover(msg_id)
            raise AssertionError(f"the eight sub-calls never reached the server within {RUN_TIMEOUT} s")
        time.sleep(0.05)
    took = rlm_kernel.interrupt(msg_id, within=15)
    assert took < STOP_BOUND, f"Interrupt took {took:.1f} s to stop the run"
    assert held.wait_hung_up(8, STOP_BOUND), f"only {len(held.hung_up)} of 8 sub-call requests were cancelled"
    assert rlm_kernel.value("rlm_result.reason") == "'interrupted'"
    nb = nbformat.read(str(out), as_version=4)
    [code] = cells_by_role(nb, "code")
    assert code.metadata.rlm.status == "interrupted"
    assert [r["status"] for r in code.metadata.rlm.subcalls] == ["error"] * 8


def test_rlm_cell_without_context_is_a_usage_error(rlm_kernel):
    rlm_kernel.execute("context = 'x'\ndel context")
    reply, messages = rlm_kernel.execute("%%rlm --model openai/root-model --api-base http://127.0.0.1:9/v1\nq")
    assert_usage_error(reply, messages, "context")


def test_unknown_model_is_a_usage_error(rlm_kernel):
    rlm_kernel.execute("context = 'some text'")
    reply, messages = rlm_kernel.execute("%%rlm --model nosuchprovider/zzz\nq")
    assert_usage_error(reply, messages, "nosuchprovider/zzz")


@pytest.mark.parametrize("line, needle", [
    ("%%rlm --model openai/root-model --max-iterations lots", "--max-iterations"),
    ("%%rlm --model openai/root-model --bogus-flag 1", "--bogus-flag"),
])
def test_bad_options_are_a_usage_error(rlm_kernel, line, needle):
    rlm_kernel.execute("context = 'some text'")
    reply, messages = rlm_kernel.execute(f"{line}\nq")
    assert_usage_error(reply, messages, needle)


def test_missing_context_file_is_a_usage_error(rlm_kernel, workdir):
    reply, messages = rlm_kernel.execute(f"%rlm context {workdir / 'nope.txt'}")
    assert_usage_error(reply, messages, "nope.txt")


def test_run_ending_without_answer_reports_its_reason(rlm_kernel, scripted):
    rlm_kernel.execute("context = 'abc'")
    srv = scripted(**{"root-model": [repl("print('working')")] * 3})
    reply, messages = rlm_kernel.execute(
        f"%%rlm --model openai/root-model --api-base {srv.url} --max-iterations 2\nq", timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok"
    assert "RLM max_iterations" in texts(messages, "update_display_data")
    assert rlm_kernel.value("rlm_result.reason") == "'max_iterations'"


def test_load_ext_in_a_plain_python_kernel(kernels, scripted, workdir):
    kernel = kernels["python3"]
    reply, _ = kernel.execute("%load_ext rlm_kernel")
    assert reply["status"] == "ok"
    reply, messages = kernel.execute(f"%rlm context {workdir / 'book.txt'}")
    assert reply["status"] == "ok"
    assert "6,397 characters" in texts(messages, "stream")
    srv = scripted(**{"root-model": [repl("n = len(context)\nFINAL(f'{n} characters')")]})
    reply, messages = kernel.execute(f"%%rlm --model openai/root-model --api-base {srv.url}\nHow long?",
                                     timeout=RUN_TIMEOUT)
    assert reply["status"] == "ok", reply
    assert "RLM final" in texts(messages, "update_display_data")
    assert kernel.value("rlm_result.answer") == "'6397 characters'"
    assert list((kernel.cwd / "rlm-runs").glob("*.ipynb"))
    reply, messages = kernel.execute("%%rlm --model nosuchprovider/zzz\nq")
    assert_usage_error(reply, messages, "nosuchprovider/zzz")
