"""Sizes, figures and tables as the benchmarks print them, the machine they
ran on, and the generated sections of BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .common import GB, MB

_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "M": MB, "MB": MB, "G": GB, "GB": GB,
          "KIB": 1024, "MIB": 1 << 20, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """'10MB' -> 10_000_000 (decimal units; KiB/MiB/GiB are binary)."""
    cleaned = text.strip().upper().replace("_", "").replace(" ", "")
    number = cleaned.rstrip("KMGIB")
    unit = cleaned[len(number):]
    try:
        if unit not in _UNITS:
            raise ValueError
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 10MB, 1GB, 500000)") from None
    if value < 1:
        raise ValueError(f"size must be positive: {text!r}")
    return int(value)


def size_label(size: int) -> str:
    for unit, factor in (("GB", GB), ("MB", MB), ("KB", 1000)):
        if size >= factor and size % (factor // 10 or 1) == 0:
            value = size / factor
            return f"{value:g} {unit}"
    return f"{size:,} B"


def mib(value: float | int | None) -> str:
    return "n/a" if value is None else f"{value / (1 << 20):,.0f} MiB"


def median(values: Iterable[float]) -> float | None:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else None


def fmt_ratio(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}x"


def verdict(ok: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "n/a"}[ok]


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain-text table (monospace)."""
    cols = [header, *rows]
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
                               for i, (c, w) in enumerate(zip(r, widths, strict=False)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def md_table(rows: list[list[str]], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    def cell(value: Any) -> str:
        text = str(value)
        stripped = text.lstrip(" ")
        return "&nbsp;&nbsp;" * ((len(text) - len(stripped)) // 2) + stripped  # keep the indent of sub-rows

    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# -- the machine ------------------------------------------------------------------


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """What the figures were measured on, from /proc and the standard library."""
    cpu_model = None
    cpu_mhz = None
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and cpu_model is None:
                    cpu_model = value.strip()
                elif key == "cpu MHz" and cpu_mhz is None:
                    cpu_mhz = value.strip()
    except OSError:
        pass
    mem_total = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        load = tuple(round(x, 2) for x in os.getloadavg())
    except OSError:
        load = None
    from .._version import __version__

    packages = {name: _package_version(name) for name in
                ("litellm", "rlms", "openai", "httpx", "ipython", "ipykernel", "nbformat")}
    return {
        "cpu": cpu_model or platform.processor() or platform.machine(),
        "cpu_mhz": cpu_mhz,
        "cpus": os.cpu_count(),
        "memory_bytes": mem_total,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load_average": load,
        "rlm_kernel": __version__,
        "packages": packages,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def machine_text(info: dict[str, Any]) -> str:
    mem = info.get("memory_bytes")
    pkgs = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v)
    load = info.get("load_average")
    return (
        f"{info['cpu']} ({info['cpus']} CPUs), {mem / GB:.1f} GB RAM, {info['os']}, {info['python']}; "
        f"rlm-kernel {info['rlm_kernel']}; {pkgs}; load average at start {load}; {info['date']}"
        if mem else f"{info['cpu']} ({info['cpus']} CPUs), {info['os']}, {info['python']}; {info['date']}"
    )


# -- BENCHMARKS.md ------------------------------------------------------------------

SECTIONS = ("harness", "context", "notebook", "load", "realistic", "live")
# The command that writes each section (the live one needs the UI test harness).
# Other sections (one per long-context suite run, "suite-<name>") are added
# at the end when first written.
_WRITERS = {"live": ".venv/bin/python tests/ui/bench_live_speed.py --write-md BENCHMARKS.md"}

_MD_HEAD = """\
# Benchmarks

Generated by `rlm-kernel bench ... --write-md BENCHMARKS.md` (the live
notebook's section by `tests/ui/bench_live_speed.py --write-md BENCHMARKS.md`);
do not edit by hand (each run replaces its own section). Ratios are measured side by side in
one invocation; absolute numbers depend on the machine and on its load.
"""


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def update_markdown(path: str | os.PathLike[str], section: str, body: str, machine: dict[str, Any]) -> None:
    """Replace one section of the generated markdown file (creating the file
    with all sections in a fixed order if needed)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if not text.startswith("# Benchmarks"):
        text = _MD_HEAD
    for name in SECTIONS:
        start, end = _markers(name)
        if start not in text:
            writer = _WRITERS.get(name, f"rlm-kernel bench {name} --write-md BENCHMARKS.md")
            text = text.rstrip("\n") + f"\n\n{start}\n*(not measured yet: `{writer}`)*\n{end}\n"
    start, end = _markers(section)
    if start not in text:
        text = text.rstrip("\n") + f"\n\n{start}\n{end}\n"
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    stamp = f"*Measured on: {machine_text(machine)}.*"
    text = f"{before}{start}\n{body.strip()}\n\n{stamp}\n{end}{after}"
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
