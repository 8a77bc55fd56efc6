"""JSON steps: a root model named in RLM_JSON_STEPS is asked for a JSON step
(``response_format`` with the schema, which a llama.cpp server enforces) and
its reply becomes protocol text; sub-calls and other models are untouched."""

from __future__ import annotations

import json

from _helpers import ROOT, cells_by_role

from rlm_kernel.engine.protocol.json_steps import (
    CUT_OFF,
    NOT_A_STEP,
    NOT_JSON,
    STEP_SCHEMA,
    step_text,
)
from rlm_kernel.engine.protocol.reply import parse_reply


def split_reply(text):
    return list(parse_reply(text).segments)


def step(thought: str = "", code: str = "", final: str | None = None) -> str:
    return json.dumps({"thought": thought, "code": code, "final": final})


def test_a_step_becomes_prose_a_repl_block_and_a_final_line():
    text = step("Look first.", "print(len(context))", "about 42")
    segments = split_reply(step_text(text))
    assert [s.kind for s in segments] == ["prose", "code", "prose"]
    assert segments[0].text == "Look first."
    assert segments[1].text == "print(len(context))"
    assert parse_reply(segments[2].text).final.value == "about 42"


def test_fences_the_model_wrote_inside_its_code_are_dropped():
    text = step("", "```python\nx = 1\n```\nprint(x)\n~~~")
    assert [(s.kind, s.text) for s in split_reply(step_text(text))] == [("code", "x = 1\nprint(x)")]


def test_empty_parts_and_a_null_final_leave_nothing_behind():
    assert step_text(step("  ", "\n", None)) == ""
    assert step_text(step("only a thought")) == "only a thought"
    assert "FINAL" not in step_text(step("t", "x = 1", None))


def test_a_reply_that_is_not_json_is_kept_as_it_is():
    # a server that ignored the schema: the reply may be protocol text
    for raw in ("plain text\n```repl\nx = 1\n```", '"a string"', ""):
        assert step_text(raw) == raw


# Replies SmolLM2-135M sent to the bundled llama.cpp server under the grammar
# (collected with tests/smoke's model): its strings hold raw line breaks,
# which JSON forbids, so a strict reader failed and the whole JSON went into
# the thought cell.
REAL_REPLIES = [
    '{ "thought" : "}\n```python\nimport re\ndef get_lines(text):\n    lines = []\n    for char in '
    'text.encode(", "code":"", "final": "" } ',
    '{ "thought": ",<time>,", "code": "Python: 1.0.2 (default/67.4KB) \nMon Oct 31 19:58:03 CEST 2023 '
    '</time><time> Python 3.11.3</time>" ,"final": ",<error>Python 2.6.2 (default/7.1KB) \nMon Aug  14 '
    '09:58:42 CEST 2023 </time><error>TypeError: unhashable type \'str\'</error>" }',
    '{"thought" :"python", "code": "The answer is: {0} ({1})", "final": "When the light of understanding '
    'has come to me, I am now one with my fellow soldiers."}',
    '{ "thought": "When looking at `context`, I found 16,380 lines that mention a cat." , "code" : "The last '
    'line" , "final" : "The current output is: \'The last line\' is returned from return." }',
]


def _no_json(text: str) -> None:
    assert '"thought"' not in text and '"code"' not in text and '"final"' not in text, text
    assert not text.lstrip().startswith("{"), text


def test_the_real_model_s_replies_become_prose_code_and_final_never_raw_json():
    texts = [step_text(raw) for raw in REAL_REPLIES]
    for text in texts:
        _no_json(text)
    # raw line breaks inside strings are read as the line breaks they are
    assert [s.kind for s in split_reply(texts[1])] == ["prose", "code", "prose"]
    assert split_reply(texts[1])[1].text == "Python: 1.0.2 (default/67.4KB) \nMon Oct 31 19:58:03 CEST 2023 " \
        "</time><time> Python 3.11.3</time>"
    assert parse_reply(texts[1]).final is None  # beside code a FINAL is not taken, as for any reply
    assert split_reply(texts[2])[0].text == "python"
    assert split_reply(texts[3])[0].text == "When looking at `context`, I found 16,380 lines that mention a cat."


def test_only_the_code_field_runs_a_fence_or_final_in_the_thought_only_shows():
    # the first real reply put a ```python fence (and half its code) in the thought
    text = step_text(REAL_REPLIES[0])
    reply = parse_reply(text)
    assert [s.kind for s in reply.segments] == ["prose"], reply.segments
    assert reply.segments[0].text.splitlines()[:3] == ["}", "\\```python", "import re"]
    answer = step_text(step("I think\nFINAL(a guess)\n~~~repl\nx = 1\n~~~"))
    assert parse_reply(answer).final is None and [s.kind for s in split_reply(answer)] == ["prose"]


def test_a_final_the_final_line_would_misread_is_given_exactly():
    for final in ("a) b", "(x", "ends with (", "two\nlines (one)"):
        text = step_text(step("Done.", "", final))
        segments = split_reply(text)
        if parse_reply(f"FINAL({final})").final is not None and parse_reply(f"FINAL({final})").final.value == final:
            assert parse_reply(text).final.value == final
        else:
            # FINAL called in a repl block with the text as a string: the answer is exactly it
            assert [s.kind for s in segments] == ["prose", "code"], segments
            assert segments[1].text == f"FINAL({final!r})"


def test_json_that_is_not_a_step_says_so_in_one_sentence():
    for raw in ("[1, 2]", '{"answer": 42}', "{}"):
        assert step_text(raw) == NOT_A_STEP
    assert NOT_A_STEP.count(".") == 1


def test_a_cut_off_step_shows_its_thought_so_far_and_runs_nothing():
    raw = '{"thought": "Count the lines.\\nThen \\"answer\\".", "code": "print(len(context.splitlines()))'
    text = step_text(raw)
    assert text == 'Count the lines.\nThen "answer".\n\n' + CUT_OFF
    assert [s.kind for s in split_reply(text)] == ["prose"]
    assert step_text('{"thought": "cut off') == "cut off\n\n" + CUT_OFF
    assert step_text('{ "code": "x = 1"') == CUT_OFF
    assert step_text("{not json at all") == NOT_JSON


def test_a_streamed_prefix_shows_the_thought_so_far_and_no_sentence():
    full = step("Look first, then count.", "print(len(context))", None)
    shown = [step_text(full[:n], partial=True) for n in range(1, len(full))]
    for text in shown:
        _no_json(text)
        assert CUT_OFF not in text and all(s.kind == "prose" for s in split_reply(text)), text
    assert "Look first, then count." in shown
    assert step_text(full, partial=True) == step_text(full)


def test_root_calls_of_a_named_model_ask_for_json_steps(run_rlm, monkeypatch):
    monkeypatch.setenv("RLM_JSON_STEPS", f"other/model, {ROOT}")
    result, srv = run_rlm(
        root=[step("Ask a sub-model.", "note = llm_query('hello')\nprint(note)"),
              step("Done.", "", "the note says hi")],
        sub=lambda prompt: f"echo {prompt}",
    )
    assert result.reason == "final" and result.answer == "the note says hi"
    for body in srv.calls("root-model"):
        assert body["response_format"] == {"type": "json_object", "schema": STEP_SCHEMA}
    subcalls = srv.calls("sub-model")
    assert subcalls and all("response_format" not in body for body in subcalls)
    code = cells_by_role(result.notebook, "code")
    assert [c.source for c in code] == ["note = llm_query('hello')\nprint(note)"]
    # the model's history holds the protocol text, not the JSON
    history = srv.calls("root-model")[1]["messages"]
    assert history[-2]["content"].startswith("Ask a sub-model.\n\n```repl\n")


def test_other_models_get_no_response_format(run_rlm, monkeypatch):
    monkeypatch.setenv("RLM_JSON_STEPS", "openai/smollm2")
    result, srv = run_rlm(root=["FINAL(" + step() + ")"])
    assert result.reason == "final"
    assert all("response_format" not in body for body in srv.calls())


def test_a_run_on_the_real_model_s_shapes_shows_prose_and_says_what_it_could_not_read(run_rlm, monkeypatch):
    monkeypatch.setenv("RLM_JSON_STEPS", ROOT)
    result, srv = run_rlm(root=[
        REAL_REPLIES[0],  # a fence in the thought, nothing else
        '{"thought": "Counting.\nLines first.", "code": "n = len(context.split())\nprint(n)", "final": null}',
        "[1, 2]",
        '{"thought": "Out of tokens before the end',
        step("Done.", "", "3 words"),
    ], context="one two three")
    assert result.reason == "final" and result.answer == "3 words"
    thoughts = [c.source for c in cells_by_role(result.notebook, "thought")]
    for thought in thoughts:
        _no_json(thought)
    assert "Counting.\nLines first." in thoughts and NOT_A_STEP in thoughts
    assert f"Out of tokens before the end\n\n{CUT_OFF}" in thoughts
    code = cells_by_role(result.notebook, "code")
    assert [c.source for c in code] == ["n = len(context.split())\nprint(n)"]

