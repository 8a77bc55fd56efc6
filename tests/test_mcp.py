"""``rlm-kernel mcp``: the RLM as an MCP tool, driven by the official SDK's
own client (``mcp.Client``) over stdio (the client starts the server) and
over streamable HTTP (one server for the module), on the scripted models."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from _cli import CLI
from _helpers import ROOT, SUB, clean_env, free_port, repl, wait_for

from rlm_kernel.testing.server import Script, ScriptedServer

pytest.importorskip("mcp", reason="the MCP SDK is the mcp extra: pip install 'rlm-kernel[mcp]'")

from mcp import Client, StdioServerParameters  # noqa: E402

KEY = "sk-test-mcp-0123456789"
LIMITS = ["--max-iterations", "5", "--max-cost", "1"]


class Scripts:
    """The scripted server's responder, set by each test (one server for the module)."""

    def __init__(self) -> None:
        self.script: Callable[[dict[str, Any]], Any] = Script()

    def __call__(self, body: dict[str, Any]) -> Any:
        return self.script(body)


@pytest.fixture(scope="module")
def models() -> Iterator[tuple[ScriptedServer, Scripts]]:
    scripts = Scripts()
    srv = ScriptedServer(scripts).start()
    try:
        yield srv, scripts
    finally:
        srv.stop()


def server_args(srv: ScriptedServer, runs: Path) -> list[str]:
    return ["mcp", "--model", ROOT, "--sub-model", SUB, "--api-base", srv.url, "--runs-dir", str(runs),
            "--allow-model", "openai/other-model", *LIMITS]


@pytest.fixture(scope="module")
def http_server(models: tuple[ScriptedServer, Scripts], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``rlm-kernel mcp --port P``, started once; yields (its URL, its runs folder)."""
    srv, _ = models
    runs = tmp_path_factory.mktemp("mcp-runs")
    port = free_port()
    log = runs.parent / "mcp-http.log"
    with open(log, "w") as out:
        process = subprocess.Popen([CLI, *server_args(srv, runs), "--port", str(port)], cwd=runs.parent,
                                   env=clean_env(OPENAI_API_KEY=KEY), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for(lambda: "serving the MCP tool" in log.read_text() and _listening(port) or process.poll() is not None,
                 timeout=60, what="rlm-kernel mcp to listen")
        assert process.poll() is None, log.read_text()
        yield url, runs
    finally:
        process.terminate()
        process.wait(10)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stdio(srv: ScriptedServer, runs: Path) -> StdioServerParameters:
    env = clean_env(OPENAI_API_KEY=KEY)
    return StdioServerParameters(command=CLI, args=server_args(srv, runs), env=env, cwd=str(runs.parent))


def counting_script() -> Script:
    """Step 1: a batch of three sub-calls over the context's lines; step 2: the answer."""
    return Script(root=[
        repl("lines = context.splitlines()\nfound = llm_query_batched([f'Courier? {l}' for l in lines])\n"
             "print(sum(f.startswith('yes') for f in found))"),
        "FINAL(2 of 3 lines mention a courier)",
    ], sub=lambda prompt: "yes" if "courier" in prompt else "no")


def test_over_stdio_the_tool_is_listed_runs_and_reports_progress(models: Any, tmp_path: Path) -> None:
    srv, scripts = models
    scripts.script = counting_script()
    doc = tmp_path / "doc.txt"
    doc.write_text("the courier came\nthe courier left\na letter\n")
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def scenario() -> tuple[Any, Any]:
        async with Client(stdio(srv, tmp_path / "runs")) as client:
            tools = await client.list_tools()
            result = await client.call_tool("rlm_run", {"question": "How many lines mention a courier?",
                                                        "context": [str(doc)], "max_iterations": 3},
                                            progress_callback=on_progress)
            return tools, result

    tools, result = anyio.run(scenario)
    [tool] = tools.tools
    assert tool.name == "rlm_run" and "Recursive Language Model" in tool.description
    schema = tool.input_schema
    assert schema["required"] == ["question"]
    for name in ("question", "context", "context_text", "model", "sub_model", "max_iterations", "max_cost",
                 "max_subcalls", "timeout"):
        assert name in schema["properties"], name
    assert "api_key" not in schema["properties"] and "api_base" not in schema["properties"]
    assert {"answer", "reason", "usage", "cost_usd", "notebook"} <= set(tool.output_schema["properties"])

    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["answer"] == "2 of 3 lines mention a courier" and answer["reason"] == "final"
    assert answer["steps"] == 2 and answer["subcalls"] == 3
    assert answer["usage"][SUB]["calls"] == 3
    notebook = Path(answer["notebook"])
    assert notebook.parent == tmp_path / "runs" and notebook.exists()
    cells = nbformat.read(notebook, as_version=4).cells
    assert any("llm_query_batched" in c.source for c in cells)
    lines = [m for _, _, m in progress]
    assert lines[0].startswith("step 1: 3 sub-calls, ") and lines[-1].endswith("ended (final) after 2 steps")
    values = [v for v, _, _ in progress]
    assert values == sorted(set(values))  # MCP progress grows with each notification
    assert KEY not in json.dumps(answer) and KEY not in notebook.read_text()


def call(url: str, arguments: dict[str, Any], **kwargs: Any) -> Any:
    async def scenario() -> Any:
        async with Client(url) as client:
            return await client.call_tool("rlm_run", arguments, **kwargs)

    return anyio.run(scenario)


def error_text(result: Any) -> str:
    assert result.is_error, result
    [content] = result.content
    return content.text


def test_over_http_a_run_on_text_leaves_a_notebook_that_can_be_continued(models: Any, http_server: Any,
                                                                          tmp_path: Path) -> None:
    srv, scripts = models
    url, runs = http_server
    scripts.script = counting_script()
    result = call(url, {"question": "How many lines mention a courier?",
                        "context_text": "the courier came\nthe courier left\na letter"})
    assert not result.is_error, result.content
    answer = result.structured_content
    assert answer["reason"] == "final" and Path(answer["notebook"]).parent == runs
    # the text was kept beside the notebook: `rlm-kernel run --resume` reloads it and replays the batch
    scripts.script = Script(root=["FINAL(still 2)"])
    done = subprocess.run([CLI, "run", "--resume", answer["notebook"], "--from-cell", "2", "--model", ROOT,
                           "--sub-model", SUB, "--api-base", srv.url, "-o", str(tmp_path / "again.ipynb"),
                           "--json", "--quiet"], env=clean_env(OPENAI_API_KEY=KEY), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["replayed_subcalls"] == 3


@pytest.mark.parametrize("arguments, sentence", [
    ({"question": "q", "context": ["no/such/file.txt"]}, "No such file or directory: 'no/such/file.txt'."),
    ({"question": "q", "context_text": "t", "max_iterations": 50},
     "max_iterations 50 is above the server's limit of 5."),
    ({"question": "q", "context_text": "t", "max_cost": 2.5}, "max_cost 2.5 is above the server's limit of 1."),
    ({"question": "q", "context_text": "t", "model": "openai/gpt-5"},
     "model 'openai/gpt-5' is not one this server allows"),
    ({"question": "q"}, "Give the context"),
    ({"question": " ", "context_text": "t"}, "The question is empty"),
])
def test_over_http_a_call_that_cannot_run_is_a_tool_error_in_one_sentence(http_server: Any, arguments: Any,
                                                                          sentence: str) -> None:
    url, _ = http_server
    text = error_text(call(url, arguments))
    assert sentence in text and "Traceback" not in text and "\n" not in text


def test_over_http_a_tighter_limit_and_an_allowed_model_are_taken(models: Any, http_server: Any) -> None:
    srv, scripts = models
    url, _ = http_server
    scripts.script = Script(root=[repl("print(1)")] * 5, sub=lambda p: "x")
    result = call(url, {"question": "q", "context_text": "t", "max_iterations": 2,
                        "sub_model": "openai/other-model"})
    assert not result.is_error and result.structured_content["reason"] == "max_iterations"
    assert result.structured_content["steps"] == 2
    notebook = nbformat.read(result.structured_content["notebook"], as_version=4)
    assert notebook.metadata["rlm"]["runs"][0]["sub_model"] == "openai/other-model"


def test_over_http_a_failing_root_model_is_a_tool_error(models: Any, http_server: Any) -> None:
    from rlm_kernel.testing.server import Reply

    _, scripts = models
    url, _ = http_server
    scripts.script = lambda body: Reply(status=400, raw_body=b'{"error": {"message": "model overloaded"}}')
    text = error_text(call(url, {"question": "q", "context_text": "t"}))
    assert "The run ended with an error: " in text and "model overloaded; its trajectory is " in text


def test_over_http_a_cancelled_call_stops_the_run_and_its_notebook_says_where(models: Any, http_server: Any) -> None:
    _, scripts = models
    url, runs = http_server
    # (a headless run's code on a thread that is not the main one is not interrupted in time.sleep; the run is:
    # its notebook says so at once, and the cell ends by itself 8 s later)
    scripts.script = Script(root=[repl("print('first step')"), repl("import time\ntime.sleep(8)"), "FINAL(never)"])
    before = set(runs.glob("*.ipynb"))
    seen: list[str] = []

    async def scenario() -> None:
        first = anyio.Event()

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            seen.append(message or "")
            first.set()

        async with Client(url) as client, anyio.create_task_group() as group:
            async def run() -> None:
                await client.call_tool("rlm_run", {"question": "q", "context_text": "t"},
                                       progress_callback=on_progress)

            group.start_soon(run)
            with anyio.fail_after(60):
                await first.wait()
            await anyio.sleep(0.5)  # the second step's cell is asleep now
            group.cancel_scope.cancel()  # the client gives up on the call

    anyio.run(scenario)
    assert seen and seen[0].startswith("step 1: ")
    wait_for(lambda: _ended(runs, before), timeout=5, what="the cancelled run's notebook to say it ended")
    [notebook] = set(runs.glob("*.ipynb")) - before
    saved = nbformat.read(notebook, as_version=4)
    assert saved.metadata["rlm"]["runs"][0]["reason"] == "interrupted"
    sleeping = [c for c in saved.cells if "time.sleep(8)" in c.source]
    assert sleeping and sleeping[0].metadata["rlm"].get("status") != "ok"  # the step it stopped in
    assert "interrupted" in saved.cells[-1].source


def _ended(runs: Path, before: set[Path]) -> bool:
    for path in set(runs.glob("*.ipynb")) - before:
        try:
            record = json.loads(path.read_text())["metadata"]["rlm"]["runs"][0]
        except (ValueError, KeyError, IndexError):
            continue
        if record.get("reason") not in (None, "running"):
            return True
    return False


def test_without_the_sdk_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import importlib.util, sys; sys.modules['mcp'] = None\n"
                           "from rlm_kernel.cli import main; sys.exit(main(['mcp', '--model', 'openai/x']))"],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pip install 'rlm-kernel[mcp]'" in done.stderr and "Traceback" not in done.stderr
