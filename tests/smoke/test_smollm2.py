"""A real model in the loop: ``rlm-kernel run`` and a ``%%rlm`` cell in a real
RLM kernel against SmolLM2-135M (llama.cpp on 127.0.0.1). Its replies are
messy; the runs must still end cleanly, within their budgets, with a valid
notebook. Its answers are never checked."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest
from _helpers import clean_env
from _kernel import Kernel
from _smoke import CLEAN_ENDS

from rlm_kernel import offline

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(900)]

RUN_SECONDS = 300  # the runs' own --timeout: a loaded 2-core machine reads ~60 prompt tokens/s
TEXT = "".join(f"Line {i}: the cat sat on mat number {i}.\n" for i in range(400))


def test_headless_run_ends_cleanly_within_its_budgets(smollm2, tmp_path):
    (tmp_path / "mats.txt").write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run.ipynb"
    command = [
        sys.executable, "-m", "rlm_kernel.cli", "run", "--context", str(tmp_path / "mats.txt"),
        "--query", "Which mat number is the largest?", "--max-iterations", "2", "--max-subcalls", "1",
        "--max-tokens", "20000", "--timeout", str(RUN_SECONDS), "-o", str(out), "--json",
    ]
    # Plain text replies (no JSON steps): the messiest input the loop gets.
    env = clean_env(RLM_MODEL=offline.MODEL, RLM_API_BASE=smollm2.api_base)
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_SECONDS + 120)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 0: an answer, 1: none; never a crash
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["reason"] in CLEAN_ENDS, result
    assert (done.returncode == 0) == (result["reason"] == "final"), result
    assert 1 <= result["iterations"] <= 2, result
    assert result["subcalls"] <= 1, result
    usage = result["usage"][offline.MODEL]
    assert usage["calls"] >= 1 and usage["prompt_tokens"] > 0
    nb = nbformat.read(str(out), as_version=4)
    nbformat.validate(nb)
    assert result["notebook"] == str(out)
    assert nb.cells[-1].metadata.rlm.role == "answer"
    assert nb.cells[-1].metadata.rlm.reason == result["reason"]
    steps = {c.metadata.rlm.get("step") for c in nb.cells if c.metadata.rlm.get("role") in ("thought", "code")}
    assert steps and max(steps) <= 2


def test_rlm_cell_in_a_kernel_ends_cleanly_within_its_budgets(smollm2, tmp_path):
    # The settings `rlm-kernel lab` gives its kernels: JSON steps and the model note.
    kernel = Kernel("rlm", tmp_path, env=clean_env(**smollm2.env()), start_timeout=120)
    try:
        reply, _ = kernel.execute(f"context = {TEXT!r}", timeout=60)
        assert reply["status"] == "ok"
        # The first root call alone reads the ~650-token system prompt, so a
        # 500-token budget must stop the run before a second step.
        reply, messages = kernel.execute(
            f"%%rlm --max-iterations 2 --max-subcalls 1 --max-tokens 500 --timeout {RUN_SECONDS}\n"
            "Which mat number is the largest?", timeout=RUN_SECONDS + 120)
        assert reply["status"] == "ok", reply
        shown = [m["content"]["data"].get("text/plain", "") for m in messages if m["msg_type"] == "display_data"]
        assert any("tiny offline model" in text for text in shown), shown[:3]
        reason = eval(kernel.value("rlm_result.reason"))
        assert reason in {"final", "budget"}, reason
        assert eval(kernel.value("rlm_result.iterations")) == 1
        assert eval(kernel.value("rlm_result.subcalls")) <= 1
        assert eval(kernel.value("sum(u['prompt_tokens'] for u in rlm_result.usage.values())")) > 500
        path = eval(kernel.value("rlm_result.notebook_path"))
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.cells[-1].metadata.rlm.reason == reason
        # the kernel is still usable
        reply, _ = kernel.execute("1 + 1", timeout=60)
        assert reply["status"] == "ok"
    finally:
        kernel.shutdown()
