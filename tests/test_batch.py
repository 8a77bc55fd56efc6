"""``rlm-kernel batch``: six tasks (one with a context that cannot load) on
three local worker processes, a rerun that asks no model, and the same tasks
as Ray tasks on a local Ray instance. The models are a scripted server in
this process; the batch runs as the command a user types."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from _helpers import repl, wait_for

from rlm_kernel.batch.tasks import read_tasks
from rlm_kernel.errors import RLMError
from rlm_kernel.testing.server import ScriptedServer, all_text

CLI = str(Path(sys.executable).with_name("rlm-kernel"))
GOOD = ["t1", "t2", "t3", "t4", "t5"]
STEP = repl("print(type(context).__name__, len(context))\nprint(llm_query('summarize: ' + str(context)[:40]))")


def responder(body: dict) -> str:
    """Root: one step, then an answer naming the task (stateless: tasks interleave)."""
    if body.get("model") != "root-model":
        return "a summary"
    number = re.search(r"QUESTION-(\d+)", all_text(body)).group(1)
    return STEP if len(body["messages"]) <= 2 else f"FINAL(answer-{number})"


@pytest.fixture(scope="module")
def models():
    srv = ScriptedServer(responder).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    base = tmp_path_factory.mktemp("batch")
    docs = base / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("alpha " * 50, encoding="utf-8")
    (docs / "b.txt").write_text("beta " * 30, encoding="utf-8")
    lines = [
        {"id": "t1", "query": "QUESTION-1", "context": "docs/a.txt"},
        {"id": "t2", "query": "QUESTION-2", "context": ["docs/a.txt", "docs/b.txt"]},
        {"id": "t3", "query": "QUESTION-3", "context_text": "the context itself"},
        {"id": "t4", "query": "QUESTION-4", "context_text": ["one", "two", "three"]},
        {"id": "bad", "query": "QUESTION-9", "context": "docs/missing.txt"},
        {"id": "t5", "query": "QUESTION-5", "context": "docs"},
    ]
    path = base / "tasks.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def batch(tasks: Path, out: Path, models: ScriptedServer, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("RLM_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return subprocess.run(
        [CLI, "batch", str(tasks), "--out", str(out), "--model", "openai/root-model",
         "--sub-model", "openai/sub-model", "--api-base", models.url, "--max-iterations", "5", *extra],
        env=env, capture_output=True, text=True, timeout=600)


def results(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def check_outcome(out: Path, done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 1, done.stderr  # one task ended without an answer
    lines = results(out)
    assert [line["id"] for line in lines] == ["t1", "t2", "t3", "t4", "bad", "t5"]
    by_id = {line["id"]: line for line in lines}
    for number, task in enumerate(GOOD, 1):
        line = by_id[task]
        assert line["reason"] == "final" and line["answer"] == f"answer-{number}", line
        assert line["iterations"] == 2 and line["subcalls"] == 1 and line["run_id"]
        assert set(line["usage"]) == {"openai/root-model", "openai/sub-model"}
        notebook = nbformat.read(out / f"{task}.ipynb", as_version=4)
        assert line["notebook"] == str(out / f"{task}.ipynb")
        assert notebook.metadata["rlm"]["runs"][-1]["reason"] == "final"
    bad = by_id["bad"]
    assert bad["reason"] == "error" and "No such file or directory" in bad["error"] and "missing.txt" in bad["error"]
    assert bad["notebook"] is None and not (out / "bad.ipynb").exists()
    # what each task's code saw as `context`
    seen = {}
    for task in GOOD:
        cell = next(c for c in nbformat.read(out / f"{task}.ipynb", as_version=4).cells
                    if c.metadata.get("rlm", {}).get("role") == "code")
        seen[task] = cell.outputs[0]["text"].splitlines()[0]
    # files load as documents (str and list subclasses, docs/documents.md); text given inline stays a plain str / list
    assert seen == {"t1": "Document 300", "t2": "Documents 2", "t3": "str 18", "t4": "list 3", "t5": "Documents 2"}


def test_six_tasks_on_three_local_workers_then_a_rerun_asks_no_model(tasks_file, models, tmp_path):
    out = tmp_path / "out"
    before = len(models.requests)
    done = batch(tasks_file, out, models, "--workers", "3")
    check_outcome(out, done)
    assert len(models.requests) - before == 5 * 3  # two root steps and one sub-call per task
    assert "task bad: error" in done.stderr and "task t3: final (2 steps, 1 sub-call)" in done.stderr
    assert "1 task ended without a final answer: bad" in done.stderr

    (out / "results.jsonl").unlink()  # the lines of finished tasks are rebuilt from their notebooks
    again = batch(tasks_file, out, models, "--workers", "3")
    check_outcome(out, again)
    assert len(models.requests) - before == 15  # the rerun asked no model
    assert "5 of 6 tasks already have a final answer; skipping them" in again.stderr



def test_ctrl_c_stops_the_running_runs_and_the_same_command_resumes(tmp_path):
    import signal

    slow = {"1", "2"}

    def stalling(body: dict) -> str:
        if body.get("model") != "root-model":
            return "a summary"
        number = re.search(r"QUESTION-(\d+)", all_text(body)).group(1)
        if len(body["messages"]) > 2:
            return f"FINAL(answer-{number})"
        running = tmp_path / f"running-{number}"  # the slow step says it runs, for the Ctrl-C below
        return repl(f"import time\nopen({str(running)!r}, 'w').close()\nfor _ in range(600):\n    time.sleep(0.1)"
                    ) if number in slow else STEP

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "query": f"QUESTION-{i}", "context_text": "x"}) + "\n"
                             for i in range(4)), encoding="utf-8")
    out = tmp_path / "out"
    with ScriptedServer(stalling) as models:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("RLM_")}
        command = [CLI, "batch", str(tasks), "--out", str(out), "--workers", "2", "--model", "openai/root-model",
                   "--sub-model", "openai/sub-model", "--api-base", models.url]
        batch_run = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        wait_for(lambda: all((tmp_path / f"running-{n}").exists() for n in slow), 120, "both slow steps to run")
        os.killpg(batch_run.pid, signal.SIGINT)  # Ctrl-C on a terminal reaches the whole process group
        _, stderr = batch_run.communicate(timeout=60)
        assert batch_run.returncode == 130, stderr
        assert "batch interrupted; run the same command again to resume" in stderr
        by_id = {line["id"]: line for line in results(out)}
        assert by_id["t1"]["reason"] == by_id["t2"]["reason"] == "interrupted"
        assert "t3" not in by_id and not (out / "t3.ipynb").exists()  # not started after Ctrl-C
        for task in ("t1", "t2"):
            assert nbformat.read(out / f"{task}.ipynb", as_version=4).metadata["rlm"]["runs"][-1]["reason"] == \
                "interrupted"

        slow.clear()
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    lines = results(out)
    assert [line["id"] for line in lines] == ["t0", "t1", "t2", "t3"]
    assert [line["answer"] for line in lines] == ["answer-0", "answer-1", "answer-2", "answer-3"]


def test_the_same_tasks_as_ray_tasks_on_a_local_instance(tasks_file, models, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray-out"
    before = len(models.requests)
    done = batch(tasks_file, out, models, "--ray", "--workers", "1")
    check_outcome(out, done)
    assert len(models.requests) - before == 15


@pytest.mark.parametrize("text, said", [
    ("{\"id\": \"a\"\n", "Line 1 of .* is not JSON"),
    ("[1]\n", "is not a JSON object"),
    ("{\"id\": \"../x\", \"query\": \"q\", \"context_text\": \"c\"}\n", "needs an `id` usable as a file name"),
    ("{\"id\": \"a\", \"query\": \"q\", \"context_text\": \"c\"}\n" * 2, "Line 2 of .* repeats the id 'a'"),
    ("{\"id\": \"a\", \"query\": \" \", \"context_text\": \"c\"}\n", "needs a `query`"),
    ("{\"id\": \"a\", \"query\": \"q\"}\n", "needs either `context`"),
    ("{\"id\": \"a\", \"query\": \"q\", \"context\": 3}\n", "`context` must be a path or a list of paths"),
    ("\n", "has no tasks"),
])
def test_a_tasks_file_that_is_not_one_is_refused_before_anything_runs(tmp_path, text, said):
    path = tmp_path / "tasks.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RLMError, match=said):
        read_tasks(str(path))


def test_usage_errors_exit_2_without_a_run(tmp_path, models):
    path = tmp_path / "tasks.jsonl"
    path.write_text("{\"id\": \"a\"}\n", encoding="utf-8")
    done = batch(path, tmp_path / "out", models)
    assert done.returncode == 2 and "needs a `query`" in done.stderr
    assert not (tmp_path / "out").exists()


def test_on_a_terminal_the_progress_is_one_bar_redrawn_in_place():
    import io

    from rlm_kernel.batch.progress import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = ProgressBar(4, skipped=1, stream=screen)
    bar.done({"id": "a", "reason": "final"})
    bar.done({"id": "b", "reason": "error", "error": "boom"})
    bar.close()
    text = screen.getvalue()
    assert "1 of 4 tasks already have a final answer; skipping them\n" in text
    assert "\r[" + "#" * 22 + "." * 8 + "] 3/4 done, 1 answered, 1 without an answer, 1 skipped" in text
    assert "task a" not in text and text.endswith("\n")


def test_a_long_context_suite_runs_through_the_batch_and_is_scored(tmp_path):
    from suites_solvers import SolverResponder

    tasks = tmp_path / "sniah.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("RLM_")}
    wrote = subprocess.run([CLI, "bench", "suite", "--suite", "sniah", "--lengths", "4k", "--n", "2",
                            "--write-tasks", str(tasks)], env=env, capture_output=True, text=True, timeout=120)
    assert wrote.returncode == 0, wrote.stderr
    lines = [json.loads(line) for line in tasks.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == ["sniah-4K-0", "sniah-4K-1"] and lines[0]["metric"] == "needle"
    with ScriptedServer(SolverResponder("sniah")) as solver:
        done = batch(tasks, tmp_path / "out", solver, "--workers", "1")
    assert done.returncode == 0, done.stderr
    scored = subprocess.run([CLI, "bench", "suite", "--suite", "sniah", "--score-batch", str(tasks),
                             str(tmp_path / "out" / "results.jsonl"), "--json"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert scored.returncode == 0, scored.stderr
    summary = json.loads(scored.stdout)["lengths"][0]["systems"]["ours"]
    assert summary["score"] == 1.0 and summary["tasks"] == 2 and summary["errors"] == 0
