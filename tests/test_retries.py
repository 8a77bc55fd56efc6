"""Provider trouble: 429 (honouring Retry-After), 5xx, malformed bodies,
dropped connections are retried; after the last retry a sub-call fails into
the code and a root call ends the run with reason error."""

from __future__ import annotations

import threading
import time

import nbformat
import pytest
from _helpers import cell_text, cells_by_role, feedback_after, repl

from rlm_kernel.testing.server import Reply


class Flaky:
    """A responder (give it as every scripted root item, or as ``sub``).
    Answers the first ``len(faults)`` requests with the given faults, then
    ``ok(prompt)``; records when each request arrived."""

    def __init__(self, faults, ok):
        self.faults = list(faults)
        self.ok = ok
        self.times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, prompt_or_body):
        with self._lock:
            self.times.append(time.monotonic())
            fault = self.faults.pop(0) if self.faults else None
        return fault if fault is not None else self.ok(prompt_or_body)


FAULTS = {
    "500": Reply(status=500, text="internal error"),
    "503": Reply(status=503, text="overloaded"),
    "malformed-json": Reply(raw_body=b'{"id": "x", "object": "chat.completion", "choices": [{"message": '),
    "not-json": Reply(raw_body=b"<html>bad gateway</html>", headers={"Content-Type": "text/html"}),
    "dropped": Reply(drop=True),
    "empty-choices": Reply(empty_choices=True),
}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_root_call_retried_after(fault, stream, run_rlm):
    if fault == "empty-choices" and stream:
        pytest.skip("a stream of usage alone is an empty reply: test_streaming.py")
    flaky = Flaky([FAULTS[fault]], lambda body: "FINAL(recovered)")
    result, srv = run_rlm(root=[flaky] * 5, no_stream=not stream)
    assert result.reason == "final", result.error
    assert result.answer == "recovered"
    assert len(srv.calls("root-model")) == 2
    assert result.usage["openai/root-model"]["calls"] == 1


@pytest.mark.parametrize("fault", ["500", "malformed-json", "dropped"])
def test_subcall_retried_after(fault, run_rlm):
    flaky = Flaky([FAULTS[fault]], lambda prompt: f"fine: {prompt}")
    result, srv = run_rlm(root=[repl("print(llm_query('q'))"), "FINAL(ok)"], sub=flaky)
    cell = cells_by_role(result.notebook, "code")[0]
    assert cell_text(cell) == "fine: q\n"
    record = cell.metadata.rlm.subcalls[0]
    assert record["status"] == "done"
    assert record["attempts"] == 2
    assert len(srv.calls("sub-model")) == 2


def test_429_honours_retry_after(run_rlm):
    flaky = Flaky([Reply(status=429, text="slow down", headers={"Retry-After": "1"})], lambda body: "FINAL(ok)")
    result, srv = run_rlm(root=[flaky] * 5)
    assert result.reason == "final"
    gap = flaky.times[1] - flaky.times[0]
    # the backoff alone would be ~0.01 s (retry_base_delay=0.01)
    assert 0.9 <= gap < 5.0


def test_429_on_a_subcall_honours_retry_after(run_rlm):
    flaky = Flaky([Reply(status=429, text="slow down", headers={"Retry-After": "0.6"})], lambda p: "fine")
    result, srv = run_rlm(root=[repl("print(llm_query('q'))"), "FINAL(ok)"], sub=flaky)
    cell = cells_by_role(result.notebook, "code")[0]
    assert cell_text(cell) == "fine\n"
    assert flaky.times[1] - flaky.times[0] >= 0.55


def test_backoff_between_retries_without_retry_after(server, make_rlm):
    flaky = Flaky([FAULTS["500"]] * 3, lambda body: "FINAL(ok)")
    srv = server(root=[flaky] * 5)
    result = make_rlm(srv, retry_base_delay=0.2).completion("ctx", "q")
    assert result.reason == "final"
    gaps = [b - a for a, b in zip(flaky.times, flaky.times[1:], strict=False)]
    # exponential with jitter: attempt n waits between half and all of 0.2 * 2**(n-1)
    assert 0.09 <= gaps[0] and 0.19 <= gaps[1] and 0.39 <= gaps[2]
    assert gaps[2] > gaps[0]


def test_subcall_failing_every_retry_raises_into_the_code(run_rlm):
    result, srv = run_rlm(root=[repl("x = llm_query('doomed')"), "FINAL(gave up)"],
                          sub=lambda p: Reply(status=503, text="overloaded"), max_retries=3)
    assert result.reason == "final"
    assert len(srv.calls("sub-model")) == 4  # 1 + 3 retries
    cell = cells_by_role(result.notebook, "code")[0]
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "SubcallError"
    assert "sub-model" in errors[0].evalue
    told = feedback_after(srv, 1)
    assert "SubcallError" in told
    assert "after 4 attempts" in told
    record = cell.metadata.rlm.subcalls[0]
    assert record["status"] == "error" and record["attempts"] == 4


def test_subcall_error_can_be_caught_by_the_code(run_rlm):
    code = "try:\n    llm_query('doomed')\nexcept SubcallError as e:\n    print('caught:', type(e).__name__)"
    code = "from rlm_kernel.errors import SubcallError\n" + code
    result, _ = run_rlm(root=[repl(code), "FINAL(ok)"], sub=lambda p: Reply(status=500), max_retries=1)
    assert cell_text(cells_by_role(result.notebook, "code")[0]) == "caught: SubcallError\n"


def test_root_call_failing_every_retry_ends_the_run_with_error(run_rlm, tmp_path):
    out = tmp_path / "err.ipynb"
    root = [repl("print('first step ran')"), *[Reply(status=500, text="down")] * 10]
    result, srv = run_rlm(root=root, max_retries=2, output=out)
    assert result.reason == "error"
    assert result.answer is None
    assert "root model" in result.error and "after 3 attempts" in result.error
    assert len(srv.calls("root-model")) == 1 + 3
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    assert cell_text(cells_by_role(nb, "code")[0]) == "first step ran\n"
    assert nb.cells[-1].metadata.rlm.reason == "error"


def test_authentication_error_is_not_retried(run_rlm):
    result, srv = run_rlm(root=[Reply(status=401, text="invalid api key")] * 5)
    assert result.reason == "error"
    assert len(srv.calls("root-model")) == 1
    assert "OPENAI_API_KEY" in result.error


def test_a_sub_call_that_times_out_is_retried(run_rlm):
    # The first attempt outlasts request_timeout; the retry is answered at once.
    flaky = Flaky([Reply(text="too late", delay=3.0)], ok=lambda prompt: f"ok: {prompt}")
    code = "r = llm_query('slow one')\nprint(r)"
    result, _ = run_rlm(root=[repl(code), "FINAL(done)"], sub=flaky, request_timeout=0.5)
    assert result.reason == "final"
    (cell,) = cells_by_role(result.notebook, "code")
    assert "ok: slow one" in cell_text(cell)
    record = cell.metadata["rlm"]["subcalls"][0]
    assert record["status"] == "done" and record["attempts"] == 2
    assert len(flaky.times) == 2
