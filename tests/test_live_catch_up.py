"""A page that missed a run (collaboration off: its tab was closed mid-run,
or the notebook was opened after) gets the run's cells once it says hello:
from the kernel that ran it while it lives, else from the run's journal on
disk. A real RLM kernel driven through jupyter_client, speaking the page's
side of the ``rlm`` comm; the scripted model over real HTTP."""

from __future__ import annotations

import queue
import time
import uuid
from pathlib import Path
from typing import Any

from _helpers import clean_env, repl
from _kernel import PROTOCOL, Frontend

from rlm_kernel.testing.server import Script, ScriptedServer

STEPS = [repl("print('one')", "First."), repl("print('two')", "Second."), "FINAL(all done)"]
QUESTION = "What is there?"


def _env(tmp_path: Path) -> dict[str, str]:
    # Jupyter tells a kernel its notebook's path: the live run's journal goes next to it.
    return {**clean_env(), "JPY_SESSION_NAME": str(tmp_path / "notes.ipynb"), "OPENAI_API_KEY": "sk-test-not-a-key"}


def _hello(kernel: Frontend, cells: list[dict[str, Any]], timeout: float = 30) -> list[dict[str, Any]]:
    """A page says hello and answers the kernel's ``get_cells`` with ``cells``;
    the ops the kernel sends back until it has handled it all."""
    kernel.comm_id = uuid.uuid4().hex
    hello = {"protocol": PROTOCOL, "op": "hello", "notebook_path": "notes.ipynb", "client_id": "page",
             "features": ["ops"]}
    kernel.kc.shell_channel.send(kernel.kc.session.msg(
        "comm_open", {"comm_id": kernel.comm_id, "target_name": "rlm", "data": hello}))
    ops: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    answered = False
    while not answered:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no get_cells after the hello; ops: {ops}") from None
        data = msg["content"].get("data") if msg["msg_type"] in ("comm_open", "comm_msg") else None
        if isinstance(data, dict) and data.get("protocol") == PROTOCOL:
            ops.append(data)
            if data.get("op") == "get_cells" and data.get("request_id") == "hello":
                kernel.send_op("cells", request_id="hello", cells=cells)
                answered = True
    _, messages = kernel.execute("pass")  # handled after the cells op
    for msg in messages:
        data = msg["content"].get("data") if msg["msg_type"] in ("comm_open", "comm_msg") else None
        if isinstance(data, dict) and data.get("protocol") == PROTOCOL:
            ops.append(data)
    return ops


def _page_cells(ask_source: str, ran: bool = False) -> list[dict[str, Any]]:
    """The notebook as a page opened from a file saved before the run: the
    context cell and the %%rlm cell, no output, no count (``ran``: as the
    page had it when the run started, the context cell run)."""
    outputs = [{"output_type": "stream", "name": "stdout", "text": "loaded\n"}] if ran else []
    return [{"id": "ctx", "cell_type": "code", "source": "context = 'a b c'", "metadata": {}, "outputs": outputs,
             "execution_count": 1 if ran else None},
            {"id": "ask", "cell_type": "code", "source": ask_source, "metadata": {}, "outputs": [],
             "execution_count": None}]


def _run(kernel: Frontend, url: str) -> tuple[str, list[dict[str, Any]]]:
    """A live run of the %%rlm cell `ask` (a page said hello first); its
    source and the cells of the run as the kernel announced them."""
    kernel.import_litellm()
    _hello(kernel, [])
    kernel.run_cell("context = 'a b c'", "ctx")
    source = f"%%rlm --model openai/root-model --api-base {url}\n{QUESTION}"

    def answer(op: dict[str, Any]) -> None:
        if op.get("op") == "get_cells":
            kernel.send_op("cells", request_id=op["request_id"], cells=_page_cells(source, ran=True))

    reply, _ = kernel.run_cell(source, "ask", on_op=answer)
    assert reply["status"] == "ok", reply
    inserted = [op["cell"] for batch in kernel.ops for op in (batch.get("ops") or [batch])
                if op.get("op") == "insert_cell"]
    return source, inserted


def _save(tmp_path: Path, cells: list[dict[str, Any]]) -> None:
    """The notebook saved as the page has it (a person saved it)."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.from_dict(c) for c in cells]
    nbformat.write(notebook, tmp_path / "notes.ipynb")


def _resyncs(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [op for op in ops if op.get("op") == "resync" and op.get("ended")]


def test_a_page_that_missed_a_run_gets_its_cells_from_the_kernel(tmp_path: Path) -> None:
    kernel = Frontend(tmp_path, env=_env(tmp_path))
    try:
        with ScriptedServer(Script(root=STEPS)) as server:
            source, inserted = _run(kernel, server.url)
        ids = list(dict.fromkeys(c["id"] for c in inserted))
        assert len(ids) >= 4, inserted

        # The tab was closed before anything was saved: the notebook it reopens has none of the run.
        ops = _hello(kernel, _page_cells(source))
        [resync] = _resyncs(ops)
        assert resync["source"] == "kernel" and resync["anchor_cell_id"] == "ask" and resync["reason"] == "final"
        assert [c["id"] for c in resync["cells"]] == ids
        codes = [c for c in resync["cells"] if c["cell_type"] == "code"]
        assert "one" in "".join(o.get("text", "") for o in codes[0]["outputs"]) and codes[0]["execution_count"]
        anchor = resync["anchor"]
        assert anchor["execution_count"] == codes[0]["execution_count"] - 1
        assert any("RLM final" in str(o["data"].get("text/plain")) for o in anchor["outputs"]), anchor
        assert resync["status"]["state"] == "ended"
        assert [c["id"] for c in resync["page_cells"]] == ["ctx"]

        # A page that has the whole run (a second tab open all along) gets nothing.
        whole = _page_cells(source) + [{**c, "execution_count": 9} if c["cell_type"] == "code" else c
                                       for c in resync["cells"]]
        whole[1] = {**whole[1], "execution_count": anchor["execution_count"]}
        assert _resyncs(_hello(kernel, whole)) == []

        # Saved since the run ended without its cells: a person took them out; they stay out.
        _save(tmp_path, _page_cells(source))
        assert _resyncs(_hello(kernel, _page_cells(source))) == []
    finally:
        kernel.shutdown()


def test_another_kernel_brings_a_missed_run_in_from_its_journal(tmp_path: Path) -> None:
    first = Frontend(tmp_path, env=_env(tmp_path))
    try:
        with ScriptedServer(Script(root=STEPS)) as server:
            source, inserted = _run(first, server.url)
    finally:
        first.shutdown()
    journals = list((tmp_path / "rlm-runs").glob("notes-*.journal.jsonl"))
    assert len(journals) == 1, journals

    # The notebook reopened later with a new kernel: the run comes from the journal.
    second = Frontend(tmp_path, env=_env(tmp_path))
    try:
        ops = _hello(second, _page_cells(source))
        [resync] = _resyncs(ops)
        assert resync["source"] == "journal" and resync["anchor_cell_id"] == "ask" and resync["reason"] == "final"
        assert [c["id"] for c in resync["cells"]] == list(dict.fromkeys(c["id"] for c in inserted))
        roles = [c["metadata"]["rlm"]["role"] for c in resync["cells"]]
        assert roles[-1] == "answer" and "query" not in roles and "context" not in roles, roles
        codes = [c for c in resync["cells"] if c["cell_type"] == "code"]
        assert resync["anchor"]["execution_count"] == codes[0]["execution_count"] - 1
        shown = [str(o["data"]["text/plain"]) for o in resync["anchor"]["outputs"]]
        assert shown[0].startswith("RLM final · step 3/") and "all done" in shown[-1], shown

        # Once it is in the notebook, nothing comes again; another question's cell gets nothing.
        assert _resyncs(_hello(second, _page_cells(source) + resync["cells"])) == []
        other = _page_cells(source.replace(QUESTION, "Something else?"))
        assert _resyncs(_hello(second, other)) == []
        # Saved after the run ended, without its cells: they were taken out on purpose.
        _save(tmp_path, _page_cells(source))
        assert _resyncs(_hello(second, _page_cells(source))) == []
    finally:
        second.shutdown()
