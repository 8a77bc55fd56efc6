"""JSON steps: a root model named in RLM_JSON_STEPS is asked for a JSON step
(``response_format`` with the schema, which a llama.cpp server enforces) and
its reply becomes protocol text; sub-calls and other models are untouched."""

from __future__ import annotations

import json

from _helpers import ROOT, cells_by_role

from rlm_kernel.engine.json_steps import STEP_SCHEMA, step_text
from rlm_kernel.engine.protocol import parse_reply


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


def test_anything_but_a_json_object_is_kept_as_it_is():
    for raw in ("plain text\n```repl\nx = 1\n```", '{"thought": "cut off', "[1, 2]", '"a string"', ""):
        assert step_text(raw) == raw


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
