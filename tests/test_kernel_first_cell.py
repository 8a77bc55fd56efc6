"""The first cells of a fresh kernel. Errors raised before a run starts end
the cell normally in every kernel state, the very first cell included
(ipykernel 7.4 left such a cell without a reply: its reply reads a traceback
attribute that only its synchronous path sets). litellm is imported in the
background once the kernel has answered its first kernel_info, so the first
%%rlm starts its run without waiting for that import."""

from __future__ import annotations

import queue
import time

import pytest
from _helpers import clean_env
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.kernel

REPLY_WITHIN_S = 60  # the first %%rlm also waits for litellm's import


def _reply(kc, code: str) -> tuple[dict, list[str]]:
    msg_id = kc.execute(code)
    deadline = time.monotonic() + REPLY_WITHIN_S
    while time.monotonic() < deadline:
        try:
            reply = kc.get_shell_msg(timeout=1)
        except queue.Empty:
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    else:
        pytest.fail(f"no execute_reply within {REPLY_WITHIN_S} s for {code!r}")
    texts = []
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            break
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
    return reply["content"], texts


@pytest.mark.parametrize("first_cell, said", [
    ("%%rlm --model openai/x --api-base http://127.0.0.1:9/v1\nWhat is in it?", "No context yet"),
    ("%%rlm --max-iterations lots\nWhat is in it?", "--max-iterations"),
    ("%rlm continue", "Continue needs the notebook's cells"),
])
def test_an_error_before_the_run_ends_the_first_cell_of_a_fresh_kernel(tmp_path, monkeypatch, first_cell, said):
    monkeypatch.chdir(tmp_path)
    km, kc = start_new_kernel(kernel_name="rlm")
    try:
        content, texts = _reply(kc, first_cell)
        assert content["status"] == "error"
        assert content["ename"] == "UsageError"
        assert said in "".join(texts)
        # the kernel goes on: the next cell runs
        content, texts = _reply(kc, "print('still here')")
        assert content["status"] == "ok" and "still here" in "".join(texts)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _value(kc, expression: str) -> str:
    msg_id = kc.execute("", silent=True, user_expressions={"v": expression})
    while True:
        reply = kc.get_shell_msg(timeout=REPLY_WITHIN_S)
        if reply["parent_header"].get("msg_id") == msg_id:
            result = reply["content"]["user_expressions"]["v"]
            assert result["status"] == "ok", result
            return result["data"]["text/plain"]


def test_litellm_is_imported_after_the_first_kernel_info_and_the_first_run_does_not_wait_for_it(tmp_path):
    """The kernel starts without litellm (its import would slow the start by
    seconds); its first kernel_info reply starts the import on a thread; a
    cell waits for that import rather than importing beside it; and the first
    %%rlm then starts its run at once, without the "Loading litellm" note."""
    from jupyter_client.manager import KernelManager

    from rlm_kernel.testing.server import Script, ScriptedServer

    with ScriptedServer(Script(root=["```repl\nFINAL('ready')\n```"])) as server:
        km = KernelManager(kernel_name="rlm")
        km.start_kernel(cwd=str(tmp_path), env=clean_env())
        kc = km.client()
        kc.start_channels()
        try:
            # no kernel_info yet: the kernel answers a cell, and has not begun importing litellm
            assert _value(kc, "'litellm' in __import__('sys').modules") == "False"
            kc.kernel_info()
            reply = kc.get_shell_msg(timeout=REPLY_WITHIN_S)
            assert reply["msg_type"] == "kernel_info_reply"
            # the cell after it waits for the background import, which is then done
            assert _value(kc, "__import__('rlm_kernel.engine.model.litellm_setup', fromlist=['x']).litellm_loaded()") \
                == "True"
            _reply(kc, "context = 'some text'")
            content, texts = _reply(kc, f"%%rlm --model openai/root-model --api-base {server.url}\nWhat is it?")
            assert content["status"] == "ok", content
            assert not any("Loading litellm" in text for text in texts), texts
            assert server.calls("root-model"), "the run made no root call"
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
