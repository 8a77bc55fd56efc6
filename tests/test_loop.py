"""The engine end to end: ``RLM(...).completion`` against the scripted
server, through litellm over real HTTP, code run in a real IPython shell."""

from __future__ import annotations

import gc
import json
import re
import threading
import weakref
from collections import Counter

import nbformat
import pytest
from _helpers import Router, cell_text, cells_by_role, feedback_after, repl

from rlm_kernel.testing.server import Reply, prompt_text

# -- ending a run -------------------------------------------------------------------


def test_final_line_in_the_reply(run_rlm):
    result, srv = run_rlm(root=["I know it already.\nFINAL(forty-two)"])
    assert result.reason == "final"
    assert result.answer == "forty-two"
    assert result.iterations == 1
    assert cells_by_role(result.notebook, "answer")[0].metadata.rlm.reason == "final"


def test_final_var_line_after_code_ran(run_rlm):
    root = [repl("total = sum(range(10))\nresult_text = f'the sum is {total}'"), "Checked.\nFINAL_VAR(result_text)"]
    result, _ = run_rlm(root=root)
    assert result.reason == "final"
    assert result.answer == "the sum is 45"
    assert result.answer_var == "result_text"


def test_final_var_line_in_the_same_reply_as_its_code(run_rlm):
    result, _ = run_rlm(root=[repl("word = 'ba' + 'na' * 2") + "\nFINAL_VAR(word)"])
    assert (result.reason, result.answer, result.iterations) == ("final", "banana", 1)


def test_answer_cell_counts_characters_in_plain_english(run_rlm):
    result, _ = run_rlm(root=[repl("one = 'x'\nFINAL_VAR('one')")])
    head = cells_by_role(result.notebook, "answer")[0].source.splitlines()[0]
    assert head == "**Final answer** (the value of `one`, 1 character)"


def test_final_called_in_code(run_rlm):
    result, _ = run_rlm(root=[repl("n = 6 * 7\nFINAL(f'n={n}')")])
    assert (result.reason, result.answer, result.iterations) == ("final", "n=42", 1)


def test_final_var_called_in_code(run_rlm):
    result, _ = run_rlm(root=[repl("summary = ', '.join(['a', 'b', 'c'])\nFINAL_VAR('summary')")])
    assert (result.reason, result.answer, result.answer_var) == ("final", "a, b, c", "summary")


def test_blocks_after_final_in_code_are_not_run(run_rlm):
    reply = repl("FINAL('early')") + "\n" + repl("print('after final')")
    result, _ = run_rlm(root=[reply])
    assert (result.reason, result.answer) == ("final", "early")
    code = cells_by_role(result.notebook, "code")
    assert code[1].metadata.rlm.status == "skipped"
    assert code[1].metadata.rlm.skipped == "an answer was already given"
    assert _only_note(code[1]) == "This code block was not run: an answer was already given."


def _only_note(cell) -> str:
    """The text of a skipped cell's one output: a note (a display, never
    something the code printed), the same in plain text and Markdown."""
    [note] = cell.outputs
    assert note.output_type == "display_data" and note.metadata["rlm"] == {"note": "not run"}, note
    plain = note.data["text/plain"]
    assert note.data["text/markdown"].replace("\\", "") == f"*{plain}*"
    return plain


def test_answer_dict_protocol(run_rlm):
    root = [repl("x = 1"), repl("answer['content'] = 'from the dict'\nanswer['ready'] = True")]
    result, srv = run_rlm(root=root)
    assert (result.reason, result.answer, result.iterations) == ("final", "from the dict", 2)
    assert len(srv.calls("root-model")) == 2


def test_answer_dict_rebuilt_wholesale(run_rlm):
    result, _ = run_rlm(root=[repl("answer = {'content': 'rebuilt', 'ready': True}")])
    assert (result.reason, result.answer, result.iterations) == ("final", "rebuilt", 1)


def test_answer_dict_not_ready_does_not_end_the_run(run_rlm):
    root = [repl("answer['content'] = 'draft'"), "FINAL(real)"]
    result, _ = run_rlm(root=root)
    assert (result.answer, result.iterations) == ("real", 2)


def test_final_var_of_a_missing_variable_is_reported_and_the_run_goes_on(run_rlm):
    root = ["FINAL_VAR(nowhere)", repl("nowhere = 'found'"), "FINAL_VAR(nowhere)"]
    result, srv = run_rlm(root=root)
    assert (result.reason, result.answer, result.iterations) == ("final", "found", 3)
    assert "nowhere" in feedback_after(srv, 1)


def test_final_var_with_a_one_megabyte_answer(run_rlm):
    code = "big = ''.join(f'{i:07d}\\n' for i in range(125_000))\nprint(len(big))"
    result, srv = run_rlm(root=[repl(code), "FINAL_VAR(big)"])
    expected = "".join(f"{i:07d}\n" for i in range(125_000))
    assert len(expected) == 1_000_000
    assert result.reason == "final"
    assert result.answer == expected
    assert result.to_json()["answer"] == expected
    answer_cell = cells_by_role(result.notebook, "answer")[0]
    assert answer_cell.metadata.rlm.answer_chars == 1_000_000
    assert answer_cell.metadata.rlm.answer_var == "big"
    # the answer never went through the model, and the notebook holds only a preview
    assert all(len(json.dumps(b)) < 50_000 for b in srv.calls("root-model"))
    assert len(nbformat.writes(result.notebook)) < 200_000


# -- sub-calls ------------------------------------------------------------------------


def test_batched_subcalls_are_concurrent_and_keep_order(run_rlm):
    code = (
        "prompts = [f'item {i}' for i in range(64)]\n"
        "answers = llm_query_batched(prompts)\n"
        "print(all(a == f'echo: item {i}' for i, a in enumerate(answers)), len(answers))"
    )
    result, srv = run_rlm(
        root=[repl(code), "FINAL(ok)"], sub=lambda p: Reply(text=f"echo: {p}", delay=0.5), concurrency=16,
    )
    assert result.reason == "final"
    cell = cells_by_role(result.notebook, "code")[0]
    assert cell_text(cell).strip() == "True 64"
    assert srv.max_in_flight == 16
    assert len(srv.calls("sub-model")) == 64
    # serial would take 64 * 0.5 = 32 s; 16 at a time takes ~2 s
    assert cell.metadata.rlm.duration_s < 16.0
    records = cell.metadata.rlm.subcalls
    assert [r["prompt_preview"] for r in records] == [f"item {i}" for i in range(64)]
    assert all(r["status"] == "done" for r in records)


def test_default_concurrency_is_at_least_32(run_rlm):
    # Every sub-call waits until 32 are in flight (or 10 s pass), so the
    # figure does not depend on how fast this machine sends them.
    arrived = threading.Condition()
    count = [0]

    def sub(prompt):
        with arrived:
            count[0] += 1
            arrived.notify_all()
            arrived.wait_for(lambda: count[0] >= 32, timeout=10)
        return "x"

    code = "r = llm_query_batched([f'p{i}' for i in range(40)])\nprint(len(r))"
    result, srv = run_rlm(root=[repl(code), "FINAL(ok)"], sub=sub)
    assert result.reason == "final"
    assert srv.max_in_flight >= 32


def test_a_failing_prompt_fails_only_its_slot(run_rlm):
    def sub(prompt):
        if prompt == "p3":
            return Reply(status=400, text="this prompt is refused")
        return f"ok {prompt}"

    code = (
        "import json\n"
        "r = llm_query_batched([f'p{i}' for i in range(6)])\n"
        "print(json.dumps({'types': [type(x).__name__ for x in r], 'texts': [str(x) for x in r],\n"
        "                  'is_str': isinstance(r[3], str), 'error': r[3].error}))"
    )
    result, srv = run_rlm(root=[repl(code), "FINAL(ok)"], sub=sub)
    cell = cells_by_role(result.notebook, "code")[0]
    data = json.loads(cell_text(cell))
    assert data["types"] == ["str", "str", "str", "SubcallFailure", "str", "str"]
    assert data["texts"][:3] == ["ok p0", "ok p1", "ok p2"] and data["texts"][4:] == ["ok p4", "ok p5"]
    assert data["is_str"] is True
    assert "sub-call error" in data["texts"][3]
    assert "400" in data["error"] or "refused" in data["error"]
    statuses = [r["status"] for r in cell.metadata.rlm.subcalls]
    assert statuses == ["done", "done", "done", "error", "done", "done"]
    assert "error" in cell.metadata.rlm.subcalls[3]


def test_llm_query_sends_the_prompt_to_the_sub_model(run_rlm):
    code = "r = llm_query('what is two plus two?')\nr2 = llm_query('other', model='openai/other-model')\nprint(r, '|', r2)"
    result, srv = run_rlm(root=[repl(code), "FINAL(ok)"], sub=lambda p: f"answer to <{p}>")
    assert cell_text(cells_by_role(result.notebook, "code")[0]).strip() == (
        "answer to <what is two plus two?> | answer to <other>"
    )
    assert [b["model"] for b in srv.requests if b["model"] != "root-model"] == ["sub-model", "other-model"]
    assert srv.calls("sub-model")[0]["messages"] == [{"role": "user", "content": "what is two plus two?"}]


def test_depth_two_recursion_keeps_every_trajectory(server, make_rlm):
    router = Router({
        "root-model": [
            repl("r = rlm_query('outer task', model='openai/child-model')\nprint('root got', r)"),
            "FINAL_VAR(r)",
        ],
        "child-model": [
            repl("g = rlm_query('inner task', model='openai/grandchild-model')\nFINAL_VAR('g')"),
        ],
        "grandchild-model": [
            repl("FINAL('deep:' + context)"),
        ],
    })
    srv = server(router)
    result = make_rlm(srv, max_depth=2).completion("top context", "Delegate twice.")
    assert result.reason == "final"
    assert result.answer == "deep:inner task"
    root_code = cells_by_role(result.notebook, "code")[0]
    assert cell_text(root_code).strip() == "root got deep:inner task"
    call = root_code.metadata.rlm.subcalls[0]
    assert call["kind"] == "rlm" and call["status"] == "done" and call["model"] == "openai/child-model"
    child = call["child"]
    assert child["depth"] == 1 and child["reason"] == "final"
    child_code = [c for c in child["cells"] if c["metadata"]["rlm"]["role"] == "code"][0]
    assert "grandchild-model" in child_code["source"]
    grand = child_code["metadata"]["rlm"]["subcalls"][0]["child"]
    assert grand["depth"] == 2 and grand["reason"] == "final"
    grand_code = [c for c in grand["cells"] if c["metadata"]["rlm"]["role"] == "code"][0]
    assert grand_code["source"] == "FINAL('deep:' + context)"
    # each level talked to its own model
    assert len(srv.calls("child-model")) == 1 and len(srv.calls("grandchild-model")) == 1
    nbformat.validate(result.notebook)


def test_depth_limit_is_refused_with_an_error_the_model_sees(server, make_rlm):
    router = Router({
        "root-model": [repl("r = rlm_query('outer task', model='openai/child-model')"), "FINAL_VAR(r)"],
        "child-model": [
            repl("g = rlm_query('too deep', model='openai/grandchild-model')"),
            "FINAL(child fell back)",
        ],
    })
    srv = server(router)
    result = make_rlm(srv, max_depth=1).completion("ctx", "Delegate.")
    assert result.reason == "final"
    assert result.answer == "child fell back"
    assert srv.calls("grandchild-model") == []
    told = prompt_text(srv.calls("child-model")[1])
    assert "RecursionLimitError" in told
    assert "max-depth" in told


def test_depth_zero_refuses_rlm_query_at_the_root(run_rlm):
    result, srv = run_rlm(root=[repl("rlm_query('x')"), "FINAL(ok)"], max_depth=0)
    assert result.reason == "final"
    told = feedback_after(srv, 1)
    assert "RecursionLimitError" in told and "max-depth 0" in told


# -- what replies look like ----------------------------------------------------------


def test_reply_without_a_fence(run_rlm):
    result, srv = run_rlm(root=["Let me think about this without code.", "FINAL(ok)"])
    assert result.reason == "final" and result.iterations == 2
    assert "no ```repl code block" in feedback_after(srv, 1)
    thoughts = cells_by_role(result.notebook, "thought")
    assert thoughts[0].source == "Let me think about this without code."
    assert not [c for c in cells_by_role(result.notebook, "code") if c.metadata.rlm.step == 1]


def test_unclosed_fence_is_shown_but_not_run(run_rlm):
    root = [
        "Starting.\n```repl\nprint('SHOULD-NOT-RUN')\nran = True",
        repl("print('ran' in dir())"),
        "FINAL(ok)",
    ]
    result, srv = run_rlm(root=root)
    code = cells_by_role(result.notebook, "code")
    assert code[0].source == "print('SHOULD-NOT-RUN')\nran = True"
    assert code[0].metadata.rlm.status == "skipped"
    assert code[0].metadata.rlm.skipped == "its ``` fence was never closed"
    said = _only_note(code[0])
    assert said == "This code block was not run: its ``` fence was never closed."
    assert said in feedback_after(srv, 1)  # the root model is told the same sentence
    assert cell_text(code[1]).strip() == "False"


def test_several_blocks_run_in_order(run_rlm):
    reply = (
        "First a list.\n```repl\norder = ['a']\nprint('block one')\n```\n"
        "Then add.\n```python\norder.append('b')\nprint('block two')\n```\n"
        "```repl\norder.append('c')\nprint(order)\n```"
    )
    result, srv = run_rlm(root=[reply, "FINAL(ok)"])
    code = [c for c in cells_by_role(result.notebook, "code") if c.metadata.rlm.step == 1]
    assert len(code) == 3
    assert [cell_text(c).strip() for c in code] == ["block one", "block two", "['a', 'b', 'c']"]
    counts = [c.execution_count for c in code]
    assert counts == sorted(counts) and len(set(counts)) == 3
    told = feedback_after(srv, 1)
    assert told.index("block one") < told.index("block two") < told.index("['a', 'b', 'c']")
    # prose and code interleave in the notebook as in the reply
    step1 = [c for c in result.notebook.cells if c.metadata.get("rlm", {}).get("step") == 1]
    assert [c.metadata.rlm.role for c in step1] == ["thought", "code", "thought", "code", "code"]


def test_empty_reply(run_rlm):
    result, srv = run_rlm(root=["", "FINAL(after empty)"])
    assert (result.reason, result.answer, result.iterations) == ("final", "after empty", 2)
    assert "empty reply" in cells_by_role(result.notebook, "thought")[0].source
    assert "no ```repl code block" in feedback_after(srv, 1)


def test_a_cell_that_raises(run_rlm):
    code = "def divide(a, b):\n    return a / b\n\nprint('before')\ndivide(1, 0)"
    result, srv = run_rlm(root=[repl(code), "FINAL(recovered)"])
    assert result.reason == "final"
    cell = cells_by_role(result.notebook, "code")[0]
    assert cell.metadata.rlm.status == "error"
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "ZeroDivisionError"
    assert any("divide" in line for line in errors[0].traceback)
    told = feedback_after(srv, 1)
    assert "raised an error" in told
    assert "ZeroDivisionError" in told and "before" in told


@pytest.mark.parametrize("code, head, tail, total", [
    ("print('HEAD' + 'x' * 50_000_000 + 'TAIL')", "HEAD", "TAIL", 50_000_009),
    ("for i in range(500):\n    print(('%04d' % i) * 25_000)", "0000", "0499", 50_000_500),
])
def test_a_cell_that_prints_fifty_megabytes(run_rlm, code, head, tail, total):
    result, srv = run_rlm(root=[repl(code), "FINAL(survived)"], max_output_chars=10_000)
    assert result.reason == "final"
    told = feedback_after(srv, 1)
    assert len(told) < 12_000
    assert f"{total:,} characters" in told
    # head first, then how much was left out, then the tail
    assert told.index(head) < told.index("omitted") < told.rindex(tail)
    cell = cells_by_role(result.notebook, "code")[0]
    stored = json.dumps(cell.outputs)
    assert len(stored) < 1_000_000
    assert len(nbformat.writes(result.notebook)) < 1_500_000


def test_model_view_never_repeats_output_when_the_limit_exceeds_what_is_kept(run_rlm):
    # 1.7 MB of numbered lines; the model may see 300k characters of it, more
    # than the capture keeps: it must still see each line at most once.
    code = "for i in range(100_000):\n    print(f'line {i:06d} ' + 'z' * 4)"
    result, srv = run_rlm(root=[repl(code), "FINAL(ok)"], max_output_chars=300_000)
    told = feedback_after(srv, 1)
    labels = re.findall(r"line \d{6}", told)
    assert "line 000000" in labels and "line 099999" in labels
    repeated = sorted(label for label, count in Counter(labels).items() if count > 1)
    assert not repeated, f"{len(repeated):,} lines shown to the model more than once, e.g. {repeated[:3]}"


def test_helpers_and_context_are_restored(run_rlm):
    root = [
        repl("del context\nllm_query = None\nSHOW_VARS = 'gone'"),
        repl("print(len(context), llm_query('ping'))\nSHOW_VARS()"),
        "FINAL(ok)",
    ]
    result, srv = run_rlm(root=root, context="c" * 1234)
    told = feedback_after(srv, 1)
    assert "restored" in told
    for name in ("`context`", "`llm_query`", "`SHOW_VARS`"):
        assert name in told
    second = cells_by_role(result.notebook, "code")[1]
    assert second.metadata.rlm.status == "ok"
    assert cell_text(second).startswith("1234 echo: ping")


def test_no_restore_note_when_nothing_was_rebound(run_rlm):
    # The note is for code that clobbered a helper; ordinary code must not
    # be told, after every step, that it rebound all of them.
    root = [repl("x = len(context)\nprint(x)"), repl("y = llm_query('hi')"), "FINAL(ok)"]
    result, srv = run_rlm(root=root)
    assert result.reason == "final"
    for step in (1, 2):
        told = feedback_after(srv, step)
        assert "restored" not in told, f"after step {step} the model was told: {told!r}"


def test_model_sees_only_what_the_code_output(run_rlm):
    # Sub-call views are shown to the human; the code already holds the
    # results, so they must not fill the model's view of the cell.
    root = [repl("r = llm_query('hi')\nrs = llm_query_batched(['a', 'b'])"),
            repl("for i in range(20):\n    llm_query(f'q{i}')\nprint('only this')"), "FINAL(ok)"]
    result, srv = run_rlm(root=root)
    first = feedback_after(srv, 1)
    assert "ran with no output" in first, first
    second = feedback_after(srv, 2)
    assert "only this" in second
    assert "llm_query →" not in second, second


def test_variables_persist_and_show_vars_lists_them(run_rlm):
    root = [repl("chunks = [context[i:i+10] for i in range(0, len(context), 10)]"),
            repl("print(len(chunks))\nSHOW_VARS()"), "FINAL(ok)"]
    result, _ = run_rlm(root=root, context="abcdefghij" * 7)
    text = cell_text(cells_by_role(result.notebook, "code")[1])
    assert text.startswith("7\n")
    assert "chunks: list (len 7)" in text


def test_generated_code_runs_through_ipython(run_rlm):
    code = "here = %pwd\nprint(type(here).__name__)\n[1, 2, 3]"
    result, _ = run_rlm(root=[repl(code), "FINAL(ok)"])
    cell = cells_by_role(result.notebook, "code")[0]
    assert cell.metadata.rlm.status == "ok"
    assert [o.output_type for o in cell.outputs] == ["stream", "execute_result"]
    assert cell.outputs[0].text == "str\n"
    assert cell.outputs[1].data["text/plain"] == "[1, 2, 3]"


# -- ledger and notebook ---------------------------------------------------------------


def test_usage_per_model_and_unknown_cost(run_rlm):
    root = [Reply(text=repl("llm_query_batched(['a', 'b', 'c'])"), prompt_tokens=100, completion_tokens=10),
            Reply(text="FINAL(ok)", prompt_tokens=200, completion_tokens=5)]
    result, _ = run_rlm(root=root, sub=lambda p: Reply(text="s", prompt_tokens=7, completion_tokens=3))
    usage = result.usage
    assert usage["openai/root-model"]["prompt_tokens"] == 300
    assert usage["openai/root-model"]["completion_tokens"] == 15
    assert usage["openai/root-model"]["calls"] == 2
    assert usage["openai/sub-model"]["prompt_tokens"] == 21
    assert usage["openai/sub-model"]["completion_tokens"] == 9
    assert usage["openai/sub-model"]["calls"] == 3
    assert usage["openai/root-model"]["cost_usd"] is None
    assert result.cost_usd is None
    data = result.to_json()
    assert data["cost_usd"] is None and data["subcalls"] == 3
    assert data["usage"]["openai/sub-model"]["prompt_tokens"] == 21


def test_notebook_is_valid_and_structured(run_rlm, tmp_path):
    out = tmp_path / "run.ipynb"
    root = [
        Reply(text="Look at it.\n" + repl("print(len(context))"), prompt_tokens=50, completion_tokens=5),
        "Done.\nFINAL(the end)",
    ]
    result, _ = run_rlm(root=root, context="x" * 99, query="How long?", output=out)
    nb = result.notebook
    nbformat.validate(nb)
    roles = [c.metadata.rlm.role for c in nb.cells]
    assert roles == ["context", "query", "thought", "code", "thought", "answer"]
    query = nb.cells[1]
    assert query.cell_type == "code" and query.source.startswith("%%rlm") and "How long?" in query.source
    for cell in nb.cells[1:]:
        meta = cell.metadata.rlm
        assert meta.run_id == result.run_id
        assert isinstance(meta.step, int)
    assert [c.metadata.rlm.step for c in nb.cells[1:]] == [0, 1, 1, 2, 2]
    code = nb.cells[3]
    assert code.cell_type == "code" and code.outputs[0].text == "99\n"
    assert code.execution_count is not None
    assert nb.cells[2].metadata.rlm.root_call["prompt_tokens"] == 50
    answer = nb.cells[-1]
    assert answer.cell_type == "markdown" and "the end" in answer.source
    assert nb.metadata.rlm.runs[0]["reason"] == "final"
    assert nb.metadata.kernelspec["name"] == "rlm"
    # written to disk, valid, and the same trajectory
    on_disk = nbformat.read(str(out), as_version=4)
    nbformat.validate(on_disk)
    assert [c.source for c in on_disk.cells] == [c.source for c in nb.cells]


def test_subcall_records_are_compact(run_rlm):
    code = (
        "prompts = [f'{i:04d} ' + context for i in range(50)]\n"
        "out = llm_query_batched(prompts)\n"
        "print(len(out))"
    )
    context = "".join(chr(97 + i % 26) for i in range(20_000))
    result, _ = run_rlm(root=[repl(code), "FINAL(ok)"], context=context)
    records = cells_by_role(result.notebook, "code")[0].metadata.rlm.subcalls
    assert len(records) == 50
    for i, record in enumerate(records):
        assert "prompt" not in record
        assert len(record["prompt_hash"]) >= 8
        assert len(record["prompt_preview"]) <= 48
        assert record["prompt_preview"].startswith(f"{i:04d} ")
        assert record["prompt_chars"] == 20_005
    assert len({r["prompt_hash"] for r in records}) == 50
    # 50 prompts of 20k characters (1 MB) did not go into the notebook
    assert len(nbformat.writes(result.notebook)) < 100_000


class _Text(str):
    """A str that can be weakly referenced (to see whether a run let go of it)."""


def test_completion_lets_go_of_the_context(server, make_rlm):
    # A Python caller that runs many completions over huge inputs must get the
    # memory back: nothing of ours may keep a finished run's context alive.
    srv = server(root=[repl("n = len(context)"), "FINAL(ok)"] * 3)
    rlm = make_rlm(srv)
    refs = []
    for _ in range(3):
        context = _Text("abc" * 10_000)
        refs.append(weakref.ref(context))
        result = rlm.completion(context, "How long?")
        assert result.reason == "final"
        del context, result
    gc.collect()
    alive = sum(ref() is not None for ref in refs)
    assert alive == 0, f"{alive} of 3 finished runs still hold their context"


def test_models_and_api_base_default_from_the_environment(server, monkeypatch):
    from rlm_kernel import RLM

    srv = server(root=[repl("print(llm_query('hi'))"), "FINAL(from env)"])
    monkeypatch.setenv("RLM_MODEL", "openai/root-model")
    monkeypatch.setenv("RLM_SUB_MODEL", "openai/sub-model")
    monkeypatch.setenv("RLM_API_BASE", srv.url)
    rlm = RLM()
    assert (rlm.model, rlm.sub_model, rlm.api_base) == ("openai/root-model", "openai/sub-model", srv.url)
    result = rlm.completion("text", "q")
    assert result.answer == "from env"
    assert {r["model"] for r in srv.requests} == {"root-model", "sub-model"}
    monkeypatch.delenv("RLM_SUB_MODEL")
    assert RLM().sub_model == "openai/root-model"  # falls back to the root model


def test_child_run_tokens_are_its_own_not_its_siblings(run_rlm):
    """An rlm_query record counts the child's calls only, though the ledger
    is shared by the whole run tree."""
    from _helpers import Router

    script = Router({
        "root-model": [repl("warm = llm_query_batched(['a', 'b', 'c'])\nkid = rlm_query('count', model='openai/child-model')\nprint(kid)"),
                       "FINAL(done)"],
        "child-model": [repl("print(llm_query('inner'))"), "FINAL(3)"],
    })
    result, _ = run_rlm(responder=script)
    assert result.reason == "final"
    code = next(c for c in result.notebook.cells if c.metadata.get("rlm", {}).get("role") == "code")
    child = next(r for r in code.metadata["rlm"]["subcalls"] if r.get("kind") == "rlm")
    own = 0
    for cell in child["child"]["cells"]:
        meta = cell["metadata"]["rlm"]
        root = meta.get("root_call") or {}
        own += root.get("prompt_tokens", 0) + root.get("completion_tokens", 0)
        for record in meta.get("subcalls") or []:
            own += record["usage"]["prompt_tokens"] + record["usage"]["completion_tokens"]
    assert own > 0
    assert child["usage"]["prompt_tokens"] + child["usage"]["completion_tokens"] == own


def test_a_helper_error_shows_the_callers_line_not_our_frames(run_rlm):
    code = "answers = llm_query_batched(['a', 'b', 'c'])"
    result, _ = run_rlm(root=[repl(code), "FINAL(stop)"], max_subcalls=2)
    cell = next(c for c in result.notebook.cells if c.cell_type == "code" and "llm_query_batched" in c.source)
    error = next(o for o in cell.outputs if o.output_type == "error")
    assert error.ename == "BudgetExceeded"
    text = "\n".join(error.traceback)
    assert "llm_query_batched(['a', 'b', 'c'])" in text
    assert "rlm_kernel" not in text and "subcalls.py" not in text, text
