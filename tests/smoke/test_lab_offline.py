"""The main job with no API key: ``rlm-kernel lab`` starts the bundled offline
model, and the RLM kernels of that JupyterLab use it; when JupyterLab goes
away, by SIGTERM or because ``rlm-kernel`` itself was killed, no model server
is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import clean_env, free_port
from _smoke import CLEAN_ENDS, alive, command_line, descendants
from jupyter_client import BlockingKernelClient

from rlm_kernel import offline

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(600)]

TOKEN = "rlm-smoke-token"
START_SECONDS = 120


class Lab:
    """``python -m rlm_kernel.cli lab`` in a process group of its own."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.port = free_port()
        self.runtime = tmp / "runtime"
        self.log = tmp / "lab.log"
        self.seen: set[int] = set()
        (tmp / "notebooks").mkdir()
        command = [sys.executable, "-m", "rlm_kernel.cli", "lab", "--no-browser", "--port", str(self.port),
                   str(tmp / "notebooks")]
        # TMPDIR: the model server's log, left behind when rlm-kernel is killed, lands in tmp
        full_env = clean_env(JUPYTER_TOKEN=TOKEN, JUPYTER_RUNTIME_DIR=str(self.runtime), TMPDIR=str(tmp), **env)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, env=full_env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str, method: str = "GET", body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"rlm-kernel lab exited early:\n{self.output()}"
            try:
                self.get("/api/status")
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.3)
        raise AssertionError(f"JupyterLab did not answer within {START_SECONDS} s:\n{self.output()}")

    def output(self) -> str:
        """Everything the command printed (its banner comes first, then JupyterLab's
        log, which grows with every server extension: a tail could lose the banner)."""
        return self.log.read_text(errors="replace")

    def below(self) -> list[int]:
        """The processes this one started (remembered for the teardown)."""
        pids = descendants(self.process.pid)
        self.seen.update(pids)
        return pids

    def model_servers(self) -> list[int]:
        return [pid for pid in self.below() if "llama_cpp.server" in command_line(pid)]

    def kernel_client(self) -> BlockingKernelClient:
        """A client of a new ``rlm`` kernel of this JupyterLab (started as a
        notebook would start it), ready; stop its channels when done."""
        kernel_id = self.get("/api/kernels", "POST", {"name": "rlm"})["id"]
        client = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        client.load_connection_file()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=START_SECONDS)
        except BaseException:
            client.stop_channels()
            raise
        return client

    def stop(self) -> None:
        if self.process.poll() is None:
            self.below()
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for pid in self.seen:  # never leave a model server, JupyterLab or kernel behind
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def lab(tmp_path) -> Iterator[Any]:
    started: list[Lab] = []

    def start(**env: str) -> Lab:
        instance = Lab(tmp_path, **env)
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.stop()


def _gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False


@pytest.fixture
def installed() -> None:
    if not offline.available():
        pytest.fail(f"The smoke tests need the offline model; {offline.INSTALL_HINT}.")


def test_lab_without_a_key_uses_the_offline_model_and_leaves_nothing_behind(installed, lab):
    server = lab()
    server.wait_ready()
    said = server.output()
    assert "tiny offline model for trying the interface, not for real tasks" in said, said
    specs = server.get("/api/kernelspecs")
    assert specs["default"] == "rlm" and "rlm" in specs["kernelspecs"]
    # A kernel started by this JupyterLab (as a notebook would) runs %%rlm on the offline model.
    client = server.kernel_client()
    try:
        reply = client.execute_interactive(
            "import os\ncontext = 'The cat sat on the mat. ' * 50\n"
            "settings = (os.environ['RLM_MODEL'], os.environ['RLM_API_BASE'])", timeout=60)
        assert reply["content"]["status"] == "ok"
        reply = client.execute_interactive("%%rlm --max-iterations 1 --max-tokens 1 --timeout 300\nWhat sat?",
                                           timeout=420, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]
        reply = client.execute_interactive("", user_expressions={
            "settings": "settings", "reason": "rlm_result.reason", "usage": "list(rlm_result.usage)"}, timeout=60)
        shown = {k: v["data"]["text/plain"] for k, v in reply["content"]["user_expressions"].items()}
    finally:
        client.stop_channels()
    model, api_base = eval(shown["settings"])
    assert model == offline.MODEL and api_base.startswith("http://127.0.0.1:")
    assert eval(shown["reason"]) in CLEAN_ENDS
    assert eval(shown["usage"]) == [offline.MODEL]
    # SIGTERM: JupyterLab stops its kernels, then the model server is stopped
    models = server.model_servers()
    assert len(models) == 1
    below = server.below()
    server.process.terminate()
    assert server.process.wait(60) == 0, server.output()
    assert _gone(below, 30) == [], [command_line(pid) for pid in below if alive(pid)]
    assert not _answers(f"{api_base}/models")


def test_killing_rlm_kernel_lab_stops_its_model_server_and_jupyterlab(installed, lab):
    server = lab()
    server.wait_ready()
    models = server.model_servers()
    assert len(models) == 1, server.output()
    below = server.below()
    os.kill(server.process.pid, signal.SIGKILL)  # no cleanup code of ours runs
    server.process.wait()
    assert _gone(below, 30) == [], [command_line(pid) for pid in below if alive(pid)]


def test_lab_with_a_model_set_starts_no_offline_model(lab):
    server = lab(RLM_MODEL="openai/gpt-4o-mini")
    server.wait_ready()
    assert server.model_servers() == []
    assert "offline model" not in server.output()


def test_lab_with_only_a_provider_key_gives_its_kernels_a_default_model(lab):
    server = lab(OPENAI_API_KEY="sk-fake-smoke-key-0123456789")
    server.wait_ready()
    assert server.model_servers() == []
    said = server.output()
    assert "offline model" not in said and "%%rlm cells use openai/gpt-4o-mini" in said, said
    client = server.kernel_client()
    try:
        reply = client.execute_interactive("", user_expressions={
            "model": "__import__('os').environ.get('RLM_MODEL')"}, timeout=60)
    finally:
        client.stop_channels()
    assert reply["content"]["user_expressions"]["model"]["data"]["text/plain"] == "'openai/gpt-4o-mini'"


# What stands in for JupyterLab below: it records its settings and the build's
# state at its start, waits for the state to say ready, asks the model server
# for its models, and exits.
FAKE_LAB = """
import json, os, sys, time, urllib.request
state_path = os.environ["RLM_OFFLINE_BUILD"]
def state():
    with open(state_path) as f:
        return json.load(f)
seen = {"at_start": state()["state"], "model": os.environ["RLM_MODEL"], "api_base": os.environ["RLM_API_BASE"]}
deadline = time.monotonic() + 120
while state()["state"] != "ready" and time.monotonic() < deadline:
    time.sleep(0.2)
seen["then"] = state()["state"]
with urllib.request.urlopen(os.environ["RLM_API_BASE"] + "/models", timeout=10) as reply:
    seen["models"] = [m["id"] for m in json.load(reply)["data"]]
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
"""


def test_lab_starts_at_once_while_the_offline_model_is_built_then_serves_it(installed, tmp_path):
    """``rlm-kernel lab --build-offline-model`` without the model: JupyterLab
    (a stand-in here) starts while the build (a stand-in: a sleep) goes on,
    with the model's settings; once the build is done the lab starts the real
    llama.cpp server on the port its kernels were given and marks the state
    ready; when JupyterLab exits, the server stops."""
    from rlm_kernel.offline_build import lab_while_building, read_state

    state, log, seen = tmp_path / "build.json", tmp_path / "build.log", tmp_path / "seen.json"
    build = [[sys.executable, "-c", "import time; time.sleep(3)"]]
    code = lab_while_building([sys.executable, "-c", FAKE_LAB, str(seen)], commands=build, paths=(state, log))
    assert code == 0
    found = json.loads(seen.read_text())
    assert found["at_start"] == "building" and found["then"] == "ready", found
    assert found["model"] == offline.MODEL and found["models"] == ["smollm2"]
    assert read_state(state)["api_base"] == found["api_base"]
    assert not _answers(f"{found['api_base']}/models")  # stopped with the lab
