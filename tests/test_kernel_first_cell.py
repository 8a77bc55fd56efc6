"""Errors raised before a run starts end the cell normally in every kernel
state, the very first cell of a fresh kernel included (ipykernel 7.4 left
such a cell without a reply: its reply reads a traceback attribute that only
its synchronous path sets)."""

from __future__ import annotations

import queue
import time

import pytest
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
