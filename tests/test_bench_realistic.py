"""``rlm-kernel bench realistic`` at a tiny size: the script is what its
parameters say (seeded, in range, valid for both libraries), both libraries
run it to the right answer, and every number of the report follows from the
script and the server's log. No timed assertions."""

from __future__ import annotations

import argparse
import json
import math
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rlm_kernel.bench import BenchError  # noqa: E402
from rlm_kernel.bench.cli import add_bench_parser, run_bench  # noqa: E402
from rlm_kernel.bench.realistic_script import Params, make_script  # noqa: E402
from rlm_kernel.testing.server import tokens  # noqa: E402

TINY = Params(seed=3, steps=3, batches=1, prompts=6, tokens=(150, 190), time_scale=0.02)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlm-kernel")
    add_bench_parser(parser.add_subparsers(dest="command"))
    return parser


def test_the_script_keeps_its_parameters_and_its_seed() -> None:
    params = Params()
    script = make_script(params)
    assert script == make_script(Params()), "the same parameters make the same script"
    assert make_script(Params(seed=8)).steps != script.steps
    assert len(script.steps) == 10
    batch_steps = [s.step for s in script.steps if s.batch is not None]
    assert len(batch_steps) == 3 and 1 not in batch_steps and 10 not in batch_steps
    for plan in script.steps:
        assert 300 <= plan.tokens <= 600 and plan.tokens == len(tokens(plan.text))
        assert 40 <= plan.tokens_per_s <= 80 and 0.5 <= plan.ttft_s <= 1.0
        # prose, then exactly one repl block that ends the reply (both libraries' fence rules)
        assert plan.text.count("```repl\n") == 1 and plan.text.endswith("\n```")
        assert ("llm_query_batched(prompts)" in plan.text) == (plan.batch is not None)
    last = script.steps[-1].text
    assert 'answer["ready"] = True' in last and "counts_1" in last and "counts_3" in last
    assert all(len(v) == 100 and all(1 <= s <= 3 for s in v) for v in script.latencies.values())
    # the ideal, computed here from the replies themselves
    root = sum(p.ttft_s + len(tokens(p.text)) / p.tokens_per_s for p in script.steps)
    slowest = sum(max(v) for v in script.latencies.values())
    assert math.isclose(script.ideal()["ideal_s"], root + slowest)
    assert math.isclose(script.ideal()["root_total_s"], root)


def test_the_least_a_batch_takes_at_a_concurrency() -> None:
    script = make_script(TINY)
    script.latencies[1] = [3.0, 1.0, 1.0, 2.0, 1.0, 1.0]
    assert script.batch_bound(1, 6) == 3.0
    assert script.batch_bound(1, 1) == 9.0
    assert script.batch_bound(1, 2) == 5.0  # slots: 3 then 1 (ends 4) | 1, 1, 2 (ends 4), then the last 1 ends at 5
    assert script.batch_bound(1, 3) == 3.0


def test_a_sub_call_gets_the_same_latency_for_the_same_prompt() -> None:
    script = make_script(TINY)
    prompt = "[batch 1 part 4] How many place names does this part mention?\n\nsome text"
    first, again = script.sub_reply(prompt), script.sub_reply(prompt)
    assert first.delay == again.delay == script.latencies[1][4]
    assert first.text == f"count: {script.counts[1][4]}"
    assert script.sub_reply("something else").text.startswith("not a prompt of this script")
    assert math.isclose(make_script(Params(**{**TINY.__dict__, "time_scale": 1.0})).latencies[1][4],
                        script.latencies[1][4] / 0.02)


@pytest.mark.parametrize("changes, says", [
    ({"steps": 4, "batches": 3}, "need at least 5 steps"),
    ({"tokens": (600, 300)}, "low to high"),
    ({"tokens": (50, 80)}, "at least 150 tokens"),
])
def test_impossible_parameters_are_refused(changes: dict, says: str) -> None:
    with pytest.raises(BenchError, match=says):
        make_script(Params(**changes))


def test_both_libraries_run_the_script_to_its_answer() -> None:
    from rlm_kernel.bench.realistic import format_markdown, format_text, run_realistic

    results = run_realistic(TINY, no_stream_too=True)
    script = make_script(TINY)
    ideal = script.ideal()["ideal_s"]
    assert math.isclose(results["script"]["ideal"]["ideal_s"], ideal)
    assert results["config"]["harnesses"] == ["ours", "rlms"]
    walls = {}
    for name, streamed in (("ours", 3), ("rlms", 0)):
        child = results["runs"][name]
        seen = child["server"]
        assert child["run"]["answer"] == script.expected_answer
        assert seen["root_requests"] == 3 and seen["streamed"] == streamed
        assert seen["subcalls"] == 6 and seen["unknown_prompts"] == 0 and seen["other_requests"] == 0
        assert seen["max_subcalls_in_flight"] > 1  # the batch ran concurrently
        # the timeline adds up to the wall time: start + the replies' writing + every gap after a reply
        total = seen["start_s"] + sum(s["generation_s"] + s["gap_s"] for s in seen["steps"])
        assert math.isclose(total, child["wall_s"], abs_tol=1e-6)
        assert [s["step"] for s in seen["steps"]] == [1, 2, 3]
        (batch,) = seen["batches"].values()
        assert batch["subcalls"] == 6 and batch["step"] == 2
        assert math.isclose(batch["slowest_s"], max(script.latencies[1]))
        # 6 prompts: both libraries' concurrency holds the whole batch, so the least it allows is its slowest call
        assert math.isclose(batch["bound_s"], batch["slowest_s"])
        own = results["summary"]["runs"][name]["own_ideal_s"]
        assert math.isclose(own, ideal)
        assert math.isclose(results["summary"]["runs"][name]["to_ideal"], child["wall_s"] / ideal)
        walls[name] = child["wall_s"]
    assert results["runs"]["ours"]["run"]["reason"] == "final"
    assert results["runs"]["ours"]["concurrency"] == 64 and results["runs"]["rlms"]["concurrency"] == 16
    targets = results["summary"]["targets"]
    assert math.isclose(targets["rlms_to_ours"]["value"], walls["rlms"] / walls["ours"])
    assert targets["ours_to_ideal"]["met"] == (walls["ours"] / ideal <= 1.1)
    cpu = {name: results["runs"][name]["cpu_s"] for name in ("ours", "rlms")}
    assert math.isclose(targets["cpu_ours_to_rlms"]["value"], cpu["ours"] / cpu["rlms"])
    # ours again with --no-stream: the same script to its answer, its replies read whole
    whole = results["no_stream"]
    assert whole["run"]["answer"] == script.expected_answer and whole["server"]["streamed"] == 0
    assert results["summary"]["no_stream"]["cpu_s"] == whole["cpu_s"] > 0
    text = format_text(results)
    assert "ours with --no-stream" in text and "what streaming costs" in text and "ours / rlms" in text
    assert "Script (fixed before measuring):" in text and "seed 3; 3 root steps" in text
    assert "rlms / ours" in text and "critical-path ideal" in text
    assert "## Realistic run" in format_markdown(results)
    json.dumps(results, default=str)


def test_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    args = parser.parse_args(["bench", "realistic", "--seed", "3", "--steps", "4", "--batches", "1",
                              "--time-scale", "0.5", "--harness", "ours"])
    assert (args.seed, args.steps, args.batches, args.prompts, args.time_scale) == (3, 4, 1, 100, 0.5)
    assert args.harnesses == ["ours"] and args.ours_concurrency is None
    bad = parser.parse_args(["bench", "realistic", "--steps", "2", "--batches", "3", "--quiet"])
    assert run_bench(bad) == 1
    assert "3 batches need at least 5 steps" in capsys.readouterr().err
