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
