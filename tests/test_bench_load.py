"""``rlm-kernel bench load`` at a tiny size: the run really went through the
faulty server, every sub-call is accounted for, and the report and the
BENCHMARKS.md section are written. No timing assertions."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rlm_kernel.bench.cli import add_bench_parser, run_bench  # noqa: E402
from rlm_kernel.bench.load import format_markdown, format_text, run_load  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlm-kernel")
    add_bench_parser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_parses_the_load_benchmark() -> None:
    args = _parser().parse_args(["bench", "load"])
    assert (args.load_subcalls, args.load_concurrency, args.fault_rate, args.load_steps) == (10_000, 64, 0.01, 10)
    args = _parser().parse_args(["bench", "all", "--load-subcalls", "500", "--fault-rate", "0.2"])
    assert (args.load_subcalls, args.fault_rate, args.nb_steps) == (500, 0.2, 200)
    for bad in ("1.5", "-0.1", "lots"):
        with pytest.raises(SystemExit):
            _parser().parse_args(["bench", "load", "--fault-rate", bad])


def test_load_bench_small_run() -> None:
    results = run_load(subcalls=240, concurrency=16, fault_rate=0.1, latency=0.01, steps=3, seed=3)
    run, summary = results["run"], results["summary"]
    assert run["reason"] == "final" and run["iterations"] == 3
    assert run["records"] == run["subcalls"] == 240 == run["done"] + run["failed"]
    assert sum(run["server"]["faults"].values()) > 10, "no faults were injected"
    assert run["retried"] > 0
    assert run["server"]["answered"]["calls"] == run["ledger"]["calls"] == run["done"]
    assert run["server"]["max_in_flight"] <= 16
    assert summary["all_accounted"] is True, summary["checks"]
    assert summary["peak_rss_bytes"] > 0 and summary["wall_to_ideal"] > 0
    assert "wall / ideal" in format_text(results) and "## Load" in format_markdown(results)
    json.dumps(results, default=str)


def test_run_bench_load_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "BENCHMARKS.md"
    args = _parser().parse_args([
        "bench", "load", "--load-subcalls", "60", "--load-concurrency", "8", "--load-steps", "2",
        "--load-latency", "0", "--fault-rate", "0.05", "--json", "--quiet", "--write-md", str(md),
    ])
    assert run_bench(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["benchmark"] == "load" and payload["run"]["records"] == 60
    assert payload["summary"]["wall_to_ideal"] is None  # no latency: no ideal to compare with
    text = md.read_text()
    assert "## Load" in text and "<!-- bench:load -->" in text and "Measured on:" in text
    assert text.index("bench:notebook") < text.index("bench:load")
