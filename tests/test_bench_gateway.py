"""``rlm-kernel bench gateway`` in a quick mode, against the Enterprise Gateway
it starts from ./dev setup's venv: it runs every kind and prints every figure
side by side (never a timed assertion: the figures are the benchmark's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _helpers import clean_env, require_bubblewrap

from rlm_kernel.bench.gateway import GATEWAY

STEPS = 5  # timed within the run, from its first code cell's end to its last one's: no start in it


def test_the_gateway_bench_prints_every_figure_side_by_side(tmp_path: Path) -> None:
    import subprocess

    require_bubblewrap()
    if not GATEWAY.exists():
        pytest.fail("Jupyter Enterprise Gateway is not installed: ./dev setup installs it.")
    cli = str(Path(sys.executable).with_name("rlm-kernel"))
    md = tmp_path / "BENCHMARKS.md"
    run = subprocess.run([cli, "bench", "gateway", "--steps", str(STEPS), "--repeats", "1", "--write-md", str(md)],
                         capture_output=True, text=True, env=clean_env(), timeout=400, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert all(kind in lines[1] for kind in ("local", "sandboxed", "gateway / local", "gateway / sandboxed"))
    rows = {line.split("  ")[0]: line for line in lines[3:]}
    assert set(rows) == {"per step (one llm_query)", "run of 1 step (kernel start included)", f"run of {STEPS} steps"}
    for row in rows.values():
        assert row.count(" ms") == 3 and "n/a" not in row
    assert "the sandbox's: " in rows["per step (one llm_query)"]
    assert "## Gateway runs" in md.read_text()
