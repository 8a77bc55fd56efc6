"""Streaming root replies (docs/guide/notebook.md, "Streaming"): the reply is read as the
scripted server writes it, token by token, with a time to first token;
a code block runs once its closing fence has arrived while the model is
still writing; drafts reach the sinks; a broken stream is retried or kept;
the notebook is the same as without streaming."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from _helpers import cell_text, cells_by_role, feedback_after, repl

from rlm_kernel.engine.steps.reply_stream import plan_cells
from rlm_kernel.engine.trajectory.sink import Sink
from rlm_kernel.testing.server import Reply, Script

TAIL = " and the model keeps writing about what it will do next" * 6  # ~55 tokens


class Heard(Sink):
    """What a run told its sinks about streaming (a test's ears, not a stand-in)."""

    def __init__(self) -> None:
        self.progress: list[Any] = []
        self.statuses: list[dict[str, Any]] = []
        self.updated: list[str] = []
        self.added: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def reply_progress(self, run: Any, progress: Any) -> None:
        with self.lock:
            self.progress.append((time.monotonic(), progress))

    def status(self, run: Any, status: dict[str, Any]) -> None:
        with self.lock:
            self.statuses.append(dict(status))

    def cell_updated(self, run: Any, cell: Any) -> None:
        self.updated.append(cell.id)

    def cell_added(self, run: Any, cell: Any, after: str | None) -> None:
        self.added.append((time.monotonic(), cell.id))


@pytest.fixture
def run_heard(server, make_rlm):
    """``result, srv, heard = run_heard(root=[...], **rlm_kwargs)``: a run whose sinks include a :class:`Heard`."""

    def run(*, root: Any, sub: Any = None, **kwargs: Any) -> tuple[Any, Any, Heard]:
        srv = server(root=root, sub=sub)
        heard = Heard()
        result = make_rlm(srv, **kwargs).completion("some context text", "What is in it?", sink=heard)
        return result, srv, heard

    return run


def _ran_at(cell: Any) -> float:
    match = re.search(r"ran at (\d+\.\d+)", cell_text(cell))
    assert match, cell_text(cell)
    return float(match.group(1))


def test_a_code_block_runs_once_its_fence_closes_while_the_model_writes_on(run_rlm):
    # 60 tokens/s: the ~60 tokens after the block take about a second more.
    step = Reply(text=repl("import time\nprint('ran at', time.time())", "Look first.") + "\n\nThen" + TAIL
                 + "\n" + repl("print('second block')"), ttft=0.3, tokens_per_s=60)
    sent: list[float] = []

    def root(body: dict[str, Any]) -> Reply:
        sent.append(time.time() + step.generation_s())  # when the server will have sent the last token
        return step

    # The first reply of a model without a reasoning field waits (see the next test); the second runs early.
    result, srv = run_rlm(root=[repl("pass"), root, "FINAL(done)"], model="openai/root-model-early")
    assert result.answer == "done"
    body = srv.calls("root-model-early")[1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    first, second = cells_by_role(result.notebook, "code")[1:]
    assert _ran_at(first) < sent[0] - 0.5, "the first block waited for the whole reply"
    assert "second block" in cell_text(second)
    # usage from the stream's last chunk, on the step's first cell, as without streaming
    usage = cells_by_role(result.notebook, "thought")[0].metadata.rlm.root_call
    assert usage["completion_tokens"] == srv.answers[1][2] and usage["prompt_tokens"] == srv.answers[1][1]
    ledger = result.usage["openai/root-model-early"]
    assert ledger["prompt_tokens"] == srv.answered("root-model-early")["prompt_tokens"]
    assert ledger["completion_tokens"] == srv.answered("root-model-early")["completion_tokens"]


def test_a_models_first_reply_runs_early_only_with_a_reasoning_field(run_rlm):
    def step(reasoning: str | None) -> Any:
        reply = Reply(text=repl("import time\nprint('ran at', time.time())") + "\n" + TAIL, reasoning=reasoning,
                      tokens_per_s=60)

        def root(body: dict[str, Any]) -> Reply:
            sent.append(time.time() + reply.generation_s())
            return reply
        return root

    sent: list[float] = []
    plain, _ = run_rlm(root=[step(None), "FINAL(x)"], model="openai/root-model-plain")
    assert _ran_at(cells_by_role(plain.notebook, "code")[0]) >= sent[0] - 0.1, "ran before a bare </think> was ruled out"
    reasoned, _ = run_rlm(root=[step("I will time it."), "FINAL(x)"], model="openai/root-model-reasons")
    assert _ran_at(cells_by_role(reasoned.notebook, "code")[0]) < sent[1] - 0.5


def _shape(nb: Any) -> list[tuple[Any, ...]]:
    rows = []
    for cell in nb.cells:
        meta = dict(cell.metadata.get("rlm", {}))
        if meta.get("role") == "query":  # its flags differ: --no-stream, the server's port
            continue
        keep = {k: meta[k] for k in ("role", "step", "status", "thinking") if k in meta}
        keep["root_call"] = sorted((meta.get("root_call") or {}).keys())
        outputs = [o.get("text", o.get("data", {}).get("text/plain")) for o in cell.get("outputs", [])]
        rows.append((cell.cell_type, cell.source, keep, outputs))
    return rows


MESSY = [
    Reply(text="<think>plan: count words</think>Counting.\n" + repl("n = len(context.split())\nprint(n)")
          + "\nMore prose after the code.\n```python\n# an example, runs too\nprint('example')\n```\n",
          ttft=0.05, tokens_per_s=2000),
    Reply(text="Done.\n\nFINAL_VAR(n)\n\nHope that helps!", reasoning="I have n.", tokens_per_s=2000),
]


def test_the_notebook_is_the_same_with_and_without_streaming(run_rlm):
    streamed, _ = run_rlm(root=list(MESSY))
    whole, srv = run_rlm(root=list(MESSY), no_stream=True)
    assert "stream" not in srv.calls("root-model")[0]
    assert streamed.answer == whole.answer == 3
    assert _shape(streamed.notebook) == _shape(whole.notebook)


def test_the_status_drops_the_root_phase_once_the_reply_has_ended(run_heard):
    """The step still runs the reply's code (a sub-call of a second), but the
    root model is no longer at work: the status no longer says it writes."""
    reply = Reply(text="One slow question.\n" + repl("r = llm_query('slow one')\nprint(r)"), tokens_per_s=400)
    result, _, heard = run_heard(root=[reply, "FINAL(ok)"], sub=lambda prompt: Reply(text="late", delay=1.0))
    assert result.reason == "final"
    during = [s for s in heard.statuses if s.get("iteration") == 1 and s.get("root")]
    assert during, "no status while step 1's root call ran"
    after = [s for s in heard.statuses if s.get("iteration") == 1 and s.get("subcalls") == 1
             and not s.get("subcalls_running")]  # the sub-call has come back, a second after the reply ended
    assert after and all(s.get("root") is None for s in after), after


def test_drafts_reach_the_sinks_and_keep_their_ids_as_cells(run_heard):
    # A reasoning field: the code may run before the reply ends, so the cells come before the usage.
    reply = Reply(text="Some prose that streams in." + TAIL + "\n" + repl("x = 1  #" + TAIL + "\nprint(x)") + "\n" + TAIL,
                  reasoning="Plan it.", tokens_per_s=50)  # the prose ~1.2 s: many drafts at any load
    result, _, heard = run_heard(root=[reply, "FINAL(ok)"])
    drafts = [d for _, p in heard.progress for d in p.drafts]
    assert drafts, "no draft was shown while the reply streamed"
    thought = cells_by_role(result.notebook, "thought")[0]
    code = cells_by_role(result.notebook, "code")[0]
    sources = [d.source for d in drafts if d.id == thought.id]
    assert len(sources) > 3 and sources[-1] == thought.source and len(sources[0]) < len(sources[-1])
    assert any(d.id == code.id and d.kind == "code" for d in drafts), "the code cell was never a draft"
    assert not [i for _, p in heard.progress for i in p.dropped], "a draft was taken back"
    assert heard.updated[:1] == [thought.id], "the first cell did not get the root call's usage"


def test_a_reply_that_breaks_off_before_any_code_ran_is_retried_without_duplicates(run_heard):
    good = "Starting over.\n" + repl("print('once')")
    broken = Reply(text="A first try that breaks" + TAIL + "\n```repl\nprint('never')", break_after=120,
                   tokens_per_s=400)
    result, srv, heard = run_heard(root=[broken, Reply(text=good, tokens_per_s=400), "FINAL(ok)"],
                                   retry_base_delay=0.01)
    assert result.answer == "ok"
    assert len(srv.calls("root-model")) == 3  # the broken try, its retry, the answer
    texts = [cell_text(c) for c in result.notebook.cells]
    assert not any("first try" in t or "never" in t for t in texts), texts
    assert sum("once" in t for t in texts) >= 1
    dropped = [i for _, p in heard.progress for i in p.dropped]
    shown = {d.id for _, p in heard.progress for d in p.drafts}
    assert dropped and set(dropped) <= shown
    assert not set(dropped) & {c.id for c in result.notebook.cells}


@pytest.mark.parametrize("cleanly", [False, True], ids=["connection-dropped", "ended-without-finish-reason"])
def test_a_reply_that_breaks_off_after_its_code_ran_is_kept_and_the_model_told(run_rlm, cleanly):
    # A reasoning field lets the first block run before the reply ends; ~60 tokens come between it and the break.
    # Cleanly: the body ends there with neither a finish reason nor [DONE]; litellm makes up a "stop" for it,
    # which must not read as a whole reply.
    text = (repl("print('ran before the break')", "First.") + "\nNow a second block," + TAIL
            + ":\n```repl\nprint('cut'")
    broken = Reply(text=text + TAIL, reasoning="Run it.", break_after=len(text) - 4, break_cleanly=cleanly,
                   tokens_per_s=150)
    result, srv = run_rlm(root=[broken, "FINAL(ok)"])
    assert result.answer == "ok"
    assert len(srv.calls("root-model")) == 2, "a reply whose code had run was sent again"
    codes = cells_by_role(result.notebook, "code")
    assert "ran before the break" in cell_text(codes[0])
    assert codes[1].metadata.rlm.status == "skipped"
    feedback = feedback_after(srv, 1)
    assert "broke off after" in feedback and "ran before the break" in feedback
    assert ("no finish reason" in feedback) == cleanly, feedback


def test_a_stream_that_ends_without_a_finish_reason_broke_off_and_is_retried(run_rlm):
    # The stream ends cleanly mid-block with no finish reason; litellm makes up a "stop" for it. Read as whole, the
    # model was told its fence was never closed and lost a step; the reply was cut, so it is retried.
    text = "A first try" + TAIL + "\n```repl\nprint('never')\n```\n"
    cut = Reply(text=text, break_after=len(text) - 12, break_cleanly=True, tokens_per_s=400)
    result, srv = run_rlm(root=[cut, Reply(text=repl("print('once')"), tokens_per_s=400), "FINAL(ok)"],
                          retry_base_delay=0.01)
    assert result.answer == "ok"
    assert len(srv.calls("root-model")) == 3  # the cut try, its retry, the answer
    texts = [cell_text(c) for c in result.notebook.cells]
    assert not any("first try" in t or "never" in t for t in texts), texts
    assert [c.metadata.rlm.status for c in cells_by_role(result.notebook, "code")] == ["ok"]
    assert "never closed" not in feedback_after(srv, 1)


def test_a_streamed_run_counts_and_prices_exactly_as_a_whole_one(server, make_rlm):
    # gpt-4o-mini is in litellm's local cost map; the scripted server plays it. The streamed reply is put back
    # together from its text and last chunk's usage: the ledger must not tell the difference.
    script = [Reply(text=repl("print(6 * 7)"), reasoning="Think first."), "FINAL(42)"]
    usages = []
    for no_stream in (False, True):
        srv = server(Script(root=list(script), root_models=("gpt-4o-mini",)))
        result = make_rlm(srv, model="openai/gpt-4o-mini", sub_model="openai/gpt-4o-mini",
                          no_stream=no_stream).completion("some context text", "What is in it?")
        assert result.answer == "42"
        usages.append(result.usage["openai/gpt-4o-mini"])
    streamed, whole = usages
    assert streamed["cost_usd"] and streamed["cost_usd"] == pytest.approx(whole["cost_usd"], rel=1e-9)
    assert (streamed["prompt_tokens"], streamed["completion_tokens"]) == (whole["prompt_tokens"],
                                                                          whole["completion_tokens"])


def test_litellm_callbacks_a_person_set_still_hear_each_streamed_reply_whole(run_rlm):
    # Without callbacks the engine stops reading at the usage that follows the finish reason (litellm would only
    # put the reply together again for them); with one set, it reads to the end and the callback gets every reply.
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    class Heard(CustomLogger):
        def __init__(self) -> None:
            super().__init__()
            self.replies: list[str] = []

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            self.replies.append(response_obj.choices[0].message.content)

    heard = Heard()
    litellm.callbacks = [heard]
    try:
        result, _srv = run_rlm(root=[repl("print(6 * 7)"), "FINAL(42)"])
        deadline = time.monotonic() + 10  # litellm calls it from a task after the stream's end
        while len(heard.replies) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        litellm.callbacks = []
    assert result.answer == "42"
    assert heard.replies[:2] == [repl("print(6 * 7)"), "FINAL(42)"]


def test_a_stream_of_usage_alone_is_an_empty_reply_and_the_run_goes_on(run_rlm):
    result, srv = run_rlm(root=[Reply(empty_choices=True), "FINAL(ok)"])
    assert result.answer == "ok" and len(srv.calls("root-model")) == 2
    assert cells_by_role(result.notebook, "thought")[0].source == "*(empty reply)*"
    assert "no ```repl code block" in feedback_after(srv, 1)


def test_a_body_that_is_no_stream_at_all_is_retried(run_rlm):
    cut = Reply(raw_body=b'{"id": "x", "object": "chat.completion", "choices": [{"message": ')
    result, srv = run_rlm(root=[cut, "FINAL(ok)"])
    assert result.answer == "ok" and len(srv.calls("root-model")) == 2
    assert result.usage["openai/root-model"]["calls"] == 1


def test_a_stream_that_ends_without_done_ends_normally(run_rlm):
    result, srv = run_rlm(root=[Reply(text=repl("print(21 * 2)"), no_done=True), Reply(text="FINAL(42)", no_done=True)])
    assert (result.reason, result.answer) == ("final", "42")
    assert len(srv.calls("root-model")) == 2


def test_code_that_a_later_bare_close_may_turn_into_thinking_waits_for_the_whole_reply(run_rlm):
    # No reasoning field: a bare </think> later makes everything before it thinking.
    text = "Let me try\n" + repl("ran_early = True") + "\nhmm, no." + TAIL + "\n</think>\nNothing to run yet."
    result, srv = run_rlm(root=[Reply(text=text, tokens_per_s=500), repl("print(globals().get('ran_early'))"),
                                Reply(text=text, tokens_per_s=500), repl("print(globals().get('ran_early'))"),
                                "FINAL(ok)"], model="openai/root-model-thinks")
    first, second = cells_by_role(result.notebook, "code")
    assert "None" in cell_text(first) and "None" in cell_text(second)
    assert cells_by_role(result.notebook, "thought")[0].metadata.rlm.get("thinking")


def test_a_reply_that_reads_differently_once_whole_is_said_to_the_model(run_rlm):
    # The model wrote a whole reply without a bare </think> first, so its next reply's code runs early;
    # that reply then closes thinking with a bare </think>: the model is told, nothing is hidden.
    text = "Let me try\n" + repl("ran_early = True") + "\nhmm, no." + TAIL + "\n</think>\nNothing to run yet."
    result, srv = run_rlm(root=[repl("pass"), Reply(text=text, tokens_per_s=300), "FINAL(ok)"],
                          model="openai/root-model-mixed")
    assert "read differently once it was whole" in feedback_after(srv, 2, model="root-model-mixed")


def test_the_status_says_the_root_model_is_thinking_with_the_seconds_ticking(run_heard):
    _, _, heard = run_heard(root=[Reply(text="FINAL(late)", ttft=2.6)])
    thinking = [s["root"] for s in heard.statuses if (s.get("root") or {}).get("phase") == "thinking"]
    seconds = sorted({int(r["elapsed_s"]) for r in thinking})
    assert seconds[:3] == [0, 1, 2], thinking  # a status every second while no token came


def test_without_streaming_the_status_still_ticks(run_heard):
    _, _, heard = run_heard(root=[Reply(text="FINAL(late)", ttft=2.2)], no_stream=True)
    thinking = [s["root"] for s in heard.statuses if (s.get("root") or {}).get("phase") == "thinking"]
    assert sorted({int(r["elapsed_s"]) for r in thinking})[:3] == [0, 1, 2], thinking


@pytest.mark.parametrize("text", [
    "just prose",
    "<think>a</think>prose\n" + repl("x = 1"),
    "<think>only thinking</think>",
    repl("a = 1") + repl("b = 2") + "\ntail prose",
    "prose\n```repl\nunclosed = 1\n",
])
def test_the_draft_plan_is_the_cells_a_step_writes(run_rlm, text):
    from rlm_kernel.engine.protocol.reply import parse_reply

    plan = plan_cells(parse_reply(text).segments)
    result, _ = run_rlm(root=[text, "FINAL(x)"], no_stream=True)
    step_one = [c for c in result.notebook.cells if c.metadata.rlm.get("step") == 1]
    assert [k for k, _, _ in plan] == [c.metadata.rlm.role for c in step_one]


def test_the_cli_writes_the_reply_as_it_comes_with_verbose(tmp_path, server):
    from _cli import run_args, run_cli

    (tmp_path / "doc.txt").write_text("alpha beta gamma")
    reply = Reply(text="Counting the words now.\n" + repl("n = len(context.split())\nprint('n is', n)"),
                  tokens_per_s=400)
    srv = server(root=[reply, "Done.\nFINAL_VAR(n)"])
    loud = run_cli([*run_args(srv.url, tmp_path / "loud.ipynb"), "--verbose"], tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "Counting the words now." in loud.stderr and "FINAL_VAR(n)" in loud.stderr
    srv = server(root=[reply, "Done.\nFINAL_VAR(n)"])
    quiet = run_cli(run_args(srv.url, tmp_path / "plain.ipynb"), tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "Counting the words now." not in quiet.stderr  # a pipe gets the cells, not the text
    assert "root model writing" not in quiet.stderr  # ... and no redrawn line
    assert "step 1: [ok] n = len(context.split())" in quiet.stderr


def test_on_a_terminal_the_cli_redraws_one_progress_line(tmp_path, server):
    import os
    import pty
    import subprocess

    from _cli import CLI, run_args
    from _helpers import clean_env

    (tmp_path / "doc.txt").write_text("alpha beta gamma")
    # ~3 s of writing (about 25 tokens at 8 a second): a line redrawn by the 1 s status tick at any load
    srv = server(root=[Reply(text="Thinking it over.\n" + repl("print('hi')"), ttft=1.5, tokens_per_s=8),
                       "FINAL(ok)"])
    leader, follower = pty.openpty()
    proc = subprocess.Popen([CLI, *run_args(srv.url, tmp_path / "tty.ipynb")], cwd=tmp_path, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=60)
    os.close(leader)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "\r\x1b[K  step 1: root model thinking" in text and "root model writing" in text, text
    assert "Thinking it over." not in text  # progress, not the text


def test_the_code_at_the_end_of_a_reply_runs_before_the_usage_arrives(run_rlm):
    # The block ends the reply; the provider sends its usage a second after the finish reason.
    reply = Reply(text="Last words.\n" + repl("import time\nprint('ran at', time.time())"), usage_delay=1.0)
    sent: list[float] = []

    def root(body: dict[str, Any]) -> Reply:
        sent.append(time.time() + reply.generation_s())
        return reply

    result, _ = run_rlm(root=[root, "FINAL(ok)"], model="openai/root-model-usage-late")
    assert _ran_at(cells_by_role(result.notebook, "code")[0]) < sent[0] + 0.7, "the code waited for the usage"
    assert cells_by_role(result.notebook, "thought")[0].metadata.rlm.root_call["completion_tokens"] > 0


def test_the_scripted_server_tells_when_each_piece_was_written(run_rlm):
    """Reply.on_piece (the live-speed benchmark's clock): every streamed
    piece, in order, reasoning first, right after it went out."""
    pieces: list[tuple[float, str, str]] = []
    text = "Counting.\n" + repl("print(len(context))")
    step = Reply(text=text, reasoning="Think first.", tokens_per_s=200,
                 on_piece=lambda name, piece: pieces.append((time.time(), name, piece)))
    before = time.time()
    result, _ = run_rlm(root=[step, "FINAL(done)"])
    assert result.answer == "done"
    assert "".join(p for _, name, p in pieces if name == "reasoning_content") == "Think first."
    assert "".join(p for _, name, p in pieces if name == "content") == text
    assert [name for _, name, _ in pieces] == sorted((name for _, name, _ in pieces), reverse=True)
    times = [t for t, _, _ in pieces]
    assert before <= times[0] and times == sorted(times) and times[-1] - times[0] >= (len(pieces) - 1) / 200 - 0.01


def test_streamed_root_calls_start_no_thread_each(run_rlm, monkeypatch):
    # litellm puts each streamed reply together in one of anyio's worker threads. The engine loop keeps those
    # threads for the next call; before, every root call started a thread and stopped it at its end.
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        if threading.current_thread().name == "rlm-engine":
            started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    counts = []
    for steps in (2, 2, 8):  # the first run may start the worker the others use
        started.clear()
        result, _ = run_rlm(root=[repl("x = 1")] * (steps - 1) + ["FINAL(done)"])
        assert result.iterations == steps
        counts.append(len(started))
    assert counts[1] == counts[2], (counts, started)


def test_a_runs_streamed_calls_keep_their_connection(server, make_rlm):
    # Each streamed reply is read to [DONE] and the body's end, so the client keeps its connection for the next
    # call. When the scripted server wrote the body's end apart from [DONE] (and this busy process delayed it),
    # the client had closed the connection already: new connections all through a run, and a reset for each.
    def model(body: dict[str, Any]) -> str:
        step = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        return "FINAL(done)" if step > 20 else f"Step {step}.\n{repl(f'x = {step}')}"

    srv = server(model)
    rlm = make_rlm(srv, max_iterations=21)
    opened = []
    for _ in range(3):
        before = srv.connections
        assert rlm.completion("word " * 1000, "What is in it?").iterations == 21
        opened.append(srv.connections - before)
    assert max(opened[1:]) <= 2, opened  # the first run may open one for litellm's own first call
