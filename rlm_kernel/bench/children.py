"""Running a measurement in a child process, so each one has its own peak memory."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from .common import BenchError

_CHILD_BOOT = "import sys; from rlm_kernel.bench.children import _child_entry; _child_entry(sys.argv[1])"


def run_child(target: str, config: dict[str, Any], *, timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``target`` ("module:function", called with ``config``) in a fresh
    interpreter and return its JSON result, plus the child's own peak RSS and
    CPU time from wait4(). The child's stderr goes to ours (progress)."""
    with tempfile.TemporaryDirectory(prefix="rlm-bench-child-") as tmp:
        cfg_path = Path(tmp, "config.json")
        out_path = Path(tmp, "result.json")
        cfg_path.write_text(json.dumps({"target": target, "config": config, "result": str(out_path)}))
        env = dict(os.environ)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        with open(Path(tmp, "stdout.txt"), "w+", encoding="utf-8", errors="replace") as stdout:
            started = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_BOOT, str(cfg_path)], stdout=stdout, stderr=None,
                stdin=subprocess.DEVNULL, cwd=tmp, env=env,
            )
            timer = threading.Timer(timeout, proc.kill)
            timer.daemon = True
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            elapsed = time.monotonic() - started
            stdout.seek(0)
            output = stdout.read()
        result: dict[str, Any] | None = None
        if out_path.exists():
            result = json.loads(out_path.read_text())
    if result is None or "error" in result:
        detail = (result or {}).get("error") or output[-3000:] or f"exit code {proc.returncode}"
        if proc.returncode and proc.returncode < 0:
            detail += f"\n(killed by signal {-proc.returncode}; timeout {timeout:g} s)"
        raise BenchError(f"benchmark child {target} failed:\n{detail}")
    result["child"] = {
        "maxrss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "wall_s": round(elapsed, 3),
        "exit_code": proc.returncode,
    }
    return result


def _child_entry(config_path: str) -> None:
    spec = json.loads(Path(config_path).read_text())
    out = Path(spec["result"])
    try:
        module_name, func_name = spec["target"].split(":")
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(spec["config"])
    except BaseException:  # noqa: BLE001 - reported to the parent
        out.write_text(json.dumps({"error": traceback.format_exc()}))
        raise SystemExit(1) from None
    out.write_text(json.dumps(result, default=str))
