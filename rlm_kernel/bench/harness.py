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
"""

from __future__ import annotations

import inspect
import math
import os
import shutil
import tempfile
import time
from typing import Any

from . import (
    BenchError,
    BenchServer,
    Progress,
    Reply,
    Router,
    fmt_ratio,
    machine_info,
    maxrss_bytes,
    md_table,
    median,
    mib,
    quiet,
    rss_bytes,
    split_runs,
    step_gaps_ms,
    table,
    verdict,
)

HARNESSES = ("ours", "rlms")
QUERY = "How long is the context?"

STEP_TARGET = 0.5  # ours / rlms per-step time
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


# -- children ----------------------------------------------------------------------


class _Ours:
    name = "ours"

    def __init__(self, cfg: dict[str, Any]) -> None:
        from ..api import RLM
        from ..engine.litellm_setup import load_litellm as litellm_module

        litellm_module()  # part of what a run needs; imported before the timer starts
        self._rlm_class = RLM
        self.cfg = cfg
        self._tmp = tempfile.mkdtemp(prefix="rlm-bench-nb-")

    @staticmethod
    def version() -> str:
        from .. import __version__

        return __version__

    @staticmethod
    def concurrency() -> int:
        from ..engine.options import BY_NAME

        return BY_NAME["concurrency"].default

    def run(self, context: str, root_model: str, sub_model: str, max_iterations: int,
            notebook: bool) -> dict[str, Any]:
        rlm = self._rlm_class(
            f"openai/{root_model}", f"openai/{sub_model}", api_base=self.cfg["url"], api_key="bench",
            max_iterations=max_iterations,
        )
        output = os.path.join(self._tmp, "run.ipynb") if notebook else None
        result = rlm.completion(context, QUERY, output=output)
        info: dict[str, Any] = {
            "answer": result.answer_text, "reason": result.reason, "iterations": result.iterations,
            "subcalls": result.subcalls,
        }
        if output:
            info["notebook_bytes"] = os.path.getsize(output)
            os.remove(output)
        return info

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)


class _Rlms:
    name = "rlms"

    def __init__(self, cfg: dict[str, Any]) -> None:
        from rlm import RLM
        from rlm.clients import openai as _client  # noqa: F401 - rlms imports its client lazily; not timed,
        # like our litellm import

        self._rlm_class = RLM
        self.cfg = cfg

    @staticmethod
    def version() -> str | None:
        return rlms_version()

    @staticmethod
    def concurrency() -> int | None:
        from rlm.core.lm_handler import LMHandler

        return inspect.signature(LMHandler.__init__).parameters["batch_max_concurrent"].default

    def run(self, context: str, root_model: str, sub_model: str, max_iterations: int,
            notebook: bool) -> dict[str, Any]:
        kwargs = {"base_url": self.cfg["url"], "api_key": "bench"}
        rlm = self._rlm_class(
            backend="openai", backend_kwargs={"model_name": root_model, **kwargs},
            other_backends=["openai"], other_backend_kwargs=[{"model_name": sub_model, **kwargs}],
            max_iterations=max_iterations,
        )
        try:
            result = rlm.completion(context, root_prompt=QUERY)
        finally:
            rlm.close()
        return {"answer": result.response}

    def close(self) -> None:
        pass


def _harness(cfg: dict[str, Any]) -> _Ours | _Rlms:
    return _Ours(cfg) if cfg["harness"] == "ours" else _Rlms(cfg)


def _child_common(cfg: dict[str, Any]) -> tuple[_Ours | _Rlms, dict[str, Any], str]:
    from . import make_text

    started = time.perf_counter()
    harness = _harness(cfg)
    info = {
        "harness": harness.name, "version": harness.version(), "concurrency": harness.concurrency(),
        "import_s": round(time.perf_counter() - started, 3), "rss_after_import_bytes": rss_bytes(),
    }
    context = make_text(cfg["context_chars"])
    return harness, info, context


def child_steps(cfg: dict[str, Any]) -> dict[str, Any]:
    harness, info, context = _child_common(cfg)
    plan: list[tuple[str, bool]] = [("cold", True)]
    for _ in range(cfg["repeats"]):
        plan.append(("warm", True))
        if harness.name == "ours":
            plan.append(("warm", False))  # the same run without writing the .ipynb
    runs = []
    for label, notebook in plan:
        cpu = time.process_time()
        started = time.perf_counter()
        run = harness.run(context, cfg["root_model"], cfg["sub_model"], cfg["steps"], notebook)
        run.update({"label": label, "notebook": notebook and harness.name == "ours",
                    "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu})
        runs.append(run)
    info.update({"runs": runs, "peak_rss_bytes": maxrss_bytes()})
    harness.close()
    return info


def child_batched(cfg: dict[str, Any]) -> dict[str, Any]:
    harness, info, context = _child_common(cfg)
    runs = []
    for i in range(max(1, cfg["repeats"])):
        cpu = time.process_time()
        started = time.perf_counter()
        run = harness.run(context, cfg["root_model"], cfg["sub_model"], 2, False)
        wall = time.perf_counter() - started
        run["cpu_s"] = time.process_time() - cpu
        elapsed, ok = None, None
        parts = str(run.get("answer", "")).split()
        if len(parts) == 2:
            elapsed, ok = float(parts[0]), int(parts[1])
        run.update({"label": "cold" if i == 0 else "warm", "wall_s": wall, "cell_batch_s": elapsed, "ok": ok})
        runs.append(run)
    info.update({"runs": runs, "peak_rss_bytes": maxrss_bytes()})
    harness.close()
    return info


def child_litellm_floor(cfg: dict[str, Any]) -> dict[str, Any]:
    """The batch's prompts through bare ``litellm.acompletion`` at our default
    concurrency, with the same settings our client uses: what litellm alone
    costs, per call, on this machine."""
    import asyncio

    from ..engine.litellm_setup import load_litellm as litellm_module
    from ..engine.options import BY_NAME

    started = time.perf_counter()
    litellm = litellm_module()
    concurrency = BY_NAME["concurrency"].default
    info: dict[str, Any] = {"harness": "litellm", "version": litellm_version(), "concurrency": concurrency,
                            "import_s": round(time.perf_counter() - started, 3), "rss_after_import_bytes": rss_bytes()}
    prompts = [f"prompt {i}" for i in range(cfg["prompts"])]

    async def batch() -> tuple[float, int]:
        gate = asyncio.Semaphore(concurrency)

        async def one(prompt: str) -> str:
            async with gate:
                response = await litellm.acompletion(
                    model=f"openai/{cfg['sub_model']}", api_base=cfg["url"], api_key="bench", max_retries=0,
                    messages=[{"role": "user", "content": prompt}])
                return response.choices[0].message.content

        t0 = time.perf_counter()
        answers = await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - t0, sum(1 for a, p in zip(answers, prompts, strict=True) if a == "answer to " + p)

    async def main() -> list[dict[str, Any]]:
        runs = []
        for i in range(max(1, cfg["repeats"])):
            cpu = time.process_time()
            elapsed, ok = await batch()
            runs.append({"label": "cold" if i == 0 else "warm", "cell_batch_s": elapsed, "ok": ok,
                         "cpu_s": time.process_time() - cpu, "wall_s": elapsed})
        return runs

    info.update({"runs": asyncio.run(main()), "peak_rss_bytes": maxrss_bytes()})
    return info


def litellm_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("litellm")
    except metadata.PackageNotFoundError:
        return None


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
) -> dict[str, Any]:
    """Run both scenarios for each harness; return figures and verdicts.
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
            child = run_child("rlm_kernel.bench.harness:child_steps", cfg, timeout=timeout)
            _attach_step_gaps(child, router.requests(f"steps-{name}"), steps)
            results["steps"][name] = child
        for name in wanted:
            progress(f"batched: {name}, llm_query_batched over {prompts} prompts at {latency:g} s each ...")
            server.max_in_flight = 0
            before = router.sub_counts.get(f"sub-{name}", 0)
            cfg = {"harness": name, "url": server.url, "context_chars": context_chars,
                   "repeats": max(1, repeats), "root_model": f"batch-{name}", "sub_model": f"sub-{name}"}
            child = run_child("rlm_kernel.bench.harness:child_batched", cfg, timeout=timeout)
            child["server_subcalls"] = router.sub_counts.get(f"sub-{name}", 0) - before
            child["server_max_in_flight"] = server.max_in_flight
            results["batched"][name] = child
        if "ours" in wanted:
            progress(f"batched: the same {prompts} prompts through bare litellm.acompletion (the floor) ...")
            server.max_in_flight = 0
            before = router.sub_counts.get("sub-litellm", 0)
            cfg = {"url": server.url, "prompts": prompts, "repeats": max(1, repeats), "sub_model": "sub-litellm"}
            child = run_child("rlm_kernel.bench.harness:child_litellm_floor", cfg, timeout=timeout)
            child["server_subcalls"] = router.sub_counts.get("sub-litellm", 0) - before
            child["server_max_in_flight"] = server.max_in_flight
            results["litellm_floor"] = child
    finally:
        server.stop()
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
            targets[f"steps_{key}_ratio"] = {"value": ratio, "target": f"<= {STEP_TARGET}",
                                             "met": None if ratio is None else ratio <= STEP_TARGET}
    ours_b, rlms_b = out["batched"].get("ours"), out["batched"].get("rlms")
    if ours_b:
        r = ours_b["ratio_to_ideal"]
        targets["batched_ours_to_ideal"] = {"value": r, "target": f"<= {BATCH_IDEAL_TARGET}",
                                            "met": None if r is None else r <= BATCH_IDEAL_TARGET}
    if ours_b and rlms_b and ours_b["batch_s"]:
        speedup = rlms_b["batch_s"] / ours_b["batch_s"]
        targets["batched_speedup_vs_rlms"] = {"value": speedup, "target": f">= {BATCH_SPEEDUP_TARGET}",
                                              "met": speedup >= BATCH_SPEEDUP_TARGET}
    lf = out.get("litellm_floor")
    if ours_b and lf and lf["batch_s"]:
        targets["batched_ours_to_litellm"] = {"value": ours_b["batch_s"] / lf["batch_s"], "target": "reported",
                                              "met": None}
    mem = out["memory"]
    if "ours" in mem and "rlms" in mem:
        targets["peak_memory_ratio"] = {"value": mem["ours"]["peak_rss_bytes"] / mem["rlms"]["peak_rss_bytes"],
                                        "target": "reported", "met": None}
    out["targets"] = targets
    return out


# -- reports ---------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def _rows(results: dict[str, Any]) -> dict[str, list[list[str]]]:
    summ = results["summary"]
    names = results["config"]["harnesses"]
    ours_first = [n for n in ("ours", "rlms") if n in names]

    def ratio(section: str, key: str) -> str:
        a = summ[section].get("ours", {}).get(key)
        b = summ[section].get("rlms", {}).get(key)
        return fmt_ratio(a / b) if a is not None and b else ""

    steps = summ["steps"]
    step_rows = []
    for key, label in (("cold_ms_per_step", "cold run: completion() / steps"),
                       ("warm_ms_per_step", "warm runs: completion() / steps"),
                       ("cold_gap_ms", "cold run: median gap between root requests"),
                       ("warm_gap_ms", "warm runs: median gap between root requests"),
                       ("warm_cpu_ms_per_step", "warm runs: CPU time of the process / steps")):
        step_rows.append([label, *(_ms(steps[n][key]) for n in ours_first), ratio("steps", key)])
    if "ours" in steps:
        step_rows.append(["warm runs, ours without writing the .ipynb",
                          _ms(steps["ours"]["warm_no_notebook_ms_per_step"]),
                          *([""] if "rlms" in steps else []), ""])
    step_rows.append(["import time (s)", *(f"{steps[n]['import_s']:.2f} s" for n in ours_first), ""])

    b = summ["batched"]
    batch_rows = [
        ["default concurrency", *(str(b[n]["concurrency"]) for n in ours_first), ""],
        ["max in flight seen by the server", *(str(b[n]["observed_in_flight"]) for n in ours_first), ""],
        ["llm_query_batched wall time (median)", *(_s(b[n]["batch_s"]) for n in ours_first), ratio("batched", "batch_s")],
        ["  first run in the process", *(_s(b[n]["cold_batch_s"]) for n in ours_first), ""],
        ["ideal (prompts / concurrency x latency)", *(_s(b[n]["ideal_s"]) for n in ours_first), ""],
        ["ratio to own ideal", *(fmt_ratio(b[n]["ratio_to_ideal"]) for n in ours_first), ""],
        ["CPU time of the process per sub-call", *(_ms(b[n]["cpu_ms_per_subcall"]) for n in ours_first),
         ratio("batched", "cpu_ms_per_subcall")],
    ]
    lf = summ.get("litellm_floor")
    if lf is not None:
        pad = [""] * (len(ours_first) - 1)
        batch_rows += [
            [f"bare litellm.acompletion, same prompts, {lf['concurrency']} in flight (median)",
             _s(lf["batch_s"]), *pad, ""],
            ["  its ratio to the ideal", fmt_ratio(lf["ratio_to_ideal"]), *pad, ""],
            ["  its CPU time per call", _ms(lf["cpu_ms_per_subcall"]), *pad, ""],
            ["ours / bare litellm", fmt_ratio(b["ours"]["batch_s"] / lf["batch_s"]) if "ours" in b else "", *pad, ""],
        ]
    m = summ["memory"]
    mem_rows = [
        ["peak RSS of the harness process", *(mib(m[n]["peak_rss_bytes"]) for n in ours_first),
         ratio("memory", "peak_rss_bytes")],
        ["RSS after imports", *(mib(m[n]["rss_after_import_bytes"]) for n in ours_first),
         ratio("memory", "rss_after_import_bytes")],
    ]
    return {"steps": step_rows, "batched": batch_rows, "memory": mem_rows, "header": ["", *ours_first, "ours/rlms"]}


def _target_lines(results: dict[str, Any]) -> list[str]:
    labels = {
        "steps_cold_ms_per_step_ratio": "per-step, cold run, ours/rlms",
        "steps_warm_ms_per_step_ratio": "per-step, warm runs, ours/rlms",
        "steps_warm_gap_ms_ratio": "per-step gap between root requests, warm, ours/rlms",
        "steps_warm_cpu_ms_per_step_ratio": "per-step CPU time, warm, ours/rlms",
        "batched_ours_to_ideal": "batched, ours / ideal",
        "batched_speedup_vs_rlms": "batched, rlms time / ours",
        "batched_ours_to_litellm": "batched, ours / bare litellm (the floor)",
        "peak_memory_ratio": "peak memory, ours/rlms",
    }
    lines = []
    for key, t in results["summary"]["targets"].items():
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
        lines.append(f"{labels.get(key, key)}: {value} (target {t['target']}): {verdict(t['met'])}")
    return lines


def format_text(results: dict[str, Any]) -> str:
    cfg = results["config"]
    rows = _rows(results)
    header = rows["header"]
    parts = [
        f"Harness benchmark: {cfg['steps']} root steps over a {cfg['context_chars']:,}-character context; "
        f"llm_query_batched over {cfg['prompts']} prompts at {cfg['latency_s']:g} s per call.",
        f"Versions: ours {results['machine']['rlm_kernel']}, rlms "
        f"{results['steps'].get('rlms', {}).get('version') or 'not run'}; scripted server on 127.0.0.1 "
        f"{'with TCP_NODELAY' if cfg.get('server_nodelay', True) else 'as stock (Nagle on)'}; "
        f"load average at start {results['machine'].get('load_average')}.",
        "",
        "Per root step (scripted model answers at once):",
        table(rows["steps"], header),
        "",
        "Batched sub-calls:",
        table(rows["batched"], header),
        "",
        "Memory:",
        table(rows["memory"], header),
        "",
        "Targets:",
        *("  " + line for line in _target_lines(results)),
        *("Note: " + n for n in results.get("notes", [])),
    ]
    if not cfg.get("server_nodelay", True):
        parts.append("Note: --stock-server: every request also waits ~40 ms for Nagle / delayed ACK.")
    return "\n".join(parts)


def format_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    rows = _rows(results)
    header = rows["header"]
    rlms = results["steps"].get("rlms", {}).get("version")
    notes = results.get("notes") or []
    if not cfg.get("server_nodelay", True):
        notes = [*notes, "Run with --stock-server: every request also waits ~40 ms for Nagle / delayed ACK."]
    return "\n".join([
        "## Harness speed against the official `rlms` library",
        "",
        f"`rlm-kernel bench harness`: both harnesses (ours {results['machine']['rlm_kernel']}, "
        f"rlms {rlms or 'not installed'}) against one scripted OpenAI-compatible server on 127.0.0.1, "
        "each in a child process of its own. "
        f"{cfg['steps']} root steps of `x = len(context)` over a {cfg['context_chars']:,}-character context "
        "(the model answers at once; the last step ends the run); one cold run (the first in a fresh "
        f"process, after the imports) and {cfg['repeats']} warm runs. The gap between root requests is "
        "measured by the server and holds only the harness's own work per step.",
        "",
        md_table(rows["steps"], header),
        "",
        f"One cell calling `llm_query_batched` over {cfg['prompts']} prompts, the server taking "
        f"{cfg['latency_s']:g} s per call, both harnesses at their default concurrency:",
        "",
        md_table(rows["batched"], header),
        "",
        "Memory of each harness's processes (peak: ru_maxrss of the child from wait4, the larger of its two "
        "children; after imports: VmRSS before the first run):",
        "",
        md_table(rows["memory"], header),
        "",
        "Targets:",
        "",
        *("- " + line for line in _target_lines(results)),
        *(["", *("Note: " + n for n in notes)] if notes else []),
        "",
        "Every model call of ours goes through litellm, whose own work per call (request building, "
        "response objects, cost lookup, logging) is measured by the bare-litellm row: with the sub-calls "
        "bound by CPU on this machine, that floor, not the harness, sets how close the batch gets to the "
        "ideal.",
        "",
        "The stock scripted server (`rlm_kernel.testing.server`) answers with two writes and leaves Nagle's "
        "algorithm on, so every request waits ~40 ms for the client's delayed ACK; this benchmark sets "
        "TCP_NODELAY so that \"the model replies at once\" holds. `--stock-server` keeps the delay and gives "
        "rlms figures close to the ones the issue quotes (~85-90 ms per step, ~3 s for the batch).",
    ])


__all__ = ["run_harness", "format_text", "format_markdown", "summarize", "rlms_version"]
