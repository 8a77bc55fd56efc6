"""``rlm-kernel``: run an RLM headless, serve it, run many (more commands come as subcommands)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ._deferred_grammar import defer_iri_grammar
from ._words import plural
from .engine.runs import options
from .engine.runs.options import new_parser
from .errors import RLMError
from .redaction import redact

EXIT_OK, EXIT_NO_ANSWER, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
RUN_EXIT_CODES = ("exit status: 0 when the run ended with a final answer, 1 when it ended without one, "
                  "2 for a usage error (an option, path, model or key), 130 when Ctrl-C interrupted it.")


def _parser() -> Any:
    parser = new_parser("rlm-kernel", "Recursive Language Models in Jupyter notebooks.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run", help="run an RLM headless and write its trajectory notebook",
        description="Run an RLM on files and write the trajectory as a notebook.", epilog=RUN_EXIT_CODES,
    )
    run.add_argument("--context", action="append", default=[], metavar="PATH",
                     help="file, directory, glob, archive or http(s) URL to load as `context` (repeatable; PDFs, "
                          "Office files, e-books, tables: pip install 'rlm-kernel[documents]')")
    run.add_argument("--encoding", default="utf-8", help="text encoding of the context files (default utf-8)")
    run.add_argument("--query", help="the question about the context")
    run.add_argument("--query-file", help="read the question from this file")
    options.add_arguments(run)
    run.add_argument("-o", "--output", help="trajectory notebook to write (default: rlm-run-<time>.ipynb)")
    run.add_argument("--json", action="store_true", help="print one JSON object with the result")
    run.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    run.add_argument("--verbose", action="store_true",
                     help="write each root reply on stderr as the model writes it (default: a progress line)")
    run.add_argument("--approve", action="store_true",
                     help="ask on the terminal before each generated code cell runs (run, edit, skip, stop)")
    traces = run.add_argument_group("tracing (OpenTelemetry; also on whenever $OTEL_EXPORTER_OTLP_ENDPOINT is set)")
    traces.add_argument("--trace", nargs="?", const="", default=None, metavar="URL",
                        help="export the run as OpenTelemetry spans to the OTLP receiver at URL (default: "
                             "$OTEL_EXPORTER_OTLP_ENDPOINT, else http://127.0.0.1:4318): Phoenix, Langfuse, MLflow, Jaeger")
    traces.add_argument("--trace-content", action="store_true",
                        help="put prompts, replies, code and outputs into the spans too (default: models, tokens, "
                             "costs and statuses only)")
    resume = run.add_argument_group("resuming a saved run")
    resume.add_argument("--resume", metavar="NB",
                        help="continue the run saved in this notebook; with --query, ask a follow-up question on it")
    resume.add_argument("--from-cell", type=int, metavar="N",
                        help="continue after cell N (its index in the notebook; default: the run's last step)")
    resume.add_argument("--no-replay", action="store_true",
                        help="re-run the notebook's cells with fresh sub-calls instead of the recorded ones")
    resume.add_argument("--drop-old", action="store_true",
                        help="leave out the old continuation after cell N (default: keep it, marked superseded)")
    lab = commands.add_parser("lab", help="start JupyterLab with the RLM kernel on the examples",
                              description="Start JupyterLab with the RLM kernel on a folder (default: the examples).")
    lab.add_argument("folder", nargs="?", help="folder to open (default: examples/ of this checkout, else .)")
    lab.add_argument("--port", type=int, default=8888)
    lab.add_argument("--no-browser", action="store_true")
    lab.add_argument("--offline", action="store_true",
                     help="use the bundled tiny offline model even when RLM_MODEL or a provider key is set")
    lab.add_argument("--build-offline-model", action="store_true",
                     help="with no model configured and the offline model not installed: start JupyterLab at once "
                          "and build the offline model behind it (./dev lab does)")
    export = commands.add_parser("export", help="export a trajectory notebook (rlms-jsonl, sft, markdown)",
                                 description="Export the runs of a trajectory notebook.")
    export.add_argument("notebook", help="the .ipynb file")
    export.add_argument("--format", default="markdown", help="rlms-jsonl, sft or markdown (default markdown)")
    export.add_argument("-o", "--output", help="file to write (default: standard output)")
    export.add_argument("--run", help="export only the run with this id")
    export.add_argument("--include-subcalls", action="store_true", help="sft: one more example per sub-call")
    export.add_argument("--only-final", action="store_true", help="only runs that ended with a final answer")
    export.add_argument("--only-approved", action="store_true", help="only runs whose every step a person approved")
    from .batch.command import add_batch_parser
    from .bridges.import_command import add_import_parser
    from .bridges.mcp_server import add_mcp_parser
    from .serve.proxy import add_serve_parser

    add_serve_parser(commands)
    add_batch_parser(commands)
    add_mcp_parser(commands)
    add_import_parser(commands)
    try:
        from .bench.cli import add_bench_parser
    except ImportError:
        pass
    else:
        add_bench_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    defer_iri_grammar()
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(argv)
        if args.command == "run":
            _tracing(args)
            with counting_ctrl_c() as args.ctrl_c:
                return _run(args)
        if args.command == "lab":
            return _lab(args)
        if args.command == "export":
            from .export import run_export

            return run_export(args)
        if args.command == "serve":
            from .serve.proxy import run_serve

            return run_serve(args)
        if args.command == "batch":
            from .batch.command import run_batch

            return run_batch(args)
        if args.command == "mcp":
            from .bridges.mcp_server import run_mcp

            return run_mcp(args)
        if args.command == "import":
            from .bridges.import_command import run_import

            return run_import(args)
        if args.command == "bench":
            from .bench.cli import run_bench

            return run_bench(args)
        _parser().print_help()
        return EXIT_USAGE
    except RLMError as error:
        print(f"rlm-kernel: error: {redact(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rlm-kernel: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


class CtrlC:
    """Counts the SIGINTs that reach the process from outside (the engine
    sends some itself to stop a timed-out cell), so that a run that ended as
    interrupted exits 130 only when someone pressed Ctrl-C (not when they
    chose "stop" at an approval prompt)."""

    def __init__(self) -> None:
        from .engine.execution.threads import sigints_sent

        self.received, self.sent = 0, sigints_sent()

    def pressed(self) -> bool:
        from .engine.execution.threads import sigints_sent

        return self.received > sigints_sent() - self.sent


@contextlib.contextmanager
def counting_ctrl_c() -> Iterator[CtrlC]:
    counter = CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield counter
        return

    def handle(signum: int, frame: Any) -> None:
        counter.received += 1
        raise KeyboardInterrupt

    saved = signal.signal(signal.SIGINT, handle)
    try:
        yield counter
    finally:
        signal.signal(signal.SIGINT, saved)


def _tracing(args: Any) -> None:
    """``--trace [URL]`` / ``--trace-content``: the environment every OTLP
    exporter reads (this process's: the run's trace sink is made from it)."""
    if args.trace is None and not args.trace_content:
        return
    from .sinks import otlp

    otlp.check_installed()
    if args.trace:
        os.environ[otlp.ENDPOINT_ENV] = args.trace
    elif not otlp.tracing_on():
        os.environ[otlp.ENDPOINT_ENV] = otlp.DEFAULT_ENDPOINT
    if args.trace_content:
        os.environ[otlp.CONTENT_ENV] = "true"


def _import_litellm_meanwhile() -> None:
    """litellm takes seconds to import: begin now, on a thread, so that it goes
    on while the context loads and the run is set up (once the arguments
    are known good: a usage error imports nothing)."""
    from .engine.model.litellm_setup import load_in_background

    load_in_background()


def _run(args: Any) -> int:
    if args.resume:
        return _resume(args)

    query = _query(args)
    if not args.context:
        raise RLMError("Give the input with --context PATH (a file, a directory or a glob; repeatable).")
    _import_litellm_meanwhile()
    # Imported once the arguments are known good: the engine's imports take a second or two.
    from .api import RLM, read_there
    from .sinks.console import ConsoleSink

    rlm = RLM(**options.given(args))
    loaded = _load(args) if rlm.options.executor != "gateway" else read_there(args.context, args.encoding)
    output = args.output or f"rlm-run-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
    sink = None if args.quiet else ConsoleSink(sys.stderr, verbose=args.verbose)
    result = rlm.completion(loaded.value, query, output=output, sources=loaded.sources, sink=sink,
                            approver=_approver(args))
    return _report(args, result)


def _load(args: Any) -> Any:
    """The context from ``--context``: a progress line on stderr while it
    loads (unless --quiet), then what was loaded and skipped."""
    from .context.describe import structured
    from .context.files import load_context
    from .context.progress import ProgressBar

    with ProgressBar(delay=0.5 if not args.quiet else 10**9) as bar:
        loaded = load_context(args.context, encoding=args.encoding, progress=bar)
    if not args.quiet and (loaded.skipped or structured(loaded.value)):
        print(f"rlm-kernel: {loaded.summary}", file=sys.stderr)
    return loaded


def _query(args: Any) -> str:
    query = args.query
    if args.query_file:
        try:
            with open(args.query_file, encoding="utf-8") as handle:
                query = handle.read()
        except OSError as error:
            raise RLMError(f"Cannot read the query file {args.query_file!r}: {error.strerror}.") from None
    if not query or not query.strip():
        raise RLMError("Give the question with --query TEXT (or --query-file PATH).")
    return query


def _approver(args: Any) -> Any:
    if not args.approve:
        return None
    from .engine.steps.approval import PromptApprover, terminal_approver

    if sys.stdin.isatty():
        return terminal_approver()
    return PromptApprover(ask=_ask_stdin, show=lambda text: print(text, file=sys.stderr))


def _ask_stdin(question: str) -> str:
    print(question, file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _resume(args: Any) -> int:
    from pathlib import Path

    from .api import RLM
    from .resume import plan
    from .sinks.console import ConsoleSink

    if args.query is not None or args.query_file:
        return _follow_up(args)
    _import_litellm_meanwhile()
    saved = plan(args.resume, args.from_cell, args.context or None, args.encoding, args.drop_old, load_here=False)
    rlm = RLM(**{**saved.options, **options.given(args)})
    stem = Path(args.resume)
    output = args.output or str(stem.with_name(f"{stem.stem}-resumed-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"))
    sink = None if args.quiet else ConsoleSink(sys.stderr, verbose=args.verbose)
    result = rlm.resume(args.resume, from_cell=saved.upto, output=output, context=args.context or None,
                        encoding=args.encoding, replay=not args.no_replay, drop_old=args.drop_old, sink=sink,
                        approver=_approver(args))
    return _report(args, result)


def _follow_up(args: Any) -> int:
    """``--resume NB --query TEXT``: a follow-up question on a saved notebook."""
    from pathlib import Path

    from .api import RLM
    from .resume import plan_follow_up
    from .sinks.console import ConsoleSink

    query = _query(args)
    if args.from_cell is not None or args.drop_old or args.no_replay:
        raise RLMError("A follow-up (--query) re-runs the whole notebook with its sub-calls replayed; "
                       "leave out --from-cell, --drop-old and --no-replay.")
    _import_litellm_meanwhile()
    planned = plan_follow_up(args.resume, args.context or None, args.encoding)
    rlm = RLM(**{**planned.options, **options.given(args)})
    stem = Path(args.resume)
    output = args.output or str(stem.with_name(f"{stem.stem}-follow-up-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"))
    loaded = _load(args) if args.context else planned.context
    sink = None if args.quiet else ConsoleSink(sys.stderr, verbose=args.verbose)
    result = rlm.completion(loaded.value if loaded else None, query, output=output, sink=sink,
                            sources=loaded.sources if loaded else None, approver=_approver(args),
                            follow_up=args.resume)
    return _report(args, result)


def _report(args: Any, result: Any) -> int:
    if not args.quiet:
        off = " (--no-replay)" if args.no_replay else ""
        print(f"rlm-kernel: {plural(result.replayed_subcalls, 'sub-call')} replayed from the notebook, "
              f"{result.subcalls:,} new{off}.", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    elif result.reason == "final":
        print(result.answer_text)
    else:
        print(f"rlm-kernel: the run ended without an answer (reason: {result.reason})"
              + (f": {result.error}" if result.error else ""), file=sys.stderr)
    if result.reason == "final":
        return EXIT_OK
    ctrl_c = getattr(args, "ctrl_c", None)
    if result.reason == "interrupted" and ctrl_c is not None and ctrl_c.pressed():
        return EXIT_INTERRUPTED
    return EXIT_NO_ANSWER


def _lab(args: Any) -> int:
    from pathlib import Path

    folder = Path(args.folder) if args.folder else Path(__file__).resolve().parent.parent / "examples"
    if not folder.is_dir():
        if args.folder:
            raise RLMError(f"No such folder: {args.folder!r}.")
        folder = Path.cwd()
    command = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={folder}", f"--port={args.port}",
               "--MappingKernelManager.default_kernel_name=rlm"]
    if args.no_browser:
        command.append("--no-browser")
    if os.geteuid() == 0:
        command.append("--allow-root")
    env, offline_model, notes = lab_settings(dict(os.environ), offline=args.offline)
    if offline_model:
        from . import offline

        if not offline.available() and args.build_offline_model:
            from .offline_build import lab_while_building

            print(f"rlm-kernel: starting JupyterLab on {folder}", file=sys.stderr)
            return lab_while_building(command)
        if args.offline or offline.available():
            print("rlm-kernel: starting the bundled offline model (llama.cpp, SmolLM2-135M)...", file=sys.stderr)
            with offline.OfflineModel() as model:
                print(offline.banner(model, chosen=args.offline), file=sys.stderr)
                print(f"rlm-kernel: starting JupyterLab on {folder}", file=sys.stderr)
                return offline.run_with_model(command, model)
        print("rlm-kernel: no model configured and the bundled offline model is not installed "
              f"({offline.INSTALL_HINT}); set RLM_MODEL (a litellm name) and its provider key, "
              "or pass --model/--api-base in each %%rlm cell.", file=sys.stderr)
    for note in notes:
        print(f"rlm-kernel: {note}", file=sys.stderr)
    print(f"rlm-kernel: starting JupyterLab on {folder}", file=sys.stderr)
    os.execve(sys.executable, command, env)
    return 0


# `rlm-kernel lab` with a provider key but no RLM_MODEL: a cheap, current model
# of that provider (names from litellm's own price list, so costs are known),
# in this order when several keys are set.
LAB_DEFAULT_MODELS: tuple[tuple[str, str], ...] = (
    ("OPENAI_API_KEY", "openai/gpt-4o-mini"),
    ("ANTHROPIC_API_KEY", "anthropic/claude-haiku-4-5"),
    ("GEMINI_API_KEY", "gemini/gemini-2.5-flash"),
    ("GOOGLE_API_KEY", "gemini/gemini-2.5-flash"),  # litellm takes it for Gemini too
    ("GROQ_API_KEY", "groq/openai/gpt-oss-120b"),
    ("MISTRAL_API_KEY", "mistral/mistral-small-latest"),
)


def lab_settings(environ: dict[str, str], offline: bool = False) -> tuple[dict[str, str], bool, list[str]]:
    """What ``rlm-kernel lab`` does about the model: (the environment of
    JupyterLab, which its kernels inherit; whether to start the bundled
    offline model, which adds its own settings; notes for the terminal).
    RLM_MODEL as set; else, with a provider key, that provider's default
    model (said on the terminal and above each run); with no key, the
    bundled offline model."""
    env = dict(environ)
    if env.get("RLM_MODEL") and not offline:
        return env, False, []
    keys = sorted(name for name, value in env.items() if value and name.endswith("_API_KEY"))
    if offline or not keys:
        return env, True, []
    change = "set RLM_MODEL (a litellm model name) before starting, or pass --model on a %%rlm line"
    if env.get("RLM_API_BASE"):
        return env, False, [f"RLM_API_BASE is set but RLM_MODEL is not: {change} (the model your server serves, "
                            "e.g. openai/NAME)."]
    for key, model in LAB_DEFAULT_MODELS:
        if env.get(key):
            env["RLM_MODEL"] = model
            env["RLM_MODEL_NOTE"] = (f"Model: {model}, chosen by rlm-kernel lab because {key} is set and RLM_MODEL "
                                     f"is not; to use another model, {change}.")
            return env, False, [f"%%rlm cells use {model}, chosen because {key} is set and RLM_MODEL is not. "
                                f"To use another model, {change}."]
    return env, False, [f"no RLM_MODEL set and no default model for {', '.join(keys)}: {change} "
                        "(e.g. xai/grok-4.20)."]


if __name__ == "__main__":
    sys.exit(main())
