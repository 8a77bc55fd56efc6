"""The text report of a suite run: one row per context length and system."""

from __future__ import annotations

from typing import Any

from .. import md_table, table
from .systems import TITLES


def _cost(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def _rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for entry in results["lengths"]:
        for i, (name, s) in enumerate(entry["systems"].items()):
            rows.append([
                f"{entry['label']} (~{entry['context_tokens']:,})" if i == 0 else "",
                TITLES.get(name, name), f"{s['score']:.3f}", _cost(s["cost_usd"]), f"{s['tokens']:,.0f}",
                f"{s['time_s']:.1f} s", f"{s['errors']}/{s['tasks']}",
            ])
    return rows


_HEADER = ["length", "system", "score", "cost/task", "tokens/task", "time/task", "errors"]


def format_markdown(results: dict[str, Any], command: str) -> str:
    """The suite's section of BENCHMARKS.md."""
    cfg = results["config"]
    sub = cfg["sub_model"]
    lines = [
        f"## Long-context suite: {results['suite']}",
        "",
        f"`{command}`: {cfg['n']} task(s) per length, seed {cfg['seed']}; root model {cfg['model']}"
        + (f", sub-model {sub}" if sub != cfg["model"] else "") + ". Lengths are tokens estimated as "
        "characters / 4; score is the mean per task (1 = all right); cost, tokens and time are means per task.",
        "",
        md_table(_rows(results), _HEADER),
    ]
    if "base" in cfg["systems"]:
        lines += ["", f"base: one call with the context cut to {cfg.get('base_max_tokens', 0):,} estimated tokens."]
    from ...offline import MODEL as OFFLINE_MODEL

    if OFFLINE_MODEL in (cfg["model"], sub):
        lines += ["", f"{OFFLINE_MODEL} is the bundled tiny offline model (SmolLM2-135M on this CPU): these "
                  "figures show the suite running end to end against a real model, not what either method can "
                  "do with a capable one. Run the command with your own model to measure that."]
    return "\n".join(lines)


def format_text(results: dict[str, Any]) -> str:
    cfg = results["config"]
    header = _HEADER
    rows = _rows(results)
    sub = cfg["sub_model"]
    lines = [
        f"Suite {results['suite']}: {cfg['n']} task(s) per length, seed {cfg['seed']}; root model {cfg['model']}"
        + (f", sub-model {sub}" if sub != cfg["model"] else "") + ".",
        "Context lengths are in tokens estimated as characters / 4; score is the mean per task "
        "(1 = all right); cost, tokens and time are means per task (cost n/a when the price is unknown).",
        "",
        table(rows, header),
    ]
    if "base" in cfg["systems"]:
        lines.append(f"base: one call with the context cut to {cfg.get('base_max_tokens', 0):,} estimated tokens.")
    if results.get("plot"):
        lines.append(f"Plot: {results['plot']}")
    return "\n".join(lines)
