"""Thinking is kept, never run and never sent back: the provider's reasoning
field reaches us apart from the reply (litellm over real HTTP), the step's
thought cell holds it folded with the full text in its metadata, and the
model's history, "continue from here" and the exports leave it out. Also:
a child run (rlm_query) reads fences exactly as the top level does."""

from __future__ import annotations

import io
import json

import nbformat
import pytest
from _helpers import ROOT, SUB, Router, cell_text, cells_by_role, repl

from rlm_kernel import RLM
from rlm_kernel.engine.runs.history import rebuild
from rlm_kernel.engine.trajectory.cells import reply_text
from rlm_kernel.engine.trajectory.writing import thought_cell
from rlm_kernel.export import export_notebook
from rlm_kernel.testing.server import Reply, Script, ScriptedServer

SECRET_THOUGHT = "PRIVATE-THOUGHT: maybe run rm -rf"
INLINE_THOUGHT = "INLINE-THOUGHT about the size"


@pytest.fixture(scope="module")
def thinking_run(tmp_path_factory):
    """A run whose first reply thinks in the reasoning field, the second in
    <think> tags, the third only thinks (content null)."""
    folder = tmp_path_factory.mktemp("thinking")
    root = [
        Reply(text="Let me look.\n" + repl("print(len(context))"),
              reasoning=f"{SECRET_THOUGHT}\n```repl\nprint('THOUGHT-RAN')\n```"),
        f"<think>\n{INLINE_THOUGHT}\nFINAL(wrong)\n</think>\nSize known.\n" + repl("size = len(context)"),
        Reply(text=None, reasoning="just thinking, no reply"),
        "FINAL_VAR(size)",
    ]
    srv = ScriptedServer(Script(root=root)).start()
    try:
        rlm = RLM(model=ROOT, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01)
        path = folder / "run.ipynb"
        result = rlm.completion("x" * 321, "How long?", output=path)
        requests = srv.calls("root-model")
    finally:
        srv.stop()
    return {"result": result, "requests": requests, "path": path, "folder": folder}


def test_the_answer_comes_from_the_reply_not_the_thinking(thinking_run):
    result = thinking_run["result"]
    assert (result.reason, result.answer, result.answer_var, result.iterations) == ("final", 321, "size", 4)
    code = cells_by_role(result.notebook, "code")
    assert [c.source for c in code] == ["print(len(context))", "size = len(context)"]
    assert all("THOUGHT-RAN" not in cell_text(c) for c in code)


def test_thinking_is_folded_above_the_prose_and_kept_whole_in_metadata(thinking_run):
    thoughts = cells_by_role(thinking_run["result"].notebook, "thought")
    first, second, third = thoughts[:3]
    assert first.source.startswith("<details><summary>Thinking</summary>\n\n" + SECRET_THOUGHT)
    assert first.source.endswith("</details>\n\nLet me look.")
    assert first.metadata.rlm.thinking == f"{SECRET_THOUGHT}\n```repl\nprint('THOUGHT-RAN')\n```"
    assert first.metadata.rlm.root_call["completion_tokens"] > 0  # the step's usage stays on its first cell
    assert INLINE_THOUGHT in second.metadata.rlm.thinking and "FINAL(wrong)" in second.metadata.rlm.thinking
    assert reply_text(second) == "Size known."
    assert third.metadata.rlm.thinking == "just thinking, no reply" and reply_text(third) == ""
    nbformat.validate(nbformat.read(str(thinking_run["path"]), as_version=4))


def test_thinking_never_goes_back_to_the_model(thinking_run):
    last = thinking_run["requests"][-1]["messages"]
    sent = json.dumps(last[1:])  # after the system prompt, which names <think> in its rules
    for thought in (SECRET_THOUGHT, INLINE_THOUGHT, "just thinking", "<think>", "<details>"):
        assert thought not in sent, thought
    replies = [m["content"] for m in last if m["role"] == "assistant"]
    assert replies[0] == "Let me look.\n```repl\nprint(len(context))\n```"
    assert replies[1] == "Size known.\n```repl\nsize = len(context)\n```"
    assert replies[2] == ""


def test_continue_from_here_leaves_the_thinking_out(thinking_run):
    nb = thinking_run["result"].notebook
    last_code = max(i for i, c in enumerate(nb.cells) if c.metadata.get("rlm", {}).get("role") == "code")
    messages = rebuild(nb.cells, last_code, "x" * 321).messages
    sent = json.dumps(messages)
    assert SECRET_THOUGHT not in sent and INLINE_THOUGHT not in sent and "<details>" not in sent
    assert messages[2]["content"].startswith("Let me look.\n\n```repl")


def test_exports_do_not_take_the_thinking_for_the_reply(thinking_run):
    path, folder = thinking_run["path"], thinking_run["folder"]
    export_notebook(path, "rlms-jsonl", folder / "log.jsonl")
    log = (folder / "log.jsonl").read_text(encoding="utf-8")
    sft = io.StringIO()
    export_notebook(path, "sft", stdout=sft)
    for text in (log, sft.getvalue()):
        assert SECRET_THOUGHT not in text and INLINE_THOUGHT not in text and "<details>" not in text
    assert "Let me look." in log and "Let me look." in sft.getvalue()
    report = io.StringIO()
    export_notebook(path, "markdown", stdout=report)
    assert "<details><summary>Thinking</summary>" in report.getvalue()  # a person reads it, folded


def test_the_thinking_block_survives_its_own_closing_tag_and_a_persons_edit():
    cell = thought_cell("r", 1, "The prose.", "a </details> inside\n\nand more")
    assert reply_text(cell) == "The prose."
    assert cell.metadata.rlm.thinking == "a </details> inside\n\nand more"
    cell.source = cell.source.replace("The prose.", "Edited by a person.")
    assert reply_text(cell) == "Edited by a person."
    assert reply_text({"source": "<details><summary>Other</summary>x</details>\n\nkept"}).startswith("<details>")


def test_the_model_client_keeps_reasoning_apart(run_rlm):
    result, srv = run_rlm(root=[Reply(text=None, reasoning="FINAL(from thinking)"), "FINAL(from the reply)"])
    assert (result.reason, result.answer, result.iterations) == ("final", "from the reply", 2)
    body = srv.calls("root-model")[1]
    assert "from thinking" not in json.dumps(body["messages"])


def test_a_child_run_dedents_code_as_the_top_level_does(server, make_rlm):
    child_reply = ("Steps:\n\n1. Count:\n\n   ```repl\n   n = len(context)\n   if n:\n       print('child', n)\n   ```\n"
                   "2. Answer next.")
    srv = server(Router({
        "root-model": [repl("r = rlm_query('twelve chars', model='openai/child-model')\nprint(r)"), "FINAL_VAR(r)"],
        "child-model": [child_reply, "FINAL(twelve)"],
    }))
    result = make_rlm(srv).completion("ctx", "Delegate.")
    assert (result.reason, result.answer) == ("final", "twelve")
    record = cells_by_role(result.notebook, "code")[0].metadata.rlm.subcalls[0]
    child_code = [c for c in record["child"]["cells"] if c["metadata"]["rlm"]["role"] == "code"]
    assert child_code[0]["source"] == "n = len(context)\nif n:\n    print('child', n)"
    assert "child 12" in "".join(o.get("text", "") for o in child_code[0]["outputs"])
    assert cell_text(cells_by_role(result.notebook, "code")[0]).strip() == "twelve"


def test_reasoning_reaches_the_completion_apart_from_the_text():
    from rlm_kernel.engine.execution.engine_loop import submit
    from rlm_kernel.engine.model.litellm_client import LiteLLMClient
    from rlm_kernel.engine.model.model_client import ModelEndpoint

    with ScriptedServer(lambda body: Reply(text="the reply", reasoning="the thinking")) as srv:
        endpoint = ModelEndpoint("openai/any", api_base=srv.url)
        completion = submit(LiteLLMClient().complete(endpoint, [{"role": "user", "content": "hi"}])).result(60)
    assert (completion.text, completion.reasoning) == ("the reply", "the thinking")


def test_a_subcall_that_only_reasons_still_answers_with_it(run_rlm):
    # A sub-call's answer is data for the code, never run: a reply with only
    # reasoning keeps answering with it (the root's reply is content only).
    result, _ = run_rlm(root=[repl("print(llm_query('q'))"), "FINAL(ok)"],
                        sub=lambda prompt: Reply(text=None, reasoning="the sub-model's thinking"))
    assert cell_text(cells_by_role(result.notebook, "code")[0]).strip() == "the sub-model's thinking"
