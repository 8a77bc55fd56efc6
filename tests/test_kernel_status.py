"""While a %%rlm cell runs, the kernel's published state stays busy: a
request handled beside the run (a subshell created on the control channel, as
JupyterLab does for widget comms; a widget's change) ends with its own 'idle',
which the page needs to finish the request, and the run's 'busy' is said
again right after it, so the page shows the kernel busy until the run's own
'idle'."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from _helpers import clean_env, repl
from jupyter_client.manager import start_new_kernel
from jupyter_client.session import Session

from rlm_kernel.testing.server import Script, ScriptedServer

pytestmark = pytest.mark.kernel


def test_requests_beside_a_run_end_with_their_idle_and_the_run_is_said_busy_again(tmp_path) -> None:
    root = [repl("import time\ntime.sleep(2)\nprint('slept')"), "FINAL(done)"]
    with ScriptedServer(Script(root=root)) as server:
        km, kc = start_new_kernel(kernel_name="rlm", cwd=str(tmp_path), env=clean_env(), startup_timeout=90)
        try:
            opened: list = []
            kc.execute_interactive("context = 'x' * 100\nfrom rlm_kernel.engine.model.litellm_setup import load_litellm as litellm_module\n"
                                   "litellm_module()\nfrom comm import create_comm\nseen = []\n"
                                   "probe = create_comm(target_name='probe')\n"
                                   "probe.on_msg(lambda msg: seen.append(msg['content']['data']))", timeout=90,
                                   output_hook=opened.append)
            comm_id = next(m for m in opened if m["msg_type"] == "comm_open")["content"]["comm_id"]
            run_id = kc.execute(f"%%rlm --model openai/root-model --api-base {server.url}\nWait.")
            statuses: list[tuple[str, str | None]] = []
            subshell = change = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    msg = kc.get_iopub_msg(timeout=1)
                except queue.Empty:
                    continue
                parent = msg["parent_header"].get("msg_id")
                if msg["msg_type"] in ("display_data", "stream") and subshell is None:
                    # the run has started (its status line): a subshell and a widget's change beside it
                    request = kc.session.msg("create_subshell_request", {})
                    kc.control_channel.send(request)
                    subshell = request["header"]["msg_id"]
                    change = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"value": 5}})
                    kc.shell_channel.send(change)
                    change = change["header"]["msg_id"]
                if msg["msg_type"] == "status":
                    statuses.append((msg["content"]["execution_state"], parent))
                    if parent == run_id and msg["content"]["execution_state"] == "idle":
                        break
            assert subshell is not None, "the run showed nothing"
            reply = kc.get_control_msg(timeout=10)
            assert reply["msg_type"] == "create_subshell_reply" and reply["content"]["status"] == "ok", reply
            for side in (subshell, change):
                # the page's request is done only with its 'idle' (JupyterLab's future; ipywidgets' next change)
                at = statuses.index(("idle", side)), statuses
                assert statuses[at[0] + 1] == ("busy", run_id), statuses  # ... and the run is said busy again
            assert ("busy", change) in statuses, statuses
            assert statuses[-1] == ("idle", run_id), statuses  # the run's own idle, last
            assert statuses.count(("idle", run_id)) == 1, statuses
            # after the run, side requests report idle as usual, and the change was taken
            kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
            later = kc.get_iopub_msg(timeout=10), kc.get_iopub_msg(timeout=10)
            assert [m["content"].get("execution_state") for m in later] == ["busy", "idle"], later
            printed: list = []
            kc.execute_interactive("print(seen)", timeout=30, output_hook=printed.append)
            assert any("{'value': 5}" in m["content"].get("text", "") for m in printed), printed
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def test_kernel_info_is_answered_during_a_run(tmp_path) -> None:
    """A page reloaded mid-run sends kernel_info_request first and holds
    everything else until the reply: it must come during the run, followed by
    a 'busy' of the run's own request (JupyterLab ignores the statuses whose
    parent is a kernel_info_request, and showed the kernel as Unknown)."""
    root = [repl("import time\ntime.sleep(4)\nprint('slept')"), "FINAL(done)"]
    with ScriptedServer(Script(root=root)) as server:
        km, kc = start_new_kernel(kernel_name="rlm", cwd=str(tmp_path), env=clean_env(), startup_timeout=90)
        try:
            kc.execute_interactive("context = 'x' * 100\nfrom rlm_kernel.engine.model.litellm_setup import load_litellm as litellm_module\n"
                                   "litellm_module();", timeout=90)
            run_id = kc.execute(f"%%rlm --model openai/root-model --api-base {server.url}\nWait.")
            asked_at = info_id = None
            answered_at = busy_at = ended_at = info_idle_at = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and ended_at is None:
                if info_id is not None and answered_at is None:
                    try:
                        reply = kc.get_shell_msg(timeout=0.05)
                        if reply["parent_header"].get("msg_id") == info_id:
                            assert reply["msg_type"] == "kernel_info_reply", reply
                            assert reply["content"]["implementation"] == "rlm_kernel"
                            answered_at = time.monotonic()
                    except queue.Empty:
                        pass
                try:
                    msg = kc.get_iopub_msg(timeout=0.05)
                except queue.Empty:
                    continue
                parent = msg["parent_header"].get("msg_id")
                shown = str(msg["content"].get("data", {}).get("text/markdown", ""))
                if msg["msg_type"] == "display_data" and "time.sleep(4)" in shown and info_id is None:
                    # the step's code is about to sleep: ask as a page that has just connected does
                    info_id = kc.kernel_info()
                    asked_at = time.monotonic()
                if msg["msg_type"] == "status" and parent == info_id and msg["content"]["execution_state"] == "idle":
                    info_idle_at = time.monotonic()  # JupyterLab's request is done only with it
                if msg["msg_type"] == "status" and parent == run_id:
                    state = msg["content"]["execution_state"]
                    if state == "busy" and info_id is not None and busy_at is None:
                        busy_at = time.monotonic()
                    if state == "idle":
                        ended_at = time.monotonic()
            assert info_id is not None, "the run's cell never started"
            assert answered_at is not None and answered_at - asked_at < 2, (
                "kernel_info_request waited for the run", asked_at, answered_at, ended_at)
            assert ended_at is not None and answered_at < ended_at - 1
            assert info_idle_at is not None and info_idle_at < ended_at - 1, "no 'idle' of the kernel_info_request"
            assert busy_at is not None and info_idle_at < busy_at < ended_at, "no 'busy' of the run's request after it"
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def test_requests_that_end_as_a_run_starts_do_not_leave_the_kernel_shown_idle(tmp_path) -> None:
    """A request handled beside the main shell (the control channel here; a
    comm's subshell in JupyterLab) can end between ipykernel's 'busy' for a
    %%rlm cell and the moment the kernel counts the run, and its 'idle' then
    showed the kernel idle for the whole run (seen once in CI). Flood the
    control channel across several runs' starts: every 'idle' of a run's
    time but its own is followed at once by the run's 'busy', so the page
    never stays on idle while the run goes on."""
    runs = 8
    root = [repl("print('step one')"), "FINAL(done)"] * runs
    with ScriptedServer(Script(root=root)) as server:
        km, kc = start_new_kernel(kernel_name="rlm", cwd=str(tmp_path), env=clean_env(), startup_timeout=90)
        # its own Session: one shared with kc would drop kc's iopub messages as replays
        side = km.client(session=Session(key=km.session.key))
        side.start_channels()
        stop = threading.Event()

        def flood() -> None:
            while not stop.is_set():
                side.control_channel.send(side.session.msg("list_subshell_request", {}))
                time.sleep(0.0002)

        flooding = threading.Thread(target=flood, daemon=True)
        try:
            kc.execute_interactive("context = 'x' * 100\nfrom rlm_kernel.engine.model.litellm_setup import load_litellm as litellm_module\n"
                                   "litellm_module();", timeout=90)
            flooding.start()
            seen_at_outputs: list[list[tuple[str, str | None]]] = []
            run_ids: list[str] = []
            for _ in range(runs):
                run_id = kc.execute(f"%%rlm --model openai/root-model --api-base {server.url}\nSay done.")
                run_ids.append(run_id)
                seen, ended = [], False
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not ended:
                    try:
                        msg = kc.get_iopub_msg(timeout=1)
                    except queue.Empty:
                        continue
                    parent = msg["parent_header"].get("msg_id")
                    if msg["msg_type"] == "status":
                        shown = msg["content"]["execution_state"]
                        seen.append((shown, parent))
                        ended = parent == run_id and shown == "idle"
                assert ended, "a run never ended"
                seen_at_outputs.append(seen)
            for seen in seen_at_outputs:
                started = next(i for i, (state, parent) in enumerate(seen) if state == "busy" and parent == run_ids[0])
                during = seen[started:-1]  # from the run's busy to before its own idle
                assert ("idle", run_ids[0]) not in during, seen
                # each 'idle' is followed at once by a 'busy': the run's, or the next side
                # request's (flooded, one may begin before the run's comes), and the last
                # one by the run's, so the page shows the kernel busy until the run's own idle
                idles = [i for i, (state, _) in enumerate(during) if state == "idle"]
                for i in idles:
                    assert i + 1 < len(during) and during[i + 1][0] == "busy", seen
                if idles:
                    assert during[idles[-1] + 1] == ("busy", run_ids[0]), seen
                run_ids.pop(0)
        finally:
            stop.set()
            if flooding.is_alive():
                flooding.join(timeout=5)  # its client's channels are closed next
            side.stop_channels()
            kc.stop_channels()
            km.shutdown_kernel(now=True)
