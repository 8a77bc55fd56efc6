"""Provider faults injected at random during a run (429 with and without
Retry-After, 5xx, timeouts, resets, truncated and malformed bodies, empty
choices): every sub-call ends up in the ledger exactly once or fails with an
error the code saw, and the ledger, the notebook's sub-call records and what
the scripted server sent all agree."""

from __future__ import annotations

import threading

import nbformat
import pytest
from _helpers import cell_text, cells_by_role, repl

from rlm_kernel.testing.server import FAULT_KINDS, Faults, Script, ScriptedServer

SUB = "openai/sub-model"
ROOT = "openai/root-model"
REQUEST_TIMEOUT = 1.5  # a "timeout" fault holds the request longer than this

BATCH_CODE = """\
answers_{n} = llm_query_batched([f'{word} {{i}}' for i in range({count})])
failed_{n} = [a for a in answers_{n} if isinstance(a, SubcallFailure)]
good_{n} = [a for a in answers_{n} if not isinstance(a, SubcallFailure)]
assert all(a.startswith('echo: {word} ') for a in good_{n})
print('ok', len(good_{n}), 'failed', len(failed_{n}))
"""

LOOP_CODE = """\
ok_loop, caught = 0, 0
for i in range({count}):
    try:
        llm_query(f'single {{i}}')
        ok_loop += 1
    except SubcallError:
        caught += 1
print('ok', ok_loop, 'failed', caught)
"""

PRELUDE = "from rlm_kernel.engine.trajectory.records import SubcallFailure\nfrom rlm_kernel.errors import SubcallError\n"


@pytest.fixture
def faulty_server():
    """``faulty_server(root, faults)``: a scripted server injecting ``faults``."""
    started: list[ScriptedServer] = []

    def start(root: list, faults: Faults) -> ScriptedServer:
        srv = ScriptedServer(Script(root=root), faults=faults).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        threading.Thread(target=srv.stop, daemon=True).start()


def subcall_records(nb) -> list[tuple[object, dict]]:
    return [(cell, record) for cell in cells_by_role(nb, "code")
            for record in cell.metadata.get("rlm", {}).get("subcalls", [])]


def printed_counts(cell) -> tuple[int, int]:
    words = cell_text(cell).split()
    return int(words[words.index("ok") + 1]), int(words[words.index("failed") + 1])


def test_faults_are_seeded_and_limited_to_their_models():
    def draws(faults: Faults, model: str = "m") -> list[str | None]:
        return [faults.draw(model) for _ in range(2000)]

    first = draws(Faults(rate=0.1, seed=7))
    assert first == draws(Faults(rate=0.1, seed=7))
    assert first != draws(Faults(rate=0.1, seed=8))
    injected = [kind for kind in first if kind is not None]
    assert 120 < len(injected) < 280  # ~10% of 2,000
    assert set(injected) == set(FAULT_KINDS)
    assert draws(Faults(rate=0.0)) == [None] * 2000
    assert set(draws(Faults(rate=1.0, kinds=["503"]))) == {"503"}
    assert draws(Faults(rate=1.0, models=["sub-model"]), model="root-model") == [None] * 2000
    with pytest.raises(ValueError):
        Faults(kinds=["teapot"])
    with pytest.raises(ValueError):
        Faults(rate=1.5)


def test_two_thousand_subcalls_under_ten_percent_faults(faulty_server, make_rlm, tmp_path):
    root = [
        repl(PRELUDE + BATCH_CODE.format(n=1, word="chunk", count=950)),
        repl(BATCH_CODE.format(n=2, word="piece", count=950)),
        repl(LOOP_CODE.format(count=100)),
        "FINAL(done)",
    ]
    faults = Faults(rate=0.1, seed=7, hang=REQUEST_TIMEOUT + 1.0, retry_after=0.02)
    srv = faulty_server(root, faults)
    out = tmp_path / "faults.ipynb"
    result = make_rlm(srv, max_retries=3, retry_base_delay=0.01, request_timeout=REQUEST_TIMEOUT).completion(
        "ctx", "Ask about every chunk.", output=out)

    assert result.reason == "final", result.error
    injected = srv.fault_counts()
    assert set(injected) == set(FAULT_KINDS), f"not every fault kind came up: {injected}"
    assert sum(injected.values()) > 150

    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    records = subcall_records(nb)
    assert len(records) == 2000 == result.subcalls
    assert len({r["id"] for _, r in records}) == 2000
    done = [r for _, r in records if r["status"] == "done"]
    failed = [r for _, r in records if r["status"] == "error"]
    assert len(done) + len(failed) == 2000

    # Charged exactly once: the ledger, the records and the server agree.
    sent = srv.answered("sub-model")
    ledger = result.usage[SUB]
    assert ledger["calls"] == len(done) == sent["calls"]
    assert ledger["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in done) == sent["prompt_tokens"]
    assert ledger["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in done) \
        == sent["completion_tokens"]
    assert result.usage[ROOT]["calls"] == srv.answered("root-model")["calls"] == 4
    assert nb.metadata.rlm.runs[0].usage == result.usage

    # Every request the server saw was answered once or carried a fault; our
    # attempts account for all of them but the requests litellm itself
    # repeats once after a dropped connection.
    requests = len(srv.calls("sub-model"))
    sub_faults = srv.fault_counts("sub-model")
    assert requests == sent["calls"] + sum(sub_faults.values())
    attempts = sum(r.get("attempts", 1) for _, r in records)
    assert attempts <= requests <= attempts + sub_faults["reset"] + sub_faults["truncated"]
    assert sum(r.get("attempts", 1) for r in done) > len(done), "no sub-call needed a retry"
    for record in failed:  # every injected fault is retryable: a failure used every attempt
        assert record.get("attempts") == 4 and "after 4 attempts" in record["error"], record
    for record in done:
        assert record["response"].startswith("echo: ") and 1 <= record.get("attempts", 1) <= 4

    # The code saw each failure: as a SubcallFailure slot, or a SubcallError it caught.
    for cell in cells_by_role(nb, "code"):
        mine = cell.metadata.rlm.get("subcalls", [])
        if not mine:
            continue
        ok, seen_failed = printed_counts(cell)
        assert ok == sum(r["status"] == "done" for r in mine)
        assert seen_failed == sum(r["status"] == "error" for r in mine)


def test_subcalls_failing_for_good_reach_the_code_and_are_never_charged(faulty_server, make_rlm):
    kinds = ["429", "500", "503", "malformed", "empty-choices"]  # none that litellm itself repeats
    faults = Faults(rate=0.5, seed=3, kinds=kinds, models=["sub-model"])
    code = PRELUDE + BATCH_CODE.format(n=1, word="item", count=200)
    srv = faulty_server([repl(code), "FINAL(done)"], faults)
    result = make_rlm(srv, max_retries=1, retry_base_delay=0.01).completion("ctx", "q")

    assert result.reason == "final", result.error
    records = [r for _, r in subcall_records(result.notebook)]
    done = [r for r in records if r["status"] == "done"]
    failed = [r for r in records if r["status"] == "error"]
    assert 20 < len(failed) < 90  # ~25% of 200 fail both attempts
    ok, seen_failed = printed_counts(cells_by_role(result.notebook, "code")[0])
    assert (ok, seen_failed) == (len(done), len(failed))
    for record in failed:
        assert record["attempts"] == 2 and "after 2 attempts" in record["error"]
        assert record["usage"] == {"prompt_tokens": 0, "completion_tokens": 0}
    assert len(srv.calls("sub-model")) == sum(r.get("attempts", 1) for r in records)
    sent = srv.answered("sub-model")
    assert result.usage[SUB]["calls"] == len(done) == sent["calls"]
    assert result.usage[SUB]["completion_tokens"] == sent["completion_tokens"]
    assert srv.fault_counts("root-model") == {}


def test_a_faulted_request_does_not_use_up_a_scripted_reply(faulty_server, make_rlm):
    faults = Faults(rate=0.5, seed=4, kinds=["503", "reset"], models=["root-model"])  # the first draw faults
    srv = faulty_server([repl("print('step one')"), "FINAL(two)"], faults)
    # Whole replies: after a TCP reset, litellm's aiohttp transport repeats the
    # request itself and may then drop the repeated *stream* (the reply the
    # server sent is lost, and this script would run out); the injector is what
    # this test is about.
    result = make_rlm(srv, max_retries=8, no_stream=True).completion("ctx", "q")
    assert result.reason == "final" and result.answer == "two"
    assert cell_text(cells_by_role(result.notebook, "code")[0]) == "step one\n"
    assert sum(srv.fault_counts("root-model").values()) >= 1
