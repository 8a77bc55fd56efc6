"""Crashes: a run killed mid-way (SIGKILL, no chance to clean up) keeps every
finished step in its journal, and ``rlm-kernel run --resume JOURNAL`` carries
on from it, replaying the recorded sub-calls."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from _cli import run_args, run_cli, start_cli
from _helpers import STOP_BOUND, Held, Router, clean_env, repl, wait_for
from _kernel import Frontend

from rlm_kernel.sinks.journal import read_journal
from rlm_kernel.testing.server import ScriptedServer

FAKE_KEY = "sk-test-crash-0000"
STEPS = [
    repl("facts = llm_query_batched([context[:10], context[10:20]])\nprint('facts', len(facts))"),
    repl("step_two = 'done'\nprint('step two', step_two)"),
    repl("import time\nprint('about to hang', flush=True)\ntime.sleep(120)"),
]


def _sub(prompt: str) -> str:
    return f"fact about {prompt[:10]!r}"


def _finished_code_cells(journal: Path) -> int:
    if not journal.exists():
        return 0
    count = 0
    for line in journal.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        cell = record.get("cell") or {}
        if cell.get("metadata", {}).get("rlm", {}).get("role") == "code" and cell.get("metadata", {}).get(
                "rlm", {}).get("status"):
            count += 1
    return count


def _resume_from(journal: Path, cwd: Path) -> tuple[dict, ScriptedServer, Path]:
    nb = read_journal(journal)
    nbformat.validate(nb)
    step_two = next(i for i, c in enumerate(nb.cells)
                    if c.metadata.get("rlm", {}).get("role") == "code" and c.metadata["rlm"].get("step") == 2)
    server = ScriptedServer(Router({"root-model": ["FINAL(recovered)"]}, sub=_sub)).start()
    out = cwd / "recovered.ipynb"
    done = run_cli(["run", "--resume", str(journal), "--from-cell", str(step_two), "--api-base", server.url,
                    "-o", str(out), "--json", "--quiet"], cwd, env=clean_env(OPENAI_API_KEY=FAKE_KEY))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), server, out


def test_killed_cli_run_resumes_from_its_journal(tmp_path):
    (tmp_path / "doc.txt").write_text("0123456789abcdefghijklmnop\n", encoding="utf-8")
    with ScriptedServer(Router({"root-model": list(STEPS)}, sub=_sub)) as server:
        out = tmp_path / "run.ipynb"
        proc = start_cli([*run_args(server.url, out), "--quiet"], tmp_path, env=clean_env(OPENAI_API_KEY=FAKE_KEY),
                         text=False)
        journal = tmp_path / "run.journal.jsonl"
        try:
            wait_for(lambda: _finished_code_cells(journal) == 2 and len(server.calls("root-model")) == 3, 120,
                     "two finished steps in the journal")
        finally:
            proc.kill()
            proc.communicate(timeout=30)
        assert len(server.calls("sub-model")) == 2
    assert journal.exists(), "the journal of a killed run is gone"
    result, server, out = _resume_from(journal, tmp_path)
    try:
        assert result["answer"] == "recovered"
        assert server.calls("sub-model") == [], "finished sub-calls were made again"
        saved = nbformat.read(out, as_version=4)
        text = json.dumps([c.get("outputs") for c in saved.cells])
        assert "facts 2" in text and "step two done" in text
    finally:
        server.stop()


@pytest.mark.kernel
def test_killed_kernel_run_resumes_from_its_journal(tmp_path):
    (tmp_path / "doc.txt").write_text("0123456789abcdefghijklmnop\n", encoding="utf-8")
    with ScriptedServer(Router({"root-model": list(STEPS)}, sub=_sub)) as server:
        kernel = Frontend(tmp_path)
        try:
            kernel.hello([])
            kernel.execute(f"import os; os.environ.update(OPENAI_API_KEY='{FAKE_KEY}')")
            kernel.execute("%rlm context doc.txt")
            ask = f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {server.url}\nq"
            kernel.send_cell(ask, uuid.uuid4().hex)
            journals = lambda: list((tmp_path / "rlm-runs").glob("*.journal.jsonl"))  # noqa: E731
            wait_for(lambda: journals() and _finished_code_cells(journals()[0]) == 2
                     and len(server.calls("root-model")) == 3, 120, "two finished steps in the journal")
        finally:
            os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)  # no chance to clean up
            kernel.kc.stop_channels()
            kernel.km.shutdown_kernel(now=True)
    [journal] = journals()
    result, server, _ = _resume_from(journal, tmp_path)
    try:
        assert result["answer"] == "recovered"
        assert server.calls("sub-model") == []
    finally:
        server.stop()


def test_ctrl_c_during_a_sub_call_batch_ends_the_cli_run_and_keeps_its_steps(tmp_path):
    # Ctrl-C (SIGINT) while 8 sub-calls held 30 s each are in flight: the run
    # ends at once as interrupted (exit 130), every request is hung up, and
    # the notebook keeps step 1. (The process exits too, which would also hang
    # up; test_kernel checks the same cancellation with the process alive.)
    (tmp_path / "doc.txt").write_text("0123456789abcdefghijklmnop\n", encoding="utf-8")
    steps = [repl("print('step one ran')"), repl("slow = llm_query_batched([f'p{i}' for i in range(8)])")]
    held = Held()
    with ScriptedServer(Router({"root-model": steps}, sub=held)) as server:
        out = tmp_path / "run.ipynb"
        proc = start_cli([*run_args(server.url, out), "--json", "--quiet"], tmp_path,
                         env=clean_env(OPENAI_API_KEY=FAKE_KEY))
        try:
            wait_for(lambda: held.started == 8, 120, "the eight sub-calls to reach the server")
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            proc.kill()
        took = time.monotonic() - started
        assert held.wait_hung_up(8, STOP_BOUND), f"only {len(held.hung_up)} of 8 requests were hung up"
    assert took < STOP_BOUND, f"the run took {took:.1f} s to stop"
    assert max(held.hung_up) - started < STOP_BOUND
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 130, (proc.returncode, stderr)
    result = json.loads(stdout)
    assert result["reason"] == "interrupted" and result["answer"] is None
    saved = nbformat.read(out, as_version=4)
    nbformat.validate(saved)
    assert "step one ran" in json.dumps([c.get("outputs") for c in saved.cells])
    assert saved.cells[-1].metadata.rlm.reason == "interrupted"


def test_the_journal_is_synced_to_disk_once_per_step(server, make_rlm, tmp_path, monkeypatch):
    # A machine that dies keeps what was fsynced: the journal is synced once per
    # step (not once per sub-call), each time holding every step finished so far.
    journal = tmp_path / "run.journal.jsonl"
    real_fsync = os.fsync
    synced: list[int] = []  # finished code cells in the journal at each of its fsyncs

    def spy(fd: int) -> None:
        real_fsync(fd)
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(journal.resolve()):
            synced.append(_finished_code_cells(journal))

    monkeypatch.setattr(os, "fsync", spy)
    steps = [repl("a = llm_query_batched([f'q{i}' for i in range(20)])"), repl("b = [llm_query('x') for _ in range(5)]"),
             repl("c = 3"), "FINAL(done)"]
    srv = server(Router({"root-model": steps}, sub=_sub))
    result = make_rlm(srv).completion("some text", "q", output=tmp_path / "run.ipynb")
    assert result.reason == "final" and result.subcalls == 25
    # step 1 starts (query cells), steps 2, 3 and 4 start (steps 1, 2 and 3 finished)
    assert synced == [0, 1, 2, 3]
    assert not journal.exists()  # removed after a clean end
