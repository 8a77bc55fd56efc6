"""Exports of trajectory notebooks (``rlm-kernel export``): the official
``rlms`` log format, SFT chat JSONL and a markdown report. The notebooks
are made by real runs (``RLM.completion`` against the scripted server)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _helpers import ROOT, SUB, Router, repl

from rlm_kernel import RLM, cli
from rlm_kernel.export import ExportError, export_notebook
from rlm_kernel.testing.server import Script, ScriptedServer

CONTEXT = "alpha beta gamma " * 20
QUERY = "How many vowels are there?"
FULL_ROOT = [
    repl("print(len(context))", prose="First I look at the size."),
    repl("answers = llm_query_batched([f'item {i}' for i in range(5)])\nprint(answers)",
         prose="Now every item at once."),
    repl("print('x' * 5000)\nundefined_name", prose="A long output, then a mistake."),
    repl("r = rlm_query('count the vowels in banana', model='openai/child-model')\nprint('child said', r)",
         prose="A child run counts."),
    "Done.\nFINAL_VAR(r)",
]
CHILD_ROOT = [repl("n = sum(c in 'aeiou' for c in context)\nprint(n)", prose="Child looks."), repl("FINAL(str(n))")]


def _complete(responder: Any, path: Path, context: str = CONTEXT, query: str = QUERY, **kwargs: Any) -> tuple[Any, dict]:
    srv = ScriptedServer(responder).start()
    try:
        rlm = RLM(model=ROOT, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01, **kwargs)
        result = rlm.completion(context, query, output=path)
        requests = {m: srv.calls(m) for m in ("root-model", "child-model", "sub-model")}
    finally:
        srv.stop()
    return result, requests


def _role(cell: Any) -> str | None:
    return (cell.get("metadata") or {}).get("rlm", {}).get("role")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Real trajectory notebooks: a full run (batched sub-calls, an error, a
    long output, an rlm_query child, FINAL_VAR), a run without an answer, and
    a notebook with two runs and cells a person added (in a file written by
    rlm-kernel, and shaped as JupyterLab's live view leaves it)."""
    folder = tmp_path_factory.mktemp("export")
    made: dict[str, Any] = {"folder": folder}
    full, made["full_requests"] = _complete(
        Router({"root-model": list(FULL_ROOT), "child-model": list(CHILD_ROOT)}), folder / "full.ipynb")
    assert full.reason == "final" and full.answer == "9"
    made["full"] = folder / "full.ipynb"

    none, _ = _complete(Script(root=[repl("x = 1", prose="Set x."), repl("print(x)", prose="Print x.")]),
                        folder / "noanswer.ipynb", max_iterations=2)
    assert none.reason == "max_iterations"
    made["noanswer"] = folder / "noanswer.ipynb"

    first, made["two_requests"] = _complete(
        Script(root=[repl("a = len(context)\nprint(a)", prose="Measure."), repl("print(a * 2)", prose="Double."),
                     "FINAL(doubled)"]), folder / "a.ipynb", context="short context", query="Double the length?")
    second, _ = _complete(Script(root=[repl("print('b')", prose="Try B.")]), folder / "b.ipynb",
                          context="other", query="Second question?", max_iterations=1)
    assert (first.reason, second.reason) == ("final", "max_iterations")
    a, b = first.notebook, second.notebook
    step_two = next(i for i, c in enumerate(a.cells) if (c.metadata.get("rlm") or {}).get("step") == 2)
    inside = nbformat.v4.new_code_cell("hint = 'the length is short'\nprint(hint)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="the length is short\n")], execution_count=7)
    between = nbformat.v4.new_markdown_cell("A person's note between the two runs.")
    nb = copy.deepcopy(a)
    nb.cells = [*a.cells[:step_two], inside, *a.cells[step_two:], between, *b.cells]
    nb.metadata.rlm.runs = [*a.metadata.rlm.runs, *b.metadata.rlm.runs]
    made["two"] = folder / "two.ipynb"
    nbformat.write(nb, made["two"])
    made["two_ids"] = (first.run_id, second.run_id)

    live = copy.deepcopy(nb)
    del live.metadata["rlm"]
    for cell in live.cells:
        if _role(cell) == "query":
            cell.metadata = {}
        elif _role(cell) == "context":
            description = a.metadata.rlm.runs[0]["context"]["description"] if cell is live.cells[0] else (
                b.metadata.rlm.runs[0]["context"]["description"])
            cell.clear()
            cell.update(nbformat.v4.new_code_cell("%rlm context data.txt", execution_count=1, outputs=[
                nbformat.v4.new_output("stream", name="stdout", text=f"{description} (0.01 s)\n")]))
    made["live"] = folder / "live.ipynb"
    nbformat.write(live, made["live"])
    return made


def _export(path: Path, fmt: str, out: Path | None = None, **kwargs: Any) -> str:
    import io

    buffer = io.StringIO()
    export_notebook(path, fmt, out, stdout=buffer, **kwargs)
    return out.read_text(encoding="utf-8") if out else buffer.getvalue()


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


# -- rlms-jsonl -----------------------------------------------------------------------


# Keys of a sub-call the official visualizer reads and the official library does not write.
VISUALIZER_EXTRAS = ("prompt_tokens", "completion_tokens")
# ... and the key only ours writes, for `rlm-kernel import` (a re-run of an exported run replays by it)
IMPORT_EXTRAS = ("prompt_hash",)


def test_rlms_jsonl_round_trips_through_the_libraries_own_types(made):
    from rlm.core.types import CodeBlock, REPLResult, RLMChatCompletion, RLMIteration, RLMMetadata

    entries = _lines(_export(made["full"], "rlms-jsonl"))
    head, iterations = entries[0], entries[1:]
    assert head["type"] == "metadata"
    fields = {k: v for k, v in head.items() if k not in ("type", "timestamp")}
    assert RLMMetadata(**fields).to_dict() == fields

    def rebuilt_call(call: dict[str, Any]) -> dict[str, Any]:
        again = RLMChatCompletion.from_dict(call).to_dict()
        # a superset: the library keeps every key but the token counts its visualizer reads
        assert again == {k: v for k, v in call.items() if k not in VISUALIZER_EXTRAS + IMPORT_EXTRAS}
        for child in (call.get("metadata") or {}).get("iterations", []):
            assert rebuilt_iteration(child) == child
        return again

    def rebuilt_iteration(entry: dict[str, Any]) -> dict[str, Any]:
        blocks = [CodeBlock(b["code"], REPLResult(
            b["result"]["stdout"], b["result"]["stderr"], b["result"]["locals"], b["result"]["execution_time"],
            [RLMChatCompletion.from_dict(rebuilt_call(c)) for c in b["result"]["rlm_calls"]],
            b["result"]["final_answer"])) for b in entry["code_blocks"]]
        again = RLMIteration(entry["prompt"], entry["response"], blocks, entry["final_answer"],
                             entry["iteration_time"]).to_dict()
        for block, ours in zip(again["code_blocks"], entry["code_blocks"], strict=True):
            for call, our_call in zip(block["result"]["rlm_calls"], ours["result"]["rlm_calls"], strict=True):
                call.update({k: our_call[k] for k in VISUALIZER_EXTRAS + IMPORT_EXTRAS})
        return {"type": "iteration", "iteration": entry["iteration"], "timestamp": entry["timestamp"], **again}

    assert len(iterations) == 5
    for entry in iterations:
        assert rebuilt_iteration(entry) == entry


def _shape(value: Any) -> Any:
    """The key structure and value types of a log entry (lists by the union of their items)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        shapes = [_shape(item) for item in value]
        merged: dict[str, Any] = {}
        for shape in shapes:
            if isinstance(shape, dict):
                _merge(merged, shape)
        return [merged] if merged else sorted({s for s in shapes if isinstance(s, str)})
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def _merge(into: dict[str, Any], shape: dict[str, Any]) -> None:
    for key, value in shape.items():
        old = into.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            _merge(old, value)
        elif isinstance(old, list) and isinstance(value, list) and old and value and isinstance(old[0], dict) \
                and isinstance(value[0], dict):
            _merge(old[0], value[0])
        elif not old:
            into[key] = value


def _rlms_log(tmp_path: Path) -> list[dict[str, Any]]:
    """A real log from the official library, run against the scripted server."""
    from rlm import RLM as OfficialRLM
    from rlm.logger import RLMLogger

    code = ("r = llm_query('hello')\nrs = llm_query_batched(['a', 'b'])\nprint(r, rs)\n"
            "c = rlm_query('count the vowels in banana', model='child-model')\nprint(c)\n"
            "answer['content'] = c\nanswer['ready'] = True")
    child = "```repl\nanswer['content'] = '3'\nanswer['ready'] = True\n```"
    router = Router({"root-model": ["Look.\n```repl\nprint(len(context))\n```", f"Ask.\n```repl\n{code}\n```"],
                     "child-model": [child]})
    srv = ScriptedServer(router).start()
    kwargs = {"base_url": srv.url, "api_key": "not-a-real-key-0000"}
    try:
        official = OfficialRLM(
            backend="openai", backend_kwargs={"model_name": "root-model", **kwargs}, other_backends=["openai"],
            other_backend_kwargs=[{"model_name": "sub-model", **kwargs}], max_iterations=4, max_depth=2,
            logger=RLMLogger(log_dir=str(tmp_path)),
        )
        try:
            assert official.completion("some context", root_prompt="What is it?").response == "3"
        finally:
            official.close()
    finally:
        srv.stop()
    (log,) = tmp_path.glob("*.jsonl")
    return _lines(log.read_text())


def test_rlms_jsonl_has_the_key_structure_of_a_real_rlms_log(made, tmp_path):
    theirs = _rlms_log(tmp_path)
    ours = _lines(_export(made["full"], "rlms-jsonl"))
    assert _shape(ours[0]).keys() == _shape(theirs[0]).keys()
    assert {k: v for k, v in _shape(ours[0]).items() if k not in ("backend_kwargs", "environment_kwargs")} == {
        k: v for k, v in _shape(theirs[0]).items() if k not in ("backend_kwargs", "environment_kwargs")}
    their_iteration, our_iteration = _shape(theirs[1:]), _shape(ours[1:])
    assert our_iteration[0].keys() == their_iteration[0].keys()
    assert our_iteration[0]["prompt"] == their_iteration[0]["prompt"] == [{"role": "str", "content": "str"}]
    their_block, our_block = their_iteration[0]["code_blocks"][0], our_iteration[0]["code_blocks"][0]
    assert our_block.keys() == their_block.keys()
    assert our_block["result"].keys() == their_block["result"].keys()
    their_call, our_call = their_block["result"]["rlm_calls"][0], our_block["result"]["rlm_calls"][0]
    # both hold an rlm_query child's trajectory under "metadata"; ours adds the visualizer's token counts
    assert their_call.keys() == {"root_model", "prompt", "response", "usage_summary", "execution_time", "metadata"}
    assert our_call.keys() == their_call.keys() | set(VISUALIZER_EXTRAS) | set(IMPORT_EXTRAS)
    assert our_call["metadata"].keys() == their_call["metadata"].keys() == {"run_metadata", "iterations"}
    assert our_call["metadata"]["run_metadata"].keys() == their_call["metadata"]["run_metadata"].keys()
    assert our_call["metadata"]["iterations"][0].keys() == their_call["metadata"]["iterations"][0].keys()
    their_usage = next(iter(their_call["usage_summary"]["model_usage_summaries"].values()))
    our_usage = next(iter(our_call["usage_summary"]["model_usage_summaries"].values()))
    assert our_usage == their_usage == {"total_calls": "number", "total_input_tokens": "number",
                                        "total_output_tokens": "number"}


def _check_visualizer_types(entry: dict[str, Any]) -> None:
    """What the official visualizer (visualizer/src/lib/types.ts and the
    components reading it) takes for granted about an iteration line."""
    assert isinstance(entry["iteration"], int) and isinstance(entry["timestamp"], str)
    assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in entry["prompt"])
    assert isinstance(entry["response"], str)
    assert entry["final_answer"] is None or isinstance(entry["final_answer"], str)
    assert entry["iteration_time"] is None or isinstance(entry["iteration_time"], (int, float))
    for block in entry["code_blocks"]:
        result = block["result"]
        assert isinstance(block["code"], str) and isinstance(result["stdout"], str)
        assert isinstance(result["stderr"], str) and isinstance(result["locals"], dict)
        assert isinstance(result["execution_time"], (int, float))
        for call in result["rlm_calls"]:
            assert isinstance(call["response"], str) and isinstance(call["execution_time"], (int, float))
            # ExecutionPanel.tsx shows "{prompt_tokens} in", "{completion_tokens} out" on each sub-call
            assert isinstance(call["prompt_tokens"], int) and isinstance(call["completion_tokens"], int)
            assert isinstance(call["prompt"], (str, dict))
            for child in (call.get("metadata") or {}).get("iterations", []):
                _check_visualizer_types(child)


def test_rlms_jsonl_holds_what_the_root_model_saw_and_did(made):
    entries = _lines(_export(made["full"], "rlms-jsonl"))
    head, iterations = entries[0], entries[1:]
    assert head["root_model"] == ROOT and head["max_iterations"] == 30 and head["max_depth"] == 2
    for entry in iterations:
        _check_visualizer_types(entry)
    # each iteration's prompt is the message list the root model was sent
    sent = made["full_requests"]["root-model"]
    assert [e["prompt"] for e in iterations] == [body["messages"] for body in sent]
    assert [e["response"] for e in iterations] == FULL_ROOT
    assert [e["final_answer"] for e in iterations] == [None, None, None, None, "9"]
    batch = iterations[1]["code_blocks"][0]["result"]
    assert [c["prompt"] for c in batch["rlm_calls"]] == [f"item {i}" for i in range(5)]
    assert [c["response"] for c in batch["rlm_calls"]] == [f"echo: item {i}" for i in range(5)]
    records = next(c for c in nbformat.read(made["full"], as_version=4).cells
                   if (c.metadata.get("rlm") or {}).get("subcalls"))["metadata"]["rlm"]["subcalls"]
    assert [(c["prompt_tokens"], c["completion_tokens"]) for c in batch["rlm_calls"]] == [
        (r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]) for r in records]
    assert all(c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 for c in batch["rlm_calls"])
    mistake = iterations[2]["code_blocks"][0]["result"]
    assert mistake["stdout"].startswith("x" * 5000) and "NameError" in mistake["stderr"]
    (child_call,) = iterations[3]["code_blocks"][0]["result"]["rlm_calls"]
    assert (child_call["root_model"], child_call["response"]) == ("openai/child-model", "9")
    child_usage = child_call["usage_summary"]["model_usage_summaries"].values()
    assert child_call["prompt_tokens"] == sum(u["total_input_tokens"] for u in child_usage) > 0
    assert child_call["completion_tokens"] == sum(u["total_output_tokens"] for u in child_usage) > 0
    child = child_call["metadata"]["iterations"]
    assert [e["prompt"] for e in child] == [b["messages"] for b in made["full_requests"]["child-model"]]
    assert child[-1]["final_answer"] == "9"


def test_rlms_jsonl_of_a_run_without_an_answer(made):
    entries = _lines(_export(made["noanswer"], "rlms-jsonl"))
    assert len(entries) == 3 and all(e["final_answer"] is None for e in entries[1:])
    assert entries[2]["code_blocks"][0]["result"]["stdout"] == "1\n"


def test_rlms_jsonl_writes_one_file_per_run(made, tmp_path):
    out = tmp_path / "log.jsonl"
    assert cli.main(["export", str(made["two"]), "--format", "rlms-jsonl", "-o", str(out)]) == 0
    first, second = made["two_ids"]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted([f"log.{first}.jsonl", f"log.{second}.jsonl"])
    assert len(_lines((tmp_path / f"log.{first}.jsonl").read_text())) == 1 + 3
    one = _lines(_export(made["two"], "rlms-jsonl", run_id=second))
    assert one[0]["environment_kwargs"]["run_id"] == second and len(one) == 2


# -- sft ---------------------------------------------------------------------------------


def test_sft_run_example_is_the_conversation_the_root_model_had(made):
    (example,) = _lines(_export(made["full"], "sft"))
    last_request = made["full_requests"]["root-model"][-1]["messages"]
    assert example["messages"] == [*last_request, {"role": "assistant", "content": FULL_ROOT[-1]}]
    meta = example["metadata"]
    assert (meta["kind"], meta["reason"], meta["notebook"], meta["steps"]) == ("run", "final", "full.ipynb", 5)
    assert meta["first_message"] == "exact" and meta["answer_var"] == "r"


def test_sft_include_subcalls_adds_each_sub_call_and_the_child_run(made):
    examples = _lines(_export(made["full"], "sft", include_subcalls=True))
    kinds = [e["metadata"]["kind"] for e in examples]
    assert kinds == ["run"] + ["subcall"] * 5 + ["run"]
    subcalls = [e for e in examples if e["metadata"]["kind"] == "subcall"]
    sent = sorted(b["messages"][-1]["content"] for b in made["full_requests"]["sub-model"])
    assert sorted(e["messages"][0]["content"] for e in subcalls) == sent
    assert all(e["messages"][1]["content"] == "echo: " + e["messages"][0]["content"] for e in subcalls)
    child = examples[-1]
    assert child["metadata"]["depth"] == 1 and child["metadata"]["model"] == "openai/child-model"
    child_last = made["full_requests"]["child-model"][-1]["messages"]
    assert child["messages"] == [*child_last, {"role": "assistant", "content": CHILD_ROOT[-1]}]


def test_sft_sub_calls_with_only_a_preview_are_left_out(made, tmp_path, capsys):
    nb = nbformat.read(made["full"], as_version=4)
    cell = next(c for c in nb.cells if (c.metadata.get("rlm") or {}).get("subcalls"))
    cell.metadata.rlm.subcalls[0]["prompt_chars"] = 9_000  # as a long prompt is kept: preview and length
    cell.metadata.rlm.subcalls[1].update(response="a person's better answer", pinned=True)
    path = tmp_path / "edited.ipynb"
    nbformat.write(nb, path)
    out = tmp_path / "sft.jsonl"
    assert cli.main(["export", str(path), "--format", "sft", "--include-subcalls", "-o", str(out)]) == 0
    subcalls = [e for e in _lines(out.read_text()) if e["metadata"]["kind"] == "subcall"]
    assert [e["messages"][0]["content"] for e in subcalls] == [f"item {i}" for i in range(1, 5)]
    assert subcalls[0]["messages"][1]["content"] == "a person's better answer" and subcalls[0]["metadata"]["pinned"]
    assert "left out 1 sub-call whose whole prompt" in capsys.readouterr().err


def test_sft_filters(made, tmp_path):
    assert _export(made["noanswer"], "sft", only_final=True) == ""
    assert len(_lines(_export(made["noanswer"], "sft"))) == 1
    two = _lines(_export(made["two"], "sft", only_final=True))
    assert [e["metadata"]["run_id"] for e in two] == [made["two_ids"][0]]
    # approvals: every code cell of every step approved, or the run is left out
    assert _export(made["full"], "sft", only_approved=True) == ""
    nb = nbformat.read(made["full"], as_version=4)
    code = [c for c in nb.cells if _role(c) == "code"]
    for cell in code:
        cell.metadata.rlm["approved"] = True
    approved = tmp_path / "approved.ipynb"
    nbformat.write(nb, approved)
    (example,) = _lines(_export(approved, "sft", only_approved=True))
    assert example["metadata"]["approved"] is True
    code[2].metadata.rlm["approved"] = False
    nbformat.write(nb, approved)
    assert _export(approved, "sft", only_approved=True) == ""


def test_sft_of_two_runs_honours_the_cell_a_person_added(made):
    first, second = _lines(_export(made["two"], "sft"))
    text = json.dumps(first["messages"])
    assert "The user stepped in and ran this cell" in text and "the length is short" in text
    assert "between the two runs" not in json.dumps(second["messages"])
    sent = made["two_requests"]["root-model"]
    assert first["messages"][:2] == sent[0]["messages"][:2]
    assert second["messages"][1]["content"].endswith("Query: Second question?\n\nStart by writing code to look at "
                                                     "`context`; you have not seen any of it yet.")


def test_a_notebook_left_by_the_live_view_exports_the_same_runs(made):
    recorded = _lines(_export(made["two"], "sft"))
    live = _lines(_export(made["live"], "sft"))
    assert [e["messages"] for e in live] == [e["messages"] for e in recorded]
    assert [e["metadata"]["first_message"] for e in live] == ["reconstructed", "reconstructed"]
    assert [e["metadata"]["reason"] for e in live] == ["final", "max_iterations"]


# -- markdown ----------------------------------------------------------------------------


def test_markdown_report(made):
    text = _export(made["full"], "markdown")
    nb = nbformat.read(made["full"], as_version=4)
    usage = nb.metadata.rlm.runs[0]["usage"]
    assert text.startswith("# RLM trajectory: full.ipynb")
    assert "> " + QUERY in text and "`openai/root-model`" in text and "`openai/sub-model`" in text
    assert [f"### Step {n}" in text for n in range(1, 6)] == [True] * 5
    assert "First I look at the size." in text and "```python\nprint(len(context))\n```" in text
    assert "characters omitted" in text and "x" * 6000 not in text and "NameError" in text
    assert "**Sub-calls:** 5 (llm_query ×5; `openai/sub-model`" in text and "- ... and 2 more" in text
    assert "“item 0” → “echo: item 0”" in text
    assert "rlm_query ×1" in text and "ended `final`)" in text
    assert "### Final answer (the value of `r`)\n\n> 9" in text
    root = usage["openai/root-model"]
    assert f"| `openai/root-model` | 5 | {root['prompt_tokens']:,} | {root['completion_tokens']:,} |" in text
    assert "**Total:** 5 steps, 6 sub-calls" in text


def test_markdown_of_two_runs_and_a_run_without_an_answer(made):
    text = _export(made["two"], "markdown")
    assert "## Run 1: Double the length?" in text and "## Run 2: Second question?" in text
    assert "*A person added a cell:*" in text and "the length is short" in text
    assert "### No final answer\n\nThe run ended with reason `max_iterations`" in text
    assert "## All runs" in text
    assert "**Total:** 1 step, 0 sub-calls," in text  # the second run: one step, counted in the singular
    assert "1 steps" not in text and "1 sub-calls" not in text


def test_a_run_that_failed_before_any_reply(tmp_path):
    from rlm_kernel.testing.server import Reply

    result, _ = _complete(Script(root=[Reply(status=400, text="bad request")] * 3), tmp_path / "failed.ipynb",
                          max_retries=0)
    assert result.reason == "error"
    path = tmp_path / "failed.ipynb"
    entries = _lines(_export(path, "rlms-jsonl"))
    assert [e["type"] for e in entries] == ["metadata"]
    assert _export(path, "sft") == ""
    text = _export(path, "markdown")
    assert "### No final answer\n\nThe run ended with reason `error`: The root model call failed" in text


# -- bad input and secrets -----------------------------------------------------------------


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.ipynb", "No such notebook"),
    (lambda d: (d / "notes.txt").write_text("hello") and d / "notes.txt", "is not a Jupyter notebook"),
    (lambda d: (d / "list.ipynb").write_text("[1, 2]") and d / "list.ipynb", "is not a Jupyter notebook"),
    (lambda d: d, "is a directory"),
    (lambda d: nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]),
                              d / "plain.ipynb") or d / "plain.ipynb", "holds no RLM runs"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, capsys, make, message):
    path = make(tmp_path)
    assert cli.main(["export", str(path), "--format", "sft"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlm-kernel: error: ") and message in err and err.count("\n") == 1


def test_unknown_format_and_misused_options(made, capsys):
    assert cli.main(["export", str(made["full"]), "--format", "html"]) == 2
    assert "Unknown export format 'html'; use one of: rlms-jsonl, sft, markdown." in capsys.readouterr().err
    assert cli.main(["export", str(made["full"]), "--format", "markdown", "--include-subcalls"]) == 2
    assert "applies only to --format sft" in capsys.readouterr().err
    assert cli.main(["export", str(made["two"]), "--format", "rlms-jsonl"]) == 2
    assert "one file per run" in capsys.readouterr().err
    assert cli.main(["export", str(made["full"]), "--run", "nope"]) == 2
    assert "No run 'nope'" in capsys.readouterr().err
    with pytest.raises(ExportError, match="passes the filters"):
        _export(made["noanswer"], "markdown", only_final=True)


def test_the_command_line_entry_point(made, tmp_path):
    command = [sys.executable, "-c", "import sys; from rlm_kernel.cli import main; sys.exit(main())", "export"]
    out = tmp_path / "report.md"
    done = subprocess.run([*command, str(made["full"]), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("# RLM trajectory") and "exported 1 run, 5 steps," in done.stderr
    bad = subprocess.run([*command, str(tmp_path / "nope.ipynb")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


GEMINI_KEY = "AIzaSyFAKE0kEy-for_tests0123456789abcde"


def test_exports_hold_no_secrets(made, tmp_path, monkeypatch):
    key, env_secret = "sk-test-SECRETKEY-0123456789", "tok-VERYSECRET-4242"
    monkeypatch.setenv("MY_SERVICE_TOKEN", env_secret)
    nb = nbformat.read(made["full"], as_version=4)
    record = nb.metadata.rlm.runs[0]
    record["api_key"] = key
    record["limits"]["api_key"] = key
    record["context"]["token"] = key
    for cell in nb.cells:
        meta = cell.metadata.get("rlm") or {}
        meta["api_key"] = key
        for sub in meta.get("subcalls") or []:
            sub["api_key"] = key
            if sub.get("child"):
                sub["child"]["api_key"] = key
    code = next(c for c in nb.cells if _role(c) == "code")
    code.outputs[0]["text"] += f"printed by the code: {env_secret}\n"
    # A person's cell inside the run, with a Gemini key that is in no environment variable.
    typed = nbformat.v4.new_code_cell(f'GEMINI = "{GEMINI_KEY}"\nprint("typed by a person", GEMINI)', outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=f"typed by a person {GEMINI_KEY}\n")], execution_count=9)
    nb.cells.insert(nb.cells.index(code) + 1, typed)
    path = tmp_path / "secrets.ipynb"
    nbformat.write(nb, path)
    for fmt, extra in (("rlms-jsonl", {}), ("sft", {"include_subcalls": True}), ("markdown", {})):
        text = _export(path, fmt, **extra)
        assert "printed by the code" in text and "typed by a person" in text, fmt
        assert key not in text and env_secret not in text and "api_key" not in text
        assert GEMINI_KEY not in text and "AIza<redacted>" in text, fmt


def test_a_prompt_kept_as_a_preview_says_how_much_is_missing_in_plain_english():
    from rlm_kernel.export.runs import prompt_shown

    assert prompt_shown({"prompt_preview": "abc", "prompt_chars": 4}).startswith("abc… [1 more character;")
    assert prompt_shown({"prompt_preview": "abc", "prompt_chars": 1003}).startswith("abc… [1,000 more characters;")
