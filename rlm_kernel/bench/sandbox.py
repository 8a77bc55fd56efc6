"""``rlm-kernel bench sandbox``: what a sandboxed run costs, side by side with
an unconfined one in one invocation.

* start: from nothing to a namespace that has run one cell (a headless IPython
  shell, against the confined kernel: bwrap, ipykernel, the bootstrap);
* per step: a root step whose code makes one ``llm_query`` and prints, the
  difference between a run of ``steps`` steps and a run of one step, divided
  by the steps between them (so the start and the answer are left out).

Targets (docs/guide/sandbox.md): at most 1.2x per step, under 1 s of extra start.
The scripted server answers at once, so the per-step figure is the harness's
own cost; against a real model's seconds per step the sandbox's share shrinks.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import Progress, quiet
from .report import fmt_ratio, machine_info, md_table, median, table, verdict

STEP_TARGET = 1.2  # per-step ratio
START_TARGET_S = 1.0  # extra seconds to start


def _start_once(sandboxed: bool, folder: Path) -> float:
    from ..engine.execution.executors import ShellExecutor, new_headless_shell

    started = time.perf_counter()
    if sandboxed:
        from ..remote.executor import RemoteExecutor
        from ..sandbox.launcher import SandboxSpec

        executor: Any = RemoteExecutor(SandboxSpec(folder=folder))
    else:
        executor = ShellExecutor(new_headless_shell(), passthrough=False)
    try:
        executor.execute("1 + 1", cell_id="start", view_limit=1000)
        return time.perf_counter() - started
    finally:
        executor.close()


def _run_once(sandboxed: bool, steps: int, folder: Path) -> float:
    from ..api import RLM
    from ..testing.server import Script
    from .servers import BenchServer

    replies = [f"```repl\nr = llm_query('part {i}')\nprint({i}, len(r))\n```" for i in range(steps)]
    server = BenchServer(Script(root=[*replies, "FINAL(done)"], sub=lambda prompt: "ok")).start()
    try:
        rlm = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=server.url, api_key="x",
                  sandbox=sandboxed, sandbox_dir=str(folder), max_iterations=steps + 2)
        started = time.perf_counter()
        result = rlm.completion("a small context", "q")
        took = time.perf_counter() - started
    finally:
        server.stop()
    if result.reason != "final":
        from .common import BenchError

        raise BenchError(f"a {'sandboxed' if sandboxed else 'unconfined'} run ended with {result.reason}: "
                         f"{result.error}")
    return took


def run_sandbox(*, steps: int = 60, repeats: int = 7, progress: Progress = quiet) -> dict[str, Any]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    folder = Path(tempfile.mkdtemp(prefix="rlm-bench-sandbox-"))
    progress("warming up (litellm's import, a first confined kernel)")
    _run_once(False, 1, folder)
    _start_once(True, folder)
    kinds = (("unconfined", False), ("sandboxed", True))
    times: dict[str, dict[str, list[float]]] = {label: {"start": [], "one": [], "many": []} for label, _ in kinds}
    for turn in range(repeats):  # in turns, so a change in the machine's load falls on both alike
        progress(f"turn {turn + 1} of {repeats}: start, a run of 1 step and one of {steps}, unconfined then sandboxed")
        for label, sandboxed in kinds:
            times[label]["start"].append(_start_once(sandboxed, folder))
            times[label]["one"].append(_run_once(sandboxed, 1, folder))
            times[label]["many"].append(_run_once(sandboxed, steps, folder))
    figures: dict[str, dict[str, float | None]] = {}
    per_turn: dict[str, list[float]] = {}
    for label, _ in kinds:
        per_turn[label] = [(many - one) / max(steps - 1, 1) for one, many in zip(times[label]["one"],
                                                                                 times[label]["many"], strict=True)]
        figures[label] = {"start_s": median(times[label]["start"]), "run_1_step_s": median(times[label]["one"]),
                          f"run_{steps}_steps_s": median(times[label]["many"]), "per_step_s": median(per_turn[label])}
    plain, boxed = figures["unconfined"], figures["sandboxed"]
    # the ratio of each turn (its two kinds ran back to back), then their median: load that changes between
    # turns falls on both sides of a ratio alike. A turn whose longer run was not the slower one (too few
    # steps for the machine's noise) has no per-step time to compare: it is left out, not a negative ratio.
    ratios = [b / p for p, b in zip(per_turn["unconfined"], per_turn["sandboxed"], strict=True) if p > 0 and b > 0]
    step_ratio = median(ratios)
    extra_start = (boxed["start_s"] or 0) - (plain["start_s"] or 0)
    return {
        "benchmark": "sandbox", "machine": machine_info(), "steps": steps, "repeats": repeats, "figures": figures,
        "summary": {
            "per_step_ratio": step_ratio, "per_step_ratios": ratios, "extra_start_s": extra_start,
            "targets": {"per_step": step_ratio is not None and step_ratio <= STEP_TARGET,
                        "extra_start": extra_start < START_TARGET_S},
        },
    }


def _rows(results: dict[str, Any]) -> list[list[str]]:
    figures, summary, steps = results["figures"], results["summary"], results["steps"]
    plain, boxed = figures["unconfined"], figures["sandboxed"]

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 1000:.1f} ms"

    targets = summary["targets"]
    return [
        ["start (first cell run)", ms(plain["start_s"]), ms(boxed["start_s"]),
         f"+{summary['extra_start_s'] * 1000:.0f} ms", f"< {START_TARGET_S * 1000:.0f} ms extra: "
         f"{verdict(targets['extra_start'])}"],
        ["per step (one llm_query)", ms(plain["per_step_s"]), ms(boxed["per_step_s"]),
         (fmt_ratio(summary["per_step_ratio"], 3) + _spread(summary.get("per_step_ratios") or [])
          if summary["per_step_ratio"] is not None
          else "n/a (no turn's longer run was the slower one: give more --steps)"),
         f"<= {STEP_TARGET}x: {verdict(targets['per_step'])}"],
        ["run of 1 step", ms(plain["run_1_step_s"]), ms(boxed["run_1_step_s"]),
         fmt_ratio(_ratio(boxed["run_1_step_s"], plain["run_1_step_s"])), ""],
        [f"run of {steps} steps", ms(plain[f"run_{steps}_steps_s"]), ms(boxed[f"run_{steps}_steps_s"]),
         fmt_ratio(_ratio(boxed[f"run_{steps}_steps_s"], plain[f"run_{steps}_steps_s"])), ""],
    ]


def _spread(ratios: list[float]) -> str:
    return f" (turns {min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


HEADER = ["", "unconfined", "sandboxed", "sandboxed / unconfined", "target"]


def format_text(results: dict[str, Any]) -> str:
    return ("Sandboxed runs against unconfined ones (median of "
            f"{results['repeats']} turns; per step: the median of each turn's ratio; scripted server answering at "
            "once)\n" + table(_rows(results), HEADER))


def format_markdown(results: dict[str, Any]) -> str:
    return ("## Sandboxed runs\n\n`rlm-kernel bench sandbox`: start and per-step cost, sandboxed (bubblewrap) "
            f"against unconfined, median of {results['repeats']} turns (per step: the median of each turn's ratio, "
            "the two kinds run back to back in a turn).\n\n" + md_table(_rows(results), HEADER))


__all__ = ["format_markdown", "format_text", "run_sandbox"]
