"""``rlm-kernel bench documents`` on a small corpus: both sides run in fresh
processes over the same real files, every figure is there, the reload came
from the cache, and the report prints as text and as BENCHMARKS.md's section."""

from __future__ import annotations

from rlm_kernel.bench.documents import format_markdown, format_text, run_documents


def test_the_documents_benchmark_measures_both_sides(tmp_path):
    results = run_documents(repeats=1, where=str(tmp_path), books=3, essays=2)
    corpus, ours, summary = results["corpus"], results["ours"], results["summary"]
    assert corpus["pdfs"] == 5 and corpus["other_files"] == 2 * 3 + 2 and results["pages"] > 10
    assert results["peer"]["seconds"] > 0 and ours["first_s"] > 0 and 0 < ours["reload_s"]
    assert ours["text_bytes"] > 100_000 and ours["peak_growth_bytes"] > 0
    assert set(summary["targets"]) == {"speed", "reload", "memory"}
    text, markdown = format_text(results), format_markdown(results)
    assert "pages per second" in text and "cached reload" in text and "peak memory" in text
    assert markdown.startswith("## Loading documents\n\n`rlm-kernel bench documents`") and "| ours |" in markdown


def test_the_command_writes_its_section(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    cli = str(Path(sys.executable).with_name("rlm-kernel"))
    md = tmp_path / "BENCHMARKS.md"
    args = [cli, "bench", "documents", "--repeats", "1", "--books", "2", "--essays", "1", "--tmpdir", str(tmp_path)]
    done = subprocess.run([*args, "--write-md", str(md), "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "pages per second" in done.stdout and "<!-- bench:documents -->" in md.read_text()
    data = json.loads(subprocess.run([*args, "--json", "--quiet"], capture_output=True, text=True,
                                     timeout=600).stdout)
    assert data["benchmark"] == "documents" and data["corpus"]["pdfs"] == 3
