"""The reply protocol, row by row: a root reply (and its reasoning) ->
the code blocks found, the code that runs, how the step ends, the answer
and what the root model is told next.

Each row runs end to end (``RLM.completion`` against the scripted server,
code in a real IPython shell); ``parse_reply`` is also checked on its own,
and every prefix of every reply must find the same closed code blocks as the
whole reply (what streaming will rely on). A subset runs through
``rlm-kernel run`` in test_reply_protocol_cli.py.

Rows marked ``official`` restate, in our own words, a case from the
official library's tests (alexzhang13/rlm; the C-numbers of
notes/rlm_reference_cases.md), a probe of its behaviour (P-...) or a pull
request about its parsing (PR #...). ``differs`` says where and why we
answer otherwise; docs/reference/reply-protocol.md lists the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from _helpers import SUB, cell_text
from _reply_rows import GOES_ON, ROWS, Responder, Row, fence, row_id, row_model

from rlm_kernel.engine.protocol.reply import parse_reply
from rlm_kernel.testing.server import ScriptedServer, prompt_text


@pytest.fixture(scope="module")
def scripted() -> Any:
    srv = ScriptedServer(Responder()).start()
    yield srv
    srv.stop()


def run_row(row: Row, srv: ScriptedServer) -> tuple[Any, str]:
    """The row's run, and what the model was told after the row's step."""
    from rlm_kernel import RLM

    model = row_model(row)
    rlm = RLM(model=model, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01, max_iterations=len(row.before) + 2)
    result = rlm.completion("the context text", f"row {row.id}")
    step = len(row.before) + 1
    asked = [b for b in srv.calls(model.split("/", 1)[1]) if row_id(b) == row.id]
    told = prompt_text(asked[step]) if len(asked) > step else ""
    return result, told


def transcript(result: Any) -> str:
    """Every cell of a run with its step, status and output: what a failing row shows."""
    lines = [f"error: {result.error}"]
    for cell in result.notebook.cells:
        rlm = cell.metadata.get("rlm", {})
        lines.append(f"--- step {rlm.get('step')} {cell.cell_type} {rlm.get('role', '')} {rlm.get('status', '')}")
        lines.append(cell.source)
        if cell.cell_type == "code":
            lines.append(f"=> {cell_text(cell)}")
    return "\n".join(lines)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_row_end_to_end(row: Row, scripted: ScriptedServer) -> None:
    result, told = run_row(row, scripted)
    step = len(row.before) + 1
    if row.answer == GOES_ON:
        assert (result.reason, result.answer, result.iterations) == ("final", "__next__", step + 1), transcript(result)
    else:
        assert result.reason == "final", (result.reason, result.error)
        assert result.iterations == step, transcript(result)
        assert result.answer == row.answer
        assert type(result.answer) is type(row.answer)
    cells = [c for c in result.notebook.cells if c.metadata.get("rlm", {}).get("step") == step]
    ran = [c.source for c in cells if c.cell_type == "code" and c.metadata.rlm.get("status") != "skipped"]
    assert ran == list(row.blocks if row.runs is None else row.runs)
    for needle in row.told:
        assert needle in told, f"{needle!r} not in what the model was told:\n{told}"
    for needle in row.not_told:
        assert needle not in told, f"{needle!r} was told to the model:\n{told}"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_row_blocks(row: Row) -> None:
    parsed = parse_reply(row.reply, row.reasoning)
    assert tuple(parsed.code_blocks) == row.blocks
    assert not parsed.thinking_may_close  # a whole reply has nothing more to come


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_prefix_finds_the_whole_replys_blocks(row: Row) -> None:
    """Parsing a prefix (as a stream arrives) never finds a block the whole
    reply does not have, and finds each block once its closing fence line is
    complete; only a bare </think> still to come may change that, and the
    prefix says so."""
    content = row.reply or ""
    whole = parse_reply(content, row.reasoning)
    blocks = [s for s in whole.segments if s.kind == "code" and s.closed]
    later_bare_close = any(s.how == "bare-close" for s in whole.segments)
    for cut in range(len(content)):
        prefix = parse_reply(content[:cut], row.reasoning, partial=True)
        if later_bare_close and prefix.thinking_may_close:
            continue
        found = prefix.code_blocks
        assert found == [b.text for b in blocks[:len(found)]], (cut, found)
        if whole.text == content:  # offsets are the reply's own
            done = [b.text for b in blocks if b.end <= cut and content[b.end - 1] == "\n"]
            assert found[:len(done)] == done, (cut, found, done)


def test_thinking_blocks_never_run_and_are_kept() -> None:
    blocks = [{"type": "thinking", "thinking": "```repl\nprint('THOUGHT')\n```\nFINAL(wrong)", "signature": "s"},
              {"type": "redacted_thinking", "data": "xyz"}]
    parsed = parse_reply("```repl\nprint('real')\n```", None, blocks)
    assert parsed.code_blocks == ["print('real')"] and parsed.final is None
    assert "print('THOUGHT')" in parsed.thinking and "(redacted thinking)" in parsed.thinking
    # litellm also joins the blocks into reasoning_content: the same text is kept once
    same = parse_reply("FINAL(x)", "one thought", [{"type": "thinking", "thinking": "one thought"}])
    assert same.thinking == "one thought" and same.final.value == "x"


def test_the_table_covers_the_official_cases() -> None:
    assert len(ROWS) >= 80
    named = " ".join(r.official for r in ROWS)
    for case in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C9", "C10", "C11", "C12", "C13a", "C13i", "C14a",
                 "C15g", "C16a", "C16d", "C18", "C20", "C21", "C52", "C53", "C54", "C61", "C63", "C65", "C80",
                 "C85", "C86", "PR #7", "PR #75", "PR #115", "PR #127"):
        assert case in named, case


# -- the model's own `answer` in a continued run ------------------------------------------------


def test_a_resumed_run_keeps_the_models_answer_variable(tmp_path, server, make_rlm):
    import nbformat

    text = tmp_path / "context.txt"
    text.write_text("the context text", encoding="utf-8")
    first = server(root=[fence("answer = 55\nprint('set')"), "FINAL(first)"])
    path = tmp_path / "first.ipynb"
    done = make_rlm(first).completion("the context text", "q", output=path, sources=[str(text)])
    assert done.answer == "first"
    cells = nbformat.read(str(path), as_version=4).cells
    code = next(i for i, c in enumerate(cells) if c.metadata.get("rlm", {}).get("role") == "code")
    again = server(root=["FINAL_VAR(answer)"])
    result = make_rlm(again).resume(path, from_cell=code, output=tmp_path / "again.ipynb", context=[str(text)])
    assert (result.reason, result.answer, result.answer_var) == ("final", 55, "answer")


def test_continuing_in_a_live_namespace_keeps_the_models_answer_variable():
    """``%rlm continue`` runs on the kernel's namespace with a rebuilt
    history: the answer dict is not put back over the model's own ``answer``,
    while a fresh run, or an old dict, gets a new answer dict."""
    from types import SimpleNamespace

    from rlm_kernel.engine.execution.namespace import Entries, Installs

    def entries(namespace: dict, history: Any) -> Entries:
        helpers = SimpleNamespace(llm_query=None, llm_query_batched=None, rlm_query=None, rlm_query_batched=None)
        installs = Installs(helpers, context=lambda: "c", continued=history is not None)
        return Entries(SimpleNamespace(namespace=namespace), installs)

    kept = {"answer": 55}
    assert entries(kept, history=[]).restore() == [] and kept["answer"] == 55
    stale = {"answer": {"content": "old", "ready": True}}
    fresh = entries(stale, history=[])
    fresh.restore()
    assert stale["answer"] == {"content": "", "ready": False} and fresh.check_answer() == (None, None)
    new_run = {"answer": 55}
    entries(new_run, history=None).restore()
    assert new_run["answer"] == {"content": "", "ready": False}
