"""The paper's protocol as text: code fences, FINAL / FINAL_VAR lines, the
head-and-tail view of outputs and the bounded capture of a cell's streams
(rlm_kernel.engine.protocol.reply and rlm_kernel.engine.execution.capture, called directly)."""

from __future__ import annotations

import pytest

from rlm_kernel.engine.execution.capture import BoundedText, CellCapture
from rlm_kernel.engine.protocol.reply import parse_reply, strip_ansi, truncate_middle


def split_reply(reply):
    return list(parse_reply(reply).segments)


def find_final(prose):
    return parse_reply(prose).final


# -- fences ---------------------------------------------------------------------


def kinds(segments):
    return [(s.kind, s.text, s.closed) for s in segments]


def test_repl_and_python_fences_become_code_in_order():
    reply = "Look first.\n```repl\nx = 1\n```\nThen more.\n```python\ny = 2\n```\nDone."
    assert kinds(split_reply(reply)) == [
        ("prose", "Look first.", True),
        ("code", "x = 1", True),
        ("prose", "Then more.", True),
        ("code", "y = 2", True),
        ("prose", "Done.", True),
    ]


def test_other_languages_stay_prose():
    reply = "Example:\n```js\nconsole.log(1)\n```\n```\nplain\n```\nend"
    segments = split_reply(reply)
    assert all(s.kind == "prose" for s in segments)
    assert "console.log(1)" in segments[0].text


def test_unclosed_fence_is_an_unclosed_code_segment():
    segments = split_reply("Starting.\n```repl\nx = 1\nprint(x)")
    assert kinds(segments) == [("prose", "Starting.", True), ("code", "x = 1\nprint(x)", False)]


def test_no_fence_is_all_prose():
    assert kinds(split_reply("Just thinking out loud.")) == [("prose", "Just thinking out loud.", True)]


def test_empty_reply_has_no_segments():
    assert split_reply("") == []
    assert split_reply("\n\n  \n") == []


def test_code_keeps_blank_lines_and_indentation():
    code = "def f(x):\n    if x:\n\n        return 1\n    return 2"
    segments = split_reply(f"```repl\n{code}\n```")
    assert segments[0].text == code


def test_longer_fence_closes_only_on_a_fence_at_least_as_long():
    reply = "````repl\nprint('```')\n```\n````"
    segments = split_reply(reply)
    assert kinds(segments) == [("code", "print('```')\n```", True)]


# -- FINAL / FINAL_VAR lines ------------------------------------------------------


def test_final_line_text():
    marker = find_final("I checked it.\nFINAL(The answer is 42)")
    assert (marker.kind, marker.value) == ("text", "The answer is 42")


def test_final_line_keeps_inner_parentheses_and_spans_lines():
    marker = find_final("FINAL(first line (a)\nsecond line (b))")
    assert marker.value == "first line (a)\nsecond line (b)"


def test_final_line_quoted_text_is_unquoted():
    assert find_final('FINAL("quoted answer")').value == "quoted answer"


def test_final_var_line():
    marker = find_final("FINAL_VAR(result)")
    assert (marker.kind, marker.value) == ("var", "result")


@pytest.mark.parametrize("prose", [
    "I will use FINAL(x) when I am done.",
    "No answer yet.",
    "The function FINAL_VAR is useful.",
])
def test_final_only_at_the_start_of_a_line(prose):
    assert find_final(prose) is None


# -- what the model sees of an output ---------------------------------------------


def test_truncate_middle_keeps_head_tail_and_counts():
    text = "H" * 1000 + "m" * 100_000 + "T" * 1000
    view = truncate_middle(text, 2000)
    assert view.startswith("H" * 1000)
    assert view.endswith("T" * 1000)
    assert "100,000 characters omitted" in view
    assert len(view) < 2100


def test_truncate_middle_leaves_short_text_alone():
    assert truncate_middle("short", 100) == "short"


def test_truncate_middle_of_a_bounded_copy_shorter_than_the_limit():
    # ``text`` is already a bounded copy (6 characters kept of 1,000,006):
    # the view must show it once, not its head and then an overlapping tail.
    view = truncate_middle("abcdef", 100, total=1_000_006)
    assert view.count("abcdef") == 1, view
    assert "1,000,000 characters omitted" in view


def test_strip_ansi():
    assert strip_ansi("\x1b[31mred\x1b[0m plain") == "red plain"


# -- bounded capture ------------------------------------------------------------


def test_bounded_text_keeps_head_and_rolling_tail():
    buffer = BoundedText(100, 100)
    buffer.write("HEAD" + "x" * 96)
    for _ in range(10_000):
        buffer.write("y" * 1000)
    buffer.write("z" * 96 + "TAIL")
    value = buffer.value()
    assert buffer.total == 100 + 10_000_000 + 100
    assert value.startswith("HEAD")
    assert value.endswith("TAIL")
    assert len(value) < 300
    assert "10,000,000 characters omitted" in value


def test_cell_capture_bounds_stored_streams_and_model_view():
    capture = CellCapture(max_stored_chars=10_000)
    capture.stream("stdout", "BEGIN")
    for _ in range(1000):
        capture.stream("stdout", "." * 10_000)
    capture.stream("stdout", "END")
    outputs = capture.outputs()
    assert len(outputs) == 1 and outputs[0]["name"] == "stdout"
    assert len(outputs[0]["text"]) < 11_000
    view, total = capture.model_view(2_000)
    assert total == 10_000_008
    assert view.startswith("BEGIN") and view.endswith("END")
    assert len(view) < 2_100


def test_cell_capture_keeps_output_order_and_errors():
    capture = CellCapture()
    capture.stream("stdout", "one\n")
    capture.display({"text/plain": "shown"})
    capture.stream("stdout", "two\n")
    capture.error("ValueError", "bad", ["Traceback (most recent call last):", "ValueError: bad"])
    outputs = capture.outputs()
    assert [o["output_type"] for o in outputs] == ["stream", "display_data", "stream", "error"]
    view, _ = capture.model_view(10_000)
    assert view.index("one") < view.index("shown") < view.index("two") < view.index("ValueError: bad")


def test_feedback_counts_characters_in_the_singular_and_plural() -> None:
    from rlm_kernel.engine.protocol.reply import cell_feedback

    assert "(1 character)" in cell_feedback(3, "ok", "x", 1)
    assert "(1,200 characters)" in cell_feedback(3, "ok", "x" * 10, 1200)
