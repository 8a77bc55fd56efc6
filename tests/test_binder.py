"""binder/ as mybinder.org uses it, checked in a fresh venv: binder/postBuild
(run from the repository's root, as mybinder runs it) installs the project;
the venv then lists the ``rlm`` kernel and the enabled labextension, a
server started through binder/start opens the quickstart with ``rlm`` as the
default kernel, and the quickstart runs headless against the scripted model
server. The install goes through pip as configured on this machine (its index
and cache); the steps print how long they took.
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nbformat
import pytest
from _examples import (
    EXAMPLES,
    FAKE_KEY,
    example_env,
    probe_source,
    quickstart_responder,
    read_probe,
)
from _helpers import free_port

from rlm_kernel.testing.server import ScriptedServer

pytestmark = [pytest.mark.binder, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parent.parent
BINDER = REPO / "binder"
INSTALL_TIMEOUT = 1200  # a first build of the labextension (no rlm_kernel/labextension yet) takes minutes
MILESTONES = ("Installing build dependencies: finished", "Building wheel for rlm-kernel", "Installing collected packages",
              "Successfully installed")

RUN_QUICKSTART = """\
import sys
import nbformat
from nbclient import NotebookClient

source, saved, executed, cwd, probe = sys.argv[1:6]
nb = nbformat.read(source, as_version=4)
nb.cells.append(nbformat.v4.new_code_cell(probe))
nbformat.write(nb, saved)
try:
    NotebookClient(nb, kernel_name="rlm", timeout=180, resources={"metadata": {"path": cwd}}).execute()
finally:
    nbformat.write(nb, executed)
"""


class Clock:
    """Prints how long each step took, past pytest's output capture."""

    def __init__(self, capsys: Any) -> None:
        self.capsys = capsys
        self.start = self.last = time.monotonic()

    def say(self, text: str) -> None:
        with self.capsys.disabled():
            print(f"\n[binder] {text}", end="", flush=True)

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self.say(f"{step}: {now - self.last:.1f} s (total {now - self.start:.1f} s)")
        self.last = now


def fresh_env(venv: Path, tmp: Path) -> dict[str, str]:
    """The environment of a new machine with only the venv on PATH: no dev
    venv, no Jupyter dirs of this user, no keys, no npm skip switch."""
    dev_bin = Path(sys.prefix) / "bin"
    path = [str(venv / "bin")] + [p for p in os.environ.get("PATH", "").split(os.pathsep)
                                   if p and Path(p).resolve() != dev_bin.resolve()]
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "HATCH_JUPYTER_BUILDER_SKIP_NPM", "JPY_SESSION_NAME")
           and not k.startswith(("JUPYTER", "RLM_")) and not k.endswith("_API_KEY")}
    env.update(PATH=os.pathsep.join(path), VIRTUAL_ENV=str(venv), PIP_DISABLE_PIP_VERSION_CHECK="1",
               JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"), JUPYTER_DATA_DIR=str(tmp / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"), IPYTHONDIR=str(tmp / "ipython"))
    return env


def run_logged(command: list[str], env: dict[str, str], log: Path, clock: Clock, timeout: float) -> None:
    """Run ``command`` from the repository's root, its output in ``log``;
    pip's slow phases are printed as they finish."""
    started = time.monotonic()
    with log.open("w") as out, subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True) as process:
        watchdog = threading.Timer(timeout, process.kill)
        watchdog.start()
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            if any(mark in line for mark in MILESTONES):
                clock.say(f"  +{time.monotonic() - started:5.1f} s  {line.strip()[:90]}")
        code = process.wait()
        watchdog.cancel()
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        pytest.fail(f"{' '.join(command)} failed (exit {code}); the end of {log}:\n{tail}")


def get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET, redirects not followed."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def serving(port: int, process: subprocess.Popen[Any], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited with code {process.returncode}"
        try:
            if get(port, "/api/status")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"the server did not answer on port {port} within {timeout:g} s")


def test_environment_yml_pins_python_node_and_pip():
    text = (BINDER / "environment.yml").read_text(encoding="utf-8")
    deps = re.findall(r"^\s*-\s*([A-Za-z0-9_-]+)(?:=([\d.]+))?\s*$", text, re.M)
    found = dict(deps)
    assert "conda-forge" in found and "pip" in found
    assert re.fullmatch(r"3\.1\d", found.get("python", "")), "environment.yml should pin a Python 3.1x"
    assert found.get("nodejs", "").split(".")[0] == "20", "Node builds the labextension on mybinder"
    for script in ("postBuild", "start"):
        assert os.access(BINDER / script, os.X_OK), f"binder/{script} must be executable"


def test_binder_files_build_an_environment_that_runs_the_quickstart(tmp_path, capsys):
    clock = Clock(capsys)
    venv = tmp_path / "venv"
    env = fresh_env(venv, tmp_path)
    if not (REPO / "rlm_kernel" / "labextension" / "static" / "style.js").exists():
        clock.say("no labextension build in the checkout: postBuild builds it with Node (several minutes)")

    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    clock.lap("python -m venv")
    run_logged(["bash", str(BINDER / "postBuild")], env, tmp_path / "postBuild.log", clock, INSTALL_TIMEOUT)
    clock.lap("binder/postBuild (pip install .[vision] and the example texts)")

    jupyter = str(venv / "bin" / "jupyter")
    specs = json.loads(subprocess.run([jupyter, "kernelspec", "list", "--json"], env=env, capture_output=True,
                                      text=True, check=True, timeout=120).stdout)["kernelspecs"]
    assert "rlm" in specs, sorted(specs)
    assert Path(specs["rlm"]["resource_dir"]).resolve().is_relative_to(venv.resolve()), specs["rlm"]["resource_dir"]
    listed = subprocess.run([jupyter, "labextension", "list"], env=env, capture_output=True, text=True,
                            check=True, timeout=120)
    listing = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr)  # no colours
    assert str(venv / "share" / "jupyter" / "labextensions") in listing, listing
    assert re.search(r"rlm-kernel v\S+ enabled .*OK", listing), listing
    clock.lap("jupyter kernelspec list, jupyter labextension list")

    port = free_port()
    command = ["bash", str(BINDER / "start"), jupyter, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--IdentityProvider.token=", "--ServerApp.open_browser=False"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    with (tmp_path / "server.log").open("w") as log:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        serving(port, server)
        status, headers, _ = get(port, "/")
        assert status in (301, 302) and urlsplit(headers["Location"]).path == "/lab/tree/examples/quickstart.ipynb", headers
        assert get(port, "/lab/tree/examples/quickstart.ipynb")[0] == 200
        assert get(port, "/api/contents/examples/quickstart.ipynb?content=0")[0] == 200
        kernelspecs = json.loads(get(port, "/api/kernelspecs")[2])
        assert kernelspecs["default"] == "rlm" and "rlm" in kernelspecs["kernelspecs"]
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    clock.lap("binder/start jupyter lab: opens the quickstart, default kernel rlm")

    script = tmp_path / "run_quickstart.py"
    script.write_text(RUN_QUICKSTART, encoding="utf-8")
    saved, executed = tmp_path / "quickstart.ipynb", tmp_path / "quickstart-executed.ipynb"
    probe = probe_source({"prefix": "__import__('sys').prefix", "module": "__import__('rlm_kernel').__file__"})
    with ScriptedServer(quickstart_responder()) as scripted:
        run = subprocess.run([str(venv / "bin" / "python"), str(script), str(EXAMPLES / "quickstart.ipynb"),
                              str(saved), str(executed), str(EXAMPLES), probe],
                             env=example_env(scripted.url, saved, base=env), capture_output=True, text=True,
                             timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    clock.lap("the quickstart, headless in the venv")

    nb = nbformat.read(executed, as_version=4)
    values = read_probe(nb)["values"]
    assert Path(ast.literal_eval(values["prefix"])).resolve() == venv.resolve()  # the venv's kernel ...
    assert Path(ast.literal_eval(values["module"])).resolve().is_relative_to(venv.resolve())  # ... installed there
    result = read_probe(nb)["result"]
    assert result["reason"] == "final", result
    assert "llm_query_batched: " in result["answer"]
    assert FAKE_KEY not in json.dumps(nb)
