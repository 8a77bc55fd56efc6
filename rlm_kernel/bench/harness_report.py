"""The harness benchmark's report: tables for the terminal and BENCHMARKS.md."""

from __future__ import annotations

from typing import Any

from . import (
    fmt_ratio,
    md_table,
    mib,
    table,
    verdict,
)


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
    rows = {"steps": step_rows, "batched": batch_rows, "memory": mem_rows, "header": ["", *ours_first, "ours/rlms"]}
    if "starts" in summ:
        from .harness_start import start_rows

        rows["starts"] = start_rows(summ["starts"])
    return rows


_STARTS_HEADER = ["", "ours", "rlms"]


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
        "cold_cli_over_litellm_import_s": "cold CLI run over the import of litellm alone (s)",
        "cold_cli_ours_to_rlms": "cold CLI run, ours/rlms",
    }
    lines = []
    for key, t in results["summary"]["targets"].items():
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
        if t["met"] is None and t["target"].startswith("reported"):
            lines.append(f"{labels.get(key, key)}: {value} ({t['target']})")
        else:
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
        *(["Cold starts (medians of fresh processes):", table(rows["starts"], _STARTS_HEADER), ""]
          if "starts" in rows else []),
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
        *([f"Cold starts, the median of {results['starts']['repeats']} fresh processes each (a process's "
           "spawn to its exit, or a kernel's start; litellm's import is the floor of ours, since every "
           "model call goes through it):", "", md_table(rows["starts"], _STARTS_HEADER), ""]
          if "starts" in rows else []),
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
