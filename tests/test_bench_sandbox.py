"""``rlm-kernel bench sandbox`` in a quick mode: it runs both kinds and prints
every figure (never a timed assertion: the figures are the benchmark's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import clean_env, require_bubblewrap

# The per-step time is a run of STEPS steps less a run of one, over STEPS - 1. A step takes ~20 ms, and a busy
# machine moves a run's own time by more than that: with 2 and then 5 steps the difference came out negative in
# CI and the ratio n/a. With 30 it is ~0.6 s.
STEPS = 30


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()


def test_the_sandbox_bench_prints_every_figure_side_by_side(tmp_path):
    cli = str(Path(sys.executable).with_name("rlm-kernel"))
    md = tmp_path / "BENCHMARKS.md"
    run = subprocess.run([cli, "bench", "sandbox", "--steps", str(STEPS), "--repeats", "1", "--write-md", str(md)],
                         capture_output=True, text=True, env=clean_env(), timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "unconfined" in lines[1] and "sandboxed" in lines[1] and "sandboxed / unconfined" in lines[1]
    rows = {line.split("  ")[0]: line for line in lines[3:]}
    assert set(rows) == {"start (first cell run)", "per step (one llm_query)", "run of 1 step", f"run of {STEPS} steps"}
    for row in rows.values():
        assert row.count(" ms") >= 2 and "n/a" not in row
    assert " ms extra: " in rows["start (first cell run)"] and "x  " in rows["per step (one llm_query)"] + "  "
    assert "## Sandboxed runs" in md.read_text()
    data = json.loads(subprocess.run([cli, "bench", "sandbox", "--steps", str(STEPS), "--repeats", "1", "--json",
                                      "--quiet"], capture_output=True, text=True, env=clean_env(), timeout=300,
                                     cwd=tmp_path).stdout)
    summary = data["summary"]
    # figures only, never a timed assertion (see STEPS)
    assert isinstance(summary["per_step_ratio"], float) and isinstance(summary["extra_start_s"], float)
    assert set(summary["targets"]) == {"per_step", "extra_start"}
