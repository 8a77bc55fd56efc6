"""The benchmark code at tiny sizes: the reports have the promised structure
and every harness really did the scripted work. No timing assertions."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rlm_kernel.bench import (  # noqa: E402
    BenchServer,
    Router,
    make_text,
    parse_size,
    root_step,
    size_label,
    split_runs,
    update_markdown,
    write_text_file,
)
from rlm_kernel.bench.cli import add_bench_parser, run_bench  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlm-kernel")
    add_bench_parser(parser.add_subparsers(dest="command"))
    return parser


# -- helpers -------------------------------------------------------------------------


def test_parse_size_and_labels() -> None:
    assert parse_size("10MB") == 10_000_000
    assert parse_size("1GB") == 1_000_000_000
    assert parse_size("1.5M") == 1_500_000
    assert parse_size("512KiB") == 512 * 1024
    assert parse_size("123") == 123
    for bad in ("", "MB", "ten MB", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert size_label(10_000_000) == "10 MB"
    assert size_label(1_000_000_000) == "1 GB"


def test_generated_text_is_deterministic_ascii(tmp_path: Path) -> None:
    text = make_text(3_000_000)
    assert len(text) == 3_000_000 and text.isascii()
    assert text == make_text(3_000_000)
    assert make_text(10) == text[:10]
    path = tmp_path / "t.txt"
    write_text_file(path, 2_500_000)
    assert path.stat().st_size == 2_500_000
    assert path.read_bytes().isascii()


def test_router_counts_steps_for_both_message_shapes() -> None:
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}
    turn = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}]
    assert root_step({"messages": [system, user]}) == 1
    assert root_step({"messages": [system, user, *turn, *turn]}) == 3
    router = Router()
    router.roots["r"] = lambda step, body: f"step {step}"
    router.subs["s"] = lambda prompt: prompt.upper()
    assert router({"model": "r", "messages": [system, user, *turn]}) == "step 2"
    assert router({"model": "s", "messages": [user]}) == "U"
    assert router.sub_counts == {"s": 1}
    runs = split_runs([{"t": 1, "step": 1}, {"t": 2, "step": 2}, {"t": 3, "step": 1}])
    assert [len(r) for r in runs] == [2, 1]


def test_bench_server_reports_request_sizes() -> None:
    import httpx

    router = Router()
    router.roots["root"] = lambda step, body: "hello"
    with BenchServer(router) as server:
        body = {"model": "root", "messages": [{"role": "user", "content": "x" * 100}]}
        reply = httpx.post(server.url + "/chat/completions", json=body, timeout=10).json()
    assert reply["choices"][0]["message"]["content"] == "hello"
    (entry,) = router.requests("root")
    assert entry["bytes"] > 100 and entry["step"] == 1 and entry["last_user_chars"] == 100


def test_markdown_sections_are_replaced_not_appended(tmp_path: Path) -> None:
    from rlm_kernel.bench import machine_info

    machine = machine_info()
    assert machine["cpus"] and machine["memory_bytes"]
    path = tmp_path / "BENCHMARKS.md"
    update_markdown(path, "notebook", "## Notebook\nfirst", machine)
    update_markdown(path, "harness", "## Harness\nH", machine)
    update_markdown(path, "notebook", "## Notebook\nsecond", machine)
    text = path.read_text()
    assert text.startswith("# Benchmarks")
    assert "second" in text and "first" not in text and "## Harness\nH" in text
    assert text.count("<!-- bench:notebook -->") == 1
    assert "not measured yet" in text  # the context section is still a placeholder
    assert text.index("bench:harness") < text.index("bench:context") < text.index("bench:notebook")
    assert machine["cpu"] in text


def test_cli_parses_every_benchmark() -> None:
    parser = _parser()
    args = parser.parse_args(["bench", "context", "--sizes", "1MB", "2MB,3MB", "--json"])
    assert args.bench_command == "context" and args.json
    assert [s for group in args.sizes for s in group] == [1_000_000, 2_000_000, 3_000_000]
    args = parser.parse_args(["bench", "harness", "--steps", "2", "--prompts", "8", "--harness", "ours"])
    assert (args.steps, args.prompts, args.harnesses, args.repeats) == (2, 8, ["ours"], 3)
    args = parser.parse_args(["bench", "notebook"])
    assert (args.nb_steps, args.subcalls_per_step) == (200, 50)
    args = parser.parse_args(["bench", "all", "--write-md", "B.md"])
    assert args.write_md == "B.md"
    assert run_bench(parser.parse_args(["bench"])) == 2


# -- the benchmarks at tiny sizes ------------------------------------------------------------


def test_harness_bench_runs_both_harnesses() -> None:
    from rlm_kernel.bench.harness import format_markdown, format_text, rlms_version, run_harness

    assert rlms_version(), "rlms (the bench extra) is not installed: ./dev setup installs it"

    results = run_harness(steps=2, context_chars=1_000_000, prompts=8, latency=0.01, repeats=1)
    assert results["config"]["harnesses"] == ["ours", "rlms"]
    for name in ("ours", "rlms"):
        steps = results["steps"][name]
        # cold + warm (ours also runs a warm run without writing the notebook)
        assert len(steps["runs"]) == (3 if name == "ours" else 2)
        for run in steps["runs"]:
            assert run["answer"] == "done" and run["server_steps"] == 2
            assert run["first_request_bytes"] > 0
        assert steps["server_root_requests"] == 2 * len(steps["runs"])
        assert steps["child"]["maxrss_bytes"] > 0
        batched = results["batched"][name]
        assert [r["ok"] for r in batched["runs"]] == [8]
        assert batched["server_subcalls"] == 8
        assert batched["server_max_in_flight"] > 1  # the batch really ran concurrently
    floor = results["litellm_floor"]  # the same prompts through bare litellm, no RLM
    assert [r["ok"] for r in floor["runs"]] == [8] and floor["server_subcalls"] == 8
    assert floor["server_max_in_flight"] > 1
    ours_run = results["steps"]["ours"]["runs"][0]
    assert ours_run["reason"] == "final" and ours_run["iterations"] == 2 and ours_run["notebook_bytes"] > 0
    summary = results["summary"]
    assert summary["batched"]["ours"]["concurrency"] == 64
    assert summary["batched"]["rlms"]["concurrency"] >= 1
    assert set(summary["memory"]) == {"ours", "rlms"}
    assert {"steps_cold_ms_per_step_ratio", "steps_warm_ms_per_step_ratio", "batched_ours_to_ideal",
            "batched_speedup_vs_rlms", "peak_memory_ratio"} <= set(summary["targets"])
    text = format_text(results)
    assert "ours/rlms" in text and "peak RSS" in text and "bare litellm" in text
    assert summary["targets"]["batched_ours_to_litellm"]["value"] > 0
    assert "## Harness speed" in format_markdown(results)
    json.dumps(results, default=str)


def test_context_bench_at_one_megabyte(tmp_path) -> None:
    from rlm_kernel.bench.context_scale import format_markdown, format_text, run_context

    results = run_context(sizes=[1_000_000], rounds=1, directory=str(tmp_path))
    (item,) = results["sizes"]
    assert item["chars"] == 1_000_000 and item["path_size_bytes"] == 1_000_000
    assert item["plain_read_s"] > 0 and item["load_context_s"] > 0
    assert item["describe_s"] < 1
    assert item["first_request_bytes"] > 1000
    run = item["run"]
    assert run["reason"] == "final" and run["answer"] == "printed"
    # the model saw a bounded view of the print, and the notebook kept a bounded copy
    assert 0 < item["model_view_chars"] < 20_000
    assert 0 < run["stored_output_chars"] <= 250_000
    assert {"load_vs_plain_read", "resident_memory_vs_size", "describe_at_largest",
            "root_request_independent", "print_view_bounded"} <= set(results["summary"]["targets"])
    assert "load_context" in format_text(results) and "## Context scale" in format_markdown(results)
    assert not list(tmp_path.iterdir()), "temp files left behind"


def test_notebook_bench_small_run() -> None:
    from rlm_kernel.bench.notebook_scale import format_markdown, format_text, run_notebook

    results = run_notebook(steps=3, per_step=4, chunk_chars=500)
    run = results["run"]
    assert run["reason"] == "final" and run["iterations"] == 3
    assert run["subcalls"] == 12 and run["subcalls_recorded"] == 12 and run["server_subcalls"] == 12
    assert run["server_root_requests"] == 3
    assert run["notebook_bytes"] > 0 and run["reopen_s"] >= 0 and run["save_s"] > 0
    assert run["example_record"]["prompt_hash"]
    assert results["summary"]["complete"] is True
    assert "notebook_size" in results["summary"]["targets"]
    assert ".ipynb size" in format_text(results) and "## Notebook scale" in format_markdown(results)


def test_run_bench_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "BENCHMARKS.md"
    args = _parser().parse_args([
        "bench", "notebook", "--nb-steps", "2", "--subcalls-per-step", "3", "--chunk-chars", "200",
        "--json", "--quiet", "--write-md", str(md),
    ])
    assert run_bench(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["benchmark"] == "notebook" and payload["run"]["subcalls_recorded"] == 6
    text = md.read_text()
    assert "## Notebook scale" in text and "Measured on:" in text


def test_every_command_prints_its_help() -> None:
    # argparse expands %-formatting in help strings: a stray '%' crashed `rlm-kernel bench --help`.
    from rlm_kernel.cli import _parser as cli_parser

    def walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        found = [parser]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found += walk(sub)
        return found

    parsers = walk(cli_parser())
    assert {p.prog.split()[-1] for p in parsers} >= {"run", "export", "lab", "bench", "harness", "suite", "load"}
    for parser in parsers:
        assert parser.format_help().startswith("usage:"), parser.prog
