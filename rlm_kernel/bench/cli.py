"""``rlm-kernel bench harness | context | notebook | load | realistic | sandbox | gateway | documents | all | suite``.

Wire into the main parser with::

    from .bench.cli import add_bench_parser, run_bench
    add_bench_parser(commands)          # commands = parser.add_subparsers(...)
    ...
    if args.command == "bench":
        return run_bench(args)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..engine.runs.options import real_number, whole_number

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_DESCRIPTION = """\
Benchmarks that print figures measured side by side in one invocation:
  harness   our loop against the official rlms library (per-step overhead,
            batched sub-calls, peak memory), one scripted server on 127.0.0.1
  context   loading and describing 10 MB / 100 MB / 1 GB contexts, and a run
            whose code prints the whole context
  notebook  the .ipynb of a 200-step, 10,000-sub-call run: size, save, re-open
  load      10,000 sub-calls at concurrency 64 with 1% injected faults: wall
            time against the ideal, peak memory, every call accounted for
  realistic one script that streams like a real model (10 root steps, 3 batches
            of 100 sub-calls taking 1-3 s) through ours and through rlms: wall
            time against the critical-path ideal
  sandbox   sandboxed runs against unconfined ones: start time and per-step
            overhead, printed as ratios
  gateway   runs whose namespace is a Jupyter gateway's kernel against local
            and sandboxed ones: per-step overhead, printed as ratios
  documents a folder of real PDFs (1,000+ pages), Office files and web pages
            loaded by ours against the chosen converters file by file:
            pages/s, the cached reload, peak memory against the text
  all       harness, context, notebook and load in turn (not realistic)
  suite     long-context suites from real text (sniah, oolong, oolong-pairs,
            multihop, codeqa): score, cost, tokens and time per context length
"""


def _size_list(text: str) -> list[int]:
    from . import parse_size

    try:
        return [parse_size(part) for part in text.replace(",", " ").split()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_positive_int = whole_number(1)
_count = whole_number(0)
_seconds = real_number(0.0, allow_lowest=True)


def _chars(text: str) -> int:
    from . import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    parser.add_argument("--write-md", metavar="PATH",
                        help="also write this benchmark's section of a generated markdown file (e.g. BENCHMARKS.md)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _harness_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("harness")
    group.add_argument("--steps", type=_positive_int, default=30, help="root steps per run (default 30)")
    group.add_argument("--context-chars", type=_chars, default=1_000_000,
                       help="context size for the harness runs (default 1M characters)")
    group.add_argument("--prompts", type=_positive_int, default=256, help="prompts in the batched cell (default 256)")
    group.add_argument("--latency", type=_seconds, default=0.1, help="server seconds per sub-call (default 0.1)")
    group.add_argument("--repeats", type=_count, default=3, help="warm runs after the cold one (default 3)")
    group.add_argument("--harness", action="append", choices=("ours", "rlms"), dest="harnesses",
                       help="run only this harness (repeatable; default both)")
    group.add_argument("--stock-server", action="store_true",
                       help="keep the scripted server's Nagle delay (~40 ms per request) instead of TCP_NODELAY")
    group.add_argument("--no-starts", action="store_true",
                       help="leave out the cold starts (a fresh rlm-kernel run, rlms run and RLM kernel)")


def _context_options(parser: argparse.ArgumentParser) -> None:
    from .context_scale import DEFAULT_SIZES

    group = parser.add_argument_group("context")
    group.add_argument("--sizes", type=_size_list, nargs="+", default=[list(DEFAULT_SIZES)], metavar="SIZE",
                       help="context sizes, e.g. --sizes 10MB 100MB 1GB (or 10MB,1GB; default: 10MB 100MB 1GB)")
    group.add_argument("--tmpdir", help="where to generate the context files (default: the system temp dir)")


def _notebook_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("notebook")
    group.add_argument("--nb-steps", type=_positive_int, default=200, help="root steps (default 200)")
    group.add_argument("--subcalls-per-step", type=_positive_int, default=50,
                       help="llm_query_batched prompts per step (default 50; 200 x 50 = 10,000 sub-calls)")
    group.add_argument("--chunk-chars", type=_positive_int, default=2000,
                       help="context characters per sub-call prompt (default 2000)")


def _rate(text: str) -> float:
    value = real_number(0.0, allow_lowest=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return value


def _load_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("load")
    group.add_argument("--load-subcalls", type=_positive_int, default=10_000, help="sub-calls (default 10000)")
    group.add_argument("--load-concurrency", type=_positive_int, default=64, help="sub-calls in flight (default 64)")
    group.add_argument("--load-steps", type=_positive_int, default=10, help="root steps sharing them (default 10)")
    group.add_argument("--load-latency", type=_seconds, default=0.1, help="server seconds per sub-call (default 0.1)")
    group.add_argument("--fault-rate", type=_rate, default=0.01,
                       help="share of requests answered with an injected fault (default 0.01)")
    group.add_argument("--seed", type=_count, default=7, help="seed of the injected faults (default 7)")


def _realistic_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("realistic")
    group.add_argument("--seed", type=_count, default=7, help="seed of the script (default 7)")
    group.add_argument("--steps", type=_positive_int, default=10, help="root steps (default 10)")
    group.add_argument("--batches", type=_count, default=3,
                       help="steps that send an llm_query_batched (default 3)")
    group.add_argument("--prompts", type=_positive_int, default=100, help="prompts per batch (default 100)")
    group.add_argument("--time-scale", type=real_number(0.0), default=1.0,
                       help="multiply every time of the script (0.1: ten times faster; default 1)")
    group.add_argument("--harness", action="append", choices=("ours", "rlms"), dest="harnesses",
                       help="run only this library (repeatable; default both)")
    group.add_argument("--ours-concurrency", type=_positive_int, metavar="N",
                       help="a diagnosis: run ours with this many sub-calls in flight instead of its default")
    group.add_argument("--no-stream-too", action="store_true",
                       help="also run ours with --no-stream (replies read whole): what streaming costs in CPU")


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench`` (with ``harness``, ``context``, ``notebook``, ``all``)."""
    bench = subparsers.add_parser(
        "bench", help="benchmarks: harness speed vs rlms, context scale, notebook scale",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    harness = kinds.add_parser("harness", help="our loop against the official rlms library",
                               description="Per-step overhead, batched sub-calls and peak memory, side by side.")
    _harness_options(harness)
    _common(harness)
    context = kinds.add_parser("context", help="10 MB / 100 MB / 1 GB contexts",
                               description="Load time, memory, context description and print(context).")
    _context_options(context)
    _common(context)
    notebook = kinds.add_parser("notebook", help="the .ipynb of a 10,000-sub-call run",
                                description="Size, save and re-open time of a long run's notebook.")
    _notebook_options(notebook)
    _common(notebook)
    load = kinds.add_parser("load", help="10,000 sub-calls at concurrency 64 with 1%% injected faults",
                            description="Wall time against the ideal, peak memory and the accounting of every call.")
    _load_options(load)
    _common(load)
    realistic = kinds.add_parser(
        "realistic", help="a script that streams like a real model, through ours and through rlms",
        description="One seeded script (root replies of 300-600 tokens at 40-80 tokens/s after a 0.5-1 s "
                    "time to first token; three batches of 100 sub-calls taking 1-3 s) through ours and through "
                    "rlms, one after the other: wall time against the critical-path ideal.")
    _realistic_options(realistic)
    _common(realistic)
    sandbox = kinds.add_parser("sandbox", help="sandboxed runs against unconfined ones",
                               description="Start time and per-step overhead of a sandboxed run (bubblewrap) "
                                           "against an unconfined one, side by side, as ratios.")
    group = sandbox.add_argument_group("sandbox")
    group.add_argument("--steps", type=_positive_int, default=60, help="root steps of the long run (default 60)")
    group.add_argument("--repeats", type=_positive_int, default=7, help="turns, each a run of each kind (default 7)")
    _common(sandbox)
    gateway = kinds.add_parser("gateway", help="runs in a Jupyter gateway's kernel against local and sandboxed ones",
                               description="Per-step overhead of a run whose namespace is a kernel a Jupyter gateway "
                                           "started, against a local namespace and a sandboxed one, as ratios.")
    group = gateway.add_argument_group("gateway")
    group.add_argument("--steps", type=_positive_int, default=40, help="root steps of the long run (default 40)")
    group.add_argument("--repeats", type=_positive_int, default=5, help="turns, each a run of each kind (default 5)")
    group.add_argument("--gateway-url", help="the gateway to measure (default: an Enterprise Gateway started here "
                                             "from ./dev setup's venv; token from $RLM_GATEWAY_TOKEN)")
    _common(gateway)
    documents = kinds.add_parser("documents", help="a folder of real documents: ours against the converters",
                                 description="Pages per second against the chosen converters run file by file in "
                                             "one process, the cached reload's share of the first load, and peak "
                                             "memory against the corpus's text, as ratios.")
    group = documents.add_argument_group("documents")
    group.add_argument("--repeats", type=_positive_int, default=3, help="turns, each side once (default 3)")
    group.add_argument("--tmpdir", help="where the corpus is written and kept (default: the system temp dir)")
    group.add_argument("--books", type=_positive_int, help="a smaller corpus: the Bible's first N books only")
    group.add_argument("--essays", type=_positive_int, help="a smaller corpus: the first N essays only")
    group.add_argument("--compare", action="store_true",
                       help="instead: the candidate converters of each format side by side (docs/documents.md)")
    _common(documents)
    everything = kinds.add_parser("all", help="harness, context, notebook and load in turn")
    _harness_options(everything)
    _context_options(everything)
    _notebook_options(everything)
    _load_options(everything)
    _common(everything)
    from .suites.cli import add_suite_parser

    add_suite_parser(kinds)
    return bench


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark ``args`` name; print the report (or JSON)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from . import BenchError, quiet, stderr_progress, update_markdown

    command = getattr(args, "bench_command", None)
    if command == "suite":
        from .suites.cli import run_suite_command

        return run_suite_command(args)
    if command not in ("harness", "context", "notebook", "load", "realistic", "sandbox", "gateway", "documents", "all"):
        print("rlm-kernel bench: name a benchmark: harness, context, notebook, load, realistic, sandbox, gateway, documents, "
              "all or suite "
              "(rlm-kernel bench --help).", file=sys.stderr)
        return EXIT_USAGE
    progress = quiet if args.quiet else stderr_progress
    names = ("harness", "context", "notebook", "load") if command == "all" else (command,)
    reports: dict[str, Any] = {}
    try:
        for name in names:
            module, results = _run_one(name, args, progress)
            reports[name] = results
            if args.write_md:
                update_markdown(args.write_md, name, module.format_markdown(results), results["machine"])
            if not args.json:
                print(module.format_text(results), flush=True)
                if len(names) > 1:
                    print(flush=True)
    except BenchError as error:
        print(f"rlm-kernel bench: {error}", file=sys.stderr)
        return EXIT_FAILED
    if args.write_md:
        progress(f"wrote {args.write_md}")
    if args.json:
        payload = reports[names[0]] if len(names) == 1 else reports
        print(json.dumps(payload, default=str, ensure_ascii=False))
    return EXIT_OK


def _run_one(name: str, args: argparse.Namespace, progress: Any) -> tuple[Any, dict[str, Any]]:
    if name == "harness":
        from . import harness as module

        results = module.run_harness(
            steps=args.steps, context_chars=args.context_chars, prompts=args.prompts, latency=args.latency,
            repeats=args.repeats, harnesses=args.harnesses, progress=progress, nodelay=not args.stock_server,
            starts=not args.no_starts,
        )
    elif name == "context":
        from . import context_scale as module

        sizes = [size for group in args.sizes for size in group]
        results = module.run_context(sizes=sizes, directory=args.tmpdir, progress=progress)
    elif name == "realistic":
        from . import realistic as module

        params = module.Params(seed=args.seed, steps=args.steps, batches=args.batches, prompts=args.prompts,
                               time_scale=args.time_scale)
        ours = {"concurrency": args.ours_concurrency} if args.ours_concurrency else None
        results = module.run_realistic(params, harnesses=args.harnesses, ours_options=ours, progress=progress,
                                       no_stream_too=args.no_stream_too)
    elif name == "sandbox":
        from . import sandbox as module

        results = module.run_sandbox(steps=args.steps, repeats=args.repeats, progress=progress)
    elif name == "gateway":
        from . import gateway as module

        results = module.run_gateway(steps=args.steps, repeats=args.repeats, url=args.gateway_url, progress=progress)
    elif name == "documents":
        from . import documents as module

        if args.compare:
            return _compare_converters(args, progress)
        results = module.run_documents(repeats=args.repeats, where=args.tmpdir, progress=progress, books=args.books,
                                       essays=args.essays)
    elif name == "load":
        from . import load as module

        results = module.run_load(
            subcalls=args.load_subcalls, concurrency=args.load_concurrency, steps=args.load_steps,
            latency=args.load_latency, fault_rate=args.fault_rate, seed=args.seed, progress=progress,
        )
    else:
        from . import notebook_scale as module

        results = module.run_notebook(
            steps=args.nb_steps, per_step=args.subcalls_per_step, chunk_chars=args.chunk_chars, progress=progress,
        )
    return module, results


def _compare_converters(args: argparse.Namespace, progress: Any) -> tuple[Any, dict[str, Any]]:
    """``bench documents --compare``: a table of its own, printed as markdown."""
    from . import documents, documents_compare

    folder, _ = documents.corpus_folder(args.tmpdir, progress)
    rows = documents_compare.compare(folder, documents_compare.corpus_sources(), progress)

    class Report:
        @staticmethod
        def format_text(results: dict[str, Any]) -> str:
            return documents_compare.format_markdown(results["rows"])

        format_markdown = format_text

    from .report import machine_info

    return Report, {"rows": rows, "machine": machine_info()}


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -c 'from rlm_kernel.bench.cli import main; main()'``)
    until ``rlm-kernel bench`` is wired into the main command line."""
    parser = argparse.ArgumentParser(prog="rlm-kernel")
    add_bench_parser(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command != "bench":
        parser.print_help()
        return EXIT_USAGE
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
