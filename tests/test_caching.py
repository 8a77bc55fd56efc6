"""Prompt caching (engine/model/caching.py): cache breakpoints on the root model's
messages for Anthropic-style providers, and cache reads and writes counted
and priced in the ledger. Over real HTTP: litellm's ``anthropic/`` provider
to the scripted server's Messages API (testing/anthropic.py)."""

from __future__ import annotations

import json

import pytest
from _helpers import SUB, repl, wait_for

from rlm_kernel.engine.model.caching import breakpoint_indexes, wants_breakpoints, with_breakpoints
from rlm_kernel.engine.model.litellm_client import usage_counts
from rlm_kernel.engine.trajectory.sink import Sink
from rlm_kernel.sinks.display import status_line
from rlm_kernel.testing import anthropic
from rlm_kernel.testing.server import Script

CLAUDE = "anthropic/claude-sonnet-4-5"  # priced in litellm 1.106.2's cost map, cache reads and writes included


class Statuses(Sink):
    def __init__(self) -> None:
        self.seen: list[dict] = []

    def status(self, run, status) -> None:
        self.seen.append(dict(status))


def claude_run(server, make_rlm, steps: int = 3, **kwargs):
    root = [repl(f"part{i} = 'line of text ' * 80\nprint(part{i})") for i in range(1, steps + 1)] + ["FINAL(done)"]
    srv = server(Script(root=root, root_models=("claude-sonnet-4-5",)))
    statuses = Statuses()
    result = make_rlm(srv, model=CLAUDE, sub_model=SUB, **kwargs).completion("some text", "q", sink=statuses)
    return result, srv, statuses


def test_anthropic_requests_carry_breakpoints_on_the_prefix(server, make_rlm):
    result, srv, _ = claude_run(server, make_rlm)
    assert result.reason == "final"
    bodies = srv.calls("claude-sonnet-4-5")
    assert len(bodies) == 4
    for number, body in enumerate(bodies, 1):
        # the system prompt went as a block with cache_control
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        marks = anthropic.breakpoints(body)
        parts = anthropic.blocks(body)
        assert 2 <= len(marks) <= 4, (number, marks)
        assert marks[0] == 0 and marks[1] == 1  # system prompt, first user message
        assert marks[-1] == len(parts) - 1  # the newest message: this call's prefix is written there
        if number >= 3:
            # the previous call's newest message is marked again: this call reads what that one wrote
            assert marks[-2] == len(anthropic.blocks(bodies[number - 2])) - 1
    # every later call read the prefix the one before wrote
    reported = [r["usage"] for r in anthropic.state(srv).reported]
    assert reported[0]["cache_read_input_tokens"] == 0 and reported[0]["cache_creation_input_tokens"] > 0
    for before, after in zip(reported, reported[1:], strict=False):
        assert after["cache_read_input_tokens"] == before["cache_read_input_tokens"] + before["cache_creation_input_tokens"]


def test_cached_tokens_are_counted_and_priced_as_the_provider_reports(server, make_rlm):
    import litellm

    result, srv, statuses = claude_run(server, make_rlm)
    wait_for(lambda: len(anthropic.state(srv).reported) == 4, what="the server's usage records")
    sent = anthropic.state(srv).totals()
    usage = result.usage[CLAUDE]
    assert usage["cache_read_tokens"] == sent["cache_read_input_tokens"] > 0
    assert usage["cache_write_tokens"] == sent["cache_creation_input_tokens"] > 0
    assert usage["prompt_tokens"] == (sent["input_tokens"] + sent["cache_read_input_tokens"]
                                      + sent["cache_creation_input_tokens"])
    assert usage["completion_tokens"] == sent["output_tokens"]
    # the price: litellm's cost map for the real model name, each kind of token at its own rate
    info = litellm.get_model_info(CLAUDE)
    expected = (sent["input_tokens"] * info["input_cost_per_token"]
                + sent["cache_creation_input_tokens"] * info["cache_creation_input_token_cost"]
                + sent["cache_read_input_tokens"] * info["cache_read_input_token_cost"]
                + sent["output_tokens"] * info["output_cost_per_token"])
    assert info["cache_read_input_token_cost"] < info["input_cost_per_token"] < info["cache_creation_input_token_cost"]
    assert usage["cost_usd"] == pytest.approx(expected, rel=1e-9)
    # --json's usage, the run's status and its status line
    data = result.to_json()["usage"][CLAUDE]
    assert (data["cache_read_tokens"], data["cache_write_tokens"]) == (sent["cache_read_input_tokens"],
                                                                       sent["cache_creation_input_tokens"])
    last = statuses.seen[-1]
    assert last["cache_read_tokens"] == sent["cache_read_input_tokens"]
    assert last["cache_write_tokens"] == sent["cache_creation_input_tokens"]
    cached = sent["cache_read_input_tokens"]
    assert f"tok ({cached / 1000:.1f}k cached)" in status_line(last)
    # each step's first cell says what its root call read from the cache
    calls = [c.metadata.rlm["root_call"] for c in result.notebook.cells
             if c.metadata.get("rlm", {}).get("root_call")]
    assert [c.get("cache_read_tokens", 0) for c in calls] == [
        r["usage"]["cache_read_input_tokens"] for r in anthropic.state(srv).reported]


def test_openai_compatible_requests_go_without_breakpoints(run_rlm):
    result, srv = run_rlm(root=[repl("print(1)"), repl("print(2)"), "FINAL(ok)"])
    assert result.reason == "final"
    for body in srv.calls("root-model"):
        assert "cache_control" not in json.dumps(body)
        assert all(isinstance(m["content"], str) for m in body["messages"])
    assert "cache_read_tokens" not in result.notebook.metadata.rlm.runs[0]["usage"]["openai/root-model"]


def test_streamed_anthropic_usage_is_read_the_same_way(server):
    """The lead's streaming path builds a response from chunks; the usage
    helper reads its cache counts as it reads a whole response's."""
    import litellm

    srv = server(Script(root=["streamed reply"], root_models=("claude-sonnet-4-5",)))
    messages = with_breakpoints(CLAUDE, [{"role": "system", "content": "S" * 400}, {"role": "user", "content": "hi"}])
    chunks = list(litellm.completion(model=CLAUDE, api_base=srv.url, api_key="x", messages=messages, stream=True,
                                     stream_options={"include_usage": True}, max_retries=0))
    built = litellm.stream_chunk_builder(chunks)
    assert built.choices[0].message.content == "streamed reply"
    [sent] = [r["usage"] for r in anthropic.state(srv).reported]
    counts = usage_counts(built.usage)
    assert counts["cache_write_tokens"] == sent["cache_creation_input_tokens"] > 0
    assert counts["cache_read_tokens"] == 0
    assert counts["completion_tokens"] == sent["output_tokens"]


def test_usage_counts_reads_openai_cached_tokens():
    from litellm.types.utils import Usage

    usage = Usage(prompt_tokens=100, completion_tokens=7, prompt_tokens_details={"cached_tokens": 60})
    assert usage_counts(usage) == {"prompt_tokens": 100, "completion_tokens": 7, "cache_read_tokens": 60,
                                   "cache_write_tokens": 0}
    assert usage_counts({"prompt_tokens": 3, "completion_tokens": 1}) == {
        "prompt_tokens": 3, "completion_tokens": 1, "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert usage_counts(None)["prompt_tokens"] == 0


@pytest.mark.parametrize(("model", "wanted"), [
    ("anthropic/claude-sonnet-4-5", True),
    ("claude-sonnet-4-5", True),
    ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", True),
    ("vertex_ai/claude-sonnet-4-5", True),
    ("vertex_ai/gemini-2.5-pro", False),  # implicit caching; marks would make cachedContents resources
    ("gemini/gemini-2.5-pro", False),
    ("openai/gpt-4o", False),  # cached automatically
    ("openai/root-model", False),
    ("my-router-group", False),  # not a litellm name
])
def test_which_models_get_breakpoints(model, wanted):
    assert wants_breakpoints(model) is wanted


def test_breakpoints_are_at_most_four_and_leave_the_history_plain():
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    for i in range(5):
        history += [{"role": "assistant", "content": f"reply {i}"}, {"role": "user", "content": f"output {i}"}]
    assert breakpoint_indexes(history) == [0, 1, 9, 11]
    marked = with_breakpoints(CLAUDE, history)
    assert [i for i, m in enumerate(marked) if isinstance(m["content"], list)] == [0, 1, 9, 11]
    assert marked[11]["content"] == [{"type": "text", "text": "output 4", "cache_control": {"type": "ephemeral"}}]
    assert all(isinstance(m["content"], str) for m in history)  # the run's own history is untouched
    assert breakpoint_indexes(history[:2]) == [0, 1]
    assert breakpoint_indexes(history[:4]) == [0, 1, 3]
