"""Runs as OpenTelemetry traces, read back from a real trace receiver:
Arize Phoenix, started once for this module on 127.0.0.1 from its own venv
(``./dev setup`` installs it under the cache, as a deployment runs it: a
service beside ours). Each run goes through ``rlm-kernel run`` (one
through a ``%%rlm`` cell of the RLM kernel, one through ``rlm-kernel
serve``, one through ``rlm-kernel batch``) on the scripted models: a batch of sub-calls and a child run
(``rlm_query``) with steps of its own."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import run_cli
from _helpers import clean_env, free_port, repl, wait_for
from _kernel import Kernel
from _serve import Served

from rlm_kernel.testing.server import Script

PHOENIX_VERSION = "20.26.1"  # the same as ./dev's PHOENIX_VERSION
PHOENIX = (Path(os.environ.get("RLM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "rlm-kernel") / f"phoenix-{PHOENIX_VERSION}" / "bin" / "phoenix")
KEY = "sk-test-0123456789abcdefSECRET"
QUERY = "Which parts mention the courier?"
PROMPT = "part number"  # what the batch's prompts start with


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not PHOENIX.exists():
        pytest.fail(f"Arize Phoenix is not installed at {PHOENIX.parent.parent}: ./dev setup installs it.")
    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work), "PHOENIX_WORKING_DIR": str(work),
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port()),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = open(work / "phoenix.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(url) or process.poll() is not None, timeout=120, what="Phoenix to start")
        assert process.poll() is None, (work / "phoenix.log").read_text()[-3000:]
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return response.status == 200
    except (OSError, http.client.HTTPException):  # (not yet Phoenix's HTTP on that port: its gRPC answered once)
        return False


def _spans(url: str, project: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{url}/v1/projects/{project}/spans?limit=1000", timeout=10) as response:
            return json.load(response)["data"]
    except OSError:
        return []


def _script() -> Script:
    """Root step 1: a batch of three sub-calls, then a child run (two steps:
    a sub-call, then an answer); root step 2: the answer."""
    root = [
        repl(f"parts = llm_query_batched([f'{PROMPT} {{i}}' for i in range(3)])\n"
             "found = rlm_query('Count the couriers.', model='openai/child-model')\nprint(len(parts), found)"),
        repl("seen = llm_query('Is there a courier?')\nprint(seen)"),  # the child run's step 1
        repl("answer['content'] = '1'\nanswer['ready'] = True"),  # its step 2
        "FINAL(one part)",
    ]
    return Script(root=root, root_models=("root-model", "child-model"), sub=lambda prompt: f"yes ({len(prompt)})")


def _traced_run(server: Any, tmp_path: Path, phoenix: str, *flags: str, via_env: bool) -> list[dict[str, Any]]:
    srv = server(_script())
    (tmp_path / "doc.txt").write_text("a parcel, a courier, a letter")
    project = f"rlm-{uuid.uuid4().hex[:8]}"
    env = clean_env(OPENAI_API_KEY=KEY, OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}")
    if via_env:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = phoenix
    args = ["run", "--context", "doc.txt", "--query", QUERY, "--model", "openai/root-model",
            "--sub-model", "openai/sub-model", "--api-base", srv.url, "-o", "run.ipynb", "--quiet", *flags]
    done = run_cli(args, tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    expected = 13  # see test_one_trace_per_run
    wait_for(lambda: len(_spans(phoenix, project)) >= expected, timeout=30, what="the run's spans in Phoenix")
    time.sleep(0.5)  # nothing more should come
    return _spans(phoenix, project)


def _tree(spans: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span["parent_id"], []).append(span)
    return children


def _names(spans: list[dict[str, Any]]) -> Counter[str]:
    return Counter(s["name"] for s in spans)


def _check_the_same_tree(spans: list[dict[str, Any]]) -> None:
    """One trace holding the spans of _script's run (test_one_trace_per_run
    checks their tree in full)."""
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    assert _names(spans) == {"invoke_agent rlm": 2, "chat openai/root-model": 2, "execute_tool repl": 3,
                             "chat openai/sub-model": 4, "chat openai/child-model": 2}, _names(spans)


def test_one_trace_per_run_with_the_expected_tree(server: Any, tmp_path: Path, phoenix: str) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT alone turns tracing on; the run, its root
    calls, its cells, the batch's sub-calls and the child run with its own
    calls and cells make one tree."""
    spans = _traced_run(server, tmp_path, phoenix, via_env=True)
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    assert len(spans) == 13, _names(spans)
    children = _tree(spans)
    [root] = children[None]
    attrs = root["attributes"]
    assert root["name"] == "invoke_agent rlm"
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["rlm.depth"] == 0
    record = json.loads((tmp_path / "run.ipynb").read_text())["metadata"]["rlm"]["runs"][0]
    assert attrs["rlm.run_id"] == attrs["gen_ai.agent.id"] == record["run_id"]
    assert attrs["rlm.notebook"] == str(tmp_path / "run.ipynb")
    assert attrs["rlm.reason"] == "final" and attrs["rlm.steps"] == 2 and attrs["rlm.subcalls"] == 5
    tokens = sum(u["prompt_tokens"] for u in record["usage"].values())
    assert attrs["gen_ai.usage.input_tokens"] == tokens
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 0

    below_root = children[root["context"]["span_id"]]
    assert _names(below_root) == {"chat openai/root-model": 2, "execute_tool repl": 1}
    [cell] = [s for s in below_root if s["name"] == "execute_tool repl"]
    assert cell["attributes"]["rlm.cell.status"] == "ok" and cell["attributes"]["rlm.step"] == 1
    assert cell["attributes"]["gen_ai.tool.name"] == "repl"
    chats = [s for s in below_root if s["name"].startswith("chat")]
    assert sorted(s["attributes"]["rlm.step"] for s in chats) == [1, 2]
    for chat in chats:
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.request.model"] == "openai/root-model"
        assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0

    below_cell = children[cell["context"]["span_id"]]
    assert _names(below_cell) == {"chat openai/sub-model": 3, "invoke_agent rlm": 1}
    batch = {s["attributes"].get("rlm.batch") for s in below_cell if s["name"].startswith("chat")}
    assert len(batch) == 1 and None not in batch
    [child] = [s for s in below_cell if s["name"] == "invoke_agent rlm"]
    assert child["attributes"]["rlm.depth"] == 1 and child["attributes"]["rlm.reason"] == "final"
    assert child["attributes"]["gen_ai.request.model"] == "openai/child-model"
    below_child = children[child["context"]["span_id"]]
    assert _names(below_child) == {"chat openai/child-model": 2, "execute_tool repl": 2}
    child_cells = sorted((s for s in below_child if s["name"] == "execute_tool repl"),
                         key=lambda s: s["attributes"]["rlm.step"])
    assert _names(children[child_cells[0]["context"]["span_id"]]) == {"chat openai/sub-model": 1}
    assert child_cells[1]["context"]["span_id"] not in children

    # no key, no query, no prompt, no reply, no code in any span without --trace-content
    text = json.dumps(spans)
    for secret in (KEY, QUERY, PROMPT, "yes (", "llm_query_batched", "Count the couriers"):
        assert secret not in text, secret


def test_trace_content_puts_prompts_and_code_into_the_spans(server: Any, tmp_path: Path, phoenix: str) -> None:
    spans = _traced_run(server, tmp_path, phoenix, "--trace", phoenix, "--trace-content", via_env=False)
    assert len(spans) == 13
    [root] = [s for s in spans if s["parent_id"] is None]
    assert QUERY in root["attributes"]["gen_ai.input.messages"]
    assert "one part" in root["attributes"]["gen_ai.output.messages"]
    subs = [s for s in spans if s["name"] == "chat openai/sub-model"]
    assert any(f"{PROMPT} 0" in s["attributes"]["gen_ai.input.messages"] for s in subs)
    assert all("yes (" in s["attributes"]["gen_ai.output.messages"] for s in subs)
    cells = [s for s in spans if s["name"] == "execute_tool repl"]
    assert any("llm_query_batched" in s["attributes"]["gen_ai.tool.call.arguments"] for s in cells)
    assert any("3 1" in s["attributes"]["gen_ai.tool.call.result"] for s in cells)
    assert KEY not in json.dumps(spans)


def test_an_error_in_a_cell_is_an_error_span(server: Any, tmp_path: Path, phoenix: str) -> None:
    srv = server(root=[repl("1 / 0"), "FINAL(none)"])
    (tmp_path / "doc.txt").write_text("text")
    project = f"rlm-{uuid.uuid4().hex[:8]}"
    env = clean_env(OPENAI_API_KEY=KEY, OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}")
    done = run_cli(["run", "--context", "doc.txt", "--query", "q", "--model", "openai/root-model", "--api-base",
                    srv.url, "-o", "run.ipynb", "--quiet", "--trace", phoenix], tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: len(_spans(phoenix, project)) >= 4, timeout=30, what="the run's spans")
    [cell] = [s for s in _spans(phoenix, project) if s["name"] == "execute_tool repl"]
    assert cell["status_code"] == "ERROR"
    assert cell["attributes"]["error.type"] == "ZeroDivisionError"
    assert cell["attributes"]["rlm.cell.status"] == "error"


def test_an_rlm_cell_in_the_kernel_is_one_trace_with_the_same_tree(server: Any, tmp_path: Path,
                                                                   phoenix: str) -> None:
    """The same run from a %%rlm cell of the RLM kernel (started, as by a
    Jupyter server, with the tracing variables set): its spans reach the
    receiver while the kernel lives on, in the same tree as the CLI's."""
    srv = server(_script())
    project = f"rlm-{uuid.uuid4().hex[:8]}"
    env = clean_env(OPENAI_API_KEY=KEY, OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
                    OTEL_EXPORTER_OTLP_ENDPOINT=phoenix)
    kernel = Kernel("rlm", tmp_path, env=env)
    try:
        kernel.execute("context = 'a parcel, a courier, a letter'")
        reply, messages = kernel.execute(f"%%rlm --model openai/root-model --sub-model openai/sub-model "
                                         f"--api-base {srv.url}\n{QUERY}", timeout=120)
        assert reply["status"] == "ok", reply
        wait_for(lambda: len(_spans(phoenix, project)) >= 13, timeout=30, what="the cell's spans in Phoenix")
        time.sleep(0.5)  # nothing more should come
        spans = _spans(phoenix, project)
    finally:
        kernel.shutdown()
    _check_the_same_tree(spans)
    [root] = _tree(spans)[None]
    attrs = root["attributes"]
    assert attrs["rlm.reason"] == "final" and attrs["rlm.steps"] == 2 and attrs["rlm.subcalls"] == 5
    assert attrs["rlm.depth"] == 0
    for secret in (KEY, QUERY, PROMPT, "yes ("):
        assert secret not in json.dumps(spans), secret


def test_a_request_to_serve_is_one_trace_with_the_same_tree(tmp_path: Path, phoenix: str) -> None:
    """``rlm-kernel serve`` started with the tracing variables: a request
    (the ``openai`` client) is a run, and its spans the same tree."""
    project = f"rlm-{uuid.uuid4().hex[:8]}"
    served = Served(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
                               "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}"}, models=_script())
    try:
        reply = served.client.chat.completions.create(
            model="rlm", messages=[{"role": "user", "content": f"a parcel, a courier, a letter\n\n{QUERY}"}])
        assert reply.choices[0].message.content == "one part", reply
        wait_for(lambda: len(_spans(phoenix, project)) >= 13, timeout=30, what="the request's spans in Phoenix")
        time.sleep(0.5)  # nothing more should come
        spans = _spans(phoenix, project)
    finally:
        served.stop()
    _check_the_same_tree(spans)
    [root] = _tree(spans)[None]
    assert root["attributes"]["rlm.reason"] == "final" and root["attributes"]["rlm.subcalls"] == 5
    assert QUERY not in json.dumps(spans) and served.key not in json.dumps(spans)


def test_a_batch_task_is_one_trace_with_the_same_tree(server: Any, tmp_path: Path, phoenix: str) -> None:
    """``rlm-kernel batch`` with the tracing variables: a task, run in a worker
    process, sends its spans before the worker ends."""
    srv = server(_script())
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "query": QUERY, "context_text": "a parcel, a courier, a letter"}) + "\n")
    project = f"rlm-{uuid.uuid4().hex[:8]}"
    env = clean_env(OPENAI_API_KEY=KEY, OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
                    OTEL_EXPORTER_OTLP_ENDPOINT=phoenix)
    done = run_cli(["batch", str(tasks), "--out", str(tmp_path / "out"), "--model", "openai/root-model",
                    "--sub-model", "openai/sub-model", "--api-base", srv.url, "--workers", "1"], tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: len(_spans(phoenix, project)) >= 13, timeout=30, what="the task's spans in Phoenix")
    time.sleep(0.5)  # nothing more should come
    spans = _spans(phoenix, project)
    _check_the_same_tree(spans)
    [root] = _tree(spans)[None]
    assert root["attributes"]["rlm.reason"] == "final"
    assert root["attributes"]["rlm.notebook"] == str(tmp_path / "out" / "t1.ipynb")
    assert QUERY not in json.dumps(spans)


def test_trace_without_the_sdk_is_refused_in_one_sentence(tmp_path: Path) -> None:
    """--trace where OpenTelemetry is missing: one sentence saying how to
    install it, before any model is called (a package of the same name
    first on the path hides the installed one)."""
    hide = tmp_path / "hide" / "opentelemetry"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("")
    (tmp_path / "doc.txt").write_text("text")
    env = clean_env(PYTHONPATH=str(hide.parent))
    done = run_cli(["run", "--context", "doc.txt", "--query", "q", "--model", "openai/root-model", "--trace"],
                   tmp_path, env=env)
    assert done.returncode == 2
    assert "pip install 'rlm-kernel[tracing]'" in done.stderr and "Traceback" not in done.stderr
