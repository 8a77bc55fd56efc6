"""The harness benchmark's cold starts: how long a fresh process (or kernel)
takes to its first root request and its answer, ours beside ``rlms``.

* **litellm alone**: a fresh interpreter importing litellm as ours does,
  nothing else. Every model call of ours goes through litellm, so this is
  the floor of any cold start of ours; the target is a cold CLI run within
  ``CLI_OVER_IMPORT_TARGET`` seconds of it.
* **ours, cold CLI**: ``rlm-kernel run`` on a small text file, a one-step
  run, from the process's spawn to its exit.
* **rlms, cold**: a fresh interpreter asking ``rlms`` the same one-step
  question, spawn to exit.
* **kernel**: an RLM kernel started with jupyter_client. Ready: its first
  kernel_info answered. "At once": a ``%%rlm`` sent as soon as it is ready,
  the time from the kernel's start to the run's first root request. "After
  typing": a ``%%rlm`` sent ``TYPING_S`` seconds after it is ready (a person
  who writes the question first), the time from the cell's execute to its
  first root request; and whether the cell said "Loading litellm".

Every child gets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (as the kernel and CLI
set it themselves) and may write its compiled bytecode; one untimed round
first leaves it in place, as any start after a person's first finds it (with
``PYTHONDONTWRITEBYTECODE`` set, as on some machines, every start compiled
our modules again). Times are medians of ``repeats`` fresh starts.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import BenchError, BenchServer, Progress, Router, median, quiet

CLI_OVER_IMPORT_TARGET = 0.3  # seconds: a cold CLI run over the import of litellm alone
TYPING_S = 5.0
QUERY = "What does the text say?"
CONTEXT = "The quick brown fox jumps over the lazy dog.\n" * 20

_LITELLM_ALONE = "from rlm_kernel.engine.model.litellm_setup import load_litellm\nload_litellm()\n"
_RLMS_RUN = """
import sys
from rlm import RLM
url, path, query = sys.argv[1:4]
rlm = RLM(backend="openai", backend_kwargs={"model_name": "start-rlms", "base_url": url, "api_key": "bench"},
          max_iterations=2)
try:
    print(rlm.completion(open(path).read(), root_prompt=query).response)
finally:
    rlm.close()
"""


def _final(harness: str) -> str:
    if harness == "rlms":
        return 'Done.\n```repl\nanswer["content"] = "done"\nanswer["ready"] = True\n```'
    return "Done.\n```repl\nFINAL('done')\n```"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("RLM_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _timed(command: list[str], cwd: str, timeout: float) -> dict[str, Any]:
    """Spawn to exit: wall time, the child's CPU time (wait4), its output."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(command, cwd=cwd, env=_env(), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BenchError(f"{command[:4]} did not finish within {timeout:g} s") from None
        wall = time.monotonic() - started
        out.seek(0)
        text = out.read().decode(errors="replace")
    return {"started": started, "wall_s": wall, "returncode": proc.returncode, "output": text[-2000:]}


def _first_request_after(router: Router, model: str, since: float) -> float | None:
    times = [e["t"] for e in router.requests(model) if e["t"] >= since]
    return min(times) - since if times else None


def _kernel_start(url: str, router: Router, cwd: str, pause: float, timeout: float) -> dict[str, Any]:
    """One RLM kernel: started, ready, then (after ``pause``) one %%rlm run."""
    from jupyter_client.manager import KernelManager

    started = time.monotonic()
    km = KernelManager(kernel_name="rlm")
    km.start_kernel(cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
        ready = time.monotonic() - started
        time.sleep(pause)
        sent = time.monotonic()
        kc.execute("context = " + repr(CONTEXT))
        msg_id = kc.execute(f"%%rlm --model openai/start-kernel --api-base {url}\n{QUERY}")
        texts, status = _until_idle(kc, msg_id, timeout)
        return {"ready_s": ready, "first_request_from_start_s": _first_request_after(router, "start-kernel", started),
                "first_request_from_cell_s": _first_request_after(router, "start-kernel", sent),
                "loading_note": any("Loading litellm" in t for t in texts), "status": status}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _until_idle(kc: Any, msg_id: str, timeout: float) -> tuple[list[str], str | None]:
    texts: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            reply = kc.get_shell_msg(timeout=timeout)
            return texts, reply["content"].get("status")
    raise BenchError(f"the kernel's %%rlm cell did not finish within {timeout:g} s")


def run_starts(*, repeats: int = 3, harnesses: tuple[str, ...] | list[str] = ("ours", "rlms"),
               progress: Progress = quiet, timeout: float = 300.0, untimed_round: bool = True,
               typing_s: float = TYPING_S) -> dict[str, Any]:
    """Each start ``repeats`` times, one after the other (after an untimed
    round, unless ``untimed_round`` is False); the figures."""
    router = Router()
    for name in ("ours", "rlms", "kernel"):
        router.roots[f"start-{name}"] = lambda step, body, name=name: _final(name)
    server = BenchServer(router).start()
    runs: dict[str, list[dict[str, Any]]] = {"litellm": [], "ours": [], "rlms": [], "kernel_at_once": [],
                                             "kernel_after_typing": []}
    py = sys.executable
    try:
        with tempfile.TemporaryDirectory(prefix="rlm-bench-start-") as tmp:
            context = Path(tmp, "context.txt")
            context.write_text(CONTEXT)
            first = 0 if untimed_round else 1
            for i in range(first, repeats + 1):
                progress(f"cold starts {i}/{repeats}{' (untimed: bytecode compiled)' if i == 0 else ''}: litellm "
                         f"alone, ours (rlm-kernel run){', rlms' if 'rlms' in harnesses else ''}, an RLM kernel "
                         "twice ...")
                runs["litellm"].append(_timed([py, "-c", _LITELLM_ALONE], tmp, timeout))
                if "ours" in harnesses:
                    cli = _timed([py, "-m", "rlm_kernel.cli", "run", "--context", str(context), "--query", QUERY,
                                  "--model", "openai/start-ours", "--api-base", server.url, "-o",
                                  str(Path(tmp, "run.ipynb")), "--quiet"], tmp, timeout)
                    cli["first_request_s"] = _first_request_after(router, "start-ours", cli["started"])
                    cli["answer"] = cli["output"].strip().splitlines()[-1:] == ["done"]
                    runs["ours"].append(cli)
                    runs["kernel_at_once"].append(_kernel_start(server.url, router, tmp, 0.0, timeout))
                    runs["kernel_after_typing"].append(_kernel_start(server.url, router, tmp, typing_s, timeout))
                if "rlms" in harnesses:
                    peer = _timed([py, "-c", _RLMS_RUN, server.url, str(context), QUERY], tmp, timeout)
                    peer["first_request_s"] = _first_request_after(router, "start-rlms", peer["started"])
                    peer["answer"] = peer["output"].strip().splitlines()[-1:] == ["done"]
                    runs["rlms"].append(peer)
    finally:
        server.stop()
    if untimed_round:
        for name in runs:
            runs[name][:1] = []
    _check(runs)
    return {"repeats": repeats, "typing_s": typing_s, "runs": runs, "summary": summarize_starts(runs, typing_s)}


def _check(runs: dict[str, list[dict[str, Any]]]) -> None:
    problems = []
    for name in ("ours", "rlms"):
        for run in runs[name]:
            if run["returncode"] != 0 or not run["answer"]:
                problems.append(f"{name}: exit {run['returncode']}, output ...{run['output'][-300:]!r}")
    for name in ("kernel_at_once", "kernel_after_typing"):
        for run in runs[name]:
            if run["status"] != "ok" or run["first_request_from_start_s"] is None:
                problems.append(f"{name}: the %%rlm cell ended {run['status']!r} with no root request")
    if problems:
        raise BenchError("a cold start did not do the scripted work:\n  " + "\n  ".join(problems))


def summarize_starts(runs: dict[str, list[dict[str, Any]]], typing_s: float = TYPING_S) -> dict[str, Any]:
    def med(name: str, key: str) -> float | None:
        return median(r[key] for r in runs[name] if r.get(key) is not None) if runs[name] else None

    out = {
        "litellm_import_s": med("litellm", "wall_s"),
        "ours_cli_s": med("ours", "wall_s"), "ours_first_request_s": med("ours", "first_request_s"),
        "rlms_s": med("rlms", "wall_s"), "rlms_first_request_s": med("rlms", "first_request_s"),
        "kernel_ready_s": med("kernel_at_once", "ready_s"),
        "kernel_first_request_s": med("kernel_at_once", "first_request_from_start_s"),
        "kernel_typed_first_request_s": med("kernel_after_typing", "first_request_from_cell_s"),
        "kernel_loading_notes": sum(1 for r in runs["kernel_at_once"] + runs["kernel_after_typing"]
                                    if r["loading_note"]),
        "kernel_typed_loading_notes": sum(1 for r in runs["kernel_after_typing"] if r["loading_note"]),
        "typing_s": typing_s,
    }
    cli, alone = out["ours_cli_s"], out["litellm_import_s"]
    over = cli - alone if cli is not None and alone is not None else None
    out["targets"] = {
        "cold_cli_over_litellm_import_s": {"value": over, "target": f"<= {CLI_OVER_IMPORT_TARGET}",
                                           "met": None if over is None else over <= CLI_OVER_IMPORT_TARGET},
    }
    if cli is not None and out["rlms_s"]:
        out["targets"]["cold_cli_ours_to_rlms"] = {"value": cli / out["rlms_s"], "target": "reported", "met": None}
    return out


def start_rows(summary: dict[str, Any]) -> list[list[str]]:
    """The cold-start table: what, ours, rlms."""
    def s(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f} s"

    return [
        ["import of litellm alone (a fresh interpreter, spawn to exit)", s(summary["litellm_import_s"]), ""],
        ["cold CLI run, one step: spawn to exit (ours: rlm-kernel run)", s(summary["ours_cli_s"]),
         s(summary["rlms_s"])],
        ["  spawn to the first root request", s(summary["ours_first_request_s"]), s(summary["rlms_first_request_s"])],
        ["RLM kernel: start to ready (first kernel_info answered)", s(summary["kernel_ready_s"]), ""],
        ["  %%rlm sent when ready: kernel start to first root request", s(summary["kernel_first_request_s"]), ""],
        [f"  %%rlm sent {summary.get('typing_s', TYPING_S):g} s after ready: the cell's execute to first root request",
         s(summary["kernel_typed_first_request_s"]), ""],
        ["  of those typed cells, how many said \"Loading litellm\"", str(summary["kernel_typed_loading_notes"]), ""],
    ]


__all__ = ["CLI_OVER_IMPORT_TARGET", "run_starts", "start_rows", "summarize_starts"]
