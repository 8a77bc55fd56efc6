"""Follow-up questions: a later run builds on the earlier runs of the same
session (the root model is told their queries, answers and the variables
they left, which are still in the namespace) and is marked as following the
latest one (``metadata.rlm.follows``). In the kernel (two ``%%rlm`` cells,
``--new``), headless on a saved notebook (``rlm-kernel run --resume NB
--query TEXT``: the earlier cells re-run with their sub-calls replayed) and
from Python (``RLM.completion(..., follow_up=result)``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_args, run_cli
from _helpers import ROOT, SUB, Router, cells_by_role, clean_env, repl
from _kernel import Kernel, texts

from rlm_kernel.testing.server import ScriptedServer, prompt_text

FAKE_KEY = "sk-test-follow-up-0000"
TICKETS = "Ticket 1: order A-17 is late.\nTicket 2: order B-2 arrived.\nTicket 3: order C-7 is late too.\n"
FIRST_RUN = [
    repl("import re\norders = re.findall(r'order (\\S+) is late', context)\n"
         "checked = llm_query_batched([f'Is {o} late?' for o in orders])\nprint(orders, checked)"),
    repl('answer["content"] = ", ".join(orders)\nanswer["ready"] = True'),
]


def first_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def _sub(prompt: str) -> str:
    return f"yes: {prompt}"


# -- what the root model is told ------------------------------------------------------


def test_what_a_follow_up_is_told_of_many_earlier_runs():
    from rlm_kernel.engine.runs.follow_up import EarlierRun, FollowUp, names_bound

    assert names_bound("import re\nx, (y, *z) = f()\nfor i in r: pass\ndef g(): inner = 1\n%time w = 1") == [
        "re", "x", "y", "z", "i", "g"]
    runs = [EarlierRun(f"run{n}", f"question {n}", "final", f"answer {n}", names=["shared", f"v{n}"])
            for n in range(1, 8)]
    runs[-1] = EarlierRun("run7", "question 7", "max_iterations", names=["gone", "_private", "print"])
    namespace = {"shared": {"a": 1}, **{f"v{n}": "x" * n for n in range(1, 8)}, "_private": 1, "print": print}
    told = FollowUp(runs).describe(namespace, skip={"llm_query"})
    assert "(2 older runs not shown.)" in told and "question 2" not in told and "Earlier run 3 of 7 (run run3)" in told
    # a name several runs bound is told under the last of them
    assert "Variables it left: `v5` (str, 5 characters)." in told
    assert "Variables it left: `shared` (dict, 1 item), `v6` (str, 6 characters)." in told
    assert told.count("`shared`") == 1
    assert "Query: question 7\nIt ended without an answer (reason: max_iterations).\nIt left no variables." in told


# -- Python ---------------------------------------------------------------------------


def test_python_follow_up_builds_on_the_earlier_result(tmp_path, server, make_rlm):
    srv = server(Router({"root-model": [
        *FIRST_RUN,
        # the follow-up: the earlier run's variables are there, its answer dict is not ready again
        repl("print(len(orders), checked[0])"),
        "FINAL_VAR(orders)",
    ]}, sub=_sub))
    rlm = make_rlm(srv)
    first = rlm.completion(TICKETS, "Which orders are late?")
    assert first.answer == "A-17, C-7", first
    subcalls = len(srv.calls("sub-model"))
    assert subcalls == 2
    out = tmp_path / "follow-up.ipynb"
    second = rlm.completion(TICKETS, "How many are there?", follow_up=first, output=out)
    assert second.reason == "final" and second.answer == ["A-17", "C-7"], second
    assert len(srv.calls("sub-model")) == subcalls  # the earlier cells' sub-calls were replayed
    assert second.replayed_subcalls == 2 and second.subcalls == 0
    request = srv.calls("root-model")[2]
    told = first_user(request)
    assert "This is a follow-up question." in told
    assert "Earlier run 1 of 1 (run " + first.run_id + "):\nQuery: Which orders are late?\nAnswer: A-17, C-7" in told
    assert "Variables it left: `re` " not in told and "`orders` (list, 2 items), `checked` (list, 2 items)." in told
    assert told.index("This is a follow-up") < told.index("Query: How many are there?")
    assert sum(1 for m in request["messages"] if m["role"] == "assistant") == 0  # a new run, not a continuation
    assert "2 yes: Is A-17 late?" in prompt_text(srv.calls("root-model")[3])
    # the trajectory: the earlier run's cells, then the follow-up's, each marked
    nb = nbformat.read(out, as_version=4)
    queries = cells_by_role(nb, "query")
    assert [q.metadata.rlm.get("follows") for q in queries] == [None, first.run_id]
    assert queries[1].source == f"%%rlm --model {ROOT} --sub-model {SUB} --api-base {srv.url}\nHow many are there?"
    mine = [c for c in nb.cells if c.metadata.get("rlm", {}).get("run_id") == second.run_id]
    assert {c.metadata.rlm.role for c in mine} == {"query", "thought", "code", "answer"}
    assert all(c.metadata.rlm.get("follows") == first.run_id for c in mine)
    earlier = [c for c in nb.cells if c.metadata.get("rlm", {}).get("run_id") == first.run_id]
    assert earlier and not any("follows" in c.metadata.rlm for c in earlier)
    runs = nb.metadata["rlm"]["runs"]
    assert [r["run_id"] for r in runs] == [first.run_id, second.run_id] and runs[1]["follows"] == first.run_id
    # a follow-up of the follow-up is told both, and follows the latest
    srv2 = server(Router({"root-model": ["FINAL(third)"]}, sub=_sub))
    third = make_rlm(srv2).completion(TICKETS, "And now?", follow_up=second)
    told = first_user(srv2.calls("root-model")[0])
    assert "Earlier run 1 of 2" in told and "Earlier run 2 of 2 (run " + second.run_id + "):" in told
    assert "Answer (the value of `orders`): ['A-17', 'C-7']" in told
    assert third.notebook.metadata["rlm"]["runs"][-1]["follows"] == second.run_id
    assert srv2.calls("sub-model") == []


def test_a_long_earlier_answer_is_told_by_its_head_and_tail(server, make_rlm):
    srv = server(Router({"root-model": [repl("essay = 'HEAD ' + 'x' * 6000 + ' TAIL'"), "FINAL_VAR(essay)",
                                        "FINAL(ok)"]}))
    rlm = make_rlm(srv)
    first = rlm.completion("c", "Write an essay.")
    rlm.completion("c", "Shorter?", follow_up=first)
    told = first_user(srv.calls("root-model")[2])
    assert "Answer (the value of `essay`): HEAD " in told and " TAIL" in told
    assert "characters omitted" in told and len(told) < 4000
    assert "`essay` (str, 6,010 characters)" in told


# -- the command line -----------------------------------------------------------------


def _cli(args: list[str], cwd: Path) -> Any:
    return run_cli(args, cwd, env=clean_env(OPENAI_API_KEY=FAKE_KEY))


def test_cli_follow_up_on_a_saved_notebook_replays_its_cells(tmp_path):
    (tmp_path / "doc.txt").write_text(TICKETS, encoding="utf-8")
    first_out = tmp_path / "first.ipynb"
    with ScriptedServer(Router({"root-model": list(FIRST_RUN)}, sub=_sub)) as srv:
        done = _cli([*run_args(srv.url, first_out, query="Which orders are late?"), "--json"], tmp_path)
        assert done.returncode == 0, done.stderr
        first = json.loads(done.stdout)
        assert len(srv.calls("sub-model")) == 2
    follow = Router({"root-model": [repl("more = llm_query('and ' + orders[0])\nprint(len(checked), more)"),
                                    "FINAL_VAR(more)"]}, sub=_sub)
    with ScriptedServer(follow) as srv:
        out = tmp_path / "second.ipynb"
        done = _cli(["run", "--resume", str(first_out), "--query", "What about the first one?", "--api-base",
                     srv.url, "-o", str(out), "--json"], tmp_path)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["answer"] == "yes: and A-17"
        # the earlier cells re-ran with their sub-calls replayed: the server got only the new one
        assert [prompt_text(b) for b in srv.calls("sub-model")] == ["and A-17"]
        assert (result["replayed_subcalls"], result["subcalls"]) == (2, 1)
        told = first_user(srv.calls("root-model")[0])
        assert ("Query: Which orders are late?\nAnswer: A-17, C-7\nVariables it left: `orders` (list, 2 items), "
                "`checked` (list, 2 items).") in told
        assert "`context` is a str of" in told and "Query: What about the first one?" in told
        assert "2 yes: and A-17" in prompt_text(srv.calls("root-model")[1])
    nb = nbformat.read(out, as_version=4)
    saved = nbformat.read(first_out, as_version=4)
    assert [c.source for c in nb.cells[:len(saved.cells)]] == [c.source for c in saved.cells]
    assert nb.cells[0].source.startswith("%rlm context ")
    query = cells_by_role(nb, "query")[-1]
    assert query.metadata.rlm["follows"] == first["run_id"] and query.source.endswith("\nWhat about the first one?")
    assert FAKE_KEY not in out.read_text()


@pytest.mark.parametrize("args, needle", [
    (["--query", "x", "--from-cell", "2"], "leave out --from-cell, --drop-old and --no-replay"),
    (["--query", ""], "Give the question with --query TEXT"),
])
def test_cli_follow_up_errors_are_one_sentence(tmp_path, args, needle):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%%rlm\nq")])
    nbformat.write(nb, tmp_path / "nb.ipynb")
    done = _cli(["run", "--resume", "nb.ipynb", *args, "--model", ROOT], tmp_path)
    assert done.returncode == 2, done
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cli_follow_up_needs_a_finished_run(tmp_path):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), tmp_path / "plain.ipynb")
    done = _cli(["run", "--resume", "plain.ipynb", "--query", "x", "--model", ROOT], tmp_path)
    assert done.returncode == 2 and "no finished RLM run to ask a follow-up about" in done.stderr, done


# -- the kernel -----------------------------------------------------------------------



def _trajectory(kernel: Kernel) -> Any:
    return nbformat.read(kernel.value("rlm_result.notebook_path").strip("'"), as_version=4)


@pytest.mark.kernel
def test_kernel_a_later_rlm_cell_builds_on_the_earlier_runs_and_new_does_not(kernel):
    kernel.execute(f"context = {TICKETS!r}")
    script = Router({"root-model": [
        *FIRST_RUN,
        repl("print(orders[1])"), "FINAL_VAR(orders)",
        "FINAL(fresh start)",
    ]}, sub=_sub)
    with ScriptedServer(script) as srv:
        line = f"%%rlm --model {ROOT} --sub-model {SUB} --api-base {srv.url}"
        reply, messages = kernel.execute(f"{line}\nWhich orders are late?", timeout=30)
        assert reply["status"] == "ok", texts(messages, "stream", "error")
        first_id = kernel.value("rlm_result.run_id").strip("'")
        assert "This is a follow-up" not in first_user(srv.calls("root-model")[0])
        reply, messages = kernel.execute(f"{line}\nWhich is the second one?", timeout=30)
        assert reply["status"] == "ok", texts(messages, "stream", "error")
        told = first_user(srv.calls("root-model")[2])
        assert "This is a follow-up question." in told
        assert (f"Earlier run 1 of 1 (run {first_id}):\nQuery: Which orders are late?\nAnswer: A-17, C-7\n"
                "Variables it left: `orders` (list, 2 items), `checked` (list, 2 items).") in told
        assert "C-7" in prompt_text(srv.calls("root-model")[3])
        second_id = kernel.value("rlm_result.run_id").strip("'")
        nb = _trajectory(kernel)
        assert nb.metadata["rlm"]["runs"][0]["follows"] == first_id
        agent = [c for c in nb.cells if c.metadata.get("rlm", {}).get("role") in ("query", "thought", "code", "answer")]
        assert agent and all(c.metadata.rlm["follows"] == first_id for c in agent)
        # --new: not a follow-up; and the cell after it builds on it alone
        reply, _ = kernel.execute(f"{line} --new\nStart over: anything?", timeout=30)
        assert reply["status"] == "ok"
        assert "This is a follow-up" not in first_user(srv.calls("root-model")[4])
        assert "follows" not in _trajectory(kernel).metadata["rlm"]["runs"][0]
        assert kernel.value("orders") == "['A-17', 'C-7']"  # the namespace still holds what runs left
    with ScriptedServer(Router({"root-model": ["FINAL(after new)"]})) as srv:
        reply, _ = kernel.execute(f"%%rlm --model {ROOT} --api-base {srv.url}\nAnd then?", timeout=30)
        assert reply["status"] == "ok"
        told = first_user(srv.calls("root-model")[0])
        assert "Earlier run 1 of 1" in told and "Query: Start over: anything?" in told
        assert second_id not in told


@pytest.mark.kernel
def test_kernel_run_all_counts_a_recorded_run_as_an_earlier_run(tmp_path):
    """Run All on a saved notebook: the %%rlm cell's recorded run below it is
    replayed, not asked again, and a new %%rlm cell after it is its follow-up."""
    from _examples import EXAMPLES, execute

    nb = nbformat.read(EXAMPLES / "human_in_the_loop.ipynb", as_version=4)
    answer = next(i for i, c in enumerate(nb.cells) if c.metadata.get("rlm", {}).get("role") == "answer")
    recorded = nb.cells[answer].metadata.rlm.run_id
    nb.cells = nb.cells[:answer + 1] + [nbformat.v4.new_code_cell("%%rlm\nWhich review was it?", id="follow")]
    with ScriptedServer(Router({"root-model": ["FINAL(review 1)"]}, sub=_sub)) as srv:
        execute(nb, tmp_path / "nb.ipynb", srv.url, cwd=tmp_path)
        [request] = srv.calls("root-model")
        assert srv.calls("sub-model") == []  # the recorded run was replayed
        told = first_user(request)
    assert f"Earlier run 1 of 1 (run {recorded}):\nQuery: How many of these reviews complain about delivery" in told
    assert "Answer (the value of `complaints`): 2" in told
    assert "`verdicts` (list, 8 items)" in told
    assert "`complaints` (int: 3)." in told  # as re-run, with the pinned response


def test_resuming_a_follow_up_keeps_it_a_follow_up(tmp_path, server, make_rlm):
    srv = server(Router({"root-model": [*FIRST_RUN, repl("n = len(orders)"), repl("print(n)"), "FINAL_VAR(n)"]},
                        sub=_sub))
    rlm = make_rlm(srv)
    first = rlm.completion(TICKETS, "Which orders are late?")
    path = tmp_path / "second.ipynb"
    second = rlm.completion(TICKETS, "How many?", follow_up=first, output=path)
    assert second.answer == 2
    nb = nbformat.read(path, as_version=4)
    step1 = next(i for i, c in enumerate(nb.cells) if c.metadata.get("rlm", {}).get("run_id") == second.run_id
                 and c.metadata.rlm.get("role") == "code")
    (tmp_path / "tickets.txt").write_text(TICKETS, encoding="utf-8")
    srv2 = server(Router({"root-model": ["FINAL(resumed)"]}, sub=_sub))
    again = make_rlm(srv2).resume(path, from_cell=step1, context=[str(tmp_path / "tickets.txt")])
    assert again.reason == "final" and again.answer == "resumed"
    [request] = srv2.calls("root-model")
    told = first_user(request)
    assert "This is a follow-up question." in told and "Query: Which orders are late?\nAnswer: A-17, C-7" in told
    assert told.index("This is a follow-up") < told.index("Query: How many?")
    assert srv2.calls("sub-model") == []
    record = next(r for r in again.notebook.metadata["rlm"]["runs"][::-1] if r["run_id"] == second.run_id)
    assert record["follows"] == first.run_id
    answer = [c for c in again.notebook.cells if c.metadata.get("rlm", {}).get("role") == "answer"
              and "resumed" in c.source]
    assert answer and answer[0].metadata.rlm["follows"] == first.run_id
