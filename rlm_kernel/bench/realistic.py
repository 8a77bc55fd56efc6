"""``rlm-kernel bench realistic``: one script that streams like a real model,
run through ours and through the official ``rlms`` library.

The script (``realistic_script.py``) is fixed by its parameters and seed
before anything is measured and printed with the result. Each library runs
it once, in a process of its own (imports done before the clock starts),
against a fresh scripted server on 127.0.0.1, at its default settings: ours
streams root replies and runs 64 sub-calls at once; ``rlms`` reads replies
whole and runs a batch 16 at a time. The libraries run one after the other,
never at the same time (two cores).

Reported: each library's wall time of ``completion()`` against the
critical-path ideal (the root replies' writing time plus each batch's
slowest sub-call), and where the rest went, from the server's log of every
request: from ``completion()`` to the first root request, from a reply's last
token to the next root request, each batch from its first sub-call sent to
its last answered, and from the last reply to ``completion()`` returning.
Beside the wall time, the CPU time of each process during ``completion()``
(on two cores, CPU a run takes is taken from the person's own cells and the
page), ours against rlms; ``no_stream_too`` runs ours once more with
``--no-stream``, replies read whole as rlms reads them: what streaming costs.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from . import BenchError, BenchServer, Progress, machine_info, maxrss_bytes, median, quiet
from .realistic_report import format_markdown, format_text, script_lines
from .realistic_script import (
    QUERY,
    ROOT_MODEL,
    SUB_MODEL,
    Params,
    RealisticScript,
    ScriptResponder,
    make_script,
)

HARNESSES = ("ours", "rlms")
IDEAL_TARGET = 1.1  # ours / the critical-path ideal
CPU_TARGET = 2.0  # ours / rlms, CPU time during completion()


def child_realistic(cfg: dict[str, Any]) -> dict[str, Any]:
    """One library's run of the script, in a fresh process."""
    from .harness_children import make_harness

    started = time.perf_counter()
    harness = make_harness(cfg)
    concurrency = cfg.get("ours_options", {}).get("concurrency") if harness.name == "ours" else None
    info: dict[str, Any] = {"harness": harness.name, "version": harness.version(),
                            "concurrency": concurrency or harness.concurrency(),
                            "import_s": round(time.perf_counter() - started, 3)}
    params = Params(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg["params"].items()})
    script = make_script(params)
    context = script.context()
    cpu = time.process_time()
    begun = time.monotonic()
    run = harness.run(context, ROOT_MODEL, SUB_MODEL, params.steps, False, query=QUERY)
    ended = time.monotonic()
    info.update({"run": run, "started": begun, "ended": ended, "wall_s": ended - begun,
                 "cpu_s": time.process_time() - cpu, "peak_rss_bytes": maxrss_bytes()})
    harness.close()
    return info


def run_realistic(params: Params | None = None, *, harnesses: tuple[str, ...] | list[str] | None = None,
                  ours_options: dict[str, Any] | None = None, progress: Progress = quiet,
                  timeout: float = 1800.0, no_stream_too: bool = False) -> dict[str, Any]:
    """Run the script through each library; return the figures and verdicts.
    ``ours_options`` (e.g. ``{"concurrency": 128}``) changes our settings for
    a diagnosis; the report then says ours did not run at its defaults."""
    from . import run_child
    from .harness import rlms_version

    params = params or Params()
    script = make_script(params)
    wanted = list(harnesses or HARNESSES)
    notes: list[str] = []
    if "rlms" in wanted and rlms_version() is None:
        wanted.remove("rlms")
        notes.append("rlms is not installed (pip install 'rlm-kernel[bench]'); only ours ran.")
    if ours_options:
        changed = ", ".join(f"{k}={v!r}" for k, v in ours_options.items())
        notes.append(f"ours ran with {changed}, not at its defaults (a diagnosis, not the benchmark).")
    results: dict[str, Any] = {
        "benchmark": "realistic", "machine": machine_info(), "notes": notes,
        "config": {"harnesses": wanted, "order": "one after the other, each against a fresh server",
                   "ours_options": dict(ours_options or {})},
        "script": script.describe(), "runs": {},
    }
    progress("the script, fixed before measuring:\n  " + "\n  ".join(script_lines(results)))
    plan = [(name, name, dict(ours_options or {})) for name in wanted]
    if no_stream_too and "ours" in wanted:
        plan.append(("ours --no-stream", "ours", {**(ours_options or {}), "no_stream": True}))
    for label, name, options in plan:
        progress(f"{label}: running the script ({params.steps} root steps, ideal "
                 f"{script.ideal()['ideal_s']:.1f} s) ...")
        responder = ScriptResponder(script)
        server = BenchServer(responder).start()
        try:
            cfg = {"harness": name, "url": server.url, "params": asdict(params), "ours_options": options}
            child = run_child("rlm_kernel.bench.realistic:child_realistic", cfg, timeout=timeout)
        finally:
            server.stop()
        child["server"] = timeline(responder, child, script)
        if label == name:
            results["runs"][name] = child
        else:
            results["no_stream"] = child
        progress(f"{label}: {child['wall_s']:.2f} s, CPU {child['cpu_s']:.2f} s")
    _check(results, script)
    results["summary"] = summarize(results)
    return results


def _in_flight(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def timeline(responder: ScriptResponder, child: dict[str, Any], script: RealisticScript) -> dict[str, Any]:
    """Where one run's wall time went, from the server's log (monotonic clock,
    shared with the child): wall = start + the replies' writing + the gaps
    after each reply + the end."""
    roots = sorted(responder.roots, key=lambda r: r["t"])
    subs = responder.subs
    steps: list[dict[str, Any]] = []
    for i, root in enumerate(roots):
        reply_end = root["t"] + root["generation_s"]
        following = roots[i + 1]["t"] if i + 1 < len(roots) else child["ended"]
        plan = script.steps[root["step"] - 1] if 1 <= root["step"] <= len(script.steps) else None
        steps.append({"step": root["step"], "requested": root["t"], "generation_s": root["generation_s"],
                      "gap_s": following - reply_end, "batch": plan.batch if plan else None,
                      "stream": root["stream"]})
    batches: dict[int, dict[str, Any]] = {}
    for batch in sorted({s["batch"] for s in subs if s["batch"] is not None}):
        rows = [s for s in subs if s["batch"] == batch]
        spans = [(s["t"], s["t"] + s["latency_s"]) for s in rows]
        first, last = min(a for a, _ in spans), max(b for _, b in spans)
        sender = max((s for s in steps if s["requested"] <= first), key=lambda s: s["requested"], default=None)
        batches[batch] = {
            "subcalls": len(rows), "span_s": last - first, "slowest_s": max(s["latency_s"] for s in rows),
            "in_flight": _in_flight(spans), "step": sender["step"] if sender else None,
            "after_reply_s": first - (sender["requested"] + sender["generation_s"]) if sender else None,
        }
        batches[batch]["excess_s"] = batches[batch]["span_s"] - batches[batch]["slowest_s"]
        batches[batch]["bound_s"] = script.batch_bound(batch, child["concurrency"])
    plain_gaps = [s["gap_s"] for s in steps[:-1] if s["batch"] is None]
    return {
        "root_requests": len(roots), "streamed": sum(1 for r in roots if r["stream"]),
        "subcalls": len(subs), "unknown_prompts": sum(1 for s in subs if s["batch"] is None),
        "other_requests": responder.others, "max_subcalls_in_flight": _in_flight(
            [(s["t"], s["t"] + (s["latency_s"] or 0)) for s in subs]),
        "start_s": roots[0]["t"] - child["started"] if roots else None,
        "end_s": steps[-1]["gap_s"] if steps else None,
        "step_gap_median_s": median(plain_gaps), "step_gap_max_s": max(plain_gaps, default=None),
        "steps": steps, "batches": batches,
    }


def _check(results: dict[str, Any], script: RealisticScript) -> None:
    """Both libraries must have done the scripted work, or the times mean nothing."""
    problems = []
    expected = script.describe()
    runs = dict(results["runs"])
    if "no_stream" in results:
        runs["ours --no-stream"] = results["no_stream"]
    for name, child in runs.items():
        seen = child["server"]
        answer = child["run"].get("answer")
        if answer != script.expected_answer:
            problems.append(f"{name} answered {answer!r}, expected {script.expected_answer!r}")
        if seen["root_requests"] != script.params.steps:
            problems.append(f"{name} made {seen['root_requests']} root requests, expected {script.params.steps}")
        if seen["subcalls"] != expected["subcalls"] or seen["unknown_prompts"] or seen["other_requests"]:
            problems.append(f"{name} made {seen['subcalls']} sub-calls ({seen['unknown_prompts']} with prompts "
                            f"not in the script, {seen['other_requests']} to other models), expected "
                            f"{expected['subcalls']}")
        if name.startswith("ours") and child["run"].get("reason") != "final":
            problems.append(f"{name} ended with reason {child['run'].get('reason')!r}, not 'final'")
    if problems:
        raise BenchError("a library did not do the scripted work:\n  " + "\n  ".join(problems))


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    ideal = results["script"]["ideal"]["ideal_s"]
    out: dict[str, Any] = {"ideal_s": ideal, "runs": {}}
    for name, child in results["runs"].items():
        bounds = [b["bound_s"] for b in child["server"]["batches"].values()]
        own = results["script"]["ideal"]["root_total_s"] + sum(bounds)
        out["runs"][name] = {"wall_s": child["wall_s"], "to_ideal": child["wall_s"] / ideal,
                             "over_ideal_s": child["wall_s"] - ideal, "own_ideal_s": own,
                             "to_own_ideal": child["wall_s"] / own}
    targets: dict[str, Any] = {}
    ours, rlms = out["runs"].get("ours"), out["runs"].get("rlms")
    if ours:
        targets["ours_to_ideal"] = {"value": ours["to_ideal"], "target": f"<= {IDEAL_TARGET}",
                                    "met": ours["to_ideal"] <= IDEAL_TARGET}
    if rlms:
        targets["rlms_to_ideal"] = {"value": rlms["to_ideal"], "target": "reported", "met": None}
    if ours and rlms:
        speedup = rlms["wall_s"] / ours["wall_s"]
        targets["rlms_to_ours"] = {"value": speedup, "target": "> 1 (ours faster)", "met": speedup > 1}
        cpu = results["runs"]["ours"]["cpu_s"] / results["runs"]["rlms"]["cpu_s"]
        targets["cpu_ours_to_rlms"] = {"value": cpu, "target": f"<= {CPU_TARGET:g}", "met": cpu <= CPU_TARGET}
    whole = results.get("no_stream")
    if whole is not None:
        out["no_stream"] = {"wall_s": whole["wall_s"], "cpu_s": whole["cpu_s"]}
        if rlms:
            targets["cpu_no_stream_to_rlms"] = {"value": whole["cpu_s"] / results["runs"]["rlms"]["cpu_s"],
                                                "target": "reported", "met": None}
    out["targets"] = targets
    return out


__all__ = ["Params", "run_realistic", "format_text", "format_markdown", "summarize", "child_realistic"]
