"""Rebuilding a run's message history from its notebook as edited by a person."""

from __future__ import annotations

import copy

import pytest
from _helpers import repl

from rlm_kernel.engine.runs.history import find_query_cell, rebuild
from rlm_kernel.engine.runs.options import parse_query_cell
from rlm_kernel.testing.server import Script

STEPS = [
    "First I look.\n" + repl("print(len(context))"),
    "Now the words.\n" + repl("words = context.split()\nprint(len(words))"),
    repl("result = str(len(words))") + "\nFINAL_VAR(result)",
]


@pytest.fixture
def notebook(server, make_rlm):
    srv = server(Script(root=list(STEPS)))
    result = make_rlm(srv).completion("alpha beta gamma " * 10, "How many words?")
    assert result.reason == "final"
    return result.notebook


def _roles(cells):
    return [(c.get("metadata") or {}).get("rlm", {}).get("role") for c in cells]


def test_parse_query_cell():
    # typed run options; flags that are not run options (--json here) are left out
    query, options = parse_query_cell("%%rlm --model openai/x --max-iterations 5 --json\nHow many?\nReally.")
    assert query == "How many?\nReally."
    assert options == {"model": "openai/x", "max_iterations": 5}


def test_unchanged_notebook_rebuilds_the_conversation_the_model_had(notebook):
    cells = notebook.cells
    last_code = max(i for i, c in enumerate(cells) if _roles([c])[0] == "code")
    rebuilt = rebuild(cells, last_code, "alpha beta gamma " * 10)
    messages = rebuilt.messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user",
                                             "assistant", "user"]
    assert "How many words?" in messages[1]["content"]
    assert "alpha beta" not in messages[1]["content"]  # the context itself never goes in
    assert messages[2]["content"].startswith("First I look.") and "```repl\nprint(len(context))\n```" in messages[2]["content"]
    assert "170" in messages[3]["content"]  # what the first cell printed
    assert "30" in messages[5]["content"]
    assert rebuilt.next_step == 4
    assert rebuilt.query == "How many words?"
    assert find_query_cell(cells, last_code) == rebuilt.query_index


def test_edited_code_and_its_new_output_are_what_the_model_sees(notebook):
    cells = copy.deepcopy(notebook.cells)
    code = [c for c in cells if _roles([c])[0] == "code"][1]
    code.source = "words = context.split()[:3]\nprint(len(words))"
    code.outputs = [{"output_type": "stream", "name": "stdout", "text": "3\n"}]
    index = cells.index(code)
    rebuilt = rebuild(cells, index, "ctx")
    assert "context.split()[:3]" in rebuilt.messages[-2]["content"]
    assert rebuilt.messages[-1]["content"].startswith("Cell [")
    assert rebuilt.messages[-1]["content"].endswith("\n3") and "30" not in rebuilt.messages[-1]["content"]


def test_deleted_markdown_is_gone_and_human_cells_are_interventions(notebook):
    cells = copy.deepcopy(notebook.cells)
    thoughts = [c for c in cells if _roles([c])[0] == "thought"]
    cells.remove(thoughts[1])  # "Now the words." deleted by the person
    first_code = next(i for i, c in enumerate(cells) if _roles([c])[0] == "code")
    human = {"cell_type": "code", "id": "human1", "metadata": {}, "execution_count": 9,
             "source": "hint = 'count unique words'", "outputs": []}
    note = {"cell_type": "markdown", "id": "human2", "metadata": {}, "source": "Please count unique words."}
    cells[first_code + 1:first_code + 1] = [human, note]
    upto = max(i for i, c in enumerate(cells) if _roles([c])[0] == "code")
    rebuilt = rebuild(cells, upto, "ctx")
    text = "\n".join(m["content"] for m in rebuilt.messages)
    assert "Now the words." not in text
    assert "The user stepped in and ran this cell" in text and "hint = 'count unique words'" in text
    assert "The user wrote a note:\nPlease count unique words." in text
    assert rebuilt.interventions == 2
    roles = [m["role"] for m in rebuilt.messages]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles  # user and assistant alternate


def test_superseded_cells_are_skipped(notebook):
    cells = copy.deepcopy(notebook.cells)
    codes = [c for c in cells if _roles([c])[0] == "code"]
    codes[1].metadata["rlm"]["superseded"] = True
    rebuilt = rebuild(cells, cells.index(codes[2]), "ctx")
    text = "\n".join(m["content"] for m in rebuilt.messages)
    assert "words = context.split()" not in text
    assert "result = str(len(words))" in text


def test_no_query_cell_above_is_an_error():
    cells = [{"cell_type": "code", "id": "a", "metadata": {}, "source": "x = 1", "outputs": [],
              "execution_count": 1}]
    with pytest.raises(ValueError, match="no %%rlm cell"):
        rebuild(cells, 0, "ctx")


def test_two_runs_under_one_query_rebuild_the_run_of_the_chosen_cell(notebook):
    """After ``%%rlm --fresh`` the newer run's cells sit right below the query,
    the older run's below them: continuing from a cell of the older run
    rebuilds that run only (the newer run's cells are not the user's
    interventions), and a person's cell among the older run's cells is."""
    cells = copy.deepcopy(notebook.cells)
    query = find_query_cell(cells, len(cells) - 1)
    old_run = cells[query + 1].metadata["rlm"]["run_id"]
    cells[query].metadata.get("rlm", {}).pop("run_id", None)  # a live %%rlm cell records no run id
    newer = []
    for cell in copy.deepcopy(cells[query + 1:]):
        cell.id = "new-" + cell.id
        cell.metadata["rlm"]["run_id"] = "newer-run"
        cell.source = cell.source.replace("context", "NEWER_RUN_CODE")
        newer.append(cell)
    cells[query + 1:query + 1] = newer
    old_codes = [i for i, c in enumerate(cells) if _roles([c])[0] == "code"
                 and c.metadata["rlm"]["run_id"] == old_run]
    human = {"cell_type": "code", "id": "human1", "metadata": {}, "execution_count": 9,
             "source": "hint = 'a person ran this'", "outputs": []}
    cells.insert(old_codes[0] + 1, human)
    upto = old_codes[1] + 1  # the older run's second code cell (after the inserted human cell)
    rebuilt = rebuild(cells, upto, "ctx")
    text = "\n".join(m["content"] for m in rebuilt.messages)
    assert rebuilt.run_id == old_run
    assert "NEWER_RUN_CODE" not in text, "the newer run's cells leaked into the older run's history"
    assert text.count("The user stepped in") == 1 and "hint = 'a person ran this'" in text
    assert "words = context.split()" in text and rebuilt.interventions == 1
    assert rebuilt.next_step == 3
    # a person's cell right after the older run's cells belongs to that run too
    assert rebuild(cells, old_codes[0] + 1, "ctx").run_id == old_run
    # from a cell of the newer run, the newer run
    newer_code = next(i for i, c in enumerate(cells) if c.id.startswith("new-") and _roles([c])[0] == "code")
    again = rebuild(cells, newer_code, "ctx")
    assert again.run_id == "newer-run" and "NEWER_RUN_CODE" in "\n".join(m["content"] for m in again.messages)
