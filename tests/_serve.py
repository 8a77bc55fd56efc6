"""``rlm-kernel serve`` started for a test: the real litellm proxy on a
free port of 127.0.0.1, the models behind it a scripted server in this
process (``responder``: by default one step with a batch, then the answer;
SLOW and PAUSE in the query make the step long). Used by tests/test_serve.py
and tests/test_tracing.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
from _helpers import free_port, repl

from rlm_kernel.testing.server import ScriptedServer, all_text

CLI = str(Path(sys.executable).with_name("rlm-kernel"))
ANSWER = "forty-two"
STEP = repl("print(type(context).__name__, len(context))\n"
            "parts = llm_query_batched([f'part {i}' for i in range(3)])\nprint(parts[0])")


SLOW_STEP = repl("import time\nfor _ in range(300):\n    time.sleep(0.1)")
PAUSE_STEP = repl("import time\nfor _ in range(80):\n    time.sleep(0.1)")  # 8 s


def responder(body: dict) -> str:
    """Root: one step, then the answer (stateless, so requests may interleave); sub: an echo.
    A query with SLOW gets a step that takes 30 s, one with PAUSE a step of 8 s."""
    if body.get("model") != "root-model":
        return "sub says " + body["messages"][-1]["content"]
    if len(body["messages"]) > 2:
        return f"FINAL({ANSWER})"
    text = all_text(body)
    return SLOW_STEP if "SLOW" in text else PAUSE_STEP if "PAUSE" in text else STEP


class Served:
    def __init__(self, base: Path, extra_env: dict[str, str] | None = None, models: Any = None) -> None:
        """``extra_env``: more variables for the server; ``models``: its models' responder."""
        self.models = ScriptedServer(models or responder).start()
        self.runs = base / "runs"
        self.tmp = base / "tmp"
        self.tmp.mkdir()
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("RLM_")
               and k != "LITELLM_MASTER_KEY"}
        env.update(TMPDIR=str(self.tmp), LITELLM_LOCAL_MODEL_COST_MAP="True", **(extra_env or {}))
        self.proc = subprocess.Popen(
            [CLI, "serve", "--model", "openai/root-model", "--sub-model", "openai/sub-model",
             "--api-base", self.models.url, "--port", str(self.port), "--runs-dir", str(self.runs),
             "--max-iterations", "10"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(180):
            self.stop()
            pytest.fail("the proxy did not start:\n" + "".join(self.output[-40:]))
        self.url = f"http://127.0.0.1:{self.port}/v1"
        keys = re.findall(r"shown once, stored nowhere\): (sk-[0-9a-f]+)", "".join(self.output))
        assert len(keys) == 1, self.output[:5]
        self.key = keys[0]
        self.client = openai.OpenAI(base_url=self.url, api_key=self.key, max_retries=0, timeout=60)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if "rlm-kernel: ready:" in line:
                self.ready.set()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.models.stop()
