"""``rlm-kernel bench context``: contexts of 10 MB, 100 MB and 1 GB.

For each size, a text file is generated in a temp dir, then a child process
(one per size, so each figure is that size's alone) measures:

* ``load_context`` against a plain ``open(path).read()`` of the same file
  (alternating, best of two each, file in the page cache for both);
* resident memory after loading against the file size, and the peak while
  loading (VmHWM, reset before each phase);
* the time to build the root model's first message (the context description);
* a 2-step run whose first cell is ``print(context)``: the size of the first
  root request (captured by the scripted server: it must not depend on the
  context size), what the model gets back from the print (its next request),
  the peak memory during the run and the size of the trajectory notebook.

The temp files are removed as soon as their size is done.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import (
    GB,
    MB,
    BenchServer,
    Progress,
    Router,
    hwm_bytes,
    machine_info,
    md_table,
    mem_available_bytes,
    mib,
    quiet,
    reset_peak,
    rss_bytes,
    size_label,
    split_runs,
    table,
    verdict,
    write_text_file,
)

DEFAULT_SIZES = (10 * MB, 100 * MB, 1 * GB)
QUERY = "Which words occur most often in the context?"

LOAD_TARGET = 2.0  # load_context time / plain read time
MEMORY_TARGET = 1.5  # resident memory for the context / file size
DESCRIBE_TARGET_S = 1.0  # at 1 GB
REQUEST_SPREAD_BYTES = 64  # "independent of the context size": digits may differ


def _print_run_reply(step: int, body: dict[str, Any]) -> str:
    if step == 1:
        return "Let me look at everything.\n```repl\nprint(context)\n```"
    return "FINAL(printed)"


def _warmup_reply(step: int, body: dict[str, Any]) -> str:
    return "FINAL(warm)"


# -- the child -------------------------------------------------------------------------


def child_context(cfg: dict[str, Any]) -> dict[str, Any]:
    import sys

    from ..api import RLM
    from ..context.files import load_context
    from ..engine.model.litellm_setup import load_litellm as litellm_module
    from ..engine.protocol import prompts

    def note(message: str) -> None:
        print(f"[bench]   {message}", file=sys.stderr, flush=True)

    litellm_module()
    path = cfg["path"]
    size = os.path.getsize(path)

    def new_rlm(model: str) -> Any:
        return RLM(f"openai/{model}", "openai/ctx-sub", api_base=cfg["url"], api_key="bench", max_iterations=3)

    # Warm up litellm and IPython on a tiny context so their first-use costs
    # are not charged to the big one.
    new_rlm(cfg["warmup_model"]).completion("tiny", QUERY)
    gc.collect()
    base_rss = rss_bytes() or 0
    peak_tracking = reset_peak()

    # Memory first, on a heap the measurements have not churned yet: load the
    # context, read the resident size and the peak while loading.
    reset_peak()
    started = time.perf_counter()
    loaded = load_context([path])
    load_s = [time.perf_counter() - started]
    load_peak = (hwm_bytes() or 0) - base_rss
    context_rss = (rss_bytes() or 0) - base_rss
    _malloc_trim()
    context_rss_trimmed = (rss_bytes() or 0) - base_rss
    note(f"load_context {load_s[0]:.3f} s, resident {context_rss / 2**20:,.0f} MiB")

    # Then the timing rounds: a plain read against load_context, alternating.
    plain_s: list[float] = []
    plain_peak = 0
    chars = len(loaded.value) if isinstance(loaded.value, str) else None
    # small files are read many times so the ratio is not timer noise
    rounds = max(cfg["rounds"], min(20, (200 * MB) // max(size, 1)))
    for round_ in range(rounds):
        loaded = None
        gc.collect()
        reset_peak()
        before = rss_bytes() or 0
        started = time.perf_counter()
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        plain_s.append(time.perf_counter() - started)
        plain_peak = max(plain_peak, (hwm_bytes() or 0) - before)
        del text
        gc.collect()
        if round_:
            started = time.perf_counter()
            loaded = load_context([path])
            load_s.append(time.perf_counter() - started)
        else:
            loaded = load_context([path])
        if size >= 100 * MB:
            note(f"round {round_ + 1}: plain read {plain_s[-1]:.3f} s, load_context {load_s[-1]:.3f} s")
    assert loaded is not None
    gc.collect()
    context = loaded.value

    describe_s = []
    first_message_chars = None
    for _ in range(5):
        started = time.perf_counter()
        message = prompts.first_message(context, QUERY, loaded.sources)
        describe_s.append(time.perf_counter() - started)
        first_message_chars = len(message)

    notebook = os.path.join(os.path.dirname(path), "print-run.ipynb")
    gc.collect()
    before_run = rss_bytes() or 0
    reset_peak()
    started = time.perf_counter()
    result = new_rlm(cfg["root_model"]).completion(context, QUERY, output=notebook, sources=loaded.sources)
    run_s = time.perf_counter() - started
    run_peak = (hwm_bytes() or 0) - before_run
    note(f"print(context) run: {result.reason} in {run_s:.2f} s")
    notebook_bytes = os.path.getsize(notebook) if os.path.exists(notebook) else None
    print_cell = next((c for c in (result.notebook.cells if result.notebook else [])
                       if c.cell_type == "code" and "print(context)" in c.source), None)
    stored_output_chars = None
    if print_cell is not None:
        stored_output_chars = sum(len(o.get("text", "")) for o in print_cell.outputs)
    return {
        "path_size_bytes": size,
        "chars": chars,
        "rounds": rounds,
        "plain_read_s": min(plain_s),
        "load_context_s": min(load_s),
        "plain_read_peak_bytes": plain_peak,
        "load_peak_bytes": load_peak,
        "context_rss_bytes": context_rss,
        "context_rss_trimmed_bytes": context_rss_trimmed,
        "base_rss_bytes": base_rss,
        "peak_tracking": peak_tracking,
        "describe_s": max(describe_s),
        "first_message_chars": first_message_chars,
        "run": {
            "reason": result.reason, "answer": result.answer_text, "wall_s": run_s,
            "peak_extra_bytes": run_peak, "notebook_bytes": notebook_bytes,
            "stored_output_chars": stored_output_chars,
        },
    }


def _malloc_trim() -> None:
    """Hand freed heap memory back to the OS (glibc), to tell memory the
    context holds from buffers the allocator merely kept."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# -- the parent ------------------------------------------------------------------------


def run_context(
    *,
    sizes: tuple[int, ...] | list[int] = DEFAULT_SIZES,
    rounds: int = 2,
    directory: str | None = None,
    progress: Progress = quiet,
    timeout: float = 3600.0,
) -> dict[str, Any]:
    from . import run_child

    router = Router()
    results: dict[str, Any] = {
        "benchmark": "context", "machine": machine_info(),
        "config": {"sizes": list(sizes), "rounds": rounds}, "sizes": [], "notes": [],
    }
    tmp = tempfile.mkdtemp(prefix="rlm-bench-context-", dir=directory)
    server = BenchServer(router).start()
    try:
        for index, size in enumerate(sizes):
            label = size_label(size)
            free_disk = shutil.disk_usage(tmp).free
            available = mem_available_bytes()
            if free_disk < size * 1.2:
                results["notes"].append(f"{label}: skipped, only {free_disk / GB:.1f} GB free on disk")
                continue
            if available is not None and available < size * 4:
                results["notes"].append(
                    f"{label}: skipped, needs ~{size * 4 / GB:.1f} GB of free memory, "
                    f"{available / GB:.1f} GB available")
                continue
            folder = Path(tmp, f"s{index:02d}")  # same-length paths: the request sizes stay comparable
            folder.mkdir()
            path = folder / "context.txt"
            progress(f"context {label}: writing {path} ...")
            gen_s = write_text_file(path, size, progress=progress)
            root, warm = f"ctx-{index}", f"ctxwarm-{index}"
            router.roots[root] = _print_run_reply
            router.roots[warm] = _warmup_reply
            progress(f"context {label}: written in {gen_s:.2f} s; measuring in a child process ...")
            try:
                child = run_child(
                    "rlm_kernel.bench.context_scale:child_context",
                    {"path": str(path), "url": server.url, "root_model": root, "warmup_model": warm,
                     "rounds": rounds}, timeout=timeout,
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            runs = split_runs(router.requests(root))
            requests = runs[0] if runs else []
            child["size_bytes"] = size
            child["label"] = label
            child["generate_s"] = gen_s
            child["first_request_bytes"] = requests[0]["bytes"] if requests else None
            child["model_view_chars"] = requests[1]["last_user_chars"] if len(requests) > 1 else None
            child["second_request_bytes"] = requests[1]["bytes"] if len(requests) > 1 else None
            results["sizes"].append(child)
            progress(f"context {label}: done (peak RSS of the child {mib(child['child']['maxrss_bytes'])})")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["summary"] = summarize(results)
    return results


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for item in results["sizes"]:
        size = item["size_bytes"]
        rows.append({
            "label": item["label"],
            "load_ratio": item["load_context_s"] / item["plain_read_s"] if item["plain_read_s"] else None,
            "memory_ratio": item["context_rss_bytes"] / size,
            "load_peak_ratio": item["load_peak_bytes"] / size,
            "run_peak_ratio": item["run"]["peak_extra_bytes"] / size,
        })
    targets: dict[str, Any] = {}
    if rows:
        worst_load = max(r["load_ratio"] or 0 for r in rows)
        worst_mem = max(r["memory_ratio"] for r in rows)
        targets["load_vs_plain_read"] = {"value": worst_load, "target": f"<= {LOAD_TARGET}",
                                         "met": worst_load <= LOAD_TARGET}
        targets["resident_memory_vs_size"] = {"value": worst_mem, "target": f"<= {MEMORY_TARGET}",
                                              "met": worst_mem <= MEMORY_TARGET}
        biggest = max(results["sizes"], key=lambda i: i["size_bytes"])
        targets["describe_at_largest"] = {
            "value": biggest["describe_s"], "target": f"< {DESCRIBE_TARGET_S} s at {biggest['label']}",
            "met": biggest["describe_s"] < DESCRIBE_TARGET_S,
        }
        sizes = [i["first_request_bytes"] for i in results["sizes"] if i["first_request_bytes"] is not None]
        if sizes:
            spread = max(sizes) - min(sizes)
            targets["root_request_independent"] = {
                "value": spread, "target": f"spread <= {REQUEST_SPREAD_BYTES} bytes",
                "met": spread <= REQUEST_SPREAD_BYTES,
            }
        views = [i["model_view_chars"] for i in results["sizes"] if i["model_view_chars"] is not None]
        if views:
            targets["print_view_bounded"] = {"value": max(views), "target": "<= 12,000 characters",
                                             "met": max(views) <= 12_000}
    return {"rows": rows, "targets": targets}


# -- reports ----------------------------------------------------------------------------


def _table_rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["", *(i["label"] for i in results["sizes"])]
    items = results["sizes"]
    summ = results["summary"]["rows"]

    def row(label: str, fn: Any) -> list[str]:
        return [label, *(fn(i, s) for i, s in zip(items, summ, strict=True))]

    rows = [
        row("generate the file", lambda i, s: f"{i['generate_s']:.2f} s"),
        row("plain open().read()", lambda i, s: f"{i['plain_read_s']:.3f} s"),
        row("load_context", lambda i, s: f"{i['load_context_s']:.3f} s"),
        row("  load / plain read", lambda i, s: f"{s['load_ratio']:.2f}x"),
        row("resident memory for the context", lambda i, s: mib(i["context_rss_bytes"])),
        row("  / file size", lambda i, s: f"{s['memory_ratio']:.2f}x"),
        row("  after malloc_trim(0)", lambda i, s: mib(i.get("context_rss_trimmed_bytes"))),
        row("peak extra memory while loading", lambda i, s: mib(i["load_peak_bytes"])),
        row("  / file size", lambda i, s: f"{s['load_peak_ratio']:.2f}x"),
        row("peak extra memory, plain read", lambda i, s: mib(i["plain_read_peak_bytes"])),
        row("context description (first message)", lambda i, s: f"{i['describe_s'] * 1000:.3f} ms"),
        row("first root request body", lambda i, s: f"{i['first_request_bytes']:,} B"),
        row("print(context) run: reason", lambda i, s: i["run"]["reason"]),
        row("  run wall time", lambda i, s: f"{i['run']['wall_s']:.2f} s"),
        row("  what the model got back (chars)", lambda i, s: f"{i['model_view_chars']:,}"
            if i["model_view_chars"] is not None else "n/a"),
        row("  output kept in the notebook (chars)", lambda i, s: f"{i['run']['stored_output_chars']:,}"
            if i["run"]["stored_output_chars"] is not None else "n/a"),
        row("  notebook file", lambda i, s: f"{(i['run']['notebook_bytes'] or 0) / 1000:,.0f} kB"),
        row("  peak extra memory during the run", lambda i, s: mib(i["run"]["peak_extra_bytes"])),
        row("  / file size", lambda i, s: f"{s['run_peak_ratio']:.2f}x"),
        row("peak RSS of the child process", lambda i, s: mib(i["child"]["maxrss_bytes"])),
    ]
    return header, rows


def _target_lines(results: dict[str, Any]) -> list[str]:
    labels = {
        "load_vs_plain_read": "load_context / plain read (worst size)",
        "resident_memory_vs_size": "resident memory / text size (worst size)",
        "describe_at_largest": "context description time",
        "root_request_independent": "first root request size across sizes",
        "print_view_bounded": "what print(context) shows the model",
    }
    lines = []
    for key, t in results["summary"]["targets"].items():
        value = t["value"]
        shown = f"{value:,}" if isinstance(value, int) else (f"{value * 1000:.3f} ms" if key == "describe_at_largest"
                                                              else f"{value:.2f}")
        lines.append(f"{labels[key]}: {shown} (target {t['target']}): {verdict(t['met'])}")
    return lines


def format_text(results: dict[str, Any]) -> str:
    header, rows = _table_rows(results)
    out = ["Context scale (each size measured in a child process of its own; extra memory is over the "
           "process's resident size before the phase):", "", table(rows, header), "", "Targets:",
           *("  " + line for line in _target_lines(results))]
    out += ["Note: " + n for n in results.get("notes", [])]
    return "\n".join(out)


def format_markdown(results: dict[str, Any]) -> str:
    header, rows = _table_rows(results)
    out = [
        "## Context scale",
        "",
        "`rlm-kernel bench context`: ASCII text files generated in a temp dir, each size measured in a "
        "child process of its own (file in the page cache; best of 2 to 20 alternating reads, more for small files). Extra memory is "
        "over the process's resident size before the phase (VmHWM reset through /proc/self/clear_refs). "
        "The print(context) run is a 2-step scripted run whose first cell prints the whole context.",
        "",
        md_table(rows, header),
        "",
        "Targets:",
        "",
        *("- " + line for line in _target_lines(results)),
    ]
    out += ["", *("Note: " + n for n in results["notes"])] if results.get("notes") else []
    return "\n".join(out)


__all__ = ["run_context", "format_text", "format_markdown", "DEFAULT_SIZES"]
