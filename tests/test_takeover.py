"""Taking over in the RLM kernel (jupyter_client, real HTTP to the scripted
server): sub-calls from a person's cells are recorded in the cell's
metadata, re-running replays them, pins made in the widget win, Run All on a
saved RLM notebook makes no model calls, and ``%rlm continue`` rebuilds the
history from the notebook as it is now."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _helpers import Router, clean_env, repl
from _kernel import TIMEOUT, Frontend, texts

from rlm_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.kernel


def _sub_answers(prompt: str) -> str:
    return f"sub says: {prompt.upper()}"


@pytest.fixture
def frontend(tmp_path):
    kernel = Frontend(tmp_path)
    try:
        kernel.import_litellm()
        yield kernel
    finally:
        kernel.shutdown()


def _connect(frontend: Frontend, server: ScriptedServer, context: str) -> None:
    """What a page does on opening the notebook (hello), the scripted models' settings, and ``context``."""
    frontend.hello([])
    frontend.execute(_settings(server))
    frontend.execute(f"context = {context!r}")


def _settings(server: ScriptedServer) -> str:
    return (f"import os; os.environ.update(RLM_MODEL='openai/root-model', RLM_SUB_MODEL='openai/sub-model', "
            f"RLM_API_BASE='{server.url}', OPENAI_API_KEY='sk-test-not-a-key')")


def test_person_cell_subcalls_are_recorded_then_replayed(frontend):
    with ScriptedServer(Router({}, sub=_sub_answers)) as server:
        _connect(frontend, server, "some text")
        code = "r = llm_query('hello there')\nprint('got', r)"
        reply, messages = frontend.run_cell(code, "h1")
        assert reply["status"] == "ok", reply
        assert "got sub says: HELLO THERE" in texts(messages, "stream")
        assert len(server.calls("sub-model")) == 1
        # a cell with only new calls says so too
        assert "rlm: 0 sub-calls replayed from the notebook, 1 new (session: 0 replayed, 1 new)" in texts(
            messages, "stream")
        recorded = frontend.ops_named("cell_metadata")[-1]
        assert recorded["cell_id"] == "h1"
        [record] = recorded["rlm"]["subcalls"]
        assert record["response"] == "sub says: HELLO THERE" and record["status"] == "done"

        reply, messages = frontend.run_cell(code, "h1")
        assert reply["status"] == "ok"
        assert "got sub says: HELLO THERE" in texts(messages, "stream")
        assert len(server.calls("sub-model")) == 1, "the re-run called the model instead of replaying"
        assert "1 sub-call replayed from the notebook, 0 new" in texts(messages, "stream")
        assert frontend.ops_named("cell_metadata")[-1]["rlm"]["subcalls"][0]["replayed"] is True

        # a changed prompt is a new call; replay off makes every call fresh
        frontend.run_cell("print(llm_query('something else'))", "h1")
        assert len(server.calls("sub-model")) == 2
        frontend.execute("%rlm replay off")
        frontend.run_cell(code, "h2")
        _, messages = frontend.run_cell(code, "h2")
        assert len(server.calls("sub-model")) == 4
        assert "0 sub-calls replayed from the notebook, 1 new (replay is off)" in texts(messages, "stream")
        # the session's totals go to the frontend (its status bar) with the cell's records
        assert frontend.ops_named("cell_metadata")[-1]["replay"] == {"replayed": 1, "fresh": 4}


def _widget_models(messages: list[dict]) -> dict[str, dict[str, Any]]:
    models = {}
    for msg in messages:
        if msg["msg_type"] == "comm_open" and msg["content"].get("target_name") == "jupyter.widget":
            models[msg["content"]["comm_id"]] = msg["content"]["data"]["state"]
    return models


def _click(kernel: Frontend, comm_id: str) -> list[dict]:
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom",
                                                                           "content": {"event": "click"}}})
    kernel.kc.shell_channel.send(msg)
    _, messages = kernel.execute("pass")
    return messages


def _by_class(models: dict[str, dict[str, Any]], name: str) -> str:
    [comm_id] = [cid for cid, s in models.items() if name in (s.get("_dom_classes") or [])]
    return comm_id


def _wait_for_value(kernel: Frontend, comm_id: str, messages: list[dict], timeout: float = 30) -> str:
    """The next value the kernel sets on a widget (from any thread), in
    ``messages`` or in the messages that follow."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for msg in messages:
            data = msg["content"].get("data") or {}
            if (msg["msg_type"] == "comm_msg" and msg["content"].get("comm_id") == comm_id
                    and "value" in (data.get("state") or {})):
                return data["state"]["value"]
        _, messages = kernel.execute("import time; time.sleep(0.05)")
    raise AssertionError("the widget's value was not updated")


def _set_value(kernel: Frontend, comm_id: str, value: str) -> None:
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
        "method": "update", "state": {"value": value}, "buffer_paths": []}})
    kernel.kc.shell_channel.send(msg)
    kernel.execute("pass")


def test_pinned_response_from_the_widget_is_returned_on_rerun(frontend):
    with ScriptedServer(Router({}, sub=_sub_answers)) as server:
        _connect(frontend, server, "x")
        code = "r = llm_query('capital of france?')\nprint('answer is', r)"
        reply, messages = frontend.run_cell(code, "p1")
        assert reply["status"] == "ok"
        models = _widget_models(messages)
        [edit] = [cid for cid, s in models.items() if s.get("description") == "Edit response…"]
        shown = _widget_models(_click(frontend, edit))
        text = _by_class(shown, "rlm-sc-edit-text")
        [pin] = [cid for cid, s in shown.items() if s.get("description") == "Pin response"]
        assert shown[text]["value"] == "sub says: CAPITAL OF FRANCE?"
        _set_value(frontend, text, "Paris (edited by a person)")
        _click(frontend, pin)
        pinned = frontend.ops_named("cell_metadata")[-1]
        assert pinned["cell_id"] == "p1"
        assert pinned["rlm"]["subcalls"][0]["pinned"] is True
        assert pinned["rlm"]["subcalls"][0]["response"] == "Paris (edited by a person)"

        reply, messages = frontend.run_cell(code, "p1")
        assert "answer is Paris (edited by a person)" in texts(messages, "stream")
        # pins hold with replay off too
        frontend.execute("%rlm replay off")
        reply, messages = frontend.run_cell(code, "p1")
        assert "answer is Paris (edited by a person)" in texts(messages, "stream")
        assert len(server.calls("sub-model")) == 1


def test_edit_the_prompt_ask_the_model_and_pin(frontend):
    """The editor shows the prompt too: "Ask the model" sends the edited
    prompt to the sub-model at once and fills the response box; "Pin
    response" pins it with the edited prompt beside the original prompt's
    hash, so re-running the cell (whose code still sends the original
    prompt) returns it without a model call. A hand-written response for an
    edited prompt pins the same way."""
    from rlm_kernel.engine.trajectory.records import prompt_hash

    with ScriptedServer(Router({}, sub=_sub_answers)) as server:
        _connect(frontend, server, "x")
        code = "r = llm_query('capital of france?')\nprint('answer is', r)"
        reply, messages = frontend.run_cell(code, "e1")
        assert reply["status"] == "ok"
        [edit] = [cid for cid, s in _widget_models(messages).items() if s.get("description") == "Edit response…"]
        shown = _widget_models(_click(frontend, edit))
        prompt, text = _by_class(shown, "rlm-sc-edit-prompt"), _by_class(shown, "rlm-sc-edit-text")
        [ask] = [cid for cid, s in shown.items() if s.get("description") == "Ask the model"]
        [pin] = [cid for cid, s in shown.items() if s.get("description") == "Pin response"]
        assert shown[prompt]["value"] == "capital of france?"

        _set_value(frontend, prompt, "capital of italy?")
        assert _wait_for_value(frontend, text, _click(frontend, ask)) == "sub says: CAPITAL OF ITALY?"
        assert [c["messages"][0]["content"] for c in server.calls("sub-model")] == [
            "capital of france?", "capital of italy?"]
        _click(frontend, pin)
        [record] = frontend.ops_named("cell_metadata")[-1]["rlm"]["subcalls"]
        assert record["pinned"] is True and record["response"] == "sub says: CAPITAL OF ITALY?"
        assert record["edited_prompt"] == "capital of italy?"
        assert record["prompt_hash"] == prompt_hash("openai/sub-model", "capital of france?")

        reply, messages = frontend.run_cell(code, "e1")
        assert "answer is sub says: CAPITAL OF ITALY?" in texts(messages, "stream")
        assert len(server.calls("sub-model")) == 2, "re-running the cell called the model"
        [record] = frontend.ops_named("cell_metadata")[-1]["rlm"]["subcalls"]
        assert record["edited_prompt"] == "capital of italy?" and record["replayed"] is True

        # the re-run's editor starts from the edited prompt; a hand-written response pins too
        [edit] = [cid for cid, s in _widget_models(messages).items() if s.get("description") == "Edit response…"]
        shown = _widget_models(_click(frontend, edit))
        prompt, text = _by_class(shown, "rlm-sc-edit-prompt"), _by_class(shown, "rlm-sc-edit-text")
        [pin] = [cid for cid, s in shown.items() if s.get("description") == "Pin response"]
        assert shown[prompt]["value"] == "capital of italy?"
        _set_value(frontend, prompt, "capital of spain?")
        _set_value(frontend, text, "Madrid (written by a person)")
        _click(frontend, pin)
        [record] = frontend.ops_named("cell_metadata")[-1]["rlm"]["subcalls"]
        assert record["edited_prompt"] == "capital of spain?" and record["response"] == "Madrid (written by a person)"
        frontend.execute("%rlm replay off")
        reply, messages = frontend.run_cell(code, "e1")
        assert "answer is Madrid (written by a person)" in texts(messages, "stream")
        assert len(server.calls("sub-model")) == 2


def _headless_notebook(server: ScriptedServer, tmp_path: Path) -> Path:
    from rlm_kernel.api import RLM

    (tmp_path / "doc.txt").write_text("alpha beta gamma\n" * 50, encoding="utf-8")
    path = tmp_path / "saved.ipynb"
    rlm = RLM("openai/root-model", "openai/sub-model", api_base=server.url, api_key="sk-test-not-a-key")
    from rlm_kernel.context.files import load_context

    loaded = load_context([str(tmp_path / "doc.txt")])
    result = rlm.completion(loaded.value, "Summarise.", output=path, sources=loaded.sources)
    assert result.reason == "final", result
    return path


def test_run_all_on_a_saved_notebook_makes_no_model_calls(tmp_path):
    """nbclient (which names no cells) with the notebook's path in
    JPY_SESSION_NAME, as Jupyter sets it: the %%rlm cell does not run again and
    every sub-call replays."""
    from nbclient import NotebookClient

    script = Router({"root-model": [
        repl("parts = [context[:20], context[20:40]]\nanswers = llm_query_batched(parts)\nprint(answers)"),
        repl("summary = llm_query('join: ' + ' / '.join(answers))\nprint(summary)"),
        "FINAL_VAR(summary)",
    ]}, sub=_sub_answers)
    with ScriptedServer(script) as server:
        path = _headless_notebook(server, tmp_path)
        made = len(server.requests)
        assert len(server.calls("sub-model")) == 3
        env = clean_env(JPY_SESSION_NAME=str(path), OPENAI_API_KEY="sk-test-not-a-key")
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, kernel_name="rlm", timeout=120, resources={"metadata": {"path": str(tmp_path)}})
        client.execute(env=env)
        assert len(server.requests) == made, "Run All called a model"
        outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert "already in the notebook below" in outputs
        assert "sub says: JOIN:" in outputs
        assert "replayed from the notebook" in outputs


def test_run_all_twice_in_one_kernel_makes_no_model_calls(tmp_path):
    """Run All, then Run All again in the same kernel (nbclient, then as
    JupyterLab does it): the %%rlm cell finds its run below it both times,
    and every sub-call replays."""
    from nbclient import NotebookClient

    script = Router({"root-model": [
        repl("summary = llm_query('sum up: ' + context[:30])\nprint(summary)"),
        "FINAL_VAR(summary)",
    ]}, sub=_sub_answers)
    with ScriptedServer(script) as server:
        path = _headless_notebook(server, tmp_path)
        made = len(server.requests)
        env = clean_env(JPY_SESSION_NAME=str(path), OPENAI_API_KEY="sk-test-not-a-key")
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, kernel_name="rlm", timeout=120, resources={"metadata": {"path": str(tmp_path)}})
        said = []
        with client.setup_kernel(env=env):
            for _ in range(2):
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type == "code":
                        client.execute_cell(cell, index)
                said.append("".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                                    for o in c.get("outputs", [])))
                assert len(server.requests) == made, f"Run All #{len(said)} called a model"
        for outputs in said:
            assert "already in the notebook below" in outputs
            assert "1 sub-call replayed from the notebook, 0 new" in outputs

        # the same from JupyterLab, whose requests name their cells
        cells = [dict(c) for c in nbformat.read(path, as_version=4).cells]
        kernel = Frontend(tmp_path, env=env)
        try:
            kernel.hello(cells)

            def answer(op: dict[str, Any]) -> None:
                if op.get("op") == "get_cells":
                    kernel.send_op("cells", request_id=op["request_id"], cells=cells)

            for round_ in (1, 2):
                said = ""
                for cell in cells:
                    if cell["cell_type"] == "code":
                        reply, messages = kernel.run_cell(cell["source"], cell["id"], on_op=answer)
                        assert reply["status"] == "ok", reply
                        said += texts(messages, "stream")
                assert len(server.requests) == made, f"Run All #{round_} in JupyterLab called a model"
                assert "already in the notebook below" in said and "replayed from the notebook" in said
        finally:
            kernel.shutdown()


def _cells_as_the_frontend_has_them(frontend: Frontend, before: list[dict[str, Any]],
                                    anchor: str) -> list[dict[str, Any]]:
    """``before`` with the ops applied as the labextension applies them: new
    cells inserted after the anchor (each after the previous), their final
    metadata, metadata merges, deletions and moves."""
    cells = [dict(c, metadata=dict(c.get("metadata") or {})) for c in before]
    last = anchor
    finished = {o["cell_id"]: o for o in frontend.ops_named("cell_finished")}
    for op in frontend.ops:
        ids = [c["id"] for c in cells]
        if op.get("op") == "insert_cell" and op["cell"]["id"] not in ids:
            cell = dict(op["cell"], outputs=[])
            if cell["id"] in finished:
                cell["metadata"] = {"rlm": finished[cell["id"]]["metadata"]}
                cell["execution_count"] = finished[cell["id"]]["execution_count"]
            after = last if op["after_cell_id"] is None else op["after_cell_id"]
            cells.insert(ids.index(after) + 1, cell)
            last = cell["id"]
        elif op.get("op") == "cell_metadata":
            for cell in cells:
                if cell["id"] in (op.get("cell_ids") or [op.get("cell_id")]):
                    cell["metadata"] = {**cell["metadata"], "rlm": {**cell["metadata"].get("rlm", {}), **op["rlm"]}}
        elif op.get("op") == "delete_cells":
            cells = [c for c in cells if c["id"] not in op["cell_ids"]]
        elif op.get("op") == "move_cells":
            after = op["after_cell_id"]
            for cell_id in op["cell_ids"]:
                cell = next(c for c in cells if c["id"] == cell_id)
                cells.remove(cell)
                cells.insert([c["id"] for c in cells].index(after) + 1, cell)
                after = cell_id
    return cells


def test_continue_typed_elsewhere_moves_the_old_steps_below_and_runs_once(frontend):
    """``%rlm continue --from X`` typed at the end of the notebook: the cells
    between X and it (the old continuation, kept) are moved below it, so the
    new steps sit between X and the old ones; running the continue cell again
    (Run All) finds its continuation below and asks no model; --fresh does."""
    script = Router({"root-model": [
        repl("x = 1\nprint('x is', x)"),
        repl("print('old step two')"),
        "FINAL(old answer)",
        repl("print('new step')"),
        "FINAL(new answer)",
        "FINAL(fresh answer)",
    ]}, sub=_sub_answers)
    with ScriptedServer(script) as server:
        _connect(frontend, server, "numbers")
        query = {"id": "q1", "cell_type": "code", "source": "%%rlm\nWhat is x?", "metadata": {}, "outputs": []}
        reply, _ = frontend.run_cell(query["source"], "q1")
        assert reply["status"] == "ok", reply
        cells = _cells_as_the_frontend_has_them(frontend, [query], "q1")
        first_code = next(c["id"] for c in cells if c["metadata"].get("rlm", {}).get("role") == "code")
        old = [c["id"] for c in cells[[c["id"] for c in cells].index(first_code) + 1:]]
        assert len(old) == 3  # step 2's code, the final step's thought, the answer
        note = {"id": "note", "cell_type": "markdown", "source": "A note at the end.", "metadata": {}}
        cont = {"id": "cont", "cell_type": "code", "source": f"%rlm continue --from {first_code}",
                "metadata": {}, "outputs": []}
        cells += [note, cont]
        frontend.ops.clear()
        box = {"cells": cells}

        def answer(op: dict[str, Any]) -> None:
            if op.get("op") == "get_cells":
                frontend.send_op("cells", request_id=op["request_id"], cells=box["cells"])

        roots = len(server.calls("root-model"))
        reply, messages = frontend.run_cell(cont["source"], "cont", on_op=answer)
        assert reply["status"] == "ok", (reply, texts(messages, "stream", "error"))
        assert len(server.calls("root-model")) == roots + 2
        assert "3 old cells kept, marked superseded; 4 cells moved below the new steps" in texts(messages, "stream")
        [move] = frontend.ops_named("move_cells")
        assert move["cell_ids"] == [*old, "note"] and move["after_cell_id"] == "cont"
        after = _cells_as_the_frontend_has_them(frontend, cells, "cont")
        ids = [c["id"] for c in after]
        new = [c["id"] for c in after if c["id"] not in [x["id"] for x in cells]]
        assert ids == ["q1", *ids[1:ids.index(first_code) + 1], "cont", *new, *old, "note"], ids
        assert after[ids.index(new[-1])]["metadata"]["rlm"]["role"] == "answer"
        assert all(after[ids.index(i)]["metadata"]["rlm"].get("superseded") for i in old)
        assert after[ids.index("cont")]["metadata"]["rlm"]["continuation"] == new[0]

        # Run All runs the continue cell again: its continuation is below, no model is asked
        box["cells"] = after
        frontend.ops.clear()
        reply, messages = frontend.run_cell(cont["source"], "cont", on_op=answer)
        assert reply["status"] == "ok"
        assert "already in the notebook below" in texts(messages, "stream")
        assert len(server.calls("root-model")) == roots + 2, "running the continue cell again asked the model"
        assert not frontend.ops_named("cell_metadata") and not frontend.ops_named("move_cells")

        # --fresh continues again
        reply, messages = frontend.run_cell(cont["source"] + " --fresh", "cont", on_op=answer)
        assert reply["status"] == "ok"
        assert len(server.calls("root-model")) == roots + 3


def test_continue_from_here_rebuilds_history_with_the_persons_edits(frontend):
    seen: list[str] = []

    def root(body: dict[str, Any]) -> str:
        seen.append("\n".join(str(m.get("content")) for m in body["messages"]))
        return "FINAL(done after continue)"

    script = Router({"root-model": [
        repl("x = 21\nprint('x is', x)", prose="First I set x."),
        repl("print('double', x * 2)"),
        root,
    ]}, sub=_sub_answers)
    with ScriptedServer(script) as server:
        _connect(frontend, server, "numbers")
        reply, _ = frontend.run_cell("%%rlm --max-iterations 2\nWhat is x doubled?", "q1")
        assert reply["status"] == "ok", reply
        inserted = [o["cell"] for o in frontend.ops_named("insert_cell")]
        finished = {o["cell_id"]: o for o in frontend.ops_named("cell_finished")}
        cells = [{"id": "ctx", "cell_type": "code", "source": "context = 'numbers'", "metadata": {}, "outputs": []},
                 {"id": "q1", "cell_type": "code", "source": "%%rlm --max-iterations 2\nWhat is x doubled?",
                  "metadata": {}, "outputs": []}]
        for cell in inserted:
            cell = dict(cell)
            if cell["id"] in finished:
                cell["metadata"] = {"rlm": finished[cell["id"]]["metadata"]}
                cell["execution_count"] = finished[cell["id"]]["execution_count"]
            cells.append(cell)
        first_code = next(c for c in cells if c.get("metadata", {}).get("rlm", {}).get("role") == "code")
        # the person edits the first code cell, re-runs it, and adds a note
        first_code["source"] = "x = 50\nprint('x is', x)"
        reply, messages = frontend.run_cell(first_code["source"], first_code["id"])
        first_code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x is 50\n"}]
        index = cells.index(first_code)
        note = {"id": "note", "cell_type": "markdown", "source": "Use x = 50 from now on.", "metadata": {}}
        cells.insert(index + 1, note)
        cont = {"id": "cont", "cell_type": "code", "source": "%rlm continue", "metadata": {}, "outputs": []}
        cells.insert(index + 2, cont)

        def answer(op: dict[str, Any]) -> None:
            if op.get("op") == "get_cells":
                frontend.send_op("cells", request_id=op["request_id"], cells=cells)

        reply, messages = frontend.run_cell("%rlm continue", "cont", on_op=answer)
        assert reply["status"] == "ok", (reply, texts(messages, "stream", "error"))
        assert seen, "the root model was not called after continue"
        history = seen[-1]
        assert "x = 50" in history and "x is 50" in history
        assert "Use x = 50 from now on." in history
        assert "print('double'" not in history, "the old continuation leaked into the rebuilt history"
        superseded = [o for o in frontend.ops_named("cell_metadata") if o.get("rlm", {}).get("superseded")]
        assert superseded and superseded[-1]["cell_ids"], "the old continuation was not marked superseded"
        answer_cells = [o["cell"] for o in frontend.ops_named("insert_cell")
                        if o["cell"]["metadata"]["rlm"].get("role") == "answer"]
        assert "done after continue" in answer_cells[-1]["source"]
        assert answer_cells[-1]["metadata"]["rlm"]["run_id"] == first_code["metadata"]["rlm"]["run_id"]


def test_continuing_a_follow_up_keeps_it_one(frontend):
    """``%rlm continue`` in a follow-up run: its rebuilt history tells the
    model of the earlier run again, and the new steps still follow it."""
    script = Router({"root-model": [
        repl("found = 'A-17'"), "FINAL_VAR(found)",  # the first run
        repl("y = 2\nprint('y is', y)"), "FINAL(follow-up answer)",  # its follow-up
        "FINAL(continued answer)",  # the follow-up, continued
    ]}, sub=_sub_answers)
    with ScriptedServer(script) as server:
        _connect(frontend, server, "orders")
        first = {"id": "q1", "cell_type": "code", "source": "%%rlm\nWhich order is late?", "metadata": {}, "outputs": []}
        assert frontend.run_cell(first["source"], "q1")[0]["status"] == "ok"
        cells = _cells_as_the_frontend_has_them(frontend, [first], "q1")
        first_run = cells[-1]["metadata"]["rlm"]["run_id"]
        second = {"id": "q2", "cell_type": "code", "source": "%%rlm\nAnd its neighbour?", "metadata": {}, "outputs": []}
        frontend.ops.clear()
        box = {"cells": [*cells, second]}

        def answer(op: dict[str, Any]) -> None:
            if op.get("op") == "get_cells":
                frontend.send_op("cells", request_id=op["request_id"], cells=box["cells"])

        assert frontend.run_cell(second["source"], "q2", on_op=answer)[0]["status"] == "ok"
        cells = _cells_as_the_frontend_has_them(frontend, box["cells"], "q2")
        [started] = frontend.ops_named("run_started")
        assert started["follows"] == first_run
        query = next(c for c in cells if c["id"] == "q2")
        query["metadata"]["rlm"] = {"follows": started["follows"]}  # as the page marks a follow-up's %%rlm cell
        assert "This is a follow-up question." in _first_user(server.calls("root-model")[2])
        code = next(c for c in cells if c["metadata"].get("rlm", {}).get("role") == "code"
                    and c["metadata"]["rlm"].get("follows") == first_run)
        cont = {"id": "cont", "cell_type": "code", "source": "%rlm continue", "metadata": {}, "outputs": []}
        cells.insert(cells.index(code) + 1, cont)
        box["cells"] = cells
        frontend.ops.clear()
        reply, messages = frontend.run_cell("%rlm continue", "cont", on_op=answer)
        assert reply["status"] == "ok", (reply, texts(messages, "stream", "error"))
        told = _first_user(server.calls("root-model")[-1])
        assert "This is a follow-up question." in told and "Query: Which order is late?" in told
        new = [o["cell"] for o in frontend.ops_named("insert_cell")]
        assert new and all(c["metadata"]["rlm"].get("follows") == first_run for c in new)
        assert "continued answer" in new[-1]["source"]


def _first_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def _answer_stdin(kernel: Frontend, answers: list[str], asked: list[str], stop: Any) -> None:
    while not stop.is_set() and answers:
        try:
            msg = kernel.kc.stdin_channel.get_msg(timeout=0.2)
        except queue.Empty:
            continue
        if msg["msg_type"] == "input_request":
            asked.append(msg["content"]["prompt"])
            kernel.kc.input(answers.pop(0))


def test_approve_in_a_live_notebook_edit_skip_and_run(frontend):
    """``%%rlm --approve``: the kernel asks on stdin before each generated
    code cell; "e" lets the person edit the inserted cell, whose new source
    the kernel fetches from the notebook."""
    import threading

    script = Router({"root-model": [
        repl("print('one as written')"),
        repl("print('two')"),
        "FINAL(approved)",
    ]}, sub=_sub_answers)
    with ScriptedServer(script) as server:
        _connect(frontend, server, "c")
        asked: list[str] = []
        stop = threading.Event()
        answers = ["e", "", "s"]
        helper = threading.Thread(target=_answer_stdin, args=(frontend, answers, asked, stop), daemon=True)

        def on_op(op: dict[str, Any]) -> None:
            if op.get("op") == "get_cells" and op.get("request_id") != "hello":
                # one per id: a streamed reply's draft and its cell share one (the page updates it in place)
                cells = list({o["cell"]["id"]: dict(o["cell"]) for o in frontend.ops_named("insert_cell")}.values())
                for cell in cells:
                    if cell["source"] == "print('one as written')":
                        cell["source"] = "print('one, edited in the notebook')"
                frontend.send_op("cells", request_id=op["request_id"], cells=cells)

        helper.start()
        try:
            _, messages = frontend.run_cell("%%rlm --approve\nGo.", "ask", timeout=60, on_op=on_op, allow_stdin=True)
        finally:
            stop.set()
            helper.join(5)
        assert any("Run this code?" in a for a in asked), asked
        finished = {o["cell_id"]: o for o in frontend.ops_named("cell_finished")}
        inserted = list({o["cell"]["id"]: o["cell"] for o in frontend.ops_named("insert_cell")
                         if o["cell"]["cell_type"] == "code"}.values())
        first, second = inserted[0], inserted[1]
        assert finished[first["id"]]["metadata"]["edited"] is True
        assert finished[first["id"]]["metadata"]["approved"] is True
        assert "one, edited in the notebook" in texts(messages, "stream")
        assert finished[second["id"]]["status"] == "skipped"
        # the page is told why, with the note it shows in the cell (a cell that did not run has no iopub outputs)
        assert finished[second["id"]]["metadata"]["skipped"] == "the user chose not to run it"
        assert [o["data"]["text/plain"] for o in finished[second["id"]]["outputs"]] == [
            "This code block was not run: the user chose not to run it."]
        assert "outputs" not in finished[first["id"]]
        edited = [o for o in frontend.ops_named("cell_source") if o["cell_id"] == first["id"]]
        assert edited and edited[0]["source"] == "print('one, edited in the notebook')"


def test_pins_survive_a_kernel_restart_through_the_notebook(tmp_path):
    """Pin in the widget, save the notebook as the frontend would (its cells
    with the metadata the kernel sent), restart the kernel: the new kernel
    learns the pin from the page (hello with the cells) and returns it, with
    replay off, without a model call."""
    with ScriptedServer(Router({}, sub=_sub_answers)) as server:
        env = clean_env(OPENAI_API_KEY="sk-test-not-a-key")
        kernel = Frontend(tmp_path, env=env)
        try:
            kernel.hello([])
            kernel.execute(_settings(server))
            code = "print(llm_query('what colour?'))"
            _, messages = kernel.run_cell(code, "c1")
            [edit] = [cid for cid, s in _widget_models(messages).items() if s.get("description") == "Edit response…"]
            shown = _widget_models(_click(kernel, edit))
            [pin] = [cid for cid, s in shown.items() if s.get("description") == "Pin response"]
            _set_value(kernel, _by_class(shown, "rlm-sc-edit-text"), "a pinned blue")
            _click(kernel, pin)
            metadata = kernel.ops_named("cell_metadata")[-1]
            assert metadata["cell_id"] == "c1"
            path = tmp_path / "pinned.ipynb"
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code, id="c1",
                                                                           metadata={"rlm": metadata["rlm"]})])
            nbformat.write(nb, path)
            assert len(server.calls("sub-model")) == 1

            pid = kernel.km.provisioner.process.pid
            kernel.km.restart_kernel(now=True)
            kernel.kc.wait_for_ready(timeout=TIMEOUT)
            assert kernel.km.provisioner.process.pid != pid, "the kernel did not restart"
            kernel.ops.clear()
            kernel.hello([dict(c) for c in nbformat.read(path, as_version=4).cells])
            kernel.execute(_settings(server))
            kernel.execute("%rlm replay off")
            reply, messages = kernel.run_cell(code, "c1")
            assert reply["status"] == "ok"
            assert "a pinned blue" in texts(messages, "stream")
            assert "1 sub-call replayed from the notebook, 0 new (replay is off)" in texts(messages, "stream")
            assert len(server.calls("sub-model")) == 1
        finally:
            kernel.shutdown()
