"""The answer cell keeps the answer as written: Markdown rendered, one line
of plain text quoted, several lines preformatted (every line break kept);
exports read the exact answer back."""

from __future__ import annotations

import pytest
from _helpers import cells_by_role, repl

from rlm_kernel.engine.trajectory.writing import (
    ANSWER_PREVIEW_CHARS,
    answer_from_markdown,
    answer_markdown,
)
from rlm_kernel.export.runs import read_runs


@pytest.mark.parametrize("answer, how, shown", [
    ("42", "quoted", "> 42"),
    ("first line\nsecond line\n\nfourth line", "preformatted", "```text\nfirst line\nsecond line\n\nfourth line\n```"),
    ("## Findings\n- one\n- two", "markdown", "## Findings\n- one\n- two"),
    ("The **short** answer", "markdown", "The **short** answer"),
    ("a ```fenced``` word\nand more", "preformatted", "````text\na ```fenced``` word\nand more\n````"),
])
def test_answer_markdown_keeps_the_answer_as_written(answer, how, shown):
    assert answer_markdown(answer) == (how, shown)
    assert answer_from_markdown(shown, how) == answer


def test_an_old_quoted_answer_still_reads_back():
    assert answer_from_markdown("> one\n>\n> two", None) == "one\n\ntwo"


def test_a_multi_line_answer_keeps_its_line_breaks_in_the_notebook_and_exports(run_rlm):
    text = "Genesis 1:1 In the beginning\nGenesis 1:2 And the earth\nGenesis 1:3 And God said"
    result, _ = run_rlm(root=[repl(f"verses = {text!r}"), "FINAL_VAR(verses)"])
    assert result.reason == "final" and result.answer == text
    cell = cells_by_role(result.notebook, "answer")[0]
    assert cell.metadata.rlm.answer_format == "preformatted"
    assert "```text\n" + text + "\n```" in cell.source
    (run,) = read_runs(result.notebook, "run.ipynb")
    assert run.answer == text


def test_a_long_answer_says_what_the_cell_leaves_out_outside_its_text(run_rlm):
    result, _ = run_rlm(root=[repl("big = 'line\\n' * 3000"), "FINAL_VAR(big)"])
    cell = cells_by_role(result.notebook, "answer")[0]
    assert cell.source.rstrip().endswith("more characters in `big`*")
    assert cell.source.count("```") == 2  # the note is not inside the preformatted block
    (run,) = read_runs(result.notebook, "run.ipynb")
    assert run.answer == ("line\n" * 3000)[:ANSWER_PREVIEW_CHARS].rstrip("\n")


def test_a_run_without_an_answer_says_how_it_ended(run_rlm):
    result, _ = run_rlm(root=[repl("x = 1")] * 3, max_iterations=2)
    cell = cells_by_role(result.notebook, "answer")[0]
    assert cell.metadata.rlm.reason == "max_iterations"
    assert cell.source.startswith("**Run ended without an answer**")
