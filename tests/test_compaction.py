"""Long runs: the root model's history is compacted before it outgrows the
model's window, and when the provider says the window is full (engine/runs/compaction.py).
Scripted root and sub models over real HTTP; the notebook is read back
through history.rebuild and RLM.resume."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from _cli import run_args, run_cli
from _helpers import ROOT, SUB, Summaries, cells_by_role, clean_env, repl, wait_for

from rlm_kernel.engine.runs.compaction import SUMMARY_HEAD, SUMMARY_SYSTEM, read_summary
from rlm_kernel.engine.runs.history import rebuild
from rlm_kernel.engine.trajectory.sink import Sink
from rlm_kernel.testing.server import Reply

WINDOW_FULL = ("This model's maximum context length is 8192 tokens. However, your messages resulted in "
               "9001 tokens. Please reduce the length of the messages. (context_length_exceeded)")
LIMIT = 3000  # --max-history-tokens: the head is ~810 tokens, each scripted step ~650


def big_step(i: int) -> str:
    """A step whose output is ~3,000 characters (~650 tokens of feedback)."""
    return repl(f"s{i} = 'word ' * 600\nprint(s{i})")


class Notes(Sink):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, run, text: str) -> None:
        self.notes.append(text)


def root_bodies(srv) -> list[dict]:
    return [b for b in srv.calls("root-model") if b["messages"][0]["content"] != SUMMARY_SYSTEM]


def compaction_cells(nb) -> list:
    return [c for c in nb.cells if c.metadata.get("rlm", {}).get("compaction")]


def test_history_near_the_limit_is_compacted_by_the_root_model(server, make_rlm):
    script = Summaries(root=[big_step(i) for i in range(1, 6)] + ["FINAL(done)"])
    srv = server(script)
    result = make_rlm(srv, max_history_tokens=LIMIT).completion("ctx", "q")
    assert (result.reason, result.answer) == ("final", "done")

    [cell] = compaction_cells(result.notebook)
    facts = cell.metadata.rlm.compaction
    assert cell.cell_type == "markdown" and cell.metadata.rlm.role == "thought"
    assert facts["by"] == ROOT and facts["trigger"] == "limit" and facts["limit"] == LIMIT
    assert facts["tokens_before"] > LIMIT > facts["tokens_after"]
    first, last = facts["steps"]
    assert first == 1 and last >= 1
    assert cell.source.startswith(f"**History compacted**: steps 1-{last} summarised by `{ROOT}`")
    assert script.summary in cell.source
    assert facts["usage"]["model"] == ROOT and facts["usage"]["prompt_tokens"] > 0

    bodies = root_bodies(srv)
    step = cell.metadata.rlm.step
    before, after = bodies[step - 2]["messages"], bodies[step - 1]["messages"]  # requests of steps K-1 and K
    # system prompt and first user message verbatim; then the summary; then the latest steps verbatim
    assert after[:2] == before[:2]
    assert after[2]["role"] == "user" and after[2]["content"].startswith(f"{SUMMARY_HEAD}steps 1-{last} ")
    assert script.summary in after[2]["content"] and "real state" in after[2]["content"]
    kept = step - 1 - last
    assert after[3:] == before[2 + 2 * last:] + after[3 + 2 * (kept - 1):]  # the kept steps, unchanged
    assert f"s{last + 1} = 'word '" in after[3]["content"]
    assert all(f"s{i} = " not in json.dumps(after) for i in range(1, last + 1))

    # the summarising call saw the compacted steps and the query
    [asked] = script.summary_requests
    text = asked["messages"][1]["content"]
    assert "Query: q" in text and all(f"### Step {i}" in text for i in range(1, last + 1))
    assert f"### Step {last + 1}" not in text

    # the ledger holds the summary call; the status says the history was compacted
    usage = result.usage[ROOT]
    wait_for(lambda: srv.answered("root-model")["calls"] == len(srv.calls("root-model")), what="the server's ledger")
    assert usage["calls"] == len(srv.calls("root-model"))
    assert srv.answered("root-model")["prompt_tokens"] == usage["prompt_tokens"]


def test_rebuilt_history_is_the_compacted_one(server, make_rlm, tmp_path):
    script = Summaries(root=[big_step(i) for i in range(1, 7)] + ["FINAL(done)"])
    srv = server(script)
    result = make_rlm(srv, max_history_tokens=LIMIT).completion("ctx", "q", output=tmp_path / "run.ipynb")
    cells = result.notebook.cells
    bodies = root_bodies(srv)
    # rebuilt up to the cell before each step, the messages are what that step's root call sent
    for step in range(2, len(bodies) + 1):
        first_of_step = next(i for i, c in enumerate(cells)
                             if c.metadata.get("rlm", {}).get("step") == step
                             and not c.metadata.rlm.get("compaction"))
        rebuilt = rebuild(cells, first_of_step - 1, "ctx")
        assert rebuilt.messages == bodies[step - 1]["messages"], step
        assert rebuilt.next_step == step


def test_resumed_run_starts_from_the_compacted_history(server, make_rlm, tmp_path):
    script = Summaries(root=[big_step(i) for i in range(1, 6)], default_root=big_step(9))
    srv = server(script)
    path = tmp_path / "run.ipynb"
    (tmp_path / "doc.txt").write_text("ctx", encoding="utf-8")
    first = make_rlm(srv, max_history_tokens=LIMIT, max_iterations=5).completion(
        "ctx", "q", output=path, sources=[str(tmp_path / "doc.txt")])
    assert first.reason == "max_iterations"
    [cell] = compaction_cells(first.notebook)
    last = cell.metadata.rlm.compaction["steps"][1]

    script2 = Summaries(root=["FINAL(resumed)"])
    srv2 = server(script2)
    again = make_rlm(srv2, max_history_tokens=LIMIT, max_iterations=8).resume(path, output=tmp_path / "again.ipynb")
    assert (again.reason, again.answer) == ("final", "resumed")
    sent = root_bodies(srv2)[0]["messages"]
    assert read_summary(sent[2])[:2] == (1, last)
    assert script.summary in sent[2]["content"]
    assert all(f"s{i} = " not in json.dumps(sent) for i in range(1, last + 1))
    assert "s5 = 'word '" in json.dumps(sent)
    # the resumed notebook still has every cell, the compaction cell among them
    assert len(compaction_cells(again.notebook)) == 1
    assert all(f"s{i} = 'word '" in "".join(c.source for c in again.notebook.cells) for i in range(1, 6))


def test_a_second_compaction_rolls_up_the_first_summary(server, make_rlm):
    script = Summaries(root=[big_step(i) for i in range(1, 10)] + ["FINAL(done)"])
    srv = server(script)
    result = make_rlm(srv, max_history_tokens=LIMIT, max_iterations=12).completion("ctx", "q")
    assert result.reason == "final"
    cells = compaction_cells(result.notebook)
    assert len(cells) >= 2
    first, second = (c.metadata.rlm.compaction["steps"] for c in cells[:2])
    assert second[0] == 1 and second[1] > first[1]
    assert "(written earlier)" in script.summary_requests[1]["messages"][1]["content"]
    # at most one summary in what the root model reads
    final = root_bodies(srv)[-1]["messages"]
    assert sum(1 for m in final if str(m.get("content", "")).startswith(SUMMARY_HEAD)) == 1


def test_the_sub_model_can_write_the_summary(server, make_rlm):
    asked: list[str] = []

    def sub(prompt: str) -> str:
        asked.append(prompt)
        return "sub summary: s1 and s2 hold long strings"

    srv = server(root=[big_step(i) for i in range(1, 6)] + ["FINAL(done)"], sub=sub)
    result = make_rlm(srv, max_history_tokens=LIMIT, compact_with="sub").completion("ctx", "q")
    assert result.reason == "final"
    [cell] = compaction_cells(result.notebook)
    assert cell.metadata.rlm.compaction["by"] == SUB
    assert len(asked) == 1 and "### Step 1" in asked[0]
    assert "sub summary" in cell.source
    assert result.usage[SUB]["calls"] == 1


def test_context_window_exceeded_compacts_and_retries_once(server, make_rlm):
    """An unknown model (no window in litellm's map): said once, not compacted
    by guesswork, compacted when the provider refuses the prompt."""
    script = Summaries(root=[big_step(1), big_step(2), big_step(3), Reply(status=400, text=WINDOW_FULL),
                             "FINAL(after compaction)"])
    srv = server(script)
    notes = Notes()
    result = make_rlm(srv).completion("ctx", "q", sink=notes)
    assert (result.reason, result.answer) == ("final", "after compaction"), result.error
    assert len(notes.notes) == 1 and "does not know the input window of openai/root-model" in notes.notes[0]
    [cell] = compaction_cells(result.notebook)
    facts = cell.metadata.rlm.compaction
    # The refused prompt (~2.8k tokens) is all that is known of the window: two
    # kept steps would fill over 70% of it, so only the latest is kept.
    assert facts["trigger"] == "context_window" and facts["limit"] is None and facts["steps"] == [1, 2]
    bodies = root_bodies(srv)
    assert len(bodies) == 5
    refused, retried = bodies[3]["messages"], bodies[4]["messages"]
    assert len(refused) == 8 and refused[:2] == retried[:2]
    assert read_summary(retried[2])[:2] == (1, 2)
    assert retried[3:] == refused[6:]  # step 3 kept verbatim


def test_anthropic_prompt_is_too_long_compacts_too(server, make_rlm):
    """Anthropic's refusal, over its Messages API: the same compaction and retry."""
    too_long = Reply(status=400, text="prompt is too long: 210000 tokens > 200000 maximum")
    script = Summaries(root=[big_step(1), big_step(2), big_step(3), too_long, "FINAL(done)"],
                       root_models=("claude-sonnet-4-5",))
    srv = server(script)
    result = make_rlm(srv, model="anthropic/claude-sonnet-4-5").completion("ctx", "q")
    assert (result.reason, result.answer) == ("final", "done"), result.error
    [cell] = compaction_cells(result.notebook)
    assert cell.metadata.rlm.compaction["trigger"] == "context_window"
    assert len(script.summary_requests) == 1 and script.summary_requests[0]["system"]  # Anthropic's `system`


def test_a_second_context_window_refusal_ends_the_run_clearly(server, make_rlm):
    script = Summaries(root=[big_step(1), big_step(2), big_step(3), Reply(status=400, text=WINDOW_FULL),
                             Reply(status=400, text=WINDOW_FULL), "FINAL(never)"])
    srv = server(script)
    result = make_rlm(srv).completion("ctx", "q")
    assert result.reason == "error"
    assert result.error == ("The root model's context window was exceeded again after steps 1-2 were compacted "
                            "into a summary: the latest step alone is too long for openai/root-model (lower "
                            "--max-output-chars, or use a model with a larger window).")
    assert len(compaction_cells(result.notebook)) == 1
    ended = cells_by_role(result.notebook, "answer")[-1]
    assert ended.metadata.rlm.reason == "error" and "exceeded again" in ended.source
    assert len(root_bodies(srv)) == 5


def test_context_window_refusal_with_nothing_to_compact_ends_the_run(server, make_rlm):
    srv = server(Summaries(root=[big_step(1), Reply(status=400, text=WINDOW_FULL)]))
    result = make_rlm(srv).completion("ctx", "q")
    assert result.reason == "error"
    assert result.error == ("The root model's prompt is longer than openai/root-model's context window, and the "
                            "history has no earlier steps to compact (only the latest step is left).")
    assert not compaction_cells(result.notebook)


def test_a_failed_summary_leaves_the_history_whole(server, make_rlm):
    """Near the limit (not refused), a summary call that fails is said and the
    history is sent as it is."""
    srv = server(root=[big_step(i) for i in range(1, 6)] + ["FINAL(done)"],
                 sub=lambda prompt: Reply(status=400, text="bad request for the summary"))
    notes = Notes()
    result = make_rlm(srv, max_history_tokens=LIMIT, compact_with="sub").completion("ctx", "q", sink=notes)
    assert (result.reason, result.answer) == ("final", "done")
    assert not compaction_cells(result.notebook)
    assert any(n.startswith("The history could not be compacted (the summary call failed:") for n in notes.notes)
    assert len(root_bodies(srv)[-1]["messages"]) == 2 + 2 * 5


def test_a_bad_compact_with_is_refused_in_one_sentence(make_rlm, server):
    from rlm_kernel.errors import RLMError

    with pytest.raises(RLMError, match=r"^--compact-with must be root or sub, got 'both'\.$"):
        make_rlm(server(), compact_with="both")


def test_cli_says_when_the_history_was_compacted(server, tmp_path: Path):
    srv = server(Summaries(root=[big_step(i) for i in range(1, 6)] + ["FINAL(done)"]))
    (tmp_path / "doc.txt").write_text("some text")
    out = tmp_path / "run.ipynb"
    run = run_cli([*run_args(srv.url, out), "--max-history-tokens", str(LIMIT), "--json"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert "  History compacted: steps 1-" in run.stderr
    [status] = [line for line in run.stderr.splitlines() if line.startswith("RLM final")]
    assert " · history compacted · " in status
    nb = nbformat.read(str(out), as_version=4)
    assert len(compaction_cells(nb)) == 1
    assert nb.cells[1].source.splitlines()[0].endswith(f"--max-history-tokens {LIMIT}")


@pytest.mark.kernel
def test_the_rlm_cell_says_the_window_is_unknown_and_shows_the_compaction(server, tmp_path):
    """In the kernel, without the labextension: the %%rlm cell's own output
    says once that the window is unknown, and shows the compaction cell."""
    from nbclient import NotebookClient

    srv = server(Summaries(root=[big_step(1), big_step(2), big_step(3), Reply(status=400, text=WINDOW_FULL),
                                 "FINAL(after compaction)"]))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("context = 'some text'"),
        nbformat.v4.new_code_cell(f"%%rlm --model {ROOT} --sub-model {SUB} --api-base {srv.url}\nq"),
    ])
    nb.metadata["kernelspec"] = {"name": "rlm", "display_name": "RLM", "language": "python"}
    NotebookClient(nb, kernel_name="rlm", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute(
        env=clean_env())
    shown = [o.get("data", {}).get("text/markdown", "") for o in nb.cells[1].outputs]
    notes = [t for t in shown if "does not know the input window" in t]
    assert notes == ["*litellm does not know the input window of openai/root-model: its history is compacted only "
                     "if the provider says it is too long. Give --max-history-tokens to compact before that.*"]
    [compaction] = [t for t in shown if "History compacted" in t]
    assert compaction.startswith("**[step 4 · history compacted]**\n\n**History compacted**: steps 1-2 summarised")
    assert any("after compaction" in t for t in shown)
