"""The realistic benchmark's report: the script's parameters, then each
library's wall time against the critical-path ideal and where the rest went."""

from __future__ import annotations

from typing import Any

from . import fmt_ratio, machine_text, md_table, mib, table, verdict

_TARGET_LABELS = {
    "ours_to_ideal": "ours / the critical-path ideal",
    "rlms_to_ideal": "rlms / the critical-path ideal",
    "rlms_to_ours": "rlms / ours (how much faster ours is on the same script)",
    "cpu_ours_to_rlms": "CPU time during completion(), ours / rlms",
    "cpu_no_stream_to_rlms": "CPU time during completion(), ours with --no-stream / rlms",
}


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _range(pair: Any, unit: str = "") -> str:
    low, high = pair
    return f"{low:g}-{high:g}{unit}"


def script_lines(results: dict[str, Any]) -> list[str]:
    """The script's fixed parameters, one line each."""
    d = results["script"]
    ideal = d["ideal"]
    scale = d["time_scale"]
    scaled = "" if scale == 1 else f" (times x{scale:g})"
    tokens = d["reply_tokens"]
    slowest = " + ".join(f"{v:.2f}" for v in ideal["slowest_subcall_s"].values()) or "0"
    lines = [
        f"seed {d['seed']}; {d['steps']} root steps; each reply {_range(d['tokens'])} tokens "
        f"(these: {min(tokens)}-{max(tokens)}, {d['reply_tokens_total']:,} in all) at "
        f"{_range(d['tokens_per_s'])} tokens/s after a {_range(d['ttft_s'], ' s')} time to first token{scaled}",
        "the server streams a reply token by token when asked (ours asks), or sends it whole after the same "
        "time (rlms)",
        "each reply is prose, then one repl code block that ends it; no reasoning field (ours runs a closed block "
        "early only once it has seen a whole reply of the model; with the block last, that costs nothing)",
        f"steps {', '.join(map(str, d['batch_steps'])) or '(none)'} each send llm_query_batched over "
        f"{d['prompts']} prompts ({d['chunk_chars']:,}-character slices of a {d['context_chars']:,}-character "
        f"context); each sub-call takes {_range(d['sub_latency_s'], ' s')}{scaled}, drawn per prompt from the seed",
        f"the last step answers through the answer dict (answer[\"ready\"] = True; rlms 0.1.3 reads no FINAL_VAR); "
        f"the expected answer is {d['expected_answer']!r}, from all {d['subcalls']} sub-call answers",
        f"critical-path ideal: {ideal['ideal_s']:.2f} s = the root replies' writing {ideal['root_total_s']:.2f} s "
        f"+ each batch's slowest sub-call ({slowest} s); left out: the code's own execution (a few ms a step), "
        "request round trips, process start and imports (the clock runs around completion() only)",
    ]
    return lines


def _rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    names = [n for n in ("ours", "rlms") if n in results["runs"]]
    runs = [results["runs"][n] for n in names]
    summ = results["summary"]["runs"]
    seen = [r["server"] for r in runs]
    rows = [
        ["version", *(str(r["version"]) for r in runs)],
        ["concurrency (sub-calls in flight; default unless noted)", *(str(r["concurrency"]) for r in runs)],
        ["wall time of completion()", *(_s(r["wall_s"]) for r in runs)],
        ["  / the critical-path ideal", *(fmt_ratio(summ[n]["to_ideal"], 3) for n in names)],
        ["  over the ideal", *(_s(summ[n]["over_ideal_s"]) for n in names)],
        ["the ideal at its own concurrency (each batch queued in prompt order)",
         *(_s(summ[n]["own_ideal_s"]) for n in names)],
        ["  wall time / that", *(fmt_ratio(summ[n]["to_own_ideal"], 3) for n in names)],
        ["answer", *(repr(r["run"].get("answer")) for r in runs)],
        ["root requests (streamed)", *(f"{s['root_requests']} ({s['streamed']})" for s in seen)],
        ["sub-calls the server answered", *(str(s["subcalls"]) for s in seen)],
        ["most sub-calls in flight", *(str(s["max_subcalls_in_flight"]) for s in seen)],
        ["where the time over the ideal went:", *("" for _ in runs)],
        ["  completion() to the first root request", *(_s(s["start_s"]) for s in seen)],
        ["  a reply's last token to the next request, steps without a batch (median / max)",
         *(f"{_s(s['step_gap_median_s'])} / {_s(s['step_gap_max_s'])}" for s in seen)],
    ]
    batches = sorted({b for s in seen for b in s["batches"]})
    for batch in batches:
        step = next((s["batches"][batch]["step"] for s in seen if batch in s["batches"]), "?")
        rows.append([f"  batch {batch} (step {step}): first sub-call sent after the reply's last token",
                     *(_s(s["batches"].get(batch, {}).get("after_reply_s")) for s in seen)])
        rows.append([f"  batch {batch}: first sub-call sent to last answered (over its slowest)",
                     *(_batch_cell(s["batches"].get(batch)) for s in seen)])
        rows.append([f"  batch {batch}: the least its concurrency allows",
                     *(_s(s["batches"].get(batch, {}).get("bound_s")) for s in seen)])
    rows += [
        ["  the last reply's last token to completion() returning", *(_s(s["end_s"]) for s in seen)],
        ["CPU time of the process during completion()", *(_s(r["cpu_s"]) for r in runs)],
    ]
    whole = results.get("no_stream")
    if whole is not None:
        rows.append(["  ours with --no-stream (replies read whole, as rlms reads them)", _s(whole["cpu_s"]),
                     *("" for _ in runs[1:])])
        if "ours" in results["runs"]:
            streamed = results["script"]["reply_tokens_total"]
            cost = results["runs"]["ours"]["cpu_s"] - whole["cpu_s"]
            rows.append([f"  what streaming costs: the difference, and per streamed token ({streamed:,})",
                         f"{_s(cost)}, {cost * 1000 / streamed:.2f} ms", *("" for _ in runs[1:])])
    rows.append(["peak RSS of the process", *(mib(r["peak_rss_bytes"]) for r in runs)])
    return ["", *names], rows


def _batch_cell(batch: dict[str, Any] | None) -> str:
    if not batch:
        return "n/a"
    return f"{batch['span_s']:.2f} s (+{batch['excess_s']:.2f} s)"


def _target_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for key, item in results["summary"]["targets"].items():
        lines.append(f"{_TARGET_LABELS[key]}: {fmt_ratio(item['value'], 3)} (target {item['target']}: "
                     f"{verdict(item['met'])})")
    return lines


def format_text(results: dict[str, Any]) -> str:
    header, rows = _rows(results)
    out = [
        "Realistic run: one script through ours and through rlms, one after the other, each in a fresh process "
        "against a fresh scripted server on 127.0.0.1, each at its default settings",
        "",
        "Script (fixed before measuring):",
        *(f"  {line}" for line in script_lines(results)),
        "",
        table(rows, header),
        "",
        "Targets:",
        *(f"  {line}" for line in _target_lines(results)),
        *(f"Note: {n}" for n in results["notes"]),
        "",
        f"Machine: {machine_text(results['machine'])}",
    ]
    return "\n".join(out)


def format_markdown(results: dict[str, Any]) -> str:
    header, rows = _rows(results)
    return "\n".join([
        "## Realistic run against the official `rlms` library",
        "",
        "`rlm-kernel bench realistic`: one scripted run that streams like a real model, through ours and "
        "through `rlms`, one after the other, each in a fresh process against a fresh scripted server, each "
        "at its default settings. The script, fixed before measuring:",
        "",
        *(f"- {line}" for line in script_lines(results)),
        "",
        md_table(rows, header),
        "",
        *(f"- {line}" for line in _target_lines(results)),
        *(f"- Note: {n}" for n in results["notes"]),
        "",
        "Streaming is most of ours' CPU (the row \"what streaming costs\", with `--no-stream-too`): every token "
        "comes as a chunk of its own, which litellm reads (HTTP and its provider's parser, an object per chunk) "
        "and passes through its stream wrapper (a second object per chunk, hidden parameters, its logging), and "
        "which ours adds to the reply so far, reading it again for a closed code block only at a newline or a "
        "tag. Read whole (`--no-stream`), ours' CPU is about rlms': the rest buys the cells filling as the model "
        "writes and each code block running as its fence closes. litellm makes every model call of ours, its "
        "stream wrapper included.",
    ])
