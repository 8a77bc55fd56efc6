"""While a %%rlm cell runs, the kernel's published state stays busy: requests
handled beside the run (here a subshell created on the control channel, as
JupyterLab does for widget comms) must not end with an 'idle' that the page
would show as the kernel's state."""

from __future__ import annotations

import queue
import time

import pytest
from _helpers import clean_env, repl
from jupyter_client.manager import start_new_kernel

from rlm_kernel.testing.server import Script, ScriptedServer

pytestmark = pytest.mark.kernel


def test_no_idle_is_published_while_a_run_goes_on(tmp_path) -> None:
    root = [repl("import time\ntime.sleep(2)\nprint('slept')"), "FINAL(done)"]
    with ScriptedServer(Script(root=root)) as server:
        km, kc = start_new_kernel(kernel_name="rlm", cwd=str(tmp_path), env=clean_env(), startup_timeout=90)
        try:
            kc.execute_interactive("context = 'x' * 100\nfrom rlm_kernel.engine.litellm_setup import load_litellm as litellm_module\n"
                                   "litellm_module();", timeout=90)
            run_id = kc.execute(f"%%rlm --model openai/root-model --api-base {server.url}\nWait.")
            statuses: list[tuple[str, str | None]] = []
            sent = False
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    msg = kc.get_iopub_msg(timeout=1)
                except queue.Empty:
                    continue
                parent = msg["parent_header"].get("msg_id")
                if msg["msg_type"] in ("display_data", "stream") and not sent:
                    # the run has started (its status line): ask for a subshell beside it
                    kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
                    sent = True
                if msg["msg_type"] == "status":
                    statuses.append((msg["content"]["execution_state"], parent))
                    if parent == run_id and msg["content"]["execution_state"] == "idle":
                        break
            assert sent, "the run showed nothing"
            reply = kc.get_control_msg(timeout=10)
            assert reply["msg_type"] == "create_subshell_reply" and reply["content"]["status"] == "ok", reply
            idles = [p for state, p in statuses if state == "idle"]
            assert idles == [run_id], statuses  # the run's own idle, last, and no other
            # after the run, side requests report idle again as usual
            kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
            later = kc.get_iopub_msg(timeout=10), kc.get_iopub_msg(timeout=10)
            assert [m["content"].get("execution_state") for m in later] == ["busy", "idle"], later
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
