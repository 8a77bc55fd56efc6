"""``--executor gateway`` against a real Jupyter Kernel Gateway (the other
gateway people run, jupyter_server's own kernel service): started once for
this module on 127.0.0.1 from its own venv under the cache, with a token,
its kernels running a Python that holds only ipykernel (tests/_gateway.py).
tests/test_gateway.py runs the whole set against Jupyter Enterprise Gateway;
here, what could differ between the two: the run with its batch and child
run (kernels started, channels, shutdown), an interrupt through the
gateway's REST interrupt, and a refused token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import start_cli
from _gateway import (
    KERNEL_GATEWAY,
    KEY,
    TOKEN,
    Gateway,
    check_a_run_with_a_batch_and_a_child_run,
    code_cells,
    gateway_rlm,
    outputs,
    running_gateway,
)
from _helpers import clean_env, feedback_after, repl, wait_for

from rlm_kernel.testing.server import Script, ScriptedServer


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with running_gateway(KERNEL_GATEWAY, [f"--KernelGatewayApp.auth_token={TOKEN}",
                                          "--JupyterWebsocketPersonality.list_kernels=True"],
                         tmp_path_factory.mktemp("kernel-gateway"), {}) as started:
        yield started


def test_a_run_with_a_batch_and_a_child_run_in_the_kernel_gateways_kernel(gateway: Gateway, tmp_path: Path) -> None:
    check_a_run_with_a_batch_and_a_child_run(gateway, tmp_path)


def test_a_cell_timeout_interrupts_the_kernel_gateways_kernel_and_the_run_goes_on(gateway: Gateway,
                                                                                  tmp_path: Path) -> None:
    root = [repl("import time\nx = 41\nprint('napping', flush=True)\ntime.sleep(120)\nprint('never')"),
            repl("x += 1\nprint('still there, x is', x)"), "FINAL_VAR(x)"]
    with ScriptedServer(Script(root=root)) as srv:
        result = gateway_rlm(srv, gateway, cell_timeout=2.0).completion("a parcel", "Nap.",
                                                                        output=tmp_path / "run.ipynb")
        told = feedback_after(srv, 1)
    assert result.reason == "final", result.error
    assert result.answer == 42  # the same kernel, interrupted, not restarted: x survived
    assert result.elapsed_s < 60
    assert "TimeoutError" in told
    code = code_cells(tmp_path / "run.ipynb")
    assert code[0].metadata["rlm"]["status"] == "error" and "napping" in outputs(code[0])
    assert "never" not in outputs(code[0]) and "still there, x is 42" in outputs(code[1])
    wait_for(lambda: gateway.kernels() == [], timeout=20, what="the run's kernel to be shut down")


def test_a_refused_token_is_one_sentence(gateway: Gateway, tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_text("a document")
    wrong = "wrong-token-0123456789"
    with ScriptedServer(Script(root=["FINAL(never)"])) as srv:
        process = start_cli(["run", "--context", "doc.txt", "--query", "q", "--model", "openai/root-model",
                             "-o", "run.ipynb", "--executor", "gateway", "--api-base", srv.url,
                             "--gateway-url", gateway.url], tmp_path,
                            env=clean_env(OPENAI_API_KEY=KEY, RLM_GATEWAY_TOKEN=wrong))
        out, err = process.communicate(timeout=60)
        assert srv.requests == []  # said before any model call
    assert process.returncode == 2, err
    assert "the token was refused" in err and len(err.strip().splitlines()) == 1, err
    assert wrong not in out + err and "Traceback" not in err
