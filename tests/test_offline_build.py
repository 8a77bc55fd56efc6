"""The offline model built behind JupyterLab (``rlm_kernel.offline_build``):
a build in a process of its own keeps its state in a file; a ``%%rlm`` cell
on that model says how far the build is, in one sentence, until the lab has
started the model's server, and then runs, nothing restarted.

The builds here run stand-in commands (a sleep, a wait for a file, a failing
command); the real pip commands run in ``./dev setup --offline`` and in
``./dev test`` (``python -m rlm_kernel.offline_build``, before the smoke tests
drive the model it installs), and ``tests/smoke/test_lab_offline.py`` starts
the real model's server once a build is done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tomllib
from _helpers import ROOT, clean_env, repl, wait_for
from _kernel import Kernel, texts

from rlm_kernel import offline
from rlm_kernel.errors import RLMError
from rlm_kernel.offline_build import (
    LLAMA_CPP,
    STATE_ENV,
    WEIGHTS,
    building,
    install_commands,
    read_state,
    refuse_while_building,
    start_build,
    write_state,
)
from rlm_kernel.testing.server import Script, ScriptedServer

PY = sys.executable


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen]]:
    """``start_build`` whose builds never outlive the test (each in a session of its own)."""
    builders: list[subprocess.Popen] = []

    def run(*args: object) -> subprocess.Popen:
        builders.append(start_build(*args))
        return builders[-1]

    yield run
    for builder in builders:
        if builder.poll() is None:
            os.killpg(builder.pid, signal.SIGKILL)
            builder.wait()


def _lab_env(state: Path, api_base: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    return {STATE_ENV: str(state), "RLM_MODEL": offline.MODEL, "RLM_API_BASE": api_base}


def _refusal(env: dict[str, str], model: str | None = None, api_base: str | None = None) -> str | None:
    try:
        refuse_while_building(model, api_base, env)
    except RLMError as error:
        return str(error)
    return None


def test_the_pins_are_the_smoke_extras_and_the_hints():
    extras = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["smoke"] == [LLAMA_CPP]
    assert WEIGHTS in offline.INSTALL_HINT and "--offline" in offline.INSTALL_HINT
    commands = install_commands(PY)
    assert [c[-1] for c in commands] == [LLAMA_CPP, WEIGHTS] and "--no-deps" in commands[1]


def test_a_build_behind_the_lab_says_how_far_it_is_until_the_server_is_up(tmp_path, start):
    state, log, done = tmp_path / "build.json", tmp_path / "build.log", tmp_path / "done"
    wait_for_file = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\nprint('compiled')"
    builder = start(state, log, [[PY, "-c", wait_for_file], [PY, "-c", "print('weights')"]])
    env = _lab_env(state)
    wait_for(lambda: building(read_state(state)), what="the build's state")
    said = _refusal(env)
    assert said and said.startswith("The offline model is still being built (0 min so far") and "RLM_MODEL" in said
    # minutes since the build began, from its state
    write_state(state, **{**read_state(state), "started": time.time() - 190})
    assert "(3 min so far" in _refusal(env)
    # another model, or another server, is not held back
    assert _refusal(env, model="openai/gpt-4o-mini") is None
    assert _refusal(env, api_base="http://127.0.0.1:1234/v1") is None
    assert _refusal(env, model=offline.MODEL) is not None
    done.touch()
    assert builder.wait(30) == 0
    assert read_state(state)["state"] == "built" and "compiled" in log.read_text() and "weights" in log.read_text()
    assert "built and its server is starting" in _refusal(env)
    write_state(state, **{**read_state(state), "state": "ready"})  # what the lab writes once the server is up
    assert _refusal(env) is None
    assert _refusal({**env, STATE_ENV: str(tmp_path / "no-such-file")}) is None


def test_a_failed_or_abandoned_build_is_said_with_its_log(tmp_path, start):
    state, log = tmp_path / "build.json", tmp_path / "build.log"
    builder = start(state, log, [[PY, "-c", "import sys; sys.exit('no compiler found')"]])
    assert builder.wait(30) != 0
    said = _refusal(_lab_env(state))
    assert said.startswith("The offline model could not be built (no compiler found; log: ")
    assert str(log) in said and "./dev setup --offline" in said
    # a build whose process is gone without a word (killed with the machine, say)
    write_state(state, state="building", started=time.time(), pid=builder.pid, log=str(log))
    assert "stopped before it was done" in _refusal(_lab_env(state))


@pytest.mark.kernel
def test_a_kernel_cell_says_the_model_is_being_built_then_runs_once_it_is_ready(tmp_path, start):
    """A real RLM kernel with a lab's settings: its %%rlm cell ends with the
    sentence while the build goes on, and runs once the state says ready
    (the scripted server stands in for llama.cpp's)."""
    state, log, done = tmp_path / "build.json", tmp_path / "build.log", tmp_path / "done"
    wait_for_file = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)"
    builder = start(state, log, [[PY, "-c", wait_for_file]])
    with ScriptedServer(Script(root=[repl("FINAL('from the offline model')")])) as server:
        kernel = Kernel("rlm", tmp_path, env=clean_env(**{**_lab_env(state, server.url), "RLM_MODEL": ROOT}))
        try:
            kernel.execute("context = 'some text'")
            wait_for(lambda: building(read_state(state)), what="the build's state")
            reply, messages = kernel.execute("%%rlm\nWhat is it?")
            assert reply["status"] == "error"
            assert "The offline model is still being built (0 min so far" in texts(messages, "stream", "error")
            assert not server.calls(), "the run reached the model"
            done.touch()
            assert builder.wait(30) == 0
            write_state(state, **{**read_state(state), "state": "ready", "api_base": server.url})
            reply, messages = kernel.execute("%%rlm\nWhat is it?")
            assert reply["status"] == "ok", texts(messages, "stream", "error")
            assert server.calls() and "from the offline model" in texts(messages, "stream", "display_data",
                                                                         "execute_result")
        finally:
            kernel.shutdown()
