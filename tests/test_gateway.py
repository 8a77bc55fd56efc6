"""A run's namespace in a kernel a real Jupyter Enterprise Gateway starts
(``--executor gateway``). The gateway runs once for this module on 127.0.0.1
from its own venv (``./dev setup`` installs it under the cache: it needs
jupyter-server<2 and jupyter-client 6, as a separate service does), with
its local process proxy (tests/_gateway.py): its kernels' Python holds only
ipykernel, so every test also checks that our inside goes over the wire.
tests/test_kernel_gateway.py runs the same against a Jupyter Kernel Gateway."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import start_cli
from _gateway import (
    ENTERPRISE_GATEWAY,
    KERNEL_PYTHON,
    KEY,
    ONLY_THERE,
    TOKEN,
    Gateway,
    check_a_run_with_a_batch_and_a_child_run,
    code_cells,
    gateway_rlm,
    outputs,
    running_gateway,
)
from _helpers import Router, clean_env, free_port, repl, wait_for
from _kernel import Frontend, texts

from rlm_kernel.testing.server import Script, ScriptedServer


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with running_gateway(ENTERPRISE_GATEWAY, [
        f"--EnterpriseGatewayApp.auth_token={TOKEN}",
        # EG refuses kernels to root by default (KERNEL_USERNAME); CI runs as root
        "--EnterpriseGatewayApp.unauthorized_users={'nobody'}", "--EnterpriseGatewayApp.list_kernels=True",
    ], tmp_path_factory.mktemp("gateway"), {"process_proxy": {
        "class_name": "enterprise_gateway.services.processproxies.processproxy.LocalProcessProxy"}}) as started:
        yield started


def _first_message(srv: ScriptedServer) -> str:
    body = next(b for b in srv.requests if b["model"] == "root-model")
    return body["messages"][1]["content"]


def test_a_run_with_a_batch_and_a_child_run_in_the_gateways_kernel(gateway: Gateway, tmp_path: Path) -> None:
    check_a_run_with_a_batch_and_a_child_run(gateway, tmp_path)


def test_the_context_is_read_where_the_kernel_runs_or_sent_from_here(gateway: Gateway, tmp_path: Path) -> None:
    from rlm_kernel.context.files import load_context
    from rlm_kernel.engine.protocol.prompts import describe_context

    assert not (tmp_path / "only-there.txt").exists()
    env = clean_env(OPENAI_API_KEY=KEY, RLM_GATEWAY_TOKEN=TOKEN)

    def args(context: str, api_base: str) -> list[str]:
        return ["run", "--context", context, "--query", "Where?", "--model", "openai/root-model", "--sub-model",
                "openai/sub-model", "--api-base", api_base, "-o", "run.ipynb", "--quiet", "--executor", "gateway",
                "--gateway-url", gateway.url]

    with ScriptedServer(Script(root=[repl("print(len(context), context[:11])"), "FINAL(read)"])) as srv:
        process = start_cli(args("only-there.txt", srv.url), tmp_path, env=env)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        first = _first_message(srv)
    # the same description a load here gives (computed there by the same loader and describe_context)
    local = load_context([str(gateway.side / "only-there.txt")])
    expected = describe_context(local.value, ["only-there.txt"])
    assert first.startswith(expected), first
    assert f"{len(ONLY_THERE)} The courier" in outputs(code_cells(tmp_path / "run.ipynb")[0])

    # a path the kernel's machine does not have: one sentence, before any model call
    with ScriptedServer(Script(root=["FINAL(never)"])) as srv:
        process = start_cli(args("missing.txt", srv.url), tmp_path, env=env)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2, err
        assert "missing.txt does not exist where the kernel runs" in err and "Traceback" not in err
        assert srv.requests == []

    # text given from here goes over in chunks (1 MiB each): the root model is told what a local run tells it
    text = "abcdefghij" * 250_000  # 2.5 MB: three chunks
    with ScriptedServer(Script(root=[repl("print(len(context), context[-3:])"), "FINAL(sent)"])) as srv:
        result = gateway_rlm(srv, gateway).completion(text, "How long?", output=tmp_path / "sent.ipynb")
        first = _first_message(srv)
    assert result.reason == "final", result.error
    assert first.startswith(describe_context(text))
    assert "2500000 hij" in outputs(code_cells(tmp_path / "sent.ipynb")[0])


def test_a_run_whose_context_exists_only_where_the_kernel_runs_resumes(gateway: Gateway, tmp_path: Path) -> None:
    assert not (tmp_path / "only-there.txt").exists()
    env = clean_env(OPENAI_API_KEY=KEY, RLM_GATEWAY_TOKEN=TOKEN)
    common = ["--model", "openai/root-model", "--sub-model", "openai/sub-model", "--quiet", "--executor", "gateway",
              "--gateway-url", gateway.url]
    with ScriptedServer(Script(root=[repl("n = len(context)\nprint('n is', n)"), "FINAL(first)"])) as srv:
        process = start_cli(["run", "--context", "only-there.txt", "--query", "How long?", "--api-base", srv.url,
                             "-o", "run.ipynb", *common], tmp_path, env=env)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    # resumed after its first step: the recorded path is read again there, not here
    with ScriptedServer(Script(root=[repl("print('again', len(context) == n)"), "FINAL(again)"])) as srv:
        process = start_cli(["run", "--resume", "run.ipynb", "--from-cell", str(_first_code_index(tmp_path / "run.ipynb")),
                             "--api-base", srv.url, "-o", "resumed.ipynb", *common], tmp_path, env=env)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert "only-there.txt" in _first_message(srv)
    assert "again True" in json.dumps(nbformat.read(tmp_path / "resumed.ipynb", as_version=4).cells)


def _first_code_index(path: Path) -> int:
    cells = nbformat.read(path, as_version=4).cells
    return next(i for i, c in enumerate(cells) if c.cell_type == "code" and c.metadata.get("rlm", {}).get("role") == "code")


class SlowProxy:
    """A TCP proxy that holds every chunk ``delay`` seconds each way: a slow network to the gateway."""

    def __init__(self, target_port: int, delay: float) -> None:
        import socket
        import threading

        self.delay = delay
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: Any, target: Any) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (source, target):
                    try:
                        s.shutdown(2)
                    except OSError:
                        pass
                return
            time.sleep(self.delay)
            try:
                target.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.server.close()


def test_an_interrupt_over_a_slow_network_stops_the_cell_within_seconds(gateway: Gateway, tmp_path: Path) -> None:
    proxy = SlowProxy(int(gateway.url.rsplit(":", 1)[1]), delay=0.3)  # 0.3 s each way per chunk
    flag = tmp_path / "sleeping"
    try:
        with ScriptedServer(Script(root=[
            repl(f"import time\nopen({str(flag)!r}, 'w').close()\ntime.sleep(120)\nprint('never')"), "FINAL(no)",
        ])) as srv:
            env = clean_env(OPENAI_API_KEY=KEY, RLM_GATEWAY_TOKEN=TOKEN, RLM_GATEWAY_URL=f"http://127.0.0.1:{proxy.port}")
            process = start_cli(["run", "--context", "only-there.txt", "--query", "q", "--model", "openai/root-model",
                                 "--api-base", srv.url, "-o", "run.ipynb", "--quiet", "--executor", "gateway"],
                                tmp_path, env=env)
            wait_for(lambda: flag.exists() or process.poll() is not None, timeout=120, what="the cell to start")
            assert process.poll() is None, process.communicate()[1]
            pressed = time.monotonic()
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
            took = time.monotonic() - pressed
    finally:
        proxy.close()
    assert process.returncode == 130, err
    assert took < 10, f"the interrupt took {took:.1f} s through the slow proxy"  # not the cell's 120 s
    nb = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    assert nb.cells[-1].metadata["rlm"]["reason"] == "interrupted"
    [cell] = code_cells(tmp_path / "run.ipynb")
    assert cell.metadata["rlm"]["status"] == "interrupted" and "never" not in outputs(cell)
    wait_for(lambda: gateway.kernels() == [], timeout=20, what="the run's kernel to be shut down")


def test_a_kernel_killed_mid_run_ends_the_run_in_one_sentence_and_the_run_resumes(gateway: Gateway,
                                                                                  tmp_path: Path) -> None:
    back = tmp_path / "back"  # once it exists, the cell no longer kills its kernel
    kill = (f"import os, signal\nif not os.path.exists({str(back)!r}):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            "print('kernel back, x is', x)")
    doc = tmp_path / "doc.txt"  # read where the kernel runs (the same machine here), and again on resume
    doc.write_text("a parcel")
    with ScriptedServer(Script(root=[repl("x = 41\nprint('x is', x)"), repl(kill), "FINAL(never)"])) as srv:
        result = gateway_rlm(srv, gateway).completion(doc, "q", output=tmp_path / "run.ipynb")
    assert result.reason == "error"
    assert result.error.startswith("the gateway's kernel died or was lost during this cell")
    assert "resume the run" in result.error and "\n" not in result.error
    nb = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    code = code_cells(tmp_path / "run.ipynb")
    assert "x is 41" in outputs(code[0])  # the cells so far are kept, with their outputs
    assert code[1].metadata["rlm"]["status"] == "error"
    assert nb.cells[-1].metadata["rlm"]["reason"] == "error"
    wait_for(lambda: gateway.kernels() == [], timeout=20, what="the dead kernel to be let go")

    back.touch()
    with ScriptedServer(Script(root=[repl("x += 1"), "FINAL_VAR(x)"])) as srv:
        resumed = gateway_rlm(srv, gateway).resume(tmp_path / "run.ipynb", output=tmp_path / "resumed.ipynb")
    assert resumed.reason == "final", resumed.error
    assert resumed.answer == 42  # the recorded cells ran again in a new kernel, then the run went on
    assert "kernel back, x is 41" in json.dumps(nbformat.read(tmp_path / "resumed.ipynb", as_version=4).cells)


def test_a_refused_token_or_an_unreachable_gateway_is_one_sentence(gateway: Gateway, tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_text("a document")
    wrong = "wrong-token-0123456789"
    base = ["run", "--context", "doc.txt", "--query", "q", "--model", "openai/root-model", "-o", "run.ipynb",
            "--executor", "gateway"]
    with ScriptedServer(Script(root=["FINAL(never)"])) as srv:
        for url, token, said in ((gateway.url, wrong, "said 401 Unauthorized: the token was refused"),
                                 (f"http://127.0.0.1:{free_port()}", TOKEN, "Cannot reach the Jupyter gateway")):
            env = clean_env(OPENAI_API_KEY=KEY, RLM_GATEWAY_TOKEN=token)
            process = start_cli([*base, "--api-base", srv.url, "--gateway-url", url], tmp_path, env=env)
            out, err = process.communicate(timeout=60)
            assert process.returncode == 2, err
            assert said in err, err
            assert token not in out + err and "Traceback" not in err
            assert len(err.strip().splitlines()) == 1, err
        assert srv.requests == []  # said before any model call


def test_a_persons_cells_run_in_the_gateways_kernel_with_the_gateway_backed_rlm_kernel(gateway: Gateway,
                                                                                         tmp_path: Path) -> None:
    env = clean_env(RLM_GATEWAY_URL=gateway.url, RLM_GATEWAY_TOKEN=TOKEN, OPENAI_API_KEY=KEY)
    frontend = Frontend(tmp_path, env=env, name="rlm-gateway")
    try:
        frontend.hello([])  # (a person's cell importing litellm would run in the gateway's kernel, which has none)
        reply, messages = frontend.execute("import sys\nwhere = 'parcels: ' + sys.executable\nprint(where)")
        assert reply["status"] == "ok", reply
        assert f"parcels: {KERNEL_PYTHON}" in texts(messages, "stream")  # a person's cell, in the gateway's kernel
        reply, messages = frontend.execute("%rlm context only-there.txt")  # read where that kernel runs
        assert reply["status"] == "ok", texts(messages, "stream")
        described = f"`context` is a str of {len(ONLY_THERE):,} characters. It was loaded from: only-there.txt."
        assert described in texts(messages, "stream")
        with ScriptedServer(Router({"root-model": [
            repl("import sys\nfound = where.split(': ')[1] == sys.executable and context.startswith('The courier')\n"
                 "print('same namespace', found)"),
            "FINAL_VAR(found)",
        ]})) as srv:
            reply, messages = frontend.run_cell(
                f"%%rlm --model openai/root-model --sub-model openai/sub-model --api-base {srv.url}\nWhere?", "q1",
                timeout=120)
        assert reply["status"] == "ok", reply
        assert "same namespace True" in texts(messages, "stream")
        assert described in srv.requests[0]["messages"][1]["content"]  # told there, without bringing it here
        assert frontend.value("found") == "True"  # the agent's variable, in the person's namespace there
        assert frontend.value("sys.executable") == repr(str(KERNEL_PYTHON))
        assert len(gateway.kernels()) == 1  # one kernel behind the RLM kernel, for both
    finally:
        frontend.kc.stop_channels()
        frontend.km.shutdown_kernel(now=False)  # as JupyterLab shuts a kernel down: a request first
    wait_for(lambda: gateway.kernels() == [], timeout=30, what="the kernel behind to end with the RLM kernel")


def test_an_rlm_cell_with_the_gateway_executor_streams_live_and_stops_on_interrupt(gateway: Gateway,
                                                                                   tmp_path: Path) -> None:
    env = clean_env(RLM_GATEWAY_TOKEN=TOKEN, OPENAI_API_KEY=KEY)
    frontend = Frontend(tmp_path, env=env)  # the ordinary RLM kernel: %%rlm --executor gateway
    try:
        frontend.import_litellm()
        frontend.hello([])
        frontend.execute("context = 'made in a cell here'")
        flags = (f"--model openai/root-model --sub-model openai/sub-model --api-base {{url}} --executor gateway "
                 f"--gateway-url {gateway.url}")
        with ScriptedServer(Router({"root-model": [
            repl("import sys\nprint('there:', sys.executable, context)\nr = llm_query('hello')\nprint('got', r)"),
            "FINAL_VAR(r)",
        ]}, sub=lambda p: f"sub answer to <{p}>")) as srv:
            reply, _ = frontend.run_cell(f"%%rlm {flags.format(url=srv.url)}\nSay hello.", "q1", timeout=120)
        assert reply["status"] == "ok", reply
        code = next(o for o in frontend.ops_named("insert_cell") if o["cell"]["metadata"]["rlm"]["role"] == "code")
        mine = [m for m in frontend.messages if m["parent_header"].get("msg_id") == f"rlm-{code['cell']['id']}-1"]
        shown = texts(mine, "stream")  # the gateway kernel's output, live in the page under the cell's parent
        assert f"there: {KERNEL_PYTHON} made in a cell here" in shown and "got sub answer to <hello>" in shown

        with ScriptedServer(Router({"root-model": [repl("import time\nprint('napping', flush=True)\ntime.sleep(120)"),
                                                   "FINAL(no)"]})) as srv:
            msg_id = frontend.send_cell(f"%%rlm {flags.format(url=srv.url)}\nNap.", "q2")
            wait_for(lambda: "napping" in texts(frontend.messages + _drain(frontend), "stream"), timeout=120,
                     what="the gateway's cell to start")
            took = frontend.interrupt(msg_id, within=15)  # Interrupt reaches the gateway's kernel
        assert took < 15
    finally:
        frontend.kc.stop_channels()
        frontend.km.shutdown_kernel(now=False)
    wait_for(lambda: gateway.kernels() == [], timeout=30, what="the runs' kernels to be shut down")


def _drain(frontend: Frontend) -> list[dict[str, Any]]:
    import queue

    got = []
    while True:
        try:
            got.append(frontend.kc.get_iopub_msg(timeout=0.1))
        except queue.Empty:
            frontend.messages.extend(got)
            return got


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
