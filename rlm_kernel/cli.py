"""``rlm-kernel``: run an RLM headless (more commands come as subcommands)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .errors import RLMError, redact
from .options import add_run_options, new_parser, rlm_kwargs

EXIT_OK, EXIT_NO_ANSWER, EXIT_USAGE = 0, 1, 2


def _parser() -> Any:
    parser = new_parser("rlm-kernel", "Recursive Language Models in Jupyter notebooks.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run", help="run an RLM headless and write its trajectory notebook",
        description="Run an RLM on files and write the trajectory as a notebook.",
    )
    run.add_argument("--context", action="append", default=[], metavar="PATH",
                     help="file, directory or glob to load as `context` (repeatable)")
    run.add_argument("--encoding", default="utf-8", help="text encoding of the context files (default utf-8)")
    run.add_argument("--query", help="the question about the context")
    run.add_argument("--query-file", help="read the question from this file")
    add_run_options(run)
    run.add_argument("-o", "--output", help="trajectory notebook to write (default: rlm-run-<time>.ipynb)")
    run.add_argument("--json", action="store_true", help="print one JSON object with the result")
    run.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(argv)
        if args.command == "run":
            return _run(args)
        _parser().print_help()
        return EXIT_USAGE
    except RLMError as error:
        print(f"rlm-kernel: error: {redact(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rlm-kernel: interrupted", file=sys.stderr)
        return 130


def _run(args: Any) -> int:
    from .api import RLM
    from .engine.context import load_context
    from .sinks.console import ConsoleSink

    query = args.query
    if args.query_file:
        try:
            with open(args.query_file, encoding="utf-8") as handle:
                query = handle.read()
        except OSError as error:
            raise RLMError(f"Cannot read the query file {args.query_file!r}: {error.strerror}.") from None
    if not query or not query.strip():
        raise RLMError("Give the question with --query TEXT (or --query-file PATH).")
    if not args.context:
        raise RLMError("Give the input with --context PATH (a file, a directory or a glob; repeatable).")
    rlm = RLM(**rlm_kwargs(args))
    loaded = load_context(args.context, encoding=args.encoding)
    output = args.output or f"rlm-run-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
    sink = None if args.quiet else ConsoleSink(sys.stderr)
    result = rlm.completion(loaded.value, query, output=output, sources=loaded.sources, sink=sink)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    elif result.reason == "final":
        print(result.answer_text)
    else:
        print(f"rlm-kernel: the run ended without an answer (reason: {result.reason})"
              + (f": {result.error}" if result.error else ""), file=sys.stderr)
    return EXIT_OK if result.reason == "final" else EXIT_NO_ANSWER


if __name__ == "__main__":
    sys.exit(main())
