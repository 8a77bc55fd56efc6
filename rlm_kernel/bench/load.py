"""``rlm-kernel bench load``: one run with many sub-calls under injected faults.

A scripted run of ``steps`` root steps, each a cell sending its share of
``subcalls`` prompts through ``llm_query_batched`` at ``concurrency``; the
scripted server takes ``latency`` s per sub-call and answers a ``fault_rate``
share of all requests with a random fault (429 with and without Retry-After,
500, 503, a timeout, a reset connection, a truncated or malformed body, empty
choices; seeded). The run happens in a child process (its peak memory is its
own) and writes its notebook as ``rlm-kernel run`` does.

Reported: wall time against the ideal (``subcalls / concurrency x latency``),
peak memory, and the accounting: every sub-call in the notebook exactly once,
succeeded or failed; the ledger equal to the successful responses the server
sent, call for call and token for token.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from ..testing.server import Faults, Reply
from . import (
    BenchServer,
    Progress,
    Router,
    machine_info,
    md_table,
    mib,
    quiet,
    table,
    verdict,
)

QUERY = "Label every item."
ROOT, SUB = "load-root", "load-sub"
REQUEST_TIMEOUT = 2.0  # 20x the default latency; a "timeout" fault holds its request a second longer


def _step_reply(steps: int, per_step: list[int]):
    def reply(step: int, body: dict[str, Any]) -> str:
        if step > steps:
            return "FINAL('done')"
        first = sum(per_step[: step - 1])
        code = (
            f"answers_{step} = llm_query_batched([f'item {{i}}' for i in range({first}, {first + per_step[step - 1]})])\n"
            f"failed_{step} = sum(1 for a in answers_{step} if a.startswith('[sub-call error'))\n"
            f"print('step {step}:', len(answers_{step}) - failed_{step}, 'ok,', failed_{step}, 'failed')"
        )
        if step == steps:
            code += "\nFINAL('done')"
        return f"Items {first} to {first + per_step[step - 1] - 1}.\n```repl\n{code}\n```"

    return reply


def _sub_reply(latency: float):
    def reply(prompt: str) -> Reply:
        return Reply(text="label for " + prompt[:40], delay=latency)

    return reply


# -- the child ---------------------------------------------------------------------


def child_load(cfg: dict[str, Any]) -> dict[str, Any]:
    import nbformat

    from ..api import RLM
    from ..engine.model.litellm_setup import load_litellm as litellm_module

    litellm_module()
    tmp = tempfile.mkdtemp(prefix="rlm-bench-load-")
    path = os.path.join(tmp, "run.ipynb")
    rlm = RLM(
        f"openai/{ROOT}", f"openai/{SUB}", api_base=cfg["url"], api_key="bench", max_iterations=cfg["steps"] + 1,
        concurrency=cfg["concurrency"], max_retries=cfg["max_retries"], retry_base_delay=0.05,
        request_timeout=REQUEST_TIMEOUT,
    )
    started = time.perf_counter()
    result = rlm.completion("items", QUERY, output=path)
    run_s = time.perf_counter() - started
    nb = nbformat.read(path, as_version=4)
    records: list[dict[str, Any]] = []
    cell_s = 0.0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("rlm", {})
        records.extend(meta.get("subcalls") or [])
        if meta.get("subcalls"):
            cell_s += meta.get("duration_s") or 0.0
    done = [r for r in records if r["status"] == "done"]
    failed = [r for r in records if r["status"] == "error"]
    size = os.path.getsize(path)
    os.remove(path)
    os.rmdir(tmp)
    sub = result.usage.get(f"openai/{SUB}", {})
    return {
        "reason": result.reason, "run_error": result.error, "answer": result.answer_text, "iterations": result.iterations,
        "subcalls": result.subcalls, "run_s": run_s, "batched_cells_s": cell_s,
        "records": len(records), "unique_records": len({r["id"] for r in records}),
        "done": len(done), "failed": len(failed),
        "attempts": sum(r.get("attempts", 1) for r in records),
        "retried": sum(1 for r in records if r.get("attempts", 1) > 1),
        "record_prompt_tokens": sum(r["usage"]["prompt_tokens"] for r in done),
        "record_completion_tokens": sum(r["usage"]["completion_tokens"] for r in done),
        "ledger": sub, "ledger_root_calls": result.usage.get(f"openai/{ROOT}", {}).get("calls", 0),
        "notebook_bytes": size,
    }


# -- the parent ----------------------------------------------------------------------


def run_load(
    *,
    subcalls: int = 10_000,
    concurrency: int = 64,
    fault_rate: float = 0.01,
    latency: float = 0.1,
    steps: int = 10,
    seed: int = 7,
    max_retries: int = 4,
    progress: Progress = quiet,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    from . import run_child

    steps = max(1, min(steps, subcalls))
    per_step = [subcalls // steps + (1 if i < subcalls % steps else 0) for i in range(steps)]
    router = Router()
    router.roots[ROOT] = _step_reply(steps, per_step)
    router.subs[SUB] = _sub_reply(latency)
    config = {"subcalls": subcalls, "concurrency": concurrency, "fault_rate": fault_rate, "latency": latency,
              "steps": steps, "seed": seed, "max_retries": max_retries}
    results: dict[str, Any] = {"benchmark": "load", "machine": machine_info(), "config": config}
    progress(f"load: {subcalls:,} sub-calls in {steps} steps at concurrency {concurrency}, "
             f"{fault_rate:.0%} injected faults, {latency:g} s per sub-call ...")
    server = BenchServer(router)
    server.faults = Faults(rate=fault_rate, seed=seed, hang=REQUEST_TIMEOUT + 1.0, retry_after=0.05)
    server.start()
    try:
        child = run_child(
            "rlm_kernel.bench.load:child_load",
            {"url": server.url, "steps": steps, "concurrency": concurrency, "max_retries": max_retries},
            timeout=timeout,
        )
    finally:
        server.stop()
    sent = server.answered(SUB)
    faults = server.fault_counts()
    child["server"] = {
        "sub_requests": len(server.calls(SUB)), "root_requests": len(server.calls(ROOT)), "answered": sent,
        "faults": dict(faults), "sub_faults": sum(server.fault_counts(SUB).values()),
        "max_in_flight": server.max_in_flight,
    }
    results["run"] = child
    ideal = subcalls / concurrency * latency
    ledger = child["ledger"]
    checks = {
        "every sub-call recorded once": child["records"] == child["unique_records"] == subcalls == child["subcalls"],
        "each succeeded or failed": child["done"] + child["failed"] == subcalls,
        "ledger calls = successful responses sent": ledger.get("calls", 0) == child["done"] == sent["calls"],
        "ledger tokens = tokens sent": (ledger.get("prompt_tokens", 0), ledger.get("completion_tokens", 0))
        == (sent["prompt_tokens"], sent["completion_tokens"])
        == (child["record_prompt_tokens"], child["record_completion_tokens"]),
        "every request answered or faulted": child["server"]["sub_requests"] == sent["calls"] + child["server"]["sub_faults"],
    }
    results["summary"] = {
        "ideal_s": ideal,
        "wall_to_ideal": child["run_s"] / ideal if ideal > 0 else None,
        "peak_rss_bytes": child["child"]["maxrss_bytes"],
        "checks": checks,
        "all_accounted": all(checks.values()) and child["reason"] == "final",
    }
    return results


# -- reports ---------------------------------------------------------------------------


def _rows(results: dict[str, Any]) -> list[list[str]]:
    r, s, cfg = results["run"], results["summary"], results["config"]
    server = r["server"]
    faults = ", ".join(f"{kind} {count}" for kind, count in sorted(server["faults"].items())) or "none"
    ratio = "n/a" if s["wall_to_ideal"] is None else f"{s['wall_to_ideal']:.2f}x"
    return [
        ["run", f"{r['iterations']} steps, {r['subcalls']:,} sub-calls, reason {r['reason']}"],
        ["run wall time", f"{r['run_s']:.1f} s"],
        ["  of which the batched cells", f"{r['batched_cells_s']:.1f} s"],
        [f"ideal ({cfg['subcalls']:,} / {cfg['concurrency']} x {cfg['latency']:g} s)", f"{s['ideal_s']:.1f} s"],
        ["wall / ideal", ratio],
        ["max requests in flight seen by the server", f"{server['max_in_flight']}"],
        ["peak RSS of the run's process", mib(s["peak_rss_bytes"])],
        ["faults injected", f"{sum(server['faults'].values()):,} ({faults})"],
        ["sub-calls: succeeded / failed", f"{r['done']:,} / {r['failed']:,} ({r['retried']:,} needed a retry)"],
        ["sub-call requests: server saw / attempts recorded", f"{server['sub_requests']:,} / {r['attempts']:,}"],
        ["ledger: sub-calls, tokens", f"{r['ledger'].get('calls', 0):,}, "
         f"{r['ledger'].get('prompt_tokens', 0) + r['ledger'].get('completion_tokens', 0):,}"],
        ["server: successful responses, tokens", f"{server['answered']['calls']:,}, "
         f"{server['answered']['prompt_tokens'] + server['answered']['completion_tokens']:,}"],
        [".ipynb size", f"{r['notebook_bytes'] / 1e6:.2f} MB"],
    ]


def _check_lines(results: dict[str, Any]) -> list[str]:
    return [f"{name}: {verdict(ok)}" for name, ok in results["summary"]["checks"].items()]


def _note() -> str:
    return ("Requests the server saw beyond the attempts recorded are litellm's own single retry after a "
            "dropped connection (reset or truncated), which our client cannot see; they were never charged.")


def format_text(results: dict[str, Any]) -> str:
    cfg = results["config"]
    return "\n".join([
        f"Load: {cfg['subcalls']:,} sub-calls at concurrency {cfg['concurrency']}, "
        f"{cfg['fault_rate']:.0%} injected faults (seed {cfg['seed']}), {cfg['latency']:g} s per sub-call.",
        "",
        table(_rows(results), ["", "value"]),
        "",
        "Accounting:",
        *("  " + line for line in _check_lines(results)),
        "",
        _note(),
    ])


def format_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    return "\n".join([
        "## Load",
        "",
        f"`rlm-kernel bench load`: one scripted run of {cfg['steps']} steps sending {cfg['subcalls']:,} sub-calls "
        f"through `llm_query_batched` at concurrency {cfg['concurrency']}; the scripted server takes "
        f"{cfg['latency']:g} s per sub-call and answers {cfg['fault_rate']:.0%} of all requests with a random "
        f"fault (429 with and without Retry-After, 500, 503, timeout, reset, truncated or malformed body, "
        f"empty choices; seed {cfg['seed']}). The run is a child process of its own.",
        "",
        md_table(_rows(results), ["", "value"]),
        "",
        "Accounting:",
        "",
        *("- " + line for line in _check_lines(results)),
        "",
        _note(),
    ])


__all__ = ["run_load", "format_text", "format_markdown"]
