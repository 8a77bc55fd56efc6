"""``rlm-kernel import``: other libraries' runs opened as trajectory
notebooks. The logs are written by the libraries themselves against the
scripted models: ``rlms`` 0.1.3 (its ``RLMLogger``; a batch of sub-calls, an
error in a code block, a child run from ``rlm_query`` with a sub-call of its
own) and ``dspy.RLM`` 3.4.1 (dspy's own ``LocalInterpreter``), each in a
process of its own. Imported runs replay (no model call for their recorded
sub-calls) and continue with our engine; our ``rlms-jsonl`` export imports
back to the same steps and sub-calls."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_cli
from _helpers import clean_env, repl

from rlm_kernel.export.runs import read_runs
from rlm_kernel.testing.server import Script, ScriptedServer, prompt_text

FILES = Path(__file__).parent / "files"
CONTEXT = "the courier came\nthe courier left\na letter"
KEY = "sk-rlms-test-0123456789abcdef"

RLMS_RUN = r"""
import sys
from rlm import RLM
from rlm.logger import RLMLogger
url, folder, key = sys.argv[1:4]
kwargs = {"base_url": url, "api_key": key}
rlm = RLM(backend="openai", backend_kwargs={"model_name": "root-model", **kwargs}, other_backends=["openai"],
          other_backend_kwargs=[{"model_name": "sub-model", **kwargs}], max_iterations=6, max_depth=2,
          logger=RLMLogger(log_dir=folder))
result = rlm.completion(sys.stdin.read(), root_prompt="How many couriers?")
rlm.close()
print(result.response)
"""

DSPY_RUN = r"""
import json, sys
import dspy
from dspy.primitives.local_interpreter import LocalInterpreter
url, out = sys.argv[1:3]
lm = dspy.LM("openai/root-model", api_base=url, api_key="sk-x", cache=False)
sub = dspy.LM("openai/sub-model", api_base=url, api_key="sk-x", cache=False)
dspy.configure(lm=lm)
rlm = dspy.RLM("context, question -> answer", max_iters=5, sub_lm=sub, interpreter_factory=LocalInterpreter)
prediction = rlm(context=sys.stdin.read(), question="How many couriers?")
with open(out, "w") as handle:
    json.dump({"trajectory": prediction.trajectory, "answer": prediction.answer,
               "final_reasoning": prediction.final_reasoning}, handle)
"""


def rlms_script() -> Any:
    """The root run: a batch, an error, a child run (on child-model: its own queue), the answer."""
    root = Script(root=[
        repl("parts = llm_query_batched([f'Courier in part {i}?' for i in range(3)])\nprint(parts)",
             "I ask about each part."),
        repl("x = 1 / 0"),
        repl("count = rlm_query('Count the couriers in: the courier came, the courier left.', "
             "model='child-model')\nprint(count)"),
        repl("answer['content'] = f'{count} couriers'\nanswer['ready'] = True"),
    ], sub=lambda prompt: "yes" if "ourier" in prompt else "no")
    # the child's steps (its llm_query goes to its own model too: rlms routes only depth 1 to the sub-model)
    child = Script(root=[repl("seen = llm_query('Is there a courier?')\nanswer['content'] = '2'\n"
                              "answer['ready'] = True")], root_models=("child-model",))

    def respond(body: dict[str, Any]) -> Any:
        if body.get("model") != "child-model":
            return root(body)
        return "yes" if prompt_text(body) == "Is there a courier?" else child(body)

    return respond


@pytest.fixture(scope="module")
def rlms_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("rlms-logs")
    srv = ScriptedServer(rlms_script()).start()
    try:
        done = subprocess.run([sys.executable, "-c", RLMS_RUN, srv.url, str(folder), KEY], input=CONTEXT,
                              capture_output=True, text=True, timeout=180, env=clean_env())
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith("2 couriers")
    finally:
        srv.stop()
    [log] = folder.glob("*.jsonl")
    yield log


def cells_of(notebook: Path) -> list[Any]:
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    return nb.cells


def test_an_rlms_log_opens_as_a_trajectory_notebook(rlms_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.ipynb"
    done = run_cli(["import", str(rlms_log), "-o", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "4 steps, 5 sub-calls, ended final" in done.stderr
    nb = nbformat.read(out, as_version=4)
    cells = cells_of(out)
    record = nb.metadata["rlm"]["runs"][0]
    assert record["imported_from"]["library"] == "rlms" and record["reason"] == "final"
    assert record["query"] == "How many couriers?" and record["limits"]["max_depth"] == 1
    assert record["usage"]["openai/sub-model"]["calls"] == 3
    query = next(c for c in cells if c.metadata.get("rlm", {}).get("role") == "query")
    assert query.source.startswith("%%rlm --model openai/root-model --sub-model openai/sub-model")
    code = [c for c in cells if c.metadata.get("rlm", {}).get("role") == "code"]
    assert [c.metadata["rlm"]["step"] for c in code] == [1, 2, 3, 4]
    thought = next(c for c in cells if c.metadata.get("rlm", {}).get("role") == "thought")
    assert thought.source == "I ask about each part." and thought.metadata["rlm"]["step"] == 1

    batch = code[0].metadata["rlm"]["subcalls"]
    assert [r["response"] for r in batch] == ["yes"] * 3
    assert batch[0]["model"] == "openai/sub-model" and batch[0]["prompt_preview"] == "Courier in part 0?"
    assert code[0].outputs[0]["text"] == "['yes', 'yes', 'yes']\n"

    assert code[1].metadata["rlm"]["status"] == "error"
    assert "ZeroDivisionError" in code[1].outputs[0]["text"] and code[1].outputs[0]["name"] == "stderr"

    [child_call] = code[2].metadata["rlm"]["subcalls"]
    assert child_call["kind"] == "rlm" and child_call["response"] == "2"
    assert child_call["model"] == "openai/child-model"
    child_cells = child_call["child"]["cells"]
    [child_code] = [c for c in child_cells if c["metadata"]["rlm"].get("role") == "code"]
    [seen] = child_code["metadata"]["rlm"]["subcalls"]
    assert seen["prompt_preview"] == "Is there a courier?" and seen["response"] == "yes"
    assert child_cells[-1]["metadata"]["rlm"]["role"] == "answer"

    answer = cells[-1]
    assert answer.metadata["rlm"]["role"] == "answer" and "2 couriers" in answer.source
    # the runs panel and the exports read it as any run of ours
    [run] = read_runs(nb, str(out))
    assert len(run.steps) == 4 and len(run.children()) == 1 and run.answer == "2 couriers"
    text = out.read_text()
    assert KEY not in text and "127.0.0.1" not in text  # the library's client settings are not copied


def test_an_imported_rlms_run_replays_and_continues_with_our_engine(rlms_log: Path, server: Any,
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "run.ipynb"
    assert run_cli(["import", str(rlms_log), "-o", str(out)], tmp_path).returncode == 0
    (tmp_path / "context.txt").write_text(CONTEXT)
    srv = server(root=["FINAL(2 couriers, checked again)"], sub=lambda prompt: "fresh")
    done = run_cli(["run", "--resume", str(out), "--context", "context.txt", "--api-base",
                    srv.url, "-o", "again.ipynb", "--json", "--quiet"], tmp_path,
                   env=clean_env(OPENAI_API_KEY="sk-test"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["reason"] == "final" and result["answer"] == "2 couriers, checked again"
    assert result["replayed_subcalls"] == 4 and result["subcalls"] == 0  # the batch and the child run, replayed
    assert srv.calls("sub-model") == [] and srv.calls("child-model") == [] and len(srv.calls("root-model")) == 1
    again = cells_of(tmp_path / "again.ipynb")
    rerun = [c for c in again if "1 / 0" in c.source]
    assert rerun and rerun[0].metadata["rlm"]["status"] == "error"


def test_an_imported_rlms_run_continues_in_the_rlm_kernel(rlms_log: Path, server: Any, tmp_path: Path) -> None:
    """The imported notebook run in the RLM kernel as a person would (nbclient,
    no page: the kernel reads the saved file), then ``%rlm continue`` from
    step 3: the recorded steps replay with their sub-calls, and the root
    model, asked again, is given the history up to step 3."""
    from nbclient import NotebookClient

    out = tmp_path / "run.ipynb"
    assert run_cli(["import", str(rlms_log), "-o", str(out)], tmp_path).returncode == 0
    (tmp_path / "context.txt").write_text(CONTEXT)
    nb = nbformat.read(out, as_version=4)
    step3 = next(c for c in nb.cells if c.metadata.get("rlm", {}).get("role") == "code"
                 and c.metadata["rlm"].get("step") == 3)
    nb.cells.insert(0, nbformat.v4.new_code_cell("context = open('context.txt').read()"))
    nb.cells.append(nbformat.v4.new_code_cell(f"%rlm continue --from {step3.id}"))
    nbformat.write(nb, out)  # the kernel reads the saved cells (and their recorded sub-calls)
    srv = server(root=["FINAL(2 couriers, continued)"], sub=lambda prompt: "fresh")
    env = clean_env(OPENAI_API_KEY="sk-test", RLM_API_BASE=srv.url, JPY_SESSION_NAME=str(out))
    client = NotebookClient(nb, kernel_name="rlm", timeout=180, allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)
    shown = json.dumps(nb.cells[-1].outputs)
    assert "2 couriers, continued" in shown, shown
    # the recorded steps replayed (no sub-model, no child model); one root call, continuing after step 3
    assert srv.calls("sub-model") == [] and srv.calls("child-model") == [], srv.requests
    [asked] = srv.calls("root-model")
    history = json.dumps(asked["messages"])
    assert "Count the couriers in" in history and "answer['content']" not in history  # steps 1-3, not step 4
    assert KEY not in out.read_text()


def test_a_dspy_rlm_trajectory_opens_as_a_trajectory_notebook(server: Any, tmp_path: Path) -> None:
    def step(reasoning: str, code: str) -> str:  # dspy's chat adapter format
        return f"[[ ## reasoning ## ]]\n{reasoning}\n\n[[ ## code ## ]]\n```python\n{code}\n```\n\n[[ ## completed ## ]]"

    srv = server(root=[
        step("Ask about each line.", "found = llm_query_batched([f'Courier? {l}' for l in context.splitlines()])\n"
                                     "print(found)"),
        step("A mistake.", "print(1 / 0)"),
        step("Count and submit.", "SUBMIT(answer=str(sum(f == 'yes' for f in found)))"),
    ], sub=lambda prompt: "yes" if "courier" in prompt else "no")
    dump = tmp_path / "trajectory.json"
    done = subprocess.run([sys.executable, "-c", DSPY_RUN, srv.url, str(dump)], input=CONTEXT, capture_output=True,
                          text=True, timeout=180, env=clean_env(DSPY_CACHEDIR=str(tmp_path / "dspy-cache")))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "dspy.ipynb"
    done = run_cli(["import", str(dump), "-o", str(out), "--query", "How many couriers?", "--model",
                    "openai/root-model", "--sub-model", "openai/sub-model"], tmp_path)
    assert done.returncode == 0, done.stderr
    cells = cells_of(out)
    thoughts = [c.source for c in cells if c.metadata.get("rlm", {}).get("role") == "thought"]
    assert thoughts == ["Ask about each line.", "A mistake.", "Count and submit."]
    code = [c for c in cells if c.metadata.get("rlm", {}).get("role") == "code"]
    assert "llm_query_batched" in code[0].source and code[0].outputs[0]["text"] == "['yes', 'yes', 'no']"
    assert code[1].metadata["rlm"]["status"] == "error" and "ZeroDivisionError" in code[1].outputs[0]["text"]
    assert cells[-1].metadata["rlm"]["role"] == "answer" and "> 2" in cells[-1].source
    assert "--model openai/root-model" in cells[1].source and "How many couriers?" in cells[1].source


def test_our_rlms_jsonl_export_imports_back_to_the_same_steps_and_subcalls(tmp_path: Path) -> None:
    original = FILES / "child_run.ipynb"
    log = tmp_path / "run.jsonl"
    assert run_cli(["export", str(original), "--format", "rlms-jsonl", "-o", str(log)], tmp_path).returncode == 0
    out = tmp_path / "back.ipynb"
    done = run_cli(["import", str(log), "-o", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr
    [before] = read_runs(nbformat.read(original, as_version=4), str(original))
    [after] = read_runs(nbformat.read(out, as_version=4), str(out))
    assert after.query == before.query and after.model == before.model and after.answer == before.answer
    assert [[c.source for c in s.code_cells] for s in after.steps] == [[c.source for c in s.code_cells]
                                                                        for s in before.steps]

    def calls(run: Any) -> list[tuple[Any, ...]]:
        return [(r.get("kind"), r["model"], r["prompt_preview"], r["response"], r["prompt_hash"]) for _, r in
                run.subcalls()]

    assert calls(after) == calls(before)
    [child_before], [child_after] = before.children(), after.children()
    assert [[c.source for c in s.code_cells] for s in child_after.steps] == [
        [c.source for c in s.code_cells] for s in child_before.steps]


@pytest.mark.parametrize("content, sentence", [
    ("not json at all\n", "is not a dspy.RLM trajectory: it is not JSON."),
    ('{"type": "metadata", "root_model": "m"}\n', "is not an rlms log: it needs a metadata line and iteration lines."),
    ('[{"reasoning": "r"}]', "is not a dspy.RLM trajectory: it needs a list of steps"),
])
def test_a_file_that_is_not_a_run_is_refused_in_one_sentence(tmp_path: Path, content: str, sentence: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    done = run_cli(["import", str(bad), "-o", str(tmp_path / "x.ipynb")], tmp_path)
    assert done.returncode == 2 and sentence in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.ipynb").exists()
    missing = run_cli(["import", "nope.jsonl"], tmp_path)
    assert missing.returncode == 2 and "No such file: 'nope.jsonl'." in missing.stderr
