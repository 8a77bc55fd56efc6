"""``rlm-kernel bench harness``: our loop against the official ``rlms``
library, side by side, against one scripted server on 127.0.0.1.

Two scenarios, each run by each harness in a child process of its own (so
each harness's peak memory is its own):

* **steps**: ``steps`` root steps whose cell is ``x = len(context)`` over a
  ``context_chars`` context; the model replies at once; the last step ends
  the run (``FINAL(...)`` for ours, ``answer["ready"] = True`` for rlms).
  One cold run (the first in a fresh process, after the imports) and
  ``repeats`` warm runs. Reported per step: the whole ``completion()`` call
  divided by the steps, and the median gap between consecutive root requests
  seen by the server (pure per-step loop overhead).
* **batched**: one cell calling ``llm_query_batched`` over ``prompts``
  prompts while the server takes ``latency`` s per sub-call, both harnesses at
  their default concurrency. The cell times the call itself and hands the
  time back as its answer. Beside them, a third child sends the same prompts
  through bare ``litellm.acompletion`` at our concurrency, no RLM at all: the
  floor our batch sits on, since every model call of ours goes through
  litellm.
* **cold starts** (``starts=True``, as ``rlm-kernel bench harness`` runs it;
  ``harness_start.py``): a cold ``rlm-kernel run`` against a cold ``rlms`` run
  and against the import of litellm alone, and an RLM kernel's start to its
  first root request.
"""

from __future__ import annotations

import math
from typing import Any

from ..testing.server import Reply
from . import (
    BenchError,
    BenchServer,
    Progress,
    Router,
    machine_info,
    median,
    quiet,
    split_runs,
    step_gaps_ms,
)
from .harness_report import format_markdown, format_text

HARNESSES = ("ours", "rlms")
QUERY = "How long is the context?"

STEP_TARGET = 0.5  # ours / rlms per-step time (retired for the cold run: litellm's import)
BATCH_IDEAL_TARGET = 1.15  # ours / ideal
BATCH_SPEEDUP_TARGET = 3.0  # rlms / ours


def rlms_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("rlms")
    except metadata.PackageNotFoundError:
        return None


# -- what the scripted root model says ---------------------------------------------


def _trivial_reply(step: int) -> str:
    return f"Step {step}: look at the context.\n```repl\nx = len(context)\n```"


def _final_code(harness: str, value_expr: str) -> str:
    if harness == "ours":
        return f"FINAL({value_expr})"
    return f'answer["content"] = {value_expr}\nanswer["ready"] = True'


def _steps_reply(harness: str, steps: int):
    def reply(step: int, body: dict[str, Any]) -> str:
        if step < steps:
            return _trivial_reply(step)
        return f"Step {step}: done.\n```repl\nx = len(context)\n{_final_code(harness, repr('done'))}\n```"

    return reply


def _batched_code(prompts: int) -> str:
    return (
        "import time\n"
        f"prompts = [f'prompt {{i}}' for i in range({prompts})]\n"
        "t0 = time.perf_counter()\n"
        "results = llm_query_batched(prompts)\n"
        "elapsed = time.perf_counter() - t0\n"
        "ok = sum(1 for r, p in zip(results, prompts) if r == 'answer to ' + p)\n"
    )


def _batched_reply(harness: str, prompts: int):
    code = _batched_code(prompts) + _final_code(harness, "f'{elapsed:.6f} {ok}'")

    def reply(step: int, body: dict[str, Any]) -> str:
        return f"Ask about every prompt at once.\n```repl\n{code}\n```"

    return reply


def _sub_reply(latency: float):
    def reply(prompt: str) -> Reply:
        return Reply(text="answer to " + prompt, delay=latency)

    return reply


# -- the parent ----------------------------------------------------------------------


def run_harness(
    *,
    steps: int = 30,
    context_chars: int = 1_000_000,
    prompts: int = 256,
    latency: float = 0.1,
    repeats: int = 3,
    harnesses: tuple[str, ...] | list[str] | None = None,
    progress: Progress = quiet,
    timeout: float = 1800.0,
    nodelay: bool = True,
    starts: bool = False,
) -> dict[str, Any]:
    """Run both scenarios for each harness (and the cold starts with
    ``starts``); return figures and verdicts.
    ``nodelay=False`` keeps the stock scripted server's Nagle delay (~40 ms
    per request), as when the issue's reference figures were taken."""
    from . import run_child

    if steps < 1 or prompts < 1 or repeats < 0:
        raise BenchError("steps and prompts must be at least 1, repeats at least 0")
    wanted = list(harnesses or HARNESSES)
    notes: list[str] = []
    if "rlms" in wanted and rlms_version() is None:
        wanted.remove("rlms")
        notes.append("rlms is not installed (pip install 'rlm-kernel[bench]'); only our harness ran.")
    router = Router()
    for name in HARNESSES:
        router.roots[f"steps-{name}"] = _steps_reply(name, steps)
        router.roots[f"batch-{name}"] = _batched_reply(name, prompts)
        router.subs[f"sub-{name}"] = _sub_reply(latency)
    router.subs["sub-litellm"] = _sub_reply(latency)
    results: dict[str, Any] = {
        "benchmark": "harness", "machine": machine_info(), "notes": notes,
        "config": {"steps": steps, "context_chars": context_chars, "prompts": prompts, "latency_s": latency,
                   "repeats": repeats, "harnesses": wanted, "server_nodelay": nodelay},
        "steps": {}, "batched": {},
    }
    server = BenchServer(router, nodelay=nodelay).start()
    try:
        for name in wanted:
            progress(f"steps: {name}, {steps} root steps over a {context_chars:,}-character context "
                     f"(1 cold + {repeats} warm runs) ...")
            cfg = {"harness": name, "url": server.url, "steps": steps, "context_chars": context_chars,
                   "repeats": repeats, "root_model": f"steps-{name}", "sub_model": f"sub-{name}"}
            child = run_child("rlm_kernel.bench.harness_children:child_steps", cfg, timeout=timeout)
            _attach_step_gaps(child, router.requests(f"steps-{name}"), steps)
            results["steps"][name] = child
        for name in wanted:
            progress(f"batched: {name}, llm_query_batched over {prompts} prompts at {latency:g} s each ...")
            server.max_in_flight = 0
            before = router.sub_counts.get(f"sub-{name}", 0)
            cfg = {"harness": name, "url": server.url, "context_chars": context_chars,
                   "repeats": max(1, repeats), "root_model": f"batch-{name}", "sub_model": f"sub-{name}"}
            child = run_child("rlm_kernel.bench.harness_children:child_batched", cfg, timeout=timeout)
            child["server_subcalls"] = router.sub_counts.get(f"sub-{name}", 0) - before
            child["server_max_in_flight"] = server.max_in_flight
            results["batched"][name] = child
        if "ours" in wanted:
            progress(f"batched: the same {prompts} prompts through bare litellm.acompletion (the floor) ...")
            server.max_in_flight = 0
            before = router.sub_counts.get("sub-litellm", 0)
            cfg = {"url": server.url, "prompts": prompts, "repeats": max(1, repeats), "sub_model": "sub-litellm"}
            child = run_child("rlm_kernel.bench.harness_children:child_litellm_floor", cfg, timeout=timeout)
            child["server_subcalls"] = router.sub_counts.get("sub-litellm", 0) - before
            child["server_max_in_flight"] = server.max_in_flight
            results["litellm_floor"] = child
    finally:
        server.stop()
    if starts:
        from .harness_start import run_starts

        results["starts"] = run_starts(repeats=max(1, repeats), harnesses=wanted, progress=progress, timeout=timeout)
    _check(results, steps, prompts)
    results["summary"] = summarize(results)
    return results


def _attach_step_gaps(child: dict[str, Any], requests: list[dict[str, Any]], steps: int) -> None:
    server_runs = split_runs(requests)
    child["server_root_requests"] = len(requests)
    for run, seen in zip(child["runs"], server_runs, strict=False):
        gaps = step_gaps_ms(seen)
        run["server_steps"] = len(seen)
        run["median_gap_ms"] = median(gaps)
        run["first_request_bytes"] = seen[0]["bytes"] if seen else None
        run["last_request_bytes"] = seen[-1]["bytes"] if seen else None


def _check(results: dict[str, Any], steps: int, prompts: int) -> None:
    """Both harnesses must have really done the work, or the figures mean nothing."""
    problems = []
    for name, child in results["steps"].items():
        for run in child["runs"]:
            if run.get("answer") != "done" or run.get("server_steps") != steps:
                problems.append(f"{name} steps run ({run['label']}): answer {run.get('answer')!r}, "
                                f"{run.get('server_steps')} root requests (expected {steps})")
    for name, child in results["batched"].items():
        for run in child["runs"]:
            if run.get("ok") != prompts:
                problems.append(f"{name} batched run: {run.get('ok')} of {prompts} sub-call answers right "
                                f"(answer {run.get('answer')!r})")
        expected = prompts * len(child["runs"])
        if child["server_subcalls"] != expected:
            problems.append(f"{name} batched: the server saw {child['server_subcalls']} sub-calls, expected {expected}")
    floor = results.get("litellm_floor")
    if floor is not None:
        if any(run.get("ok") != prompts for run in floor["runs"]):
            problems.append(f"bare litellm batch: answers right {[r.get('ok') for r in floor['runs']]} of {prompts}")
        if floor["server_subcalls"] != prompts * len(floor["runs"]):
            problems.append(f"bare litellm batch: the server saw {floor['server_subcalls']} sub-calls")
    if problems:
        raise BenchError("a harness did not do the scripted work:\n  " + "\n  ".join(problems))


def _retired(value: float | None, was: str, why: str) -> dict[str, Any]:
    """A target no longer held (its figure is printed as reported): ``was`` it, given up because of ``why``."""
    return {"value": value, "target": f"reported; {was} is retired ({why})", "met": None}


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    cfg = results["config"]
    steps = cfg["steps"]
    out: dict[str, Any] = {"steps": {}, "batched": {}, "memory": {}}
    for name, child in results["steps"].items():
        runs = child["runs"]
        cold = runs[0]
        warm = [r for r in runs[1:] if r.get("notebook") or name != "ours"]
        warm_plain = [r for r in runs[1:] if name == "ours" and not r.get("notebook")]
        out["steps"][name] = {
            "cold_ms_per_step": cold["wall_s"] * 1000 / steps,
            "warm_ms_per_step": median(r["wall_s"] * 1000 / steps for r in warm),
            "warm_no_notebook_ms_per_step": median(r["wall_s"] * 1000 / steps for r in warm_plain),
            "cold_gap_ms": cold.get("median_gap_ms"),
            "warm_gap_ms": median(r.get("median_gap_ms") for r in warm),
            "warm_cpu_ms_per_step": median(r["cpu_s"] * 1000 / steps for r in warm),
            "import_s": child["import_s"],
        }
    for name, child in results["batched"].items():
        runs = child["runs"]
        conc = child["concurrency"]
        ideal = math.ceil(cfg["prompts"] / conc) * cfg["latency_s"] if conc else None
        batch = median(r["cell_batch_s"] for r in runs)
        out["batched"][name] = {
            "concurrency": conc, "observed_in_flight": child["server_max_in_flight"],
            "batch_s": batch, "cold_batch_s": runs[0]["cell_batch_s"], "ideal_s": ideal,
            "cpu_ms_per_subcall": median(r["cpu_s"] * 1000 / cfg["prompts"] for r in runs),
            "ratio_to_ideal": batch / ideal if batch and ideal else None,
        }
    floor = results.get("litellm_floor")
    if floor is not None:
        runs = floor["runs"]
        conc = floor["concurrency"]
        ideal = math.ceil(cfg["prompts"] / conc) * cfg["latency_s"]
        batch = median(r["cell_batch_s"] for r in runs)
        out["litellm_floor"] = {
            "concurrency": conc, "observed_in_flight": floor["server_max_in_flight"], "batch_s": batch,
            "ideal_s": ideal, "ratio_to_ideal": batch / ideal if batch else None,
            "cpu_ms_per_subcall": median(r["cpu_s"] * 1000 / cfg["prompts"] for r in runs),
        }
    for name in results["config"]["harnesses"]:
        children = [results[k][name] for k in ("steps", "batched") if name in results[k]]
        out["memory"][name] = {
            "peak_rss_bytes": max(c["child"]["maxrss_bytes"] for c in children),
            "rss_after_import_bytes": max(c["rss_after_import_bytes"] or 0 for c in children),
        }
    ours_s, rlms_s = out["steps"].get("ours"), out["steps"].get("rlms")
    targets: dict[str, Any] = {}
    if ours_s and rlms_s:
        for key in ("cold_ms_per_step", "warm_ms_per_step", "warm_gap_ms", "warm_cpu_ms_per_step"):
            a, b = ours_s.get(key), rlms_s.get(key)
            ratio = a / b if a is not None and b else None
            if key == "cold_ms_per_step":
                targets[f"steps_{key}_ratio"] = _retired(ratio, f"<= {STEP_TARGET}", "litellm's import")
            else:
                targets[f"steps_{key}_ratio"] = {"value": ratio, "target": f"<= {STEP_TARGET}",
                                                 "met": None if ratio is None else ratio <= STEP_TARGET}
    ours_b, rlms_b = out["batched"].get("ours"), out["batched"].get("rlms")
    floor = "litellm's CPU per call is the floor"
    if ours_b:
        targets["batched_ours_to_ideal"] = _retired(ours_b["ratio_to_ideal"], f"<= {BATCH_IDEAL_TARGET}", floor)
    if ours_b and rlms_b and ours_b["batch_s"]:
        targets["batched_speedup_vs_rlms"] = _retired(rlms_b["batch_s"] / ours_b["batch_s"],
                                                      f">= {BATCH_SPEEDUP_TARGET}", floor)
    lf = out.get("litellm_floor")
    if ours_b and lf and lf["batch_s"]:
        targets["batched_ours_to_litellm"] = {"value": ours_b["batch_s"] / lf["batch_s"], "target": "reported",
                                              "met": None}
    mem = out["memory"]
    if "ours" in mem and "rlms" in mem:
        targets["peak_memory_ratio"] = {"value": mem["ours"]["peak_rss_bytes"] / mem["rlms"]["peak_rss_bytes"],
                                        "target": "reported", "met": None}
    if "starts" in results:
        out["starts"] = results["starts"]["summary"]
        targets.update(out["starts"]["targets"])
    out["targets"] = targets
    return out


__all__ = ["run_harness", "format_text", "format_markdown", "summarize", "rlms_version"]
