"""Generated code that misbehaves, and the harness still works: a gigabyte of
output (bounded memory), thousands of displays, a changed working directory,
replaced or closed sys.stdout, a wiped namespace, a RecursionError, a busy
loop of sub-calls past the cell timeout, and two runs at once in one process.

Covered elsewhere: a plain infinite loop and a long sleep (test_budgets.py,
cell timeout), rlm_query past --max-depth (test_loop.py), deleting
``context`` / ``llm_query`` (test_loop.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from _helpers import Router, cell_text, cells_by_role, feedback_after, repl

HERE = Path(__file__).parent

GIGABYTE_SCRIPT = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from _helpers import repl
from rlm_kernel import RLM
from rlm_kernel.testing.server import Script, ScriptedServer

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

code = sys.argv[2]
srv = ScriptedServer(Script(root=[repl("print('warm up')"), "FINAL(ok)", repl(code), "FINAL(survived)"])).start()
rlm = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=srv.url, max_output_chars=10_000)
rlm.completion("ctx", "q")  # imports and first-use allocations happen here, not in the measured run
before = peak()
result = rlm.completion("ctx", "q")
told = [b for b in srv.calls("root-model")][-1]["messages"][-1]["content"]
cell = [c for c in result.notebook.cells if c.metadata.rlm.role == "code"][0]
print(json.dumps({
    "reason": result.reason, "answer": result.answer, "growth": peak() - before, "told": told,
    "stored": len(json.dumps(cell.outputs)), "notebook": len(json.dumps(result.notebook)),
    "streams": [o.name for o in cell.outputs if o.output_type == "stream"],
}))
"""

# ~1 GB in ~1 MB chunks, each chunk a new string
STDOUT_GB = "for i in range(1000):\n    print(f'{i:06d}|' * 142_858)"
MIXED_GB = ("import sys\nfor i in range(1000):\n    print(f'{i:06d}|' * 142_858)\n"
            "    print(f'err {i}', file=sys.stderr)")


@pytest.mark.parametrize("code", [STDOUT_GB, MIXED_GB], ids=["stdout", "stdout-and-stderr"])
def test_printing_a_gigabyte_keeps_memory_bounded(code):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-c", GIGABYTE_SCRIPT, str(HERE), code], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["reason"] == "final" and out["answer"] == "survived"
    # 1,000,000,000+ characters went through print; the process grew by a small fraction of that
    assert out["growth"] < 150_000_000, f"peak RSS grew by {out['growth'] / 1e6:.0f} MB"
    assert out["stored"] < 500_000 and out["notebook"] < 1_000_000
    told = out["told"]
    assert len(told) < 12_000 and "omitted" in told
    assert told.index("000000|") < told.index("omitted") < told.rindex("000999|")
    if code == MIXED_GB:  # 2,000 alternations became a handful of outputs, not 2,000
        assert 2 <= len(out["streams"]) <= 4 and "stderr" in out["streams"]


def test_thousands_of_displays_are_counted_not_kept(run_rlm):
    code = "from IPython.display import display\nfor i in range(5000):\n    display({'text/plain': f'item {i}'}, raw=True)"
    result, srv = run_rlm(root=[repl(code), repl("print('next')"), "FINAL(ok)"])
    assert result.reason == "final"
    first, second = cells_by_role(result.notebook, "code")
    displays = [o for o in first.outputs if o.output_type == "display_data"]
    assert len(displays) == 1000
    assert "4,000 more displayed outputs were not kept" in cell_text(first)
    assert cell_text(second) == "next\n"
    assert len(nbformat.writes(result.notebook)) < 1_000_000


def test_changed_directory_and_streams_do_not_break_the_harness(run_rlm, tmp_path, monkeypatch):
    home, away = tmp_path / "home", tmp_path / "away"
    home.mkdir()
    away.mkdir()
    monkeypatch.chdir(home)
    root = [
        repl(f"import io, os, sys\nos.chdir({str(away)!r})\nsys.stdout = io.StringIO()\n"
             "sys.stderr = io.StringIO()\nprint('into the void')"),
        repl("print('stdout is back in', os.getcwd())\nsys.stdout.close()\nsys.stderr.close()"),
        repl("print('closing did not stick')\nprint('stderr too', file=sys.stderr)"),
        "FINAL(ok)",
    ]
    result, _ = run_rlm(root=root, output="run.ipynb")  # relative to the directory the run started in
    assert result.reason == "final", result.error
    assert (home / "run.ipynb").exists() and not (away / "run.ipynb").exists()
    nbformat.validate(nbformat.read(str(home / "run.ipynb"), as_version=4))
    code = cells_by_role(result.notebook, "code")
    assert cell_text(code[0]) == ""
    assert cell_text(code[1]) == f"stdout is back in {away}\n"
    assert cell_text(code[2]) == "closing did not stick\nstderr too\n"
    print("the test's own stdout still works")


def test_a_wiped_namespace_and_rebound_helpers_are_restored(run_rlm):
    root = [
        repl("FINAL = print\nanswer = 42\nllm_query_batched = None\nrlm_query = 'x'\nglobals().clear()"),
        repl("print(len(context), llm_query_batched(['a', 'b']))\nFINAL('restored')"),
    ]
    result, srv = run_rlm(root=root, context="c" * 77)
    assert result.reason == "final" and result.answer == "restored"
    told = feedback_after(srv, 1)
    assert "restored" in told and "`context`" in told and "`FINAL`" in told
    assert cell_text(cells_by_role(result.notebook, "code")[1]) == "77 ['echo: a', 'echo: b']\n"


def test_a_recursion_error_is_an_error_in_its_cell(run_rlm):
    root = [repl("def down(n):\n    return down(n + 1)\n\ndown(0)"), repl("print('alive')"), "FINAL(ok)"]
    result, srv = run_rlm(root=root)
    assert result.reason == "final"
    first, second = cells_by_role(result.notebook, "code")
    assert first.metadata.rlm.status == "error"
    assert "RecursionError" in feedback_after(srv, 1)
    assert len(feedback_after(srv, 1)) < 12_000
    assert cell_text(second) == "alive\n"


def test_a_busy_loop_of_subcalls_is_stopped_by_the_cell_timeout(run_rlm):
    code = "n = 0\nwhile True:\n    llm_query(f'spin {n}')\n    n += 1"
    result, srv = run_rlm(root=[repl(code), repl("print('made', n)"), "FINAL(ok)"], cell_timeout=1.0)
    assert result.reason == "final"
    first, second = cells_by_role(result.notebook, "code")
    assert first.metadata.rlm.status == "error" and "TimeoutError" in feedback_after(srv, 1)
    made = int(cell_text(second).split()[1])
    records = first.metadata.rlm.subcalls
    assert made >= 1 and made <= len(records) <= made + 1  # the interrupted call is recorded too
    # every call the server answered was charged, but the one the interrupt cancelled in flight
    assert 0 <= len(srv.calls("sub-model")) - result.usage["openai/sub-model"]["calls"] <= 1


def test_two_runs_at_once_in_one_process_keep_apart(server, make_rlm):
    def script(tag: str) -> list[str]:
        return [
            repl(f"secret_{tag} = '{tag}' * 3\nprint('{tag} step 1', llm_query('{tag} one'))"),
            repl(f"other = [n for n in globals() if n.startswith('secret_') and n != 'secret_{tag}']\n"
                 f"print('{tag} step 2', other, len(context), llm_query_batched(['{tag} two', '{tag} three']))"),
            f"FINAL_VAR(secret_{tag})",
        ]

    srv = server(Router({"root-a": script("a"), "root-b": script("b")}), latency=0.05)
    start = threading.Barrier(2)
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def go(tag: str, context: str) -> None:
        try:
            rlm = make_rlm(srv, model=f"openai/root-{tag}")
            start.wait(timeout=30)
            results[tag] = rlm.completion(context, f"run {tag}")
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=go, args=("a", "A" * 10)), threading.Thread(target=go, args=("b", "B" * 20))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for tag, other, length in (("a", "b", 10), ("b", "a", 20)):
        result = results[tag]
        assert result.reason == "final" and result.answer == tag * 3
        texts = [cell_text(c) for c in cells_by_role(result.notebook, "code")]
        assert texts == [f"{tag} step 1 echo: {tag} one\n",
                         f"{tag} step 2 [] {length} ['echo: {tag} two', 'echo: {tag} three']\n"]
        assert result.usage["openai/sub-model"]["calls"] == 3
        assert f"openai/root-{other}" not in result.usage
