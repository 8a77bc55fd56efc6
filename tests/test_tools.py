"""A person's own tools (``--tools``): offered to the root model by name,
signature and the first paragraph of the docstring in its first request,
installed in the run's namespace and called from generated code; a tool
that is not a function is refused in one sentence before any model call.
Python (``RLM(tools=[fn])``), the command line (``--tools module:function``),
the kernel (``%%rlm --tools name``) and resume."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_args, run_cli
from _helpers import ROOT, Router, cell_text, cells_by_role, clean_env, repl
from _kernel import texts

from rlm_kernel.errors import RLMError
from rlm_kernel.testing.server import ScriptedServer, prompt_text

FAKE_KEY = "sk-test-tools-0000"


def first_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def lookup_order(order_id: str, *, with_items: bool = False) -> dict:
    """Look an order up by its id (such as "A-17"): its status and ship date.

    A second paragraph the model is not told about: LEFT-OUT-PARAGRAPH.
    """
    return {"id": order_id, "status": "late" if order_id.endswith("7") else "on time",
            **({"items": 2} if with_items else {})}


# -- Python -------------------------------------------------------------------------


def test_a_tool_is_described_in_the_first_request_and_the_code_calls_it(tmp_path, server, make_rlm):
    srv = server(root=[
        repl("found = lookup_order('A-17')\nprint(found['status'])"),
        repl("lookup_order = None  # the code rebinds the tool"),
        repl("print(lookup_order('B-2')['status'])\nFINAL(found['status'])"),
    ])
    out = tmp_path / "run.ipynb"
    result = make_rlm(srv, tools=[lookup_order]).completion("tickets", "Which orders are late?", output=out)
    assert result.reason == "final" and result.answer == "late", result
    first = first_user(srv.calls("root-model")[0])
    assert ("- `lookup_order(order_id: str, *, with_items: bool = False) -> dict`: Look an order up by its id "
            '(such as "A-17"): its status and ship date.') in first
    assert "LEFT-OUT-PARAGRAPH" not in first
    assert first.index("Tools the user gave you") < first.index("Query: Which orders are late?")
    assert "late" in prompt_text(srv.calls("root-model")[1])
    # rebound by the code, put back for the next step (and the model told)
    assert "restored before the next step" in prompt_text(srv.calls("root-model")[2])
    nb = nbformat.read(out, as_version=4)
    assert "on time" in cell_text(cells_by_role(nb, "code")[2])
    query = cells_by_role(nb, "query")[0]
    assert query.source.splitlines()[0].endswith("--tools test_tools:lookup_order"), query.source
    assert nb.metadata["rlm"]["runs"][-1]["tools"] == ["lookup_order"]


def test_a_child_run_is_told_of_the_tools_and_calls_them(server, make_rlm):
    srv = server(Router({
        "root-model": [repl("r = rlm_query('check order A-17', model='openai/child-model')\nprint(r)"), "FINAL_VAR(r)"],
        "child-model": [repl("FINAL(lookup_order('A-17')['status'])")],
    }))
    result = make_rlm(srv, tools=[lookup_order], max_depth=1).completion("tickets", "Which orders are late?")
    assert (result.reason, result.answer) == ("final", "late"), result
    child_first = first_user(srv.calls("child-model")[0])
    assert "Tools the user gave you" in child_first and "`lookup_order(order_id: str" in child_first


def test_tools_are_left_out_of_show_vars(server, make_rlm):
    srv = server(root=[repl("mine = 1\nSHOW_VARS()"), "FINAL(done)"])
    make_rlm(srv, tools=[lookup_order]).completion("x", "q")
    shown = prompt_text(srv.calls("root-model")[1])
    assert "mine: int" in shown and "lookup_order" not in shown


@pytest.mark.parametrize("tools, needle", [
    (["nowhere"], "--tools: 'nowhere' is not a function the run can call (it is not defined in the namespace)"),
    (["json:nothing_here"], "--tools: 'json' has no 'nothing_here'"),
    (["no_such_module_4412:f"], "--tools: cannot import 'no_such_module_4412'"),
    (["json:__doc__"], "--tools: 'json:__doc__' is a str, not a function"),
    ([lambda x: x], "has no name the code could call it by"),
    ([json.dumps, "json:dumps"], None),  # the same function twice is fine
    (["json:loads", "pickle:loads"], "both have the name `loads`"),
    (["builtins:print", "json:dumps", "context"], "not a function the run can call"),
])
def test_a_bad_tool_is_refused_in_one_sentence_before_any_model_call(server, make_rlm, tools, needle):
    srv = server(root=["FINAL(ran)"])
    rlm = make_rlm(srv, tools=tools)
    if needle is None:
        assert rlm.completion("x", "q").answer == "ran"
        return
    with pytest.raises(RLMError) as caught:
        rlm.completion("x", "q")
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value) and str(caught.value).endswith(".")
    assert srv.calls() == []


def test_a_tool_may_not_take_a_helpers_name(server, make_rlm):
    def llm_query(prompt: str) -> str:
        return prompt

    srv = server(root=["FINAL(ran)"])
    with pytest.raises(RLMError, match="would replace the run's own `llm_query`"):
        make_rlm(srv, tools=[llm_query]).completion("x", "q")
    assert srv.calls() == []


@pytest.mark.parametrize("value, message", [
    ("lookup_order", "--tools must be a list of functions or names, got 'lookup_order'"),
    ([3], "--tools must be a list of functions or names, got 3 in it"),
    (["a b"], "--tools got 'a b' is neither a name"),
])
def test_a_bad_tools_value_is_refused_by_rlm(value, message):
    from rlm_kernel import RLM

    with pytest.raises(RLMError, match=message):
        RLM(model=ROOT, tools=value, check=False)


# -- the command line ---------------------------------------------------------------

TOOL_MODULE = '''
def search_index(term, k=3):
    """Find the lines of the shop's index that mention TERM (at most K).

    Not told: LEFT-OUT-PARAGRAPH.
    """
    return [f"{term} line {i}" for i in range(k)]

NOT_A_FUNCTION = 42
'''


def _cli(args: list[str], cwd: Path) -> Any:
    return run_cli(args, cwd, env=clean_env(OPENAI_API_KEY=FAKE_KEY))


def test_cli_tools_module_function_and_resume(tmp_path):
    (tmp_path / "shoptools.py").write_text(textwrap.dedent(TOOL_MODULE), encoding="utf-8")
    (tmp_path / "doc.txt").write_text("the shop\n", encoding="utf-8")
    out = tmp_path / "run.ipynb"
    script = Router({"root-model": [repl("hits = search_index('kettle', k=2)\nprint(hits)"), "FINAL_VAR(hits)"]})
    with ScriptedServer(script) as srv:
        done = _cli([*run_args(srv.url, out, query="Kettles?"), "--tools", "shoptools:search_index", "--json"],
                    tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["answer"] == str(["kettle line 0", "kettle line 1"])
        first = first_user(srv.calls("root-model")[0])
        assert "- `search_index(term, k=3)`: Find the lines of the shop's index that mention TERM (at most K)." in first
        assert "LEFT-OUT-PARAGRAPH" not in first
    nb = nbformat.read(out, as_version=4)
    assert "--tools shoptools:search_index" in cells_by_role(nb, "query")[0].source
    # resumed, the query cell's --tools imports the function again
    script = Router({"root-model": [repl("print(search_index('pan', k=1))"), "FINAL(resumed)"]})
    with ScriptedServer(script) as srv:
        again = tmp_path / "again.ipynb"
        done = _cli(["run", "--resume", str(out), "--api-base", srv.url, "-o", str(again), "--json"], tmp_path)
        assert done.returncode == 0, done.stderr
        assert "search_index(term, k=3)" in first_user(srv.calls("root-model")[0])
        assert "['pan line 0']" in prompt_text(srv.calls("root-model")[1])


@pytest.mark.parametrize("tool, needle", [
    ("shoptools:NOT_A_FUNCTION", "--tools: 'shoptools:NOT_A_FUNCTION' is a int, not a function."),
    ("shoptools:nothing", "--tools: 'shoptools' has no 'nothing' (for 'shoptools:nothing')."),
    ("missingtools:search", "--tools: cannot import 'missingtools' for 'missingtools:search'"),
    ("search_index", "--tools: 'search_index' is not a function the run can call"),
    ("not a name", "Argument --tools: 'not a name' is neither a name"),
])
def test_cli_refuses_a_bad_tool_in_one_sentence_before_any_model_call(tmp_path, tool, needle):
    (tmp_path / "shoptools.py").write_text(textwrap.dedent(TOOL_MODULE), encoding="utf-8")
    (tmp_path / "doc.txt").write_text("the shop\n", encoding="utf-8")
    with ScriptedServer(Router({"root-model": ["FINAL(ran)"]})) as srv:
        done = _cli([*run_args(srv.url, tmp_path / "run.ipynb"), "--tools", tool], tmp_path)
        assert done.returncode == 2, done
        assert needle in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert srv.calls() == []


def test_resume_finds_a_tool_its_notebooks_cells_define(tmp_path, server, make_rlm):
    def count_words(text: str) -> int:
        """How many words `text` has."""
        return len(text.split())

    (tmp_path / "doc.txt").write_text("one two three\n", encoding="utf-8")
    from rlm_kernel.context.files import load_context

    loaded = load_context([str(tmp_path / "doc.txt")])
    srv = server(root=[repl("n = count_words(context)\nprint(n)"), "FINAL_VAR(n)"])
    path = tmp_path / "first.ipynb"
    result = make_rlm(srv, tools=[count_words]).completion(loaded.value, "How many words?", output=path,
                                                            sources=loaded.sources)
    assert result.answer == 3
    nb = nbformat.read(path, as_version=4)
    query = cells_by_role(nb, "query")[0]
    assert query.source.splitlines()[0].endswith("--tools count_words")  # defined in a function: its name
    # the person's cell that defines it, above the query (as in a notebook)
    definition = "def count_words(text):\n    \"\"\"Count the words of TEXT, resumed.\"\"\"\n    return len(text.split())"
    nb.cells.insert(nb.cells.index(query), nbformat.v4.new_code_cell(definition))
    with_cell = tmp_path / "with_cell.ipynb"
    nbformat.write(nb, with_cell)
    script = Router({"root-model": [repl("print('again', count_words('a b'))"), "FINAL(resumed)"]})
    with ScriptedServer(script) as srv:
        done = _cli(["run", "--resume", str(with_cell), "--api-base", srv.url, "-o", str(tmp_path / "r.ipynb"),
                     "--json"], tmp_path)
        assert done.returncode == 0, done.stderr
        assert "- `count_words(text)`: Count the words of TEXT, resumed." in first_user(srv.calls("root-model")[0])
        assert "again 2" in prompt_text(srv.calls("root-model")[1])
    # without that cell the name is refused before the root model is asked
    with ScriptedServer(Router({"root-model": ["FINAL(ran)"]})) as srv:
        done = _cli(["run", "--resume", str(path), "--api-base", srv.url, "-o", str(tmp_path / "r2.ipynb")], tmp_path)
        assert done.returncode == 1, done
        assert ("--tools: 'count_words' is not a function the run can call (the notebook's cells did not define it "
                "when they ran again)") in done.stderr
        assert srv.calls("root-model") == []


# -- the kernel ---------------------------------------------------------------------



KERNEL_TOOL = '''
def lookup_order(order_id, with_items=False):
    """Look an order up by its id (such as "A-17").

    LEFT-OUT-PARAGRAPH.
    """
    return {"id": order_id, "status": "late" if order_id.endswith("7") else "on time"}

not_a_tool = 5
context = "Ticket 1: where is order A-17? Ticket 2: order B-2 arrived."
'''


@pytest.mark.kernel
def test_kernel_tools_by_name(kernel):
    reply, _ = kernel.execute(KERNEL_TOOL)
    assert reply["status"] == "ok"
    script = Router({"root-model": [repl("late = [o for o in ('A-17', 'B-2') if lookup_order(o)['status'] == 'late']"
                                         "\nprint(late)"), "FINAL_VAR(late)"]})
    with ScriptedServer(script) as srv:
        reply, messages = kernel.execute(f"%%rlm --tools lookup_order --model {ROOT} --api-base {srv.url}\n"
                                         "Which orders are late?", timeout=30)
        assert reply["status"] == "ok", texts(messages, "stream", "error")
        first = first_user(srv.calls("root-model")[0])
        assert ('- `lookup_order(order_id, with_items=False)`: Look an order up by its id (such as "A-17").'
                in first) and "LEFT-OUT-PARAGRAPH" not in first
    assert kernel.value("rlm_result.answer") == "['A-17']"
    assert kernel.value("lookup_order('B-2')['status']") == "'on time'"  # the person's function, still theirs


@pytest.mark.kernel
@pytest.mark.parametrize("names, needle", [
    ("nowhere", "--tools: 'nowhere' is not a function the run can call (it is not defined in the namespace); "
                "define it in a cell first, or give it as module:function."),
    ("lookup_order,not_a_tool", "--tools: 'not_a_tool' is a int in the namespace, not a function."),
    ("context", "--tools: 'context' is a str in the namespace, not a function."),
])
def test_kernel_refuses_a_name_that_is_not_a_function_before_any_model_call(kernel, names, needle):
    reply, _ = kernel.execute(KERNEL_TOOL)
    assert reply["status"] == "ok"
    with ScriptedServer(Router({"root-model": ["FINAL(ran)"]})) as srv:
        reply, messages = kernel.execute(f"%%rlm --tools {names} --model {ROOT} --api-base {srv.url}\nq", timeout=30)
        assert reply["status"] == "error" and reply["ename"] == "UsageError", reply
        assert reply["evalue"] == needle
        assert "Traceback" not in texts(messages, "stream", "error")
        assert srv.calls() == []
