"""Benchmarks: harness speed against the official ``rlms`` library, context
scale and notebook scale (``rlm-kernel bench ...``).

This module holds what the three benchmarks share: a scripted server tuned
for timing, running a measurement in a child process (so each one has its
own peak memory), reading memory figures from /proc, generating text, the
machine description and the generated BENCHMARKS.md sections. It imports
nothing heavy: litellm, IPython and rlms are only imported in the children.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..testing.server import Reply, ScriptedServer, prompt_text

Progress = Callable[[str], None]

MB = 1_000_000
GB = 1_000_000_000


class BenchError(RuntimeError):
    """A benchmark could not run (a child crashed, a harness is missing)."""


def stderr_progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def quiet(_message: str) -> None:
    pass


# -- the scripted server, tuned for timing ---------------------------------------


def _bench_handler_class(nodelay: bool) -> type:
    from ..testing import server as server_module

    base = server_module._Handler

    class _BenchHandler(base):  # type: ignore[misc, valid-type]
        # The stock handler answers with two writes (headers, then body); with
        # Nagle's algorithm on, the body waits for the client's delayed ACK,
        # which adds ~40 ms to every request. "Replies instantly" means no such
        # wait, so the benchmarks switch Nagle off (TCP_NODELAY) unless asked
        # to reproduce the stock server.
        disable_nagle_algorithm = nodelay

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            _request_local.length = int(self.headers.get("Content-Length") or 0)
            try:
                super().do_POST()
            finally:
                _request_local.length = None

    return _BenchHandler


_request_local = threading.local()


class BenchServer(ScriptedServer):
    """The project's scripted OpenAI-compatible server with TCP_NODELAY (unless
    ``nodelay=False``) and the wire size of each request body available to
    the responder."""

    def __init__(self, responder: Any = None, latency: float = 0.0, *, nodelay: bool = True) -> None:
        super().__init__(responder, latency)
        self.nodelay = nodelay
        httpd = getattr(self, "_httpd", None)
        if httpd is not None:
            httpd.RequestHandlerClass = _bench_handler_class(nodelay)


def request_length() -> int | None:
    """Content-Length of the request being answered (call from a responder)."""
    return getattr(_request_local, "length", None)


def root_step(body: dict[str, Any]) -> int:
    """Which root step a request is: 1 + the assistant turns it carries.
    Both harnesses send [system, user, (assistant, user)*] so this holds for
    either, and it keeps the responder stateless across repeated runs."""
    return 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def last_user_text(body: dict[str, Any]) -> str:
    return prompt_text(body)


class Router:
    """A stateless responder: root models map to ``fn(step, body) -> str``,
    sub-models to ``fn(prompt) -> Reply | str``. Every root request is logged
    with its arrival time (CLOCK_MONOTONIC, shared with the children), step
    and wire size."""

    def __init__(self) -> None:
        self.roots: dict[str, Callable[[int, dict[str, Any]], Any]] = {}
        self.subs: dict[str, Callable[[str], Any]] = {}
        self.log: list[dict[str, Any]] = []
        self.sub_counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        model = body.get("model", "")
        now = time.monotonic()
        if model in self.roots:
            step = root_step(body)
            entry = {
                "t": now, "model": model, "step": step, "bytes": request_length(),
                "last_user_chars": len(last_user_text(body)), "messages": len(body.get("messages", [])),
            }
            with self._lock:
                self.log.append(entry)
            return self.roots[model](step, body)
        if model in self.subs:
            with self._lock:
                self.sub_counts[model] = self.sub_counts.get(model, 0) + 1
            return self.subs[model](prompt_text(body))
        return Reply(text=f"unknown model {model!r}", status=404)

    def requests(self, model: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self.log if e["model"] == model]


def split_runs(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group one model's root requests into runs (a run starts at step 1)."""
    runs: list[list[dict[str, Any]]] = []
    for entry in sorted(entries, key=lambda e: e["t"]):
        if entry["step"] == 1 or not runs:
            runs.append([])
        runs[-1].append(entry)
    return runs


def step_gaps_ms(run: list[dict[str, Any]]) -> list[float]:
    """Time between consecutive root requests of one run: the harness's own
    work per step (parse, execute, feedback, bookkeeping) plus the server's
    ~1 ms, with no model time in it."""
    return [(b["t"] - a["t"]) * 1000 for a, b in zip(run, run[1:], strict=False)]


# -- child processes ------------------------------------------------------------

_CHILD_BOOT = "import sys; from rlm_kernel.bench import _child_entry; _child_entry(sys.argv[1])"


def run_child(target: str, config: dict[str, Any], *, timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``target`` ("module:function", called with ``config``) in a fresh
    interpreter and return its JSON result, plus the child's own peak RSS and
    CPU time from wait4(). The child's stderr goes to ours (progress)."""
    with tempfile.TemporaryDirectory(prefix="rlm-bench-child-") as tmp:
        cfg_path = Path(tmp, "config.json")
        out_path = Path(tmp, "result.json")
        cfg_path.write_text(json.dumps({"target": target, "config": config, "result": str(out_path)}))
        env = dict(os.environ)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        with open(Path(tmp, "stdout.txt"), "w+", encoding="utf-8", errors="replace") as stdout:
            started = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_BOOT, str(cfg_path)], stdout=stdout, stderr=None,
                stdin=subprocess.DEVNULL, cwd=tmp, env=env,
            )
            timer = threading.Timer(timeout, proc.kill)
            timer.daemon = True
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            elapsed = time.monotonic() - started
            stdout.seek(0)
            output = stdout.read()
        result: dict[str, Any] | None = None
        if out_path.exists():
            result = json.loads(out_path.read_text())
    if result is None or "error" in result:
        detail = (result or {}).get("error") or output[-3000:] or f"exit code {proc.returncode}"
        if proc.returncode and proc.returncode < 0:
            detail += f"\n(killed by signal {-proc.returncode}; timeout {timeout:g} s)"
        raise BenchError(f"benchmark child {target} failed:\n{detail}")
    result["child"] = {
        "maxrss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "wall_s": round(elapsed, 3),
        "exit_code": proc.returncode,
    }
    return result


def _child_entry(config_path: str) -> None:
    spec = json.loads(Path(config_path).read_text())
    out = Path(spec["result"])
    try:
        module_name, func_name = spec["target"].split(":")
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(spec["config"])
    except BaseException:  # noqa: BLE001 - reported to the parent
        out.write_text(json.dumps({"error": traceback.format_exc()}))
        raise SystemExit(1) from None
    out.write_text(json.dumps(result, default=str))


# -- memory (Linux /proc; no psutil needed) ----------------------------------------


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """Resident memory of this process now."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def hwm_bytes() -> int | None:
    """Peak resident memory since start or the last :func:`reset_peak`."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so a phase's own peak
    can be read; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mem_available_bytes() -> int | None:
    from ..engine.context import available_memory

    return available_memory()


# -- text -----------------------------------------------------------------------

_WORDS = (
    "the of and to in is was for that on with as by at from his her they this which be are were had "
    "not but have one all their there been has when who will more no if out so said what up its about "
    "into than them can only other new some time could these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three river garden letter "
    "harbour winter engine market silver orchard lantern meadow quarrel ledger voyage cabinet"
).split()

_BLOCK = 1 << 20  # generation block: 1 MiB


def _text_block(seed: int, size: int = _BLOCK) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    line = 0
    while total < size:
        words = rng.choices(_WORDS, k=rng.randint(8, 18))
        sentence = " ".join(words).capitalize() + (".\n" if line % 7 == 6 else ". ")
        parts.append(sentence)
        total += len(sentence)
        line += 1
    return "".join(parts)[:size]


def make_text(chars: int, seed: int = 0) -> str:
    """Deterministic ASCII prose of exactly ``chars`` characters."""
    block = _text_block(seed)
    if chars <= len(block):
        return block[:chars]
    pieces = []
    made = 0
    i = 0
    while made < chars:
        shift = (i * 7919) % len(block)
        piece = block[shift:] + block[:shift]
        take = min(len(piece), chars - made)
        pieces.append(piece[:take])
        made += take
        i += 1
    return "".join(pieces)


def write_text_file(path: str | os.PathLike[str], size: int, seed: int = 0,
                    progress: Progress | None = None) -> float:
    """Write ``size`` bytes of ASCII prose (1 MiB blocks, rotated so no two
    neighbouring blocks are equal); returns the seconds it took."""
    started = time.monotonic()
    block = _text_block(seed).encode("ascii")
    written = 0
    i = 0
    last_report = started
    with open(path, "wb", buffering=0) as handle:
        while written < size:
            shift = (i * 7919) % len(block)
            take = min(len(block), size - written)
            chunk = (block[shift:] + block[:shift])[:take]
            handle.write(chunk)
            written += take
            i += 1
            if progress and time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                progress(f"  writing {path}: {written / size:.0%}")
    return time.monotonic() - started


# -- sizes and formatting ----------------------------------------------------------

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
    from .. import __version__

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

SECTIONS = ("harness", "context", "notebook", "load", "live")
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


__all__ = [
    "BenchError", "BenchServer", "Router", "run_child", "machine_info", "machine_text", "parse_size",
    "size_label", "make_text", "write_text_file", "update_markdown", "rss_bytes", "hwm_bytes", "reset_peak",
]
