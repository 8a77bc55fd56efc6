"""Every budget ends a run cleanly with its reason, and the notebook keeps
every cell done so far plus a closing cell."""

from __future__ import annotations

import nbformat
import pytest
from _helpers import Router, cell_text, cells_by_role, feedback_after, repl

from rlm_kernel.testing.server import Reply, Script


def assert_closed_notebook(result, reason, path=None):
    nb = result.notebook
    nbformat.validate(nb)
    last = nb.cells[-1]
    assert last.metadata.rlm.role == "answer"
    assert last.metadata.rlm.reason == reason
    assert reason in last.source
    assert nb.metadata.rlm.runs[0]["reason"] == reason
    if path is not None:
        on_disk = nbformat.read(str(path), as_version=4)
        nbformat.validate(on_disk)
        assert [c.source for c in on_disk.cells] == [c.source for c in nb.cells]
        assert on_disk.cells[-1].metadata.rlm.reason == reason


def test_max_iterations(run_rlm, tmp_path):
    out = tmp_path / "iters.ipynb"
    root = [repl(f"print('step {i}')") for i in range(1, 6)]
    result, srv = run_rlm(root=root, max_iterations=3, output=out)
    assert result.reason == "max_iterations"
    assert result.iterations == 3
    assert result.answer is None
    assert len(srv.calls("root-model")) == 3
    code = cells_by_role(result.notebook, "code")
    assert [cell_text(c) for c in code] == ["step 1\n", "step 2\n", "step 3\n"]
    assert "1 step left" in feedback_after(srv, 2)
    assert_closed_notebook(result, "max_iterations", out)


def test_max_subcalls(run_rlm, tmp_path):
    out = tmp_path / "subcalls.ipynb"
    code = "for i in range(5):\n    r = llm_query(f'question {i}')\n    print(i, r)"
    result, srv = run_rlm(root=[repl(code), "FINAL(never)"], max_subcalls=3, output=out)
    assert result.reason == "budget"
    assert "sub-call" in (result.error or "")
    assert result.subcalls == 3
    assert len(srv.calls("sub-model")) == 3
    assert len(srv.calls("root-model")) == 1
    cell = cells_by_role(result.notebook, "code")[0]
    assert cell_text(cell).startswith("0 echo: question 0\n1 echo: question 1\n2 echo: question 2\n")
    assert "BudgetExceeded" in cell_text(cell)
    assert len(cell.metadata.rlm.subcalls) == 3
    assert_closed_notebook(result, "budget", out)


def test_max_subcalls_refuses_a_batch_larger_than_what_is_left(run_rlm):
    code = "a = llm_query('one')\nb = llm_query_batched(['x'] * 5)"
    result, srv = run_rlm(root=[repl(code), "FINAL(never)"], max_subcalls=4)
    assert result.reason == "budget"
    assert len(srv.calls("sub-model")) == 1  # the batch was refused whole, before any call
    assert result.subcalls == 1


def test_max_tokens(run_rlm):
    root = [Reply(text=repl(f"print({i})"), prompt_tokens=600, completion_tokens=100) for i in range(5)]
    result, srv = run_rlm(root=root, max_tokens=1000)
    assert result.reason == "budget"
    assert "token" in result.error
    assert result.iterations == 2
    assert len(srv.calls("root-model")) == 2
    assert result.usage["openai/root-model"]["prompt_tokens"] == 1200
    assert_closed_notebook(result, "budget")


def test_a_budget_hit_between_steps_counts_only_the_steps_taken(run_rlm):
    # A reply without code runs no cell, so the token budget is found used up
    # only before the next step; that step never started and is not counted.
    root = [Reply(text="Thinking, no code yet.", prompt_tokens=600, completion_tokens=100) for _ in range(3)]
    result, srv = run_rlm(root=root, max_tokens=500)
    assert result.reason == "budget"
    assert result.iterations == 1
    assert len(srv.calls("root-model")) == 1
    assert_closed_notebook(result, "budget")


def test_max_cost_with_a_priced_model(server, make_rlm):
    # gpt-4o-mini is in litellm's local cost map; the scripted server plays it.
    reply = lambda i: Reply(text=repl(f"print({i})"), prompt_tokens=100_000, completion_tokens=1_000)  # noqa: E731
    srv = server(Script(root=[reply(i) for i in range(5)], root_models=("gpt-4o-mini",)))
    rlm = make_rlm(srv, model="openai/gpt-4o-mini", sub_model="openai/gpt-4o-mini", max_cost=0.02)
    result = rlm.completion("ctx", "Spend.")
    usage = result.usage["openai/gpt-4o-mini"]
    assert usage["cost_usd"] is not None and usage["cost_usd"] > 0
    assert result.cost_usd is not None
    assert result.reason == "budget"
    assert "cost" in result.error
    assert result.iterations == 2  # one call costs ~$0.0156, two pass $0.02
    assert 0.02 <= result.cost_usd < 0.05
    assert_closed_notebook(result, "budget")


def test_timeout_between_steps(run_rlm):
    root = [repl("import time\ntime.sleep(0.3)\nprint('slept')") for _ in range(30)]
    result, srv = run_rlm(root=root, timeout=1.0)
    elapsed = result.elapsed_s  # the run's own clock: no import time in it
    assert result.reason == "timeout"
    # On a loaded machine the first root call alone may take the whole second: the run
    # then ends before any cell; what holds at any load is that it ends soon after.
    assert 1.0 <= elapsed < 6.0
    assert result.iterations < 10
    code = cells_by_role(result.notebook, "code")
    assert all(cell_text(c) == "slept\n" for c in code if c.metadata.rlm.status == "ok")
    assert_closed_notebook(result, "timeout")


def test_timeout_during_a_slow_root_call(run_rlm):
    result, _ = run_rlm(root=[repl("x = 1"), Reply(text="FINAL(late)", delay=10)], timeout=1.5)
    elapsed = result.elapsed_s  # the run's own clock: no import time in it
    assert result.reason == "timeout"
    assert elapsed < 4.0
    assert_closed_notebook(result, "timeout")


def test_timeout_during_slow_subcalls(run_rlm):
    code = "r = llm_query_batched(['a', 'b'])\nprint(r)"
    result, _ = run_rlm(root=[repl(code), "FINAL(never)"], sub=lambda p: Reply(text="late", delay=10), timeout=1.5)
    elapsed = result.elapsed_s  # the run's own clock: no import time in it
    assert result.reason == "timeout"
    assert elapsed < 4.0
    assert_closed_notebook(result, "timeout")


def test_timeout_bounds_a_long_running_cell(run_rlm):
    # The whole-run time limit holds even while generated code is running.
    result, _ = run_rlm(root=[repl("import time\ntime.sleep(5)\nprint('woke')"), "FINAL(late)"], timeout=1.0)
    elapsed = result.elapsed_s  # the run's own clock: no import time in it
    assert result.reason == "timeout"
    assert elapsed < 4.0, f"a 1 s run took {elapsed:.1f} s"
    assert_closed_notebook(result, "timeout")


def test_cell_timeout_interrupts_an_infinite_loop_and_the_run_goes_on(run_rlm):
    root = [repl("print('spinning')\nwhile True:\n    pass"), repl("print('still alive')"), "FINAL(recovered)"]
    result, srv = run_rlm(root=root, cell_timeout=1.0)
    elapsed = result.elapsed_s  # the run's own clock: no import time in it
    assert result.reason == "final"
    assert result.answer == "recovered"
    assert elapsed < 6.0
    told = feedback_after(srv, 1)
    assert "TimeoutError" in told
    code = cells_by_role(result.notebook, "code")
    assert code[0].metadata.rlm.status == "error"
    assert "spinning" in cell_text(code[0])
    assert cell_text(code[1]) == "still alive\n"


def test_cell_timeout_interrupts_a_sleep(run_rlm):
    root = [repl("import time\ntime.sleep(30)"), "FINAL(ok)"]
    result, srv = run_rlm(root=root, cell_timeout=0.5)
    assert result.reason == "final"
    assert result.elapsed_s < 5.0
    assert "TimeoutError" in feedback_after(srv, 1)


def test_children_share_the_run_s_concurrency_limit(server, make_rlm):
    child = repl("r = llm_query_batched([f'{context} part {i}' for i in range(8)])\nFINAL(str(len(r)))")
    router = Router(
        {
            "root-model": [repl("out = rlm_query_batched(['a', 'b', 'c'], model='openai/child-model')\nprint(out)"),
                           "FINAL_VAR(out)"],
            "child-model": [child, child, child],
        },
        sub=lambda p: Reply(text=f"echo {p}", delay=0.2),
    )
    srv = server(router)
    result = make_rlm(srv, concurrency=4).completion("ctx", "Fan out.")
    assert result.reason == "final"
    assert cell_text(cells_by_role(result.notebook, "code")[0]).strip() == "['8', '8', '8']"
    assert len(srv.calls("sub-model")) == 24
    assert srv.max_in_flight == 4


def test_children_draw_on_the_parent_s_subcall_budget(server, make_rlm):
    router = Router({
        "root-model": [repl("r = rlm_query('task', model='openai/child-model')"), "FINAL(end)"],
        "child-model": [repl("x = llm_query_batched(['p'] * 5)"), "FINAL(child end)"],
    })
    srv = server(router)
    result = make_rlm(srv, max_subcalls=5).completion("ctx", "Delegate.")
    # the root's rlm_query took one of 5; the child's batch of 5 did not fit in
    # the 4 left (a child with a fresh budget of 5 would have made the calls)
    assert srv.calls("sub-model") == []
    code = cells_by_role(result.notebook, "code")[0]
    child = code.metadata.rlm.subcalls[0]["child"]
    child_code = [c for c in child["cells"] if c["metadata"]["rlm"]["role"] == "code"][0]
    assert any(o.get("ename") == "BudgetExceeded" for o in child_code["outputs"])
    assert result.subcalls == 1


@pytest.mark.parametrize("name, value", [("max_cost", float("nan")), ("timeout", float("inf")),
                                         ("cell_timeout", float("nan")), ("max_cost", -1.0), ("timeout", True)])
def test_the_python_api_refuses_limits_that_are_not_positive_finite_numbers(name, value) -> None:
    from rlm_kernel import RLM
    from rlm_kernel.errors import RLMError

    with pytest.raises(RLMError, match=f"--{name.replace('_', '-')} must be a positive finite number"):
        RLM(model="openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1", **{name: value})
