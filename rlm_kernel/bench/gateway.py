"""``rlm-kernel bench gateway``: what a run whose namespace lives in a
Jupyter gateway's kernel costs per step, side by side with a local namespace
and a sandboxed one, in one invocation.

Per step: a root step whose code makes one ``llm_query`` and prints; timed
within a run of ``steps`` steps from its first code cell's end to its last
one's, divided by the steps between them (so the kernel's start, seconds
through a gateway and the noisiest part, is left out; a run of one step
shows it). The gateway is the one at ``--gateway-url`` (token from
``$RLM_GATEWAY_TOKEN``), else a Jupyter Enterprise Gateway started here on
127.0.0.1 from ``./dev setup``'s venv under the cache, with its local
process proxy: the network is loopback, so the figure is the protocol's
and the gateway's own cost (a websocket through the gateway's server,
against the sandbox's direct ZMQ sockets). Target: <= 1.5x the sandbox's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._local_server import free_port, wait_until_serving
from .common import BenchError, Progress, quiet
from .report import fmt_ratio, machine_info, md_table, median, table, verdict

STEP_TARGET = 1.5  # per step, against the sandbox
CACHE = Path(os.environ.get("RLM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "rlm-kernel")
GATEWAY = CACHE / "enterprise-gateway-3.3.0" / "bin" / "jupyter-enterprisegateway"  # ./dev's GATEWAY_VENV
KERNEL_PYTHON = CACHE / "gateway-kernel-python" / "bin" / "python"  # ./dev's GATEWAY_KERNEL_VENV
KINDS = ("local", "sandboxed", "gateway")


@contextlib.contextmanager
def local_gateway(progress: Progress = quiet) -> Iterator[tuple[str, str]]:
    """A Jupyter Enterprise Gateway on 127.0.0.1 from ./dev's venv: (url, token)."""
    if not GATEWAY.exists() or not KERNEL_PYTHON.exists():
        raise BenchError(f"Jupyter Enterprise Gateway is not installed under {CACHE}: ./dev setup installs it "
                         "(or give --gateway-url).")
    work = Path(tempfile.mkdtemp(prefix="rlm-bench-gateway-"))
    spec = work / "share" / "kernels" / "python3"
    spec.mkdir(parents=True)
    proxy = "enterprise_gateway.services.processproxies.processproxy.LocalProcessProxy"
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(KERNEL_PYTHON), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python", "metadata": {"process_proxy": {"class_name": proxy}}}))
    port = free_port()
    token = secrets.token_hex(16)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(work), "JUPYTER_PATH": str(work / "share"),
           "JUPYTER_DATA_DIR": str(work / "data"), "JUPYTER_RUNTIME_DIR": str(work / "runtime")}
    progress("starting a Jupyter Enterprise Gateway on 127.0.0.1")
    with open(work / "gateway.log", "w") as log:
        process = subprocess.Popen([str(GATEWAY), "--ip=127.0.0.1", f"--port={port}",
                                    f"--EnterpriseGatewayApp.auth_token={token}",
                                    "--EnterpriseGatewayApp.unauthorized_users={'nobody'}"], cwd=work, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_until_serving(f"{url}/api/kernelspecs", process, 120,
                                      headers={"Authorization": f"token {token}"}):
                raise BenchError("The Jupyter Enterprise Gateway did not start; see " + str(work / "gateway.log"))
            yield url, token
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


class _CellClock:
    """A sink that notes when each code cell finished."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def __getattr__(self, name: str) -> Any:  # every other sink call: nothing to note
        return lambda *args, **kwargs: None

    def cell_finished(self, run: Any, cell: Any) -> None:
        if cell.cell_type == "code":
            self.ends.append(time.perf_counter())

    def child_sink(self, run: Any, record: Any) -> None:
        return None


def _run_once(kind: str, steps: int, folder: Path, gateway: tuple[str, str]) -> tuple[float, float | None]:
    """A run's wall time, and its time per step (None for one step)."""
    from ..api import RLM
    from ..testing.server import Script
    from .servers import BenchServer

    replies = [f"```repl\nr = llm_query('part {i}')\nprint({i}, len(r))\n```" for i in range(steps)]
    server = BenchServer(Script(root=[*replies, "FINAL(done)"], sub=lambda prompt: "ok")).start()
    where: dict[str, Any] = {
        "local": {}, "sandboxed": {"sandbox": True, "sandbox_dir": str(folder)},
        "gateway": {"executor": "gateway", "gateway_url": gateway[0], "gateway_token": gateway[1]}}[kind]
    try:
        rlm = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=server.url, api_key="x",
                  max_iterations=steps + 2, **where)
        clock = _CellClock()
        started = time.perf_counter()
        result = rlm.completion("a small context", "q", sink=clock)  # type: ignore[arg-type]
        took = time.perf_counter() - started
    finally:
        server.stop()
    if result.reason != "final":
        raise BenchError(f"a {kind} run ended with {result.reason}: {result.error}")
    ends = clock.ends
    return took, (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else None


def run_gateway(*, steps: int = 40, repeats: int = 5, url: str | None = None,
                progress: Progress = quiet) -> dict[str, Any]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    folder = Path(tempfile.mkdtemp(prefix="rlm-bench-gateway-"))
    with contextlib.ExitStack() as stack:
        if url:
            from ..gateway.client import token_from_env

            gateway = (url, token_from_env() or "")
        else:
            gateway = stack.enter_context(local_gateway(progress))
        progress("warming up (litellm's import, a first kernel of each kind)")
        for kind in KINDS:
            _run_once(kind, 1, folder, gateway)
        times: dict[str, dict[str, list[float]]] = {kind: {"one": [], "many": []} for kind in KINDS}
        per_turn: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for turn in range(repeats):  # in turns, so a change in the machine's load falls on every kind alike
            progress(f"turn {turn + 1} of {repeats}: a run of 1 step and one of {steps}, each kind")
            for kind in KINDS:
                times[kind]["one"].append(_run_once(kind, 1, folder, gateway)[0])
                took, per_step = _run_once(kind, steps, folder, gateway)
                times[kind]["many"].append(took)
                per_turn[kind].append(per_step or 0.0)
    figures = {kind: {"run_1_step_s": median(times[kind]["one"]), f"run_{steps}_steps_s": median(times[kind]["many"]),
                      "per_step_s": median(per_turn[kind])} for kind in KINDS}

    def ratios(a: str, b: str) -> list[float]:  # each turn's ratio (its kinds ran back to back)
        return [x / y for x, y in zip(per_turn[a], per_turn[b], strict=True) if x > 0 and y > 0]

    against_sandbox, against_local = ratios("gateway", "sandboxed"), ratios("gateway", "local")
    step_ratio = median(against_sandbox)
    return {
        "benchmark": "gateway", "machine": machine_info(), "steps": steps, "repeats": repeats, "figures": figures,
        "gateway": "given" if url else "Jupyter Enterprise Gateway 3.3.0 on 127.0.0.1 (local process proxy)",
        "summary": {"per_step_vs_sandbox": step_ratio, "per_step_vs_sandbox_turns": against_sandbox,
                    "per_step_vs_local": median(against_local), "per_step_vs_local_turns": against_local,
                    "sandbox_vs_local": median(ratios("sandboxed", "local")),
                    "targets": {"per_step": step_ratio is not None and step_ratio <= STEP_TARGET}},
    }


def _rows(results: dict[str, Any]) -> list[list[str]]:
    figures, summary, steps = results["figures"], results["summary"], results["steps"]

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 1000:.1f} ms"

    def spread(values: list[float]) -> str:
        return f" (turns {min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""

    return [
        ["per step (one llm_query)", *(ms(figures[k]["per_step_s"]) for k in KINDS),
         fmt_ratio(summary["per_step_vs_local"]) + spread(summary["per_step_vs_local_turns"]),
         fmt_ratio(summary["per_step_vs_sandbox"]) + spread(summary["per_step_vs_sandbox_turns"]),
         f"<= {STEP_TARGET}x the sandbox's: {verdict(summary['targets']['per_step'])}"],
        ["run of 1 step (kernel start included)", *(ms(figures[k]["run_1_step_s"]) for k in KINDS), "", "", ""],
        [f"run of {steps} steps", *(ms(figures[k][f"run_{steps}_steps_s"]) for k in KINDS), "", "", ""],
    ]


HEADER = ["", "local", "sandboxed", "gateway", "gateway / local", "gateway / sandboxed", "target"]


def format_text(results: dict[str, Any]) -> str:
    return (f"Runs whose namespace is a Jupyter gateway's kernel ({results['gateway']}) against a local namespace "
            f"and a sandboxed one (median of {results['repeats']} turns; ratios: the median of each turn's; "
            "scripted server answering at once)\n" + table(_rows(results), HEADER))


def format_markdown(results: dict[str, Any]) -> str:
    return ("## Gateway runs\n\n`rlm-kernel bench gateway`: per-step cost with the namespace in a kernel a Jupyter "
            f"gateway started ({results['gateway']}), against a local namespace and a sandboxed one, median of "
            f"{results['repeats']} turns (ratios: the median of each turn's, the kinds run back to back in a turn)."
            "\n\n" + md_table(_rows(results), HEADER))


__all__ = ["format_markdown", "format_text", "local_gateway", "run_gateway"]
