"""Benchmarks: harness speed against the official ``rlms`` library, context
scale, notebook scale and load (``rlm-kernel bench ...``).

What the benchmarks share is in small modules beside this one: ``common``
(progress, sizes, the error), ``servers`` (a scripted server tuned for
timing), ``children`` (a measurement in a child process), ``memory`` (/proc
figures), ``filler`` (generated text) and ``report`` (figures, tables, the
machine, BENCHMARKS.md); this module names them in one place. Nothing here
imports anything heavy: litellm, IPython and rlms are only imported in the
children.
"""

from __future__ import annotations

from .children import run_child
from .common import GB, MB, BenchError, Progress, quiet, stderr_progress
from .filler import make_text, write_text_file
from .memory import hwm_bytes, maxrss_bytes, mem_available_bytes, reset_peak, rss_bytes
from .report import (
    SECTIONS,
    fmt_ratio,
    machine_info,
    machine_text,
    md_table,
    median,
    mib,
    parse_size,
    size_label,
    table,
    update_markdown,
    verdict,
)
from .servers import (
    BenchServer,
    Router,
    last_user_text,
    request_length,
    root_step,
    split_runs,
    step_gaps_ms,
)

__all__ = ["GB", "MB", "SECTIONS", "BenchError", "BenchServer", "Progress", "Router", "fmt_ratio", "hwm_bytes",
           "last_user_text", "machine_info", "machine_text", "make_text", "maxrss_bytes", "md_table", "median",
           "mem_available_bytes", "mib", "parse_size", "quiet", "request_length", "reset_peak", "root_step",
           "rss_bytes", "run_child", "size_label", "split_runs", "stderr_progress", "step_gaps_ms", "table",
           "update_markdown", "verdict", "write_text_file"]
