"""The harness benchmark's cold starts at one repeat: each start did the
scripted work (a cold CLI run and a cold rlms run answered, an RLM kernel's
%%rlm cells reached the server) and the report has its rows. No timing
assertions: the figures are the benchmark's."""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rlm_kernel.bench import table  # noqa: E402
from rlm_kernel.bench.harness_start import run_starts, start_rows  # noqa: E402


def test_cold_starts_run_ours_rlms_and_a_kernel() -> None:
    results = run_starts(repeats=1, untimed_round=False, typing_s=1.0)
    runs = results["runs"]
    assert runs["litellm"][0]["returncode"] == 0
    for name in ("ours", "rlms"):
        (run,) = runs[name]
        assert run["returncode"] == 0 and run["answer"], run["output"]
        assert 0 < run["first_request_s"] < run["wall_s"]
    for name in ("kernel_at_once", "kernel_after_typing"):
        (run,) = runs[name]
        assert run["status"] == "ok" and 0 < run["ready_s"] < run["first_request_from_start_s"]
    # a cell run while litellm is still being imported waits for it: no "Loading litellm" note either way
    assert not runs["kernel_after_typing"][0]["loading_note"] and not runs["kernel_at_once"][0]["loading_note"]
    summary = results["summary"]
    assert summary["kernel_loading_notes"] == 0
    assert summary["targets"]["cold_cli_over_litellm_import_s"]["value"] is not None
    rows = start_rows(summary)
    assert any("litellm alone" in row[0] for row in rows) and len(rows[1]) == 3
    assert "cold CLI run" in table(rows, ["", "ours", "rlms"])
    json.dumps(results, default=str)
