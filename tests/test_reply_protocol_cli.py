"""Rows of the reply-protocol table run as a user runs them: ``rlm-kernel
run`` in a subprocess against the scripted server, checking the exit code,
the reason and the answer it prints. A row that gives no answer runs out of
steps on it (exit 1, no answer), so a wrong reading cannot hide behind a
later step. The runs start together (each imports litellm for seconds)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _cli import CLI
from _helpers import clean_env
from _reply_rows import BY_ID, GOES_ON, Responder

from rlm_kernel.testing.server import ScriptedServer

JSON_ROWS = [
    "final-after-prose", "parenthesis-on-a-later-line", "two-finals", "hallucinated-output", "final-in-text-fence",
    "think-tag-final", "bare-close", "reasoning-only-code", "glm-box", "dict-ready", "final-var-after-failing-code",
]
PLAIN_ROWS = ["remark-after-final", "rebound-subcall-kept"]  # the answer printed as it is


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("reply-cli")
    context = base / "context.txt"
    context.write_text("the context text", encoding="utf-8")
    srv = ScriptedServer(Responder()).start()
    procs = {}
    for name in JSON_ROWS + PLAIN_ROWS:
        row = BY_ID[name]
        args = ["run", "--context", str(context), "--query", f"row {name}", "--model", "openai/root-model",
                "--sub-model", "openai/sub-model", "--api-base", srv.url, "--max-iterations",
                str(len(row.before) + 1), "-o", str(base / f"{name}.ipynb")]
        args += ["--json"] if name in JSON_ROWS else ["--quiet"]
        procs[name] = subprocess.Popen([CLI, *args], cwd=base, env=clean_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    done = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=240)
            done[name] = (proc.returncode, out, err)
        yield done
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        srv.stop()


@pytest.mark.parametrize("name", JSON_ROWS)
def test_cli_json(cli_runs, name):
    code, out, err = cli_runs[name]
    row = BY_ID[name]
    data = json.loads(out.strip().splitlines()[-1])
    if row.answer == GOES_ON:
        assert (code, data["reason"], data["answer"]) == (1, "max_iterations", None), err
    else:
        assert (code, data["reason"]) == (0, "final"), err
        assert data["answer"] == (row.answer if isinstance(row.answer, str) else str(row.answer))
    assert "Traceback" not in err
    assert Path(data["notebook"]).name == f"{name}.ipynb"


@pytest.mark.parametrize("name", PLAIN_ROWS)
def test_cli_prints_the_answer(cli_runs, name):
    code, out, err = cli_runs[name]
    assert code == 0, err
    assert out.rstrip("\n") == BY_ID[name].answer
