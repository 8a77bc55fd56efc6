"""``rlm-kernel bench notebook``: how big the trajectory notebook of a long
run gets, and how long it takes to save and re-open.

A scripted run of ``steps`` root steps, each a cell that sends
``per_step`` chunks of the context (``chunk_chars`` characters each) through
``llm_query_batched`` (10,000 sub-calls at the defaults); the server answers
at once. The run writes its notebook as ``rlm-kernel run`` does (the
notebook sink, during the run and at the end). Reported: the .ipynb size
and what it is made of, the run's wall time and the time the sink spent
writing during it, the time to save the finished notebook again (validate +
write) and to re-open it (``nbformat.read`` + ``nbformat.validate``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

from ..testing.server import Reply
from . import (
    BenchServer,
    Progress,
    Router,
    machine_info,
    md_table,
    mib,
    quiet,
    split_runs,
    table,
    verdict,
)

SIZE_TARGET_BYTES = 5_000_000
QUERY = "Which chunks mention the secret key?"


def _step_reply(steps: int, per_step: int, chunk_chars: int):
    def reply(step: int, body: dict[str, Any]) -> str:
        first = (step - 1) * per_step
        code = (
            f"chunks = [context[i * {chunk_chars}:(i + 1) * {chunk_chars}] "
            f"for i in range({first}, {first + per_step})]\n"
            f"prompts = [f'Chunk {{i}}: does it mention the secret key? Answer yes or no.\\n\\n{{c}}' "
            f"for i, c in zip(range({first}, {first + per_step}), chunks)]\n"
            f"answers_{step} = llm_query_batched(prompts)\n"
            f"hits = [a for a in answers_{step} if a.startswith('yes')]\n"
            f"print(f'step {step}: {{len(hits)}} of {{len(answers_{step})}} chunks mention it')"
        )
        if step >= steps:
            code += "\nFINAL('no chunk mentions the secret key')"
        return f"Chunks {first} to {first + per_step - 1}.\n```repl\n{code}\n```"

    return reply


def _sub_reply(prompt: str) -> Reply:
    head = prompt.split(":", 1)[0].lower()
    return Reply(text=f"no, {head} does not mention it")


# -- the child -----------------------------------------------------------------------


def child_notebook(cfg: dict[str, Any]) -> dict[str, Any]:
    import nbformat

    from ..api import RLM
    from ..engine.model.litellm_setup import load_litellm as litellm_module
    from ..sinks import notebook as notebook_sink
    from . import make_text

    litellm_module()
    steps, per_step, chunk_chars = cfg["steps"], cfg["per_step"], cfg["chunk_chars"]
    context = make_text(steps * per_step * chunk_chars)

    # Time the sink's writes during the run (wrapping, not changing, the engine).
    writes: list[float] = []
    original_write = notebook_sink.write_notebook

    def timed_write(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            original_write(*args, **kwargs)
        finally:
            writes.append(time.perf_counter() - started)

    notebook_sink.write_notebook = timed_write
    tmp = tempfile.mkdtemp(prefix="rlm-bench-notebook-")
    path = os.path.join(tmp, "run.ipynb")
    rlm = RLM(
        f"openai/{cfg['root_model']}", f"openai/{cfg['sub_model']}", api_base=cfg["url"], api_key="bench",
        max_iterations=steps,
    )
    started = time.perf_counter()
    try:
        result = rlm.completion(context, QUERY, output=path)
    finally:
        notebook_sink.write_notebook = original_write
    run_s = time.perf_counter() - started
    size = os.path.getsize(path)

    nb = result.notebook
    again = os.path.join(tmp, "again.ipynb")
    started = time.perf_counter()
    original_write(nb, again)  # validate + atomic write, as at the end of a run
    save_s = time.perf_counter() - started

    # The first read and validate in a process also build nbformat's validator;
    # the second pair shows the steady cost.
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        reopened = nbformat.read(path, as_version=4)
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        nbformat.validate(reopened)
        timings.append((read_s, time.perf_counter() - started))
    (first_read_s, first_validate_s), (read_s, validate_s) = timings

    recorded = 0
    subcall_json = 0
    output_json = 0
    for cell in reopened.cells:
        records = cell.get("metadata", {}).get("rlm", {}).get("subcalls") or []
        recorded += len(records)
        if records:
            subcall_json += len(json.dumps(records, indent=1, ensure_ascii=False))
        for output in cell.get("outputs", []):
            output_json += len(json.dumps(output, indent=1, ensure_ascii=False))
    first_record = None
    for cell in reopened.cells:
        records = cell.get("metadata", {}).get("rlm", {}).get("subcalls") or []
        if records:
            first_record = records[0]
            break
    for name in (path, again):
        os.remove(name)
    os.rmdir(tmp)
    return {
        "reason": result.reason, "iterations": result.iterations, "subcalls": result.subcalls,
        "answer": result.answer_text,
        "run_s": run_s, "notebook_bytes": size, "cells": len(reopened.cells),
        "subcalls_recorded": recorded, "subcall_metadata_chars": subcall_json, "output_chars": output_json,
        "bytes_per_subcall": size / recorded if recorded else None,
        "example_record": first_record,
        "sink_writes": len(writes), "sink_write_s": sum(writes), "sink_last_write_s": writes[-1] if writes else None,
        "save_s": save_s, "read_s": read_s, "validate_s": validate_s, "reopen_s": read_s + validate_s,
        "first_read_s": first_read_s, "first_validate_s": first_validate_s,
    }


# -- the parent ---------------------------------------------------------------------


def run_notebook(
    *,
    steps: int = 200,
    per_step: int = 50,
    chunk_chars: int = 2000,
    progress: Progress = quiet,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    from . import run_child

    router = Router()
    router.roots["nb-root"] = _step_reply(steps, per_step, chunk_chars)
    router.subs["nb-sub"] = _sub_reply
    results: dict[str, Any] = {
        "benchmark": "notebook", "machine": machine_info(),
        "config": {"steps": steps, "per_step": per_step, "subcalls": steps * per_step, "chunk_chars": chunk_chars},
    }
    progress(f"notebook: a scripted run of {steps} steps x {per_step} sub-calls "
             f"({steps * per_step:,} sub-calls) ...")
    server = BenchServer(router).start()
    try:
        child = run_child(
            "rlm_kernel.bench.notebook_scale:child_notebook",
            {"url": server.url, "steps": steps, "per_step": per_step, "chunk_chars": chunk_chars,
             "root_model": "nb-root", "sub_model": "nb-sub"}, timeout=timeout,
        )
    finally:
        server.stop()
    runs = split_runs(router.requests("nb-root"))
    child["server_root_requests"] = len(runs[0]) if runs else 0
    child["server_subcalls"] = router.sub_counts.get("nb-sub", 0)
    results["run"] = child
    ok = child["reason"] == "final" and child["subcalls_recorded"] == steps * per_step
    results["summary"] = {
        "targets": {
            "notebook_size": {"value": child["notebook_bytes"], "target": f"< {SIZE_TARGET_BYTES / 1e6:g} MB",
                              "met": child["notebook_bytes"] < SIZE_TARGET_BYTES},
        },
        "complete": ok,
    }
    return results


# -- reports ---------------------------------------------------------------------------


def _rows(results: dict[str, Any]) -> list[list[str]]:
    r = results["run"]
    return [
        ["run", f"{r['iterations']} steps, {r['subcalls']:,} sub-calls, reason {r['reason']}"],
        ["sub-calls recorded in the notebook", f"{r['subcalls_recorded']:,}"],
        ["server saw", f"{r['server_root_requests']} root requests, {r['server_subcalls']:,} sub-calls"],
        [".ipynb size", f"{r['notebook_bytes'] / 1e6:.2f} MB ({r['cells']} cells)"],
        ["  per sub-call", f"{r['bytes_per_subcall']:.0f} B" if r["bytes_per_subcall"] else "n/a"],
        ["  sub-call metadata", f"{r['subcall_metadata_chars'] / 1e6:.2f} MB"],
        ["  cell outputs", f"{r['output_chars'] / 1e6:.2f} MB"],
        ["run wall time", f"{r['run_s']:.1f} s"],
        ["  notebook writes during the run", f"{r['sink_writes']} writes, {r['sink_write_s']:.2f} s in total"],
        ["save the finished notebook (validate + write)", f"{r['save_s']:.3f} s"],
        ["re-open: nbformat.read (first in the process / again)", f"{r['first_read_s']:.3f} s / {r['read_s']:.3f} s"],
        ["re-open: nbformat.validate (first / again)", f"{r['first_validate_s']:.3f} s / {r['validate_s']:.3f} s"],
        ["peak RSS of the run's process", mib(r["child"]["maxrss_bytes"])],
    ]


def _target_lines(results: dict[str, Any]) -> list[str]:
    t = results["summary"]["targets"]["notebook_size"]
    lines = [f".ipynb size: {t['value'] / 1e6:.2f} MB (target {t['target']}): {verdict(t['met'])}"]
    if not results["summary"]["complete"]:
        lines.append("WARNING: the run did not complete as scripted; the size is not representative.")
    return lines


def format_text(results: dict[str, Any]) -> str:
    cfg = results["config"]
    r = results["run"]
    out = [
        f"Notebook scale: {cfg['steps']} steps x {cfg['per_step']} sub-calls ({cfg['subcalls']:,}), "
        f"prompts of {cfg['chunk_chars']:,}+ characters.",
        "",
        table(_rows(results), ["", "value"]),
        "",
        "One sub-call record as stored:",
        "  " + json.dumps(r.get("example_record"), ensure_ascii=False),
        "",
        "Targets:",
        *("  " + line for line in _target_lines(results)),
    ]
    return "\n".join(out)


def format_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    r = results["run"]
    return "\n".join([
        "## Notebook scale",
        "",
        f"`rlm-kernel bench notebook`: a scripted run of {cfg['steps']} steps, each a cell sending "
        f"{cfg['per_step']} context chunks of {cfg['chunk_chars']:,} characters through `llm_query_batched` "
        f"({cfg['subcalls']:,} sub-calls), written by the notebook sink as `rlm-kernel run` does.",
        "",
        md_table(_rows(results), ["", "value"]),
        "",
        "One sub-call record as stored:",
        "",
        "```json",
        json.dumps(r.get("example_record"), ensure_ascii=False, indent=1),
        "```",
        "",
        "Targets:",
        "",
        *("- " + line for line in _target_lines(results)),
    ])


__all__ = ["run_notebook", "format_text", "format_markdown"]
