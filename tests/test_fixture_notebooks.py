"""The trajectory notebooks kept in tests/files/ (made by
tests/files/make_fixtures.py with the real engine against the scripted
server): a finished run, the same run with a pinned sub-call, a run with a
child run.

They pin the on-disk format: making them again must give the committed
files, so a change of what the engine writes fails here with a diff (when
the change is meant, run ``python tests/files/make_fixtures.py`` and commit
the new files). And they are input, as a notebook saved yesterday is:
``rlm-kernel run --resume`` continues them with their sub-calls replayed and
the pin honoured, every export format reads them, and the root model's
history is rebuilt from them.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_cli
from _helpers import Router, clean_env

from rlm_kernel.engine.runs.history import rebuild
from rlm_kernel.export import export_notebook
from rlm_kernel.testing.server import ScriptedServer, prompt_text

FILES = Path(__file__).resolve().parent / "files"
FIXTURES = ("finished.ipynb", "pinned.ipynb", "child_run.ipynb", "resumed.ipynb")
FAKE_KEY = "sk-test-fixtures-0000"
AGENT_ROLES = ("thought", "code", "answer")
# What the runs in the fixtures worked out (see make_fixtures.py).
VERDICTS = "['no', 'yes', 'no', 'no', 'no', 'yes']"
PINNED_VERDICTS = "['no', 'yes', 'no', 'yes', 'no', 'yes']"
PIN_NOTE = "The user edited and pinned the response of 1 sub-call (and rewrote the prompt of 1)"


def _read(name: str) -> Any:
    return nbformat.read(FILES / name, as_version=4)


def _rlm(cell: Any) -> dict[str, Any]:
    return cell.get("metadata", {}).get("rlm", {})


def _index(nb: Any, role: str, step: int) -> int:
    return next(i for i, c in enumerate(nb.cells) if _rlm(c).get("role") == role and _rlm(c).get("step") == step)


def _records(nb: Any) -> list[dict[str, Any]]:
    return [r for c in nb.cells for r in _rlm(c).get("subcalls", [])]


def _outputs(nb: Any, index: int) -> str:
    return "".join(o.get("text", "") for o in nb.cells[index].get("outputs", []) if o.get("output_type") == "stream")


def _files_state() -> dict[str, str]:
    return {p.name: hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(FILES.iterdir()) if p.is_file()}


# -- the format --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def remade(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures made again, now, by the same script."""
    out = tmp_path_factory.mktemp("remade")
    done = subprocess.run([sys.executable, str(FILES / "make_fixtures.py"), "--out", str(out)], env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_the_committed_fixture_is_what_the_engine_writes_today(remade: Path, name: str) -> None:
    committed = (FILES / name).read_text(encoding="utf-8")
    now = (remade / name).read_text(encoding="utf-8")
    if now != committed:
        diff = "".join(difflib.unified_diff(committed.splitlines(keepends=True), now.splitlines(keepends=True),
                                            f"tests/files/{name} (committed)", f"{name} (made now)"))
        pytest.fail(f"The trajectory notebook the engine writes has changed. If that is meant, run "
                    f"`python tests/files/make_fixtures.py` and commit tests/files/ (the diff is the format "
                    f"change; if a value changes on every run, make_fixtures.stabilise must fix it):\n{diff[:12000]}",
                    pytrace=False)


def test_the_fixtures_hold_what_they_are_kept_for() -> None:
    finished, pinned, child, resumed = (_read(name) for name in FIXTURES)
    for nb in (finished, pinned, child, resumed):
        nbformat.validate(nb)
        assert nb.metadata.rlm.runs[0]["reason"] == "final"
        assert nb.cells[0].source == "%rlm context reviews.txt"
    roles = [_rlm(c).get("role") for c in finished.cells]
    assert roles == ["context", "query", "thought", "code", "thought", "code", "thought", "answer"]
    batch = _records(finished)
    assert len(batch) == 6 and {r["batch"] for r in batch} == {"b1"}
    assert not any(r.get("pinned") for r in batch)
    # pinned.ipynb is finished.ipynb with one record pinned, as the kernel writes a pin
    [pin] = [r for r in _records(pinned) if r.get("pinned")]
    assert pin["response"] == "yes" and "left out by the courier" in pin["edited_prompt"]
    unpinned = {k: v for k, v in pin.items() if k not in ("pinned", "edited_prompt")}
    assert unpinned == {**next(r for r in batch if r["id"] == pin["id"]), "response": "yes"}
    assert [c for c in pinned.cells if not _rlm(c).get("subcalls")] == [
        c for c in finished.cells if not _rlm(c).get("subcalls")]
    # child_run.ipynb: the rlm_query record carries the child run's cells
    [record] = _records(child)
    assert record["kind"] == "rlm" and record["response"] == "2"
    assert record["child"]["depth"] == 1 and record["child"]["reason"] == "final"
    assert [_rlm(c).get("role") for c in record["child"]["cells"]] == ["query", "thought", "code", "thought", "answer"]
    # resumed.ipynb: finished.ipynb resumed after its first code cell; the old continuation below, superseded
    assert [(_rlm(c).get("role"), bool(_rlm(c).get("superseded"))) for c in resumed.cells] == [
        ("context", False), ("query", False), ("thought", False), ("code", False), ("thought", False), ("code", False),
        ("thought", False), ("answer", False), ("thought", True), ("code", True), ("thought", True), ("answer", True)]
    assert resumed.metadata.rlm.runs[-1]["reason"] == "final" and len(resumed.metadata.rlm.runs) == 2
    old = [c for c in resumed.cells if _rlm(c).get("superseded")]
    assert [c.source for c in old] == [c.source for c in finished.cells[4:]]
    assert old[1].outputs == finished.cells[5].outputs and old[1].execution_count == 2


# -- resuming them -----------------------------------------------------------------------


def _resume(tmp_path: Path, server: Any, name: str, root: str, *args: str,
            sub: Any = None) -> tuple[dict[str, Any], ScriptedServer, Any, list[str]]:
    """``rlm-kernel run --resume tests/files/NAME`` against a scripted server
    whose root model says ``root``; its JSON result, the server, the notebook
    it wrote and what the root model was told."""
    told: list[str] = []

    def root_model(body: dict[str, Any]) -> str:
        told.append(json.dumps(body["messages"]))
        return root

    srv = server(Router({"root-model": [root_model]}, sub=sub or (lambda prompt: "fresh")))
    before = _files_state()
    out = tmp_path / f"resumed-{name}"
    done = run_cli(["run", "--resume", str(FILES / name), *args, "--api-base", srv.url, "-o", str(out), "--json",
                    "--quiet"], tmp_path, env=clean_env(OPENAI_API_KEY=FAKE_KEY))
    assert done.returncode == 0, done.stderr
    assert _files_state() == before, "resuming wrote into tests/files/"
    saved = nbformat.read(out, as_version=4)
    nbformat.validate(saved)
    return json.loads(done.stdout), srv, saved, told


def test_resuming_the_finished_run_replays_its_sub_calls(tmp_path: Path, server: Any) -> None:
    result, srv, saved, told = _resume(tmp_path, server, "finished.ipynb", "FINAL_VAR(complaints)")
    assert result["reason"] == "final" and result["answer"] == "2"
    assert srv.calls("sub-model") == [], "recorded sub-calls were made again"
    assert (result["replayed_subcalls"], result["subcalls"]) == (6, 0)
    [history] = told
    assert "llm_query_batched" in history and VERDICTS in history  # the recorded code and its output
    step1 = _index(saved, "code", 1)
    assert VERDICTS in _outputs(saved, step1)
    assert [r.get("replayed") for r in _rlm(saved.cells[step1])["subcalls"]] == [True] * 6


def test_resuming_the_pinned_run_honours_the_pin(tmp_path: Path, server: Any) -> None:
    step2 = _index(_read("pinned.ipynb"), "code", 2)
    result, srv, saved, told = _resume(tmp_path, server, "pinned.ipynb", "FINAL_VAR(complaints)",
                                       "--from-cell", str(step2))
    assert srv.calls("sub-model") == []
    assert (result["replayed_subcalls"], result["subcalls"]) == (6, 0)
    # the re-run steps used the pinned "yes": one complaint more than the recorded run
    assert result["answer"] == "3"
    assert PINNED_VERDICTS in _outputs(saved, _index(saved, "code", 1))
    assert _outputs(saved, step2) == "3\n"
    [history] = told
    assert PIN_NOTE in history and PINNED_VERDICTS in history
    [pin] = [r for r in _records(saved) if r.get("pinned")]
    assert pin["response"] == "yes" and "left out by the courier" in pin["edited_prompt"]


def test_a_pin_holds_with_replay_off(tmp_path: Path, server: Any) -> None:
    step2 = _index(_read("pinned.ipynb"), "code", 2)
    result, srv, saved, _ = _resume(tmp_path, server, "pinned.ipynb", "FINAL_VAR(complaints)",
                                    "--from-cell", str(step2), "--no-replay", sub=lambda prompt: "yes")
    asked = [prompt_text(body) for body in srv.calls("sub-model")]
    assert len(asked) == 5, "with --no-replay every sub-call but the pinned one goes to the model"
    assert not any("courier" in prompt for prompt in asked)
    assert result["answer"] == "6"
    [pin] = [r for r in _records(saved) if r.get("pinned")]
    assert pin["response"] == "yes"


def test_resuming_the_run_with_a_child_replays_the_child_run(tmp_path: Path, server: Any) -> None:
    result, srv, saved, told = _resume(tmp_path, server, "child_run.ipynb", "FINAL_VAR(count)")
    assert srv.calls("child-model") == [] and srv.calls("sub-model") == []
    assert (result["replayed_subcalls"], result["subcalls"]) == (1, 0)
    assert result["answer"] == "2"
    assert "the child counted 2" in told[0]
    [record] = _records(saved)
    assert record["replayed"] is True and record["kind"] == "rlm" and record["response"] == "2"


# -- exporting them ----------------------------------------------------------------------


def _export(name: str, fmt: str, **kwargs: Any) -> str:
    buffer = io.StringIO()
    export_notebook(FILES / name, fmt, stdout=buffer, **kwargs)
    return buffer.getvalue()


def test_markdown_export_of_the_fixtures() -> None:
    text = _export("finished.ipynb", "markdown")
    assert text.startswith("# RLM trajectory: finished.ipynb\n")
    assert "## How many reviews complain about delivery?" in text
    assert "One sub-call per review, all at once." in text and "llm_query_batched" in text
    assert "### Final answer (the value of `complaints`)\n\n> 2" in text
    assert "edited by a person" not in text
    assert "1 edited by a person" in _export("pinned.ipynb", "markdown")
    child = _export("child_run.ipynb", "markdown")
    assert "(child run `000000000002`: 2 steps, ended `final`)" in child


def test_rlms_jsonl_export_of_the_fixtures() -> None:
    lines = [json.loads(line) for line in _export("finished.ipynb", "rlms-jsonl").splitlines()]
    assert [line["type"] for line in lines] == ["metadata", "iteration", "iteration", "iteration"]
    calls = [call for line in lines[1:] for block in line["code_blocks"] for call in block["result"]["rlm_calls"]]
    assert [call["response"] for call in calls] == ["no", "yes", "no", "no", "no", "yes"]
    assert lines[-1]["final_answer"] == "2"
    pinned = [json.loads(line) for line in _export("pinned.ipynb", "rlms-jsonl").splitlines()]
    pinned_calls = [call for line in pinned[1:] for block in line["code_blocks"] for call in block["result"]["rlm_calls"]]
    assert [call["response"] for call in pinned_calls] == ["no", "yes", "no", "yes", "no", "yes"]
    child = [json.loads(line) for line in _export("child_run.ipynb", "rlms-jsonl").splitlines()]
    [call] = [call for line in child[1:] for block in line["code_blocks"] for call in block["result"]["rlm_calls"]]
    assert call["response"] == "2"
    assert [it["iteration"] for it in call["metadata"]["iterations"]] == [1, 2]


def test_sft_export_of_the_fixtures() -> None:
    [example] = [json.loads(line) for line in _export("finished.ipynb", "sft").splitlines()]
    roles = [m["role"] for m in example["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
    assert "FINAL_VAR(complaints)" in example["messages"][-1]["content"]
    assert example["metadata"]["reason"] == "final" and example["metadata"]["steps"] == 3
    [pinned] = [json.loads(line) for line in _export("pinned.ipynb", "sft").splitlines()]
    assert PIN_NOTE in json.dumps(pinned["messages"])
    examples = [json.loads(line) for line in _export("child_run.ipynb", "sft", include_subcalls=True).splitlines()]
    assert [(e["metadata"]["kind"], e["metadata"]["depth"]) for e in examples] == [("run", 0), ("run", 1)]
    assert "Look for the two words." in json.dumps(examples[1]["messages"])


# -- rebuilding the root model's history from them ----------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_the_history_rebuilt_from_a_fixture_is_the_run_as_recorded(name: str) -> None:
    nb = _read(name)
    context = (FILES / "reviews.txt").read_text(encoding="utf-8")
    # a superseded old continuation (resumed.ipynb) is not part of the run's history
    agent = [c for c in nb.cells if _rlm(c).get("role") in ("thought", "code") and not _rlm(c).get("superseded")]
    upto = max(i for i, c in enumerate(nb.cells) if c in agent)
    rebuilt = rebuild(nb.cells, upto, context, sources=["reviews.txt"])
    assert rebuilt.run_id == nb.metadata.rlm.runs[0]["run_id"]
    assert rebuilt.query == nb.metadata.rlm.runs[0]["query"]
    assert rebuilt.next_step == nb.metadata.rlm.runs[0]["iterations"] + 1
    roles = [m["role"] for m in rebuilt.messages]
    assert roles == ["system", "user"] + ["assistant", "user"] * nb.metadata.rlm.runs[0]["iterations"]
    assert rebuilt.messages[-1]["content"] == "Continue."
    replies = [m["content"] for m in rebuilt.messages if m["role"] == "assistant"]
    for cell in agent:  # every recorded step is in the history, as the root model wrote it
        assert cell.source in "\n".join(replies), cell.source
    told = json.dumps(rebuilt.messages)
    assert (PIN_NOTE in told) is (name == "pinned.ipynb")
    if name == "child_run.ipynb":
        assert "the child counted 2" in told
    elif name == "resumed.ipynb":
        assert "recounted 2" in told and "Count the yes answers." not in told
    else:
        assert VERDICTS in told  # the recorded output, not yet re-run with the pin
