"""The Jupyter gateways the gateway tests run against, each a separate
service from a venv of its own under the cache (``./dev setup`` installs
them), on 127.0.0.1 with a token: Jupyter Enterprise Gateway (its local
process proxy) and Jupyter Kernel Gateway. Their kernels run a third venv
holding only ipykernel (a kernel image knows nothing of rlm-kernel), in a
folder of their own with a file this side does not have. Also the scenario
both gateways must pass: a run with a batch and a child run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _helpers import free_port, repl, wait_for

from rlm_kernel import RLM
from rlm_kernel.testing.server import Script, ScriptedServer

CACHE = Path(os.environ.get("RLM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "rlm-kernel")
ENTERPRISE_GATEWAY = CACHE / "enterprise-gateway-3.3.0" / "bin" / "jupyter-enterprisegateway"  # ./dev's GATEWAY_VENV
KERNEL_GATEWAY = CACHE / "kernel-gateway-3.0.1" / "bin" / "jupyter-kernelgateway"  # ./dev's KERNEL_GATEWAY_VENV
KERNEL_PYTHON = CACHE / "gateway-kernel-python" / "bin" / "python"  # ./dev's GATEWAY_KERNEL_VENV
TOKEN = "gw-token-0123456789-SECRET"
KEY = "sk-test-0123456789abcdefSECRET"
ONLY_THERE = "The courier left the parcel at the lighthouse.\n" * 40


class Gateway:
    def __init__(self, url: str, side: Path) -> None:
        self.url, self.side = url, side

    def kernels(self) -> list[dict[str, Any]]:
        request = urllib.request.Request(f"{self.url}/api/kernels", headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answers (401 without the token)
    except OSError:
        return False


@contextmanager
def running_gateway(program: Path, options: list[str], work: Path, spec_metadata: dict[str, Any]) -> Iterator[Gateway]:
    """``program`` (a gateway's command) with ``options`` on a free port of
    127.0.0.1, its one kernelspec ("python3") running KERNEL_PYTHON, its
    kernels in ``work``/gateway-side; stopped (SIGINT) after."""
    for needed in (program, KERNEL_PYTHON):
        if not needed.exists():
            pytest.fail(f"A Jupyter gateway is not installed ({needed} is missing): ./dev setup installs it.")
    spec = work / "share" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(KERNEL_PYTHON), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (gateway)", "language": "python", "metadata": spec_metadata}))
    side = work / "gateway-side"  # where the gateway's kernels run
    side.mkdir()
    (side / "only-there.txt").write_text(ONLY_THERE)
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work), "JUPYTER_PATH": str(work / "share"),
           "JUPYTER_DATA_DIR": str(work / "data"), "JUPYTER_RUNTIME_DIR": str(work / "runtime")}
    log = open(work / "gateway.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen([str(program), "--ip=127.0.0.1", f"--port={port}", *options],
                               cwd=side, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url) or process.poll() is not None, timeout=120, what="the gateway to start")
        assert process.poll() is None, (work / "gateway.log").read_text()[-3000:]
        yield Gateway(url, side)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def gateway_rlm(srv: ScriptedServer, gateway: Gateway, **options: Any) -> RLM:
    return RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=srv.url, api_key=KEY,
               executor="gateway", gateway_url=gateway.url, gateway_token=TOKEN, **options)


def outputs(cell: Any) -> str:
    return "".join(o.get("text", "") or (o.get("data") or {}).get("text/plain", "") for o in cell.get("outputs", []))


def code_cells(path: Path) -> list[Any]:
    cells = nbformat.read(path, as_version=4).cells
    return [c for c in cells if c.cell_type == "code" and c.metadata.get("rlm", {}).get("role") == "code"]


def check_a_run_with_a_batch_and_a_child_run(gateway: Gateway, tmp_path: Path) -> None:
    """A run whose code runs in the gateway's kernel: a batch of sub-calls and
    an image in one cell, a child run (a kernel of its own) in the next;
    the model key never reaches the kernel, the token never the notebook,
    and every kernel is shut down after."""
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    script = Script(root=[
        repl("import os, sys\nprint('python', sys.executable)\n"
             f"print('key here?', any({KEY!r} in v for v in os.environ.values()))\n"
             "parts = llm_query_batched([f'part {i}: ' + context[:20] for i in range(3)])\nprint(len(parts), parts[0])\n"
             f"from IPython.display import Image, display\ndisplay(Image(data=__import__('base64').b64decode({png!r})))"),
        repl("found = rlm_query('Count the couriers.', model='openai/child-model')\nprint('child said', found)"),
        repl("import sys\nprint('child python', sys.executable)"),  # the child run's steps
        repl("FINAL('two couriers')"),
        repl("result = f'{len(parts)} parts, {found}'"),
        "FINAL_VAR(result)",
    ], root_models=("root-model", "child-model"), sub=lambda prompt: f"yes ({len(prompt)})")
    with ScriptedServer(script) as srv:
        result = gateway_rlm(srv, gateway).completion("a parcel, a courier, a letter " * 10, "How many couriers?",
                                                      output=tmp_path / "run.ipynb")
    assert result.reason == "final", result.error
    assert result.answer == "3 parts, two couriers"
    nb = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    code = code_cells(tmp_path / "run.ipynb")
    shown = outputs(code[0])
    assert f"python {KERNEL_PYTHON}" in shown  # the code ran in the gateway's kernel (its own Python)
    assert "key here? False" in shown  # the model key never reached it
    assert "3 yes (" in shown  # the batch came back through the kernel protocol
    assert any("image/png" in (o.get("data") or {}) for o in code[0].outputs)  # an image, kept in the cell
    assert "child said two couriers" in outputs(code[1])
    sub_prompts = [b for b in srv.requests if b["model"] == "sub-model"]
    assert len(sub_prompts) == 3
    child = [b for b in srv.requests if b["model"] == "child-model"]
    assert len(child) == 2  # the child run's code ran in a gateway's kernel of its own, the same Python
    assert f"child python {KERNEL_PYTHON}" in json.dumps(child[1]["messages"][-1])
    assert TOKEN not in (tmp_path / "run.ipynb").read_text() and gateway.url in nb.cells[1].source  # never the token
    wait_for(lambda: gateway.kernels() == [], timeout=20, what="the run's kernels to be shut down")
